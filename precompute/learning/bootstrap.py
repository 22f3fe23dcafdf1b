"""A paired percentile bootstrap over users, shared by evaluation (the ranker's ratio to the best baseline, with its
interval) and training (``objective.choose``: whether one objective's lead over another holds).
"""

from __future__ import annotations

import numpy as np


#: Bootstrap resamples behind ``ratio_interval`` (its bounds move by ~0.005 between seeds at this count).
RESAMPLES = 2000


def ratio_interval(ours: np.ndarray, theirs: np.ndarray, level: float = 0.95, seed: int = 0,
                   resamples: int = RESAMPLES) -> tuple[float, float] | None:
    """A ``level`` percentile bootstrap interval of mean(ours) / mean(theirs) over users, both per-user metrics of
    the same users (paired: each resample draws users, with their two values). How far the ratio of a run could
    move with another sample of users of the same log; None when ``theirs`` sums to 0 in some resample (the ratio
    is undefined there). Resampled in blocks, so memory stays ~``8 × 100 × len(ours)`` bytes."""
    n = len(ours)
    if n == 0 or len(theirs) != n:
        raise ValueError("ratio_interval needs the same users' values on both sides")
    rng = np.random.default_rng(seed)
    ratios = []
    for start in range(0, resamples, 100):
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=min(100, resamples - start)).astype(np.float64)
        den = counts @ theirs
        if (den <= 0).any():
            return None
        ratios.append(counts @ ours / den)
    lo, hi = np.quantile(np.concatenate(ratios), [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)
