"""What each user was shown: the pages served to them, aggregated per (user, item), and the "shown" columns the
ranker learns from (``layout.py``, group "shown", when ``PREFEED_RANK_SHOWN`` is on).

An impression is one item on one page served to one user: the page's time (the events' clock when it was served)
and the item's 0-based place in the user's scroll. Per (batch row, item) the ranker reads how many pages showed it,
the days since the last and the first of them, its best place, and whether the user acted on it since it was last
shown; and per (batch row, the item's category, the one ``features.py``'s user × category group describes it by):
how many times the user was shown items of that category (pages × items), and how many of those items the user acted
on since they were last shown, so a category shown often and never taken is told from one the user takes when shown.
Per item, over every user's pages (``data/item_days.py``, counted by the collector): its impressions and attributed
events on the complete days of the last ``item_days.WINDOW_DAYS`` before the row's clock, and their rate smoothed
towards every item's (an item no page showed has every item's rate; NaN when no page at all is known then).
Where the pages come from is the caller's: live, the pages the collector stored (``data/shown_pages.py``); in
training and ``evaluate``, the pages the replay derives (``learning/derived.py``); the item columns come only from
pages the product stored (training on a database that holds them), never from derived ones, which are the ranker's
own and say nothing of other users. An item never shown to the user
has 0 pages and NaN elsewhere, which CatBoost reads as "missing", never a made-up number.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..data.item_days import smoothed
from ..units import DAY
from .arrays import lookup

#: The "shown" group's columns, in the layout's order: per (user, item), per (user, the item's category), then per
#: item over every user's pages (``data/item_days.py``).
COLUMNS = ("ux_shown_pages", "ux_days_since_shown", "ux_days_since_first_shown", "ux_shown_best_position",
           "ux_acted_since_shown", "uc_shown_pages", "uc_shown_items_acted", "item_shown_28d", "item_acted_28d",
           "item_shown_rate_28d")


@dataclasses.dataclass(frozen=True)
class Impressions:
    """Impressions of a batch's rows, one entry per (page, item): ``owner`` is the batch row (the user, or the
    replayed step), ``rows`` the item row in the caller's item table (< 0: an item the table does not know), ``ts``
    the page's time (epoch s), ``position`` the item's 0-based place in the user's scroll."""

    owner: np.ndarray
    rows: np.ndarray
    ts: np.ndarray
    position: np.ndarray

    @classmethod
    def none(cls) -> Impressions:
        return cls(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0), np.empty(0, np.int64))


@dataclasses.dataclass(frozen=True)
class Shown:
    """Per distinct (batch row, item row), coded ``owner * span + row`` and sorted: how many pages showed it, the
    first and the last page's time, and its best (smallest) place."""

    span: int
    code: np.ndarray
    pages: np.ndarray
    first: np.ndarray
    last: np.ndarray
    best: np.ndarray
    #: every user's pages per item and day (``item_days.Daily``, rows of the same item table); None: not known
    daily: object | None = None

    def __len__(self) -> int:
        return len(self.code)

    def slice(self, a: int, b: int) -> Shown:
        """Batch rows ``a:b`` as a batch of their own (row ``a`` becomes 0), as ``Histories.slice``."""
        lo, hi = np.searchsorted(self.code, [a * self.span, b * self.span])
        return Shown(self.span, self.code[lo:hi] - a * self.span, self.pages[lo:hi], self.first[lo:hi],
                     self.last[lo:hi], self.best[lo:hi], self.daily)

    def take(self, positions: np.ndarray) -> Shown:
        """Batch rows at ``positions`` (ascending) as a batch of their own, as ``Histories.take``."""
        owner, rows = np.divmod(self.code, self.span)
        new = np.full(int(max(owner.max(initial=-1), positions.max(initial=-1))) + 1, -1, dtype=np.int64)
        new[positions] = np.arange(len(positions))
        keep = np.flatnonzero(new[owner] >= 0)
        return Shown(self.span, new[owner[keep]] * self.span + rows[keep], self.pages[keep], self.first[keep],
                     self.last[keep], self.best[keep], self.daily)


def aggregate(imp: Impressions, span: int, clock: np.ndarray | None = None, daily=None) -> Shown:
    """``imp`` per (row, item); items the table does not know are left out, and so are pages after their row's
    ``clock`` (``(B,)``, when given: a page served after the feed's clock is not known to it). ``daily``: every
    user's pages per item and day (``item_days.Daily``), for the item columns (None: none known)."""
    keep = imp.rows >= 0
    if clock is not None:
        keep &= imp.ts <= clock[imp.owner]
    owner, rows, ts, pos = imp.owner[keep], imp.rows[keep], imp.ts[keep], imp.position[keep]
    code, inv = np.unique(owner.astype(np.int64) * span + rows, return_inverse=True)
    inv = inv.ravel()
    first = np.full(len(code), np.inf)
    last = np.full(len(code), -np.inf)
    best = np.full(len(code), np.iinfo(np.int64).max)
    np.minimum.at(first, inv, ts)
    np.maximum.at(last, inv, ts)
    np.minimum.at(best, inv, pos)
    return Shown(span=span, code=code, pages=np.bincount(inv, minlength=len(code)), first=first, last=last,
                 best=best, daily=daily)


