"""Rate limits as token buckets kept in Redis, shared by every API process and host.

Each bucket is one Redis string: its "theoretical arrival time" (GCRA, the token bucket stated with one number). A
bucket of ``rate`` per second and ``burst`` lets a request of cost ``c`` through when ``tat + c / rate - burst / rate``
is not in the future, and moves ``tat`` by ``c / rate``. One script call checks several buckets and charges them all or
none, on Redis's own clock (``TIME``), so hosts with skewed clocks share one budget: one round trip per request. A
key's request rate is charged through a per-process share instead (``Limiter.take_one``): one round trip per share,
sized by the rate the process spends it at (a busy process: one per ~125 ms), which is what keeps the page cost of the
check small.

A refusal is remembered by the process that got it (``Limiter._refused``): a bucket's theoretical arrival time never
goes back, so a bucket that refused cost ``c`` with a wait ``w`` refuses any cost ``c'`` for ``w + (c' - c) / rate``
seconds after, whatever other processes do meanwhile. Until then the same refusal is answered here, with no round
trip: a client that floods past its budget costs a dictionary lookup per request, not a Redis call. (Only a Redis
that lost its data, or a key's rate raised meanwhile, would have let one through sooner: by at most ``w``.)

Why not ``limits`` / Flask-Limiter: their strategies are fixed and moving windows (a moving window keeps one entry
per request), not a bucket with a burst, and they take one round trip per limit where a request here may need
several (``POST /events``: the key's rate at one token per event, the key's new user ids and each user's events).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

import redis

# KEYS: the buckets; ARGV: per bucket, its rate (1/s), burst and cost, flattened. Returns an empty list when every
# bucket had room (all charged), else each bucket's wait in seconds, 0 for those with room (none charged).
_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local refused, waits, new = false, {}, {}
for i, key in ipairs(KEYS) do
  local rate, burst, cost = tonumber(ARGV[3*i-2]), tonumber(ARGV[3*i-1]), tonumber(ARGV[3*i])
  local tat = math.max(tonumber(redis.call('GET', key) or '0'), now)
  local next_tat = tat + cost / rate
  local allow_at = next_tat - burst / rate
  waits[i] = '0'
  if allow_at > now then waits[i] = tostring(allow_at - now); refused = true end
  new[i] = next_tat
end
if refused then return waits end
for i, key in ipairs(KEYS) do
  redis.call('SET', key, string.format('%.6f', new[i]), 'PX', math.ceil((new[i] - now) * 1000) + 1)
end
return {}
"""

