"""Candidate generation for a batch of users: co-visitation neighbours of recent items, popular items of the
user's top categories, and global popular; union, dedupe, drop seen and inactive items, cap.

Work is whole-array numpy per user (a few dozen array ops), never a Python loop over items.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import defaults
from .arrays import unique_first, unique_sorted
from .covisit import CoVisit
from .history import Histories
from .items import ItemTable

FROM_COVISIT, FROM_CATEGORY, FROM_GLOBAL = 1, 2, 4
#: How much each interaction type counts towards a user's category preference (index = EventType value).
TYPE_WEIGHT = np.array([0.0, 1.0, 2.0, 4.0, 6.0])
RECENCY_DECAY = 0.85


@dataclasses.dataclass
class Candidates:
    """Candidates of user ``k`` of the batch are at ``offsets[k]:offsets[k+1]``."""

    offsets: np.ndarray
    rows: np.ndarray         # item rows
    cov_score: np.ndarray    # summed co-visitation weight from the user's recent items
    cov_count: np.ndarray    # how many recent items list it as a neighbour
    flags: np.ndarray        # FROM_* bits

    @property
    def owner(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.offsets) - 1), np.diff(self.offsets))


def user_category_weights(items: ItemTable, rows: np.ndarray, types: np.ndarray) -> np.ndarray:
    """Interaction-weighted count of a user's history per category."""
    ok = rows >= 0
    return np.bincount(items.category[rows[ok]], weights=TYPE_WEIGHT[types[ok]], minlength=items.n_categories)


def for_user(items: ItemTable, cov: CoVisit, rows: np.ndarray, types: np.ndarray,
             max_candidates: int = defaults.MAX_CANDIDATES) -> tuple[np.ndarray, ...]:
    """Candidates for one user from their history (``rows``/``types`` oldest first)."""
    known = rows[rows >= 0]
    # Distinct recent items, most recent first.
    rev = known[::-1]
    uniq, first_pos = unique_first(rev)
    recent = uniq[np.argsort(first_pos)][: defaults.COVISIT_RECENT_ITEMS]
    cov_rows, cov_w = cov.gather(recent, RECENCY_DECAY ** np.arange(len(recent)))

    cat_w = user_category_weights(items, rows, types)
    top_cats = np.argsort(-cat_w, kind="stable")[: defaults.USER_TOP_CATEGORIES]
    top_cats = top_cats[cat_w[top_cats] > 0]
    cat_rows = np.concatenate([items.category_popular[c] for c in top_cats]) if len(top_cats) else \
        np.empty(0, dtype=np.int64)
    glob_rows = items.global_popular

    # Union by one sort of all rows; co-visitation sums over the (smaller) co-visited rows only; source bits
    # through a per-item scratch array (left all-zero), which costs O(rows) where binary search costs far more.
    cand = unique_sorted(np.concatenate([cov_rows, cat_rows, glob_rows]))
    m = len(cand)
    cov_score = np.zeros(m)
    cov_count = np.zeros(m)
    if len(cov_rows):
        cov_u, cov_inv = np.unique(cov_rows, return_inverse=True)
        at = np.searchsorted(cand, cov_u)        # both sorted
        cov_score[at] = np.bincount(cov_inv, weights=cov_w)
        cov_count[at] = np.bincount(cov_inv)
    bits = items._bits
    bits[cov_rows] |= FROM_COVISIT               # repeated rows all write the same value
    bits[cat_rows] |= FROM_CATEGORY
    bits[glob_rows] |= FROM_GLOBAL
    flags = bits[cand].astype(np.int64)
    bits[cand] = 0

    mark = items._mark                      # O(n) membership instead of np.isin's sort
    mark[known] = True
    keep = items.active[cand] & ~mark[cand]
    mark[known] = False
    cand, cov_score, cov_count, flags = cand[keep], cov_score[keep], cov_count[keep], flags[keep]
    if len(cand) > max_candidates:
        # Prefer co-visited items, then popular ones.
        prior = cov_score * 1e6 + items.popularity[cand]
        top = np.argpartition(-prior, max_candidates - 1)[:max_candidates]
        top.sort()
        cand, cov_score, cov_count, flags = cand[top], cov_score[top], cov_count[top], flags[top]
    return cand, cov_score, cov_count, flags


def for_batch(items: ItemTable, cov: CoVisit, hist: Histories,
              max_candidates: int = defaults.MAX_CANDIDATES) -> Candidates:
    parts = [
        for_user(items, cov, hist.item_rows[a:b], hist.types[a:b], max_candidates)
        for a, b in zip(hist.offsets[:-1], hist.offsets[1:])
    ]
    sizes = [len(p[0]) for p in parts]
    cat = (lambda i, dt: np.concatenate([p[i] for p in parts]).astype(dt) if parts else np.empty(0, dt))
    return Candidates(
        offsets=np.r_[0, np.cumsum(sizes)].astype(np.int64),
        rows=cat(0, np.int64),
        cov_score=cat(1, np.float64),
        cov_count=cat(2, np.float64),
        flags=cat(3, np.int64),
    )
