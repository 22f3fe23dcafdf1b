"""API keys: create (the key is returned once), list, revoke, and find a presented key.

A key is ``pf_`` and 43 URL-safe characters (256 random bits). The database keeps its SHA-256 only: a key has far
too much entropy to be guessed from its hash, so a slow password hash would only cost every request. A presented key
is found by its hash and then compared in constant time, so nothing about a stored key leaks through timing; one
that is not of that shape (``well_formed``) is no key, and is refused without a database read.

``PREFEED_ADMIN_TOKEN``, when set, is one more admin key that lives in the environment only: it acts under the name
``ADMIN_NAME`` (no stored key may take it, nor share its rate bucket) and is at least ``ADMIN_TOKEN_MIN_LENGTH``
characters (``manage.py serve`` refuses a shorter one).

Scopes say what a key may do: ``feed:read`` (``GET /feed``), ``events:write`` (``POST /events``), ``items:write``
(the catalogue routes, and events naming items the catalogue lacks), ``metrics:read`` (``GET /metrics``) and
``admin`` (boosts, the dashboard and RQ panel, ``status.json``; an admin key may do everything).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import math
import re
import secrets
import time

from sqlalchemy import Engine, select, update
from sqlalchemy.exc import IntegrityError

from ..errors import InvalidInput, NotFound
from .tables import ApiKey

SCOPES = ("feed:read", "events:write", "items:write", "metrics:read", "admin")
PREFIX = "pf_"
#: What ``create`` makes: the prefix, then ``secrets.token_urlsafe(32)`` (32 bytes in unpadded URL-safe base64).
_SHAPE = re.compile(re.escape(PREFIX) + r"[A-Za-z0-9_-]{43}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: The name the admin token acts under: a stored key may not take it, in any case.
ADMIN_NAME = "PREFEED_ADMIN_TOKEN"
#: The fewest characters of an admin token (a random one: ``secrets.token_urlsafe(32)`` makes 43).
ADMIN_TOKEN_MIN_LENGTH = 32


@dataclasses.dataclass(frozen=True)
class Key:
    """What a request's key may do; never the key or its hash."""

    name: str
    scopes: frozenset[str]
    rate: float | None = None
    burst: int | None = None
    new_users: int | None = None        # new user ids per minute

    def allows(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes


def well_formed(presented: str) -> bool:
    """Whether ``presented`` could be a key ``create`` made: if not, no stored key can match it."""
    return _SHAPE.fullmatch(presented) is not None


def check_name(name: str) -> None:
    """``InvalidInput`` for a name a new key cannot have (before anything is written)."""
    if not _NAME.fullmatch(name):
        raise InvalidInput("a key name is 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit")
    if name.upper() == ADMIN_NAME:
        raise InvalidInput(f"{name!r} is the name the admin token acts under: choose another name")


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def parse_scopes(text: str) -> frozenset[str]:
    """``feed:read,events:write`` as a set; ``InvalidInput`` naming an unknown scope or an empty list."""
    scopes = frozenset(s.strip() for s in text.split(",") if s.strip())
    unknown = sorted(scopes - set(SCOPES))
    if unknown:
        raise InvalidInput(f"unknown scope {', '.join(unknown)}: scopes are {', '.join(SCOPES)}")
    if not scopes:
        raise InvalidInput(f"a key needs at least one scope of {', '.join(SCOPES)}")
    return scopes


def create(engine: Engine, name: str, scopes: frozenset[str], *, rate: float | None = None,
           burst: int | None = None, new_users: int | None = None) -> str:
    """Store a new key named ``name`` and return it (the only time it exists outside the client). ``InvalidInput``
    for a malformed, reserved (``ADMIN_NAME``) or taken name (a revoked key's name stays taken: its history keeps
    its meaning). ``rate``/``burst``: the key's token bucket; ``new_users``: user ids new to the database its events
    may bring in per minute; None: the settings' defaults."""
    check_name(name)
    if rate is not None and not (math.isfinite(rate) and rate > 0) or burst is not None and burst < 1:
        raise InvalidInput("--rate must be a finite number above 0 and --burst an integer of at least 1")
    if new_users is not None and new_users < 1:
        raise InvalidInput("--new-users must be an integer of at least 1")
    key = PREFIX + secrets.token_urlsafe(32)
    try:
        with engine.begin() as conn:
            conn.execute(ApiKey.__table__.insert().values(
                name=name, key_hash=digest(key), scopes=",".join(sorted(scopes)), created_at=time.time(),
                rate=rate, burst=burst, new_users=new_users))
    except IntegrityError:
        raise InvalidInput(f"a key named {name!r} exists already (revoked names stay taken)") from None
    return key


def listing(engine: Engine) -> list[dict]:
    """Every key's name, scopes, limits and times (created, last used, revoked), oldest first; never a key or hash."""
    with engine.connect() as conn:
        rows = conn.execute(select(ApiKey.name, ApiKey.scopes, ApiKey.created_at, ApiKey.last_used_at,
                                   ApiKey.revoked_at, ApiKey.rate, ApiKey.burst, ApiKey.new_users)
                            .order_by(ApiKey.created_at, ApiKey.name)).all()
    return [dict(r._mapping) for r in rows]


def revoke(engine: Engine, name: str) -> None:
    """Revoke the key named ``name`` (``NotFound`` if there is none, or it is revoked already)."""
    with engine.begin() as conn:
        done = conn.execute(update(ApiKey).where(ApiKey.name == name, ApiKey.revoked_at.is_(None))
                            .values(revoked_at=time.time())).rowcount
    if not done:
        raise NotFound(f"no active key named {name!r}")


def find(engine: Engine, key: str) -> tuple[Key | None, float | None]:
    """The active key ``key`` is, with when it was last used; ``(None, None)`` for an unknown or revoked one."""
    h = digest(key)
    with engine.connect() as conn:
        row = conn.execute(select(ApiKey.name, ApiKey.key_hash, ApiKey.scopes, ApiKey.rate, ApiKey.burst,
                                  ApiKey.new_users, ApiKey.last_used_at)
                           .where(ApiKey.key_hash == h, ApiKey.revoked_at.is_(None))).first()
    if row is None or not hmac.compare_digest(row.key_hash, h):
        return None, None
    return Key(row.name, frozenset(row.scopes.split(",")), row.rate, row.burst, row.new_users), row.last_used_at


def touch(engine: Engine, name: str, when: float) -> None:
    """Record that the key was used at ``when``."""
    with engine.begin() as conn:
        conn.execute(update(ApiKey).where(ApiKey.name == name).values(last_used_at=when))
