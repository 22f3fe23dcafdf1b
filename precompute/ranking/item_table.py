"""Item matrices: every per-item quantity the candidate and feature code needs, as aligned numpy arrays.

Built once per worker process (before fork) and shared copy-on-write by the work horses. Item ids map to rows
through a hash index (pandas), built in the parent: memory follows the number of items, not their largest id, so
sparse 64-bit ids cost no more than dense ones (translating 100,000 ids: ~4 ms; a dense array indexed by id was
~0.5 ms but would take 16 GiB for one id near 2e9).

Rows are in popularity order (row 0 is the most popular item, ties by id): a sorted run of rows is then also a
popularity ranking, which candidate generation relies on to merge and cap popular lists without ranking them.

Categories: an item has zero or more, held as CSR (``cat_indptr``/``cat_of``: row → dense category indexes
0..C-1, ``category_ids[c]`` the real 64-bit id). Memory follows the categories in use, never the largest id. An
item counts in each of its categories: on each one's popular list, in each one's size, share and mean price.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pandas as pd

from ..data import event_types
from ..units import DAY
from . import arrays, sources
from .layout import WINDOWS, FeatureLayout
from .popularity import BatchPopularity, block, top_lists
#: Bits of the candidate sources for popular lists (``sources.py``).
POPULAR_CATEGORY, POPULAR_GLOBAL = sources.bit("category"), sources.bit("global")
#: Sets of categories whose popular union ``ItemTable.popular`` keeps.
POPULAR_CACHE = 4096


def _derived():
    """A field computed from the others when the table is made, never passed in."""
    return dataclasses.field(init=False, repr=False, compare=False)

@dataclasses.dataclass
class ItemTable:
    ids: np.ndarray            # int64
    price: np.ndarray          # float64; NaN = not known
    created_at: np.ndarray     # epoch s; NaN = not known
    active: np.ndarray         # bool
    attributes: np.ndarray     # (n, len(layout's attributes)) float64; NaN = missing
    counts: np.ndarray         # (n, n_types + 1) interactions by type code (column 0 unused)
    #: (n, len(WINDOWS)) interactions weighted by their type's weight in each window before ``as_of``: popularity at
    #: the log's clock, which moves faster than the all-time counts.
    windowed: np.ndarray
    first_seen: np.ndarray     # epoch s of the item's first event at or before ``as_of``; NaN = none
    member_item: np.ndarray    # (item index, category id) pairs in any order: the memberships, rows reordered
    member_category: np.ndarray
    as_of: float               # epoch s the statistics were taken at
    type_names: tuple[str, ...]       # declared event types, by code - 1
    type_weights: np.ndarray   # weight by type code (``EventTypes.weight_by_code``)
    attribute_names: tuple[str, ...]  # declared attributes, the columns of ``attributes``
    layout: FeatureLayout      # the feature columns these declarations imply
    n_global_popular: int      # length of the global popular list
    n_category_popular: int    # length of each category's popular list
    #: Lengths of the recent-popularity candidate lists (``popularity.SOURCES`` order) kept in ``recent_lists``.
    recent_lengths: tuple[int, ...] = (0, 0)
    loaded_at: float = dataclasses.field(default_factory=time.time)    # wall time of the last full load
    read_at: float = dataclasses.field(default_factory=time.time)      # wall time of this load, full or not

    # Derived in ``__post_init__`` (rows then follow popularity, most popular first, ties by id).
    popularity: np.ndarray = _derived()        # type-weighted interactions plus a small term for the last week
    weighted_counts: np.ndarray = _derived()   # all-time type-weighted interactions (``popularity`` less recency)
    index: pd.Index = _derived()               # item id → row (``rows``)
    category_ids: np.ndarray = _derived()      # dense category index → real 64-bit category id
    n_categories: int = _derived()
    cat_of: np.ndarray = _derived()            # CSR row → dense categories: ``cat_of[cat_indptr[r]:cat_indptr[r+1]]``
    cat_indptr: np.ndarray = _derived()
    n_cats: np.ndarray = _derived()            # categories per row
    pop_rank: np.ndarray = _derived()          # the row itself: 0 = most popular
    log_price: np.ndarray = _derived()
    cat_size: np.ndarray = _derived()          # members per category
    cat_share: np.ndarray = _derived()         # each category's share of all items' popularity
    cat_log_price_mean: np.ndarray = _derived()   # mean log price of each category's priced members
    cat_rank_by_member: np.ndarray = _derived()   # within-category rank of each membership, CSR order
    #: The per-item features that depend on neither the user nor the clock (``layout`` group "item_static"), as
    #: float32 rows, column-major: ``features.build`` gathers each column.
    static: np.ndarray = _derived()
    log_price32: np.ndarray = _derived()       # float32 copies the feature code gathers into float32 columns
    created_day32: np.ndarray = _derived()
    first_day32: np.ndarray = _derived()
    global_popular: np.ndarray = _derived()    # popular active rows, most popular first
    category_popular: list[np.ndarray] = _derived()   # per dense category, its popular active rows
    inactive_rows: np.ndarray = _derived()
    live_block: np.ndarray = _derived()        # the "item_live" columns at ``as_of`` (``popularity.block``)
    recent_lists: list[np.ndarray] = _derived()   # the recent-popularity lists at ``as_of`` (``recent_lengths``)
    #: Popular unions already merged, per set of categories (``popular``; at most ``POPULAR_CACHE``).
    popular_unions: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = _derived()

    def __post_init__(self) -> None:
        n = len(self.ids)
        # Popularity: interactions weighted by their type's weight, plus a small term for the last week.
        w = np.zeros(self.counts.shape[1])
        k = min(len(w), len(self.type_weights))
        w[:k] = self.type_weights[:k]
        popularity = self.counts @ w + 0.1 * self.windowed[:, [name for name, _ in WINDOWS].index("7d")]
        # Reorder every per-item array so that rows follow popularity, most popular first, ties by id.
        order = np.lexsort((self.ids, -popularity))
        for name in ("ids", "price", "created_at", "active", "attributes", "counts", "windowed",
                     "first_seen"):
            setattr(self, name, getattr(self, name)[order])
        self.popularity = popularity[order]
        self.weighted_counts = self.counts @ w
        self.index = pd.Index(self.ids)
        self.rows(self.ids[:1])           # builds the index's hash table now (in the parent), not in each horse
        # Memberships as (row, dense category), sorted by category then row: each category's members in
        # popularity order. The same pairs sorted by row are the CSR row → categories.
        new_row = np.empty(n, dtype=np.int64)
        new_row[order] = np.arange(n)
        m_row = self.member_item = new_row[self.member_item]     # (kept as rows of the new order)
        self.category_ids, m_cat = np.unique(self.member_category, return_inverse=True)
        m_cat = m_cat.astype(np.int64).ravel()
        self.n_categories = n_cat = len(self.category_ids)
        by_cat = np.lexsort((m_row, m_cat))
        m_row, m_cat = m_row[by_cat], m_cat[by_cat]
        starts = np.searchsorted(m_cat, np.arange(n_cat + 1))
        m_rank = np.arange(len(m_row)) - starts[m_cat]           # 0 = most popular item of the category
        by_row = np.argsort(m_row, kind="stable")
        self.cat_of = m_cat[by_row]
        self.cat_indptr = np.searchsorted(m_row[by_row], np.arange(n + 1)).astype(np.int64)
        self.n_cats = np.diff(self.cat_indptr)
        self.pop_rank = np.arange(n)
        # Per category: size, share of all items' popularity, mean log price of its priced members.
        self.log_price = np.log1p(self.price)
        priced = np.isfinite(self.log_price[m_row])
        self.cat_size = np.bincount(m_cat, minlength=n_cat).astype(np.float64)
        self.cat_share = np.bincount(m_cat, weights=self.popularity[m_row], minlength=n_cat) \
            / max(float(self.popularity.sum()), 1e-9)
        with np.errstate(invalid="ignore", divide="ignore"):
            self.cat_log_price_mean = np.bincount(m_cat[priced], weights=self.log_price[m_row][priced],
                                                  minlength=n_cat) / np.bincount(m_cat[priced], minlength=n_cat)
        # The item's best within-category rank (``m_rank`` in CSR order).
        self.cat_rank_by_member = m_rank[by_row]
        # float32 copies the feature code gathers straight into its float32 columns.
        self.log_price32 = self.log_price.astype(np.float32)
        self.created_day32 = (self.created_at / DAY).astype(np.float32)
        self.first_day32 = (self.first_seen / DAY).astype(np.float32)
        # Popular active items: global list and per category, most popular first, i.e. ascending rows.
        self.global_popular = np.flatnonzero(self.active)[: self.n_global_popular]
        live = self.active[m_row]
        a_row, a_cat = m_row[live], m_cat[live]
        bounds = np.searchsorted(a_cat, np.arange(n_cat + 1))
        self.category_popular = [a_row[bounds[c]: min(bounds[c] + self.n_category_popular, bounds[c + 1])]
                                 for c in range(n_cat)]
        self.inactive_rows = np.flatnonzero(~self.active)
        self.popular_unions = {}
        self.static = np.asfortranarray(self._static_block())
        # Popularity at ``as_of`` as every user sees it in serving (replayed steps compute their own clock's).
        self.live_block = block(self.windowed, self.weighted_counts)
        self.recent_lists = top_lists(self.windowed, self.active, self.recent_lengths)

    def live(self, n_users: int, lengths: tuple[int, ...] | None = None) -> BatchPopularity:
        """Popularity at ``as_of`` for a batch of ``n_users`` (serving): the table's block, and the recent lists of
        ``lengths`` (default: the table's ``recent_lengths``, kept; others are computed)."""
        lists = self.recent_lists if lengths is None or tuple(lengths) == self.recent_lengths else \
            top_lists(self.windowed, self.active, tuple(lengths))
        return BatchPopularity([self.live_block], [lists], np.zeros(n_users, dtype=np.int64))

    def popular(self, categories: np.ndarray, bits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The union of ``categories``' popular lists and the global one, ascending rows (most popular first), and
        each row's source bits (``POPULAR_CATEGORY``, ``POPULAR_GLOBAL``). Kept per set of categories (users share
        their top categories; the order does not change the union), at most ``POPULAR_CACHE`` sets. A work horse
        starts with none kept, so a set not kept is merged through ``bits``, an all-zero per-item scratch (reset
        after; ``Workspace.bits``), not by membership searches (~10x slower: most of the stage's popular work in a
        job)."""
        key = tuple(sorted(categories.tolist()))
        got = self.popular_unions.get(key)
        if got is None:
            merge, lists = bits, [self.category_popular[c] for c in key]
            merge[self.global_popular] = POPULAR_GLOBAL
            for rows in lists:
                merge[rows] |= POPULAR_CATEGORY
            rows = arrays.unique_sorted(np.concatenate([*lists, self.global_popular]))
            got = rows, merge[rows]
            merge[rows] = 0
            if len(self.popular_unions) >= POPULAR_CACHE:
                self.popular_unions.clear()
            self.popular_unions[key] = got
        return got

    def weight_of(self, types: np.ndarray) -> np.ndarray:
        """The declared weight of each event type code; 0 for codes past the declaration."""
        return event_types.by_code(self.type_weights, types)

    def categories_of(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every (position in ``rows``, dense category) pair of ``rows``' categories, grouped by position in
        order: each row counts once for each of its categories."""
        rows = np.asarray(rows, dtype=np.int64)
        deg = self.n_cats[rows]
        which = np.repeat(np.arange(len(rows)), deg)
        ends = np.cumsum(deg)
        offset = np.arange(len(which)) - np.repeat(ends - deg, deg)
        return which, self.cat_of[self.cat_indptr[rows][which] + offset]

    def _static_block(self) -> np.ndarray:
        types = self.type_names
        # Category statistics of an item in several categories: its best rank, its largest category, the
        # largest share, and its price against the mean of its categories' mean prices (what the item is
        # compared with wherever it is listed); NaN for an item without categories.
        rank = segment_reduce(np.minimum, self.cat_rank_by_member.astype(np.float64), self.cat_indptr)
        size = segment_reduce(np.maximum, self.cat_size[self.cat_of], self.cat_indptr)
        share = segment_reduce(np.maximum, self.cat_share[self.cat_of], self.cat_indptr)
        # (over the categories that have priced members: one without leaves the others' mean, not NaN)
        means = self.cat_log_price_mean[self.cat_of]
        finite = np.isfinite(means)
        with np.errstate(invalid="ignore"):
            mean_price = segment_reduce(np.add, np.where(finite, means, 0.0), self.cat_indptr) \
                / segment_reduce(np.add, finite.astype(np.float64), self.cat_indptr)
        block = self.layout.stack("item_static", {
            "item_log_price": self.log_price,
            "item_price_vs_category": self.log_price - mean_price,
            **{f"item_attr_{name}": self.attributes[:, k] for k, name in enumerate(self.attribute_names)},
            **{f"item_log_{t}": np.log1p(self.counts[:, code]) for code, t in enumerate(types, start=1)},
            **rates("item", types, self.counts),
            "item_log_pop_rank": np.log1p(self.pop_rank),
            "item_log_category_rank": np.log1p(rank), "item_log_category_size": np.log1p(size),
            "item_category_global_share": share,
        })
        return block

    def __len__(self) -> int:
        return len(self.ids)

    def rows(self, item_ids: np.ndarray) -> np.ndarray:
        """Rows of ``item_ids``; -1 for ids this table does not know (e.g. listed after it was loaded)."""
        return self.index.get_indexer(np.asarray(item_ids, dtype=np.int64)).astype(np.int64, copy=False)


def rates(prefix: str, types: list[str], counts: np.ndarray) -> dict[str, np.ndarray]:
    """``<prefix>_<type>_rate`` of each type after the first: its count against the first (weakest) type's,
    smoothed towards 1/k for the k-th stronger type (stronger types are rarer). ``counts`` is by type code."""
    return {f"{prefix}_{t}_rate": (counts[:, code] + 1.0 / (code - 1)) / (counts[:, 1] + 10.0)
            for code, t in enumerate(types, start=1) if code > 1}


def segment_reduce(ufunc: np.ufunc, values: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """``ufunc`` over each segment ``values[indptr[k]:indptr[k+1]]``; NaN for an empty segment."""
    sizes = np.diff(indptr)
    out = np.full(len(sizes), np.nan)
    full = sizes > 0
    if full.any():
        out[full] = ufunc.reduceat(values, indptr[:-1][full])
    return out
