"""The diversity rule: at most K items of one category in any W consecutive slots, as one plain function over lists.

The rule reorders the served list the boost rule made (``boosts.lift_boosts``: inactive and seen-since items already
dropped, boosts lifted), slot by slot from the top, given the categories of the last W-1 slots the scroll served
before (none on a first page):

- slot ``s`` goes to the first of the next ``DEPTH`` items not yet placed that *fits*: its category holds fewer
  than K of the W-1 slots before ``s`` (the window that ``s`` closes), or it has no category;
- a boosted item is never moved up past an item before it, only delayed (it may take a slot only when it is the
  first item not yet placed): the boost rule's density cap (one in ``every`` slots from the scroll's top) then holds
  on the reordered list, since every boosted item placed sits at or below the place the boost rule gave it;
- **relaxation**: when none of the next ``DEPTH`` items fits (a catalogue of one category, a feed whose next items
  are all of the categories the window holds K of), the first item not yet placed takes the slot, as the boost rule
  ordered it. A page is never shorter than without the rule and never stalls; the rule then holds again from the
  first slot a fitting item exists.

The category that counts is the item's lowest category id (``categories.ItemCategories``): an item listed in several
categories counts in one, the same one on every page and every process, with no "primary" field the catalogue does
not have; counting it in every category instead would let one broad item crowd out several. An item without a
category counts in none and always fits.

So an item passed over waits at most W-1 slots (its category then holds none of the window) — possibly onto the next
page of a scroll, where it is at the top of what is left, so the scroll still skips nothing. The result for the first
``need`` slots depends on the list's first ``need + DEPTH - 1`` items only, and on nothing of the page asked for:
offset pages read one after another give the pages of one big read. (``Settings.diversity_max``,
``diversity_window``; per request ``?diversity=K/W``.)
"""

from __future__ import annotations

import struct
from bisect import bisect_left, insort
from collections import defaultdict
from collections.abc import Sequence
from typing import NamedTuple

#: How far down the list the rule looks for an item that fits before it relaxes (items).
DEPTH = 50
#: Category of an item without one: it counts in no window.
NONE = -1
#: The largest window a deployment or a request may set: a scroll's cursor carries W-1 categories.
WINDOW_MAX = 50


class Diversity(NamedTuple):
    """The rule's setting: at most ``most`` items of one category in any ``window`` consecutive slots (``most``
    0: off)."""

    most: int
    window: int

    @property
    def on(self) -> bool:
        return 0 < self.most < self.window

    @classmethod
    def of(cls, settings) -> Diversity:
        """The deployment's rule (``PREFEED_DIVERSITY_MAX``, ``PREFEED_DIVERSITY_WINDOW``)."""
        return cls(settings.diversity_max, settings.diversity_window)

    @property
    def past(self) -> int:
        """How far past a page's last slot the rule reads the list (``DEPTH - 1`` items; 0 when off)."""
        return DEPTH - 1 if self.on else 0

    @property
    def carried(self) -> int:
        """The categories of the last slots a scroll's next page must know (W-1; 0 when off)."""
        return self.window - 1 if self.on else 0


OFF = Diversity(0, 0)


def spread(cats: Sequence[int], boosted: Sequence[bool], need: int, rule: Diversity,
           recent: Sequence[int] = ()) -> list[int]:
    """The places (indexes into the list) of the first ``need`` slots of the list reordered by the rule: ``cats``
    each listed item's category (``NONE``: none), ``boosted`` whether the boost rule lifted it, ``recent`` the
    categories of the slots served before this list's first, oldest first (only the last W-1 count).

    Reads the list's first ``need + DEPTH - 1`` items at most: a caller passes at least those, or the whole list.
    While every slot takes the first item not yet placed (the slots before the first item passed over), a slot costs
    one set look-up (``full``: the categories holding K of the window). From the first item passed over, the items
    not yet placed wait in one queue per category, the boosted ones in a queue of their own (``_Queues``), and a
    slot takes the first of the queues' first items whose category is not full: kept sorted, they are passed over
    at most once per full category, and the items passed over before are never scanned again. Once the items left
    are of one queue (one category, or boosted items only), every slot left takes the first of them: they are
    placed in their order at once (a feed of one category, or a page's tail past its other categories' items).
    """
    n = len(cats)
    if not rule.on:
        return list(range(min(need, n)))
    most, back = rule.most, rule.window - 1
    hist = list(recent[max(0, len(recent) - back):])        # the categories served, oldest first: the window's tail
    counts: dict[int, int] = {}
    for c in hist:
        if c != NONE:
            counts[c] = counts.get(c, 0) + 1
    full = {c for c, k in counts.items() if k >= most}
    out: list[int] = []
    waiting: _Queues | None = None                          # None while no item was passed over
    for s in range(min(need, n)):
        if waiting is None:
            c = cats[s]
            if c not in full:
                p = s                                       # the list's own order, while its next item fits
            else:
                waiting = _Queues(cats, boosted, s)
        if waiting is not None:
            if len(waiting.heads) <= 1:                     # one queue left (one category, or boosted items
                out += waiting.rest(min(need, n) - s)       # only): every slot takes the first item left
                break
            p = waiting.take(full)
            c = cats[p]
        out.append(p)
        hist.append(c)                                      # the window moves on one slot
        if c != NONE:
            k = counts[c] = counts.get(c, 0) + 1
            if k >= most:
                full.add(c)
        if len(hist) > back:
            gone = hist[-back - 1]
            if gone != NONE:
                k = counts[gone] = counts[gone] - 1
                if k < most:
                    full.discard(gone)
    return out


