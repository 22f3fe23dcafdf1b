"""Candidate generation for a batch of users: co-visitation neighbours of recent items, the items most popular in the
last hour and day at the user's clock (``popularity.py``), popular items of the user's top categories, and global
popular; union, dedupe, drop seen and inactive items, cap.

Work is whole-array numpy: per-user quantities that need the whole batch (category weights) are computed once per
batch, the rest is a couple of dozen array ops per user, never a Python loop over items. Nothing is ranked:
co-visited items are deduped in O(n) through a per-item scratch array (``workspace.py``, ``arrays.distinct``), popular ones come
ranked already (item rows are in popularity order).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..data.history import Histories
from ..feeds import taste
from ..settings import Settings
from . import arrays, latent, sources
from .item_table import POPULAR_CATEGORY, POPULAR_GLOBAL, ItemTable
from .popularity import SOURCES, BatchPopularity
from .source_index import SourceIndex
from .workspace import Workspace

#: Each source's flag bit (``sources.py``, where they are declared).
FROM_COVISIT, FROM_KNN, FROM_LATENT = sources.bit("covisit"), sources.bit("knn"), sources.bit("latent")
FROM_CATEGORY, FROM_GLOBAL = POPULAR_CATEGORY, POPULAR_GLOBAL
FROM_RECENT_1H, FROM_RECENT_1D = sources.bit("recent_1h"), sources.bit("recent_1d")
#: Every source bit (``FROM_*``) set: flags are below ``ALL_SOURCES + 1``.
ALL_SOURCES = sources.ALL


@dataclasses.dataclass
class Candidates:
    """Candidates of user ``k`` of the batch are at ``offsets[k]:offsets[k+1]``, in no particular order."""

    offsets: np.ndarray
    rows: np.ndarray         # item rows
    cov_score: np.ndarray    # summed co-visitation weight from the user's recent items
    cov_count: np.ndarray    # how many recent items list it as a neighbour
    cov_last: np.ndarray     # co-visitation weight from the user's most recent item alone
    knn_score: np.ndarray    # summed cosine similarity to the distinct items of the user's history (``knn.py``)
    latent_score: np.ndarray  # the latent model's score for the user's history (``latent.py``; 0 without one)
    flags: np.ndarray        # FROM_* bits
    #: ``(B, n_categories)`` type-weighted interactions of each user per (dense) category and each row's categories
    #: from strongest to weakest (stable): computed once here, reused by the features.
    category_weight: np.ndarray
    category_order: np.ndarray
    #: Each user's largest ``cov_score`` among all their candidates (the features scale by it), when this is a
    #: subset of them (``take``); None: computed from these.
    cov_top: np.ndarray | None = None

    @property
    def owner(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.offsets) - 1), np.diff(self.offsets))

    def largest_cov_score(self) -> np.ndarray:
        """``(B,)`` each user's largest co-visitation score over their candidates (0 without any)."""
        if self.cov_top is not None:
            return self.cov_top
        top = np.zeros(len(self.offsets) - 1)
        nonempty = np.diff(self.offsets) > 0
        if np.any(nonempty):
            # Candidates are grouped by user: a segment max (reduceat) instead of the much slower maximum.at.
            top[nonempty] = np.maximum.reduceat(self.cov_score, self.offsets[:-1][nonempty])
        return top

    def take(self, keep: np.ndarray) -> Candidates:
        """The candidates where ``keep`` (a mask over them) holds, still grouped by user; their feature rows are the
        whole set's rows at ``keep`` (training builds features for its sampled examples only)."""
        per_user = np.bincount(self.owner[keep], minlength=len(self.offsets) - 1)
        return dataclasses.replace(
            self, offsets=np.r_[0, np.cumsum(per_user)].astype(np.int64), rows=self.rows[keep],
            cov_score=self.cov_score[keep], cov_count=self.cov_count[keep], cov_last=self.cov_last[keep],
            knn_score=self.knn_score[keep], latent_score=self.latent_score[keep], flags=self.flags[keep],
            cov_top=self.largest_cov_score())


