"""Feeds in Redis: the version-guarded write, reads, stale-feed detection, and the fallback's popular lists.

Writes go through a Lua script that refuses to replace a feed stamped with a newer history version, or with the same
history version and a newer assignment (the version guard: a feed ranked for an arm the user has since left never
replaces one ranked for their arm now), and set the TTL in the same step, so a reader sees either the old feed or
the new one, never a mix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import redis

from ..settings import Settings
from .client import per_node
from .codec import MAX_HEADER_SIZE, READABLE, RECORD_SIZE, CorruptFeed, Feed, FeedHeader, decode, decode_header
from .keys import Keys
from .item_states import ItemStates

# Returns 1 if written, 0 if the stored feed has a newer history version, or the same one and a newer assignment.
# The stored history version is read from the header bytes 8..15 (u64 little-endian), its assignment from bytes
# 36..39 (u32; format 2 has none: 0); Lua numbers are doubles, exact up to 2^53. Only a value of the magic "PF"
# and a readable format (ARGV[5], ARGV[6]) is a feed: any other is unreadable to every reader, served as missing,
# and replaced whatever its version bytes hold (else the recompute its reader schedules could never land).
_GUARDED_SET = """
local head = redis.call('GETRANGE', KEYS[1], 0, 39)
local fmt = string.byte(head, 3)
if string.len(head) >= 16 and string.sub(head, 1, 2) == 'PF' and (fmt == tonumber(ARGV[5]) or fmt == tonumber(ARGV[6])) then
  local v = 0
  for i = 16, 9, -1 do v = v * 256 + string.byte(head, i) end
  local a = 0
  if string.len(head) == 40 and fmt == tonumber(ARGV[6]) then
    for i = 40, 37, -1 do a = a * 256 + string.byte(head, i) end
  end
  local new_v, new_a = tonumber(ARGV[2]), tonumber(ARGV[4])
  if v > new_v or (v == new_v and a > new_a) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[3])
return 1
"""


class FeedStore:
    def __init__(self, r: redis.Redis, settings: Settings) -> None:
        self.r = r
        self.keys = Keys(settings.key_prefix)
        self.ttl = settings.feed_ttl
        self._guarded_set = r.register_script(_GUARDED_SET)

    def write_many(self, feeds: list[tuple[int, bytes, int]], assignment: int = 0) -> list[bool]:
        """Write ``(user_id, value, history_version)`` feeds, ranked under ``assignment`` (``codec.py``), in one
        pipeline (one per node on a cluster); True where written, False where a newer feed was kept."""
        keys = [self.keys.feed(user_id) for user_id, _, _ in feeds]
        old, new = READABLE

        def add(pipe, i: int) -> None:
            _, value, version = feeds[i]
            self._guarded_set(keys=[keys[i]], args=[value, version, self.ttl, assignment, old, new], client=pipe)

        return [bool(x) for x in per_node(self.r, keys, add)]

    def read(self, user_id: int, n_records: int | None = None) -> Feed | None:
        key = self.keys.feed(user_id)
        blob = self.r.get(key) if n_records is None else \
            self.r.getrange(key, 0, MAX_HEADER_SIZE + n_records * RECORD_SIZE - 1)
        return decode(blob) if blob else None

    def stale_users(self, versions: list[tuple[int, int]], model_version: int | None = None,
                    chunk: int = 1000) -> list[int]:
        """Of ``(user_id, history_version)`` pairs, the users whose stored feed is missing, unreadable, older than
        their history, or (given ``model_version``, the current bundle) built by another bundle outside any
        experiment (an arm's feed is ranked by its arm). Reads only the
        headers (GETRANGE), ``chunk`` users per pipelined round trip; deletes nothing, so old feeds keep serving
        until rebuilt."""
        stale = []
        for i in range(0, len(versions), chunk):
            part = versions[i:i + chunk]
            pipe = self.r.pipeline(transaction=False)
            for uid, _ in part:
                pipe.getrange(self.keys.feed(uid), 0, MAX_HEADER_SIZE - 1)
            for (uid, version), head in zip(part, pipe.execute()):
                header = header_of(head)
                if header is None or header.history_version < version or (
                        model_version is not None and not header.experiment and header.model_version != model_version):
                    stale.append(uid)
        return stale

    def replace_inactive(self, read_inactive: Callable[[], Iterable[int]], attempts: int = 5) -> int:
        """Make the item states' inactive set exactly ``read_inactive()`` (the database's view), and return its
        size. The database is the record; the set is what serving reads, and can fall behind it when Redis loses
        data (``item_states.ItemStates.replace_inactive``: never undoes a newer (de)activation)."""
        return ItemStates(self.r, self.keys).replace_inactive(read_inactive, attempts)

    def publish_popular(self, global_ids: np.ndarray, by_category: dict[int, np.ndarray]) -> None:
        """Popular item ids for the fallback feed, one int64 array per list (``by_category``: real category id →
        its list; an item in several categories is on each one's), replaced in one transaction."""
        pipe = self.r.pipeline(transaction=True)
        pipe.set(self.keys.popular_global, np.asarray(global_ids, dtype="<i8").tobytes())
        for c, ids in by_category.items():
            pipe.set(self.keys.popular_category(c), np.asarray(ids, dtype="<i8").tobytes())
        pipe.execute()


def header_of(head: bytes) -> FeedHeader | None:
    """The header of a value's first bytes (GETRANGE), None for a missing or unreadable value."""
    try:
        return decode_header(head)[0]
    except CorruptFeed:
        return None
