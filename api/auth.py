"""API keys on every route but ``/livez`` and ``/healthz``: ``Authorization: Bearer <key>``, the route's scope
(``precompute/data/api_keys.py``), then the key's rate (``precompute/feeds/limits.py``). The dashboard also takes
the key as the password of HTTP basic auth (any user name), so a browser can get in.

Keys are read from the database at most once a second per process and key (``Keyring``), so a revoked key stops
working within a second on every API process without a database read per request. A value not of a key's shape is
refused without a read, and an unknown well-formed one costs one read a minute per process. While the database
cannot be reached, a key this process knows keeps working as it last read it (feeds are served from Redis alone);
an unknown key is then a 503. ``PREFEED_ADMIN_TOKEN``, when set, is one more key with the ``admin`` scope.
``PREFEED_AUTH=off`` lets the data routes through without a key.

401: no key, or one that is unknown or revoked; 403: a key without the scope; 429: over the key's rate, with
``Retry-After``. No answer, log line or metric names a key or its hash: a key is known by its name.

Keys that fail are counted against the client's address (``addresses.py``): past ``PREFEED_AUTH_FAILURES_PER_MINUTE``
the address is answered 429 before its key is looked up. A request whose key is good costs nothing more for it.

A request costs its key one token on arrival, before its body is read. ``POST /events`` costs one per event: the
view charges the batch's other events itself, with its other limits (``api/events.py``); for it the first token is
taken from the bucket in Redis rather than from the process's share (``Limiter.take_one``), which would hold back
tokens the same request then needs.
"""

from __future__ import annotations

import base64
import binascii
import functools
import logging

from flask import g, request

from precompute.data.api_keys import Key
from precompute.errors import Forbidden, TooManyRequests, Unauthorized
from precompute.feeds.limits import Bucket

from . import addresses
from .services import Services, services

log = logging.getLogger(__name__)
#: What a browser is asked for when the dashboard gets no credentials.
CHALLENGE = 'Basic realm="prefeed dashboard", charset="UTF-8"'
#: The scopes ``PREFEED_AUTH=off`` opens.
DATA_SCOPES = ("feed:read", "events:write", "items:write")
#: The request environ's ``(credential, its SHA-256)`` when the turns read the key already (``turns.Clients``).
PRESENTED = "prefeed.presented"
#: Who a request is when ``PREFEED_AUTH=off`` lets it through without a key: no rate of its own.
OPEN = Key("(auth off)", frozenset(DATA_SCOPES))

def require(scope: str | None, charged_in_view: bool = False):
    """The view needs a key with ``scope`` (an ``admin`` key has every scope; None: any key), within its rate.
    ``charged_in_view``: the view charges the key more tokens itself (``authorize``)."""

    def decorate(view):
        @functools.wraps(view)
        def wrapper(*args, **kwargs):
            authorize(scope, charged_in_view=charged_in_view)
            return view(*args, **kwargs)

        return wrapper

    return decorate


def authorize(scope: str | None, presented: str | None = None, charged_in_view: bool = False) -> Key:
    """The request's key (``g.key``) if it may use ``scope``; raises 401/403/429 otherwise. ``charged_in_view``: the
    first token is taken exactly (one round trip), so the view's own charge finds the rest of the budget."""
    svc = services()
    settings = svc.settings
    environ = request.environ
    addresses.guard().check(environ)
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
    seen = environ.get(PRESENTED)
    key = svc.keyring.find(presented, seen[1] if seen is not None and seen[0] == presented else None)
    if key is None:
        addresses.guard().failed(environ)
        raise Unauthorized("unknown or revoked API key")
    if scope is not None and not key.allows(scope):
        raise Forbidden(f"this key lacks the scope {scope}")
    g.key = key
    bucket = key_bucket(svc, key)
    wait = svc.limiter.take([bucket]) if charged_in_view else svc.limiter.take_one(bucket)
    if wait > 0:
        raise TooManyRequests(rate_refusal(key, settings), retry_after=wait)
    return key


def key_bucket(svc: Services, key: Key, cost: int = 1) -> Bucket:
    """The key's token bucket: one token per feed page, one per event posted."""
    settings = svc.settings
    return _bucket(svc.keys.rate_key(key.name), _rate(key, settings), key.burst or settings.rate_burst, cost)


@functools.lru_cache(maxsize=4096)
def _bucket(name: str, rate: float, burst: int, cost: int) -> Bucket:
    """One ``Bucket`` per distinct value (immutable), not one per request."""
    return Bucket(name, rate, burst, cost)


def rate_refusal(key: Key, settings) -> str:
    return f"over this key's rate of {_rate(key, settings):g} tokens/s (one per feed page, one per event posted)"


def new_users_bucket(svc: Services, key: Key, cost: int) -> Bucket:
    """The key's budget of user ids new to the database: ``PREFEED_KEY_NEW_USERS_PER_MINUTE`` (or the key's own
    ``--new-users``) a minute, as many at once."""
    per_minute = new_users_per_minute(key, svc.settings)
    return Bucket(svc.keys.rate_new_users(key.name), per_minute / 60.0, per_minute, cost)


def new_users_per_minute(key: Key, settings) -> int:
    return key.new_users or settings.key_new_users_per_minute


def check_dashboard() -> None:
    """Let the request through if it carries an admin key, as ``Authorization: Bearer <key>`` or as the password of
    HTTP basic auth (any user name). No credentials: 401 with a basic-auth challenge (a browser prompts); a wrong
    or unknown key: 403."""
    scheme, _, given = request.headers.get("Authorization", "").strip().partition(" ")
    scheme = scheme.lower()
    if scheme == "basic":
        password = basic_password(given)
        if password is None:
            addresses.guard().failed(request.environ)
            raise Forbidden("malformed basic credentials")
        given = password
    elif scheme != "bearer" or not given.strip():
        raise Unauthorized("the dashboard needs an admin key (basic auth password or bearer token)",
                           challenge=CHALLENGE)
    try:
        authorize("admin", given)
    except Unauthorized:
        raise Forbidden("unknown or revoked key") from None


def basic_password(credentials: str) -> str | None:
    """The password of HTTP basic ``credentials`` (base64 of ``user:password``; any user name), None when they are
    not base64 of UTF-8 text."""
    try:
        return base64.b64decode(credentials.strip(), validate=True).decode("utf-8").partition(":")[2]
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def dashboard_required(view):
    @functools.wraps(view)
    def wrapper(*args, **kwargs):
        check_dashboard()
        return view(*args, **kwargs)

    return wrapper


def _rate(key: Key, settings) -> float:
    return key.rate or settings.rate_limit
