"""Item matrices: every per-item quantity the candidate and feature code needs, as aligned numpy arrays.

Built once per worker process (before fork) and shared copy-on-write by the work horses. Item ids map to rows
through a hash index (pandas), built in the parent: memory follows the number of items, not their largest id, so
sparse 64-bit ids cost no more than dense ones (translating 100,000 ids: ~4 ms; a dense array indexed by id was
~0.5 ms but would take 16 GiB for one id near 2e9).

Rows are in popularity order (row 0 is the most popular item, ties by id): a sorted run of rows is then also a
popularity ranking, which candidate generation relies on to merge and cap popular lists without ranking them.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pandas as pd
from sqlalchemy import Engine, case, func, select

from ..data import clock
from ..data.rows import table
from ..data.models import Event, Item, ItemAttribute, ItemCategory
from ..settings import Settings
from .layout import LAYOUT

DAY = 86400.0
#: Bits of ``ItemTable.popular_bits``; the same values as the candidate source bits ``FROM_CATEGORY``/``FROM_GLOBAL``.
POPULAR_CATEGORY, POPULAR_GLOBAL = 2, 4


@dataclasses.dataclass
class ItemTable:
    ids: np.ndarray            # int64
    category: np.ndarray       # int64
    price: np.ndarray          # float64
    created_at: np.ndarray     # epoch s
    active: np.ndarray         # bool
    quality: np.ndarray
    photos: np.ndarray
    seller_rating: np.ndarray
    counts: np.ndarray         # (n, 5) interactions by EventType value (column 0 unused)
    recent_views: np.ndarray   # views in the 7 days before ``as_of``
    as_of: float               # epoch s the statistics were taken at
    popularity_weights: tuple[float, ...]   # weight of a view, click, contact, purchase (``Settings``)
    n_global_popular: int      # length of the global popular list
    n_category_popular: int    # length of each category's popular list
    loaded_at: float = dataclasses.field(default_factory=time.time)

    def __post_init__(self) -> None:
        n = len(self.ids)
        # Reorder every per-item array so that rows follow popularity, most popular first, ties by id.
        popularity = self.counts @ np.r_[0.0, self.popularity_weights] + 0.1 * self.recent_views
        order = np.lexsort((self.ids, -popularity))
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, np.ndarray):            # every per-item field; not as_of / loaded_at
                setattr(self, field.name, value[order])
        self.popularity = popularity[order]
        self._index = pd.Index(self.ids)
        self.rows(self.ids[:1])           # builds the index's hash table now (in the parent), not in each horse
        self.n_categories = int(self.category.max(initial=0)) + 1
        # Rank 0 = most popular; global (the row itself) and within-category (a stable sort by category).
        self.pop_rank = np.arange(n)
        cat_order = np.argsort(self.category, kind="stable")
        starts = np.searchsorted(self.category[cat_order], np.arange(self.n_categories))
        self.cat_rank = np.empty(n, dtype=np.int64)
        self.cat_rank[cat_order] = np.arange(n) - np.repeat(starts, np.bincount(self.category,
                                                                                minlength=self.n_categories))
        self.cat_size = np.bincount(self.category, minlength=self.n_categories).astype(np.float64)
        cat_pop = np.bincount(self.category, weights=self.popularity, minlength=self.n_categories)
        self.cat_share = cat_pop / max(cat_pop.sum(), 1e-9)
        self._static: np.ndarray | None = None
        # Scratch arrays of the candidate stage: one table serves one thread at a time (workers are processes).
        self._mark = np.zeros(n, dtype=bool)     # scratch for O(k) membership tests, always left all-False
        self._slot = np.zeros(n, dtype=np.int64)  # scratch for O(k) dedupe: written before read, never reset
        log_price = self.log_price = np.log1p(self.price)
        # float32 copies the feature code gathers straight into its float32 columns.
        self.log_price32 = log_price.astype(np.float32)
        self.created_day32 = (self.created_at / 86400.0).astype(np.float32)
        self.cat_log_price_mean = np.bincount(self.category, weights=log_price, minlength=self.n_categories) \
            / np.maximum(self.cat_size, 1)
        # Popular active items: global list and per category, most popular first, i.e. ascending rows.
        self.global_popular = np.flatnonzero(self.active)[: self.n_global_popular]
        cat_active = cat_order[self.active[cat_order]]
        bounds = np.searchsorted(self.category[cat_active], np.arange(self.n_categories + 1))
        self.category_popular = [cat_active[bounds[c]: min(bounds[c] + self.n_category_popular, bounds[c + 1])]
                                 for c in range(self.n_categories)]
        # Which popular list(s) each row is on, as candidate source bits (the category bit still needs the row's
        # category to be one of the user's top categories).
        self.popular_bits = np.zeros(n, dtype=np.uint8)
        self.popular_bits[self.global_popular] |= POPULAR_GLOBAL
        for rows in self.category_popular:
            self.popular_bits[rows] |= POPULAR_CATEGORY
        self.global_category = self.category[self.global_popular]
        self.global_on_category_list = (self.popular_bits[self.global_popular] & POPULAR_CATEGORY) > 0

    def static_features(self) -> np.ndarray:
        """The per-item features that do not depend on the user or the clock (``layout`` group "item_static"), as
        float32 rows, computed once per table; column-major: ``features.build`` gathers each column."""
        if self._static is None:
            views, clicks, contacts, purchases = (self.counts[:, t] for t in (1, 2, 3, 4))
            block = LAYOUT.stack("item_static", {
                "item_log_price": self.log_price,
                "item_price_vs_category": self.log_price - self.cat_log_price_mean[self.category],
                "item_quality": self.quality, "item_photos": self.photos, "item_seller_rating": self.seller_rating,
                "item_log_views": np.log1p(views), "item_log_clicks": np.log1p(clicks),
                "item_log_contacts": np.log1p(contacts), "item_log_purchases": np.log1p(purchases),
                "item_click_rate": (clicks + 1.0) / (views + 10.0),
                "item_contact_rate": (contacts + 0.5) / (views + 10.0),
                "item_purchase_rate": (purchases + 0.2) / (views + 10.0),
                "item_log_recent_views": np.log1p(self.recent_views), "item_log_pop_rank": np.log1p(self.pop_rank),
                "item_log_category_rank": np.log1p(self.cat_rank),
                "item_log_category_size": np.log1p(self.cat_size[self.category]),
                "item_category_global_share": self.cat_share[self.category],
            })
            self._static = np.asfortranarray(block)
        return self._static

    def __len__(self) -> int:
        return len(self.ids)

    def rows(self, item_ids: np.ndarray) -> np.ndarray:
        """Rows of ``item_ids``; -1 for ids this table does not know (e.g. listed after it was loaded)."""
        return self._index.get_indexer(np.asarray(item_ids, dtype=np.int64)).astype(np.int64, copy=False)


def load_item_table(engine: Engine, settings: Settings, as_of: float | None = None) -> ItemTable:
    """Items plus interaction statistics from events at or before ``as_of`` (default: the log's clock,
    ``data/clock.py``); popularity weights and popular-list lengths from ``settings``.

    Training passes its time cut as ``as_of`` so the statistics hold no future information; precompute the log's
    clock, which its batches are read at too.
    """
    with engine.connect() as conn:
        as_of = clock.log_clock(conn, settings) if as_of is None else as_of
        items = conn.execute(select(Item.id, Item.price, Item.created_at, Item.active).order_by(Item.id)).all()
        # TODO(issue 11, categories): one category per item for now, the smallest; NULL price/created_at as 0.
        first_category = dict(conn.execute(select(ItemCategory.item_id, func.min(ItemCategory.category))
                                           .group_by(ItemCategory.item_id)).all())
        attributes = conn.execute(select(ItemAttribute.item_id, ItemAttribute.name, ItemAttribute.value)).all()
        stats = conn.execute(
            select(
                Event.item_id,
                Event.type,
                func.count(),
                func.sum(case((Event.ts >= as_of - 7 * DAY, 1), else_=0)),
            )
            .where(Event.ts <= as_of)
            .group_by(Event.item_id, Event.type)
        ).all()
    attr = {(i, name): v for i, name, v in attributes}
    items = [(i, first_category.get(i, 0), p or 0.0, c or 0.0, a, attr.get((i, "quality"), 0.5),
              attr.get((i, "photos"), 1.0), attr.get((i, "seller_rating"), 4.0)) for i, p, c, a in items]
    cols = list(zip(*items)) if items else [[]] * 8
    ids = np.asarray(cols[0], dtype=np.int64)
    n = len(ids)
    counts = np.zeros((n, 5), dtype=np.float64)
    recent_views = np.zeros(n, dtype=np.float64)
    if stats and n:
        s = table(stats, item="<i8", type="<i8", count="<f8", recent="<f8")
        known = pd.Index(ids).get_indexer(s["item"])
        s, rows = s[known >= 0], known[known >= 0]
        np.add.at(counts, (rows, s["type"]), s["count"])
        is_view = s["type"] == 1
        np.add.at(recent_views, rows[is_view], s["recent"][is_view])
    return ItemTable(
        ids=ids,
        category=np.asarray(cols[1], dtype=np.int64),
        price=np.asarray(cols[2], dtype=np.float64),
        created_at=np.asarray(cols[3], dtype=np.float64),
        active=np.asarray(cols[4], dtype=bool),
        quality=np.asarray(cols[5], dtype=np.float64),
        photos=np.asarray(cols[6], dtype=np.float64),
        seller_rating=np.asarray(cols[7], dtype=np.float64),
        counts=counts,
        recent_views=recent_views,
        as_of=as_of,
        popularity_weights=settings.popularity_weights,
        n_global_popular=settings.global_popular,
        n_category_popular=settings.category_popular,
    )
