"""The collector: served pages from Redis to the database, and the events stored since attributed to them.

One collection (one at a time, under a Redis lock):

1. **Pages.** The Redis list the API processes append to (``impressions.py``) is moved to the database a batch at a
   time, stored once each, with each user's ``exposures`` counts for the report (``intake.py``).
2. **Attribution.** An event is attributed to the newest page that served its item to its user at or before the
   event's time and at most ``PREFEED_ATTRIBUTION_WINDOW`` before it (its experiment, arm and position); others are
   organic; each event attributed counts for its item on its own day (``data/item_days.py``). The pages an
   event is matched against are bounded: at most ``USER_PAGES`` of its user's newest before it (an item shown only
   on older pages than those is organic). Events are attributed in id order, once the pages served before them have
   surely reached the database: an API process sends its pages every ``PREFEED_IMPRESSIONS_FLUSH_MS``, so the
   events stored before a collection are attributed by the first collection at least ``settle`` seconds later (the
   ``settling`` mark). ``experiments report`` waits that long itself and attributes every event stored when it
   began: its counts are exact then.
3. **Retention.** Pages served more than ``PREFEED_IMPRESSIONS_KEEP`` before the events' clock (or before the newest
   attributed event, when attribution is behind) are deleted, and such pages still in Redis are dropped unstored
   (``expired``): read again after their twins were deleted, they would be counted twice. The items' days are kept
   ``item_days.KEEP_DAYS`` on the same clock.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter

import numpy as np
import redis
from sqlalchemy import Engine, delete, func, select

from ..data import item_days
from ..data.clock import newest_event
from ..data.tables import Attribution, CollectorMark, Event, ImpressionWriter, ServedPage
from ..errors import as_prefeed_error, database_errors
from ..feeds.keys import Keys
from ..settings import Settings
from .intake import LOCK_SECONDS, Intake, insert_for, move_pages

log = logging.getLogger(__name__)

#: Events attributed per transaction.
EVENT_BATCH = 20_000
#: Pages of one user an event is matched against, its newest at or before the event: far more than a person reads
#: in an attribution window at ``PREFEED_IMPRESSIONS_USER_MAX`` a minute (about a day of steady reading at 1 page/min
#: per process), and few enough that a user with millions of pages costs one bounded query per event.
USER_PAGES = 2000


@dataclasses.dataclass
class Collected(Intake):
    bounded: int = 0            # events whose user had more than USER_PAGES pages before them in the window
    attributed: int = 0         # events attributed now
    events: int = 0             # events looked at
    pruned: int = 0             # pages deleted past PREFEED_IMPRESSIONS_KEEP
    #: (experiment, arm, event type) -> events attributed now
    by_type: dict = dataclasses.field(default_factory=dict)
    waiting: bool = False       # events stored, not yet attributed: another collection is needed


def settle_seconds(settings: Settings) -> float:
    """How long after an event is stored every page served before it has reached Redis: two flush intervals and a
    second for a busy process's thread."""
    return 2 * settings.impressions_flush_ms / 1000.0 + 1.0


def newest_event_id(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.max(Event.id))).scalar() or 0)


def collect(engine: Engine, r: redis.Redis, settings: Settings, through: int | None = None,
            lock_wait: float = 0.0) -> Collected | None:
    """One collection (see the module doc). ``through``: attribute every event up to this id now (the report, once
    it has waited ``settle_seconds``); else the settling rule. None when another collection holds the lock for more
    than ``lock_wait`` seconds."""
    keys = Keys(settings.key_prefix)
    lock = r.lock(keys.impressions_lock, timeout=LOCK_SECONDS, blocking_timeout=lock_wait)
    if not lock.acquire(blocking=lock_wait > 0):
        return None
    try:
        now, newest = time.time(), newest_event_id(engine)
        done = Collected()
        try:
            reached = _reached(engine)
            oldest = float("-inf") if reached is None else reached - settings.impressions_keep
            if not move_pages(engine, r, keys, lock, oldest, done):
                done.waiting = True             # the lock went to another collection: it carries on
                return done
            target = through if through is not None else _settled(engine, settings, newest, now)
            try:
                attributed_to = _attribute(engine, settings, target, done, lock) if target else \
                    _mark(engine, "attributed")
            except redis.exceptions.LockNotOwnedError:
                log.warning("impressions: the collector's lock expired; another collection carries on")
                done.waiting = True
                return done
            done.waiting = newest > attributed_to
            done.pruned = _prune(engine, oldest, reached)
        except database_errors() as exc:
            raise as_prefeed_error(exc) from exc
        return done
    finally:
        try:
            lock.release()
        except redis.exceptions.LockError:
            log.warning("impressions: the collector's lock expired before it finished")


