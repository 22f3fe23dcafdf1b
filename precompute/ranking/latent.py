"""A latent factor model: PureSVD of the binary user × item matrix, with the user's vector folded in from their live
history.

``X ≈ U Σ Vᵀ`` (truncated SVD, ``factors`` dimensions) over who interacted with what (1 = an event of positive type
weight). A user is scored by projecting their history onto the item space: ``score(j) = (Σ_{i ∈ history} V_i) · V_j``.
Nothing per user is fitted, so the user vector is as fresh as the history a worker reads, and a user who joined after
training gets one from their first event (the issue's measurement: a user vector recomputed from the live history
beat a frozen one under replay).

Why PureSVD rather than the alternatives the issue lists: EASE solves an item × item system (68k items: a 37 GB
dense matrix); ALS and BPR (``implicit``) fit user vectors that must be re-solved per history in serving, and add a
compiled dependency; PureSVD folds a user in with one sum, and its fit is one sparse truncated SVD (scipy), seconds
on MovieLens-1M. Its neighbours of the history become candidates (``candidates.for_user``) and its score a column
(``ux_latent_score``).

Stored in the bundle beside the co-visitation lists (``latent_ids``, ``latent_factors``: ``source_arrays.py``);
older bundles load without them and the source is then absent. A worker reads them by its item rows and holds, with
them, what the batch product needs, as a ``LatentIndex``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import sparse
from scipy.sparse.linalg import svds

from . import arrays

KEYS = ("latent_ids", "latent_factors")


def fit(ev_user: np.ndarray, ev_item: np.ndarray, positive: np.ndarray, factors: int,
        seed: int = 0) -> dict[str, np.ndarray]:
    """Item factors of the events whose type weighs > 0 (``positive``): ``latent_ids`` (sorted item ids) and
    ``latent_factors`` (``(len(ids), k)`` float32, rows of ``V``), ``k = min(factors, users - 1, items - 1)``;
    empty when that leaves no dimension. Deterministic for a given log and ``seed``."""
    user, item = ev_user[positive], ev_item[positive]
    users, u = np.unique(user, return_inverse=True)
    ids, i = np.unique(item, return_inverse=True)
    k = min(factors, len(users) - 1, len(ids) - 1)
    if k < 1:
        return {"latent_ids": np.empty(0, np.int64), "latent_factors": np.empty((0, 0), np.float32)}
    x = sparse.csr_matrix((np.ones(len(u), dtype=np.float64), (u.ravel(), i.ravel())), shape=(len(users), len(ids)))
    x.sum_duplicates()
    x.data[:] = 1.0
    v0 = np.random.default_rng(seed).standard_normal(min(x.shape))
    _, s, vt = svds(x, k=k, v0=v0)
    vt = vt[np.argsort(-s)]
    # A singular vector's sign is arbitrary; fix it so that each factor's largest entry is positive.
    vt *= np.where(np.abs(vt.max(axis=1)) >= np.abs(vt.min(axis=1)), 1.0, -1.0)[:, None]
    return {"latent_ids": ids.astype(np.int64), "latent_factors": np.ascontiguousarray(vt.T, dtype=np.float32)}


def by_row(items, stored: dict[str, np.ndarray]) -> np.ndarray:
    """The stored factors mapped onto ``items`` rows (``(len(items), k)`` float64, so that scores and their order
    do not hang on float32 rounding; zeros for an item the model never saw, which no history can then reach)."""
    ids, v = stored["latent_ids"], stored["latent_factors"]
    out = np.zeros((len(items), v.shape[1] if v.ndim == 2 else 0), dtype=np.float64)
    rows = items.rows(ids)
    ok = rows >= 0
    out[rows[ok]] = v[ok]
    return out


@dataclasses.dataclass(frozen=True)
class LatentIndex:
    """The model's item factors by item row, with what the catalogue product of a batch needs of them
    (``candidates.for_batch``).

    ``rows``: the item rows with a factor (an item nobody interacted with before the fit has none: its score is 0
    for every user); ``factors32``: their factors in float32 (``(k, len(rows))``, transposed and contiguous: BLAS
    reads it ~1.6x faster than a transposed view); ``column``: each item row's column in that product (-1: no
    factor); ``norm``: the largest factor norm (which bounds the product's error, ``float32_error``).

    ``factors``: every row's factors in float64 (``(items, k)``, ``by_row``), when the index was made of them
    (``of``). An index over a bundle's mapped arrays (``over_stored``) has none: it reads the bundle's float32 rows
    through ``code`` (each item row's row there, -1: none); ``factors_of`` gives the same float64 values either
    way."""

    factors: np.ndarray | None
    rows: np.ndarray
    factors32: np.ndarray
    column: np.ndarray
    norm: float
    stored: np.ndarray | None = None       # (m, k) float32, a bundle's (``over_stored``)
    code: np.ndarray | None = None         # item row → row of ``stored`` (-1: none)

    @classmethod
    def of(cls, factors: np.ndarray) -> LatentIndex:
        """The index of ``factors`` (``(items, k)`` by item row, as ``by_row`` gives them)."""
        rows = np.flatnonzero(np.any(factors != 0, axis=1))
        column = np.full(len(factors), -1, dtype=np.int64)
        column[rows] = np.arange(len(rows))
        return cls(factors=factors, rows=rows, factors32=np.ascontiguousarray(factors[rows].T, dtype=np.float32),
                   column=column, norm=float(np.sqrt(np.einsum("ij,ij->i", factors, factors).max(initial=0.0))))

    @classmethod
    def over_stored(cls, items, ids: np.ndarray, stored: np.ndarray) -> LatentIndex:
        """The index of a bundle's factors (``ids`` ascending, ``stored`` ``(m, k)`` float32, read-only) over
        ``items`` rows, equal to ``of(by_row(items, ...))`` without its float64 copy of them: the product's float32
        columns are made here (in item row order, which is the table's, not the ids'), and arrays of the table's
        length; the rest is read from ``stored`` where it lies."""
        at = items.rows(ids)
        nonzero = np.zeros(len(ids), dtype=bool)
        sq = np.zeros(len(ids))
        for lo in range(0, len(ids), _BLOCK):            # bounded temporaries, whatever the model's size
            part = np.asarray(stored[lo:lo + _BLOCK], dtype=np.float64)
            nonzero[lo:lo + _BLOCK] = np.any(part != 0, axis=1)
            sq[lo:lo + _BLOCK] = np.einsum("ij,ij->i", part, part)
        known = at >= 0
        keep = np.flatnonzero(known & nonzero)
        keep = keep[np.argsort(at[keep])]                # the stored rows in item row order
        rows = at[keep]
        column = np.full(len(items), -1, dtype=np.int64)
        column[rows] = np.arange(len(rows))
        code = np.full(len(items), -1, dtype=np.int64)
        code[at[known]] = np.flatnonzero(known)
        return cls(factors=None, rows=rows, factors32=np.ascontiguousarray(stored[keep].T, dtype=np.float32),
                   column=column, norm=float(np.sqrt(sq[known].max(initial=0.0))), stored=stored, code=code)

    def factors_of(self, rows: np.ndarray) -> np.ndarray:
        """``(len(rows), k)`` float64: the factors of item ``rows`` (zeros for an item without)."""
        if self.factors is not None:
            return self.factors[rows]
        code = self.code[rows]
        if code.min(initial=0) >= 0:
            return self.stored[code].astype(np.float64)
        out = np.zeros((len(rows), self.stored.shape[1]), dtype=np.float64)
        has = code >= 0
        out[has] = self.stored[code[has]]
        return out

    def user_vectors(self, rows: np.ndarray, owner: np.ndarray, n_users: int) -> np.ndarray:
        """``user_vectors`` of these factors."""
        return _summed(self.factors_of(rows), owner, n_users)


#: Stored factor rows read at once when an index is made over them (``LatentIndex.over_stored``).
_BLOCK = 4096


def user_vectors(factors: np.ndarray, rows: np.ndarray, owner: np.ndarray, n_users: int) -> np.ndarray:
    """``(n_users, k)``: the sum of the factors of each user's ``rows`` (distinct items of their history);
    ``owner`` (each row's user) ascending."""
    return _summed(factors[rows], owner, n_users)


def _summed(gathered: np.ndarray, owner: np.ndarray, n_users: int) -> np.ndarray:
    out = np.zeros((n_users, gathered.shape[1]), dtype=gathered.dtype)
    if len(gathered) == 0:
        return out
    if np.any(owner[1:] < owner[:-1]):
        raise ValueError("user_vectors: rows must be grouped by user, in ascending order")
    # One sum per user's run of rows, in the rows' order.
    users, start = np.unique(owner, return_index=True)
    out[users] = np.add.reduceat(gathered, start, axis=0)
    return out


#: Scores are compared at this many decimals: items the model cannot tell apart (the same users, so the same factors
#: up to the last bits of the SVD and of a sum's order) tie, and ties go by column, whatever the arithmetic's order.
DECIMALS = 9


def top(scores: np.ndarray, n: int, rescore=None, error: np.ndarray | float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """The ``n`` best columns of each row of ``scores`` (``(B, n)`` columns and scores rounded to ``DECIMALS``, best
    first, ties by column; a score ≤ 0 is no recommendation and comes back as column -1). Exclude a column with a
    score of -inf. ``scores`` is left as it is.

    ``scores`` may be approximate (a float32 product) within ``error`` (per row, or one bound): the contenders are
    then taken that much wider and ``rescore(rows, columns)`` gives their exact scores, so the result is the one
    the exact scores would give."""
    m = scores.shape[1]
    n = min(n, m)
    if n < 1:
        return np.empty((len(scores), 0), np.int64), np.empty((len(scores), 0), np.float64)
    # The n-th best score of each row; every column that rounds to it or above is a contender (argpartition alone
    # would keep an arbitrary few of the columns tied with it), ranked by rounded score then column. Rounding is
    # monotone, so the contenders are among the columns within two units of the last decimal of the n-th best raw
    # score (widened by twice the error of approximate scores): only those are rounded, not the whole matrix.
    kth, bound, at, val = _scan(scores, n)
    error = np.broadcast_to(error, (len(scores),))
    slack = 2.0 * 10.0 ** -DECIMALS + 2.0 * error
    # Every row's contenders at once, grouped by row: re-scored, rounded, then one sort by row, rounded score
    # (descending) and column, and the first n of each row kept.
    # A score that does not round to a positive one is no recommendation: a column whose exact score cannot reach a
    # quarter of the last decimal never contends, so a row with fewer than n positive scores (a user the model knows
    # nothing of scores 0 everywhere) does not make every column a contender.
    floor = np.maximum(kth - slack, 0.25 * 10.0 ** -DECIMALS - error).astype(scores.dtype)
    floor = np.nextafter(floor, -np.inf, dtype=scores.dtype)      # compared in the scores' type, never above
    # A row whose scan for its n-th best started at or below its floor has every contender among the columns it
    # scanned; the other rows are scanned again from their floor. (The sort below orders the contenders whatever
    # order they come in.) Positions are flat, row-major: one index, not a row and a column array.
    inside = bound <= floor
    row = at // m
    at = at[inside[row] & (val >= floor[row])]
    again = np.flatnonzero(~inside)
    if len(again):
        more, more_col = np.divmod(np.flatnonzero(scores[again] >= floor[again, None]), m)
        at = np.concatenate([at, again[more] * m + more_col])
    row, col = np.divmod(at, m)
    raw = np.take(scores, at).astype(np.float64)
    if rescore is not None:
        raw = np.where(raw == -np.inf, -np.inf, rescore(row, col))
    near = np.round(raw, DECIMALS)
    order = np.lexsort((col, -near, row))
    row, col, near = row[order], col[order], near[order]
    first = np.searchsorted(row, np.arange(len(scores)))
    rank = np.arange(len(row)) - first[row]
    keep = rank < n
    part = np.full((len(scores), n), -1, dtype=np.int64)
    val = np.zeros((len(scores), n), dtype=np.float64)
    part[row[keep], rank[keep]], val[row[keep], rank[keep]] = col[keep], near[keep]
    return np.where(val > 0, part, -1), val


def _scan(scores: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each row's ``n``-th best score (``1 <= n <= m`` columns), a lower bound of it per row, and the flat position
    (row-major) and score of every score at or above its row's bound; a row partitioned whole has none and a bound
    of +inf.

    Partitioning whole rows costs ~m per row. The n-th best of every s-th column is a lower bound of the row's (a
    subset's n-th best never exceeds the set's), so only the columns reaching it, ~n·s of them, are partitioned:
    s = √(m/n) balances the sample's partition against theirs (45,000 items, n = 100: ~5x less work than the whole
    rows). A row whose bound lets most columns through (too few finite scores in the sample, or a user the model
    knows nothing of) is partitioned whole, alone: one such user made ~1 in 6 batches partition every row."""
    m = scores.shape[1]
    stride = int(np.sqrt(m / n))
    if stride < 4:
        kth = np.partition(scores, m - n, axis=1)[:, m - n]
        return kth, np.full(len(scores), np.inf, scores.dtype), np.empty(0, np.int64), np.empty(0, scores.dtype)
    sample = scores[:, ::stride]
    bound = np.partition(sample, sample.shape[1] - n, axis=1)[:, sample.shape[1] - n]
    at = np.flatnonzero(scores >= bound[:, None])
    row = at // m
    count = np.bincount(row, minlength=len(scores))
    kth = np.empty(len(scores), dtype=scores.dtype)
    wide = 2 * count > m
    if np.any(wide):
        kth[wide] = np.partition(scores[wide], m - n, axis=1)[:, m - n]
        bound[wide], count[wide] = np.inf, 0
        narrow = ~wide[row]
        at, row = at[narrow], row[narrow]
    val = np.take(scores, at)
    if not np.all(wide):
        # Every narrow row holds at least the n sampled columns reaching its bound: width >= n.
        width = int(count.max())
        padded = arrays.padded_groups(val, row, np.cumsum(count) - count, width, -np.inf)
        kth[~wide] = np.partition(padded, width - n, axis=1)[~wide, width - n]
    return kth, bound, at, val


def float32_error(vectors: np.ndarray, norm: float) -> np.ndarray:
    """Per row of ``vectors`` (float64 user vectors), a bound on how far a float32 product of the row with item
    factors of norm at most ``norm`` is from the exact one: a dot product of k terms in float32 is within
    (k + 2)·2⁻²⁴·|u|·|v| (the inputs' rounding and the sum's), doubled for margin."""
    return (vectors.shape[1] + 2) * 2.0 ** -23 * np.sqrt(np.einsum("ij,ij->i", vectors, vectors)) * norm