# KEYS[1]: one bucket; ARGV: rate, burst, most tokens wanted. Takes as many as it holds, up to that many: returns
# "+<n>" (n >= 1 taken), or the seconds until one is there.
_CLAIM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local rate, burst, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
local held = math.floor((now + burst / rate - tat) * rate + 1e-9)
if held < 1 then return tostring(tat + 1 / rate - burst / rate - now) end
local n = math.min(want, held)
local next_tat = tat + n / rate
redis.call('SET', KEYS[1], string.format('%.6f', next_tat), 'PX', math.ceil((next_tat - now) * 1000) + 1)
return '+' .. n
"""


@dataclass(frozen=True)
class Bucket:
    key: str
    rate: float      # tokens per second
    burst: int       # most tokens held
    cost: int = 1


class Limiter:
    """``take``: all-or-nothing charges, one round trip. ``take_one``: one token of a busy bucket, mostly without a
    round trip: the process claims a share of the bucket (a tenth of its burst, at most ``SHARE``) and spends it
    locally for at most ``SHARE_SECONDS``; what it does not spend by then is lost to the others, so a key is never
    let through more than its budget, and at most a share per process less while its clients are busy. A process
    that spent its last share before it expired claims what it spends in half of ``SHARE_SECONDS`` at the rate it
    spent that one (at most ``SHARE_MAX``, and a tenth of the burst): a busy process makes a round trip per ~125 ms,
    not per ``SHARE`` requests."""

    #: Tokens a process claims at first, the most it claims at once, and how long it may spend them.
    SHARE, SHARE_MAX, SHARE_SECONDS = 20, 200, 0.25

    def __init__(self, r: redis.Redis) -> None:
        self._script = r.register_script(_SCRIPT)
        self._claim = r.register_script(_CLAIM)
        #: bucket key -> (tokens held, claimed at, tokens claimed)
        self._local: dict[str, tuple[int, float, int]] = {}
        self._refused: dict[str, tuple[float, float, int, float]] = {}   # bucket key -> (at, wait, cost, rate)
        self._lock = threading.Lock()

    def known_wait(self, bucket: Bucket, now: float | None = None) -> float:
        """The seconds ``bucket`` surely still refuses ``bucket.cost`` for, by this process's last refusal of it
        (0: nothing known, try). No round trip."""
        now = time.monotonic() if now is None else now
        got = self._refused.get(bucket.key)
        if got is None:
            return 0.0
        at, wait, cost, rate = got
        left = wait + (bucket.cost - cost) / rate - (now - at) if rate == bucket.rate else 0.0
        if now - at >= wait or rate != bucket.rate:
            self._refused.pop(bucket.key, None)       # past: the bucket may hold anything again
        return max(left, 0.0)

    def _remember(self, bucket: Bucket, wait: float, now: float) -> None:
        if len(self._refused) > 10_000:
            self._refused.clear()
        self._refused[bucket.key] = (now, wait, bucket.cost, bucket.rate)

    def take_one(self, bucket: Bucket) -> float:
        """Like ``take([bucket])`` for a cost of 1, from the process's share when it holds one."""
        now = time.monotonic()
        known = self.known_wait(bucket, now)
        if known > 0:
            return known
        with self._lock:
            held, at, claimed = self._local.get(bucket.key, (0, 0.0, 0))
            if held > 0 and now - at < self.SHARE_SECONDS:
                self._local[bucket.key] = (held - 1, at, claimed)
                return 0.0
        share = self.SHARE
        if held == 0 and now - at < self.SHARE_SECONDS:       # the last share spent before it expired
            share = min(self.SHARE_MAX, max(share, int(claimed * self.SHARE_SECONDS / 2 / max(now - at, 1e-3))))
        want = max(1, min(share, bucket.burst // 10))
        got = self._claim(keys=[bucket.key], args=[repr(float(bucket.rate)), bucket.burst, want])
        got = got.decode() if isinstance(got, bytes) else str(got)
        if not got.startswith("+"):
            wait = max(float(got), 1e-6)
            self._remember(Bucket(bucket.key, bucket.rate, bucket.burst, 1), wait, now)
            return wait
        with self._lock:
            if len(self._local) > 10_000:
                self._local.clear()
            self._local[bucket.key] = (int(got[1:]) - 1, now, int(got[1:]))
        return 0.0

    def take(self, buckets: list[Bucket]) -> float:
        """Charge every bucket its cost if all have room and return 0; else charge none and return the seconds
        until they would (a cost above a bucket's burst never fits: ``inf``)."""
        return max(self.take_each(buckets), default=0.0)

    def take_each(self, buckets: list[Bucket]) -> list[float]:
        """Like ``take``, with each bucket's own wait: an empty list when all were charged, else one wait (s) per
        bucket, 0 for a bucket that had room (none charged), so a refusal can name the limit that holds it."""
        if not buckets:
            return []
        if any(b.cost > b.burst for b in buckets):
            return [math.inf if b.cost > b.burst else 0.0 for b in buckets]
        now = time.monotonic()
        known = [self.known_wait(b, now) for b in buckets]
        if any(known):
            return known                    # refused before, and surely still: no round trip
        args = [x for b in buckets for x in (repr(float(b.rate)), b.burst, b.cost)]
        waits = [float(w) for w in self._script(keys=[b.key for b in buckets], args=args)]
        for b, w in zip(buckets, waits):
            if w > 0:
                self._remember(b, w, now)
        return waits
