"""Recording interaction events: one transaction that stores them (creating bare items they name that the catalogue
does not have, or refusing them: ``PREFEED_EVENTS_CREATE_ITEMS``), bumps each user's history version and rewrites
the user's kept values: newest events (``history.py``) and seen items (``seen.py``)."""

from __future__ import annotations

import dataclasses

from sqlalchemy import Engine, update
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


def record(engine: Engine, events: list[NewEvent], settings: Settings, *, create_items: bool | None = None) -> Recorded:
    """Store ``events`` atomically. Item ids the catalogue does not have are created bare in the same transaction
    when ``create_items`` (default: ``settings.events_create_items``), else reject the whole batch (``NotFound``,
    nothing written). Each user's
    kept values (newest ``history_limit`` events, up to ``seen_max_items`` seen items) are rewritten in the same
    transaction."""
    history_limit, cap = settings.history_limit, settings.seen_max_items
    insert = pg_insert if engine.dialect.name == "postgresql" else sqlite_insert
    item_ids = sorted({e.item_id for e in events})
    user_ids = sorted({e.user_id for e in events})
    try:
        with engine.begin() as conn:
            # The codes this process writes must mean what the stored ones do (an API started with a reordered
            # PREFEED_EVENT_TYPES would otherwise store clicks as something else); one small read.
            event_types.check(conn, settings)
            created = items.ensure(conn, item_ids, settings.events_create_items if create_items is None
                                   else create_items)
            first_ts = min(e.ts for e in events)
            conn.execute(insert(User).values([{"id": u, "created_at": first_ts, "history_version": 0,
                                               "recent": history.empty(history_limit),
                                               "seen": seen_items.empty(cap)} for u in user_ids])
                         .on_conflict_do_nothing(index_elements=["id"]))
            stored = conn.execute(
                insert(Event).values([dataclasses.asdict(e) for e in events])
                # No conflict target: an event that collides on any unique index (client_event_id, or another
                # rule for imported events) is a duplicate, skipped and counted, on SQLite as on PostgreSQL.
                .on_conflict_do_nothing()
                .returning(Event.id, Event.user_id, Event.item_id, Event.type, Event.ts)
            ).all()
            per_user: dict[int, list] = {}
            for row in sorted(stored):        # by id: the order the events log has them in
                per_user.setdefault(row.user_id, []).append(row)
            versions, seen = {}, []
            for uid in sorted(per_user):      # fixed order: concurrent batches lock users alike, no deadlock
                new = per_user[uid]
                # The row lock taken by this UPDATE covers the read-modify-write of the kept values below.
                v, kept, kept_seen = conn.execute(update(User).where(User.id == uid)
                                                  .values(history_version=User.history_version + len(new))
                                                  .returning(User.history_version, User.recent, User.seen)).one()
                # A malformed value, or one kept under a smaller limit than today's (its oldest events or items are
                # missing), is dropped (NULL: read from the events table until init-db refills it) rather than
                # failing the user's events or being extended as if it were whole.
                item, ts = [e.item_id for e in new], [e.ts for e in new]
                values = {}
                if kept is not None:
                    values["recent"] = history.append(kept, item, [e.type for e in new], ts, history_limit) \
                        if history.covers(kept, history_limit) else None
                if kept_seen is not None:
                    values["seen"] = seen_items.merge(kept_seen, item, ts, cap) \
                        if seen_items.covers(kept_seen, cap) else None
                if values:
                    conn.execute(update(User).where(User.id == uid).values(**values))
                versions[uid] = int(v)
                seen += [(uid, e.item_id, int(v)) for e in new]
    except database_errors() as exc:
        raise as_prefeed_error(exc) from exc
    return Recorded(accepted=len(stored), duplicates=len(events) - len(stored), versions=versions, seen=seen,
                    items_created=created)

