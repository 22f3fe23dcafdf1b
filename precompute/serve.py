"""What must be live at request time, applied to a precomputed feed: drop items deactivated or interacted with
since the feed was computed, and lift boosted items.

Boost rule: a boosted item already in the user's ranked feed (at most ``BOOST_LOOKAHEAD`` places below the
requested page) is lifted into the earliest free boost slot. Boost slots are constrained by density: any prefix of
the feed of length n holds at most ``n // BOOST_EVERY + 1`` boosted items (one in four with the default), so a
page is never all ads. Among waiting boosted items the higher weight goes first, then the better organic rank.
Boosts never add items the model did not rank for this user. The rule is applied to the feed from its top, so
pages are consistent: an item lifted onto page 1 does not appear again on page 2.
"""

from __future__ import annotations

import dataclasses
import heapq
import time
from collections.abc import Callable

import numpy as np
import redis

from . import defaults
from .store import HEADER_SIZE, RECORD_SIZE, CorruptFeed, FeedHeader, Keys, decode


@dataclasses.dataclass
class Page:
    items: list[tuple[int, float, bool]]    # (item_id, score, boosted)
    source: str                             # "precomputed" | "fallback"
    header: FeedHeader | None


def lift_boosts(ids: np.ndarray, scores: np.ndarray, weights: np.ndarray, need: int,
                every: int = defaults.BOOST_EVERY, lookahead: int = defaults.BOOST_LOOKAHEAD) -> list[tuple]:
    """Apply the boost rule to a filtered ranked list; returns the first ``need`` (id, score, boosted)."""
    boosted = weights > 0
    if not boosted.any():
        return [(int(i), float(s), False) for i, s in zip(ids[:need], scores[:need])]
    waiting: list[tuple[float, int]] = []     # (-weight, position)
    b_positions = np.flatnonzero(boosted)
    horizon = need + lookahead
    for p in b_positions[b_positions < horizon]:
        heapq.heappush(waiting, (-float(weights[p]), int(p)))
    out: list[tuple] = []
    n_boosted = 0
    organic = 0
    n = len(ids)
    while len(out) < need and (organic < n or waiting):
        slot = len(out)
        if waiting and n_boosted < slot // every + 1:
            _, p = heapq.heappop(waiting)
            out.append((int(ids[p]), float(scores[p]), True))
            n_boosted += 1
            continue
        while organic < n and boosted[organic] and organic < horizon:
            organic += 1                          # already queued as a boost
        if organic >= n:
            if not waiting:
                break
            _, p = heapq.heappop(waiting)         # nothing organic left: boosted items fill the tail
            out.append((int(ids[p]), float(scores[p]), True))
            n_boosted += 1
            continue
        if boosted[organic]:                      # beyond the lookahead: waits for a boost slot like the rest
            heapq.heappush(waiting, (-float(weights[organic]), organic))
            organic += 1
            continue
        out.append((int(ids[organic]), float(scores[organic]), False))
        organic += 1
    return out


class LiveFeeds:
    def __init__(self, r: redis.Redis, keys: Keys) -> None:
        self.r = r
        self.keys = keys

    def page(self, user_id: int, limit: int, offset: int, now: float | None = None) -> Page | None:
        """The live page of ``user_id``'s precomputed feed, or None when the user has no feed."""
        now = time.time() if now is None else now
        need = offset + limit
        n_read = need + defaults.BOOST_LOOKAHEAD + limit
        key = self.keys.feed(user_id)
        while True:
            pipe = self.r.pipeline(transaction=False)
            pipe.getrange(key, 0, HEADER_SIZE + n_read * RECORD_SIZE - 1)
            pipe.zrange(self.keys.seen(user_id), 0, -1, withscores=True)
            blob, seen = pipe.execute()
            if not blob:
                return None
            try:
                feed = decode(blob)
            except CorruptFeed:
                return None                      # treated as missing: served from fallback and recomputed
            ids, scores = feed.items, feed.scores
            seen_since = np.array([int(m) for m, v in seen if v > feed.header.history_version], dtype=np.int64)
            keep = self.filter_live(ids, seen_since)
            ids, scores = ids[keep], scores[keep]
            weights = self.boost_weights(ids, now)
            out = lift_boosts(ids, scores, weights, need)
            if len(out) >= need or n_read >= feed.header.count:
                return Page(items=out[offset:need], source="precomputed", header=feed.header)
            n_read *= 2                          # many items dropped: read further down the feed

    def filter_live(self, ids: np.ndarray, seen_since: np.ndarray) -> np.ndarray:
        """Mask of ``ids`` still active and not interacted with since the feed was computed."""
        if len(ids) == 0:
            return np.zeros(0, dtype=bool)
        inactive = np.asarray(self.r.smismember(self.keys.inactive, ids.tolist()), dtype=bool)
        return ~inactive & ~np.isin(ids, seen_since)

    def boost_weights(self, ids: np.ndarray, now: float) -> np.ndarray:
        if len(ids) == 0:
            return np.zeros(0)
        raw = self.r.hmget(self.keys.boosts, ids.tolist())
        weights = np.zeros(len(ids))
        for k, v in enumerate(raw):
            if v is not None:
                w, _, expires = v.partition(b":")
                if float(expires) > now:
                    weights[k] = float(w)
        return weights

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
        lists = [np.frombuffer(b, dtype="<u4").astype(np.int64) for b in pipe.execute() if b]
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
        head = merged[: need + len(seen) + defaults.BOOST_LOOKAHEAD]
        head = head[self.filter_live(head, seen)] if len(head) else head
        items = [(int(i), 0.0, False) for i in head[offset:need]]
        return Page(items=items, source="fallback", header=None)
