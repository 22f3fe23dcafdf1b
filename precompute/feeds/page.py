"""The live page: what must be live at request time, applied to a precomputed feed in one Lua call per page. Items
deactivated or interacted with since the feed was computed are dropped, boosted items are lifted (``boosts.py``),
and users without a feed get a fallback of popular items.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import redis

from ..settings import Settings
from .boosts import lift_boosts
from .codec import HEADER_SIZE, RECORD_SIZE, CorruptFeed, FeedHeader, decode
from .keys import Keys


@dataclasses.dataclass
class Page:
    items: list[tuple[int, float, bool]]    # (item_id, score, boosted)
    source: str                             # "precomputed" | "fallback"
    header: FeedHeader | None


# Boosts are one key per item (expiring natively) read with MGET: a hash of a few hundred boosts is stored as a
# listpack, which HMGET scans linearly (measured 290 µs server-side for 140 lookups in 445 boosts).
# The boost keys are built from ARGV[2] inside the script, so prefeed does not run on Redis Cluster.
# Item ids are 64-bit and Lua numbers are doubles (exact below 2**53): ``decimal`` writes an id from its two 32-bit
# halves in base-10**7 limbs, every intermediate below 2**53, so ids up to 2**63 - 1 name the right set members and
# boost keys (tests/test_ids.py).
_PAGE = """
local function u32(s, i)
  local b1, b2, b3, b4 = string.byte(s, i, i + 3)
  return b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
end
local function decimal(lo, hi)
  if hi < 2097152 then return string.format('%.0f', hi * 4294967296 + lo) end
  local a1, a0 = math.floor(hi / 10000000), hi % 10000000    -- hi * 2^32 + lo, 2^32 = 429 * 10^7 + 4967296
  local c0 = a0 * 4967296 + lo
  local c1 = a1 * 4967296 + a0 * 429 + math.floor(c0 / 10000000)
  local c2 = a1 * 429 + math.floor(c1 / 10000000)
  -- hi >= 2^21 means the id is >= 2^53 > 10^14: c2 is never 0, so the limbs below it keep their zeros
  return string.format('%.0f%07.0f%07.0f', c2, c1 % 10000000, c0 % 10000000)
end
local blob = redis.call('GETRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if string.len(blob) < 32 then return {blob} end
local hv = 0
for i = 16, 9, -1 do hv = hv * 256 + string.byte(blob, i) end
local n = math.floor((string.len(blob) - 32) / 12)
local ids = {}
for k = 0, n - 1 do
  ids[k + 1] = decimal(u32(blob, 33 + 12 * k), u32(blob, 37 + 12 * k))
end
local flags, pairs = {}, {}
if n > 0 then
  local inactive = redis.call('SMISMEMBER', KEYS[2], unpack(ids))
  local names = {}
  for k = 1, n do names[k] = ARGV[2] .. ids[k] end
  local boosts = redis.call('MGET', unpack(names))
  for k = 1, n do
    flags[k] = inactive[k] == 1 and '1' or '0'
    if boosts[k] then pairs[#pairs + 1] = (k - 1) .. '=' .. boosts[k] end
  end
end
local seen = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. string.format('%.0f', hv), '+inf')
return {blob, table.concat(flags), table.concat(pairs, ','), table.concat(seen, ',')}
"""


class LiveFeeds:
    def __init__(self, r: redis.Redis, settings: Settings) -> None:
        self.r = r
        self.keys = Keys(settings.key_prefix)
        self.every = settings.boost_every
        self.lookahead = settings.boost_lookahead
        self._page = r.register_script(_PAGE)

    def page(self, user_id: int, limit: int, offset: int) -> Page | None:
        """The live page of ``user_id``'s precomputed feed, or None when the user has no feed."""
        need = offset + limit
        n_read = need + self.lookahead + limit
        keys = [self.keys.feed(user_id), self.keys.inactive, self.keys.seen(user_id)]
        while True:
            reply = self._page(keys=keys, args=[HEADER_SIZE + n_read * RECORD_SIZE, self.keys.boost_prefix])
            if len(reply) < 4:
                return None                      # no feed (or a value too short to be one)
            blob, flags, boost_pairs, seen = reply
            try:
                feed = decode(blob)
            except CorruptFeed:
                return None                      # treated as missing: served from fallback and recomputed
            ids, scores = feed.items, feed.scores
            # The whole value was read when it has no more records than were returned (or fewer than asked for).
            complete = len(ids) >= feed.header.count or len(ids) < n_read
            keep = np.frombuffer(flags, dtype=np.uint8)[: len(ids)] != ord("1")
            if seen:
                keep &= ~np.isin(ids, np.array(seen.split(b","), dtype=np.int64))
            weights = np.zeros(len(ids))
            for pair in boost_pairs.split(b",") if boost_pairs else ():
                k, _, w = pair.partition(b"=")
                weights[int(k)] = float(w)
            ids, scores, weights = ids[keep], scores[keep], weights[keep]
            out = lift_boosts(ids, scores, weights, need, self.every, self.lookahead, complete)
            if out is not None:
                return Page(items=out[offset:need], source="precomputed", header=feed.header)
            n_read *= 2                          # the rule needs more of the feed (many items dropped): read on

    def filter_live(self, ids: np.ndarray, seen_since: np.ndarray) -> np.ndarray:
        """Mask of ``ids`` still active and not interacted with since the feed was computed."""
        if len(ids) == 0:
            return np.zeros(0, dtype=bool)
        inactive = np.asarray(self.r.smismember(self.keys.inactive, ids.tolist()), dtype=bool)
        return ~inactive & ~np.isin(ids, seen_since)

    def fallback(self, categories: list[int], limit: int, offset: int, seen: np.ndarray,
                 newest: Callable[[int], list[int]]) -> Page:
        """Popular items of ``categories`` (interleaved), then global popular; no boosts, seen/inactive dropped.

        The popular lists are published by workers when they load; before any worker has, ``newest(n)`` (the
        newest active listings) stands in.
        """
        pipe = self.r.pipeline(transaction=False)
        for c in categories:
            pipe.get(self.keys.popular_category(c))
        pipe.get(self.keys.popular_global)
        # A value that is not whole 8-byte ids is not a list this version wrote: left out, as if unpublished.
        lists = [np.frombuffer(b, dtype="<i8").astype(np.int64) for b in pipe.execute() if b and len(b) % 8 == 0]
        if len(lists) > 1:
            width = max(len(x) for x in lists[:-1])
            grid = np.full((len(lists) - 1, width), -1, dtype=np.int64)
            for k, x in enumerate(lists[:-1]):
                grid[k, : len(x)] = x
            merged = np.concatenate([grid.T.ravel(), lists[-1]])
            merged = merged[merged >= 0]
        else:
            merged = lists[0] if lists else np.empty(0, dtype=np.int64)
        if len(merged) == 0:
            merged = np.asarray(newest(offset + limit + len(seen)), dtype=np.int64)
        _, first = np.unique(merged, return_index=True)
        merged = merged[np.sort(first)]
        need = offset + limit
        head = merged[: need + len(seen) + self.lookahead]
        head = head[self.filter_live(head, seen)] if len(head) else head
        items = [(int(i), 0.0, False) for i in head[offset:need]]
        return Page(items=items, source="fallback", header=None)
