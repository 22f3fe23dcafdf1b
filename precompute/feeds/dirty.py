"""Dirty users: who needs a recompute because their history changed.

A sorted set maps user id → the time (ms) from which the user may be claimed. An event sets it to "now", so a
burst of events for one user leaves one entry, i.e. one pending recompute. A drain job claims up to N users by
pushing their time a lease into the future, recomputes them, then removes each one *only if* its time is still
the one it claimed: a user who got a new event meanwhile stays dirty and is recomputed again. A job that dies
loses nothing: its users become claimable again when the lease ends.

Recomputes per user are capped: a claim stamps the user's claim time in a second sorted set, and an event for a
user claimed less than ``PREFEED_RECOMPUTE_INTERVAL_MS`` ago makes the user due only when that interval has passed.
A user posting thousands of events a minute (a bot) costs at most one recompute per interval; every event is still
stored, and the recompute at the interval's end sees them all.

Known users go first. A user id the database did not have before its events (``mark_new``: the API counts them) is
marked in the dirty set only; every other user (``mark``) is marked in a second sorted set as well, ``dirty_known``,
with the same time. A claim takes the due users of ``dirty_known`` first, and only when there are fewer than it wants
the oldest due of the whole set, who are then all new users. So a flood of made-up user ids (each a new user, which
``PREFEED_KEY_NEW_USERS_PER_MINUTE`` caps per key) never holds back the recompute of a user who had a history: it
waits behind the known users due, never behind the new ones, however many were marked before it. New users are
still claimed oldest first among themselves, whenever the known ones due leave a batch room. A user stays in the
tier it was marked in until its recompute completes (a new user posting again while it waits keeps its place among
the new); one claimed from the new tier and marked while leased becomes known. The dirty set alone still holds
every dirty user with its time (``pending``, ``next_due``, the status page and ``/metrics`` read it).

New users are ranked by one drain at a time (``claim_tiers``' ``ranker``: a key holds the drain ranking them, for
the users' lease, until it ends): with two workers or more, a known user marked while new users are being ranked is
claimed by another drain at once rather than after a batch of them, and a flood's users take one worker's share at
most, whatever the number of workers.

All three sets, and the ranker's key, live on the queue Redis (``QUEUE_REDIS_URL``).
"""

from __future__ import annotations

import time

import redis

from ..settings import Settings
from .keys import Keys

# KEYS: dirty, known, recomputed, the new users' ranker. ARGV: now (ms), lease end (ms), how many, the interval (ms),
# how many new at most, the claimer ("" for none), the ranker's lease (ms).
# Known users due first, then, if the batch has room, whoever is due in the whole set: new users (the known ones due
# were all taken), at most the fifth argument's number of them; a named claimer takes new users only when no other
# claimer is ranking them (the ranker key holds who is, for the lease, renewed by each claim of new users).
_CLAIM = """
local now, lease, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, n)
local known = #due
local new = math.min(n - #due, tonumber(ARGV[5]))
for _, uid in ipairs(due) do
  redis.call('ZADD', KEYS[1], lease, uid)
  redis.call('ZADD', KEYS[2], lease, uid)
  redis.call('ZADD', KEYS[3], now, uid)
end
if new > 0 and ARGV[6] ~= '' then
  local ranker = redis.call('GET', KEYS[4])
  if ranker and ranker ~= ARGV[6] then new = 0 end
end
if new > 0 then
  local fresh = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, new)
  if #fresh > 0 and ARGV[6] ~= '' then redis.call('SET', KEYS[4], ARGV[6], 'PX', ARGV[7]) end
  for _, uid in ipairs(fresh) do
    redis.call('ZADD', KEYS[1], lease, uid)
    if redis.call('ZSCORE', KEYS[2], uid) then redis.call('ZADD', KEYS[2], lease, uid) end
    redis.call('ZADD', KEYS[3], now, uid)
    due[#due + 1] = uid
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. (tonumber(now) - tonumber(ARGV[4])))
table.insert(due, 1, known)
return due
"""

# KEYS: dirty, known, recomputed. ARGV: now (ms), the interval (ms), "1" for new users (else "0"), then user ids.
# A known user is due now, or when the interval since its last claim ends. A new user (not in the set) joins the new
# tier, due now; a user waiting in the new tier (due, not known) keeps its place there whatever it is marked as.
_MARK = """
local now, interval, new = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1'
for i = 4, #ARGV do
  local uid = ARGV[i]
  local current = redis.call('ZSCORE', KEYS[1], uid)
  if not current and new then
    redis.call('ZADD', KEYS[1], now, uid)
  elseif not (current and tonumber(current) <= now and not redis.call('ZSCORE', KEYS[2], uid)) then
    local due = now
    local last = redis.call('ZSCORE', KEYS[3], uid)
    if last and tonumber(last) + interval > due then due = tonumber(last) + interval end
    redis.call('ZADD', KEYS[1], due, uid)
    redis.call('ZADD', KEYS[2], due, uid)
  end
end
return #ARGV - 3
"""