def _mark(engine: Engine, name: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(CollectorMark.event_id).where(CollectorMark.name == name)).scalar() or 0)


def _set_mark(conn, name: str, event_id: int, at: float = 0.0) -> None:
    insert = insert_for(conn.engine)
    stmt = insert(CollectorMark).values(name=name, event_id=event_id, at=at)
    conn.execute(stmt.on_conflict_do_update(index_elements=["name"], set_={"event_id": event_id, "at": at}))


def _settled(engine: Engine, settings: Settings, newest: int, now: float) -> int | None:
    """The event id attribution may reach now: the ``settling`` mark once ``settle_seconds`` old (then the newest
    event id becomes the mark), None while it is younger."""
    with engine.begin() as conn:
        row = conn.execute(select(CollectorMark.event_id, CollectorMark.at)
                           .where(CollectorMark.name == "settling")).first()
        if row is not None and now - row.at < settle_seconds(settings):
            return None
        _set_mark(conn, "settling", newest, now)
        return None if row is None else int(row.event_id)


def _attribute(engine: Engine, settings: Settings, target: int, done: Collected, lock) -> int:
    """Attribute the events after the ``attributed`` mark up to ``target``; returns the mark reached. Each batch
    renews the lock (``LockNotOwnedError`` when it was lost: the batch's transaction is not committed)."""
    insert, window = insert_for(engine), float(settings.attribution_window)
    mark = _mark(engine, "attributed")
    while mark < target:
        lock.reacquire()
        with engine.begin() as conn:
            events = conn.execute(select(Event.id, Event.user_id, Event.item_id, Event.type, Event.ts)
                                  .where(Event.id > mark, Event.id <= target).order_by(Event.id)
                                  .limit(EVENT_BATCH)).all()
            if not events:
                mark = target
                _set_mark(conn, "attributed", mark)
                break
            pages, heavy = _pages_of(conn, events, window)
            rows = []
            for e in events:
                if e.user_id in heavy:
                    done.bounded += 1
                    found = _newest_serving(_pages_before(conn, e.user_id, e.ts, window), e.item_id, e.ts, window)
                else:
                    found = _newest_serving(pages.get(e.user_id, ()), e.item_id, e.ts, window)
                if found is not None:
                    page, place = found
                    rows.append(dict(event_id=e.id, experiment=page.experiment, arm=page.arm, user_id=e.user_id,
                                     type=e.type, position=page.position + place, served_at=page.served_at))
            got = conn.execute(insert(Attribution).on_conflict_do_nothing().returning(
                Attribution.event_id, Attribution.experiment, Attribution.arm, Attribution.type), rows).all() \
                if rows else []
            when = {e.id: (e.item_id, item_days.day_of(e.ts)) for e in events}
            for _, experiment, arm, type_ in got:
                done.by_type[experiment, arm, type_] = done.by_type.get((experiment, arm, type_), 0) + 1
            item_days.add(conn, insert, Counter((*when[a.event_id], a.type) for a in got))
            done.attributed += len(got)
            mark = int(events[-1].id)
            _set_mark(conn, "attributed", mark)
            done.events += len(events)
    return mark


