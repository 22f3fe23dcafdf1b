"""The time split evaluation judges on: everything before the cut is known, what judged users do after it is the
truth.

Judged users have at least one event before the cut and, after it, at least one interaction of positive type weight
(``PREFEED_EVENT_TYPES``) with an item they had not interacted with before the cut. Their truth: those items, graded
by the weight of the strongest post-cut interaction (the grading of ``ranking/ranker.py``'s labels). Items a user
interacted with before the cut (any type) are no truth and are left out of every method's ranking.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ..data.log import EventLog
from ..errors import InvalidInput
from ..ranking.item_table import ItemTable


@dataclasses.dataclass
class Truth:
    """Held-out items of judged user ``u`` (position in ``Split.users``): ``rows[offsets[u]:offsets[u+1]]``
    (item rows, ascending) with grades ``rel`` (type weights, > 0)."""

    offsets: np.ndarray
    rows: np.ndarray
    rel: np.ndarray

    @property
    def owner(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.offsets) - 1), np.diff(self.offsets))


@dataclasses.dataclass
class Split:
    cut: float                     # epoch s; events at or before it are known
    pre: EventLog                  # the log before the cut (views)
    n_after: int                   # events after the cut
    users: np.ndarray              # judged user ids, ascending
    #: Every item row judged user ``u`` interacted with before the cut: ``seen_rows[seen_offsets[u]:...]``.
    seen_offsets: np.ndarray
    seen_rows: np.ndarray
    truth: Truth

    @property
    def n_before(self) -> int:
        return len(self.pre)

    def seen(self, u: int) -> np.ndarray:
        return self.seen_rows[self.seen_offsets[u]:self.seen_offsets[u + 1]]

    def events_of(self, a: int, b: int) -> EventLog:
        """The pre-cut events of judged users ``a:b`` (positions), in log order: a batch's methods then scan
        its own events, not the whole log (one stable sort by user, once, instead of a pass per batch)."""
        order, sorted_user = self._by_user
        lo = np.searchsorted(sorted_user, self.users[a:b], side="left")
        hi = np.searchsorted(sorted_user, self.users[a:b], side="right")
        count = hi - lo
        start = np.repeat(lo - np.r_[0, np.cumsum(count)[:-1]], count)
        at = np.sort(order[start + np.arange(int(count.sum()))])
        return self.pre.take(at)

    @functools.cached_property
    def _by_user(self) -> tuple[np.ndarray, np.ndarray]:
        order = np.argsort(self.pre.user, kind="stable")
        return order, self.pre.user[order]


def cut_time(ev_ts: np.ndarray, quantile: float) -> float:
    """The event time at ``quantile`` of the log (epoch s); ``quantile`` strictly between 0 and 1."""
    if not 0.0 < quantile < 1.0:
        raise InvalidInput(f"the cut must be a quantile strictly between 0 and 1, not {quantile:g}")
    return float(np.quantile(ev_ts, quantile))


def split_log(events: EventLog, cut: float, items: ItemTable, *, users: int | None = None,
              seed: int = 0, exclude: np.ndarray | None = None) -> Split:
    """Split ``events`` at ``cut``; ``users``: judge a random
    sample of that many judged users (``seed``), default all; ``exclude``: user ids never judged (those whose
    future chose the model's tree count). Item rows are ``items``' (the table at the cut)."""
    ev_user, ev_item, ev_type, ev_ts = events.user, events.item, events.type, events.ts
    n_pre = int(np.searchsorted(ev_ts, cut, side="right"))
    pre = events.head(n_pre)
    post_user, post_rows = ev_user[n_pre:], items.rows(ev_item[n_pre:])
    post_rel = items.weight_of(ev_type[n_pre:])
    positive = (post_rel > 0) & (post_rows >= 0)
    # (user, item) pairs as codes user position * span + item row over the users who could be judged.
    span = len(items) + 1
    maybe = np.intersect1d(np.unique(pre.user), np.unique(post_user[positive]))
    if exclude is not None and len(exclude):
        maybe = np.setdiff1d(maybe, exclude)
    in_pre = np.isin(pre.user, maybe)
    pre_rows = items.rows(pre.item[in_pre])
    known = pre_rows >= 0
    seen_code = np.unique(np.searchsorted(maybe, pre.user[in_pre][known]) * span + pre_rows[known])
    at = np.isin(post_user, maybe) & positive
    code, inv = np.unique(np.searchsorted(maybe, post_user[at]) * span + post_rows[at], return_inverse=True)
    rel = np.zeros(len(code))
    np.maximum.at(rel, inv.ravel(), post_rel[at])
    fresh = ~np.isin(code, seen_code)
    code, rel = code[fresh], rel[fresh]
    judged = np.unique(code // span)                     # positions in ``maybe``
    if users is not None and users < len(judged):
        judged = np.sort(np.random.default_rng(seed).choice(judged, size=users, replace=False))
    keep_t = np.isin(code // span, judged)
    keep_s = np.isin(seen_code // span, judged)
    code, rel, seen_code = code[keep_t], rel[keep_t], seen_code[keep_s]
    return Split(
        cut=cut, pre=pre, n_after=len(ev_ts) - n_pre, users=maybe[judged],
        seen_offsets=_offsets(np.searchsorted(judged, seen_code // span), len(judged)), seen_rows=seen_code % span,
        truth=Truth(_offsets(np.searchsorted(judged, code // span), len(judged)), code % span, rel),
    )


def _offsets(owner: np.ndarray, n: int) -> np.ndarray:
    return np.r_[0, np.cumsum(np.bincount(owner, minlength=n))].astype(np.int64)
