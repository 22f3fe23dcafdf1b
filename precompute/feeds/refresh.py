"""Feeds kept fresh while the log's clock moves on.

A worker recomputes a user's feed when their history changes, so a user who does not act keeps the feed of their
last event, with popularity as of then: a shopper back a week later would read a week-old "popular yesterday".
Each feed written is therefore recorded at the log's clock it was computed at, in a sorted set on the queue Redis
(``<prefix>feed_clock``: user id → clock). A drain job marks dirty the users whose feed is ``PREFEED_FEED_REFRESH``
(a day) of log time behind the clock, a job's worth at a time, and takes them out of the set; their recompute
records them again at the new clock. The log's clock moves only with events and events start drains, so no timer
is needed, and a log replayed faster than it happened is refreshed as its own clock moves.

Refreshes stop ``PREFEED_FEED_TTL`` (7 days) of log time after a user's newest event: a feed computed later than
that is not recorded again, as a stored feed expires that long after it is written. ``learning/steps.py`` gives the
replay protocol the same clocks (``feed_clock``), so what ``evaluate`` reports is what these feeds serve.
"""

from __future__ import annotations

import numpy as np
import redis

from ..settings import Settings
from .keys import Keys

#: Users taken in one call at most (one Lua ZREM of them all).
MAX_DUE = 5000

# KEYS: the set. ARGV: the newest clock that is due, how many. Takes the due users out of the set.
_DUE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #due > 0 then redis.call('ZREM', KEYS[1], unpack(due)) end
return due
"""


class FeedClocks:
    def __init__(self, r: redis.Redis, settings: Settings) -> None:
        self.r = r
        self.key = Keys(settings.key_prefix).feed_clock
        self.every = float(settings.feed_refresh)
        self.horizon = float(settings.feed_ttl)
        self._due = r.register_script(_DUE)

    def record(self, user_ids: np.ndarray, newest_event: np.ndarray, clock: float) -> None:
        """Feeds of ``user_ids`` were written at the log's ``clock``; ``newest_event`` is each user's newest event
        time. Those past the horizon are taken out instead."""
        if not self.every or not len(user_ids):
            return
        keep = clock - np.asarray(newest_event, dtype=np.float64) <= self.horizon
        pipe = self.r.pipeline(transaction=False)
        if keep.any():
            pipe.zadd(self.key, {str(int(u)): float(clock) for u in np.asarray(user_ids)[keep]})
        if not keep.all():
            pipe.zrem(self.key, *[str(int(u)) for u in np.asarray(user_ids)[~keep]])
        pipe.execute()

    def due(self, clock: float, n: int) -> list[int]:
        """Up to ``n`` users whose feed is due for a refresh at the log's ``clock``, taken out of the set."""
        if not self.every or n <= 0:
            return []
        got = self._due(keys=[self.key], args=[repr(float(clock) - self.every), min(int(n), MAX_DUE)])
        return [int(u) for u in got]

    def pending(self) -> int:
        return int(self.r.zcard(self.key))
