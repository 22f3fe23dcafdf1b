"""Evaluate's item-to-item check: does an item's similar list ("more like this") hold what the user went on to?

For each replayed step after the cut (``steps.py``), the query is the step's first item (its first event in log
order) and the truth the step's other new items (positive type weight, never touched by the user before the step).
A log stamped per event (the synthetic marketplace: every step is one event) has no other item in a step: there the
truth is the user's next step's new items, when it comes within ``PREFEED_SESSION_GAP`` (the same visit). Each
method's list of the query is as long as a stored one (``PREFEED_SIMILAR_LENGTH``) and served as the route serves
it with ``user_id``: the user's earlier items, inactive items and the query itself dropped, the first ``k`` kept.
Reported per method: the share of steps whose list holds at least one truth item (``hit_rate``) and the mean share
of a step's truth items it holds (``recall``).

Methods: ``covisit``, ``knn``, ``latent`` (each source's neighbours of the item alone), ``category`` (the popular
items of the item's categories, interleaved, as the fallback) and ``served``: the stacked list (``ranking/similar.py``)
with the category's popular items for an item without one, what ``GET /items/<id>/similar`` answers.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..data.log import EventLog
from ..ranking import similar
from ..ranking.arrays import group_rank
from ..ranking.item_table import ItemTable
from ..ranking.source_index import SourceIndex
from ..settings import Settings
from .steps import ByUser, find

METHODS = ("covisit", "knn", "latent", "category", "served")


@dataclasses.dataclass
class ItemToItem:
    k: int
    steps: int                              # judged steps (a query item and at least one truth item)
    methods: dict[str, dict[str, float]]    # hit_rate, recall by method

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def category_lists(items: ItemTable, rows: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The popular active rows of each of ``rows``' categories, interleaved (as the fallback merges them), first
    ``n``, the row itself left out: ``(owner, neighbour)`` pairs grouped by owner."""
    owners, nbrs = [], []
    for r in rows.tolist():
        lists = [items.category_popular[c][:n + 1] for c in items.cat_of[items.cat_indptr[r]:items.cat_indptr[r + 1]]]
        if not lists:
            continue
        width = max(len(x) for x in lists)
        grid = np.full((len(lists), width), -1, dtype=np.int64)
        for j, x in enumerate(lists):
            grid[j, :len(x)] = x
        merged = grid.T.ravel()
        merged = merged[(merged >= 0) & (merged != r)]
        _, first = np.unique(merged, return_index=True)
        merged = merged[np.sort(first)][:n]
        owners.append(np.full(len(merged), r, dtype=np.int64))
        nbrs.append(merged)
    if not owners:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(owners), np.concatenate(nbrs)


def judge(items: ItemTable, index: SourceIndex, events: EventLog, cut: float, settings: Settings, *,
          n_steps: int = 10, users: np.ndarray | None = None, k: int = 10) -> ItemToItem:
    """The item-to-item check of the steps after ``cut`` (the first ``n_steps`` of each user with history before
    it; only ``users``, sorted ids, when given), ``items`` and ``index`` as of the cut."""
    steps = find(events, items, cut, float("inf"), n_steps, users=users)
    if users is not None:
        steps = steps.take(np.flatnonzero(np.isin(steps.user, users)))
    span = len(items) + 1
    query = items.rows(events.item[steps.posted]) if len(steps) else np.empty(0, np.int64)
    owner = steps.owner
    # Truth: the step's other items; a step of one item takes the same user's next step within the session gap.
    others = steps.rows != query[owner]
    n_other = np.bincount(owner[others], minlength=len(steps))
    # Steps are in log order, so a user's next step is the next of theirs, not the next position: found per user.
    order = np.lexsort((np.arange(len(steps)), steps.user))
    following = np.full(len(steps), -1)
    same = steps.user[order][1:] == steps.user[order][:-1]
    following[order[:-1][same]] = order[1:][same]
    near = following >= 0
    near[near] = steps.ts[following[near]] - steps.ts[near] < settings.session_gap
    borrow = (n_other == 0) & near & (query >= 0)
    t_step = [owner[others & (query[owner] >= 0)]]
    t_row = [steps.rows[others & (query[owner] >= 0)]]
    src = np.flatnonzero(borrow)
    lo, hi = steps.offsets[following[src]], steps.offsets[following[src] + 1]
    taken = np.repeat(src, hi - lo)
    rows = steps.rows[np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)])] if len(src) else np.empty(0, int)
    keep = rows != query[taken]
    t_step.append(taken[keep])
    t_row.append(rows[keep])
    t_step, t_row = np.concatenate(t_step), np.concatenate(t_row)
    judged = np.unique(t_step)
    if len(judged) == 0:
        return ItemToItem(k=k, steps=0, methods={m: dict(hit_rate=0.0, recall=0.0) for m in METHODS})
    truth_code = np.unique(t_step * span + t_row)
    n_truth = np.bincount(truth_code // span, minlength=len(steps))
    # What each step's user touched before it: dropped from every list, as the route drops the user's seen items.
    hist = ByUser(events).histories(steps.take(judged), items, settings, seen_window=float("inf"))
    seen_code = judged[np.repeat(np.arange(len(judged)), np.diff(hist.seen_offsets))] * span + hist.seen_rows
    distinct = np.unique(query[judged])
    depth = settings.similar_length
    lists = similar.for_rows(index, distinct, depth)
    lists["category"] = category_lists(items, distinct, depth)
    served = {}
    for name, (o, n) in lists.items():
        served[name] = _served(o, n, query, judged, items.active, seen_code, span, k)
    # The route answers the category's popular items for an item whose list leaves nothing for the user.
    step, code = served["served"]
    empty = np.setdiff1d(judged, step)
    c_step, c_code = served["category"]
    fill = np.isin(c_step, empty)
    step, code = np.concatenate([step, c_step[fill]]), np.concatenate([code, c_code[fill]])
    by = np.argsort(step, kind="stable")
    served["served"] = step[by], code[by]
    out = {}
    for name in METHODS:
        step, code = served.get(name, (np.empty(0, np.int64), np.empty(0, np.int64)))
        hits = np.bincount(step[np.isin(code, truth_code)], minlength=len(steps))[judged]
        out[name] = dict(hit_rate=float(np.mean(hits > 0)), recall=float(np.mean(hits / n_truth[judged])))
    return ItemToItem(k=k, steps=int(len(judged)), methods=out)


def _served(owner: np.ndarray, nbr: np.ndarray, query: np.ndarray, judged: np.ndarray, active: np.ndarray,
            seen_code: np.ndarray, span: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each judged step's list as served: its query's ``(owner, nbr)`` pairs in order, inactive items and the
    user's seen ones (``seen_code``: step × span + row) dropped, the first ``k``: ``(step, step × span + row)``,
    grouped by step ascending."""
    by = np.lexsort((np.arange(len(owner)), owner))
    owner, nbr = owner[by], nbr[by]
    q = query[judged]
    start, end = np.searchsorted(owner, q, side="left"), np.searchsorted(owner, q, side="right")
    step = np.repeat(judged, end - start)
    offset = np.arange(int((end - start).sum())) - np.repeat(np.cumsum(end - start) - (end - start), end - start)
    row = nbr[np.repeat(start, end - start) + offset]
    code = step * span + row
    ok = active[row] & ~np.isin(code, seen_code)
    step, code = step[ok], code[ok]
    keep = group_rank(step) < k
    return step[keep], code[keep]
