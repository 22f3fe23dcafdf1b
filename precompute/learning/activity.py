"""Popularity at any clock of a replayed log: the ``BatchPopularity`` a worker would have computed from an item table
loaded at that clock (``ranking/popularity.py``), from the log in memory, for replayed steps in training and the
replay protocol."""

from __future__ import annotations

import numpy as np

from ..ranking.item_table import ItemTable
from ..ranking.layout import WINDOWS
from ..ranking.popularity import BatchPopularity, Counts, top_lists


class Activity:
    """The log's interactions by time, to compute ``BatchPopularity`` blocks at any clock (replay and training). All-time counts
    are carried forward from the clock asked before and counted again from the start when a clock goes back (exact
    either way), so clocks asked in about ascending order cost about one pass over the log."""

    def __init__(self, items: ItemTable, ts: np.ndarray, item_ids: np.ndarray, types: np.ndarray) -> None:
        rows = items.rows(item_ids)
        w = items.weight_of(types)
        ok = (rows >= 0) & (w > 0)
        self.items = items
        self.ts, self.rows, self.w = ts[ok], rows[ok], w[ok]
        self._kept = np.r_[0, np.cumsum(ok)]     # of the log's first n events, _kept[n] are counted here
        self._ever = np.zeros(len(items))
        self._upto = 0            # events [0, _upto) are in _ever

    def at(self, clock: float, windows: tuple[tuple[str, float], ...] = WINDOWS, known: int | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
        """``(windowed, ever)`` interactions per item row as of ``clock`` (events at or before it), in each of
        ``windows`` and of all time. ``known``: only the log's first ``known`` events, for a worker that read the
        log part way through the events of one timestamp (a day's baskets stamped alike)."""
        hi = int(np.searchsorted(self.ts, clock, side="right")) if known is None else int(self._kept[known])
        n = len(self.items)
        if hi < self._upto:
            self._ever[:], self._upto = 0.0, 0
        self._ever += np.bincount(self.rows[self._upto:hi], weights=self.w[self._upto:hi], minlength=n)
        self._upto = hi
        windowed = np.empty((n, len(windows)))
        for k, (_, seconds) in enumerate(windows):
            lo = min(int(np.searchsorted(self.ts, clock - seconds, side="left")), hi)
            windowed[:, k] = np.bincount(self.rows[lo:hi], weights=self.w[lo:hi], minlength=n)
        return windowed, self._ever.copy()

    def live(self, clocks: np.ndarray, lengths: tuple[int, ...], known: np.ndarray | None = None) -> BatchPopularity:
        """``BatchPopularity`` of a batch whose user ``k`` is at ``clocks[k]`` (knowing the log's first ``known[k]`` events,
        when given)."""
        key = clocks if known is None else known
        _, first, which = np.unique(key, return_index=True, return_inverse=True)
        blocks, lists = [], []
        for j in first.tolist():
            windowed, ever = self.at(float(clocks[j]), known=None if known is None else int(known[j]))
            blocks.append(Counts(windowed, ever))
            lists.append(top_lists(windowed, self.items.active, lengths))
        return BatchPopularity(blocks, lists, which.ravel().astype(np.int64))
