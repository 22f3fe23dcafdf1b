"""Ranked lists of every judged user for one method, and the three ways methods produce them: from one global
order, from a dense score matrix of a user batch, or from sparse scored candidates.

Every path leaves out the user's pre-cut items (``Split.seen``) and inactive items (the feed never shows them),
ranks by score, ties by item row (rows are in popularity order at the cut, so ties go to the more popular item),
and records, for each of the user's truth items, whether it was in the method's candidate set: the items the
method could have ranked at all (a positive score), whatever their place.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ranking.methods import best_per_user, first_unseen
from .split import Split


@dataclasses.dataclass
class Ranked:
    """Judged user ``u``'s list: ``rows[offsets[u]:offsets[u+1]]``, best first; ``candidate_hit[j]``: truth entry
    ``j`` (``Split.truth``) was inside the method's candidate set."""

    offsets: np.ndarray
    rows: np.ndarray
    candidate_hit: np.ndarray


class Collector:
    """Batches of lists, appended in user order, assembled into one ``Ranked``."""

    def __init__(self) -> None:
        self.sizes: list[np.ndarray] = []
        self.rows: list[np.ndarray] = []
        self.hits: list[np.ndarray] = []

    def add(self, sizes: np.ndarray, rows: np.ndarray, hits: np.ndarray) -> None:
        self.sizes.append(np.asarray(sizes, dtype=np.int64))
        self.rows.append(np.asarray(rows, dtype=np.int64))
        self.hits.append(np.asarray(hits, dtype=bool))

    def ranked(self) -> Ranked:
        cat = (lambda parts, dt: np.concatenate(parts).astype(dt) if parts else np.empty(0, dt))
        return Ranked(np.r_[0, np.cumsum(cat(self.sizes, np.int64))].astype(np.int64), cat(self.rows, np.int64),
                      cat(self.hits, bool))


def batches(split: Split, size: int):
    """``(a, b)`` ranges of judged users."""
    for a in range(0, len(split.users), size):
        yield a, min(a + size, len(split.users))


def truth_of(split: Split, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """Truth entries of users ``a:b``: their owner relative to ``a``, and their item rows."""
    lo, hi = split.truth.offsets[a], split.truth.offsets[b]
    owner = np.repeat(np.arange(b - a), np.diff(split.truth.offsets[a:b + 1]))
    return owner, split.truth.rows[lo:hi]


def seen_of(split: Split, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = split.seen_offsets[a], split.seen_offsets[b]
    return np.repeat(np.arange(b - a), np.diff(split.seen_offsets[a:b + 1])), split.seen_rows[lo:hi]


def from_order(split: Split, order: np.ndarray, candidate: np.ndarray, a: int, b: int, n: int, out: Collector,
               taken: list[np.ndarray] | None = None) -> None:
    """Lists of users ``a:b`` from one global ``order`` of item rows (best first, candidates only): each user's
    first ``n`` not seen (nor in ``taken[u]``, rows already on the list before these). ``candidate``: the method's
    candidate set as a boolean mask over rows."""
    sizes, rows = [], []
    for u in range(a, b):
        drop = split.seen(u) if taken is None else np.concatenate([split.seen(u), taken[u - a]])
        head = first_unseen(order, drop, n)
        sizes.append(len(head))
        rows.append(head)
    _, t_rows = truth_of(split, a, b)
    out.add(np.array(sizes), np.concatenate(rows) if rows else np.empty(0, np.int64), candidate[t_rows])


def from_dense(split: Split, scores: np.ndarray, active: np.ndarray, a: int, b: int, n: int,
               fill: tuple[np.ndarray, np.ndarray] | None = None, out: Collector | None = None) -> None:
    """Lists of users ``a:b`` from ``scores`` (``(b - a, items)``; positive = a candidate), modified in place.
    ``fill``: a global (order, candidate mask) that completes lists shorter than ``n``, as ``from_order``."""
    scores[:, ~active] = -np.inf
    s_owner, s_rows = seen_of(split, a, b)
    scores[s_owner, s_rows] = -np.inf
    t_owner, t_rows = truth_of(split, a, b)
    hit = scores[t_owner, t_rows] > 0
    k = min(n, scores.shape[1])
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    val = np.take_along_axis(scores, top, axis=1)
    owner = np.repeat(np.arange(b - a), k)
    top, val = top.ravel(), val.ravel()
    order = np.lexsort((top, -val, owner))
    order = order[val[order] > 0]
    sizes = np.bincount(owner[order], minlength=b - a)
    rows = top[order]
    if fill is None:
        out.add(sizes, rows, hit)
        return
    offsets = np.r_[0, np.cumsum(sizes)]
    taken = [rows[offsets[u]:offsets[u + 1]] for u in range(b - a)]
    more = Collector()
    from_order(split, fill[0], fill[1], a, b, n, more, taken=taken)
    extra = more.ranked()
    merged = [np.concatenate([taken[u], extra.rows[extra.offsets[u]:extra.offsets[u + 1]]])[:n]
              for u in range(b - a)]
    out.add(np.array([len(m) for m in merged]), np.concatenate(merged) if merged else np.empty(0, np.int64),
            hit | extra.candidate_hit)


def from_sparse(split: Split, owner: np.ndarray, rows: np.ndarray, scores: np.ndarray, active: np.ndarray,
                a: int, b: int, n: int, out: Collector) -> None:
    """Lists of users ``a:b`` from scored candidates (``owner`` relative to ``a``; a row listed twice for a user
    has its scores summed); every listed, active, unseen row is a candidate."""
    span = len(active) + 1
    code, inv = np.unique(owner * span + rows, return_inverse=True)
    total = np.bincount(inv.ravel(), weights=scores, minlength=len(code))
    s_owner, s_rows = seen_of(split, a, b)
    keep = ~np.isin(code, s_owner * span + s_rows) & active[code % span]
    code, total = code[keep], total[keep]
    t_owner, t_rows = truth_of(split, a, b)
    hit = np.isin(t_owner * span + t_rows, code)
    c_owner, c_rows = code // span, code % span
    top = best_per_user(c_owner, c_rows, total, n)
    out.add(np.bincount(c_owner[top], minlength=b - a), c_rows[top], hit)
