"""The one feature function, used by both training and precompute.

``build(items, hist, cand, now)`` returns a float32 matrix with one row per candidate and the columns declared in
``layout.LAYOUT``, each written by name. User-level quantities are computed once per user (length-B arrays) and
broadcast to candidates by fancy-indexing; nothing loops over candidates in Python.
"""

from __future__ import annotations

import numpy as np

from ..data.history import Histories
from .arrays import unique_sorted
from .candidates import FROM_CATEGORY, FROM_COVISIT, FROM_GLOBAL, Candidates
from .item_table import ItemTable
from .layout import LAYOUT

DAY = 86400.0
N_FEATURES = len(LAYOUT)
#: The "user_item" group, computed in place column by column in ``build`` (in this order, by name).
_USER_ITEM = ("ux_price_diff", "ux_price_z", "ux_price_ratio", "ux_covisit_score", "ux_log_covisit_score",
              "ux_covisit_count", "ux_covisit_norm")
if set(_USER_ITEM) != set(LAYOUT.group("user_item")):       # a column declared but never written would be garbage
    raise RuntimeError("features.build computes a different user_item group than layout.LAYOUT declares")
#: The source group by candidate flags (index = the FROM_* bits), looked up per candidate.
_FLAG_TABLE = LAYOUT.stack("source", {
    "ux_from_covisit": [(f & FROM_COVISIT) > 0 for f in range(8)],
    "ux_from_category": [(f & FROM_CATEGORY) > 0 for f in range(8)],
    "ux_from_global": [(f & FROM_GLOBAL) > 0 for f in range(8)],
    "ux_n_sources": [bin(f).count("1") for f in range(8)],
})


