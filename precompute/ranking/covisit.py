"""Fitting co-visitation: items viewed close together in the same session, as each item's strongest neighbours.

Built from the event log with whole-array numpy (no per-event Python), as id pairs (``src``, ``dst``, ``weight``);
stored in the model bundle as neighbour lists over its items (``source_arrays.py``), and read by the rows of the
current ``ItemTable`` when a worker loads it (``neighbours.Neighbours``, held by ``source_index.SourceIndex``).
"""

from __future__ import annotations

import numpy as np

from ..data import event_types
from ..settings import Settings
from . import arrays

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
    keep = arrays.group_rank(s) < top_k
    return s[keep], d[keep], weight[keep]


def _no_pairs() -> dict[str, np.ndarray]:
    return {"src": np.empty(0, np.int64), "dst": np.empty(0, np.int64), "weight": np.empty(0)}
