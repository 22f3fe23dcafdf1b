"""The fallback: the page of a user without a readable precomputed feed (none yet, expired, or unreadable).

Its list, in order: popular items of the user's top categories (``taste.py``, from their newest events),
interleaved, then global popular. The popular lists are those workers publish when they load their item table
(``store.publish_popular``); before any worker has, the newest active listings stand in. The page is then cut from
that list by the page's rules (``rules.py``), as a precomputed feed's is: inactive items, the items the user
interacted with (inside the seen window, and in their newest events), those a scroll already served and the
request's exclusions dropped; no boosts; the diversity rule, the scroll's last categories included. The caller reads
the user's events from the database, and asks for their real feed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from . import taste
from .cursor import Scroll
from .diversity import Diversity
from .page import Page, PageReader
from .rules import Ask, Listed, apply, seen_flags


def fallback_page(pages: PageReader, recent: Sequence[tuple[int, int, Sequence[int]]], weights: Sequence[float],
                  seen: np.ndarray, top_categories: int, limit: int, offset: int,
                  newest: Callable[[int], list[int]], scroll: Scroll | None = None,
                  exclude: frozenset[int] = frozenset(), diversity: Diversity | None = None) -> Page:
    """The fallback page for a user whose newest events are ``recent`` (``(item id, type code, the item's category
    ids)``, newest first), each weighing its type's weight in ``weights``, and who interacted with ``seen`` (item
    ids) inside the seen window; from their ``top_categories`` top categories (``PREFEED_USER_TOP_CATEGORIES``).
    ``newest(n)``: the ``n`` newest active listings. With ``scroll``: the next ``limit`` items of that scroll,
    ``offset`` ignored. ``exclude``: item ids the page leaves out. ``diversity``: the request's rule (default: the
    deployment's). A user without events is not ``known``."""
    seen = np.union1d(seen, np.array([r[0] for r in recent], dtype=np.int64))
    categories = taste.user_top_categories([r[2] for r in recent], weights, top_categories)
    page = popular_page(pages, categories, Ask.of(limit, offset, scroll, exclude, pages.rule(diversity)), seen,
                        newest)
    page.known = len(recent) > 0
    return page


def popular_page(pages: PageReader, categories: list[int], ask: Ask, seen: np.ndarray,
                 newest: Callable[[int], list[int]]) -> Page:
    """The page ``ask`` asks of the popular list of ``categories`` (``popular_list``), by the page's rules with no
    boosts: ``seen`` (item ids) dropped as the user's."""
    dropped = len(seen) + len(ask.left_out)
    # read as far as the page's ``ask.depth`` items, every item seen or left out, and the boost rule's look-ahead in
    # inactive items (the list is cut before the inactive ones are known)
    listed = popular_list(pages, categories, ask.need + dropped, newest)
    listed = listed[: ask.depth + dropped + pages.boost_rule.lookahead]
    pages.states.refresh()
    inactive = pages.states.inactive_flags(listed) if len(listed) else []
    ids = listed.tolist()
    flags = seen_flags(ids, inactive, set(seen.tolist()))
    served = apply(Listed(ids, [0.0] * len(ids), inactive, flags, True), ask, {}, pages.boost_rule,  # no boosts
                   pages.categories)
    return Page(items=served.items, source="fallback", header=None, recent=served.recent)


def popular_list(pages: PageReader, categories: list[int], n_newest: int,
                 newest: Callable[[int], list[int]]) -> np.ndarray:
    """Popular items of ``categories`` interleaved (each list's first, then each one's second, ...), then global
    popular, each item at its first place; the ``n_newest`` newest active listings when no popular list is
    published."""
    pipe = pages.r.pipeline(transaction=False)
    for c in categories:
        pipe.get(pages.keys.popular_category(c))
    pipe.get(pages.keys.popular_global)
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
        merged = np.asarray(newest(n_newest), dtype=np.int64)
    _, first = np.unique(merged, return_index=True)
    return merged[np.sort(first)]
