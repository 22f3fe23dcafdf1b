"""The live baselines of the replay protocol that score from a history (``replay.py``): co-visitation of the recent
items, cosine item-kNN over the pre-cut user × item matrix, and the latent model, each a dense row of scores per
replayed step."""

from __future__ import annotations

import numpy as np
from scipy import sparse

from ..data.log import EventLog
from ..ranking import candidates, latent
from ..ranking.item_table import ItemTable
from ..ranking.source_index import SourceIndex
from ..settings import Settings


def covisit_scores(hist, index: SourceIndex, settings: Settings, n_items: int) -> np.ndarray:
    """Co-visitation scores of each step's candidates from its most recent items (dense, one row per step)."""
    recent, owner, rank = candidates.recent_items(hist, settings.covisit_recent_items)
    rows, w, per_recent = index.covisit.gather(recent, settings.recency_decay ** rank)
    out = np.zeros((len(hist), n_items), dtype=np.float32)
    np.add.at(out, (np.repeat(owner, per_recent), rows), w)
    return out


def latent_scores(hist_all, index: SourceIndex) -> np.ndarray | float:
    """The latent model's scores of every item for each step's whole history (0 without a latent model)."""
    if index.latent is None:
        return 0.0
    owner = np.repeat(np.arange(len(hist_all)), np.diff(hist_all.seen_offsets))
    factors = index.latent.factors
    return latent.user_vectors(factors, hist_all.seen_rows, owner, len(hist_all)) @ factors.T


class Knn:
    """Cosine item-kNN over the binary pre-cut user × item matrix; a user's vector from any list of item rows."""

    def __init__(self, items: ItemTable, pre: EventLog) -> None:
        user, item, type_ = pre.user, pre.item, pre.type
        rows, w = items.rows(item), items.weight_of(type_)
        ok = (rows >= 0) & (w > 0)
        users, pos = np.unique(user[ok], return_inverse=True)
        x = sparse.csr_matrix((np.ones(int(ok.sum()), dtype=np.float32), (pos.ravel(), rows[ok])),
                              shape=(len(users), len(items)))
        x.sum_duplicates()
        x.data[:] = 1.0
        norms = np.sqrt(np.asarray(x.sum(axis=0)).ravel())
        self.xn = sparse.csr_matrix(x.multiply(1.0 / np.where(norms > 0, norms, 1.0)[None, :]), dtype=np.float32)
        self.xn_t = self.xn.T.tocsr()
        self.n = len(items)

    def scores(self, hist_all) -> np.ndarray:
        owner = np.repeat(np.arange(len(hist_all)), np.diff(hist_all.seen_offsets))
        mine = sparse.csr_matrix((np.ones(len(owner), dtype=np.float32), (owner, hist_all.seen_rows)),
                                 shape=(len(hist_all), self.n))
        overlap = self.xn @ mine.T.toarray()
        return np.ascontiguousarray((self.xn_t @ overlap).T)
