"""The fallback: the page of a user without a readable precomputed feed (none yet, expired, or unreadable).

Popular items of the user's top categories (``taste.py``, from their newest events), interleaved, then global
popular; no boosts; the diversity rule as on a precomputed page (``diversity.py``, the scroll's last categories
included). Left out: the items the user interacted with (inside the seen window, and in their newest
events), those a scroll already served (a scroll's next page is cut from the top), and inactive ones. The popular
lists are those workers publish when they load (``store.py``); before any worker has, the newest active listings
stand in. The caller reads the user's events from the database, and asks for their real feed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..settings import Settings
from . import taste
from .cursor import Scroll
from .diversity import OFF, Diversity
from .page import Page, PageReader


def fallback_page(pages: PageReader, settings: Settings, recent: Sequence[tuple[int, int, Sequence[int]]],
                  weights: Sequence[float], seen: np.ndarray, limit: int, offset: int,
                  newest: Callable[[int], list[int]], scroll: Scroll | None = None,
                  diversity: Diversity | None = None) -> Page:
    """The fallback page for a user whose newest events are ``recent`` (``(item id, type code, the item's category
    ids)``, newest first), each weighing its type's weight in ``weights``, and who interacted with ``seen`` (item
    ids) inside the seen window. ``newest(n)``: the ``n`` newest active listings. With ``scroll``: the next
    ``limit`` items of that scroll, ``offset`` ignored. ``diversity``: the request's rule (default: the
    deployment's). A user without events is not ``known``."""
    seen = np.union1d(seen, np.array([r[0] for r in recent], dtype=np.int64))
    if scroll is not None:                        # a scroll's next page: what it has not served, from the top
        seen = np.union1d(seen, np.array(scroll.served, dtype=np.int64))
        offset = 0
    categories = taste.user_top_categories([r[2] for r in recent], weights, settings.user_top_categories)
    page = popular_page(pages, categories, limit, offset, seen, newest, scroll, pages.rule(diversity))
    page.known = len(recent) > 0
    return page


def popular_page(pages: PageReader, categories: list[int], limit: int, offset: int, seen: np.ndarray,
                 newest: Callable[[int], list[int]], scroll: Scroll | None = None,
                 rule: Diversity = OFF) -> Page:
    """Popular items of ``categories`` (interleaved), then global popular; seen and inactive items dropped; the
    diversity ``rule`` applied after ``scroll``'s last slots."""
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
        merged = np.asarray(newest(offset + limit + len(seen)), dtype=np.int64)
    _, first = np.unique(merged, return_index=True)
    merged = merged[np.sort(first)]
    need = offset + limit
    head = merged[: need + rule.past + len(seen) + pages.lookahead]
    head = head[pages.servable(head, seen)] if len(head) else head
    items, recent = pages.spread([(int(i), 0.0, False) for i in head[:need + rule.past]], need, rule, scroll)
    return Page(items=items[offset:], source="fallback", header=None, recent=recent)
