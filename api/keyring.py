"""The API keys as one process last read them (``Keyring``): at most one database read a second per key, and a key
this process knows keeps working as last read while the database cannot be reached (``auth.py`` applies them)."""

from __future__ import annotations

import hmac
import logging
import threading
import time

from precompute.data import api_keys
from precompute.data.api_keys import Key
from precompute.errors import database_errors

log = logging.getLogger(__name__)
#: The name the admin token acts under.
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
        if not api_keys.well_formed(presented):         # no stored key can match it: refused without a read
            return None
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
