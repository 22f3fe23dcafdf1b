"""The boost rule: lifting paid listings within a user's ranked feed, as one plain function over lists.

The served list is a function of the user's filtered feed (inactive and seen-since items already dropped) and the
boost weights alone, never of the page asked for, so reading pages one after another gives exactly the pages of one
big read. Slot by slot, from the top:

- a boosted item (weight > 0) already in the feed may fill slot ``s`` if its organic position is at most
  ``s + lookahead`` (it is lifted at most ``lookahead`` places), and only if a boost slot is free: the first ``s + 1``
  slots hold at most ``s // every + 1`` boosted items (one in ``every``, the first slot allowed);
- when a boost slot is free, the waiting boosted item with the highest weight takes it (then the better organic
  rank); otherwise the next organic item does. Boosted items are never shown as organic ones: one that no boost slot
  reaches waits below its organic place;
- once the organic items run out, every remaining boosted item may wait for a slot; those the density cap leaves
  without one are not shown.

Boosts never add an item the model did not rank for this user. (``Settings.boost_every``, ``boost_lookahead``.)
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import NamedTuple


class BoostRule(NamedTuple):
    """The rule's setting: at most one boosted item in ``every`` slots, lifted at most ``lookahead`` places."""

    every: int
    lookahead: int

    @classmethod
    def of(cls, settings) -> BoostRule:
        """The deployment's rule (``PREFEED_BOOST_EVERY``, ``PREFEED_BOOST_LOOKAHEAD``)."""
        return cls(settings.boost_every, settings.boost_lookahead)


def lift_boosts(ids: Sequence[int], scores: Sequence[float], weights: Mapping[int, float], need: int, every: int,
                lookahead: int, complete: bool = True, start: int = 0,
                boosted_before: int = 0) -> list[tuple[int, float, bool]] | None:
    """The first ``need`` ``(item_id, score, boosted)`` of the served list for the filtered feed ``ids``, given
    the boosted items and their weights (``weights``: item id -> weight > 0; an id absent is not boosted).

    ``ids`` may be a prefix of the filtered feed (``complete`` False): the result is then None when deciding the
    first ``need`` slots would look past it; the caller reads further and calls again. When it is not None it is
    exactly what the whole feed gives.

    ``start``, ``boosted_before``: a scroll's slots and boosted items already served (``cursor.py``), the served
    ones left out of ``ids``: the density cap then counts from the scroll's top, so it holds on the pages together.

    Plain Python lists and a dict, not numpy: a page looks at ~150 items, where each numpy call (~1-5 us) costs
    more than the loop it would replace.
    """
    n = len(ids)
    # Most prefixes hold no boosted item: ``isdisjoint`` finds out in C before a Python pass over the ids.
    b_pos = [] if weights.keys().isdisjoint(ids) else [k for k, i in enumerate(ids) if i in weights]
    if not b_pos:
        # Nothing boosted in what was read: the organic order, unless a boost past the prefix could still reach
        # one of the first ``need`` slots (or the prefix is shorter than the page).
        last = min(need, n)
        if need > 0 and not complete and (last < need or last - 1 + lookahead >= n):
            return None
        return [(ids[k], scores[k], False) for k in range(last)]
    # The loop runs once per served slot: Python numbers and locals only (it was the page's largest Python cost).
    n_b, is_boosted = len(b_pos), set(b_pos)
    push, pop = heapq.heappush, heapq.heappop
    out: list[tuple[int, float, bool]] = []
    append = out.append
    waiting: list[tuple[float, int]] = []          # (-weight, position) of boosted items that may be lifted
    bi = organic = n_boosted = 0
    for s in range(need):
        while organic < n and organic in is_boosted:
            organic += 1
        if not complete and (s + lookahead >= n or organic >= n):
            return None                              # the decision depends on items past the prefix
        horizon = s + lookahead if organic < n else n        # organic items ran out: every boost may wait
        while bi < n_b and b_pos[bi] <= horizon:
            p = b_pos[bi]
            push(waiting, (-weights[ids[p]], p))
            bi += 1
        if waiting and n_boosted + boosted_before <= (start + s) // every:
            p = pop(waiting)[1]
            append((ids[p], scores[p], True))
            n_boosted += 1
        elif organic < n:
            append((ids[organic], scores[organic], False))
            organic += 1
        else:
            break                                    # nothing organic left, and no boost slot for what waits
    return out
