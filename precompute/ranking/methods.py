"""The simple methods an experiment's arm may rank by, as a worker ranks them (docs/experiments.md): without a
model, from what the worker holds already, each list as long as a ranked feed (``PREFEED_FEED_LENGTH``):

- ``popular``: the active items the user has not seen by popularity (the item table's row order);
- ``recent:<window>``: the same by their type-weighted interactions in that window before the table's clock,
  ties by popularity;
- ``covisit``, ``item_knn``, ``latent``: the user's candidates (the promoted bundle's sources) by that source's
  score, ties (most often 0: a candidate another source brought) by popularity.

The score stored with each item is the method's own (interactions, or the source's score).
"""

from __future__ import annotations

import numpy as np

from ..data.history import Histories
from ..settings import Settings
from . import candidates, sources
from .item_table import ItemTable
from .layout import WINDOWS
from .source_index import SourceIndex

#: The candidate score of each candidate-based method (``sources.py``).
SOURCE_SCORE = sources.METHOD_SCORE


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
            head = order[: n + len(hist.seen(k))]                    # enough to fill the list past the seen items
            mine = head[~np.isin(head, hist.seen(k))][:n]
            rows.append(mine), sizes.append(len(mine))
        rows = np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)
        return rows, score[rows].astype(np.float32), np.r_[0, np.cumsum(sizes)].astype(np.int64)
    cand = candidates.for_batch(items, index, hist, settings)
    score = getattr(cand, SOURCE_SCORE[method])
    order = np.lexsort((cand.rows, -score, cand.owner))             # by user, best first, ties by popularity
    place = np.arange(len(order)) - np.repeat(cand.offsets[:-1], np.diff(cand.offsets))
    keep = order[place < n]
    sizes = np.minimum(np.diff(cand.offsets), n)
    return cand.rows[keep], score[keep].astype(np.float32), np.r_[0, np.cumsum(sizes)].astype(np.int64)
