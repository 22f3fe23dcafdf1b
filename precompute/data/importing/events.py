"""Storing one chunk of imported events, idempotently: what is already stored is not stored again.

**When two events are the same.** An event with an ``event_id`` is the stored event of that user with that
``client_event_id`` (unique per user; the API uses the same key), whatever else it says. An event without one is the same as a
stored event, or an earlier row of the file, with equal user, item, type and ts (``value`` is not part of it: it
is what the event says, not which event it is). So a file imported twice, or an import cut short and run again,
stores every event once. The price: two genuinely distinct events without ids that agree in all four fields
(two views of one item in the same instant) are stored once; a log where that matters carries event ids.

**How.** Inside the chunk, numpy keeps each key's first row. Against the table, one ``INSERT … SELECT`` from the
staging table (``stage.py``) skips rows whose key is stored: ``ON CONFLICT (user_id, client_event_id) DO NOTHING``
for event ids, and for the others a ``NOT EXISTS`` probe of ``ix_events_user_ts (user_id, ts, id, item_id, type)``
(the covering index history reads use: the probe seeks to (user, ts) and reads item and type from the index
entry, never the table), so no new index on a table of tens of millions of rows is needed. The ``OR`` between the
two keeps PostgreSQL from turning the probe into a hash anti-join over the whole events table.
``RETURNING`` hands back exactly the events stored, which ``kept.py`` turns into version bumps and kept values.

**Probed only where needed.** A user the users table does not have when the chunk's transaction starts has no
stored events (events reference users). So the rows of such users, unless one of them carries an event id, are
inserted directly (``insert_fresh``: multi-row ``VALUES`` on SQLite, ``unnest`` of arrays on PostgreSQL), without
the staging table or the probe. The rest, rows of users that already exist (whoever created them: earlier runs,
the API, or an earlier chunk of this same import) and rows with event ids, take the staging table and the probe:
a file repeating rows chunks apart still stores them once, without remembering the file's keys. A MovieLens log
lists each user's rows together, so in a fresh import only the user a chunk boundary splits is probed. Each
user's rows take one path and keep the file's order; ids across users may not. On SQLite the chunk holds the
write lock from its first read, so no event of a new user can appear meanwhile; on PostgreSQL an event the API
records, in that instant, for a user the import is creating, with the same item, type and ts as a row of the
file, would be stored twice.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from sqlalchemy import Connection

from .. import history, items, seen
from ..parsing import EventChunk, Report
from ..rows import table
from . import stage
from .stage import STAGE

STORED = dict(id="<i8", user="<i8", item="<i8", type="<i8", ts="<f8")

_FRESH = "user_id, item_id, type, ts, value"
_RETURNING = "RETURNING id, user_id, item_id, type, ts"
#: Rows per multi-row ``VALUES`` insert on SQLite: 5 parameters each, under its limit of 32,766 per statement;
#: one statement text for every full batch, so SQLite's statement cache compiles it once.
VALUES_ROWS = 6_000

_INSERT = f"""
INSERT INTO events (user_id, item_id, type, ts, value, client_event_id)
SELECT s.user_id, s.item_id, s.type, s.ts, s.value, s.client_event_id FROM {STAGE} s
WHERE s.client_event_id IS NOT NULL OR NOT EXISTS (
    SELECT 1 FROM events e
    WHERE e.user_id = s.user_id AND e.ts = s.ts AND e.item_id = s.item_id AND e.type = s.type)
