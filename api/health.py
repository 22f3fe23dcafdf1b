"""GET /healthz: is each dependency reachable (200, or 503 naming what is not); GET /livez: is the process up.

A process checks its dependencies for ``/healthz`` at most once per ``PREFEED_HEALTHZ_TTL`` (1 s), one probe at a
time (``Health``): probes meanwhile get that check's answer, those arriving during it wait for it. A flood of
probes then costs one database connection a second, not one each, and a dependency that goes down is reported
within that second (plus the check's own time)."""

from __future__ import annotations

import threading
import time

from flask import Blueprint, Flask, current_app

from precompute.data.engine import ping
from precompute.errors import Unavailable
from precompute.feeds.client import ping_redis

from .errors import json_response
from .services import Services, services

bp = Blueprint("health", __name__)
#: The app's ``extensions`` entry that holds its ``Health``.
EXTENSION = "prefeed.health"


class Health:
    """Each dependency's state as last checked: ``"ok"`` or ``"unavailable"`` by name, checked again once the last
    check ended ``ttl`` seconds ago or more."""

    def __init__(self, svc: Services, ttl: float) -> None:
        self.svc, self.ttl = svc, ttl
        self._lock = threading.Lock()
        self._checked: tuple[float, dict[str, str]] | None = None     # (monotonic time the check ended, states)

    def status(self) -> dict[str, str]:
        with self._lock:
            last = self._checked
            if last is None or time.monotonic() - last[0] >= self.ttl:
                states = self._check()
                last = self._checked = (time.monotonic(), states)
            return last[1]

    def _check(self) -> dict[str, str]:
        svc = self.svc
        states = {}
        for name, check in (("redis", lambda: [ping_redis(r) for r in (svc.feed_redis, svc.queue_redis)]),
                            ("database", lambda: ping(svc.engine))):
            try:
                check()
                states[name] = "ok"
            except Unavailable:
                states[name] = "unavailable"
        return states


def register(app: Flask) -> None:
    """Give ``app`` (its ``Services`` built) the health state its ``/healthz`` answers from."""
    svc = services(app)
    app.extensions[EXTENSION] = Health(svc, svc.settings.healthz_ttl)


@bp.get("/livez")
def livez():
    """Liveness: the process answers. No dependency is checked (that is ``/healthz``); also the serve benchmark's
    framework floor."""
    return json_response({"status": "ok"})


@bp.get("/healthz")
def healthz():
    status = current_app.extensions[EXTENSION].status()
    ok = all(v == "ok" for v in status.values())
    return json_response({"status": "ok" if ok else "degraded", **status}, 200 if ok else 503)
