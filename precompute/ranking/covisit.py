"""Co-visitation neighbours: items viewed close together in the same session, as a CSR index over item rows.

Built from the event log with whole-array numpy (no per-event Python); stored in the model bundle keyed by item
id, and mapped onto the rows of the current ``ItemTable`` when a worker loads it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .item_table import ItemTable


@dataclasses.dataclass
class CoVisit:
    """Neighbours of item row ``r`` are ``nbr[indptr[r]:indptr[r+1]]`` with ``weight``, strongest first."""

    indptr: np.ndarray
    nbr: np.ndarray
    weight: np.ndarray

    def gather(self, rows: np.ndarray, row_weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All neighbours of ``rows`` (one flat array, in ``rows`` order), their weight times the source row's
        weight, and how many each row contributed."""
        starts, ends = self.indptr[rows], self.indptr[rows + 1]
        lens = ends - starts
        total = int(lens.sum())
        if total == 0:
            return np.empty(0, dtype=np.int64), np.empty(0), lens
        first = np.r_[0, np.cumsum(lens)[:-1]]
        idx = np.arange(total) - np.repeat(first - starts, lens)
        return self.nbr[idx], self.weight[idx] * np.repeat(row_weight, lens), lens


def build_pairs(ev_user: np.ndarray, ev_item: np.ndarray, ev_ts: np.ndarray, window: int, gap: float,
                top_k: int) -> dict[str, np.ndarray]:
    """Top-``top_k`` neighbours per item id as flat arrays (``src``, ``dst``, ``weight``), sorted by src.

    A pair within ``window`` events of each other in one session (same user, gaps under ``gap`` seconds)
    counts 1/distance, in both directions (``Settings.covisit_window``, ``session_gap``, ``covisit_neighbours``).
    """
    order = np.lexsort((ev_ts, ev_user))
    u, ts = ev_user[order], ev_ts[order]
    # Items by their position among the log's distinct ids: pair codes below stay small whatever the (64-bit) ids.
    item_ids, it = np.unique(ev_item[order].astype(np.int64), return_inverse=True)
    same_session = np.r_[False, (u[1:] == u[:-1]) & (np.diff(ts) < gap)]
    session = np.cumsum(~same_session)
    src, dst, w = [], [], []
    for lag in range(1, window + 1):
        ok = (session[lag:] == session[:-lag]) & (it[lag:] != it[:-lag])
        a, b = it[:-lag][ok], it[lag:][ok]
        src += [a, b]
        dst += [b, a]
        w.append(np.full(2 * len(a), 1.0 / lag))
    if not src:
        return {"src": np.empty(0, np.int64), "dst": np.empty(0, np.int64), "weight": np.empty(0)}
    src_a, dst_a, w_a = np.concatenate(src), np.concatenate(dst), np.concatenate(w)
    span = len(item_ids)
    codes, inverse = np.unique(src_a * span + dst_a, return_inverse=True)
    weight = np.bincount(inverse, weights=w_a)
    s, d = item_ids[codes // span], item_ids[codes % span]
    keep_order = np.lexsort((d, -weight, s))
    s, d, weight = s[keep_order], d[keep_order], weight[keep_order]
    first = np.searchsorted(s, s, side="left")
    rank = np.arange(len(s)) - first
    keep = rank < top_k
    return {"src": s[keep], "dst": d[keep], "weight": weight[keep]}


def index_for(items: ItemTable, pairs: dict[str, np.ndarray]) -> CoVisit:
    """Map id pairs onto ``items`` rows; pairs touching an unknown item are dropped."""
    s, d = items.rows(pairs["src"]), items.rows(pairs["dst"])
    ok = (s >= 0) & (d >= 0)
    s, d, w = s[ok], d[ok], pairs["weight"][ok]
    order = np.lexsort((-w, s))
    s, d, w = s[order], d[order], w[order]
    indptr = np.r_[0, np.cumsum(np.bincount(s, minlength=len(items)))].astype(np.int64)
    return CoVisit(indptr=indptr, nbr=d.astype(np.int64), weight=w.astype(np.float64))