#: The key of the boosted items' queue in ``_Queues`` (no category id: a boosted item is never taken from below).
_BOOSTED = None


class _Queues:
    """The items ``spread`` has not placed, from the first one it passed over: ``queues``, each category's places
    (the boosted items' under ``_BOOSTED``), the first last; ``heads``, each queue's first place and key, ascending
    (``heads[0]`` is the first item left); ``jumped``, the places taken ahead of the first item left, ascending."""

    def __init__(self, cats: Sequence[int], boosted: Sequence[bool], start: int) -> None:
        self.cats = cats
        queues: defaultdict[int | None, list[int]] = defaultdict(list)
        self.queues = queues
        for q in range(len(cats) - 1, start - 1, -1):
            queues[_BOOSTED if boosted[q] else cats[q]].append(q)
        self.heads = sorted((queue[-1], key) for key, queue in queues.items())
        self.jumped: list[int] = []

    def rest(self, k: int) -> list[int]:
        """The places of the first ``k`` items left, in list order, when they are of one queue (or none is left)."""
        return [q for queue in self.queues.values() for q in queue[:-k - 1:-1]]

    def take(self, full: set[int]) -> int:
        """Take the place of the next slot, given the categories the window it closes holds K of: the first item
        left if it fits; else the first item of a category that fits, if it is among the first ``DEPTH`` left; else
        (relaxation) the first item left."""
        heads, at = self.heads, 0
        first = heads[0][0]
        if self.cats[first] in full:
            for j in range(1, len(heads)):
                q, key = heads[j]
                if key is not _BOOSTED and key not in full:
                    # the first item of a category that fits: the items left before it, less those jumped
                    jumped = self.jumped
                    if q - first < DEPTH or q - first - (bisect_left(jumped, q) - bisect_left(jumped, first)) < DEPTH:
                        at = j
                        insort(jumped, q)
                    break
        q, key = heads.pop(at)
        queue = self.queues[key]
        queue.pop()
        if queue:
            insort(heads, (queue[-1], key))
        return q


def categories_after(recent: Sequence[int], page_cats: Sequence[int], rule: Diversity) -> tuple[int, ...]:
    """The categories of a scroll's last W-1 slots once it has served a page whose items are of ``page_cats``: what
    its cursor carries to the next page (``cursor.py``). Empty when the rule is off."""
    keep = rule.carried
    if not keep:
        return ()
    return tuple([*recent, *page_cats][-keep:])


def pack(recent: Sequence[int]) -> bytes:
    """``recent`` as a scroll's cursor carries it (``cursor.py``, layout 4): a count byte, then each category as a
    little-endian signed 64-bit integer: at most 1 + 49 × 8 bytes (W at most ``WINDOW_MAX``), ~520 characters of
    cursor; 73 bytes (~100 characters) at W = 10."""
    return bytes([len(recent)]) + struct.pack(f"<{len(recent)}q", *recent)


def unpack(body: bytes, packed: bool = True) -> tuple[tuple[int, ...], bytes]:
    """The categories ``pack`` wrote at the start of ``body`` (none unless ``packed``), and the rest of it."""
    if not packed:
        return (), body
    n = body[0]
    return struct.unpack_from(f"<{n}q", body, 1), body[1 + 8 * n:]
