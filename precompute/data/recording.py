"""Recording interaction events: one transaction that stores them (creating bare items they name that the catalogue
does not have, or refusing them: ``PREFEED_EVENTS_CREATE_ITEMS``), bumps each user's history version and rewrites
the user's kept values: newest events (``history.py``) and seen items (``seen.py``)."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import weakref

from sqlalchemy import Engine, bindparam, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from ..errors import as_prefeed_error, database_errors
from ..settings import Settings
from . import event_types, history, items, seen as seen_items
from .tables import Event, User


@dataclasses.dataclass(frozen=True)
class NewEvent:
    user_id: int
    item_id: int
    type: int
    ts: float
    client_event_id: str | None = None
    value: float | None = None           # a rating, a watch time; None = none


@dataclasses.dataclass
class Recorded:
    accepted: int                    # events stored now
    duplicates: int                  # events skipped: their client_event_id (or another unique key) was stored
    versions: dict[int, int]         # user id -> history version after this batch (users with new events)
    seen: list[tuple[int, int, int]]  # (user_id, item_id, version) of the stored events
    items_created: int = 0           # bare items created for events naming items the catalogue did not have


class _Turns:
    """The write turns of one SQLite engine's threads: one at a time, and a thread that asks with ``first`` goes
    before every thread waiting without it.

    SQLite has one write lock for the whole file, and a writer that finds it taken sleeps and polls (the busy
    timeout, up to 100 ms between tries): threads of a process polling against each other leave the lock idle between
    holders and let a late comer overtake one that has waited for seconds. Waiting here instead, they take it in turn
    and only one of them polls against the other processes. ``first`` is for batches of known users: a batch that
    brings new user ids (a flood of made-up ones, let in by the key's new-user budget) waits behind them, so a burst
    of such batches delays a real user's events by one batch at most, not by the whole burst."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held = False
        self._first_waiting = 0

    @contextlib.contextmanager
    def turn(self, first: bool):
        with self._cond:
            self._first_waiting += first
            try:
                while self._held or (not first and self._first_waiting):
                    self._cond.wait()
            finally:
                self._first_waiting -= first
            self._held = True
        try:
            yield
        finally:
            with self._cond:
                self._held = False
                self._cond.notify_all()


_SQLITE_TURNS: weakref.WeakKeyDictionary[Engine, _Turns] = weakref.WeakKeyDictionary()
_TURNS_LOCK = threading.Lock()


def _write_turn(engine: Engine, first: bool):
    """This thread's turn to write on a SQLite engine (``_Turns``); nothing to wait for on other databases, whose
    writers lock rows, not the database."""
    if engine.dialect.name != "sqlite":
        return contextlib.nullcontext()
    with _TURNS_LOCK:
        turns = _SQLITE_TURNS.get(engine)
        if turns is None:
            turns = _SQLITE_TURNS[engine] = _Turns()
    return turns.turn(first)


def record(engine: Engine, events: list[NewEvent], settings: Settings, *, create_items: bool | None = None,
           new_users: bool = True) -> Recorded:
    """Store ``events`` atomically. Item ids the catalogue does not have are created bare in the same transaction
    when ``create_items`` (default: ``settings.events_create_items``), else reject the whole batch (``NotFound``,
    nothing written). Each user's
    kept values (newest ``history_limit`` events, up to ``seen_max_items`` seen items) are rewritten in the same
    transaction. ``new_users=False`` (the caller knows every user id exists) lets the batch write before batches
    that may create users, on SQLite (``_Turns``)."""
    history_limit, cap = settings.history_limit, settings.seen_max_items
    insert = pg_insert if engine.dialect.name == "postgresql" else sqlite_insert
    item_ids = sorted({e.item_id for e in events})
    user_ids = sorted({e.user_id for e in events})
    try:
        with _write_turn(engine, first=not new_users), engine.begin() as conn:
            # The codes this process writes must mean what the stored ones do (an API started with a reordered
            # PREFEED_EVENT_TYPES would otherwise store clicks as something else); one small read.
            event_types.check(conn, settings)
            created = items.ensure(conn, item_ids, settings.events_create_items if create_items is None
                                   else create_items)
            first_ts = min(e.ts for e in events)
            # Executemany, not one multi-row VALUES: the statement is compiled once per process and cached,
            # whatever the batch's size (a VALUES of 100 rows took more time to compile than to run).
            conn.execute(insert(User.__table__).on_conflict_do_nothing(index_elements=["id"]),
                         [{"id": u, "created_at": first_ts, "history_version": 0,
                           "recent": history.empty(history_limit), "seen": seen_items.empty(cap)} for u in user_ids])
            stored = conn.execute(
                # No conflict target: an event that collides on any unique index (client_event_id, or another
                # rule for imported events) is a duplicate, skipped and counted, on SQLite as on PostgreSQL.
                insert(Event.__table__).on_conflict_do_nothing()
                .returning(Event.id, Event.user_id, Event.item_id, Event.type, Event.ts),
                [vars(e) for e in events]).all()      # each event's fields, read as they are (no copy)
            per_user: dict[int, list] = {}
            for row in sorted(stored):        # by id: the order the events log has them in
                per_user.setdefault(row.user_id, []).append(row)
            versions, seen = {}, []
            if per_user:
                versions = _advance(conn, per_user, history_limit, cap)
                seen = [(uid, e.item_id, versions[uid]) for uid in sorted(per_user) for e in per_user[uid]]
    except database_errors() as exc:
        raise as_prefeed_error(exc) from exc
    return Recorded(accepted=len(stored), duplicates=len(events) - len(stored), versions=versions, seen=seen,
                    items_created=created)


def _advance(conn, per_user: dict[int, list], history_limit: int, cap: int) -> dict[int, int]:
    """Bump each user's history version by their new events and rewrite their kept values, in two statements
    whatever the number of users: one read of the rows, locked, and one executemany of the new values. Returns each
    user's new history version.

    The rows are locked by the read itself on PostgreSQL (``FOR NO KEY UPDATE``, in id order: concurrent batches lock
    users alike), the lock an ``UPDATE`` of non-key columns takes: ``FOR UPDATE`` would also wait for the key-share
    locks the batch's event rows take on their users (their foreign key), so two batches of one user that had both
    inserted their events waited for each other (deadlock detected, a 503). On SQLite the transaction holds the
    database's write lock since its first insert. Either way no other batch changes them between the read and the
    write."""
    query = select(User.id, User.history_version, User.recent, User.seen).where(
        User.id.in_(sorted(per_user))).order_by(User.id)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(key_share=True)        # FOR NO KEY UPDATE
    versions, rows = {}, []
    for uid, version, kept, kept_seen in conn.execute(query):
        new = per_user[uid]
        item, ts = [e.item_id for e in new], [e.ts for e in new]
        # A malformed value, or one kept under a smaller limit than today's (its oldest events or items are
        # missing), is dropped (NULL: read from the events table until init-db refills it) rather than failing the
        # user's events or being extended as if it were whole. NULL stays NULL.
        if kept is not None:
            kept = history.append(kept, item, [e.type for e in new], ts, history_limit) \
                if history.covers(kept, history_limit) else None
        if kept_seen is not None:
            kept_seen = seen_items.merge(kept_seen, item, ts, cap) if seen_items.covers(kept_seen, cap) else None
        versions[uid] = int(version) + len(new)
        rows.append({"b_id": uid, "b_version": versions[uid], "b_recent": kept, "b_seen": kept_seen})
    users = User.__table__
    conn.execute(update(users).where(users.c.id == bindparam("b_id")).values(
        history_version=bindparam("b_version"), recent=bindparam("b_recent"), seen=bindparam("b_seen")), rows)
    return versions

