"""The live page: reading a user's precomputed feed and what is live at request time, for the page's rules
(``rules.py``, which says them in order: inactive and seen-since items dropped, the scroll's and the request's left
out, boosts lifted, new items placed, categories spread). Users without a readable feed get the fallback
(``fallback.py``), by the same rules.

A page reads only its own user's keys, in one round trip on one slot (``{u:<id>}``): the first bytes of the feed
and the newest of the user's recent seen items, in which those seen since the feed's history version are found.
Boosts and deactivations come from the process's in-memory copy of the item states (``item_states.ItemStatesCopy``),
refreshed at most every ``PREFEED_LIVE_REFRESH_MS``; the items' categories from its copy of them
(``categories.ItemCategories``).
"""

from __future__ import annotations

import dataclasses

import redis

from ..settings import Settings
from .boosts import BoostRule
from .client import is_cluster
from .codec import MAX_HEADER_SIZE, RECORD_SIZE, CorruptFeed, FeedHeader, decode
from .categories import ItemCategories
from .cursor import Scroll
from .diversity import OFF, Diversity
from .item_states import ItemStatesCopy
from .keys import Keys
from .new_items import TASTE, NewItemRule, NewItemsCopy
from .rules import Ask, Item, Listed, NewOffer, apply, seen_flags


@dataclasses.dataclass
class Page:
    items: list[Item]                       # (item_id, score, boosted)
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
        self.boost_rule = BoostRule.of(settings)
        self.states = ItemStatesCopy(r, self.keys, settings.live_refresh_ms)
        #: the deployment's diversity rule, and where items' categories come from (None: the rule is never applied)
        self.diversity = Diversity.of(settings) if categories is not None else OFF
        self.categories = categories
        #: the new-item rule and this process's copy of the items waiting for it
        self.new_rule = NewItemRule.of(settings)
        self.new_items = NewItemsCopy(r, self.keys)

    def page(self, user_id: int, limit: int, offset: int, scroll: Scroll | None = None,
             exclude: frozenset[int] = frozenset(), diversity: Diversity | None = None) -> Page | None:
        """The live page of ``user_id``'s precomputed feed, or None when the user has no feed. With ``scroll``
        (``cursor.py``): the next ``limit`` items of that scroll, ``offset`` ignored. ``exclude``: item ids the
        page leaves out, as it leaves out those the scroll served. ``diversity``: the request's rule (default: the
        deployment's)."""
        found = self._assemble(user_id, Ask.of(limit, offset, scroll, exclude, self.rule(diversity)))
        return None if found is None else found[0]

    def rule(self, diversity: Diversity | None) -> Diversity:
        """The diversity rule a page applies: the request's, else the deployment's; off without categories."""
        rule = self.diversity if diversity is None else diversity
        return rule if self.categories is not None else OFF

    def new_offer(self, user_id: int, ids: list[int], left_out: frozenset[int], seen_ids: set[int],
                  tail: list) -> NewOffer | None:
        """What the new-item rule offers this page (``new_items.py``), None when it is off or nothing waits:
        ``ids``, the stored feed's prefix, whose first items say the user's taste; ``left_out``, ``seen_ids``,
        ``tail``: what the page leaves out (served or excluded, seen since the feed, seen lately)."""
        rule = self.new_rule
        if not rule.on:
            return None
        self.new_items.sync(self.states.new_seq)             # the counter as the page's state refresh read it
        offered = self.new_items.offer(self.states.clock, rule.window)
        if not offered:
            return None
        taste = None if self.categories is None else frozenset(self.categories.of(ids[:TASTE]))
        lately = {int(i) for i, _ in tail}
        inactive = self.states.is_inactive

        def blocked(i: int) -> bool:
            return i in left_out or i in seen_ids or i in lately or inactive(i)

        return NewOffer(rule.every, offered, taste, blocked, user_id)

    def explain(self, user_id: int, limit: int, offset: int) -> tuple[Page, list[Dropped], list[int]] | None:
        """The live page (as ``page``), the feed items the live rules dropped ranked above the deepest item the page
        shows (the operator's "why not this one"), and each shown item's organic rank (0-based place in the stored
        feed: a boosted item's distance lifted). None when the user has no feed."""
        found = self._assemble(user_id, Ask.of(limit, offset, diversity=self.rule(None)))
        if found is None:
            return None
        page, listed = found
        ids, inactive, seen = listed.ids, listed.inactive, listed.seen
        place = {i: k for k, i in enumerate(ids)}
        ranks = [place.get(i, -1) for i, _, _ in page.items]
        deepest = max(ranks, default=-1)
        dropped = [Dropped(ids[k], k, listed.scores[k], "inactive" if inactive[k] else "seen since")
                   for k in range(len(ids)) if (inactive[k] or seen[k]) and (k <= deepest or not page.items)]
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

    def _assemble(self, user_id: int, ask: Ask) -> tuple[Page, Listed] | None:
        """The page the rules make of the user's feed (``rules.apply``), and the feed's prefix they read, as
        ``rules.Listed`` (what ``explain`` shows); None when there is no readable feed.

        Past the read, a page works on Python lists: it looks at ~150 items, where each numpy call costs more than
        a list comprehension over them (one binary search over the inactive items is the exception)."""
        self.states.refresh()
        n_read = ask.depth + len(ask.left_out) + self.boost_rule.lookahead + ask.limit
        keys = [self.keys.feed(user_id), self.keys.seen_recent(user_id)]
        while True:
            blob, tail = self._read(keys, MAX_HEADER_SIZE + n_read * RECORD_SIZE)
            try:
                feed = decode(blob)
            except CorruptFeed:
                return None                      # none, or unreadable: served from fallback and recomputed
            # The whole value was read when it has no more records than were returned (or fewer than asked for).
            complete = len(feed.items) >= feed.header.count or len(feed.items) < n_read
            inactive = self.states.inactive_flags(feed.items)
            ids = feed.items.tolist()
            seen_ids = self._seen_since(keys[1], feed.header.history_version, tail)
            listed = Listed(ids, feed.scores.tolist(), inactive, seen_flags(ids, inactive, seen_ids), complete)
            served = apply(listed, ask, self.states.boosts_in_force(), self.boost_rule, self.categories,
                           self.new_offer(user_id, ids, ask.left_out, seen_ids, tail))
            if served is not None:
                return Page(served.items, "precomputed", feed.header, recent=served.recent), listed
            n_read *= 2                          # the rules need more of the feed (many items dropped): read on


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
