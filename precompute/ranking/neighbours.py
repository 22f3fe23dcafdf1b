"""Neighbour lists over item rows, in CSR form: the shape co-visitation and item-kNN share once mapped onto the rows
of the current ``ItemTable``.

Both sources store id pairs (``src``, ``dst``, ``weight``) in the bundle, keyed by item id so that a bundle outlives
the table it was trained with; a worker maps them onto its table's rows once, here, and candidate generation then
gathers a whole batch's neighbours with whole-array numpy (``gather``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .item_table import ItemTable


@dataclasses.dataclass(frozen=True)
class Neighbours:
    """Neighbours of item row ``r`` are ``nbr[indptr[r]:indptr[r+1]]`` with ``weight``, strongest first."""

    indptr: np.ndarray
    nbr: np.ndarray
    weight: np.ndarray

    @classmethod
    def of(cls, items: ItemTable, src: np.ndarray, dst: np.ndarray, weight: np.ndarray) -> Neighbours:
        """Id pairs mapped onto ``items`` rows; a pair touching an item the table does not know is dropped. Each
        row's neighbours by weight descending (ties in the pairs' order)."""
        s, d = items.rows(src), items.rows(dst)
        ok = (s >= 0) & (d >= 0)
        s, d, w = s[ok], d[ok], weight[ok]
        order = np.lexsort((-w, s))
        s, d, w = s[order], d[order], w[order]
        indptr = np.r_[0, np.cumsum(np.bincount(s, minlength=len(items)))].astype(np.int64)
        return cls(indptr=indptr, nbr=d.astype(np.int64), weight=w.astype(np.float64))

    def gather(self, rows: np.ndarray, row_weight: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray,
                                                                                     np.ndarray]:
        """All neighbours of ``rows`` (one flat array, in ``rows`` order), their weight times the source row's
        weight (None: their weight as it is), and how many each row contributed."""
        starts, ends = self.indptr[rows], self.indptr[rows + 1]
        lens = ends - starts
        total = int(lens.sum())
        if total == 0:
            return np.empty(0, dtype=np.int64), np.empty(0), lens
        first = np.r_[0, np.cumsum(lens)[:-1]]
        idx = np.arange(total) - np.repeat(first - starts, lens)
        weight = self.weight[idx]
        if row_weight is not None:
            weight *= np.repeat(row_weight, lens)
        return self.nbr[idx], weight, lens
