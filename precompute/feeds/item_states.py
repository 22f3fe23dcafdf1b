"""Item states: boosts and deactivated items, written to Redis and held in memory by every API process.

A page must apply boosts and deactivations made after its feed was computed, yet read nothing but its own user's
keys (one slot in a cluster, one round trip). So the global state lives in four keys sharing the ``{live}`` hash
tag (one slot: a change is one atomic script), and each API process keeps a copy:

- ``seq``: a counter every change increments; ``epoch``: incremented when the inactive set is replaced whole;
- ``inactive``: sorted set, item id → the ``seq`` of its deactivation;
- ``reactivated``: sorted set, item id → the ``seq`` of its reactivation (the newest ``REACTIVATED_KEEP``);
- ``boosts``: hash, item id → ``"weight expires_at"`` (epoch s); an expired boost is ignored by readers and
  removed by the next boost write.

A reader (``ItemStatesCopy``) checks ``seq`` and ``epoch`` at most every ``PREFEED_LIVE_REFRESH_MS``; when ``seq``
moved it fetches only the (de)activations after the ``seq`` it holds, and the boosts (a few hundred paid listings:
small).
It reloads everything when the epoch changed or the reactivations it missed were trimmed. A change is therefore
visible to every API process within the refresh interval plus one round trip.

The same read brings the new items' counter (``new_items.py``, whose copy reads the items again when it moved) and
the events' clock, ``clock``: the newest time of an event ``POST /events`` accepted, which
served pages are timed on (``served_at``, for attribution: ``precompute/experiments/collect.py``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import numpy as np
import redis

from .keys import Keys

#: Reactivations kept for readers to catch up on; a reader further behind reloads the whole state.
REACTIVATED_KEEP = 100_000
#: Most deactivated items a reader also holds as a set for its pages (~60 bytes each past the array's 8: 12 MB at
#: most); a catalogue with more is looked up in the sorted array alone.
SET_MAX = 200_000

# KEYS: seq, epoch, inactive, reactivated, boosts. ARGV[1]: the operation, then its arguments. Returns the new seq.
_CHANGE = """
local op = ARGV[1]
local seq = redis.call('INCR', KEYS[1])
if op == 'active' then
  -- ARGV[2..]: pairs of item id, '1' (active) or '0' (inactive)
  for i = 2, #ARGV, 2 do
    if ARGV[i + 1] == '1' then
      if redis.call('ZREM', KEYS[3], ARGV[i]) == 1 then redis.call('ZADD', KEYS[4], seq, ARGV[i]) end
    else
      redis.call('ZADD', KEYS[3], seq, ARGV[i])
    end
  end
  local extra = redis.call('ZCARD', KEYS[4]) - %(keep)d
  if extra > 0 then redis.call('ZREMRANGEBYRANK', KEYS[4], 0, extra - 1) end
elseif op == 'boost' then
  -- ARGV[2]: item id, ARGV[3]: 'weight expires_at', ARGV[4]: now (epoch s): expired boosts are dropped
  local all = redis.call('HGETALL', KEYS[5])
  for i = 1, #all, 2 do
    local expires = tonumber(string.match(all[i + 1], ' (.*)$'))
    if expires and expires <= tonumber(ARGV[4]) then redis.call('HDEL', KEYS[5], all[i]) end
  end
  redis.call('HSET', KEYS[5], ARGV[2], ARGV[3])
elseif op == 'unboost' then
  return {seq, redis.call('HDEL', KEYS[5], ARGV[2])}
