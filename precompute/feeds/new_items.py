"""New items that get seen: a listing created an hour ago has no events, so no source proposes it and the model has
nothing to rank it by. Until it has been shown enough to compete on its own columns, it is given a bounded share of
the precomputed pages of users whose taste matches it.

**Which items wait.** An item created through the API (``PUT``/``POST /items``) within ``PREFEED_NEW_ITEM_WINDOW``
of the events' clock (its ``created_at``, or the clock when it gives none), active, is registered as waiting. It
waits until it has had ``PREFEED_NEW_ITEM_IMPRESSIONS`` impressions or leaves the window, whichever comes first; it is
never registered again. At most ``PREFEED_NEW_ITEM_MAX`` items are tracked at once (the oldest leave first). A
catalogue imported in bulk registers none: an import is a back-fill, not a listing going live.

**The rule** (``place``, a plain function over the page's list): one slot in every ``PREFEED_NEW_ITEM_EVERY`` of a
scroll, the last of each run of that many (slots ``every - 1``, ``2 * every - 1``, ... counted from the scroll's top,
so it holds across pages), holds a waiting item when one fits the user: not on the page or served before in the
scroll, not excluded, not inactive, not interacted with, and sharing a category with one of the first ``TASTE``
items of the user's stored feed (an item with no category fits every user). Among those that fit, each slot takes
one by the user and the slot, so the waiting items are spread over the users rather than all shown to each. The
items below move down one place; a boosted item keeps its density (it can only be delayed). It runs after the boost
rule and before the diversity rule, which may delay the new item as it may any item.

**Counting.** Impressions are counted from the pages recorded (``experiments/impressions.py``): an API process's
flush thread adds the impressions its sent pages gave each waiting item (``NewItems.count``, one script), and an
item that reaches the threshold stops waiting in the same step. Every API process holds a copy of the waiting items
(``NewItemsCopy``), read again within ``PREFEED_LIVE_REFRESH_MS`` of a change. So an item leaves the rule without a
retrain, after at most the threshold plus the pages served in one flush and one refresh interval. Pages not recorded
(``PREFEED_IMPRESSIONS=off``, or past ``PREFEED_IMPRESSIONS_USER_MAX``) count nothing: with impressions off the rule
keeps an item until it leaves the window.

Keys, in the ``{live}`` slot (one atomic script per change): ``new`` (hash: item id -> ``"created_at cat,cat"``, the
items waiting), ``new_shown`` (hash: item id -> impressions counted), ``new_at`` (zset: item id -> created_at, every
item registered within the window, waiting or not, so one is never registered twice), ``new_seq`` (a counter every
change to ``new`` increments). A Redis that loses its data forgets them: items created before are no longer given
slots (they compete on their columns, as after the window).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
import redis

from .keys import Keys

#: The user's strongest stored items whose categories say what a new item must share to be offered to them.
TASTE = 10

# KEYS: new, new_shown, new_at, new_seq. ARGV[1]: the operation, ARGV[2]: the oldest created_at still new,
# ARGV[3]: the impressions an item waits for, ARGV[4]: the most items tracked; then the operation's arguments.
# Returns the number of items that started or stopped waiting.
_CHANGE = """
local oldest, threshold, most = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local changed = 0
local function forget(ids)
  for _, id in ipairs(ids) do
    changed = changed + redis.call('HDEL', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
    redis.call('ZREM', KEYS[3], id)
  end
end
forget(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[2], 'LIMIT', 0, 1000))
if ARGV[1] == 'add' then
  -- ARGV[5..]: triples of item id, created_at, categories ('1,4' or '')
  for i = 5, #ARGV, 3 do
    if tonumber(ARGV[i + 1]) >= oldest and redis.call('ZSCORE', KEYS[3], ARGV[i]) == false then
      redis.call('ZADD', KEYS[3], ARGV[i + 1], ARGV[i])
      redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1] .. ' ' .. ARGV[i + 2])
      changed = changed + 1
    end
  end
  local extra = redis.call('ZCARD', KEYS[3]) - most
  if extra > 0 then forget(redis.call('ZRANGE', KEYS[3], 0, extra - 1)) end
elseif ARGV[1] == 'shown' then
  -- ARGV[5..]: pairs of item id, impressions
  for i = 5, #ARGV, 2 do
    if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then
      if redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1]) >= threshold then
        changed = changed + redis.call('HDEL', KEYS[1], ARGV[i])
      end
    end
  end
end
if changed > 0 then redis.call('INCR', KEYS[4]) end
return changed
"""


class NewItemRule(NamedTuple):
    """The deployment's settings of the rule (``PREFEED_NEW_ITEM_*``); ``every`` 0: off."""

    every: int              # one slot in this many
    window: float           # s an item is new after its created_at
    impressions: int        # impressions it waits for
    most: int               # items tracked at once

    @classmethod
    def of(cls, settings) -> NewItemRule:
        return cls(settings.new_item_every, settings.new_item_window, settings.new_item_impressions,
                   settings.new_item_max)

    @property
    def on(self) -> bool:
        return self.every > 0


