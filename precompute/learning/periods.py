"""Training periods of the event log: what precompute would know at a cut, and the labels of what followed.

Training uses two cuts: examples are built at the first (features from the log up to it, labels from the events
between the two cuts), and the model is judged at the second (features from the log up to it, labels after it), so
it is always judged on a later period than it learned from, as a model in production is. Each cut has its own item
table (statistics ``as_of`` the cut) and its own source index (the sources fitted on the log up to the cut): nothing
after a cut leaks into what is known at it.

The log is in (ts, id) order, so the events up to a cut are a prefix and a period after it a contiguous range:
slices (views) of the caller's arrays, never copies, which keeps a 25 M-event log's memory bounded.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator

import numpy as np
from sqlalchemy import Engine

from ..data.history import Histories, histories_from_arrays
from ..data.log import EventLog
from ..settings import Settings
from ..ranking import arrays, candidates, covisit, features, knn, latent, similar
from ..ranking.candidates import Candidates
from ..ranking.item_loader import load_item_table
from ..ranking.item_table import ItemTable
from ..ranking.source_index import SourceIndex, for_items
from . import ahead, steps
from .steps import Steps



@dataclasses.dataclass
class Labels:
    """Each user's strongest interaction per item in a period, graded by its type's weight (``PREFEED_EVENT_TYPES``;
    weight 0 or a code past the declaration is no interaction). Items the user interacted with inside the seen
    window before the cut are left out: they are no candidates in serving, so no labels either (an item seen
    before the window may come back, and its later interaction counts).

    (user, item row) pairs are coded as ``position of the user in users * span + item row`` (user ids are 64-bit,
    positions small) and sorted, so a batch's grades are one ``searchsorted``."""

    users: np.ndarray       # every user id of the log, sorted: the positions of the codes
    span: int               # item rows + 1
    code: np.ndarray        # sorted (user position, item row) codes
    rel: np.ndarray         # grade of each code, > 0

    def position(self, user_ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.users, user_ids)

    def grade(self, user_ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The grade of each (user, item row) pair; 0 where the user did not interact with the item."""
        return arrays.lookup(self.code, self.rel, self.position(user_ids) * self.span + rows)

    def of_user(self, user_id: int) -> tuple[np.ndarray, np.ndarray]:
        """Item rows and grades of one user's interactions in the period."""
        p = int(self.position(np.array([user_id]))[0])
        lo, hi = np.searchsorted(self.code, [p * self.span, (p + 1) * self.span])
        return self.code[lo:hi] - p * self.span, self.rel[lo:hi]

    def judged(self) -> np.ndarray:
        """Users with at least one graded interaction in the period, sorted."""
        return self.users[np.unique(self.code // self.span)]


@dataclasses.dataclass
class Period:
    """What is known at ``cut`` and what happened in the period after it (``labels``)."""

    cut: float
    known: EventLog           # the log up to the cut (views)
    items: ItemTable        # statistics as of the cut
    index: SourceIndex      # the sources fitted on the log up to the cut
    labels: Labels

    def eligible(self) -> np.ndarray:
        """Users with history before the cut and a graded interaction after it, sorted."""
        return np.intersect1d(np.unique(self.known.user), self.labels.judged())

    def candidates(self, user_ids: np.ndarray, settings: Settings) -> tuple[Histories, Candidates, np.ndarray]:
        """Histories, candidates and their grades of ``user_ids`` at the cut (their features: ``features.build``
        at the cut)."""
        hist, cand = candidates_at(self.items, self.index, self.known, user_ids, self.cut, settings)
        return hist, cand, self.labels.grade(hist.user_ids[cand.owner], cand.rows)


def candidates_at(items: ItemTable, index: SourceIndex, events: EventLog, user_ids: np.ndarray, now: float,
                  settings: Settings) -> tuple[Histories, Candidates]:
    """Training's path from an in-memory event log to candidates: the same candidate function precompute uses, on
    histories truncated the same way, read at ``now``."""
    hist = histories_from_arrays(user_ids, events.user, events.item, events.type, events.ts, items, settings,
                                 clock=now)
    return hist, candidates.for_batch(items, index, hist, settings)


def feature_rows(items: ItemTable, index: SourceIndex, events: EventLog, user_ids: np.ndarray, now: float,
                 settings: Settings) -> tuple[Histories, Candidates, np.ndarray]:
    """``candidates_at`` and the candidates' feature rows (``features.build`` at ``now``)."""
    hist, cand = candidates_at(items, index, events, user_ids, now, settings)
    return hist, cand, features.build(items, hist, cand, now=now)


def quantile_cut(ev_ts: np.ndarray, q: float) -> float:
    """The event time below which a share ``q`` of the log lies (epoch s)."""
    return float(np.quantile(ev_ts, q))


def training_cuts(ev_ts: np.ndarray, settings: Settings) -> list[float]:
    """The cuts training makes (epoch s), ascending: ``train_periods`` training cuts, the last at
    ``train_cut_quantile`` and each earlier one the validation period's share of events before the next (cuts
    below 5 % of the log or at the same instant as the next are left out), then the validation cut at
    ``train_valid_quantile``. Every training period is labelled by the events after its cut up to the validation
    cut."""
    step = settings.train_valid_quantile - settings.train_cut_quantile
    qs = [settings.train_cut_quantile - k * step for k in range(settings.train_periods - 1, 0, -1)]
    qs = [q for q in qs if q >= 0.05] + [settings.train_cut_quantile, settings.train_valid_quantile]
    cuts = [quantile_cut(ev_ts, q) for q in qs]
    # An earlier cut at the same instant as the next (a log with many events at one time) adds no period.
    return [c for c, nxt in zip(cuts[:-2], cuts[1:-1]) if c < nxt] + cuts[-2:]


def period(engine: Engine, settings: Settings, events: EventLog, cut: float, end: float = float("inf"),
           users: np.ndarray | None = None) -> Period:
    """The split of ``events`` at ``cut``, labels from the events in ``(cut, end]``. ``users``: every user id of the
    log, sorted (``np.unique`` of the user column), when the caller has it already."""
    return _known(events, cut, *_fit(engine, settings, events, cut, end, users))


def each(engine: Engine, settings: Settings, events: EventLog, cuts: list[tuple[float, float]], users: np.ndarray,
         n_steps: int | None = None) -> Iterator[tuple[Period, Steps | None]]:
    """``period(cut, end)`` of each of ``cuts`` in turn and, given ``n_steps``, its replayed steps (``steps.find``).
    The next one is computed in a forked child while the caller works on the current one (``ahead.py``): a
    training's periods on two cores. The caller holds two periods at a time, the child a third while it works."""

    def fit(cut: float, end: float, since: ItemTable | None = None) -> tuple:
        items, index, lab = _fit(engine, settings, events, cut, end, users, since)
        if n_steps is None:
            return items, index, lab, None
        return items, index, lab, steps.find(events, items, cut, end, n_steps, refresh=settings.feed_refresh,
                                           horizon=settings.feed_ttl)

    pending = None
    try:
        for k, (cut, end) in enumerate(cuts):
            # The first in this process while a child starts on the second; each later one from its child, whose
            # successor starts as soon as it is in: at most one child at a time. A later cut's item table carries
            # this one's all-time counts forward (``load_item_table``'s ``since``): it reads only the events between.
            got = pending.result() if pending is not None else None
            since = got[0] if got is not None and k + 1 < len(cuts) and cut <= cuts[k + 1][0] else None
            pending = ahead.Ahead(functools.partial(fit, *cuts[k + 1], since), engine) if k + 1 < len(cuts) \
                else None
            items, index, lab, found = got if got is not None else fit(cut, end)
            yield _known(events, cut, items, index, lab), found
    finally:
        if pending is not None:
            pending.close()


def _fit(engine: Engine, settings: Settings, events: EventLog, cut: float, end: float,
         users: np.ndarray | None, since: ItemTable | None = None) -> tuple[ItemTable, SourceIndex, Labels]:
    ev_user, ev_ts = events.user, events.ts
    n_known = int(np.searchsorted(ev_ts, cut, side="right"))
    n_end = len(ev_ts) if end == float("inf") else int(np.searchsorted(ev_ts, end, side="right"))
    items = load_item_table(engine, settings, as_of=cut, since=since)
    index = for_items(items, pairs(events, slice(0, n_known), settings))
    users = np.unique(ev_user) if users is None else users
    return items, index, labels(events, items, users, cut, n_known, n_end, settings)


def _known(events: EventLog, cut: float, items: ItemTable, index: SourceIndex, lab: Labels) -> Period:
    """The period at ``cut``: the log up to it as views of ``events`` (never copied into or out of a child)."""
    n_known = int(np.searchsorted(events.ts, cut, side="right"))
    return Period(cut=cut, known=events.head(n_known), items=items, index=index, labels=lab)


def pairs(events: EventLog, part: slice, settings: Settings) -> dict[str, np.ndarray]:
    """Co-visitation and item-kNN pairs and the latent factors of the events in ``part`` (``covisit.build_pairs``,
    ``knn.build_pairs``, ``latent.fit`` with the settings' parameters), in one dict: what a bundle stores."""
    ev_user, ev_item, ev_type, ev_ts = events.user, events.item, events.type, events.ts
    factors = covisit.event_factors(ev_type[part], settings)
    return {**covisit.build_pairs(ev_user[part], ev_item[part], ev_ts[part], settings.covisit_window,
                                  settings.session_gap, settings.covisit_neighbours, factors),
            **knn.build_pairs(ev_user[part], ev_item[part], factors > 0, settings.knn_neighbours),
            **latent.fit(ev_user[part], ev_item[part], factors > 0, settings.latent_factors)}


def bundle_pairs(events: EventLog, settings: Settings) -> dict[str, np.ndarray]:
    """What a bundle stores: the whole log's ``pairs`` and each item's similar items (``ranking/similar.py``)."""
    fitted = pairs(events, slice(None), settings)
    return {**fitted, **similar.build(fitted, settings.similar_length)}


def labels(events: EventLog, items: ItemTable, users: np.ndarray, cut: float, n_known: int, n_end: int,
          settings: Settings) -> Labels:
    """Grades of the events at positions ``n_known:n_end`` of the log, less the items each user interacted with
    inside the seen window before ``cut`` (the first ``n_known`` events are those at or before it)."""
    ev_user, ev_item, ev_type, ev_ts = events.user, events.item, events.type, events.ts
    span = len(items) + 1

    def codes(part: slice) -> np.ndarray:
        # An item the cut's table does not know (listed later) is coded as row span - 1, which no candidate has:
        # it counts towards the user's ideal ranking only, as an item no method could have ranked.
        rows = items.rows(ev_item[part])
        return np.searchsorted(users, ev_user[part]) * span + np.where(rows < 0, span - 1, rows)

    after = slice(n_known, n_end)
    seen_code = np.unique(codes(slice(int(np.searchsorted(ev_ts, cut - settings.seen_window, side="left")),
                                      n_known)))
    code, inv = np.unique(codes(after), return_inverse=True)
    rel = np.zeros(len(code))
    np.maximum.at(rel, inv, items.weight_of(ev_type[after]))
    fresh = ~np.isin(code, seen_code) & (rel > 0)
    return Labels(users=users, span=span, code=code[fresh], rel=rel[fresh])
