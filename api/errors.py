"""Every error leaves the API as JSON ``{"error": "..."}`` with a 4xx/5xx status; never an HTML page or a
traceback. Statuses come from the exception tree in ``precompute.errors`` (each class declares its own); driver
errors of Redis and the database are translated there too (``as_prefeed_error``).

A request answered before its body was read to the end (a 413 for a body over ``PREFEED_REQUEST_BODY_MAX``, a
401/403 decided from the headers, any refusal that never looks at the body) is answered ``Connection: close``: the
unread rest would otherwise be taken for the client's next request on that kept-alive connection, or the server
would drop the connection under it. Nothing is read to find out, so a refusal costs no read of a body it refuses."""

from __future__ import annotations

import logging
import math

import orjson
import redis
from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.wsgi import LimitedStream

from precompute.errors import (PrefeedError, TooManyRequests, Unauthorized, Unavailable, as_prefeed_error,
                               database_errors)

from .turns import READ

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


def body_left_unread() -> bool:
    """Whether the request carries a body the app did not read to its end. A body of unknown length (chunked) or
    one over the limit counts as unread: finding its end would mean reading it. One read whole before the app ran
    (``turns.py``) is off the connection, whatever the app did with it."""
    if request.environ.get(READ):
        return False
    chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
    if not request.content_length and not chunked:
        return False
    try:
        stream = request.stream
    except RequestEntityTooLarge:
        return True
    return chunked or not (isinstance(stream, LimitedStream) and stream.is_exhausted)


class CloseWhenAsked:
    """WSGI middleware: an answer that says ``Connection: close`` closes the connection under gunicorn too. gunicorn
    drops an application's hop-by-hop headers and decides keep-alive itself; the ``start_response`` it hands the
    application is a method of its response, whose ``force_close()`` makes it say ``Connection: close`` and close.
    Under another server the header goes through as it is."""

    def __init__(self, wsgi_app):
        self.wsgi_app = wsgi_app

    def __call__(self, environ, start_response):
        def start(status, headers, exc_info=None):
            if any(name.lower() == "connection" and value.lower() == "close" for name, value in headers):
                force_close = getattr(getattr(start_response, "__self__", None), "force_close", None)
                if callable(force_close):
                    force_close()
            return start_response(status, headers, exc_info)

        return self.wsgi_app(environ, start)


def register(app: Flask) -> None:
    app.wsgi_app = CloseWhenAsked(app.wsgi_app)

    @app.after_request
    def _close_over_an_unread_body(response: Response) -> Response:
        if body_left_unread():
            response.headers["Connection"] = "close"
        return response

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
