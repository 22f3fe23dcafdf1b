"""The page's rules: one sequence that turns a ranked list into the page a user is served, for every page.

A page is cut from a ranked list: the user's precomputed feed (``page.py``), or, for a user without a readable
one, the fallback's list (``fallback.py``: popular items of the user's top categories interleaved, then global
popular). The same rules apply to both, in this order (``apply``):

1. **inactive** (``kept``): items deactivated are dropped (the process's copy of the item states);
2. **seen** (``kept``, flags from ``seen_flags``): items the user interacted with that the list may still hold are
   dropped. A feed was ranked without the items seen before it: it drops those seen *since* its history version
   (found in the user's recent seen items in Redis). The fallback is ranked for no one: it drops the items seen
   inside the seen window and those of the user's newest events;
3. **left out** (``kept``): the items the scroll already served (its cursor) and the request's ``exclude``;
4. **boosts** (``boosts.lift_boosts``): boosted items lifted, at most one in ``every`` slots counted from the
   scroll's top. The fallback's list has no boosts: it is no user's ranking for a paid listing to be lifted into;
5. **new items** (``new_items.place``): one slot in ``PREFEED_NEW_ITEM_EVERY`` from the scroll's top holds an item
   created lately that has not had its impressions yet, for a user whose taste it matches (precomputed pages only);
6. **diversity** (``diversify``, ``diversity.spread``): at most K items of one category in any W consecutive slots,
   after the scroll's last slots; boosted items are only delayed, so rule 4's density still holds;
7. **the page** (``apply``): the served list's slots from ``offset`` (a scroll's page: its next ``limit``).

Rules 1-3 are one selection (a flag per item, one pass); 4 to 6 decide slot by slot from the top. None of them
reads the page asked for, only the list before it, so pages read one after another are exactly one big read, and a
scroll's next page (the list less what it served, from its next slot) skips nothing. A rule that reads past the
page says how far (``Ask.depth``): the reader reads that much of the list, and more when rule 4 finds the prefix too
short to decide (``apply`` answers None).

A new rule is one function here and one line in ``apply``, between the rules it follows and precedes.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from itertools import compress
from operator import itemgetter
from typing import NamedTuple

from .boosts import BoostRule, lift_boosts
from .categories import ItemCategories
from .cursor import Scroll
from .diversity import OFF, Diversity, categories_after, spread
from .new_items import place

#: A served item: (item id, score, whether rule 4 lifted it).
Item = tuple[int, float, bool]
_ID, _BOOSTED = itemgetter(0), itemgetter(2)


class Ask(NamedTuple):
    """What one page asks of the rules."""

    offset: int                     # the page's first slot in the served list (0 for a scroll's page)
    limit: int
    left_out: frozenset[int]        # rule 3: the ids the scroll served and the request's exclusions
    scroll: Scroll | None           # a scroll's page: its slots and boosted items so far, its last categories
    diversity: Diversity            # rule 6's setting for this page (``diversity.OFF``: off)

    @classmethod
    def of(cls, limit: int, offset: int = 0, scroll: Scroll | None = None, exclude: frozenset[int] = frozenset(),
           diversity: Diversity = OFF) -> Ask:
        """A page of ``limit`` items from ``offset``, or, with ``scroll``, the scroll's next ``limit`` items
        (``offset`` ignored), without the ids of ``exclude``."""
        if scroll is None:
            return cls(offset, limit, exclude, None, diversity)
        served = frozenset(scroll.served)
        return cls(0, limit, served | exclude if exclude else served, scroll, diversity)

    @property
    def need(self) -> int:
        """The served list's slots the page ends at."""
        return self.offset + self.limit

    @property
    def depth(self) -> int:
        """The served list's slots rule 4 decides: the page's, and those past it that rule 6 reads."""
        return self.need + self.diversity.past


class Listed(NamedTuple):
    """A ranked list's first items as the rules start from them, with what the live state says of each."""

    ids: list[int]
    scores: list[float]
    inactive: list[bool]            # rule 1: deactivated
    seen: list[bool]                # rule 2: seen and not inactive (an item is dropped for one reason)
    complete: bool                  # the whole list (False: a prefix, which rule 4 may find too short)


