"""Failed authentications counted per client address, so that guessing keys is slowed without holding a thread.

A request that presents a key which fails (unknown, revoked, malformed: the 401s and 403s of ``auth.py`` that are
not a real key lacking a scope) charges its client address one token of a bucket in the queue Redis
(``PREFEED_AUTH_FAILURES_PER_MINUTE``, ``PREFEED_AUTH_FAILURES_BURST``; ``Limiter.take``, one round trip). When the
bucket is empty the request is answered 429 with ``Retry-After``, and this process answers every request of that
address 429 up front, before its key is looked up, until a failure would fit again. Whether the key of such a
request is good does not matter: an answer that differed would tell a guesser which guess was right.

What a good request pays: nothing in Redis. Failures are charged only when they happen, and the up-front check
reads this process's table of blocked addresses, and only while it holds one (an empty dict is checked first).
Other API processes learn of a block the same way, from their own first failure of that address past the limit,
so each process lets at most one more attempt of a blocked address reach the key lookup per block.

The client address is the connection's (``REMOTE_ADDR``), unless that is one of ``PREFEED_TRUSTED_PROXIES``: then
``X-Forwarded-For`` is read from the right, past every trusted proxy, and the first address not trusted is the
client's (a client can write what it likes at the left of that header, never at its right, which the proxy
appends). Without trusted proxies the header is ignored: a client could name any address in it.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time

import redis
from flask import Flask, current_app

from precompute.errors import ConfigError, TooManyRequests
from precompute.feeds.limits import Bucket, Limiter

from .services import services

log = logging.getLogger(__name__)
#: The app's ``extensions`` entry that holds its ``AddressGuard``.
EXTENSION = "prefeed.addresses"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class AddressGuard:
    """The failed-authentication budget of each client address, and the addresses this process holds blocked."""

    #: Most blocked addresses one process remembers (past it, the oldest block is forgotten first).
    MAX_BLOCKED = 10_000

    def __init__(self, limiter: Limiter, prefix: str, per_minute: int, burst: int, trusted: str) -> None:
        self.limiter, self.prefix = limiter, prefix
        self.rate, self.burst = per_minute / 60.0, burst
        self.trusted = trusted_networks(trusted)
        self._blocked: dict[str, float] = {}         # address -> monotonic time its block ends
        self._lock = threading.Lock()

    def check(self, environ: dict) -> None:
        """Raise ``TooManyRequests`` if this process holds the request's address blocked. Costs a dict's truth
        value while no address is blocked."""
        if not self._blocked:
            return
        address = client_address(environ, self.trusted)
        with self._lock:
            until = self._blocked.get(address)
            if until is not None and until <= time.monotonic():
                del self._blocked[address]
                until = None
        if until is not None:
            raise _refusal(until - time.monotonic())

    def failed(self, environ: dict) -> None:
        """Charge the request's address one failure; raise ``TooManyRequests`` (and hold the address blocked) when
        its budget is spent. A Redis that cannot be reached charges nothing: the request keeps its own answer."""
        address = client_address(environ, self.trusted)
        try:
            wait = self.limiter.take([Bucket(f"{self.prefix}rate:address:{address}", self.rate, self.burst)])
        except redis.RedisError as exc:
            log.warning("could not count a failed authentication: %s", type(exc).__name__)
            return
        if wait <= 0:
            return
        now = time.monotonic()
        with self._lock:
            self._blocked[address] = now + wait
            if len(self._blocked) > self.MAX_BLOCKED:
                for stale in [a for a, until in self._blocked.items() if until <= now]:
                    del self._blocked[stale]
                while len(self._blocked) > self.MAX_BLOCKED:
                    del self._blocked[next(iter(self._blocked))]
        raise _refusal(wait)


def client_address(environ: dict, trusted: tuple[Network, ...]) -> str:
    """The address of the client a request comes from: ``REMOTE_ADDR``, or, when that is a trusted proxy, the
    rightmost address of ``X-Forwarded-For`` that is not (all trusted: the leftmost). An entry that is not an
    address stops the walk at the last hop that could be read."""
    address = environ.get("REMOTE_ADDR") or ""
    if not trusted or not _within(address, trusted):
        return address
    for hop in reversed(environ.get("HTTP_X_FORWARDED_FOR", "").split(",")):
        try:
            ip = ipaddress.ip_address(hop.strip())
        except ValueError:
            return address
        address = str(ip)
        if not any(ip in net for net in trusted):
            return address
    return address


def forwarded_proto(environ: dict, trusted: tuple[Network, ...]) -> str | None:
    """The scheme the client used (``X-Forwarded-Proto``: TLS ended at the proxy) when the request comes from a
    trusted proxy and says ``http`` or ``https``; else None (the request's own scheme holds)."""
    proto = environ.get("HTTP_X_FORWARDED_PROTO", "").strip().lower()
    if proto in ("http", "https") and _within(environ.get("REMOTE_ADDR", ""), trusted):
        return proto
    return None


def trusted_networks(spec: str) -> tuple[Network, ...]:
    """``PREFEED_TRUSTED_PROXIES`` parsed: comma-separated addresses or CIDRs; ``ConfigError`` naming a bad one."""
    networks = []
    for part in (p.strip() for p in spec.split(",")):
        if part:
            try:
                networks.append(ipaddress.ip_network(part, strict=False))
            except ValueError:
                raise ConfigError(f"PREFEED_TRUSTED_PROXIES: {part!r} is not an address or CIDR") from None
    return tuple(networks)


def register(app: Flask) -> None:
    """Give ``app`` (its ``Services`` built) its guard; a malformed ``PREFEED_TRUSTED_PROXIES`` fails here."""
    svc = services(app)
    s = svc.settings
    app.extensions[EXTENSION] = AddressGuard(svc.limiter, svc.keys.prefix, s.auth_failures_per_minute,
                                             s.auth_failures_burst, s.trusted_proxies)


def guard(app: Flask | None = None) -> AddressGuard:
    """The guard of ``app`` (default: the app handling the current request)."""
    return (app or current_app).extensions[EXTENSION]


def _within(address: str, trusted: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in trusted)


def _refusal(wait: float) -> TooManyRequests:
    return TooManyRequests("too many failed authentications from this address", retry_after=max(wait, 1e-6))
