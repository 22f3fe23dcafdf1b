"""Noticing that Redis lost its data, and the Redis side of the rebuild that follows (``jobs/recovery.py`` runs it).

**Markers.** Each Redis holds a marker key, ``<prefix>redis:marker``, whose value is a token also recorded in the
database (``data/durable.py``). A worker reads the markers between jobs; one missing, or holding another token than
the database's, means that Redis lost the keys since the token was written: it restarted empty, was flushed, failed
over to an empty replica, evicted keys, or came back from a snapshot older than the last rebuild. Chosen over the
alternatives because it is exact for what matters (our keys, under our prefix) and cheap (one GET per Redis per
check): a server's ``run_id`` changes on every restart, persistence or not, and says nothing of a flush; a counter
that went back (the item states' ``seq``) moves only when items change, and a restart may bring it back to the
value it had. The database's token tells a marker lost from one never written: a new deployment or key prefix only
records its token, without rebuilding anything.

**A cluster.** A node that restarts empty loses the slots it serves, not the others': a marker per master node, on a
hash tag whose slot that node serves (``Keys.marker``, the first tag found per node), each checked. After a
resharding the tag chosen for a node may be one never written: read as a loss, it costs one rebuild of the users
whose feed is missing or behind, which is what it finds (nothing, if nothing was lost). The queue Redis is never a
cluster (RQ); it holds its own marker.

**The rebuild's state** lives on the queue Redis: a hash with its token, start, counts and end (what ``status``
shows), and the users to walk as one string of int64 ids, most recently active first, read a step at a time
(GETRANGE). A newer rebuild replaces both; a step of an older one finds another token and stops.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import redis

from .client import is_cluster
from .keys import Keys

#: The rebuild's list of users outlives a stuck rebuild by this much at most.
USERS_TTL = 86400

# KEYS: seq, epoch, boosts. ARGV: the seq read before the database, a new epoch, then pairs of item id and
# "weight expires_at". Replaces the boosts whole unless the seq moved (an admin change landed since: read again).
_RESTORE_BOOSTS = """
if tonumber(redis.call('GET', KEYS[1]) or '0') ~= tonumber(ARGV[1]) then return -1 end
redis.call('DEL', KEYS[3])
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]) end
redis.call('INCR', KEYS[1])
redis.call('SET', KEYS[2], ARGV[2])
return (#ARGV - 2) / 2
"""

_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class Markers:
    """Where a deployment's markers live: the queue Redis, and the feed Redis (each master node of a cluster)."""

    def __init__(self, queue_r: redis.Redis, feed_r, keys: Keys) -> None:
        self.queue_r, self.feed_r, self.keys = queue_r, feed_r, keys

    def locations(self) -> list[tuple[object, str]]:
        out = [(self.queue_r, self.keys.redis_marker)]
        if self.feed_r is not self.queue_r:
            keys = cluster_marker_keys(self.feed_r, self.keys) if is_cluster(self.feed_r) else [self.keys.redis_marker]
            out += [(self.feed_r, k) for k in keys]
        return out

    def read(self) -> list[str | None]:
        """Each marker's token, None where it is missing."""
        return [None if v is None else v.decode() for v in (r.get(k) for r, k in self.locations())]

    def write(self, token: str) -> None:
        for r, k in self.locations():
            r.set(k, token)


def cluster_marker_keys(r, keys: Keys, tags: int = 100_000) -> list[str]:
    """One marker key per master node of cluster ``r``: the first ``Keys.marker`` tag whose slot it serves."""
    primaries = {n.name for n in r.get_primaries()}
    found: dict[str, str] = {}
    for tag in range(tags):
        key = keys.marker(tag)
        name = r.get_node_from_key(key).name
        if name in primaries and name not in found:
            found[name] = key
            if len(found) == len(primaries):
                break
    return sorted(found.values())


def try_lock(r: redis.Redis, keys: Keys, owner: str, ttl: float) -> bool:
    """One rebuild starts at a time (the lock outlives a worker killed while starting one by ``ttl`` s)."""
    return bool(r.set(keys.recovery_lock, owner, nx=True, px=max(1, int(ttl * 1000))))


def unlock(r: redis.Redis, keys: Keys, owner: str) -> None:
    r.register_script(_UNLOCK)(keys=[keys.recovery_lock], args=[owner])


def restore_boosts(r, keys: Keys, read_boosts: Callable[[], dict[int, tuple[float, float]]], epoch: int,
                   attempts: int = 5) -> int:
    """Make the boosts Redis serves exactly ``read_boosts()`` (the database's, item id -> (weight, expires_at)) and
    set the item states' epoch to ``epoch``, so every API process reloads its copy whole; returns how many. As
    ``ItemStates.replace_inactive`` does, the seq is read before the database and a boost written or removed in
    between makes the write refuse and read again, so a restore never undoes a newer admin change."""
    script = r.register_script(_RESTORE_BOOSTS)
    for _ in range(attempts):
        before = int(r.get(keys.live_seq) or 0)
        pairs = [x for i, (w, e) in read_boosts().items() for x in (str(int(i)), f"{float(w)!r} {float(e)!r}")]
        done = int(script(keys=[keys.live_seq, keys.live_epoch, keys.live_boosts], args=[before, epoch, *pairs]))
        if done >= 0:
            return done
    raise redis.WatchError(f"{keys.live_seq} kept changing during {attempts} restores of the boosts")


# -- the rebuild's progress (queue Redis) ---------------------------------------------------------------------------

def begin(r: redis.Redis, keys: Keys, token: str, now: float | None = None) -> None:
    """A rebuild under ``token`` starts now, replacing any earlier one's state."""
    pipe = r.pipeline(transaction=True)
    pipe.delete(keys.recovery, keys.recovery_users)
    pipe.hset(keys.recovery, mapping={"token": token, "began": repr(time.time() if now is None else now),
                                      "looked_at": 0, "marked": 0})
    pipe.execute()


def current_token(r: redis.Redis, keys: Keys) -> str | None:
    token = r.hget(keys.recovery, "token")
    return None if token is None else token.decode()


def set_users(r: redis.Redis, keys: Keys, user_ids: list[int]) -> None:
    """The users the rebuild walks, in order."""
    pipe = r.pipeline(transaction=True)
    pipe.set(keys.recovery_users, np.asarray(user_ids, dtype="<i8").tobytes(), ex=USERS_TTL)
    pipe.hset(keys.recovery, "total", len(user_ids))
    pipe.execute()


def users_at(r: redis.Redis, keys: Keys, offset: int, n: int) -> list[int] | None:
    """Up to ``n`` of the walk's users from position ``offset``; None when the list is gone (expired, or lost)."""
    if not r.exists(keys.recovery_users):
        return None
    raw = r.getrange(keys.recovery_users, offset * 8, (offset + n) * 8 - 1)
    return np.frombuffer(raw, dtype="<i8").tolist()


def advance(r: redis.Redis, keys: Keys, looked_at: int, marked: int, finished: bool) -> None:
    pipe = r.pipeline(transaction=True)
    pipe.hset(keys.recovery, "looked_at", looked_at)
    pipe.hincrby(keys.recovery, "marked", marked)
    if finished:
        pipe.hset(keys.recovery, "finished_at", repr(time.time()))
        pipe.delete(keys.recovery_users)
    pipe.execute()


def progress(r: redis.Redis, keys: Keys, headers: list | None = None) -> dict | None:
    """The newest rebuild's state, None if there never was one: when it began and finished (epoch s; None while
    running), users looked at of the total (None until listed), users marked for a recompute, and of ``headers``
    (``FeedHeader`` or None, a sample's: ``status``) the feeds written since it began."""
    raw = {k.decode(): v.decode() for k, v in r.hgetall(keys.recovery).items()}
    if not raw or "began" not in raw:
        return None
    number = lambda name, kind: kind(raw[name]) if name in raw else None     # noqa: E731
    began = float(raw["began"])
    return {"began": began, "finished_at": number("finished_at", float), "total": number("total", int),
            "looked_at": number("looked_at", int), "marked": number("marked", int),
            "sampled_written_since": sum(h is not None and h.computed_at >= began for h in headers or ())}
