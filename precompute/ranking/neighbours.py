"""Neighbour lists over item rows, in CSR form: the shape co-visitation and item-kNN share once mapped onto the rows
of the current ``ItemTable``.

Both sources are fitted as id pairs (``src``, ``dst``, ``weight``), keyed by item id so that a bundle outlives the
table it was trained with. Pairs in memory (evaluate's, an older bundle's) are mapped onto the table's rows once, here
(``of``); a bundle's mapped lists over its own item codes are read through a code → row array (``over_codes``).
Candidate generation then gathers a whole batch's neighbours with whole-array numpy (``gather``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .item_table import ItemTable


@dataclasses.dataclass(frozen=True)
class Neighbours:
    """Neighbours of item row ``r`` are ``nbr[start[r]:end[r]]`` with ``weight``, strongest first.

    Built from id pairs (``of``), ``nbr`` holds item rows. Over a bundle's mapped arrays (``over_codes``), ``nbr`` and
    ``weight`` are the bundle's, read-only and shared with every process mapping them, and ``nbr`` holds the
    bundle's item codes, which ``row_of_code`` turns into rows (-1: an item the table does not know, left out)."""

    start: np.ndarray
    end: np.ndarray
    nbr: np.ndarray
    weight: np.ndarray
    row_of_code: np.ndarray | None = None     # None: ``nbr`` holds rows
    complete: bool = True                     # every code has a row: nothing to leave out

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
        return cls(start=indptr[:-1], end=indptr[1:], nbr=d.astype(np.int64), weight=w.astype(np.float64))

    @classmethod
    def over_codes(cls, items: ItemTable, row_of_code: np.ndarray, indptr: np.ndarray, nbr: np.ndarray,
                   weight: np.ndarray) -> Neighbours:
        """A bundle's CSR over its item codes (``source_arrays``) read by ``items`` rows, without copying it:
        only the per-row bounds (``len(items)``) are made here. ``row_of_code``: each code's row, -1 if none."""
        known = np.flatnonzero(row_of_code >= 0)
        start = np.zeros(len(items), dtype=np.int64)
        end = np.zeros(len(items), dtype=np.int64)
        start[row_of_code[known]] = indptr[known]
        end[row_of_code[known]] = indptr[known + 1]
        return cls(start=start, end=end, nbr=nbr, weight=weight, row_of_code=row_of_code,
                   complete=len(known) == len(row_of_code))

    def gather(self, rows: np.ndarray, row_weight: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray,
                                                                                     np.ndarray]:
        """All neighbours of ``rows`` (one flat array, in ``rows`` order), their weight times the source row's
        weight (None: their weight as it is), and how many each row contributed."""
        starts, ends = self.start[rows], self.end[rows]
        lens = ends - starts
        total = int(lens.sum())
        if total == 0:
            return np.empty(0, dtype=np.int64), np.empty(0), lens
        first = np.r_[0, np.cumsum(lens)[:-1]]
        idx = np.arange(total) - np.repeat(first - starts, lens)
        weight = self.weight[idx]               # a copy: the stored weights are never written
        if row_weight is not None:
            weight *= np.repeat(row_weight, lens)
        if self.row_of_code is None:
            return self.nbr[idx], weight, lens
        nbr = self.row_of_code[self.nbr[idx]]
        if self.complete:
            return nbr, weight, lens
        ok = nbr >= 0
        owner = np.repeat(np.arange(len(rows)), lens)
        return nbr[ok], weight[ok], np.bincount(owner[ok], minlength=len(rows)).astype(lens.dtype)
