"""The simple methods an experiment's arm may rank by, as a worker ranks them (docs/experiments.md): without a
model, from what the worker holds already, each list as long as a ranked feed (``PREFEED_FEED_LENGTH``):

- ``popular``: the active items the user has not seen by popularity (the item table's row order);
- ``recent:<window>``: the same by their type-weighted interactions in that window before the table's clock,
  ties by popularity;
- ``covisit``, ``item_knn``, ``latent``: the user's candidates (the promoted bundle's sources) by that source's
  score, ties (most often 0: a candidate another source brought) by popularity.

The score stored with each item is the method's own (interactions, or the source's score). ``evaluate`` judges the
same methods as baselines, by the same ranking rules (``first_unseen``, ``best_per_user``), with the scores it
computes exactly from the log before its cut (a worker holds only the item table and the bundle's sources); the
lists differ where their purposes do: an arm's list is as long as a feed, with zero-score items filling it by
popularity, a baseline's holds the items the method scores at all.
"""

from __future__ import annotations

import numpy as np

from ..data.history import Histories
from ..settings import Settings
from . import arrays, candidates, sources
from .item_table import ItemTable
from .layout import WINDOWS
from .source_index import SourceIndex

#: The candidate score of each candidate-based method (``sources.py``).
SOURCE_SCORE = sources.METHOD_SCORE


def first_unseen(order: np.ndarray, seen: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` rows of ``order`` (item rows, best first) not in ``seen``: one user's list from a global
    order. Shared by the arms' lists and evaluate's baselines, so that the rule is one."""
    head = order[: n + len(seen)]                  # enough to fill the list past the seen items
    return head[~np.isin(head, seen)][:n]


def best_per_user(owner: np.ndarray, rows: np.ndarray, score: np.ndarray, n: int) -> np.ndarray:
    """Indices into ``owner``/``rows``/``score`` (scored candidates of several users) of each user's best ``n``,
    by user, best first, ties by row (rows are in popularity order: the more popular first). Shared by the arms'
    lists and evaluate's baselines."""
    order = np.lexsort((rows, -score, owner))
    by_user = owner[order]
    return order[arrays.group_rank(by_user) < n]


def by_method(method: str, arg: str | None, items: ItemTable, index: SourceIndex, hist: Histories, settings: Settings
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A simple method's lists for a batch: item rows, scores (float32) and offsets (user ``k``'s list at
    ``offsets[k]:offsets[k+1]``), best first, ``settings.feed_length`` at most each."""
    n = settings.feed_length
    if method in ("popular", "recent"):
        score = items.popularity if method == "popular" else \
            items.windowed[:, [w for w, _ in WINDOWS].index(arg)]
        order = np.flatnonzero(items.active)
        if method == "recent":
            order = order[np.lexsort((order, -score[order]))]       # ties by row: by popularity
        rows, sizes = [], []
        for k in range(len(hist)):
            mine = first_unseen(order, hist.seen(k), n)
            rows.append(mine), sizes.append(len(mine))
        rows = np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)
        return rows, score[rows].astype(np.float32), np.r_[0, np.cumsum(sizes)].astype(np.int64)
    cand = candidates.for_batch(items, index, hist, settings)
    score = getattr(cand, SOURCE_SCORE[method])
    keep = best_per_user(cand.owner, cand.rows, score, n)
    sizes = np.minimum(np.diff(cand.offsets), n)
    return cand.rows[keep], score[keep].astype(np.float32), np.r_[0, np.cumsum(sizes)].astype(np.int64)
