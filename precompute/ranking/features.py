"""The one feature function, used by both training and precompute.

``build(items, hist, cand, now)`` returns a float32 matrix with one row per candidate and the columns the item
table's layout declares (``layout.for_settings``), each written by name. User-level quantities are computed once per user (length-B arrays) and
broadcast to candidates by fancy-indexing; nothing loops over candidates in Python.
"""

from __future__ import annotations

import functools

import numpy as np

from ..data.history import Histories
from .arrays import unique_sorted
from . import shown as shown_columns, sources
from .candidates import ALL_SOURCES, Candidates
from .item_table import ItemTable, rates
from .layout import FeatureLayout
from .popularity import BatchPopularity
from ..units import DAY

#: The user's last events whose category shares ``ux_category_share_recent`` gives: what the user does now.
LAST_EVENTS = 10
#: The "user_item" group, computed in place column by column in ``build`` (in this order, by name).
_USER_ITEM = ("ux_price_diff", "ux_price_z", "ux_price_ratio", "ux_covisit_score", "ux_log_covisit_score",
              "ux_covisit_count", "ux_covisit_norm", "ux_covisit_last", "ux_knn_score", "ux_knn_norm",
              "ux_latent_score", "ux_popularity_vs_user", "ux_seen_before")
#: The source group's columns by candidate flags (index = the flag bits), looked up per candidate: one per declared
#: source (``sources.py``), and how many sources proposed the candidate.
_BITS = range(ALL_SOURCES + 1)
_FLAGS = {**{s.column: [(f & s.bit) > 0 for f in _BITS] for s in sources.SOURCES},
          "ux_n_sources": [bin(f).count("1") for f in _BITS]}