def category_weights(items: ItemTable, hist: Histories) -> np.ndarray:
    """``(B, n_categories)`` weight of each user's history per category, by the rule of ``feeds/taste.py``: each
    event adds its type's weight (``PREFEED_EVENT_TYPES``; codes past the declaration weigh 0) to every category of
    its item."""
    known = np.flatnonzero(hist.item_rows >= 0)
    event, cat = items.categories_of(hist.item_rows[known])
    return taste.category_weights(hist.owner[known], items.weight_of(hist.types[known]), event, cat, len(hist),
                                  items.n_categories)


def recent_items(hist: Histories, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each user's ``k`` most recent distinct items, most recent first, for the whole batch at once.

    Returns item rows, their user's position in the batch, and their recency rank (0 = most recent).
    """
    known = hist.item_rows >= 0
    owner, rows = hist.owner[known][::-1], hist.item_rows[known][::-1]   # newest first within each user
    n = len(rows)
    if n == 0:
        return rows, owner, owner
    # First occurrence of each (user, item) in newest-first order = the item's latest interaction.
    key = owner * (int(rows.max()) + 1) + rows
    by_key = np.argsort(key, kind="stable")
    key = key[by_key]
    latest = by_key[np.r_[True, key[1:] != key[:-1]]]
    # Grouped by user (ascending), newest first within each; rank within the user, keep the first k.
    latest = latest[np.argsort(owner[latest] * n + latest)]
    o = owner[latest]
    first = np.r_[True, o[1:] != o[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(len(o)), 0))
    rank = np.arange(len(o)) - start
    keep = rank < k
    return rows[latest[keep]], o[keep], rank[keep]


def for_user(items: ItemTable, seen: np.ndarray, cov_rows: np.ndarray, cov_w: np.ndarray, cov_w0: np.ndarray,
             top_cats: np.ndarray, recent: list[np.ndarray], max_candidates: int, knn_rows: np.ndarray,
             knn_w: np.ndarray, n_knn: int, latent_rows: np.ndarray, work: Workspace) -> tuple[np.ndarray, ...]:
    """Candidates for one user from their co-visited neighbours, the recent-popularity lists at their clock
    (``recent``, one per ``popularity.SOURCES``) and strongest categories, leaving out the ``seen`` item rows (every
    item interacted with inside the seen window, ``Histories.seen``).

    Every co-visited item is kept (the strongest ``max_candidates`` if there are more), then the ``n_knn`` items
    most similar to the history (``knn_rows`` summed by ``knn_w``), then the latent model's best (``latent_rows``,
    best first), then every recently popular one (as many as the cap leaves), then the most popular of the popular
    lists' items fill the rest. Every candidate carries its kNN score, whichever source brought it. Item rows are in
    popularity order and the popular lists are ascending runs of rows, so one stable sort (a linear merge of
    presorted runs) ranks their union, and the cap is a prefix of it: nothing is partitioned or ranked per user.
    """
    # The popular lists, merged (``ItemTable.popular``, kept per set of top categories); their rows mark their
    # source bits in the all-zero ``work.bits`` scratch (reset below).
    bits = work.bits
    popular, popular_bits = items.popular(top_cats, bits)
    bits[popular] |= popular_bits
    # Distinct co-visited neighbours; weights and counts summed through each one's position in the slot array.
    slot = work.slot
    cov = arrays.distinct(slot, cov_rows)
    slot[cov] = np.arange(len(cov))
    at = slot[cov_rows]
    cov_score = np.bincount(at, weights=cov_w, minlength=len(cov))
    cov_last = np.bincount(at, weights=cov_w0, minlength=len(cov))
    cov_count = np.bincount(at, minlength=len(cov))
    # Drop seen and inactive items (O(k) membership through the all-False ``work.mark`` scratch); popular lists hold
    # active items only. Co-visited items are marked too, so the popular fill skips them.
    mark = work.mark
    mark[seen] = True
    keep = np.flatnonzero(items.active[cov] & ~mark[cov])
    if len(keep) > max_candidates:
        keep = keep[np.argpartition(-cov_score[keep], max_candidates - 1)[:max_candidates]]
    mark[cov] = True
    # kNN neighbours of the history: summed similarity per distinct item, in the all-zero ``work.score`` scratch (reset
    # below; ``add.at`` sums in the rows' order, as a bincount would, at half its cost here); the strongest active
    # unseen ones not co-visited join.
    score = work.score
    near = arrays.distinct(slot, knn_rows)
    np.add.at(score, knn_rows, knn_w)
    near_score = score[near]
    room = max(min(n_knn, max_candidates - len(keep)), 0)
    pick = np.flatnonzero(items.active[near] & ~mark[near])
    if len(pick) > room:
        pick = arrays.strongest(pick, near_score[pick], near[pick], room)
    close = near[pick]
    bits[close] |= FROM_KNN
    mark[close] = True
    # The latent model's best for the history (active and unseen already): those not taken yet join.
    bits[latent_rows] |= FROM_LATENT
    deep = latent_rows[~mark[latent_rows]][: max(max_candidates - len(keep) - len(close), 0)]
    mark[deep] = True
    close = np.concatenate([close, deep])
    # The recent lists: their rows are marked with their bit; those not co-visited, not seen, active, join next.
    lists = [rows_ for rows_ in recent if len(rows_)]
    for rows_, (_, bit) in zip(recent, SOURCES):
        bits[rows_] |= bit
    hot = arrays.distinct(slot, np.concatenate(lists)) if lists else np.empty(0, dtype=np.int64)
    hot = hot[items.active[hot] & ~mark[hot]][: max(max_candidates - len(keep) - len(close), 0)]
    mark[hot] = True
    fill = popular[~mark[popular]][: max(max_candidates - len(keep) - len(close) - len(hot), 0)]
    mark[seen] = False
    mark[cov] = False
    mark[hot] = False
    mark[close] = False

    rows = np.concatenate([cov[keep], close, hot, fill])
    zeros = np.zeros(len(close) + len(hot) + len(fill))
    knn_score = score[rows]                    # every candidate's kNN score, whichever source brought it
    score[near] = 0.0
    # Source bits: the lists a row is on (the category bit only for lists of the user's top categories).
    flags = bits[rows]
    bits[popular] = 0
    for rows_ in lists:
        bits[rows_] = 0
    bits[close] = 0
    bits[latent_rows] = 0
    flags[: len(keep)] |= FROM_COVISIT
    return (rows, np.concatenate([cov_score[keep], zeros]), np.concatenate([cov_count[keep], zeros]),
            np.concatenate([cov_last[keep], zeros]), flags, knn_score)


def recent_lengths(settings: Settings) -> tuple[int, ...]:
    """The recent-popularity lists' lengths, in ``popularity.SOURCES`` order."""
    return settings.recent_popular_1h, settings.recent_popular_1d


