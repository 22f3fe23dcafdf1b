"""The pages a replay shows: for a log imported without recorded pages (every log imported from a file), what the
product would have served before each replayed step, so that the ranker's "shown" columns (``ranking/shown.py``)
mean in training and ``evaluate`` what they mean live.

One page of ``PAGE`` items is read before each replayed step, at the top of the user's feed, at the step's clock
(the log's newest event before it). Which policy fills it:

- ``evaluate``'s replay and ``train``'s promotion check (``replay.py``): the ranker being judged, its own top of
  each earlier step (closed loop, as the product runs: a feed recomputed after a step knows the page read before it);
- ``train``'s examples (``fit.py``): the model does not exist yet, so a model-free stand-in for it ranks each step's
  own candidates: the latent model's score, the personal ranking over the whole history nearest to what the ranker
  puts on top; co-visitation where no latent model is fitted (``PREFEED_LATENT_FACTORS=0``).
"""

from __future__ import annotations

import numpy as np

from ..ranking.candidates import Candidates
from ..ranking.methods import best_per_user
from ..ranking.shown import Impressions, Shown, aggregate
from ..ranking.source_index import SourceIndex

#: Items of the page read before each replayed step: the judged top (NDCG@10).
PAGE = 10


class DerivedPages:
    """Each user's derived pages in replay order: ``(step index, time, item rows)``. A step sees the pages of its
    user's earlier steps (smaller index), never its own or a later one."""

    def __init__(self) -> None:
        self._by_user: dict[int, list[tuple[int, float, np.ndarray]]] = {}

    def add(self, users: np.ndarray, index: np.ndarray, ts: np.ndarray, pages: list[np.ndarray]) -> None:
        for user, i, t, rows in zip(users.tolist(), index.tolist(), ts.tolist(), pages):
            self._by_user.setdefault(user, []).append((i, t, np.asarray(rows[:PAGE], dtype=np.int64)))

    def impressions(self, users: np.ndarray, index: np.ndarray) -> Impressions:
        """The impressions of each of a batch's steps (row ``j``: ``users[j]``'s step ``index[j]``)."""
        owner, rows, ts, pos = [], [], [], []
        for j, (user, i) in enumerate(zip(users.tolist(), index.tolist())):
            for step, t, page in self._by_user.get(user, ()):
                if step < i and len(page):
                    owner.append(np.full(len(page), j)), rows.append(page)
                    ts.append(np.full(len(page), t)), pos.append(np.arange(len(page)))
        if not owner:
            return Impressions.none()
        return Impressions(np.concatenate(owner), np.concatenate(rows), np.concatenate(ts), np.concatenate(pos))

    def shown(self, users: np.ndarray, index: np.ndarray, span: int) -> Shown:
        return aggregate(self.impressions(users, index), span)


def stand_in_pages(cand: Candidates, index: SourceIndex) -> list[np.ndarray]:
    """Training's page for each row of ``cand``: its best ``PAGE`` candidates by the latent score (co-visitation
    without a latent model), best first."""
    score = cand.latent_score if index.latent is not None else cand.cov_score
    keep = best_per_user(cand.owner, cand.rows, score, PAGE)
    owner = cand.owner[keep]
    bounds = np.searchsorted(owner, np.arange(len(cand.offsets)))
    rows = cand.rows[keep]
    return [rows[bounds[j]:bounds[j + 1]] for j in range(len(cand.offsets) - 1)]
