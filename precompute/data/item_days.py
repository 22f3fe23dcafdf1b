"""What the served pages did for each item, day by day: its impressions (on every user's pages) on the pages' days,
and the events attributed to them, per event type, on the events' own days (so the days before a step's hold no
event of the step or after it), as the collector counts them (``experiments/intake.py``, ``collect.py``).

The pages themselves are kept only ``PREFEED_IMPRESSIONS_KEEP`` (long enough to attribute events to them); what an
item's history of exposure says over weeks is kept here instead, bounded: one row per (item, day, kind), where
``kind`` is ``SHOWN`` for impressions or an event type's code, for ``KEEP_DAYS`` days of the events' clock. An item
shown every day with two event types attributed takes 3 rows a day, 84 over ``KEEP_DAYS``; a catalogue's items are
mostly shown on some days only.

A day's counts are added in the transaction that stores its pages (or attributes its events), only for the pages
(events) stored (attributed) by that transaction, so a batch read twice counts nothing twice.

``exposure`` reads an item's counts over a window, with a smoothed rate: attributed events per impression, pulled
towards the rate of every item in the window by ``PRIOR_IMPRESSIONS`` impressions' worth, so an item with 3
impressions is not a 0 % or 100 % item, and an item never shown has the prior's rate.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
from sqlalchemy import Engine, case, delete, func, select

from ..units import DAY
from .tables import ItemDay

#: The ``kind`` of an item's impressions (event type codes are >= 0).
SHOWN = -1
#: Days of counts kept, on the events' clock: the longest window read.
KEEP_DAYS = 28
#: Days an item's columns (and the dashboard) count: the complete days before the one holding the clock.
WINDOW_DAYS = KEEP_DAYS
#: How many impressions' worth the prior rate weighs in a smoothed rate.
PRIOR_IMPRESSIONS = 100.0


def day_of(ts: float) -> int:
    """The day (since the epoch, on the events' clock) of a time in epoch seconds."""
    return int(ts // DAY)


def add(conn, insert, counts: Counter) -> None:
    """Add ``counts`` ((item id, day, kind) -> n) to the table, in the caller's transaction."""
    rows = [dict(item_id=i, day=d, kind=k, count=n) for (i, d, k), n in sorted(counts.items()) if n]
    if rows:
        stmt = insert(ItemDay)
        conn.execute(stmt.on_conflict_do_update(index_elements=["item_id", "day", "kind"],
                                                set_={"count": ItemDay.count + stmt.excluded.count}), rows)


def impressions_of(pages: Iterable) -> Counter:
    """(item id, day, ``SHOWN``) -> impressions of ``pages`` (each with ``served_at`` and ``items``)."""
    counts: Counter = Counter()
    for page in pages:
        day = day_of(page.served_at)
        counts.update((int(i), day, SHOWN) for i in page.items.tolist())
    return counts


def prune(conn, clock: float) -> int:
    """Delete the days older than ``KEEP_DAYS`` before ``clock`` (the events' clock); returns the rows deleted."""
    return conn.execute(delete(ItemDay).where(ItemDay.day < day_of(clock) - KEEP_DAYS)).rowcount or 0


@dataclasses.dataclass(frozen=True)
class Exposure:
    """Items' counts over a window: ``shown`` impressions and ``acted`` attributed events (every type), per item of
    ``item_ids``; ``prior`` the rate of every item in the window; ``by_type`` (type code -> per item)."""

    item_ids: np.ndarray
    shown: np.ndarray
    acted: np.ndarray
    by_type: dict[int, np.ndarray]
    prior: float

    @property
    def rate(self) -> np.ndarray:
        """Attributed events per impression, smoothed towards ``prior`` (see the module doc)."""
        return smoothed(self.acted, self.shown, self.prior)


def smoothed(acted: np.ndarray, shown: np.ndarray, prior: float, weight: float = PRIOR_IMPRESSIONS) -> np.ndarray:
    """``(acted + weight * prior) / (shown + weight)``: the rate of ``acted`` in ``shown``, with ``weight``
    impressions at the ``prior`` rate added."""
    return (np.asarray(acted, float) + weight * prior) / (np.asarray(shown, float) + weight)


def exposure(engine: Engine, item_ids: Sequence[int], clock: float, days: int = WINDOW_DAYS) -> Exposure:
    """The counts of ``item_ids`` over the ``days`` complete days before the one holding ``clock`` (the events'
    clock): the window the ranker's item columns read (``Daily.window``)."""
    ids = np.asarray(item_ids, dtype=np.int64)
    last = day_of(clock)
    in_window = (ItemDay.day >= last - days, ItemDay.day < last)
    with engine.connect() as conn:
        all_shown, all_acted = conn.execute(select(
            func.coalesce(func.sum(case((ItemDay.kind == SHOWN, ItemDay.count), else_=0)), 0),
            func.coalesce(func.sum(case((ItemDay.kind != SHOWN, ItemDay.count), else_=0)), 0)).where(*in_window)).one()
        rows = conn.execute(select(ItemDay.item_id, ItemDay.kind, func.sum(ItemDay.count))
                            .where(ItemDay.item_id.in_(ids.tolist()), *in_window)
                            .group_by(ItemDay.item_id, ItemDay.kind)).all() if len(ids) else []
    place = {i: k for k, i in enumerate(ids.tolist())}
    shown, acted = np.zeros(len(ids), np.int64), np.zeros(len(ids), np.int64)
    by_type: dict[int, np.ndarray] = {}
    for item, kind, n in rows:
        if kind == SHOWN:
            shown[place[item]] += n
        else:
            acted[place[item]] += n
            by_type.setdefault(int(kind), np.zeros(len(ids), np.int64))[place[item]] += n
    return Exposure(ids, shown, acted, by_type, int(all_acted) / int(all_shown) if all_shown else 0.0)


@dataclasses.dataclass(frozen=True)
class Daily:
    """Items' counts day by day from day ``first`` on, as running sums, for their columns at any later day (the
    ranker's "shown" group, ``ranking/shown.py``): ``rows`` the item rows (of the caller's item table) with any
    count, ascending; ``shown[k, d]`` and ``acted[k, d]`` row ``rows[k]``'s impressions and attributed events on the
    days before ``first + d``; ``all_shown``, ``all_acted`` the same over every item (the prior)."""

    first: int
    rows: np.ndarray
    shown: np.ndarray
    acted: np.ndarray
    all_shown: np.ndarray
    all_acted: np.ndarray
    #: item row -> its place in ``rows`` (-1: no count), one past the largest row: a candidate's look-up is one
    #: gather (a binary search per candidate, over a few thousand candidates per user, cost several times more)
    slot: np.ndarray = dataclasses.field(default_factory=lambda: np.full(1, -1, np.int64))

    def window(self, rows: np.ndarray, owner: np.ndarray, owner_day: np.ndarray,
               days: int = WINDOW_DAYS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per ``rows[j]`` at its owner's day (``owner_day[owner[j]]``): impressions and attributed events on the
        ``days`` days before it, and every item's rate over them (NaN where no item was shown). Each distinct day's
        counts are taken once per item, then each candidate's by one gather."""
        n_days, width = self.shown.shape[1] - 1, len(self.rows) + 1
        uniq, inv = np.unique(np.asarray(owner_day, np.int64), return_inverse=True)
        hi = np.clip(uniq - self.first, 0, n_days)
        lo = np.clip(hi - days, 0, n_days)
        k = self.slot.take(rows, mode="clip")
        k[k < 0] = len(self.rows)                          # an item without counts: the column of zeros
        day_of_candidate = inv.ravel().take(owner)         # each candidate's place in ``uniq``
        at = day_of_candidate * width + k

        def per_day(running: np.ndarray) -> np.ndarray:    # (distinct days × items + 1), flat
            return np.vstack([running[:, hi] - running[:, lo], np.zeros((1, len(uniq)), np.int64)]).T.ravel()

        every = (self.all_shown[hi] - self.all_shown[lo]).astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            prior = np.where(every > 0, (self.all_acted[hi] - self.all_acted[lo]) / every, np.nan)
        return per_day(self.shown).take(at), per_day(self.acted).take(at), prior.take(day_of_candidate)


def daily(engine: Engine, rows_of, first: int, last: int) -> Daily:
    """The counts of days ``first`` to ``last - 1``, items as rows by ``rows_of`` (item ids → rows, < 0: an item
    the caller's table does not know, counted in the prior only)."""
    with engine.connect() as conn:
        found = conn.execute(select(ItemDay.item_id, ItemDay.day, ItemDay.kind, ItemDay.count)
                             .where(ItemDay.day >= first, ItemDay.day < last)).all()
    ids, day, kind, count = _arrays(found, 4)
    return of_rows(np.asarray(rows_of(ids), dtype=np.int64), day, kind, count, first, last)


def of_rows(rows: np.ndarray, day: np.ndarray, kind: np.ndarray, count: np.ndarray, first: int, last: int) -> Daily:
    """``Daily`` of counts given as rows (item row, day in ``[first, last)``, kind, count); rows < 0 count in the
    prior only."""
    n_days = max(last - first, 0)
    d = day - first + 1                                 # running sums: column d + 1 holds day first + d
    is_shown = kind == SHOWN
    all_shown = np.cumsum(np.bincount(d, weights=count * is_shown, minlength=n_days + 1)).astype(np.int64)
    all_acted = np.cumsum(np.bincount(d, weights=count * ~is_shown, minlength=n_days + 1)).astype(np.int64)
    known = rows >= 0
    present = np.unique(rows[known])
    k = np.searchsorted(present, rows[known])
    shown = np.zeros((len(present), n_days + 1), np.int64)
    acted = np.zeros((len(present), n_days + 1), np.int64)
    np.add.at(shown, (k, d[known]), count[known] * is_shown[known])
    np.add.at(acted, (k, d[known]), count[known] * ~is_shown[known])
    slot = np.full(int(present.max(initial=-1)) + 2, -1, np.int64)
    slot[present] = np.arange(len(present))
    return Daily(first, present, np.cumsum(shown, axis=1), np.cumsum(acted, axis=1), all_shown, all_acted, slot)


def window_sums(engine: Engine, rows_of, day: int) -> Daily:
    """The window before ``day`` summed per item, as a ``Daily`` of one bucket (what the columns read at ``day``
    only): one row per item and kind read, not one per day, so a worker's read grows with the items shown and the
    types attributed, not with the window's days."""
    return _of_sums(_sums(engine, day), rows_of, day)


def _sums(engine: Engine, day: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(item ids, kind, count)`` of the window before ``day`` summed per item and kind."""
    with engine.connect() as conn:
        found = conn.execute(select(ItemDay.item_id, ItemDay.kind, func.sum(ItemDay.count))
                             .where(ItemDay.day >= day - WINDOW_DAYS, ItemDay.day < day)
                             .group_by(ItemDay.item_id, ItemDay.kind)).all()
    return _arrays(found, 3)


def _arrays(found: list, n: int) -> tuple[np.ndarray, ...]:
    """The ``n`` columns of query rows ``found`` as int64 arrays."""
    if not found:
        return (np.empty(0, np.int64),) * n
    return tuple(np.array(column, dtype=np.int64) for column in zip(*found))


def _of_sums(sums: tuple[np.ndarray, np.ndarray, np.ndarray], rows_of, day: int) -> Daily:
    ids, kind, count = sums
    return of_rows(np.asarray(rows_of(ids), dtype=np.int64), np.full(len(ids), day - 1), kind, count, day - 1, day)


class Held:
    """One process's ``window_sums`` before a clock's day: read once per day (the window is of complete days; an
    event of the day before attributed after the read, its collection settling a few seconds late, counts from the
    next day's read), mapped again to the rows of each new item table (a work horse forked from a parent that read
    it inherits it)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sums: tuple[int, tuple] | None = None
        self._held: tuple[weakref.ref, Daily] | None = None

    def before(self, clock: float, items) -> Daily:
        """The window before ``clock``'s day, items as rows of ``items`` (an item table: ``rows`` maps ids)."""
        day = day_of(clock)
        if self._sums is None or self._sums[0] != day:
            self._sums, self._held = (day, _sums(self.engine, day)), None
        if self._held is None or self._held[0]() is not items:
            self._held = weakref.ref(items), _of_sums(self._sums[1], items.rows, day)
        return self._held[1]
