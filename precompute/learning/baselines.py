"""The baselines the ranker is judged against, each ranking every judged user at the cut from the pre-cut log only.

- ``popular``: items by type-weighted interaction count before the cut (``PREFEED_EVENT_TYPES`` weights).
- ``recent_popular``: the same over the last ``recent_days`` before the cut.
- ``category_popular``: score(u, i) = Σ_c share_u(c) · P(i | c), where share_u(c) is the user's share of
  type-weighted pre-cut interactions in category c (an event counts for each category of its item) and
  P(i | c) = pop(i) / Σ_{j ∈ c} pop(j) with pop the ``popular`` score. Ties, and the rest of a list once the
  user's categories run out (or a user without categories), follow global popularity.
- ``covisit``: co-visitation only: neighbours of the user's ``covisit_recent_items`` most recent items in the
  co-visitation index built from the pre-cut log, weighted by ``recency_decay``^rank, summed, exactly as
  candidate generation gathers them; no popularity fill (a user without neighbours gets an empty list).
- ``item_knn``: cosine item-kNN over the binary pre-cut user × item matrix (1 = any interaction of positive type
  weight): score(u, j) = Σ_{i ∈ I_u} cos(i, j), computed per batch as (X_u · Xnᵀ) · Xn with Xn the column-normalised
  matrix, so no item × item matrix is ever formed.
- ``latent``: the latent model fitted on the pre-cut log (``ranking/latent.py``, carried by the source index): the
  user's vector is the sum of their pre-cut items' factors; empty lists when no latent model was fitted.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy import sparse

from ..data.history import histories_from_arrays
from ..data.log import EventLog
from ..ranking import candidates
from ..ranking.item_table import ItemTable
from ..ranking.source_index import SourceIndex
from ..settings import Settings
from ..units import DAY
from .lists import Collector, Ranked, batches, from_dense, from_order, from_sparse
from .split import Split

#: Judged users ranked together: the dense methods hold a (batch, items) float32 matrix (~60 MB at 60k items).
BATCH = 256
BASELINES = ("popular", "recent_popular", "category_popular", "covisit", "item_knn", "latent")


def popularity(split: Split, items: ItemTable, since: float = -np.inf) -> np.ndarray:
    """Type-weighted interactions per item row in the pre-cut log at or after ``since`` (epoch s)."""
    item, type_, ts = split.pre.item, split.pre.type, split.pre.ts
    at = ts >= since
    rows = items.rows(item[at])
    ok = rows >= 0
    return np.bincount(rows[ok], weights=items.weight_of(type_[at][ok]), minlength=len(items))


def global_order(score: np.ndarray, active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of positive score, best first (ties by row), and the candidate mask they form."""
    candidate = (score > 0) & active
    rows = np.flatnonzero(candidate)
    return rows[np.lexsort((rows, -score[rows]))], candidate


def popular(split: Split, items: ItemTable, n: int, score: np.ndarray | None = None) -> Ranked:
    order, candidate = global_order(popularity(split, items) if score is None else score, items.active)
    out = Collector()
    for a, b in batches(split, BATCH * 8):
        from_order(split, order, candidate, a, b, n, out)
    return out.ranked()


def recent_popular(split: Split, items: ItemTable, n: int, days: float) -> Ranked:
    return popular(split, items, n, popularity(split, items, since=split.cut - days * DAY))


def user_item_matrix(split: Split, items: ItemTable, user_ids: np.ndarray, weighted: bool,
                     events: EventLog | None = None) -> sparse.csr_matrix:
    """``(len(user_ids), items)`` pre-cut interactions of ``user_ids`` (ascending): summed type weights, or 1 for
    a pair with any interaction of positive weight (``weighted=False``). ``events``: a part of the pre-cut log
    holding all of their events (``Split.events_of``), to scan instead of all of it."""
    events = split.pre if events is None else events
    user, item, type_ = events.user, events.item, events.type
    at = np.isin(user, user_ids)
    rows, w = items.rows(item[at]), items.weight_of(type_[at])
    ok = (rows >= 0) & (w > 0)
    m = sparse.csr_matrix((w[ok], (np.searchsorted(user_ids, user[at][ok]), rows[ok])),
                          shape=(len(user_ids), len(items)))
    m.sum_duplicates()
    if not weighted:
        m.data[:] = 1.0
    return m