elseif op == 'replace' then
  -- ARGV[2]: the seq the caller read before reading the database; ARGV[3..]: every inactive item id
  if seq - 1 ~= tonumber(ARGV[2]) then redis.call('DECR', KEYS[1]); return {-1, 0} end
  redis.call('DEL', KEYS[3], KEYS[4])
  for i = 3, #ARGV, 5000 do
    local args = {}
    for j = i, math.min(i + 4999, #ARGV) do args[#args + 1] = seq; args[#args + 1] = ARGV[j] end
    redis.call('ZADD', KEYS[3], unpack(args))
  end
  redis.call('INCR', KEYS[2])
end
return {seq, 1}
""" % dict(keep=REACTIVATED_KEEP)


# KEYS: the clock. ARGV[1]: an accepted event's time (epoch s). The clock moves forward only.
_ADVANCE = """
local now = redis.call('GET', KEYS[1])
if not now or tonumber(ARGV[1]) > tonumber(now) then redis.call('SET', KEYS[1], ARGV[1]) end
"""


class ItemStates:
    """Writes the item states (API admin routes, workers replacing the inactive set) and the events' clock."""

    def __init__(self, r: redis.Redis, keys: Keys) -> None:
        self.r = r
        self.keys = keys
        self._change = r.register_script(_CHANGE)
        self._advance = r.register_script(_ADVANCE)

    def advance_clock(self, ts: float) -> None:
        """Move the events' clock (the newest accepted event time, which pages are timed on) to ``ts`` if later, and
        never past the wall clock: an event may carry a time up to ``PREFEED_EVENT_MAX_FUTURE`` ahead (clock skew),
        and pages stamped that far ahead would be after every real click of the next minute, which attribution
        then never matches to them."""
        self._advance(keys=[self.keys.live_clock], args=[repr(min(float(ts), time.time()))])

    def _run(self, *args) -> list[int]:
        k = self.keys
        return [int(x) for x in self._change(keys=[k.live_seq, k.live_epoch, k.live_inactive, k.live_reactivated,
                                                   k.live_boosts], args=list(args))]

    def set_active(self, flags: dict[int, bool]) -> None:
        """Mark items active (True) or inactive (False)."""
        if flags:
            self._run("active", *[x for i, a in flags.items() for x in (str(int(i)), "1" if a else "0")])

    def boost(self, item_id: int, weight: float, expires_at: float) -> None:
        self._run("boost", str(int(item_id)), f"{weight!r} {expires_at!r}", repr(time.time()))

    def unboost(self, item_id: int) -> bool:
        return bool(self._run("unboost", str(int(item_id)))[1])

    def replace_inactive(self, read_inactive, attempts: int = 5) -> int:
        """Make the inactive set exactly ``read_inactive()`` (the database's view) and return its size. The seq
        is read before the database: a change that lands after that read makes the replacement refuse, and it is
        taken again, so a rebuild never undoes a newer (de)activation."""
        for _ in range(attempts):
            before = int(self.r.get(self.keys.live_seq) or 0)
            ids = [str(int(i)) for i in read_inactive()]
            if self._run("replace", str(before), *ids)[0] >= 0:
                return len(ids)
        raise redis.WatchError(f"{self.keys.live_seq} kept changing during {attempts} rebuilds of the inactive set")


class ItemStatesCopy:
    """One process's copy of the item states, refreshed at most every ``refresh_ms`` (see the module doc)."""

    def __init__(self, r: redis.Redis, keys: Keys, refresh_ms: int) -> None:
        self.r = r
        self.keys = keys
        self.refresh_s = refresh_ms / 1000.0
        self.seq = self.epoch = -1
        self.checked = float("-inf")
        self.clock: float | None = None                       # the events' clock as last read; None: not set
        self.new_seq = 0                                      # the new items' counter as last read (``new_items.py``)
        self.inactive = np.empty(0, dtype=np.int64)          # sorted: 8 bytes per deactivated item
        #: The same ids as a set, for a page's look-ups, while there are at most ``SET_MAX`` of them (None past it)
        self.inactive_ids: frozenset[int] | None = frozenset()
        self.boosts: dict[int, tuple[float, float]] = {}     # item id -> (weight, expires_at epoch s)
        # The span [start, until) of epoch s over which the boosts in force do not change, and them (id -> weight).
        self._in_force: tuple[float, float, dict[int, float]] = (float("inf"), float("-inf"), {})

    def refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.checked < self.refresh_s:
            return
        k = self.keys
        seq, epoch, clock, new_seq = self.r.mget(k.live_seq, k.live_epoch, k.live_clock, k.live_new_seq)
        seq, epoch = int(seq or 0), int(epoch or 0)
        self.clock = None if clock is None else float(clock)
        self.new_seq = int(new_seq or 0)
        if seq != self.seq or epoch != self.epoch:
            # A counter that went back (Redis lost data) means the copy cannot be caught up: reload it whole.
            self._load(epoch != self.epoch or seq < self.seq)
        self.checked = now

    def _load(self, whole: bool) -> None:
        k = self.keys
        since = "-inf" if whole else f"({self.seq}"
        pipe = self.r.pipeline(transaction=True)             # one slot: a consistent snapshot
        pipe.get(k.live_seq)
        pipe.get(k.live_epoch)
        pipe.zrangebyscore(k.live_inactive, since, "+inf", withscores=True)
        pipe.zrangebyscore(k.live_reactivated, since, "+inf", withscores=True)
        pipe.zrange(k.live_reactivated, 0, 0, withscores=True)
        pipe.zcard(k.live_reactivated)
        pipe.hgetall(k.live_boosts)
        seq, epoch, off, on, oldest_on, n_on, boosts = pipe.execute()
        if not whole and n_on >= REACTIVATED_KEEP and oldest_on and oldest_on[0][1] > self.seq + 1:
            return self._load(True)          # the set was trimmed past what this copy knows: reactivations lost
        off_ids, off_seq = _pairs(off)
        on_ids, on_seq = _pairs(on)
        # An item both deactivated and reactivated since: the later change wins.
        last_on = dict(zip(on_ids.tolist(), on_seq.tolist()))
        newly_off = off_ids[[s > last_on.get(i, -1) for i, s in zip(off_ids.tolist(), off_seq.tolist())]] \
            if len(off_ids) else off_ids
        newly_on = np.setdiff1d(on_ids, newly_off)
        base = np.empty(0, dtype=np.int64) if whole else self.inactive
        inactive = np.union1d(np.setdiff1d(base, newly_on), newly_off)
        self.inactive_ids = frozenset(inactive.tolist()) if len(inactive) <= SET_MAX else None
        self.inactive = inactive
        self.boosts = {int(i): (float(w), float(e)) for i, (w, e) in ((i, v.split()) for i, v in boosts.items())}
        self._in_force = (float("inf"), float("-inf"), {})  # taken again at the next page
        self.seq, self.epoch = int(seq or 0), int(epoch or 0)

    def active_mask(self, ids: np.ndarray) -> np.ndarray:
        """True where the item is not deactivated."""
        return ~_member(self.inactive, ids)

    def inactive_flags(self, ids: np.ndarray) -> list[bool]:
        """True where the item is deactivated, as a list (what the page's loops read). A page's ~150 ids are looked
        up in the set (~5 us) rather than searched in the sorted array (~20 us of numpy calls in a request), unless
        there are too many deactivated items to hold as a set."""
        inactive = self.inactive_ids
        if inactive is None:
            return _member(self.inactive, ids).tolist()
        if not inactive:
            return [False] * len(ids)
        return [i in inactive for i in ids.tolist()]

    def is_inactive(self, item_id: int) -> bool:
        """Whether one item is deactivated (as ``inactive_flags``, for an item looked up alone)."""
        inactive = self.inactive_ids
        if inactive is not None:
            return item_id in inactive
        return bool(_member(self.inactive, np.array([item_id], dtype=np.int64))[0])

    def boosts_in_force(self, now: float | None = None) -> dict[int, float]:
        """Item id -> weight of the boosts in force at ``now`` (default: the wall clock): not expired, weight > 0.
        Taken again only when ``now`` leaves the span the previous answer holds for (a boost expired, or the clock
        went back), so a page pays one dict lookup per item."""
        now = time.time() if now is None else now
        start, until, weights = self._in_force
        if not start <= now < until:
            weights = {i: w for i, (w, e) in self.boosts.items() if e > now and w > 0}
            ends = [e for _, e in self.boosts.values()]
            self._in_force = (max((e for e in ends if e <= now), default=float("-inf")),
                              min((e for e in ends if e > now), default=float("inf")), weights)
        return weights

    def weights(self, ids: Iterable[int], now: float | None = None) -> list[float]:
        """Boost weight of each id, 0 where unboosted or expired."""
        get = self.boosts_in_force(now).get
        return [get(int(i), 0.0) for i in ids]


def _member(sorted_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    if not len(sorted_ids) or not len(ids):
        return np.zeros(len(ids), dtype=bool)
    return sorted_ids.take(np.searchsorted(sorted_ids, ids), mode="clip") == ids


def _pairs(rows: Iterable[tuple[bytes, float]]) -> tuple[np.ndarray, np.ndarray]:
    rows = list(rows)
    return (np.array([int(m) for m, _ in rows], dtype=np.int64), np.array([s for _, s in rows], dtype=np.float64))

