"""Small array helpers for the hot path.

``np.unique`` without ``return_inverse`` takes a hash-based path in NumPy 2.x that is ~15x slower than sorting
for the few-thousand-element integer arrays candidates are made of (342 µs vs 23 µs for 5,600 ids, measured
here), so the hot path sorts explicitly.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def unique_sorted(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values of ``a``."""
    s = np.sort(a)
    if len(s) < 2:
        return s
    return s[np.r_[True, s[1:] != s[:-1]]]


def _desc_keys(scores: np.ndarray) -> np.ndarray:
    """float32 scores as uint32 keys that sort ascending in descending score order (-0.0 counts as 0.0)."""
    bits = (scores.astype(np.float32) + np.float32(0.0)).view(np.uint32)
    return ~np.where(bits >> 31, ~bits, bits | np.uint32(0x80000000))


def top_desc_grouped(scores: np.ndarray, offsets: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """For each group ``scores[offsets[g]:offsets[g+1]]``, the indices of its ``k`` best, best first, equal
    scores in index order; returned flat (indices into ``scores``) with the groups' new offsets.

    A value partition per group finds its k-th best score; the survivors of the whole batch are then packed once
    as ``uint64`` keys (order-preserving score bits above the index) and each group's slice is sorted in place
    (a plain value sort, no argsort). ~2x faster than ``argpartition`` + ``argsort`` per group (measured).
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    sizes = np.diff(offsets)
    kth = np.full(len(sizes), -np.inf, dtype=np.float32)
    for g in np.flatnonzero(sizes > k).tolist():
        seg = scores[offsets[g]:offsets[g + 1]]
        kth[g] = np.partition(seg, len(seg) - k)[len(seg) - k]
    owner = np.repeat(np.arange(len(sizes)), sizes)
    idx = np.flatnonzero(scores >= kth[owner])
    packed = (_desc_keys(scores[idx]).astype(np.uint64) << np.uint64(32)) | idx.astype(np.uint64)
    bounds = np.r_[0, np.cumsum(np.bincount(owner[idx], minlength=len(sizes)))]
    for g in range(len(sizes)):
        packed[bounds[g]:bounds[g + 1]].sort()
    # Ties with the k-th score may leave a group more than k survivors: keep each group's first k.
    rank = np.arange(len(idx)) - np.repeat(bounds[:-1], np.diff(bounds))
    packed = packed[rank < k]
    new = np.r_[0, np.cumsum(np.minimum(np.diff(bounds), k))].astype(np.int64)
    return (packed & np.uint64(0xFFFFFFFF)).astype(np.int64), new


def group_rank(keys: np.ndarray) -> np.ndarray:
    """Each element's 0-based place among the elements of its key in ``keys`` (sorted, or at least grouped by key
    ascending): for a list of pairs grouped by owner, each pair's place in its owner's list."""
    return np.arange(len(keys)) - np.searchsorted(keys, keys, side="left")


def lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray, missing: float = 0.0) -> np.ndarray:
    """``values`` at each of ``query`` in ``keys`` (sorted ascending, distinct, one value each); ``missing`` where a
    query is not among them. One binary search per query: how a batch's grades are read from sorted codes."""
    if len(keys) == 0:
        return np.full(len(query), missing, dtype=np.result_type(values, missing))
    at = np.minimum(np.searchsorted(keys, query), len(keys) - 1)
    return np.where(keys[at] == query, values[at], missing)


def distinct(slot: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Distinct values of ``a`` in O(len(a)) with no sort.

    Every element writes its position into the per-item ``slot`` array; for a repeated value exactly one write
    survives, and the element at that position is the one kept. Which one survives is up to NumPy, so the order
    of the result is not specified (its set is). Slots are written before they are read, so none needs a reset.
    """
    pos = np.arange(len(a))
    slot[a] = pos
    return a[slot[a] == pos]


def strongest(pick: np.ndarray, score: np.ndarray, row: np.ndarray, n: int) -> np.ndarray:
    """The ``n`` elements of ``pick`` with the highest ``score``, ties by ``row`` (``0 < n < len(pick)``): the
    contenders are every element reaching the n-th best score (a partition, not a sort), and only they are sorted."""
    if n < 1:
        return pick[:0]
    kth = np.partition(score, len(score) - n)[len(score) - n]
    top = np.flatnonzero(score >= kth)
    return pick[top[np.lexsort((row[top], -score[top]))[:n]]]


def padded_groups(values: np.ndarray, group: np.ndarray, first: np.ndarray, width: int, fill: float) -> np.ndarray:
    """``(len(first), width)``: each group's ``values`` as one row, in their order, padded with ``fill``. Values
    are grouped by ``group`` (ascending, contiguous; group ``g`` starts at ``first[g]``) and no group is wider than
    ``width``. One partition along the rows then finds every group's k-th value at once."""
    out = np.full((len(first), width), fill, dtype=values.dtype)
    out[group, np.arange(len(values)) - first[group]] = values
    return out


def on_every_core(fn: Callable, items: Iterable) -> list:
    """``[fn(x) for x in items]``, on a thread per core this process may use: for blocks of NumPy and SciPy work
    that release the GIL (sorts, partitions, sparse products), in training, which uses every core as CatBoost does.
    At most one call per thread runs at a time, so memory is that of one block per core."""
    with ThreadPoolExecutor(max_workers=len(os.sched_getaffinity(0))) as pool:
        return list(pool.map(fn, items))
