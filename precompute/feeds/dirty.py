"""Dirty users: who needs a recompute because their history changed.

A sorted set maps user id → the time (ms) from which the user may be claimed. An event sets it to "now", so a
burst of events for one user leaves one entry, i.e. one pending recompute. A drain job claims up to N users by
pushing their time a lease into the future, recomputes them, then removes each one *only if* its time is still
the one it claimed: a user who got a new event meanwhile stays dirty and is recomputed again. A job that dies
loses nothing: its users become claimable again when the lease ends.
"""

from __future__ import annotations

import time

import redis

from ..settings import Settings
from .keys import Keys

_CLAIM = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, uid in ipairs(due) do redis.call('ZADD', KEYS[1], ARGV[2], uid) end
return due
"""

_RELEASE = """
local released = 0
for i = 3, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) == ARGV[1] then
    redis.call('ZADD', KEYS[1], ARGV[2], ARGV[i]); released = released + 1
  end
end
return released
"""

_COMPLETE = """
local removed = 0
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) == ARGV[1] then
    redis.call('ZREM', KEYS[1], ARGV[i]); removed = removed + 1
  end
end
return removed
"""


def _ms() -> int:
    return int(time.time() * 1000)


class DirtyUsers:
    def __init__(self, r: redis.Redis, settings: Settings) -> None:
        self.r = r
        self.keys = Keys(settings.key_prefix)
        self.lease_ms = settings.dirty_lease * 1000
        self.flag_ttl = settings.drain_flag_ttl
        self._claim = r.register_script(_CLAIM)
        self._complete = r.register_script(_COMPLETE)
        self._release = r.register_script(_RELEASE)

    def mark(self, user_ids, pipe=None) -> None:
        if user_ids:
            (pipe or self.r).zadd(self.keys.dirty, {str(int(u)): _ms() for u in user_ids})

    def claim(self, n: int) -> tuple[list[int], int]:
        """Up to ``n`` due users and the lease stamp to hand back to ``complete``."""
        now = _ms()
        stamp = now + self.lease_ms
        due = self._claim(keys=[self.keys.dirty], args=[now, stamp, n])
        return [int(u) for u in due], stamp

    def complete(self, user_ids: list[int], stamp: int) -> int:
        if not user_ids:
            return 0
        return int(self._complete(keys=[self.keys.dirty], args=[str(stamp), *[str(u) for u in user_ids]]))

    def release(self, user_ids: list[int], stamp: int) -> int:
        """Make claimed users due again now (the claimer failed), unless a new event already did."""
        if not user_ids:
            return 0
        return int(self._release(keys=[self.keys.dirty], args=[str(stamp), _ms(), *[str(u) for u in user_ids]]))

    def next_due(self) -> int | None:
        """Earliest time (ms) any dirty user may be claimed, or None when none is dirty."""
        first = self.r.zrange(self.keys.dirty, 0, 0, withscores=True)
        return int(first[0][1]) if first else None

    def try_flag_scheduled(self, seconds: int) -> bool:
        """True if the caller should schedule a drain for leases that run out: one such job at a time."""
        return bool(self.r.set(self.keys.drain_scheduled_flag, 1, nx=True, ex=max(1, seconds)))

    def pending(self) -> int:
        return int(self.r.zcard(self.keys.dirty))

    def try_flag_drain(self) -> bool:
        """True if the caller should enqueue a drain job: at most one is waiting in the queue at a time."""
        return bool(self.r.set(self.keys.drain_flag, 1, nx=True, ex=self.flag_ttl))

    def clear_drain_flag(self) -> None:
        self.r.delete(self.keys.drain_flag)
