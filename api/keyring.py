"""The API keys as one process last read them (``Keyring``): at most one database read a second per key, one at a
time (the requests that arrive during it are answered as last read, if that is at most two seconds old), and a key
this process knows keeps working as last read while the database cannot be reached (``auth.py`` applies them).

What a made-up key costs: nothing if it is not of a key's shape (``api_keys.well_formed``: refused before any
query), one read per process if it is (then remembered as unknown for ``unknown_ttl``). Unknown keys are remembered
apart from known ones, each in its own bounded table that drops its least recently used entry when full, so no
number of made-up keys can push a real one out and make it cost a read."""

from __future__ import annotations

import collections
import hmac
import logging
import threading
import time

from precompute.data import api_keys
from precompute.data.api_keys import Key
from precompute.errors import database_errors

log = logging.getLogger(__name__)
#: The name the admin token acts under.
ADMIN_TOKEN = api_keys.ADMIN_NAME


class Keyring:
    """The keys as this process last read them, each at most ``ttl`` seconds old (up to ``max_entries`` of them);
    well-formed keys that are unknown or revoked are remembered for ``unknown_ttl`` seconds (up to ``max_unknown``),
    so a client repeating a bad key costs one read per ``unknown_ttl``. Both tables are keyed by the key's SHA-256."""

    def __init__(self, engine, settings, ttl: float = 1.0, max_entries: int = 10_000, unknown_ttl: float = 60.0,
                 max_unknown: int = 10_000) -> None:
        self.engine, self.settings, self.ttl, self.max_entries = engine, settings, ttl, max_entries
        self.unknown_ttl, self.max_unknown = unknown_ttl, max_unknown
        self._known: collections.OrderedDict[str, tuple[Key, float]] = collections.OrderedDict()
        self._unknown: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._used: dict[str, float] = {}
        self._reading: set[str] = set()             # the keys (digests) a thread is reading from the database
        self._lock = threading.Lock()

    def find(self, presented: str, digest: str | None = None) -> Key | None:
        """The active key ``presented`` is, or None; raises a database error only for a key this process has not
        read before while the database cannot be reached. ``digest``: the SHA-256 ``digest_of`` gave for
        ``presented`` earlier in the same request (the turns take it, ``turns.Clients``), so it is not taken
        twice."""
        if digest is None:
            if self._is_admin_token(presented):
                return Key(ADMIN_TOKEN, frozenset({"admin"}))
            if not api_keys.well_formed(presented):
                return None
            digest = api_keys.digest(presented)
        h = digest
        now = time.monotonic()
        with self._lock:
            hit = self._known.get(h)
            if hit is not None:
                self._known.move_to_end(h)
            missed = self._unknown.get(h)
            if missed is not None:
                self._unknown.move_to_end(h)
            # An answer past its age but within two is still given while another thread reads the key again: one
            # read per key and process at a time in steady traffic, not one per request that arrives during it.
            # An older answer (the first request after a quiet spell) is never given: that request reads.
            reading = h in self._reading
            if hit is not None and _fresh(now - hit[1], self.ttl, reading):
                return hit[0]
            if missed is not None and _fresh(now - missed, self.unknown_ttl, reading):
                return None
            self._reading.add(h)
        try:
            key, last_used = api_keys.find(self.engine, presented)
        except database_errors():
            if hit is None and missed is None:
                raise
            name = hit[0].name if hit is not None else "(unknown)"
            log.warning("database unavailable: key %r is used as last read", name)
            return hit[0] if hit is not None else None
        else:
            with self._lock:
                if key is None:
                    self._known.pop(h, None)
                    _put(self._unknown, h, now, self.max_unknown)
                else:
                    self._unknown.pop(h, None)
                    _put(self._known, h, (key, now), self.max_entries)
        finally:
            with self._lock:
                self._reading.discard(h)
        if key is not None:
            self._note_use(key.name, last_used)
        return key

    def known(self, presented: str) -> Key | None:
        """The key ``presented`` is if this process has read it as active (at any age: a key revoked since is
        forgotten at its next ``find``), else None. Memory only, never a database read, so a request can be placed
        by it before its key is checked (``turns.py``); it costs what ``find`` costs before its read: a
        constant-time comparison with the admin token, the shape, a SHA-256 and a look-up by it."""
        if self._is_admin_token(presented):
            return Key(ADMIN_TOKEN, frozenset({"admin"}))
        return self.known_by(self.digest_of(presented))

    def digest_of(self, presented: str) -> str | None:
        """The SHA-256 the tables know ``presented`` by; None for the admin token and for a value not of a key's
        shape (neither is looked up by it)."""
        if self._is_admin_token(presented) or not api_keys.well_formed(presented):
            return None
        return api_keys.digest(presented)

    def known_by(self, digest: str | None) -> Key | None:
        """``known`` of the key whose ``digest_of`` is ``digest`` (None: no key)."""
        if digest is None:
            return None
        with self._lock:
            hit = self._known.get(digest)
        return hit[0] if hit is not None else None

    def _is_admin_token(self, presented: str) -> bool:
        token = self.settings.admin_token
        return bool(token) and hmac.compare_digest(presented.encode("utf-8", "surrogatepass"), token.encode())

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


def _fresh(age: float, ttl: float, reading: bool) -> bool:
    """Whether an answer of this age is given: within its age, or within two while another thread reads it again."""
    return age < ttl or reading and age < 2 * ttl


def _put(table: collections.OrderedDict, h: str, value, cap: int) -> None:
    """``table[h] = value`` as its most recent entry, dropping the least recently used past ``cap``."""
    table[h] = value
    table.move_to_end(h)
    while len(table) > cap:
        table.popitem(last=False)
