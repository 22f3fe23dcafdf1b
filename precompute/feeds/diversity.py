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
from bisect import bisect_left
from collections import deque
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
    While every slot takes the first item not yet placed (most slots of a page), a slot costs one look-up. From the
    first item passed over, the items not yet placed are also queued by category (``_Waiting``): a slot whose first
    item does not fit takes the first waiting item of a category that fits, without rescanning the next ``DEPTH``.
    """
    n = len(cats)
    if not rule.on:
        return list(range(min(need, n)))
    most, back = rule.most, rule.window - 1
    window = deque(recent[max(0, len(recent) - back):])
    counts: dict[int, int] = {}
    for c in window:
        if c != NONE:
            counts[c] = counts.get(c, 0) + 1
    out: list[int] = []
    waiting: _Waiting | None = None             # None while no item was passed over: the next item is len(out)
    while len(out) < need:
        if waiting is None:
            p = len(out)
            if p == n:
                break
            c = cats[p]
            if c != NONE and counts.get(c, 0) >= most:
                waiting = _Waiting(cats, boosted, p)
        if waiting is not None:
            if not waiting.left:
                break
            p = waiting.take(counts, most)
            c = cats[p]
        out.append(p)
        window.append(c)
        if c != NONE:
            counts[c] = counts.get(c, 0) + 1
        if len(window) > back:
            gone = window.popleft()
            if gone != NONE:
                counts[gone] -= 1
    return out


class _Waiting:
    """The items ``spread`` has not placed, from the first one it passed over: ``left``, their places in list order,
    and ``queues``, each category's places among them of items not boosted (the only ones that may be taken from
    below the first: a boosted item is never moved up)."""

    def __init__(self, cats: Sequence[int], boosted: Sequence[bool], start: int) -> None:
        self.cats = cats
        self.boosted = boosted
        self.left = list(range(start, len(cats)))
        self.queues: dict[int, deque[int]] = {}
        for p in self.left:
            if not boosted[p]:
                queue = self.queues.get(cats[p])
                if queue is None:
                    self.queues[cats[p]] = deque((p,))
                else:
                    queue.append(p)

    def take(self, counts: dict[int, int], most: int) -> int:
        """Take the place of the next slot, given the counts of the window it closes: the first item left if it
        fits; else the first item of a category that fits, if it is among the first ``DEPTH`` left; else
        (relaxation) the first item left."""
        left, cats = self.left, self.cats
        p, at = left[0], 0
        c = cats[p]
        if c != NONE and counts.get(c, 0) >= most:
            fits = [queue[0] for k, queue in self.queues.items() if k == NONE or counts.get(k, 0) < most]
            if fits:
                first = min(fits)
                below = bisect_left(left, first)
                if below < DEPTH:
                    p, at, c = first, below, cats[first]
        del left[at]
        if not self.boosted[p]:
            queue = self.queues[c]
            queue.popleft()                     # ``p`` is its category's first: none before it is left
            if not queue:
                del self.queues[c]
        return p


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