# KEYS: dirty, known. ARGV: the lease stamp, now (ms), then user ids.
_RELEASE = """
local released = 0
for i = 3, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) == ARGV[1] then
    redis.call('ZADD', KEYS[1], ARGV[2], ARGV[i]); released = released + 1
    if redis.call('ZSCORE', KEYS[2], ARGV[i]) then redis.call('ZADD', KEYS[2], ARGV[2], ARGV[i]) end
  end
end
return released
"""

# KEYS: dirty, known. ARGV: the lease stamp, then user ids.
_COMPLETE = """
local removed = 0
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) == ARGV[1] then
    redis.call('ZREM', KEYS[1], ARGV[i]); redis.call('ZREM', KEYS[2], ARGV[i]); removed = removed + 1
  end
end
return removed
"""


# KEYS: the flag. ARGV: the drain's time (ms), now (ms). The flag holds the time of the earliest pending scheduled
# drain and lives until a second after it.
_FLAG_SCHEDULED = """
local at, now = tonumber(ARGV[1]), tonumber(ARGV[2])
local current = redis.call('GET', KEYS[1])
-- A drain already scheduled for this time or earlier, and not yet due, will see to it (one that came due is
-- running or ran: it holds back nothing)
if current and tonumber(current) <= at and tonumber(current) > now then return 0 end
redis.call('SET', KEYS[1], at, 'PX', math.max(1000, at - tonumber(ARGV[2]) + 1000))
return 1
"""

# KEYS: a flag (the drain flag, the new users' ranker). ARGV: an id. Deletes the flag if it holds that id.
_CLEAR_FLAG = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _ms() -> int:
    return int(time.time() * 1000)


