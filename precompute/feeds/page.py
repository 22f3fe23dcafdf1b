"""The live page: what must be live at request time, applied to a precomputed feed. Items deactivated or interacted
with since the feed was computed are dropped, boosted items are lifted (``boosts.py``), then the diversity rule
spreads the categories (``diversity.py``, when on). Users without a feed get the fallback (``fallback.py``).

A page reads only its own user's keys, in one round trip on one slot (``{u:<id>}``): the first bytes of the feed
and the items the user interacted with since the feed's history version. Boosts and deactivations come from the
process's in-memory copy of the item states (``item_states.ItemStatesCopy``), refreshed at most every
``PREFEED_LIVE_REFRESH_MS``; the items' categories from its copy of them (``categories.ItemCategories``).
"""

from __future__ import annotations

import dataclasses
from itertools import compress

import numpy as np
import redis

from ..settings import Settings
from .boosts import lift_boosts
from .client import is_cluster
from .codec import MAX_HEADER_SIZE, RECORD_SIZE, CorruptFeed, FeedHeader, decode
from .categories import ItemCategories
from .cursor import Scroll
from .diversity import OFF, Diversity, categories_after, spread
from .item_states import ItemStatesCopy
from .keys import Keys
from .new_items import TASTE, NewItemRule, NewItemsCopy, place


@dataclasses.dataclass
class Page:
    items: list[tuple[int, float, bool]]    # (item_id, score, boosted)
    source: str                             # "precomputed" | "fallback"
    header: FeedHeader | None
    #: False for a fallback page of a user the database holds no event of (a new visitor, or an id made up): such a
    #: page is placed in no experiment and not recorded (docs/experiments.md, "Who is counted").
    known: bool = True
    #: the categories of the scroll's last W-1 slots once this page is served: what its next cursor carries
    recent: tuple[int, ...] = ()


@dataclasses.dataclass
class Dropped:
    item_id: int
    rank: int               # 0-based place in the stored feed
    score: float
    reason: str             # "inactive" | "seen since" (interacted with after the feed's history version)


#: The newest seen items read with every page: the items seen since the feed are found in them unless there are more.
SEEN_TAIL = 8