class NewOffer(NamedTuple):
    """What rule 5 may place on one page (``new_items.place``)."""

    every: int                                  # one slot in this many, the last of each run from the scroll's top
    offered: Sequence[tuple[int, frozenset[int]]]   # the new items waiting, with their categories
    taste: frozenset[int] | None                # the user's categories (None: every item fits)
    blocked: Callable[[int], bool]              # True for an item the page may not hold (left out, seen, inactive)
    user_id: int                                # spreads the waiting items over the users


class Served(NamedTuple):
    """A page as the rules made it."""

    items: list[Item]
    #: the categories of the scroll's last W-1 slots once the page is served: what its next cursor carries
    recent: tuple[int, ...]


def seen_flags(ids: Sequence[int], inactive: Sequence[bool], seen: Container[int]) -> list[bool]:
    """Rule 2's flags: True where the item is in ``seen`` and not already dropped as inactive."""
    if not seen:
        return [False] * len(ids)
    return [not off and i in seen for i, off in zip(ids, inactive)]


def kept(listed: Listed, left_out: Container[int]) -> tuple[list[int], list[float]]:
    """Rules 1-3: the listed ids and scores less the inactive, seen and left-out items, in list order.

    One flag per item, then two selections in C (``itertools.compress``). A scroll's page with nothing else dropped
    checks the served ids alone, in a comprehension: inside a request, where the interpreter's loop is warm and C
    built-ins are not, that cost ~13 us at page 2 where ``map(not_, map(served.__contains__, ids))`` cost ~16 us."""
    ids, scores, inactive, seen = listed.ids, listed.scores, listed.inactive, listed.seen
    flagged = True in inactive or True in seen
    if not flagged and not left_out:
        return ids, scores                          # nothing dropped (most offset pages)
    keep = [not (off or again or i in left_out) for i, off, again in zip(ids, inactive, seen)] if flagged else \
        [i not in left_out for i in ids]
    return list(compress(ids, keep)), list(compress(scores, keep))


def diversify(items: list[Item], ask: Ask, categories: ItemCategories | None) -> Served:
    """Rule 6: the first ``ask.need`` of ``items`` (rules 4 and 5's served list, its first ``ask.depth`` or all) as the
    diversity rule orders them after the scroll's last slots, and the categories of the last W-1 slots once they
    are served. Off (or no categories known): the list's first ``ask.need``."""
    rule, need = ask.diversity, ask.need
    if not rule.on or categories is None:
        return Served(items[:need], ())
    cats = categories.of(list(map(_ID, items)))
    before = ask.scroll.recent if ask.scroll is not None else ()
    order = spread(cats, list(map(_BOOSTED, items)), need, rule, before)
    return Served(list(map(items.__getitem__, order)),
                  categories_after(before, list(map(cats.__getitem__, order[-rule.carried:])), rule))


def apply(listed: Listed, ask: Ask, boosts: Mapping[int, float], boost_rule: BoostRule,
          categories: ItemCategories | None, new: NewOffer | None = None) -> Served | None:
    """The page the rules make of ``listed`` for ``ask``: ``boosts`` the boosted items' weights (item id -> weight
    > 0; none for the fallback), ``new`` the new items rule 5 may place (None: none), ``categories`` where rule 6
    finds the items' categories. None when ``listed`` is a prefix too short for rule 4 to decide the slots asked for:
    the caller reads more of the list and asks again."""
    ids, scores = kept(listed, ask.left_out)                                    # 1-3. inactive, seen, left out
    start, before = (0, 0) if ask.scroll is None else (ask.scroll.slots, ask.scroll.boosted)
    items = lift_boosts(ids, scores, boosts, ask.depth, boost_rule.every,      # 4. boosts
                        boost_rule.lookahead, listed.complete, start=start, boosted_before=before)
    if items is None:
        return None
    if new is not None:                                                         # 5. new items
        items = place(items, start, new.every, new.offered, new.taste, new.blocked, new.user_id)
    served = diversify(items, ask, categories)                                  # 6. diversity
    return served if not ask.offset else Served(served.items[ask.offset:], served.recent)    # 7. the page