_PAGE_COLUMNS = (ServedPage.user_id, ServedPage.experiment, ServedPage.arm, ServedPage.served_at,
                 ServedPage.position, ServedPage.items, ServedPage.writer, ServedPage.seq)
_NEWEST_FIRST = (ServedPage.served_at.desc(), ServedPage.writer.desc(), ServedPage.seq.desc())


def _pages_of(conn, events, window: float) -> tuple[dict[int, list], set[int]]:
    """The pages that may have served the events' items: their users', from ``window`` before the oldest event to
    the newest, newest first (ties: by writer and number, a fixed order); and the users with more than
    ``USER_PAGES`` such pages, whose pages are not read here (``_pages_before`` reads each event's own)."""
    users = sorted({e.user_id for e in events})
    lo, hi = min(e.ts for e in events) - window, max(e.ts for e in events)
    found: dict[int, list] = {}
    heavy: set[int] = set()
    for i in range(0, len(users), 500):
        chunk = users[i:i + 500]
        in_window = (ServedPage.user_id.in_(chunk), ServedPage.served_at >= lo, ServedPage.served_at <= hi)
        # on ix_served_pages_user alone: how many pages each user has, before reading any
        counts = conn.execute(select(ServedPage.user_id, func.count()).where(*in_window)
                              .group_by(ServedPage.user_id)).all()
        over = {u for u, n in counts if n > USER_PAGES}
        heavy |= over
        light = [u for u, n in counts if n <= USER_PAGES]
        if not light:
            continue
        for row in conn.execute(select(*_PAGE_COLUMNS).where(ServedPage.user_id.in_(light), *in_window[1:])):
            found.setdefault(row.user_id, []).append(row)
    for pages in found.values():
        pages.sort(key=lambda p: (p.served_at, p.writer, p.seq), reverse=True)
    return found, heavy


def _pages_before(conn, user_id: int, ts: float, window: float) -> list:
    """The newest ``USER_PAGES`` pages of ``user_id`` served at or before ``ts`` and at most ``window`` before it,
    newest first: one bounded read on ``ix_served_pages_user``."""
    return conn.execute(select(*_PAGE_COLUMNS).where(ServedPage.user_id == user_id, ServedPage.served_at <= ts,
                                                     ServedPage.served_at >= ts - window)
                        .order_by(*_NEWEST_FIRST).limit(USER_PAGES)).all()


def _newest_serving(pages, item_id: int, ts: float, window: float):
    """``(page, index of the item in it)`` of the newest page served at or before ``ts``, at most ``window``
    before, that holds ``item_id``; None when none does."""
    for page in pages:
        if page.served_at > ts:
            continue
        if page.served_at < ts - window:
            return None                         # newest first: every later one is older still
        items = np.frombuffer(page.items, dtype="<i8")
        hit = np.flatnonzero(items == item_id)
        if len(hit):
            return page, int(hit[0])
    return None


def _reached(engine: Engine) -> float | None:
    """The clock what is kept is measured from (None: no event attributed yet): the events' clock, or the newest
    attributed event's time when attribution is behind (a log replayed faster than it happened moves the clock days
    ahead between two collections; the events still waiting must find their pages). Pages served more than
    ``PREFEED_IMPRESSIONS_KEEP`` before it are past keeping."""
    mark = _mark(engine, "attributed")
    with engine.connect() as conn:
        clock = newest_event(conn)
        reached = conn.execute(select(Event.ts).where(Event.id == mark)).scalar() if mark else None
    if clock is None or reached is None:
        return None
    return min(clock, float(reached))


def _prune(engine: Engine, oldest: float, reached: float | None) -> int:
    """Delete the pages served before ``oldest``, and the items' days past keeping (``item_days.KEEP_DAYS`` before
    ``reached``); returns the pages deleted."""
    with engine.begin() as conn:
        if reached is not None:
            item_days.prune(conn, reached)
        return conn.execute(delete(ServedPage).where(ServedPage.served_at < oldest)).rowcount or 0


def lost_total(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.coalesce(func.sum(ImpressionWriter.lost), 0))).scalar())