def build(items: ItemTable, hist: Histories, cand: Candidates, now: float) -> np.ndarray:
    r = cand.rows
    n_users, n_cat = len(hist), items.n_categories
    # Column-major: each feature is written as one contiguous column, and CatBoost builds its Pool from a
    # Fortran-ordered float32 matrix without copying (C order costs it a transposing copy larger than the predict).
    out = np.empty((len(r), N_FEATURES), dtype=LAYOUT.dtype, order="F")

    # ---- item: one gather from the table's precomputed block, plus the clock-dependent age -----------------
    _gather(out, LAYOUT.start("item_static"), items.static_features(), r)
    age = out[:, LAYOUT.index("item_age_days")]
    np.take(items.created_day32, r, out=age, mode="clip")
    np.subtract(np.float32(now / DAY), age, out=age)
    cat = items.category[r]
    sizes = np.diff(cand.offsets)

    # ---- user (length n_users, broadcast with [o]) ------------------------------------------------------
    h_owner = hist.owner
    known = hist.item_rows >= 0
    h_rows = np.where(known, hist.item_rows, 0)
    h_types = hist.types
    by_type = [np.bincount(h_owner[h_types == t], minlength=n_users).astype(np.float64) for t in (1, 2, 3, 4)]
    n_events = np.diff(hist.offsets).astype(np.float64)
    pair = unique_sorted(h_owner[known] * len(items) + h_rows[known])
    distinct_items = np.bincount(pair // len(items), minlength=n_users)
    h_cat = items.category[h_rows]
    cat_pair = unique_sorted(h_owner[known] * n_cat + h_cat[known])
    distinct_cats = np.bincount(cat_pair // n_cat, minlength=n_users)
    has = n_events > 0
    # Histories are oldest first within each user: first and last events sit at the segment ends.
    last_ts = np.where(has, hist.ts[np.maximum(hist.offsets[1:] - 1, 0)] if len(hist.ts) else 0.0, -np.inf)
    first_ts = np.where(has, hist.ts[np.minimum(hist.offsets[:-1], max(len(hist.ts) - 1, 0))]
                        if len(hist.ts) else 0.0, np.inf)
    days_last = np.where(has, (now - last_ts) / DAY, 365.0)
    days_first = np.where(has, (now - first_ts) / DAY, 0.0)
    ev24 = np.bincount(h_owner[hist.ts >= now - DAY], minlength=n_users)
    ev7 = np.bincount(h_owner[hist.ts >= now - 7 * DAY], minlength=n_users)
    h_lp = np.log1p(items.price[h_rows])
    k = np.maximum(np.bincount(h_owner[known], minlength=n_users), 1)
    u_mean = np.bincount(h_owner[known], weights=h_lp[known], minlength=n_users) / k
    u_sq = np.bincount(h_owner[known], weights=h_lp[known] ** 2, minlength=n_users) / k
    u_std = np.sqrt(np.maximum(u_sq - u_mean ** 2, 0.0))
    user_table = LAYOUT.stack("user", {
        "user_log_events": np.log1p(n_events), "user_log_views": np.log1p(by_type[0]),
        "user_log_clicks": np.log1p(by_type[1]), "user_log_contacts": np.log1p(by_type[2]),
        "user_log_purchases": np.log1p(by_type[3]), "user_log_distinct_items": np.log1p(distinct_items),
        "user_distinct_categories": distinct_cats, "user_days_since_last": days_last,
        "user_days_since_first": days_first, "user_events_24h": ev24, "user_events_7d": ev7,
        "user_click_rate": (by_type[1] + 1.0) / (by_type[0] + 10.0), "user_mean_log_price": u_mean,
        "user_std_log_price": u_std,
    })
    u0 = LAYOUT.start("user")
    # Candidates are grouped by user: one broadcast row per user fills its block (~6x faster than gathering by o).
    for k, (a, b) in enumerate(zip(cand.offsets[:-1].tolist(), cand.offsets[1:].tolist())):
        out[a:b, u0:u0 + user_table.shape[1]] = user_table[k]

    # ---- user x item ------------------------------------------------------------------------------------
    uc = cand.category_weight                            # computed once per batch by the candidate stage
    share = uc / np.maximum(uc.sum(axis=1, keepdims=True), 1e-9)
    rank = np.empty_like(cand.category_order)           # the inverse permutation of each row's order
    np.put_along_axis(rank, cand.category_order, np.arange(n_cat)[None, :], axis=1)
    rank = np.where(uc > 0, rank, n_cat)
    uc_last = np.full(n_users * n_cat, -np.inf)
    np.maximum.at(uc_last, (h_owner * n_cat + h_cat)[known], hist.ts[known])
    uc_contacts = np.bincount((h_owner * n_cat + h_cat)[known & (h_types >= 3)], minlength=n_users * n_cat)
    uc_week = np.bincount((h_owner * n_cat + h_cat)[known & (hist.ts >= now - 7 * DAY)],
                          minlength=n_users * n_cat)
    oc = np.repeat(np.arange(n_users) * n_cat, sizes) + cat
    uc_table = LAYOUT.stack("user_category", {
        "ux_category_share": share.ravel(), "ux_category_rank": rank.ravel(),
        "ux_days_since_category": np.where(np.isfinite(uc_last), (now - uc_last) / DAY, 365.0),
        "ux_log_category_contacts": np.log1p(uc_contacts), "ux_category_events_7d": uc_week,
    })
    _gather(out, LAYOUT.start("user_category"), uc_table, oc)
    # Price and co-visitation columns, computed in place in float32. Per-user factors are repeated over the user's
    # candidates (grouped by user); a user with no history gets diff 0, z 0 and ratio exp(0) = 1.
    diff, z, ratio, cov, log_cov, cov_count, cov_norm = (out[:, LAYOUT.index(name)] for name in _USER_ITEM)
    np.take(items.log_price32, r, out=diff, mode="clip")
    diff -= np.repeat(u_mean.astype(np.float32), sizes)
    diff *= np.repeat(has.astype(np.float32), sizes)
    np.abs(diff, out=z)
    z *= np.repeat((1.0 / (u_std + 0.1)).astype(np.float32), sizes)
    np.exp(diff, out=ratio)
    cov[:] = cand.cov_score
    np.log1p(cov, out=log_cov)
    cov_count[:] = cand.cov_count
    top = np.zeros(n_users)
    if len(r):
        # Candidates are grouped by user: a segment max (reduceat) instead of the much slower maximum.at.
        nonempty = sizes > 0
        top[nonempty] = np.maximum.reduceat(cand.cov_score, cand.offsets[:-1][nonempty])
    np.multiply(cov, np.repeat((1.0 / np.maximum(top, 1e-9)).astype(np.float32), sizes), out=cov_norm)
    _gather(out, LAYOUT.start("source"), _FLAG_TABLE, cand.flags)    # source bits and their count, by lookup
    return out


def _gather(out: np.ndarray, start: int, table: np.ndarray, index: np.ndarray) -> None:
    """``out[:, start:start+k] = table[index]`` column by column: each ``take`` writes one contiguous column of the
    Fortran-ordered output, ~3x faster than assigning a row-gathered block through a strided view.

    ``mode="clip"`` skips the bounds check and the buffered copy ``take`` makes with ``out`` otherwise (~40%
    faster, measured). Every index here is a row the candidate stage or the batch itself produced, never input;
    ``tests/test_pipeline.py`` checks every column against a plain Python reference."""
    for j in range(table.shape[1]):
        np.take(table[:, j], index, out=out[:, start + j], mode="clip")
