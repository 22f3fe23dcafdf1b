"""Rate limits as token buckets kept in Redis, shared by every API process and host.

Each bucket is one Redis string: its "theoretical arrival time" (GCRA, the token bucket stated with one number). A
bucket of ``rate`` per second and ``burst`` lets a request of cost ``c`` through when ``tat + c / rate - burst / rate``
is not in the future, and moves ``tat`` by ``c / rate``. One script call checks several buckets and charges them all or
none, on Redis's own clock (``TIME``), so hosts with skewed clocks share one budget: one round trip per request.

Why not ``limits`` / Flask-Limiter: their strategies are fixed and moving windows (a moving window keeps one entry
per request), not a bucket with a burst, and they take one round trip per limit where a request here may need
several (a key's rate and each user's events).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import redis

# KEYS: the buckets; ARGV: per bucket, its rate (1/s), burst and cost, flattened. Returns "0" when every bucket had
# room (all charged), else the longest wait in seconds (none charged).
_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local wait, new = 0, {}
for i, key in ipairs(KEYS) do
  local rate, burst, cost = tonumber(ARGV[3*i-2]), tonumber(ARGV[3*i-1]), tonumber(ARGV[3*i])
  local tat = math.max(tonumber(redis.call('GET', key) or '0'), now)
  local next_tat = tat + cost / rate
  local allow_at = next_tat - burst / rate
  if allow_at > now then wait = math.max(wait, allow_at - now) end
  new[i] = next_tat
end
if wait > 0 then return tostring(wait) end
for i, key in ipairs(KEYS) do
  redis.call('SET', key, string.format('%.6f', new[i]), 'PX', math.ceil((new[i] - now) * 1000) + 1)
end
return '0'
"""


@dataclass(frozen=True)
class Bucket:
    key: str
    rate: float      # tokens per second
    burst: int       # most tokens held
    cost: int = 1


class Limiter:
    def __init__(self, r: redis.Redis) -> None:
        self._script = r.register_script(_SCRIPT)

    def take(self, buckets: list[Bucket]) -> float:
        """Charge every bucket its cost if all have room and return 0; else charge none and return the seconds
        until they would (a cost above a bucket's burst never fits: ``inf``)."""
        if not buckets:
            return 0.0
        if any(b.cost > b.burst for b in buckets):
            return math.inf
        args = [x for b in buckets for x in (repr(float(b.rate)), b.burst, b.cost)]
        return float(self._script(keys=[b.key for b in buckets], args=args))