def category_popular(split: Split, items: ItemTable, n: int) -> Ranked:
    pop = popularity(split, items)
    which, cat = items.categories_of(np.arange(len(items)))
    member = sparse.csr_matrix((np.ones(len(which)), (which, cat)), shape=(len(items), items.n_categories))
    cat_pop = member.T @ pop
    inv_cat_pop = 1.0 / np.where(cat_pop > 0, cat_pop, np.inf)          # 0 for a category nobody touched
    p = sparse.csr_matrix(member.multiply(pop[:, None]).multiply(inv_cat_pop[None, :]))     # P(i | c), (items, C)
    fill = global_order(pop, items.active)
    out = Collector()
    for a, b in batches(split, BATCH):
        mine = user_item_matrix(split, items, split.users[a:b], weighted=True, events=split.events_of(a, b))
        per_cat = np.asarray((mine @ member).todense())
        total = per_cat.sum(axis=1, keepdims=True)
        share = np.divide(per_cat, total, out=np.zeros_like(per_cat), where=total > 0)
        scores = np.asarray((p @ share.T).T, dtype=np.float64)
        from_dense(split, scores, items.active, a, b, n, fill=fill, out=out)
    return out.ranked()


def covisit(split: Split, items: ItemTable, index: SourceIndex, settings: Settings, n: int) -> Ranked:
    out = Collector()
    for a, b in batches(split, BATCH * 2):
        ev = split.events_of(a, b)
        hist = histories_from_arrays(split.users[a:b], ev.user, ev.item, ev.type, ev.ts, items, settings,
                                     clock=split.cut)
        recent, owner, rank = candidates.recent_items(hist, settings.covisit_recent_items)
        rows, w, per_recent = index.covisit.gather(recent, settings.recency_decay ** rank)
        from_sparse(split, np.repeat(owner, per_recent), rows, w, items.active, a, b, n, out)
    return out.ranked()


def item_knn(split: Split, items: ItemTable, n: int) -> Ranked:
    users = np.unique(split.pre.user)
    x = user_item_matrix(split, items, users, weighted=False)
    norms = np.sqrt(np.asarray(x.sum(axis=0)).ravel())        # binary: the squared norm is the count
    xn = sparse.csr_matrix(x.multiply(1.0 / np.where(norms > 0, norms, 1.0)[None, :]), dtype=np.float32)
    xn_t = xn.T.tocsr()
    at = np.searchsorted(users, split.users)
    out = Collector()
    for a, b in batches(split, BATCH):
        # Sparse times dense, twice: (Xn · X_bᵀ) is every user's overlap with the batch (dense, users × batch), and
        # Xnᵀ times it the batch's scores. A sparse × sparse first product would be as dense and ~6× slower.
        overlap = xn @ x[at[a:b]].T.toarray().astype(np.float32)
        scores = np.ascontiguousarray((xn_t @ overlap).T)
        from_dense(split, scores, items.active, a, b, n, out=out)
    return out.ranked()


def latent(split: Split, items: ItemTable, index: SourceIndex, n: int) -> Ranked:
    factors = index.latent.factors if index.latent is not None else np.zeros((len(items), 1), dtype=np.float32)
    users = np.unique(split.pre.user)
    x = user_item_matrix(split, items, users, weighted=False)
    at = np.searchsorted(users, split.users)
    out = Collector()
    for a, b in batches(split, BATCH):
        scores = np.ascontiguousarray((x[at[a:b]] @ factors) @ factors.T, dtype=np.float32)
        from_dense(split, scores, items.active, a, b, n, out=out)
    return out.ranked()


def rank_all(split: Split, items: ItemTable, index: SourceIndex, settings: Settings, n: int, *,
             recent_days: float = 7.0, progress: Callable[[str], None] = lambda msg: None) -> dict[str, Ranked]:
    """Every baseline's top-``n`` lists of the judged users of ``split``, by name (``BASELINES`` order)."""
    methods = {
        "popular": lambda: popular(split, items, n),
        "recent_popular": lambda: recent_popular(split, items, n, recent_days),
        "category_popular": lambda: category_popular(split, items, n),
        "covisit": lambda: covisit(split, items, index, settings, n),
        "item_knn": lambda: item_knn(split, items, n),
        "latent": lambda: latent(split, items, index, n),
    }
    ranked = {}
    for name, method in methods.items():
        progress(f"ranking {len(split.users)} users with {name}")
        ranked[name] = method()
    return ranked