def columns(shown: Shown | None, owner: np.ndarray, rows: np.ndarray, now: np.ndarray, hist_owner: np.ndarray,
            hist_rows: np.ndarray, hist_ts: np.ndarray, cell: np.ndarray | None = None,
            categories=None) -> dict[str, np.ndarray]:
    """The "shown" columns of candidates ``(owner, rows)`` (batch row, item row), each row at ``now[owner]``:
    a dict by name. ``hist_*``: the batch's history events (row, item row, time), for "acted on it since".
    ``cell``: each candidate's (batch row, category) cell ``owner * n_cat + category``, ``>= n_rows * n_cat`` for an
    item without one; ``categories``: the item table, whose ``categories_of`` and ``n_categories`` say the shown
    items' categories (both None: the category columns are 0)."""
    n = len(rows)
    zeros, missing = (lambda: np.zeros(n, np.float32)), (lambda: np.full(n, np.nan, np.float32))
    out = {"ux_shown_pages": zeros(), "ux_days_since_shown": missing(), "ux_days_since_first_shown": missing(),
           "ux_shown_best_position": missing(), "ux_acted_since_shown": zeros(), "uc_shown_pages": zeros(),
           "uc_shown_items_acted": zeros(), "item_shown_28d": zeros(), "item_acted_28d": zeros(),
           "item_shown_rate_28d": missing()}
    if shown is not None and shown.daily is not None and n:
        _item_columns(shown.daily, rows, owner, np.floor(now / DAY).astype(np.int64), out)
    if shown is None or not len(shown) or not n:
        return out
    acted_all = _acted_since(shown, hist_owner, hist_rows, hist_ts)
    s_owner, s_rows = np.divmod(shown.code, shown.span)
    if cell is not None and categories is not None:
        _category_columns(shown, s_owner, s_rows, acted_all, cell, categories, out)
    hit, k = _shown_before(shown.span, s_owner, s_rows, owner, rows)
    if not len(hit):
        return out
    t = now[owner[hit]]
    out["ux_shown_pages"][hit] = shown.pages[k]
    out["ux_days_since_shown"][hit] = (t - shown.last[k]) / DAY
    out["ux_days_since_first_shown"][hit] = (t - shown.first[k]) / DAY
    out["ux_shown_best_position"][hit] = shown.best[k]
    out["ux_acted_since_shown"][hit] = acted_all[k]
    return out


def _shown_before(span: int, s_owner: np.ndarray, s_rows: np.ndarray, owner: np.ndarray,
                  rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The candidates ``(owner, rows)`` (grouped by ``owner``, ascending) the batch row was shown, and the index in
    the shown pairs ``(s_owner, s_rows)`` of each. Row by row, the items it was shown mark a scratch array that its
    candidates read: linear in the candidates, where searching each candidate's code among the shown ones was a
    third of the columns' cost."""
    n_owner = int(max(owner[-1], s_owner[-1])) + 1
    c_at = np.searchsorted(owner, np.arange(n_owner + 1))
    s_at = np.searchsorted(s_owner, np.arange(n_owner + 1))
    slot = np.full(span, -1, dtype=np.int64)
    hits, found = [], []
    for j in np.flatnonzero(np.diff(s_at)).tolist():
        mine = s_rows[s_at[j]:s_at[j + 1]]
        slot[mine] = np.arange(s_at[j], s_at[j + 1])
        k = slot[rows[c_at[j]:c_at[j + 1]]]
        slot[mine] = -1
        at = np.flatnonzero(k >= 0)
        hits.append(at + c_at[j]), found.append(k[at])
    if not hits:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(hits), np.concatenate(found)


def _acted_since(shown: Shown, hist_owner: np.ndarray, hist_rows: np.ndarray, hist_ts: np.ndarray) -> np.ndarray:
    """Per shown (row, item): whether the row's newest event on the item is at or after the last page that showed
    it."""
    ok = hist_rows >= 0
    h_code = hist_owner[ok].astype(np.int64) * shown.span + hist_rows[ok]
    h_uniq, h_inv = np.unique(h_code, return_inverse=True)
    newest = np.full(len(h_uniq), -np.inf)
    np.maximum.at(newest, h_inv.ravel(), hist_ts[ok])
    return lookup(h_uniq, newest, shown.code, missing=-np.inf) >= shown.last


def _category_columns(shown: Shown, s_owner: np.ndarray, s_rows: np.ndarray, acted: np.ndarray, cell: np.ndarray,
                      categories, out: dict) -> None:
    """Per (batch row, category): impressions of its items (each shown item counts in each of its categories) and
    its shown items acted on since; read at each candidate's ``cell``."""
    n_cat = categories.n_categories
    if not n_cat:
        return
    at, cat = categories.categories_of(s_rows)
    key = s_owner[at] * n_cat + cat
    size = int(max(cell.max(initial=0), key.max(initial=0))) + 1
    pages = np.bincount(key, weights=shown.pages[at], minlength=size)
    taken = np.bincount(key, weights=acted[at], minlength=size)
    inside = cell < size
    out["uc_shown_pages"][inside] = pages[cell[inside]]
    out["uc_shown_items_acted"][inside] = taken[cell[inside]]


def _item_columns(daily, rows: np.ndarray, owner: np.ndarray, owner_day: np.ndarray, out: dict) -> None:
    """Per candidate ``(owner, rows)``: its item's impressions and attributed events on every user's pages over the
    complete days before its owner's day (``owner_day``; ``item_days.WINDOW_DAYS`` of them), and their rate smoothed
    towards every item's (NaN where no item was shown in the window: nothing is known)."""
    shown, acted, prior = daily.window(rows, owner, owner_day)
    out["item_shown_28d"][:] = shown
    out["item_acted_28d"][:] = acted
    out["item_shown_rate_28d"][:] = smoothed(acted, shown, prior)
