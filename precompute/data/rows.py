"""Query results as numpy arrays."""

from __future__ import annotations

import numpy as np


def table(rows, **columns: str) -> np.ndarray:
    """Result rows as one structured array, ``columns`` naming each column's dtype in order. Ids stay exact 64-bit
    integers: an array of floats would round ids above 2**53."""
    return np.fromiter((tuple(r) for r in rows), dtype=np.dtype(list(columns.items())), count=len(rows))
