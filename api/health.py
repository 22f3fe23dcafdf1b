"""GET /healthz: is each dependency reachable (200, or 503 naming what is not); GET /livez: is the process up."""

from __future__ import annotations

from flask import Blueprint

from precompute.data.engine import ping
from precompute.errors import Unavailable
from precompute.feeds.client import ping_redis

from .errors import json_response
from .services import services

bp = Blueprint("health", __name__)


@bp.get("/livez")
def livez():
    """Liveness: the process answers. No dependency is checked (that is ``/healthz``); also the serve benchmark's
    framework floor."""
    return json_response({"status": "ok"})


@bp.get("/healthz")
def healthz():
    svc = services()
    status = {}
    for name, check in (("redis", lambda: [ping_redis(r) for r in (svc.feed_redis, svc.queue_redis)]),
                        ("database", lambda: ping(svc.engine))):
        try:
            check()
            status[name] = "ok"
        except Unavailable:
            status[name] = "unavailable"
    ok = all(v == "ok" for v in status.values())
    return json_response({"status": "ok" if ok else "degraded", **status}, 200 if ok else 503)
