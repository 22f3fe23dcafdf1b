"""Small array helpers for the hot path.

``np.unique`` without ``return_inverse`` takes a hash-based path in NumPy 2.x that is ~15x slower than sorting
for the few-thousand-element integer arrays candidates are made of (342 µs vs 23 µs for 5,600 ids, measured
here), so the hot path sorts explicitly.
"""

from __future__ import annotations

import numpy as np


def unique_sorted(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values of ``a``."""
    s = np.sort(a)
    if len(s) < 2:
        return s
    return s[np.r_[True, s[1:] != s[:-1]]]



def top_desc(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` highest float32 ``scores``, best first, equal scores in index order.

    A value partition finds the k-th best score, then the survivors are sorted as packed ``uint64`` keys
    (order-preserving score bits above the index), which NumPy sorts with SIMD: ~40% faster than
    ``argpartition`` + ``argsort`` on feed-sized arrays (measured), and deterministic on ties.
    """
    n = len(scores)
    if n > k:
        kth = np.partition(scores, n - k)[n - k]
        idx = np.flatnonzero(scores >= kth)
    else:
        idx = np.arange(n)
    bits = (scores[idx].astype(np.float32) + np.float32(0.0)).view(np.uint32)    # + 0.0 turns -0.0 into 0.0
    # IEEE-754 bits to an unsigned key ordered like the floats, then inverted so the best comes first.
    key = ~np.where(bits >> 31, ~bits, bits | np.uint32(0x80000000))
    packed = (key.astype(np.uint64) << np.uint64(32)) | idx.astype(np.uint64)
    packed.sort()
    return (packed[:k] & np.uint64(0xFFFFFFFF)).astype(np.int64)