def build(items: ItemTable, hist: Histories, cand: Candidates, now: float | np.ndarray,
          live: BatchPopularity | None = None, shown: shown_columns.Shown | None = None) -> np.ndarray:
    """The feature matrix of ``cand``, columns as ``items.layout`` declares them (the settings' attributes and
    event types). Missing values (an item without price, creation time or categories, a user without priced
    events) are NaN, which CatBoost handles, never a made-up number.

    ``now``: the clock of the batch (serving), or each user's (``(B,)``: replayed steps, each at its own instant);
    ``live``: popularity at each user's clock (default: the item table's, as in serving); ``shown``: what each
    row was shown (``shown.py``; None: nothing), read when the layout has the "shown" group."""
    layout = items.layout
    if set(_USER_ITEM) != set(layout.group("user_item")):     # a column declared but never written is garbage
        raise RuntimeError("features.build computes a different user_item group than the layout declares")
    r = cand.rows
    n_cat = items.n_categories
    # Column-major: each feature is written as one contiguous column, and CatBoost builds its Pool from a
    # Fortran-ordered float32 matrix without copying (C order costs it a transposing copy larger than the predict).
    out = np.empty((len(r), len(layout)), dtype=layout.dtype, order="F")

    sizes = np.diff(cand.offsets)
    n_users = len(hist)
    scalar = np.ndim(now) == 0
    now_u = np.full(n_users, float(now)) if scalar else np.asarray(now, dtype=np.float64)
    # ---- item: one gather from the table's precomputed block, plus the clock-dependent age -----------------
    _gather(out, layout.start("item_static"), items.static, r)
    now_day = np.float32(now / DAY) if scalar else np.repeat((now_u / DAY).astype(np.float32), sizes)
    age = out[:, layout.index("item_age_days")]
    np.take(items.created_day32, r, out=age, mode="clip")
    np.subtract(now_day, age, out=age)
    # Time on the platform by its first event: the age of an item whose catalogue gives no creation time.
    since_first = out[:, layout.index("item_days_since_first_event")]
    np.take(items.first_day32, r, out=since_first, mode="clip")
    np.subtract(now_day, since_first, out=since_first)
    live = live if live is not None else items.live(n_users)
    live.gather(r, cand.offsets, out, layout.start("item_live"))

    # ---- user (length n_users, broadcast over each user's block) -----------------------------------------
    h_owner = hist.owner
    known = hist.item_rows >= 0
    h_rows = np.where(known, hist.item_rows, 0)
    n_types = len(items.type_names)
    declared = (hist.types >= 1) & (hist.types <= n_types)
    by_code = np.bincount(h_owner[declared] * (n_types + 1) + hist.types[declared],
                          minlength=n_users * (n_types + 1)).reshape(n_users, n_types + 1).astype(np.float64)
    n_events = np.diff(hist.offsets).astype(np.float64)
    pair = unique_sorted(h_owner[known] * len(items) + h_rows[known])
    distinct_items = np.bincount(pair // len(items), minlength=n_users)
    n_known = np.bincount(h_owner[known], minlength=n_users)
    # Every (event, category of its item) pair: an event counts in each category of its item.
    ev_known = np.flatnonzero(known)
    ev_at, ev_cat = items.categories_of(hist.item_rows[ev_known])
    ev_at = ev_known[ev_at]
    uc_key = h_owner[ev_at] * n_cat + ev_cat
    distinct_cats = np.bincount(unique_sorted(uc_key) // max(n_cat, 1), minlength=n_users)
    has = n_events > 0
    # Histories are oldest first within each user: first and last events sit at the segment ends.
    last_ts = hist.newest_event()
    first_ts = np.where(has, hist.ts[np.minimum(hist.offsets[:-1], max(len(hist.ts) - 1, 0))]
                        if len(hist.ts) else 0.0, np.inf)
    days_last = np.where(has, (now_u - last_ts) / DAY, 365.0)
    days_first = np.where(has, (now_u - first_ts) / DAY, 0.0)
    ev_now = now_u[h_owner]
    ev24 = np.bincount(h_owner[hist.ts >= ev_now - DAY], minlength=n_users)
    ev7 = np.bincount(h_owner[hist.ts >= ev_now - 7 * DAY], minlength=n_users)
    # Price level of the user's priced events only; NaN for a user with none (no price information at all).
    h_lp = items.log_price[h_rows]
    priced = known & np.isfinite(h_lp)
    k = np.bincount(h_owner[priced], minlength=n_users).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        u_mean = np.bincount(h_owner[priced], weights=h_lp[priced], minlength=n_users) / k
        u_sq = np.bincount(h_owner[priced], weights=h_lp[priced] ** 2, minlength=n_users) / k
    u_std = np.sqrt(np.maximum(u_sq - u_mean ** 2, 0.0))
    types = items.type_names
    user_table = layout.stack("user", {
        "user_log_events": np.log1p(n_events),
        **{f"user_log_{t}": np.log1p(by_code[:, code]) for code, t in enumerate(types, start=1)},
        "user_log_distinct_items": np.log1p(distinct_items),
        "user_distinct_categories": distinct_cats, "user_days_since_last": days_last,
        "user_days_since_first": days_first, "user_events_24h": ev24, "user_events_7d": ev7,
        **rates("user", list(types), by_code), "user_mean_log_price": u_mean, "user_std_log_price": u_std,
        # The share of the user's events on an item they had had before: a grocery shopper's staples, a viewer's none.
        "user_repeat_rate": np.where(n_known > 0, 1.0 - distinct_items / np.maximum(n_known, 1), 0.0),
    })
    u0 = layout.start("user")
    # Candidates are grouped by user: one broadcast row per user fills its block (~6x faster than gathering by o).
    for j, (a, b) in enumerate(zip(cand.offsets[:-1].tolist(), cand.offsets[1:].tolist())):
        out[a:b, u0:u0 + user_table.shape[1]] = user_table[j]

    # ---- user x category of the item --------------------------------------------------------------------
    # An item in several categories is described by its strongest category for this user (the best rank in the
    # user's category order, ties by category): every column then speaks of one category, the best reason the
    # user has to like the item, and no event is counted twice because its item shares two categories with
    # the candidate. An item without categories gets NaN in the whole group.
    uc = cand.category_weight                            # computed once per batch by the candidate stage
    share = uc / np.maximum(uc.sum(axis=1, keepdims=True), 1e-9)
    order_rank = np.empty_like(cand.category_order)       # the inverse permutation of each row's order
    np.put_along_axis(order_rank, cand.category_order, np.arange(n_cat)[None, :], axis=1)
    rank = np.where(uc > 0, order_rank, n_cat)
    uc_last = np.full(n_users * n_cat, -np.inf)
    np.maximum.at(uc_last, uc_key, hist.ts[ev_at])
    uc_week = np.bincount(uc_key[hist.ts[ev_at] >= ev_now[ev_at] - 7 * DAY], minlength=n_users * n_cat)
    # The last LAST_EVENTS events of each user (histories are oldest first): their share in each category.
    tail = np.arange(len(h_owner)) >= hist.offsets[1:][h_owner] - LAST_EVENTS
    uc_tail = np.bincount(uc_key[tail[ev_at]], minlength=n_users * n_cat) \
        / np.repeat(np.maximum(np.minimum(n_events, LAST_EVENTS), 1.0), n_cat)
    uc_table = layout.stack("user_category", {
        "ux_category_share": share.ravel(), "ux_category_rank": rank.ravel(),
        "ux_days_since_category": np.where(np.isfinite(uc_last), (np.repeat(now_u, n_cat) - uc_last) / DAY, 365.0),
        "ux_log_category_weight": np.log1p(uc.ravel()), "ux_category_events_7d": uc_week,
        "ux_category_share_recent": uc_tail,
    })
    # The chosen (user, category) cell of each candidate; candidates without categories point at a NaN row.
    owner = np.repeat(np.arange(n_users), sizes)
    deg = items.n_cats[r]
    cell = np.full(len(r), n_users * n_cat, dtype=np.int64)
    one = np.flatnonzero(deg == 1)                      # the common case: the item's only category
    cell[one] = owner[one] * n_cat + items.cat_of[items.cat_indptr[r[one]]]
    many = np.flatnonzero(deg > 1)
    if len(many):
        m_at, m_cat = items.categories_of(r[many])
        best = np.minimum.reduceat(order_rank[owner[many][m_at], m_cat], np.r_[0, np.cumsum(deg[many])[:-1]])
        cell[many] = owner[many] * n_cat + cand.category_order[owner[many], best]
    _gather(out, layout.start("user_category"), np.vstack([uc_table, np.full((1, uc_table.shape[1]), np.nan,
                                                                             dtype=uc_table.dtype)]), cell)
    # Price and co-visitation columns, computed in place in float32. Per-user factors are repeated over the user's
    # candidates (grouped by user); NaN where the item or the user has no price.
    diff, z, ratio, cov, log_cov, cov_count, cov_norm, cov_last, knn, knn_norm, latent, pop_vs, seen_before = (
        out[:, layout.index(name)] for name in _USER_ITEM)
    np.take(items.log_price32, r, out=diff, mode="clip")
    diff -= np.repeat(u_mean.astype(np.float32), sizes)
    np.abs(diff, out=z)
    z *= np.repeat((1.0 / (u_std + 0.1)).astype(np.float32), sizes)
    np.exp(diff, out=ratio)
    cov[:] = cand.cov_score
    np.log1p(cov, out=log_cov)
    cov_count[:] = cand.cov_count
    cov_last[:] = cand.cov_last
    # The item-kNN score over the history, and per distinct item of it (a long history sums more similarities).
    knn[:] = cand.knn_score
    np.multiply(knn, np.repeat((1.0 / np.maximum(distinct_items, 1)).astype(np.float32), sizes), out=knn_norm)
    latent[:] = cand.latent_score
    top = cand.largest_cov_score()
    np.multiply(cov, np.repeat((1.0 / np.maximum(top, 1e-9)).astype(np.float32), sizes), out=cov_norm)
    # The candidate's all-time popularity rank (log) against the mean of the items the user interacted with (each
    # event counts): mainstream or niche for this user; NaN without.
    static = items.static
    k = layout.index("item_log_pop_rank")
    with np.errstate(invalid="ignore", divide="ignore"):
        of_user = np.bincount(h_owner[known], weights=static[h_rows[known], k - layout.start("item_static")],
                              minlength=n_users) / np.bincount(h_owner[known], minlength=n_users)
    np.subtract(out[:, k], np.repeat(of_user.astype(np.float32), sizes), out=pop_vs)
    # The user interacted with the candidate before the seen window (it is in the kept history, not seen): a
    # repeat, which a feed of things new to the user ranks differently.
    # Only a candidate whose item is in some history of the batch can be one: those are found through the
    # items marked in a per-item array, and only they are searched among the (user, item) pairs.
    mark = np.zeros(len(items), dtype=bool)
    mark[h_rows[known]] = True
    maybe = np.flatnonzero(mark[r])
    seen_before[:] = 0
    if len(maybe):
        code = owner[maybe] * len(items) + r[maybe]
        seen_before[maybe] = pair[np.minimum(np.searchsorted(pair, code), len(pair) - 1)] == code
    _gather(out, layout.start("source"), _flag_table(layout), cand.flags)   # source bits and their count
    if layout.has("shown"):
        built = shown_columns.columns(shown, owner, r, now_u, h_owner, hist.item_rows, hist.ts, cell, items)
        for name, column in built.items():
            out[:, layout.index(name)] = column
    return out


@functools.lru_cache(maxsize=16)
def _flag_table(layout: FeatureLayout) -> np.ndarray:
    return layout.stack("source", _FLAGS)


def _gather(out: np.ndarray, start: int, table: np.ndarray, index: np.ndarray) -> None:
    """``out[:, start:start+k] = table[index]`` column by column: each ``take`` writes one contiguous column of the
    Fortran-ordered output, ~3x faster than assigning a row-gathered block through a strided view.

    ``mode="clip"`` skips the bounds check and the buffered copy ``take`` makes with ``out`` otherwise (~40%
    faster, measured). Every index here is a row the candidate stage or the batch itself produced, never input;
    ``tests/test_pipeline.py`` checks every column against a plain Python reference."""
    for j in range(table.shape[1]):
        np.take(table[:, j], index, out=out[:, start + j], mode="clip")
