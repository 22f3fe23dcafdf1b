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
from sqlalchemy import Engine, case, func, select

from ..data import clock, event_types
from ..data.rows import table
from ..data.tables import Event, Item, ItemAttribute, ItemCategory
from ..settings import Settings
from . import arrays
from .layout import FeatureLayout, for_settings
from .popularity import WINDOWS

DAY = 86400.0
#: Bits of the candidate sources for popular lists (``candidates.FROM_CATEGORY``/``FROM_GLOBAL``).
POPULAR_CATEGORY, POPULAR_GLOBAL = 2, 4
#: Sets of categories whose popular union ``ItemTable.popular`` keeps.
POPULAR_CACHE = 4096



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
    loaded_at: float = dataclasses.field(default_factory=time.time)    # wall time of the last full load
    read_at: float = dataclasses.field(default_factory=time.time)      # wall time of this load, full or not

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
        self.weighted_counts = self.counts @ w     # all-time type-weighted interactions (``popularity`` less recency)
        self._index = pd.Index(self.ids)
        self.rows(self.ids[:1])           # builds the index's hash table now (in the parent), not in each horse
        # Memberships as (row, dense category), sorted by category then row: each category's members in
        # popularity order. The same pairs sorted by row are the CSR row → categories.
        new_row = np.empty(n, dtype=np.int64)
        new_row[order] = np.arange(n)
        m_row = new_row[self.member_item]
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
        self._cat_rank_by_member = m_rank[by_row]
        self._static: np.ndarray | None = None
        # Scratch arrays of the candidate stage: one table serves one thread at a time (workers are processes).
        self._mark = np.zeros(n, dtype=bool)     # scratch for O(k) membership tests, always left all-False
        self._slot = np.zeros(n, dtype=np.int64)  # scratch for O(k) dedupe: written before read, never reset
        self._bits = np.zeros(n, dtype=np.uint8)  # scratch for popular-list source bits, always left all-zero
        self._score = np.zeros(n)                 # scratch for per-item scores, always left all-zero
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
        self._popular: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

    def popular(self, categories: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The union of ``categories``' popular lists and the global one, ascending rows (most popular first), and
        each row's source bits (``POPULAR_CATEGORY``, ``POPULAR_GLOBAL``). Kept per set of categories (users share
        their top categories; the order does not change the union), at most ``POPULAR_CACHE`` sets. A work horse
        starts with none kept, so a set not kept is merged through the all-zero ``_bits`` scratch (reset after),
        not by membership searches (~10x slower: most of the stage's popular work in a job)."""
        key = tuple(sorted(categories.tolist()))
        got = self._popular.get(key)
        if got is None:
            merge, lists = self._bits, [self.category_popular[c] for c in key]
            merge[self.global_popular] = POPULAR_GLOBAL
            for rows in lists:
                merge[rows] |= POPULAR_CATEGORY
            rows = arrays.unique_sorted(np.concatenate([*lists, self.global_popular]))
            got = rows, merge[rows]
            merge[rows] = 0
            if len(self._popular) >= POPULAR_CACHE:
                self._popular.clear()
            self._popular[key] = got
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

    def static_features(self) -> np.ndarray:
        """The per-item features that do not depend on the user or the clock (``layout`` group "item_static"), as
        float32 rows, computed once per table; column-major: ``features.build`` gathers each column."""
        if self._static is None:
            types = self.type_names
            # Category statistics of an item in several categories: its best rank, its largest category, the
            # largest share, and its price against the mean of its categories' mean prices (what the item is
            # compared with wherever it is listed); NaN for an item without categories.
            rank = segment_reduce(np.minimum, self._cat_rank_by_member.astype(np.float64), self.cat_indptr)
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
            self._static = np.asfortranarray(block)
        return self._static

    def __len__(self) -> int:
        return len(self.ids)

    def rows(self, item_ids: np.ndarray) -> np.ndarray:
        """Rows of ``item_ids``; -1 for ids this table does not know (e.g. listed after it was loaded)."""
        return self._index.get_indexer(np.asarray(item_ids, dtype=np.int64)).astype(np.int64, copy=False)


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


def load_item_table(engine: Engine, settings: Settings, as_of: float | None = None,
                    since: ItemTable | None = None) -> ItemTable:
    """Items, their categories and declared attributes, plus interaction statistics from events at or before
    ``as_of`` (default: the log's clock, ``data/clock.py``); type weights and popular-list lengths from
    ``settings``.

    Training and evaluation pass their time cut as ``as_of`` so the statistics hold no future information, and an
    item created after an explicit instant (``as_of``, or ``PREFEED_AS_OF``) is inactive in the table: it did not
    exist then, so it is no candidate and no negative age to learn from. Precompute otherwise reads at the log's
    clock, which its batches are read at too; there an item listed after the newest event stays active: it is live.

    ``since``: a table of the same database at an earlier ``as_of``, whose all-time counts are carried forward: only
    the events after it and those inside the longest popularity window are read (two range scans of the time
    index instead of a pass over the whole log), which is what lets workers follow a fast log's clock. An event
    stored late with a time before ``since.as_of`` is counted at the next full load (``Pipeline.refresh``).
    """
    explicit = as_of is not None or bool(settings.as_of)
    names = tuple(settings.item_attributes)
    with engine.connect() as conn:
        types = event_types.check(conn, settings)      # stored type codes still mean what the settings say
        as_of = clock.log_clock(conn, settings) if as_of is None else as_of
        items = table(conn.execute(select(Item.id, Item.price, Item.created_at, Item.active).order_by(Item.id))
                      .all(), id="<i8", price="<f8", created="<f8", active="?")
        members = table(conn.execute(select(ItemCategory.item_id, ItemCategory.category)).all(),
                        item="<i8", category="<i8")
        attributes = table(conn.execute(select(ItemAttribute.item_id, ItemAttribute.name, ItemAttribute.value)
                                        .where(ItemAttribute.name.in_(names))).all() if names else [],
                           item="<i8", name="O", value="<f8")
        since = since if since is not None and since.as_of <= as_of else None
        after = (Event.ts > since.as_of) if since is not None else True
        stats = conn.execute(select(Event.item_id, Event.type, func.count(), func.min(Event.ts))
                             .where(after, Event.ts <= as_of).group_by(Event.item_id, Event.type)).all()
        longest = max(seconds for _, seconds in WINDOWS)
        recent = conn.execute(
            select(Event.item_id, Event.type,
                   *(func.sum(case((Event.ts >= as_of - seconds, 1), else_=0)) for _, seconds in WINDOWS))
            .where(Event.ts >= as_of - longest, Event.ts <= as_of).group_by(Event.item_id, Event.type)).all()
    ids = items["id"]
    n = len(ids)
    index = pd.Index(ids)
    attr = np.full((n, len(names)), np.nan)
    if len(attributes):
        # An item written between the items read and this one is not in the table (-1): its values are left out,
        # never written into row -1 (the last item's).
        at = index.get_indexer(attributes["item"])
        ok = at >= 0
        col = np.array([names.index(a) for a in attributes["name"]], dtype=np.int64)
        attr[at[ok], col[ok]] = attributes["value"][ok]
    counts = np.zeros((n, len(types) + 1), dtype=np.float64)
    windowed = np.zeros((n, len(WINDOWS)), dtype=np.float64)
    first_seen = np.full(n, np.inf)
    if since is not None and n:
        old = since.rows(ids)
        had = old >= 0
        counts[had] = since.counts[old[had]]
        first_seen[had] = np.where(np.isnan(since.first_seen[old[had]]), np.inf, since.first_seen[old[had]])
    if stats and n:
        s = table(stats, item="<i8", type="<i8", count="<f8", first="<f8")
        known = index.get_indexer(s["item"])
        ok = (known >= 0) & (s["type"] >= 1) & (s["type"] <= len(types))    # codes past the declaration: none
        np.add.at(counts, (known[ok], s["type"][ok]), s["count"][ok])
        np.minimum.at(first_seen, known[known >= 0], s["first"][known >= 0])   # any type: the item was there
    if recent and n:
        s = table(recent, item="<i8", type="<i8", **{f"w{k}": "<f8" for k in range(len(WINDOWS))})
        known = index.get_indexer(s["item"])
        ok = (known >= 0) & (s["type"] >= 1) & (s["type"] <= len(types))
        w = event_types.by_code(types.weight_by_code(), s["type"][ok])
        for k in range(len(WINDOWS)):
            np.add.at(windowed[:, k], known[ok], w * s[f"w{k}"][ok])
    m_item = index.get_indexer(members["item"])
    return ItemTable(
        ids=ids, price=items["price"], created_at=items["created"],
        active=items["active"].astype(bool) & ~(explicit & (items["created"] > as_of)),     # NaN: not after
        attributes=attr, counts=counts, windowed=windowed,
        first_seen=np.where(np.isfinite(first_seen), first_seen, np.nan),
        member_item=m_item[m_item >= 0], member_category=members["category"][m_item >= 0],
        as_of=as_of, type_names=types.names, type_weights=types.weight_by_code(), attribute_names=names,
        layout=for_settings(settings),
        n_global_popular=settings.global_popular, n_category_popular=settings.category_popular,
        loaded_at=since.loaded_at if since is not None else time.time(),     # the last full load's time
    )
