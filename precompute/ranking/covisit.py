"""Co-visitation neighbours: items viewed close together in the same session, as a CSR index over item rows.

Built from the event log with whole-array numpy (no per-event Python); stored in the model bundle keyed by item
id, and mapped onto the rows of the current ``ItemTable`` when a worker loads it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..data import event_types
from ..settings import Settings
from . import arrays, latent
from .item_table import ItemTable


@dataclasses.dataclass
class CoVisit:
    """Neighbours of item row ``r`` are ``nbr[indptr[r]:indptr[r+1]]`` with ``weight``, strongest first."""

    indptr: np.ndarray
    nbr: np.ndarray
    weight: np.ndarray
    #: The item-kNN neighbours (``knn.py``) in the same shape, built from the same bundle file; None: none built.
    knn: CoVisit | None = None
    #: The latent model's item factors by item row (``latent.py``), from the same file; None: none built.
    latent: np.ndarray | None = None
    #: The item rows with a factor (an item nobody interacted with before the fit has none: its score is 0 for every
    #: user), their factors in float32 for the catalogue product of a batch (``candidates.for_batch``; ``(k, columns)``,
    #: transposed and contiguous: BLAS reads it ~1.6x faster than a transposed view), each item row's column in that
    #: product (-1: no factor), and the largest factor norm (which bounds the product's error).
    latent_rows: np.ndarray | None = None
    latent32: np.ndarray | None = None
    latent_col: np.ndarray | None = None
    latent_norm: float = 0.0

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


#: Upper bound on the (src, dst) contributions reduced at once (~75 bytes each with the sort's temporaries, ~75 MB
#: per million): the log is swept by ranges of source item so that memory stays bounded whatever its length.
PAIRS_PER_PASS = 1_000_000


def event_factors(ev_type: np.ndarray, settings: Settings) -> np.ndarray:
    """Per-event factor ``sqrt(type weight / weakest type weight)`` (``Settings.event_types``): a pair's strength
    in ``build_pairs`` is then 1/distance times the geometric mean of its two events' weights over the weakest
    weight, so a log of the weakest type only (all views) gets plain 1/distance."""
    weights = event_types.EventTypes.of(settings).weight_by_code()
    weakest = weights[weights > 0].min(initial=np.inf)
    return event_types.by_code(np.sqrt(weights / (weakest if np.isfinite(weakest) else 1.0)), ev_type)


def build_pairs(ev_user: np.ndarray, ev_item: np.ndarray, ev_ts: np.ndarray, window: int, gap: float,
                top_k: int, ev_weight: np.ndarray | None = None, *,
                pairs_per_pass: int = PAIRS_PER_PASS) -> dict[str, np.ndarray]:
    """Top-``top_k`` neighbours per item id as flat arrays (``src``, ``dst``, ``weight``), sorted by src, then
    weight descending, then dst.

    A pair within ``window`` events of each other in one session (same user, gaps under ``gap`` seconds)
    counts 1/distance, in both directions (``Settings.covisit_window``, ``session_gap``, ``covisit_neighbours``),
    times ``ev_weight`` of both events when given (``event_factors``).

    Memory: a few arrays of the log's length (session and item codes, int32) plus, per core, ``pairs_per_pass``
    pairs, or 2 × ``window`` × the most frequent item's events if that is more (one item's pairs are reduced
    together; ML-25M's most rated film: ~0.8 M pairs): the pairs are built and reduced for one range of source items
    at a time on each core, from each source event's neighbours ``1..window`` places before and after it. A pair's
    contributions are summed in order of distance, as a single pass over the whole log would, so the weights and
    their ties are the same bit for bit.
    """
    n = len(ev_user)
    if n == 0 or window < 1:
        return _no_pairs()
    order = np.lexsort((ev_ts, ev_user))
    same_session = np.zeros(n, dtype=bool)
    u = ev_user[order]
    same_session[1:] = u[1:] == u[:-1]
    del u
    ts = ev_ts[order]
    same_session[1:] &= np.diff(ts) < gap
    del ts
    session = np.cumsum(~same_session, dtype=np.int64 if n >= 2 ** 31 else np.int32)
    del same_session
    # Items by their position among the log's distinct ids: pair codes below stay small whatever the (64-bit) ids.
    item_ids = np.unique(ev_item)
    it = np.searchsorted(item_ids, ev_item[order]).astype(np.int32)
    factor = None if ev_weight is None else np.asarray(ev_weight, dtype=np.float64)[order]
    del order
    by_item = np.argsort(it, kind="stable")             # each item's events, in log position order
    first = np.r_[0, np.cumsum(np.bincount(it, minlength=len(item_ids)))]
    bound = np.cumsum(np.diff(first)) * 2 * window      # pairs sourced from items 0..k, at most
    ranges = [0]
    while ranges[-1] < len(item_ids):
        lo = ranges[-1]
        budget = (bound[lo - 1] if lo else 0) + pairs_per_pass
        ranges.append(max(int(np.searchsorted(bound, budget, side="right")), lo + 1))
    # The ranges are independent, and their sorts release the GIL: they run on every core, one range per thread.
    parts = arrays.on_every_core(
        lambda lh: _top_of_range(by_item[first[lh[0]]:first[lh[1]]], it, session, factor, window, top_k, *lh,
                                 len(item_ids)), zip(ranges[:-1], ranges[1:]))
    s, d, w = (np.concatenate(c) for c in zip(*parts))
    return {"src": item_ids[s], "dst": item_ids[d], "weight": w}


def _top_of_range(pos, it, session, factor, window: int, top_k: int, lo: int, hi: int, span: int):
    """Pairs sourced from the events at ``pos`` (items ``lo..hi-1``), summed per (src, dst) in order of
    distance, top ``top_k`` per src: item codes and weights."""
    src, dst, w = [], [], []
    for lag in range(1, window + 1):
        after, before = pos[pos < len(it) - lag], pos[pos >= lag]
        for p, q in ((after, after + lag), (before, before - lag)):
            ok = (session[q] == session[p]) & (it[q] != it[p])
            p, q = p[ok], q[ok]
            src.append(it[p])
            dst.append(it[q])
            w.append(np.full(len(p), 1.0 / lag) if factor is None else 1.0 / lag * factor[p] * factor[q])
    src_a, dst_a, w_a = np.concatenate(src), np.concatenate(dst), np.concatenate(w)
    codes, inverse = np.unique((src_a.astype(np.int64) - lo) * span + dst_a, return_inverse=True)
    weight = np.bincount(inverse.ravel(), weights=w_a)
    s, d = codes // span + lo, codes % span
    keep_order = np.lexsort((d, -weight, s))
    s, d, weight = s[keep_order], d[keep_order], weight[keep_order]
    rank = np.arange(len(s)) - np.searchsorted(s, s, side="left")
    keep = rank < top_k
    return s[keep], d[keep], weight[keep]


def _no_pairs() -> dict[str, np.ndarray]:
    return {"src": np.empty(0, np.int64), "dst": np.empty(0, np.int64), "weight": np.empty(0)}


def index_for(items: ItemTable, pairs: dict[str, np.ndarray]) -> CoVisit:
    """Map id pairs onto ``items`` rows; pairs touching an unknown item are dropped. The item-kNN pairs
    (``knn.KEYS``) and latent factors (``latent.KEYS``), when ``pairs`` has them, become the index's ``knn`` and
    ``latent``."""
    cov = _csr(items, pairs["src"], pairs["dst"], pairs["weight"])
    if "knn_src" in pairs:
        cov.knn = _csr(items, pairs["knn_src"], pairs["knn_dst"], pairs["knn_weight"])
    if "latent_ids" in pairs and len(pairs["latent_ids"]):
        attach_latent(cov, latent.by_row(items, pairs))
    return cov


def attach_latent(cov: CoVisit, factors: np.ndarray) -> None:
    """Give ``cov`` the latent model's item factors by row, with what the batch product needs of them."""
    cov.latent = factors
    cov.latent_rows = np.flatnonzero(np.any(factors != 0, axis=1))
    cov.latent32 = np.ascontiguousarray(factors[cov.latent_rows].T, dtype=np.float32)
    cov.latent_col = np.full(len(factors), -1, dtype=np.int64)
    cov.latent_col[cov.latent_rows] = np.arange(len(cov.latent_rows))
    cov.latent_norm = float(np.sqrt(np.einsum("ij,ij->i", factors, factors).max(initial=0.0)))


def _csr(items: ItemTable, src: np.ndarray, dst: np.ndarray, weight: np.ndarray) -> CoVisit:
    s, d = items.rows(src), items.rows(dst)
    ok = (s >= 0) & (d >= 0)
    s, d, w = s[ok], d[ok], weight[ok]
    order = np.lexsort((-w, s))
    s, d, w = s[order], d[order], w[order]
    indptr = np.r_[0, np.cumsum(np.bincount(s, minlength=len(items)))].astype(np.int64)
    return CoVisit(indptr=indptr, nbr=d.astype(np.int64), weight=w.astype(np.float64))