def for_batch(items: ItemTable, index: SourceIndex, hist: Histories, settings: Settings,
              live: BatchPopularity | None = None, work: Workspace | None = None) -> Candidates:
    """Candidates of every user of ``hist``; list lengths, weights and the cap from ``settings``; popularity at each
    user's clock from ``live`` (default: the item table's, at its ``as_of``, as in serving); ``work``: the caller's
    scratch for this table (default: a new one)."""
    n_users = len(hist)
    live = live if live is not None else items.live(n_users, recent_lengths(settings))
    work = work if work is not None and work.fits(len(items)) else Workspace.for_items(len(items))
    max_candidates = settings.max_candidates
    weight = category_weights(items, hist)
    order = np.argsort(-weight, axis=1, kind="stable")
    k = settings.user_top_categories
    # Co-visited neighbours of every user's recent items in one gather, grouped by user.
    recent, recent_owner, recent_rank = recent_items(hist, settings.covisit_recent_items)
    cov_rows, cov_w, per_recent = index.covisit.gather(recent, settings.recency_decay ** recent_rank)
    cov_at = np.r_[0, np.cumsum(np.bincount(recent_owner, weights=per_recent, minlength=n_users))].astype(np.int64)
    cov_w0 = np.where(np.repeat(recent_rank, per_recent) == 0, cov_w, 0.0)     # from the most recent item alone
    # kNN neighbours of every distinct item of each user's (kept) history, weight 1 each.
    mine, mine_owner, _ = recent_items(hist, settings.history_limit)
    if index.knn is not None and settings.knn_candidates >= 0:
        knn_rows, knn_w, per_item = index.knn.gather(mine)
        knn_at = np.r_[0, np.cumsum(np.bincount(mine_owner, weights=per_item, minlength=n_users))].astype(np.int64)
    else:
        knn_rows, knn_w, knn_at = np.empty(0, np.int64), np.empty(0), np.zeros(n_users + 1, dtype=np.int64)
    # The latent model: each user's vector from their history's distinct items, their best unseen active items.
    dense = latent_top = None
    if index.latent is not None:
        # Every item's score for every user of the batch, one float32 product over the items with a factor (the
        # others score 0): the candidates' scores are gathered from it, and the best items found in it are re-scored
        # exactly.
        vectors = index.latent.user_vectors(mine, mine_owner, n_users)
        dense = vectors.astype(np.float32) @ index.latent.factors32
        if settings.latent_candidates > 0:
            latent_top = _latent_top(items, hist, dense, vectors, index.latent, settings.latent_candidates)
    no_rows = np.empty(0, dtype=np.int64)
    parts = []
    for u in range(n_users):
        lo, hi = cov_at[u], cov_at[u + 1]
        top = order[u, :k]
        k_lo, k_hi = knn_at[u], knn_at[u + 1]
        parts.append(for_user(items, hist.seen(u), cov_rows[lo:hi], cov_w[lo:hi], cov_w0[lo:hi],
                              top[weight[u, top] > 0], live.lists[live.which[u]], max_candidates,
                              knn_rows[k_lo:k_hi], knn_w[k_lo:k_hi], settings.knn_candidates,
                              no_rows if latent_top is None else latent_top[u][latent_top[u] >= 0], work))
    sizes = [len(p[0]) for p in parts]
    cat = (lambda i, dt: np.concatenate([p[i] for p in parts]).astype(dt, copy=False) if parts
           else np.empty(0, dt))
    offsets = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    rows = cat(0, np.int64)
    latent_score = np.zeros(len(rows))
    if dense is not None and len(rows):
        col = index.latent.column[rows]
        has = np.flatnonzero(col >= 0)
        # One flat index into the product (~2x faster than indexing it by row and column arrays).
        at = np.repeat(np.arange(n_users) * dense.shape[1], sizes)[has] + col[has]
        latent_score[has] = np.take(dense.reshape(-1), at)
    return Candidates(
        offsets=offsets,
        rows=rows,
        cov_score=cat(1, np.float64),
        cov_count=cat(2, np.float64),
        cov_last=cat(3, np.float64),
        flags=cat(4, np.int64),
        knn_score=cat(5, np.float64),
        latent_score=latent_score,
        category_weight=weight,
        category_order=order,
    )


def _latent_top(items: ItemTable, hist: Histories, scores: np.ndarray, vectors: np.ndarray,
                model: latent.LatentIndex, n: int) -> np.ndarray:
    """``(B, n)`` each user's best active items (rows) by the latent model that they have not seen (-1 past the
    end), by their exact scores (``vectors`` times the float64 factors). ``scores`` (the float32 product, one column
    per item with a factor: ``model.column``) get -inf at the items left out: no candidate is one of them, so the
    candidates' scores gathered from it are unaffected."""
    col = model.column[items.inactive_rows]
    scores[:, col[col >= 0]] = -np.inf
    col = model.column[hist.seen_rows]
    has = col >= 0
    scores[np.repeat(np.arange(len(hist)), np.diff(hist.seen_offsets))[has], col[has]] = -np.inf
    item_row = model.rows
    top = latent.top(scores, n, rescore=lambda rows, cols: np.einsum("ij,ij->i", vectors[rows],
                                                                     model.factors_of(item_row[cols])),
                     error=latent.float32_error(vectors, model.norm))[0]
    return np.where(top >= 0, item_row[np.maximum(top, 0)], -1)