ORDER BY s.seq
ON CONFLICT (user_id, client_event_id) WHERE client_event_id IS NOT NULL DO NOTHING
{_RETURNING}
"""


@dataclasses.dataclass
class Written:
    stored: np.ndarray          # structured (``STORED``): the events this chunk stored
    items_created: int
    users_created: int
    refused: int                # rows naming an unknown item when items are not created


def first_of_each(chunk: EventChunk) -> np.ndarray:
    """Bool mask of the rows kept: every row with an event id (the unique index and ``ON CONFLICT`` keep the
    first of each user's id, rows being inserted in file order), and the first of each (user, item, type, ts) among the
    rows without one."""
    keep = np.ones(len(chunk), dtype=bool)
    rest = np.arange(len(chunk)) if chunk.event_id is None else \
        np.flatnonzero(np.array([e is None for e in chunk.event_id.tolist()], dtype=bool))
    if len(rest):
        u, i, t, ts = chunk.user_id[rest], chunk.item_id[rest], chunk.type[rest], chunk.ts[rest]
        order = np.lexsort((np.arange(len(rest)), t, i, ts, u))       # equal keys adjacent, file order inside
        u, i, t, ts = u[order], i[order], t[order], ts[order]
        first = np.r_[True, (u[1:] != u[:-1]) | (ts[1:] != ts[:-1]) | (i[1:] != i[:-1]) | (t[1:] != t[:-1])]
        keep[rest[order[~first]]] = False
    return keep


def unknown_items(conn: Connection, item_ids: np.ndarray) -> np.ndarray:
    """The distinct ids of ``item_ids`` the catalogue does not have (ascending)."""
    distinct = np.unique(item_ids)
    return distinct[~np.isin(distinct, items.present(conn, "items", distinct))]


class KnownItems:
    """The item ids one import found in the catalogue or created, so later chunks look up only the others (a
    chunk of MovieLens ratings names ~25 k distinct items, mostly the same ones). Safe because items are never
    deleted (an item leaves by being deactivated), so an item that existed at one chunk exists at every later
    one. At most ``CAP`` ids are remembered (8 bytes each)."""

    CAP = 4_000_000

    def __init__(self) -> None:
        self.ids = np.empty(0, dtype=np.int64)          # ascending

    def unknown(self, conn: Connection, item_ids: np.ndarray) -> np.ndarray:
        """The distinct ids of ``item_ids`` the catalogue does not have (ascending); remembers the others."""
        distinct = np.unique(item_ids)
        ask = distinct[~np.isin(distinct, self.ids)]
        missing = ask[~np.isin(ask, items.present(conn, "items", ask))]
        self.remember(ask[~np.isin(ask, missing)])
        return missing

    def remember(self, ids: np.ndarray) -> None:
        if len(self.ids) < self.CAP:
            self.ids = np.union1d(self.ids, ids)


def refuse_unknown(chunk: EventChunk, missing: np.ndarray, report: Report, path: str) -> np.ndarray:
    """Refuse (file, line) the rows naming an item of ``missing``; returns the mask of the others."""
    bad = np.isin(chunk.item_id, missing)
    for line, item in zip(chunk.lines[bad].tolist(), chunk.item_id[bad].tolist()):
        report.refuse(path, line, f"unknown item id {item} (PREFEED_EVENTS_CREATE_ITEMS=false)")
    return ~bad


def write(conn: Connection, chunk: EventChunk, report: Report, path: str, create_items: bool,
          history_limit: int, seen_cap: int, known_items: KnownItems) -> Written:
    """Store the new events of ``chunk`` in the caller's transaction, creating unknown users (and items, when
    ``create_items``; else their rows are refused into ``report``)."""
    items_created = refused = 0
    chunk = chunk.take(first_of_each(chunk))
    missing = known_items.unknown(conn, chunk.item_id)
    if len(missing):
        if create_items:
            items_created = items.ensure(conn, missing.tolist(), create=True)
            known_items.remember(missing)
        else:
            keep = refuse_unknown(chunk, missing, report, path)
            refused = int((~keep).sum())
            chunk = chunk.take(keep)
    users = np.unique(chunk.user_id)
    known = items.present(conn, "users", users)
    users_created = create_users(conn, chunk, users[~np.isin(users, known)], history_limit, seen_cap)
    if chunk.event_id is not None:      # a user with any event id takes the staging path with all their rows
        known = np.union1d(known, chunk.user_id[np.array([e is not None for e in chunk.event_id.tolist()],
                                                         dtype=bool)])
    fresh = ~np.isin(chunk.user_id, known)
    rows = insert_fresh(conn, chunk.take(fresh))
    rest = chunk.take(~fresh)
    if len(rest):
        stage.load(conn, rest.user_id, rest.item_id, rest.type, rest.ts, rest.value, rest.event_id)
        cur = conn.connection.driver_connection.cursor()    # the driver's tuples: no result wrapping per row
        cur.execute(_INSERT)
        rows += cur.fetchall()
        cur.close()
    return Written(table(rows, **STORED), items_created, users_created, refused)


def create_users(conn: Connection, chunk: EventChunk, new: np.ndarray, history_limit: int, seen_cap: int) -> int:
    """Create the users ``new`` (distinct, ascending), each with its first event time in the chunk as
    ``created_at`` and empty kept values; returns how many this call created."""
    if not len(new):
        return 0
    order = np.argsort(chunk.user_id, kind="stable")
    ids, starts = np.unique(chunk.user_id[order], return_index=True)
    first = np.minimum.reduceat(chunk.ts[order], starts)[np.isin(ids, new)]
    recent, seen_value = history.empty(history_limit), seen.empty(seen_cap)
    cur = conn.connection.driver_connection.cursor()
    if stage.postgres(conn):
        cur.execute("INSERT INTO users (id, created_at, history_version, recent, seen) "
                    "SELECT u, t, 0, %s, %s FROM unnest(%s::bigint[], %s::float8[]) AS n(u, t) "
                    "ON CONFLICT (id) DO NOTHING", (recent, seen_value, new.tolist(), first.tolist()))
    else:
        cur.executemany("INSERT INTO users (id, created_at, history_version, recent, seen) VALUES (?, ?, 0, ?, ?) "
                        "ON CONFLICT (id) DO NOTHING",
                        [(u, t, recent, seen_value) for u, t in zip(new.tolist(), first.tolist())])
    made = max(cur.rowcount, 0)
    cur.close()
    return made


def insert_fresh(conn: Connection, chunk: EventChunk) -> list[tuple]:
    """Insert the events of ``chunk`` (no event ids, users new in this transaction: nothing to probe) as they
    are; returns the ``STORED`` tuples of the stored rows."""
    if not len(chunk):
        return []
    columns = (chunk.user_id.tolist(), chunk.item_id.tolist(), chunk.type.tolist(), chunk.ts.tolist(),
               stage.nullable(chunk.value))
    cur = conn.connection.driver_connection.cursor()
    if stage.postgres(conn):
        cur.execute(f"INSERT INTO events ({_FRESH}) SELECT * FROM unnest(%s::bigint[], %s::bigint[], "
                    f"%s::smallint[], %s::float8[], %s::float8[]) {_RETURNING}", columns)
        rows = cur.fetchall()
    else:
        flat = list(zip(*columns))
        rows = []
        for start in range(0, len(flat), VALUES_ROWS):
            part = flat[start:start + VALUES_ROWS]
            cur.execute(f"INSERT INTO events ({_FRESH}) VALUES {', '.join(['(?, ?, ?, ?, ?)'] * len(part))} "
                        f"{_RETURNING}", [x for row in part for x in row])
            rows += cur.fetchall()
    cur.close()
    return rows
