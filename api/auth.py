"""API keys on every route but ``/livez`` and ``/healthz``: ``Authorization: Bearer <key>``, the route's scope
(``precompute/data/api_keys.py``), then the key's rate (``precompute/feeds/limits.py``). The dashboard also takes
the key as the password of HTTP basic auth (any user name), so a browser can get in.

Keys are read from the database at most once a second per process and key (``Keyring``), so a revoked key stops
working within a second on every API process without a database read per request. While the database cannot be
reached, a key this process knows keeps working as it last read it (feeds are served from Redis alone); an unknown
key is then a 503. ``PREFEED_ADMIN_TOKEN``, when set, is one more key with the ``admin`` scope. ``PREFEED_AUTH=off``
lets the data routes through without a key.

401: no key, or one that is unknown or revoked; 403: a key without the scope; 429: over the key's rate, with
``Retry-After``. No answer, log line or metric names a key or its hash: a key is known by its name.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import logging
import threading
import time

from flask import g, request

from precompute.data import api_keys
from precompute.data.api_keys import Key
from precompute.errors import Forbidden, TooManyRequests, Unauthorized, database_errors
from precompute.feeds.limits import Bucket

from .services import Services, services

log = logging.getLogger(__name__)
#: What a browser is asked for when the dashboard gets no credentials.
CHALLENGE = 'Basic realm="prefeed dashboard", charset="UTF-8"'
#: The scopes ``PREFEED_AUTH=off`` opens.
DATA_SCOPES = ("feed:read", "events:write", "items:write")
#: Who a request is when ``PREFEED_AUTH=off`` lets it through without a key: no rate of its own.
OPEN = Key("(auth off)", frozenset(DATA_SCOPES))
ADMIN_TOKEN = "PREFEED_ADMIN_TOKEN"


class Keyring:
    """The keys as this process last read them, each at most ``ttl`` seconds old; unknown keys are remembered too
    (up to ``max_entries``), so a client repeating a bad key costs one read a second."""

    def __init__(self, engine, settings, ttl: float = 1.0, max_entries: int = 10_000) -> None:
        self.engine, self.settings, self.ttl, self.max_entries = engine, settings, ttl, max_entries
        self._known: dict[str, tuple[Key | None, float]] = {}
        self._used: dict[str, float] = {}
        self._lock = threading.Lock()

    def find(self, presented: str) -> Key | None:
        token = self.settings.admin_token
        if token and hmac.compare_digest(presented.encode("utf-8", "surrogatepass"), token.encode()):
            return Key(ADMIN_TOKEN, frozenset({"admin"}))
        h = api_keys.digest(presented)
        now = time.monotonic()
        with self._lock:
            hit = self._known.get(h)
        if hit is not None and now - hit[1] < self.ttl:
            return hit[0]
        try:
            key, last_used = api_keys.find(self.engine, presented)
        except database_errors():
            if hit is None:
                raise
            log.warning("database unavailable: key %r is used as last read", hit[0].name if hit[0] else "(unknown)")
            return hit[0]
        with self._lock:
            if len(self._known) >= self.max_entries:
                self._known.clear()
            self._known[h] = (key, now)
        if key is not None:
            self._note_use(key.name, last_used)
        return key

    def _note_use(self, name: str, last_used: float | None) -> None:
        """Keep ``last_used_at`` to the minute: one write a minute per key and process at most."""
        wall = time.time()
        with self._lock:
            recorded = max(self._used.get(name, 0.0), last_used or 0.0)
            if wall - recorded < 60:
                return
            self._used[name] = wall
        try:
            api_keys.touch(self.engine, name, wall)
        except database_errors() as exc:         # a statistic: never worth failing the request
            log.warning("could not record the use of key %r: %s", name, type(exc).__name__)


def require(scope: str | None):
    """The view needs a key with ``scope`` (an ``admin`` key has every scope; None: any key), within its rate."""

    def decorate(view):
        @functools.wraps(view)
        def wrapper(*args, **kwargs):
            authorize(scope)
            return view(*args, **kwargs)

        return wrapper

    return decorate


def authorize(scope: str | None, presented: str | None = None) -> Key:
    """The request's key (``g.key``) if it may use ``scope``; raises 401/403/429 otherwise."""
    svc = services()
    settings = svc.settings
    if presented is None:
        scheme, _, presented = request.headers.get("Authorization", "").strip().partition(" ")
        if scheme.lower() != "bearer":
            presented = ""
    presented = presented.strip()
    if not presented:
        if not settings.auth and (scope is None or scope in DATA_SCOPES):
            g.key = OPEN
            return OPEN
        need = "an API key" if scope is None else f"an API key with the scope {scope}"
        raise Unauthorized(f"this route needs {need}: Authorization: Bearer <key>")
    key = svc.keyring.find(presented)
    if key is None:
        raise Unauthorized("unknown or revoked API key")
    if scope is not None and not key.allows(scope):
        raise Forbidden(f"this key lacks the scope {scope}")
    g.key = key
    wait = svc.limiter.take_one(key_bucket(svc, key))
    if wait > 0:
        raise TooManyRequests(f"over this key's rate of {_rate(key, settings):g} requests/s", retry_after=wait)
    return key


def key_bucket(svc: Services, key: Key) -> Bucket:
    settings = svc.settings
    return Bucket(svc.keys.rate_key(key.name), _rate(key, settings), key.burst or settings.rate_burst)


def check_dashboard() -> None:
    """Let the request through if it carries an admin key, as ``Authorization: Bearer <key>`` or as the password of
    HTTP basic auth (any user name). No credentials: 401 with a basic-auth challenge (a browser prompts); a wrong
    or unknown key: 403."""
    scheme, _, given = request.headers.get("Authorization", "").strip().partition(" ")
    scheme = scheme.lower()
    if scheme == "basic":
        try:
            decoded = base64.b64decode(given.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise Forbidden("malformed basic credentials") from None
        given = decoded.partition(":")[2]
    elif scheme != "bearer" or not given.strip():
        raise Unauthorized("the dashboard needs an admin key (basic auth password or bearer token)",
                           challenge=CHALLENGE)
    try:
        authorize("admin", given)
    except Unauthorized:
        raise Forbidden("unknown or revoked key") from None


def dashboard_required(view):
    @functools.wraps(view)
    def wrapper(*args, **kwargs):
        check_dashboard()
        return view(*args, **kwargs)

    return wrapper


def _rate(key: Key, settings) -> float:
    return key.rate or settings.rate_limit