class NewItems:
    """Registers new items and counts their impressions (the API's item routes and impression flush thread)."""

    def __init__(self, r: redis.Redis, keys: Keys, rule: NewItemRule) -> None:
        self.r, self.keys, self.rule = r, keys, rule
        self._change = r.register_script(_CHANGE)

    def _run(self, op: str, now: float, args: list[str]) -> int:
        k, rule = self.keys, self.rule
        return int(self._change(keys=[k.live_new, k.live_new_shown, k.live_new_at, k.live_new_seq],
                                args=[op, repr(now - rule.window), str(rule.impressions), str(rule.most), *args]))

    def add(self, items: Iterable[tuple[int, float, Sequence[int]]], now: float) -> int:
        """Register ``(item id, created_at, categories)`` as waiting, those created within the window before ``now``
        (the events' clock) and never registered; returns how many started waiting."""
        args = [x for i, created, cats in items
                for x in (str(int(i)), repr(float(created)), ",".join(str(int(c)) for c in cats))]
        return self._run("add", now, args) if args else 0

    def count(self, pages: Iterable[Sequence[int]], waiting: frozenset[int], now: float) -> int:
        """Add the impressions ``pages`` (item ids per page) gave the items of ``waiting`` (the caller's copy; the
        script counts only items still waiting); returns how many stopped waiting."""
        counts: dict[int, int] = {}
        for items in pages:
            for i in waiting.intersection(items):
                counts[i] = counts.get(i, 0) + 1
        if not counts:
            return 0
        return self._run("shown", now, [x for i, n in counts.items() for x in (str(i), str(n))])

    def shown(self, item_id: int) -> int:
        """Impressions counted for ``item_id`` while it was registered (0: none, or forgotten)."""
        return int(self.r.hget(self.keys.live_new_shown, str(int(item_id))) or 0)


class NewItemsCopy:
    """One process's copy of the items waiting, read again when the ``new_seq`` counter moved. A page's reader
    learns the counter with the item states' (``ItemStatesCopy.refresh``: one read of the ``{live}`` counters every
    ``PREFEED_LIVE_REFRESH_MS``), so an API process sees a change within that interval."""

    def __init__(self, r: redis.Redis, keys: Keys) -> None:
        self.r, self.keys = r, keys
        self.seq = -1
        #: item id -> (created_at, its categories); and the same ids, for the flush thread's count
        self.waiting: dict[int, tuple[float, frozenset[int]]] = {}
        self.ids: frozenset[int] = frozenset()
        self._offer: list[tuple[int, frozenset[int]]] = []      # all of them, ascending by id
        self._oldest = float("inf")                              # the earliest created_at among them

    def sync(self, seq: int | None = None) -> None:
        """Read the items again if the counter is no longer ``self.seq``: ``seq`` as the caller last read it
        (default: read now)."""
        if seq is None:
            seq = int(self.r.get(self.keys.live_new_seq) or 0)
        if seq != self.seq:
            pipe = self.r.pipeline(transaction=True)          # one slot: the set and its counter together
            pipe.get(self.keys.live_new_seq)
            pipe.hgetall(self.keys.live_new)
            seq, rows = pipe.execute()
            self.waiting = {int(i): _entry(v) for i, v in rows.items()}
            self.ids = frozenset(self.waiting)
            self._offer = sorted((i, cats) for i, (_, cats) in self.waiting.items())
            self._oldest = min((created for created, _ in self.waiting.values()), default=float("inf"))
            self.seq = int(seq or 0)

    def offer(self, clock: float | None, window: float) -> list[tuple[int, frozenset[int]]]:
        """The items waiting that are still new at the events' ``clock`` (all when it is not known), ascending by
        id: ``(item id, categories)``."""
        if clock is None or self._oldest >= clock - window:
            return self._offer                  # the usual case: none has left the window since the copy was read
        return [(i, cats) for i, cats in self._offer if self.waiting[i][0] >= clock - window]


def _entry(value: bytes | str) -> tuple[float, frozenset[int]]:
    text = value.decode() if isinstance(value, bytes) else value
    created, _, cats = text.partition(" ")
    return float(created), frozenset(int(c) for c in cats.split(",") if c)


def place(items: list[tuple[int, float, bool]], start: int, every: int, offered: Sequence[tuple[int, frozenset[int]]],
          taste: frozenset[int] | None, blocked, user_id: int) -> list[tuple[int, float, bool]]:
    """``items`` (a served list ``(item_id, score, boosted)`` whose first slot is the scroll's ``start``) with a
    waiting item in each slot ``s`` where ``(s + 1) % every == 0``, when one fits (see the module doc): of
    ``offered`` (``(item id, categories)``), one not on the list, not ``blocked(item id)`` and sharing a category
    with ``taste`` (or without a category; ``taste`` None: every item fits). The list keeps its length: its last
    items move past its end. A placed item carries the score of the item whose slot it took, and is not boosted."""
    if every <= 0 or not offered or not items:
        return items
    first = (every - 1 - start) % every            # the first slot of ``items`` that is a new item's
    if first >= len(items):
        return items
    out = list(items)
    on_page = {i for i, _, _ in items}
    n = len(offered)
    for k in range(first, len(out), every):
        # from a place of the user's and the slot's, the first offered item that fits: most fit, so a page checks a
        # few of them however many wait (when none fits, each is checked once and the page has no new item)
        begin = (user_id * 1_000_003 + start + k) % n
        for j in range(n):
            i, cats = offered[(begin + j) % n]
            if i not in on_page and (taste is None or not cats or not cats.isdisjoint(taste)) and not blocked(i):
                break
        else:
            break
        on_page.add(i)
        out.insert(k, (i, out[k][1], False))
    return out[:len(items)]
