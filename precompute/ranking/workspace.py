"""Per-item scratch arrays of the candidate and feature stages.

Whole-array numpy over a batch needs O(k) membership tests, dedupes and sums over a few thousand of the catalogue's
items; an array as long as the catalogue, marked at the k rows in play and reset after, does each in O(k) instead of
a sort or a search. A ``Workspace`` holds those arrays for one item table. Whoever ranks owns one (a worker's
``Pipeline`` one per table, a training or evaluation run one of its own) and hands it to ``candidates.for_batch`` and
``features.build``; one workspace serves one thread at a time (workers are processes).
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class Workspace:
    mark: np.ndarray     # bool; O(k) membership tests; always left all-False
    slot: np.ndarray     # int64; O(k) dedupe (``arrays.distinct``): written before read, never reset
    bits: np.ndarray     # uint8; candidate source bits of popular lists and sources; always left all-zero
    score: np.ndarray    # float64; per-item summed scores; always left all-zero

    @classmethod
    def for_items(cls, n: int) -> Workspace:
        """A workspace for a table of ``n`` items."""
        return cls(mark=np.zeros(n, dtype=bool), slot=np.zeros(n, dtype=np.int64), bits=np.zeros(n, dtype=np.uint8),
                   score=np.zeros(n))

    def fits(self, n: int) -> bool:
        return len(self.mark) == n