class PageReader:
    """Reads users' pages: their precomputed feed with the live rules applied (one per API process)."""

    def __init__(self, r: redis.Redis, settings: Settings, categories: ItemCategories | None = None) -> None:
        self.r = r
        #: The connections of a single Redis (None: a cluster), which a page's read takes one of itself
        self.pool = None if is_cluster(r) else r.connection_pool
        self.keys = Keys(settings.key_prefix)
        self.every = settings.boost_every
        self.lookahead = settings.boost_lookahead
        self.states = ItemStatesCopy(r, self.keys, settings.live_refresh_ms)
        #: the deployment's diversity rule, and where items' categories come from (None: the rule is never applied)
        self.diversity = Diversity.of(settings) if categories is not None else OFF
        self.categories = categories
        #: the new-item rule and this process's copy of the items waiting for it
        self.new_rule = NewItemRule.of(settings)
        self.new_items = NewItemsCopy(r, self.keys, settings.live_refresh_ms)

    def page(self, user_id: int, limit: int, offset: int, scroll: Scroll | None = None,
             exclude: frozenset[int] = frozenset(), diversity: Diversity | None = None) -> Page | None:
        """The live page of ``user_id``'s precomputed feed, or None when the user has no feed. With ``scroll``
        (``cursor.py``): the next ``limit`` items of that scroll, ``offset`` ignored. ``exclude``: item ids the
        page leaves out, as it leaves out those the scroll served. ``diversity``: the request's rule (default: the
        deployment's)."""
        found = self._assemble(user_id, limit, offset, scroll, exclude, diversity)
        return None if found is None else found[0]

    def rule(self, diversity: Diversity | None) -> Diversity:
        """The diversity rule a page applies: the request's, else the deployment's; off without categories."""
        rule = self.diversity if diversity is None else diversity
        return rule if self.categories is not None else OFF

    def spread(self, items: list[tuple[int, float, bool]], need: int, rule: Diversity,
               scroll: Scroll | None) -> tuple[list[tuple[int, float, bool]], tuple[int, ...]]:
        """The first ``need`` of ``items`` (a served list: ``(item_id, score, boosted)``, its first
        ``need + rule.past`` or all) as the diversity rule orders them after the scroll's last slots, and the
        categories of the last W-1 slots once they are served."""
        if not rule.on:
            return items[:need], ()
        cats = self.categories.of([i for i, _, _ in items])
        before = scroll.recent if scroll is not None else ()
        order = spread(cats, [b for _, _, b in items], need, rule, before)
        return [items[p] for p in order], categories_after(before, [cats[p] for p in order], rule)

    def place_new(self, user_id: int, items: list[tuple[int, float, bool]], ids: list[int], start: int,
                  served: frozenset[int], seen_ids: set[int], tail: list) -> list[tuple[int, float, bool]]:
        """``items`` (the served list from slot ``start``) with the new items the rule gives slots to
        (``new_items.py``); ``ids``: the stored feed's prefix, whose first items say the user's taste; ``served``,
        ``seen_ids``, ``tail``: what the page leaves out (served or excluded, seen since the feed, seen lately)."""
        rule = self.new_rule
        if not rule.on:
            return items
        self.new_items.refresh()
        offered = self.new_items.offer(self.states.clock, rule.window)
        if not offered:
            return items
        taste = None if self.categories is None else frozenset(self.categories.of(ids[:TASTE]))
        lately = {int(i) for i, _ in tail}
        off = self.states.inactive_ids
        inactive = off.__contains__ if off is not None else \
            (lambda i: bool(self.states.inactive_flags(np.array([i]))[0]))

        def blocked(i: int) -> bool:
            return i in served or i in seen_ids or i in lately or inactive(i)

        return place(items, start, rule.every, offered, taste, blocked, user_id)

    def explain(self, user_id: int, limit: int, offset: int) -> tuple[Page, list[Dropped], list[int]] | None:
        """The live page (as ``page``), the feed items the live rules dropped ranked above the deepest item the page
        shows (the operator's "why not this one"), and each shown item's organic rank (0-based place in the stored
        feed: a boosted item's distance lifted). None when the user has no feed."""
        found = self._assemble(user_id, limit, offset)
        if found is None:
            return None
        page, ids, scores, inactive, seen_since = found
        place = {i: k for k, i in enumerate(ids)}
        ranks = [place.get(i, -1) for i, _, _ in page.items]
        deepest = max(ranks, default=-1)
        dropped = [Dropped(ids[k], k, scores[k], "inactive" if inactive[k] else "seen since")
                   for k in range(len(ids)) if (inactive[k] or seen_since[k]) and (k <= deepest or not page.items)]
        return page, dropped, ranks

    def _read(self, keys: list[str], n_bytes: int) -> tuple[bytes, list]:
        """The feed's first ``n_bytes`` bytes and its user's ``SEEN_TAIL`` newest seen items as (item, history
        version) pairs, oldest first, in one round trip: two plain reads pipelined on the user's slot. (A Lua
        script doing both cost Valkey 15-35 us a page; the pipeline's two reads ~2 us.)"""
        commands = (("GETRANGE", keys[0], 0, n_bytes - 1), ("ZRANGE", keys[1], -SEEN_TAIL, -1, "WITHSCORES"))
        if self.pool is None:
            pipe = self.r.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            blob, tail = pipe.execute()
        else:
            blob, tail = _both(self.pool, commands)
        # RESP2 answers [item, version, item, version, ...], RESP3 [[item, version], ...]
        return blob, tail if not tail or isinstance(tail[0], list) else list(zip(tail[::2], tail[1::2]))

    def _seen_since(self, key: str, version: int, tail: list) -> set[int]:
        """The items seen with a history version above ``version`` (the feed's): found in ``tail`` (the newest
        seen, oldest first) when it reaches back to one not above it or holds every seen item, else read (a second
        round trip, when more than ``SEEN_TAIL`` items were seen since the feed was computed). The two reads of a
        page are not one atomic step; an item seen between them is seen since the feed, and dropped."""
        found = set()
        for item, seen_at in reversed(tail):
            if float(seen_at) <= version:
                return found
            found.add(int(item))
        if len(tail) < SEEN_TAIL:
            return found
        return {int(i) for i in self.r.zrangebyscore(key, f"({version}", "+inf")}

    def _assemble(self, user_id: int, limit: int, offset: int, scroll: Scroll | None = None,
                  exclude: frozenset[int] = frozenset(), diversity: Diversity | None = None):
        """The page and what it was made from: the feed prefix read (ids, scores) and flags of its items dropped
        as inactive and as seen since, as lists; None when there is no readable feed.

        Past the read, a page works on Python lists: it looks at ~150 items, where each numpy call costs more than
        a list comprehension over them (one binary search over the inactive items is the exception)."""
        self.states.refresh()
        served = frozenset(scroll.served) if scroll is not None else frozenset()
        if exclude:
            served = served | exclude               # left out alike: neither is on the page
        need = limit if scroll is not None else offset + limit
        rule = self.rule(diversity)
        n_read = need + rule.past + len(served) + self.lookahead + limit
        keys = [self.keys.feed(user_id), self.keys.seen(user_id)]
        while True:
            blob, tail = self._read(keys, MAX_HEADER_SIZE + n_read * RECORD_SIZE)
            try:
                feed = decode(blob)
            except CorruptFeed:
                return None                      # none, or unreadable: served from fallback and recomputed
            # The whole value was read when it has no more records than were returned (or fewer than asked for).
            complete = len(feed.items) >= feed.header.count or len(feed.items) < n_read
            inactive = self.states.inactive_flags(feed.items)
            ids, scores = feed.items.tolist(), feed.scores.tolist()
            seen_ids = self._seen_since(keys[1], feed.header.history_version, tail)
            seen_since = [not off and i in seen_ids for i, off in zip(ids, inactive)] if seen_ids else \
                [False] * len(ids)
            flagged = bool(seen_ids) or any(inactive)
            if flagged or served:
                # one flag per item, then two selections in C (itertools.compress). A scroll's page with nothing
                # else dropped checks the served ids alone, in a comprehension: inside a request, where the
                # interpreter's loop is warm and C built-ins are not, that costs ~13 us at page 2 where
                # ``map(not_, map(served.__contains__, ids))`` cost ~16 us
                keep = [not (off or again or i in served) for i, off, again in zip(ids, inactive, seen_since)] \
                    if flagged else [i not in served for i in ids]
                kept_ids, kept_scores = list(compress(ids, keep)), list(compress(scores, keep))
            else:
                kept_ids, kept_scores = ids, scores         # nothing dropped (most offset pages)
            start, before = (0, 0) if scroll is None else (scroll.slots, scroll.boosted)
            out = lift_boosts(kept_ids, kept_scores, self.states.boosts_in_force(), need + rule.past, self.every,
                              self.lookahead, complete, start=start, boosted_before=before)
            if out is not None:
                out = self.place_new(user_id, out, ids, start, served, seen_ids, tail)
                out, recent = self.spread(out, need, rule, scroll)
                page = Page(items=out[offset:need] if scroll is None else out, source="precomputed",
                            header=feed.header, recent=recent)
                return page, ids, scores, inactive, seen_since
            n_read *= 2                          # the rule needs more of the feed (many items dropped): read on

    def servable(self, ids: np.ndarray, seen_since: np.ndarray) -> np.ndarray:
        """Mask of ``ids`` still active and not interacted with since the feed was computed."""
        self.states.refresh()
        return self.states.active_mask(ids) & ~np.isin(ids, seen_since)


def _both(pool: redis.ConnectionPool, commands: tuple) -> tuple:
    """The answers to ``commands`` sent together on one connection of ``pool`` (one round trip), retried as the
    client retries a command. What ``Redis.pipeline`` does, without its per-call set-up: a page's read took ~40 us
    more CPU through it than a plain ``GETRANGE`` (the serve benchmark's profile). A connection whose answers were
    not all read (an error on the way) is dropped, never returned to the pool out of step."""
    conn = pool.get_connection()
    try:
        return conn.retry.call_with_retry(lambda: _send_read(conn, commands), lambda error: conn.disconnect())
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


def _send_read(conn, commands: tuple) -> tuple:
    conn.send_packed_command(conn.pack_commands(commands))
    return tuple(conn.read_response() for _ in commands)
