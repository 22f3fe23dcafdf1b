"""Replayed steps: the feed as a user lives it, for evaluation (``evaluation/replay.py``) and for training's labels.

A step is one user's events at one timestamp (a basket, a click). Before it, the product serves the feed computed
from the user's history up to then (their own earlier post-cut events included), with popularity as of the clock it
was computed at; everything fitted (model, co-visitation, the item table's slow statistics) stays as it was at the
cut. That clock is the step's ``feed_clock``: a worker recomputes a feed when its user's history changes and again
every ``PREFEED_FEED_REFRESH`` of log time after (``feeds/refresh.py``), so a user who acted after the cut reads the
feed computed at their previous event (a shopper's last basket, days before) or at its latest refresh since,
with popularity up to the first event of that moment (``feed_known``: the item table's reload); the first step
after the cut reads the feed computed when it was asked for, at the log's clock then. The clock a feed is read at
is the newest event posted before the step's first, in log order: on a log of baskets stamped by the day, the
day's earlier baskets have moved it to the day and brought the day's refreshes. Ranking at the later clock would
give the feed time since the previous event and popularity it cannot have yet. The step's truth is its items of
positive type weight that are new to the user (never interacted with before the step), graded by the strongest
interaction's weight.

Each step becomes one row of a ``Histories`` (its "user" is the step), so the candidate and feature code rank a batch
of steps exactly as it ranks a batch of users, each at its own clock.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..data.history import Histories, ranges
from ..data.log import EventLog
from ..settings import Settings
from ..ranking import arrays
from ..ranking.item_table import ItemTable



@dataclasses.dataclass
class Steps:
    """Steps with at least one truth item, in log order (of their first events). Step ``s``'s truth:
    ``rows[offsets[s]:offsets[s+1]]`` (item rows, ascending) graded ``rel``."""

    user: np.ndarray        # (S,) user id
    ts: np.ndarray          # (S,) the step's time
    clock: np.ndarray       # (S,) the log's newest event time before the step: the live baselines' clock
    known: np.ndarray       # (S,) events [0, known) of the log happened before the step
    offsets: np.ndarray
    rows: np.ndarray
    rel: np.ndarray
    #: (S,) the clock the served feed was computed at: the user's previous event after the cut (or a refresh since),
    #: else ``clock``; and how many of the log's events its popularity knew: the log up to the first event of that
    #: clock's timestamp, when the worker's item table was reloaded (for a log stamped by the day, the days before).
    feed_clock: np.ndarray | None = None
    feed_known: np.ndarray | None = None
    #: (S,) events [0, posted) come before the step's first event in log order: what a replay posting the log in
    #: order has posted when it reads the feed. Beyond ``known`` by the other users' events of the step's timestamp
    #: that come first (a day's earlier baskets, on a log stamped by the day).
    posted: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.feed_clock is None:
            self.feed_clock = self.clock
        if self.feed_known is None:
            self.feed_known = self.known
        if self.posted is None:
            self.posted = self.known

    def __len__(self) -> int:
        return len(self.user)

    def take(self, at: np.ndarray) -> Steps:
        """The steps at positions ``at`` (ascending keeps the clock order)."""
        lo, hi = self.offsets[at], self.offsets[at + 1]
        count = hi - lo
        idx = np.repeat(lo - np.r_[0, np.cumsum(count)[:-1]], count) + np.arange(int(count.sum()))
        return Steps(self.user[at], self.ts[at], self.clock[at], self.known[at],
                     np.r_[0, np.cumsum(count)].astype(np.int64), self.rows[idx], self.rel[idx], self.feed_clock[at],
                     self.feed_known[at], self.posted[at])

    @property
    def owner(self) -> np.ndarray:
        """The step of each truth entry."""
        return np.repeat(np.arange(len(self.user)), np.diff(self.offsets))

    def users(self) -> np.ndarray:
        return np.unique(self.user)


def find(events: EventLog, items: ItemTable, cut: float, end: float, n_steps: int,
         users: np.ndarray | None = None, refresh: float = 0.0, horizon: float = float("inf")) -> Steps:
    """The first ``n_steps`` steps after ``cut`` (up to ``end``) of every user with history at or before the cut
    (only ``users``, sorted ids, when given); steps without a new item count towards ``n_steps`` but are not
    returned (nothing to judge). Feeds are refreshed every ``refresh`` of log time after they were computed, up
    to ``horizon`` after the user's newest event (``feeds/refresh.py``; 0: never)."""
    ev_user, ev_item, ev_type, ev_ts = events.user, events.item, events.type, events.ts
    n_cut = int(np.searchsorted(ev_ts, cut, side="right"))
    n_end = len(ev_ts) if end == float("inf") else int(np.searchsorted(ev_ts, end, side="right"))
    who = np.unique(ev_user[:n_cut])
    if users is not None:
        who = np.intersect1d(who, users)
    idx = np.arange(n_cut, n_end)
    idx = idx[np.isin(ev_user[idx], who)]
    idx = idx[np.lexsort((idx, ev_user[idx]))]             # by user, then log order
    if len(idx) == 0:                                     # nothing after the cut for these users
        none = np.empty(0, dtype=np.int64)
        return Steps(none, np.empty(0), np.empty(0), none, np.zeros(1, dtype=np.int64), none, np.empty(0))
    u, t = ev_user[idx], ev_ts[idx]
    new_step = np.r_[True, (u[1:] != u[:-1]) | (t[1:] != t[:-1])]
    step = np.cumsum(new_step) - 1
    # Each step's user's previous event after the cut (NaN: none): their feed was computed once it was posted.
    start = np.flatnonzero(new_step)
    after = (start > 0) & (u[np.maximum(start - 1, 0)] == u[start])
    previous = np.where(after, t[np.maximum(start - 1, 0)], np.nan)[step]
    new_user = np.r_[True, u[1:] != u[:-1]]
    first_step = np.maximum.accumulate(np.where(new_user, step, 0))
    keep = (step - first_step) < n_steps
    idx, u, step, previous = idx[keep], u[keep], step[keep], previous[keep]
    step = np.unique(step, return_inverse=True)[1].ravel()            # dense again
    n_s = int(step.max()) + 1 if len(step) else 0
    # Truth: (step, row) pairs of positive weight whose (user, row) the user never touched before the step.
    span = len(items) + 1
    rows, w = items.rows(ev_item[idx]), items.weight_of(ev_type[idx])
    pos = np.searchsorted(who, u)
    code = pos * span + np.where(rows < 0, span - 1, rows)
    uniq, inv = np.unique(code, return_inverse=True)
    inv = inv.ravel()
    first_of = np.full(len(uniq), n_s)
    np.minimum.at(first_of, inv, step)
    # Which of these (user, row) pairs the user touched before the cut: the stepping users' earlier events looked up
    # in the few distinct pairs (a search per event, not a sort of the whole log's pairs).
    pre = np.flatnonzero(np.isin(ev_user[:n_cut], u))
    pre_rows = items.rows(ev_item[pre])
    pre_code = np.searchsorted(who, ev_user[pre]) * span + np.where(pre_rows < 0, span - 1, pre_rows)
    at = arrays.lookup(uniq, np.arange(len(uniq)), pre_code, missing=-1)
    touched = np.zeros(len(uniq), dtype=bool)
    touched[at[at >= 0]] = True
    fresh = (first_of[inv] == step) & ~touched[inv] & (w > 0) & (rows >= 0)
    t_code, t_inv = np.unique(step[fresh] * span + rows[fresh], return_inverse=True)
    rel = np.zeros(len(t_code))
    np.maximum.at(rel, t_inv.ravel(), w[fresh])
    t_step, t_row = t_code // span, t_code % span
    # Per step: its user, time, the log's clock before it.
    s_first = np.flatnonzero(np.r_[True, step[1:] != step[:-1]])
    s_user, s_at, s_previous = u[s_first], idx[s_first], previous[s_first]
    judged = np.unique(t_step)
    s_user, s_at, s_previous = s_user[judged], s_at[judged], s_previous[judged]
    s_ts = ev_ts[s_at]
    known = np.searchsorted(ev_ts, s_ts, side="left")
    clock = ev_ts[np.maximum(known - 1, 0)]
    # The log's clock once the events before the step in log order are posted, which is when the feed is read: on
    # a log stamped by the day, the day's earlier baskets have moved it to the day, and the day's refreshes with it.
    read_clock = ev_ts[np.maximum(s_at - 1, 0)]
    fresh = np.isnan(s_previous)
    feed_clock = np.where(fresh, read_clock, s_previous)
    if refresh > 0:
        # Refreshed at previous + k·refresh (while the one before was recorded: (k-1)·refresh <= horizon), once the
        # first event at or after that moment is posted.
        k = np.minimum(np.floor((read_clock - s_previous) / refresh), np.floor(horizon / refresh) + 1)
        moved = ~fresh & (k >= 1)
        first = np.searchsorted(ev_ts, s_previous[moved] + refresh * k[moved], side="left")
        feed_clock[moved] = ev_ts[np.minimum(first, s_at[moved] - 1)]
    # A worker's popularity is its item table's, reloaded when the log's clock moves on: it knows the log up to the
    # first event of its clock's moment (on a log of baskets stamped by the day, the days before and no more).
    feed_known = np.searchsorted(ev_ts, feed_clock, side="left") + 1
    order = np.argsort(s_at, kind="stable")             # log order, so that posting up to each step only moves on
    where = np.empty(len(judged), dtype=np.int64)
    where[order] = np.arange(len(judged))
    t_pos = where[np.searchsorted(judged, t_step)]
    by = np.lexsort((t_row, t_pos))
    return Steps(user=s_user[order], ts=s_ts[order], clock=clock[order], known=known[order],
                 offsets=np.r_[0, np.cumsum(np.bincount(t_pos, minlength=len(judged)))].astype(np.int64),
                 rows=t_row[by], rel=rel[by], feed_clock=feed_clock[order], feed_known=feed_known[order],
                 posted=s_at[order])