class DirtyUsers:
    def __init__(self, r: redis.Redis, settings: Settings) -> None:
        self.r = r
        self.keys = Keys(settings.key_prefix)
        self.known = self.keys.dirty_known
        self.lease_ms = settings.dirty_lease * 1000
        self.flag_ttl = settings.drain_flag_ttl
        self.interval_ms = settings.recompute_interval_ms
        self._claim = r.register_script(_CLAIM)
        self._mark = r.register_script(_MARK)
        self._flag_scheduled = r.register_script(_FLAG_SCHEDULED)
        self._complete = r.register_script(_COMPLETE)
        self._release = r.register_script(_RELEASE)
        self._clear_flag = r.register_script(_CLEAR_FLAG)

    def mark(self, user_ids) -> None:
        """Make known users due: now, or at the end of the recompute interval since their last claim. They are
        claimed before every new user (``mark_new``); one waiting in the new tier stays there."""
        self._marked(user_ids, new=False)

    def mark_new(self, user_ids) -> None:
        """Make users the database did not have before their events due now, in the new tier: claimed after every
        known user due. A user already dirty is marked as by ``mark``."""
        self._marked(user_ids, new=True)

    def _marked(self, user_ids, new: bool) -> None:
        if user_ids:
            self._mark(keys=[self.keys.dirty, self.known, self.keys.recomputed],
                       args=[_ms(), self.interval_ms, "1" if new else "0", *[str(int(u)) for u in user_ids]])

    def claim(self, n: int, new: int | None = None) -> tuple[list[int], int]:
        """Up to ``n`` due users, known ones first, of them at most ``new`` new users (None: up to ``n``), and the
        lease stamp to hand back to ``complete``."""
        known, fresh, stamp = self.claim_tiers(n, new)
        return known + fresh, stamp

    def claim_tiers(self, n: int, new: int | None = None, ranker: str = "") -> tuple[list[int], list[int], int]:
        """``claim``, the known users and the new ones apart. ``ranker``: the claimer's name (a drain job's id); then
        new users are claimed only while no other named claimer ranks them, and claiming them makes this one their
        ranker for the users' lease (``PREFEED_DIRTY_LEASE``) or until ``stop_ranking``."""
        now = _ms()
        stamp = now + self.lease_ms
        due = self._claim(keys=[self.keys.dirty, self.known, self.keys.recomputed, self.keys.new_ranker],
                          args=[now, stamp, n, self.interval_ms, n if new is None else new, ranker, self.lease_ms])
        k = int(due[0]) + 1
        return [int(u) for u in due[1:k]], [int(u) for u in due[k:]], stamp

    def stop_ranking(self, ranker: str) -> None:
        """``ranker`` ranks new users no more (its drain ends): another claimer may take them at once."""
        self._clear_flag(keys=[self.keys.new_ranker], args=[ranker])

    def complete(self, user_ids: list[int], stamp: int) -> int:
        if not user_ids:
            return 0
        return int(self._complete(keys=[self.keys.dirty, self.known], args=[str(stamp), *[str(u) for u in user_ids]]))

    def release(self, user_ids: list[int], stamp: int) -> int:
        """Make claimed users due again now (the claimer failed), unless a new event already did."""
        if not user_ids:
            return 0
        return int(self._release(keys=[self.keys.dirty, self.known],
                                 args=[str(stamp), _ms(), *[str(u) for u in user_ids]]))

    def next_due(self, known_only: bool = False) -> int | None:
        """Earliest time (ms) any dirty user (``known_only``: any known one) may be claimed, or None when none is
        dirty."""
        first = self.r.zrange(self.known if known_only else self.keys.dirty, 0, 0, withscores=True)
        return int(first[0][1]) if first else None

    def ranked_until(self) -> int | None:
        """When (ms) the lease of the drain ranking new users ends, or None when none is ranking them."""
        left = self.r.pttl(self.keys.new_ranker)
        return _ms() + int(left) if left is not None and left >= 0 else None

    def try_flag_scheduled(self, at_ms: int) -> bool:
        """True if the caller should schedule a drain at ``at_ms`` (leases that run out, recompute intervals that
        end): unless one is scheduled already for that time or earlier. An earlier one is always scheduled, so a
        drain far ahead (a dead job's lease) never holds back a user due sooner."""
        return bool(self._flag_scheduled(keys=[self.keys.drain_scheduled_flag], args=[int(at_ms), _ms()]))

    def pending(self) -> int:
        return int(self.r.zcard(self.keys.dirty))

    def try_flag_drain(self, job_id: str) -> bool:
        """True if the caller should enqueue a drain job with id ``job_id``: at most one waits in the queue at a
        time. The flag holds its id, so that only that job's start clears it."""
        return bool(self.r.set(self.keys.drain_flag, job_id, nx=True, ex=self.flag_ttl))

    def clear_drain_flag(self, job_id: str) -> None:
        """The flagged drain ``job_id`` has started (or was never enqueued): the next event enqueues another.
        Any other drain leaves the flag alone. Were every drain's start to clear it, each start would let one more
        in while one waited already, and drains queued beside the flagged one (a scheduled drain come due, one
        enqueued when the flag outlived its TTL) would stay queued as long as events kept coming."""
        self._clear_flag(keys=[self.keys.drain_flag], args=[job_id])


class NewUserPace:
    """How many new users a drain claims at once, and when: as many as its batches so far say are ranked within
    ``budget`` seconds (``PREFEED_NEW_USERS_BATCH_MS``), at least one, at most ``most``; and after a batch that held
    new users, none for as long as keeps their share of the drain's time at ``share`` (``PREFEED_NEW_USERS_SHARE``).
    A known user marked while new users are being ranked is claimed by the next claim, so it waits about ``budget``
    at most, however many new users are due; and new users however many (a flood of made-up ids let in by the keys'
    budgets) take at most ``share`` of a worker, leaving the rest to known users and to whatever shares the host.

    Sizing each batch by the seconds per user of the one before converges, for batches costing ``a + b·n`` seconds,
    to the ``n`` with ``a + b·n = budget`` (or to one user when ``a`` alone exceeds it): no per-batch cost is
    assumed, whatever the catalogue and the machine make it."""

    def __init__(self, budget: float, most: int, share: float = 1.0, first: int = 8) -> None:
        self.budget, self.most, self.share = budget, most, share
        self.size = max(1, min(most, first))
        self.resume_at = 0.0            # time.monotonic() from which new users may be claimed again

    def allowed(self, now: float) -> int:
        """New users the next claim may take at ``now`` (``time.monotonic()``): 0 while paused."""
        return self.size if now >= self.resume_at else 0

    def observe(self, users: int, seconds: float, new: int = 0) -> None:
        """A batch of ``users``, ``new`` of them new, took ``seconds`` to rank and store."""
        if users > 0 and seconds > 0:
            self.size = max(1, min(self.most, int(self.budget * users / seconds)))
            if new and self.share < 1:
                self.resume_at = time.monotonic() + seconds * new / users * (1 - self.share) / self.share
