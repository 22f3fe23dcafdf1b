"""One exception base with a small tree; each class declares its HTTP status and CLI exit code here, and only here.

    PrefeedError                                                        HTTP   exit
    ├── ConfigError            bad settings                             400     2
    ├── InvalidInput           a request or argument that cannot be used 400     2
    │   ├── NotFound           a referenced user or item does not exist 404     2
    │   └── UnsupportedMediaType  a request body that is not JSON       415     2
    ├── Unauthorized           no API key, or an unknown or revoked one 401     2
    ├── Forbidden              a key without the route's scope          403     2
    ├── TooManyRequests        over a key's rate or a user's event limit 429    2
    ├── BundleError            model bundle missing, truncated or incompatible 503  3
    ├── NotPromoted            a trained bundle that does not beat the best baseline 409  5
    ├── Unavailable            Redis or the database cannot be reached  503     4
    └── ChildLost              a training child exited without a result 500     1

``api.errors`` answers ``{"error": str(exc)}`` with ``exc.http_status``; ``cli`` prints ``error: str(exc)`` and exits
with ``exc.exit_code``. Driver errors of the two dependencies (redis, SQLAlchemy) become ``Unavailable`` through
``as_prefeed_error``, the one place that translates them.
"""

from __future__ import annotations


class PrefeedError(Exception):
    """Base of every error prefeed raises on purpose."""

    http_status = 500
    exit_code = 1


class ConfigError(PrefeedError):
    http_status = 400
    exit_code = 2


class InvalidInput(PrefeedError):
    http_status = 400
    exit_code = 2


class NotFound(InvalidInput):
    http_status = 404


class UnsupportedMediaType(InvalidInput):
    http_status = 415

    def __init__(self, message: str = "request body must be JSON (Content-Type: application/json)") -> None:
        super().__init__(message)


class Unauthorized(PrefeedError):
    """``challenge``: the ``WWW-Authenticate`` value to answer with (the dashboard asks a browser for a password)."""

    http_status = 401
    exit_code = 2

    def __init__(self, message: str, challenge: str | None = None) -> None:
        self.challenge = challenge
        super().__init__(message)


class Forbidden(PrefeedError):
    """Credentials were given and are wrong (the dashboard: a browser then shows the refusal, not a new prompt)."""

    http_status = 403
    exit_code = 2


class TooManyRequests(PrefeedError):
    """Over a rate limit; ``retry_after``: seconds until a request would be accepted (the ``Retry-After`` header)."""

    http_status = 429
    exit_code = 2

    def __init__(self, message: str, retry_after: float) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class BundleError(PrefeedError):
    http_status = 503
    exit_code = 3


class NotPromoted(PrefeedError):
    """``train`` wrote a bundle but did not make it current: its validation NDCG@10 does not beat the best
    baseline's. A distinct exit code so a scheduled retrain (cron) reports it without mistaking it for an outage."""

    http_status = 409
    exit_code = 5


class Unavailable(PrefeedError):
    """A dependency (``which``: "redis" or "database") cannot be reached."""

    http_status = 503
    exit_code = 4

    def __init__(self, which: str, detail: str = "") -> None:
        self.which = which
        super().__init__(f"{which} is unavailable" + (f": {detail}" if detail else ""))


class ChildLost(PrefeedError):
    """The child computing ahead (``learning/ahead.py``) exited without a result: killed, most likely by the
    kernel's out-of-memory killer. Not the caller's fault, and nothing to retry as it was: a 500 / exit 1."""

    http_status = 500
    exit_code = 1


def first_line(exc: BaseException) -> str:
    """First line of a driver error (at most 200 characters), without the SQL or parameters it may carry."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip()
    return text.splitlines()[0][:200] if text else type(orig).__name__


def as_prefeed_error(exc: BaseException, detail: bool = True) -> PrefeedError | None:
    """``exc`` itself if it is a ``PrefeedError``; ``Unavailable`` for a Redis or database driver error (with the
    driver's first line unless ``detail`` is False, as the API answers strangers); else None (an unexpected error,
    which callers let surface as a bug)."""
    if isinstance(exc, PrefeedError):
        return exc
    import redis

    if isinstance(exc, redis.RedisError):
        return Unavailable("redis", first_line(exc) if detail else "")
    if isinstance(exc, database_errors()):
        return Unavailable("database", first_line(exc) if detail else "")
    return None


def database_errors() -> tuple[type[BaseException], ...]:
    """The exception classes a database call may raise: SQLAlchemy's, and the drivers' own (DB-API ``Error``) from
    paths that use a raw driver cursor for speed (bulk imports, ``items.ensure``)."""
    import sqlite3

    from sqlalchemy.exc import SQLAlchemyError

    kinds: list[type[BaseException]] = [SQLAlchemyError, sqlite3.Error]
    try:
        import psycopg
    except ImportError:                       # only needed with a PostgreSQL URL
        return tuple(kinds)
    return (*kinds, psycopg.Error)
