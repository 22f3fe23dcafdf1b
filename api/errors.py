"""Every error leaves the API as JSON ``{"error": "..."}`` with a 4xx/5xx status; never an HTML page or a
traceback. The mapping from the exception tree in ``precompute.errors`` lives here and only here."""

from __future__ import annotations

import logging

import orjson
import redis
from flask import Flask, Response
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.exceptions import HTTPException

from precompute.errors import PrefeedError, Unavailable

log = logging.getLogger(__name__)


def json_response(body: dict, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status=status, mimetype="application/json")


def error(status: int, message: str) -> Response:
    return json_response({"error": message}, status)


def register(app: Flask) -> None:
    @app.errorhandler(PrefeedError)
    def _prefeed(exc: PrefeedError):
        body = {"error": str(exc)}
        if isinstance(exc, Unavailable):
            body["dependency"] = exc.which
        return json_response(body, exc.http_status)

    @app.errorhandler(redis.RedisError)
    def _redis(exc):
        log.warning("redis error: %s", exc)
        return json_response({"error": "redis is unavailable", "dependency": "redis"}, 503)

    @app.errorhandler(SQLAlchemyError)
    def _database(exc):
        log.warning("database error: %s", type(exc).__name__)
        return json_response({"error": "database is unavailable", "dependency": "database"}, 503)

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException):
        return error(exc.code or 500, exc.description or exc.name)

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        log.exception("unhandled error")
        return error(500, "internal error")
