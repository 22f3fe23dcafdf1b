"""Every error leaves the API as JSON ``{"error": "..."}`` with a 4xx/5xx status; never an HTML page or a
traceback. Statuses come from the exception tree in ``precompute.errors`` (each class declares its own); driver
errors of Redis and the database are translated there too (``as_prefeed_error``)."""

from __future__ import annotations

import logging
import math

import orjson
import redis
from flask import Flask, Response
from werkzeug.exceptions import HTTPException

from precompute.errors import (PrefeedError, TooManyRequests, Unauthorized, Unavailable, as_prefeed_error,
                               database_errors)

log = logging.getLogger(__name__)


def json_response(body: dict, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status=status, mimetype="application/json")


def error(status: int, message: str) -> Response:
    return json_response({"error": message}, status)


def prefeed_response(exc: PrefeedError) -> Response:
    """The JSON answer to one of prefeed's errors, with the status its class declares."""
    body = {"error": str(exc)}
    if isinstance(exc, Unavailable):
        # The driver's message stays in the log: it may name hosts, ports or users a client has no business seeing,
        # or be one a client provoked (a fake outage) rather than an outage.
        if str(exc) != f"{exc.which} is unavailable":
            log.warning("dependency error: %s", exc)
        body = {"error": f"{exc.which} is unavailable", "dependency": exc.which}
    response = json_response(body, exc.http_status)
    if isinstance(exc, Unauthorized) and exc.challenge:
        response.headers["WWW-Authenticate"] = exc.challenge
    if isinstance(exc, TooManyRequests):
        response.headers["Retry-After"] = retry_after(exc.retry_after)
    return response


def retry_after(seconds: float) -> str:
    """``Retry-After`` in whole seconds, at least 1 (a request that can never fit: a minute)."""
    return str(max(1, math.ceil(seconds))) if math.isfinite(seconds) else "60"


def register(app: Flask) -> None:
    _prefeed = app.errorhandler(PrefeedError)(prefeed_response)

    def _dependency(exc):
        # The driver's message stays in the log: it may name hosts or users a client has no business seeing.
        log.warning("dependency error: %s: %s", type(exc).__name__, exc)
        return _prefeed(as_prefeed_error(exc, detail=False))

    for kind in (redis.RedisError, *database_errors()):
        app.register_error_handler(kind, _dependency)

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException):
        return error(exc.code or 500, exc.description or exc.name)

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        log.exception("unhandled error")
        return error(500, "internal error")
