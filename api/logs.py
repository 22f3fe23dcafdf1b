"""The request id and the one JSON log line per request (``prefeed.requests``; format in ``precompute/logs.py``).

A client (or a proxy in front) may name its request with ``X-Request-ID``; it is kept when it is printable ASCII of
at most 128 characters, and otherwise replaced by a fresh one (uuid4, hex), so nothing a client sends can break a
log line or a header. The id is returned in the ``X-Request-ID`` response header and logged with the request.
"""

from __future__ import annotations

import logging
import re
import uuid

HEADER = "X-Request-ID"
MAX_LENGTH = 128
_PRINTABLE = re.compile(r"[\x20-\x7e]{1,%d}" % MAX_LENGTH)

log = logging.getLogger("prefeed.requests")


def request_id(given: str | None) -> str:
    """``given`` if it is a usable request id, else a new one."""
    if given and _PRINTABLE.fullmatch(given):
        return given
    return uuid.uuid4().hex


def request_line(rid: str, method: str, route: str, status: int, seconds: float) -> None:
    """One line per request: what was asked (the route, never the raw path), how it ended, how long it took."""
    if log.isEnabledFor(logging.INFO):
        # ``log.info`` would first walk the stack for the caller's file and line, which the line does not show:
        # half of its cost, on every request.
        fields = {"request_id": rid, "method": method, "route": route, "status": status,
                  "duration_ms": round(seconds * 1000, 3)}
        log.handle(log.makeRecord(log.name, logging.INFO, __name__, 0, "request", (), None,
                                  extra={"fields": fields}))