class ByUser:
    """The log's events grouped by user (log order within each), to cut each step's history out of it."""

    def __init__(self, events: EventLog) -> None:
        self.events = events
        self.order = np.argsort(events.user, kind="stable")
        self.users = np.unique(events.user)
        pos = np.searchsorted(self.users, events.user[self.order])
        self.key = pos * (len(events) + 1) + self.order        # ascending: by user, then log position

    def histories(self, steps: Steps, items: ItemTable, settings: Settings, seen_window: float | None = None
                  ) -> Histories:
        """One ``Histories`` row per step: the user's newest ``history_limit`` events before the step; seen items
        those interacted with inside ``seen_window`` (default the settings') before the step's feed clock, ``inf``:
        all. ``clock`` is the latest step's; each step's own is ``steps.feed_clock``."""
        n = len(self.events) + 1
        pos = np.searchsorted(self.users, steps.user)
        lo = np.searchsorted(self.key, pos * n)
        end = np.searchsorted(self.key, pos * n + steps.known)
        start = np.maximum(lo, end - settings.history_limit)
        at = self.order[ranges(start, end)]
        window = settings.seen_window if seen_window is None else seen_window
        ev = self.events
        ev_item, ev_type, ev_ts = ev.item, ev.type, ev.ts
        # Seen: distinct rows of the events inside the window before each step's clock.
        all_at = self.order[ranges(lo, end)]
        owner = np.repeat(np.arange(len(steps)), end - lo)
        inside = ev_ts[all_at] >= steps.feed_clock[owner] - window
        s_rows = items.rows(ev_item[all_at[inside]])
        s_owner = owner[inside]
        ok = s_rows >= 0
        span = len(items) + 1
        s_code = np.unique(s_owner[ok] * span + s_rows[ok])
        s_owner, s_rows = s_code // span, s_code % span
        return Histories(
            user_ids=np.arange(len(steps), dtype=np.int64), versions=np.zeros(len(steps), dtype=np.int64),
            offsets=np.r_[0, np.cumsum(end - start)].astype(np.int64), item_rows=items.rows(ev_item[at]),
            types=ev_type[at].astype(np.int64), ts=ev_ts[at].astype(np.float64),
            clock=float(steps.feed_clock.max(initial=0.0)),
            seen_offsets=np.r_[0, np.cumsum(np.bincount(s_owner, minlength=len(steps)))].astype(np.int64),
            seen_rows=s_rows.astype(np.int64))
