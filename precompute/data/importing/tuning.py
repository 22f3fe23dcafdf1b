"""What makes a large event import fast: the import's own connection tuned for bulk writing, and the events
table's secondary indexes dropped during a bulk load and built once at its end.

**Deferred indexes.** Every stored event is an entry in each index of ``events``. ``ix_events_user_ts`` grows at
its end when the file lists each user's rows together (users created in order), but ``ix_events_item_type`` and
``ix_events_ts`` take each row at a random place: tens of millions of random B-tree inserts, which slow down
once the indexes outgrow the page cache. ``CREATE INDEX`` instead sorts the keys once and writes the tree
sequentially, several times cheaper. So when the events table is small relative to the file (``defer``), the
import drops those two (``DEFERRED``) before its first chunk and builds them after its last one; it keeps
``ix_events_user_ts`` (its duplicate probe and the history reads use it) and ``uq_events_user_event_id``
(partial: events with an ``event_id`` only).

Meanwhile: history reads, recording and feeds are unaffected; the log clock (``clock.newest_event``,
``MAX(ts)``) and the per-item popularity counts (``item_table``) scan the events table instead of an index
(on SQLite ~1 s per 10 M events), so a training or precompute run during a bulk load is slower, never wrong.
A crash leaves the indexes missing, not the database broken: ``init_db`` creates missing indexes, and every
import command and ``manage.py init-db`` call it first, so the next one rebuilds them.

**The import's connection** (SQLite): foreign key checks off, because each chunk creates the users and items
its events name in the same write-locked transaction before inserting them (``events.write``), so every
reference holds by construction and the two index lookups per row would only confirm it (a final
``PRAGMA foreign_key_check(events)`` would scan the whole table, two lookups per row again: not done); a larger
page cache (``CACHE_KIB``) for the inserts and for ``CREATE INDEX``'s sort, which may use helper threads
(``SORT_THREADS``); and no memory-mapped I/O, which
helps the API's reads but would add the mapped part of a multi-GB file to the import's resident memory. All
per connection: the API's and the workers' connections keep theirs, and all are restored before the import's
connection goes back to the pool.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from sqlalchemy import Connection

from ..tables import Event
from .stage import postgres

DEFERRED = ("ix_events_item_type", "ix_events_ts")
#: A lower bound on a row's size in an event file (a MovieLens ``ratings.csv`` row is ~27 bytes, JSON lines
#: more): the file holds at least ``size / ROW_BYTES`` rows.
ROW_BYTES = 64
#: The import connection's SQLite page cache, KiB (the engine's default: 64 MiB): room for the growing end of
#: ``ix_events_user_ts`` and for ``CREATE INDEX``'s sort, within a 1 GiB RSS budget for the whole import.
CACHE_KIB = 128 * 1024
#: Helper threads SQLite's sorter may use for ``CREATE INDEX``: ~30 % off the build (25 M rows: 23-26 s for
#: ``ix_events_ts`` with none, 16-17 s with 2, on 2 shared cores).
SORT_THREADS = 2


def defer(conn: Connection, path: str | Path) -> bool:
    """Whether to build the deferred indexes after the import: the events table holds no more rows than the
    file at least has (``ROW_BYTES``). Then building them afresh costs at most about twice sorting the file's
    rows, well under inserting those rows into them one by one; on a table much larger than the file, the
    rebuild would sort the whole table for a few new rows. ``MAX(id)`` stands for the row count (an upper bound,
    one primary key lookup where ``COUNT(*)`` scans)."""
    stored = conn.exec_driver_sql("SELECT MAX(id) FROM events").scalar() or 0
    conn.rollback()
    return stored <= Path(path).stat().st_size // ROW_BYTES


def drop_deferred(conn: Connection) -> None:
    """Drop the ``DEFERRED`` indexes (committed: a crash after this is repaired by the next ``init_db``)."""
    for name in DEFERRED:
        conn.exec_driver_sql(f"DROP INDEX IF EXISTS {name}")
    conn.commit()


def build_deferred(conn: Connection, notify: Callable[[str], None] | None = None) -> None:
    """Create the ``DEFERRED`` indexes that are missing, as declared on the model (the same definition
    ``init_db`` creates)."""
    if notify is not None:
        notify("building indexes…")
    for index in Event.__table__.indexes:
        if index.name in DEFERRED:
            index.create(conn, checkfirst=True)
    conn.commit()


@contextlib.contextmanager
def tuned(conn: Connection) -> Iterator[Connection]:
    """The import connection's settings (SQLite: foreign key checks off, ``CACHE_KIB`` of cache) for the
    block, restored after it whatever happens. ``PRAGMA foreign_keys`` has no effect inside a transaction, so
    it is set between transactions (``upgrade.split_item_columns`` does the same)."""
    if postgres(conn):
        yield conn
        return
    conn.rollback()
    cache = conn.exec_driver_sql("PRAGMA cache_size").scalar()
    mmap = conn.exec_driver_sql("PRAGMA mmap_size").scalar()
    threads = conn.exec_driver_sql("PRAGMA threads").scalar()
    conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
    conn.exec_driver_sql(f"PRAGMA cache_size=-{CACHE_KIB}")
    conn.exec_driver_sql("PRAGMA mmap_size=0")
    conn.exec_driver_sql(f"PRAGMA threads={SORT_THREADS}")
    try:
        yield conn
    finally:
        conn.rollback()
        conn.exec_driver_sql("PRAGMA foreign_keys=ON")
        conn.exec_driver_sql(f"PRAGMA cache_size={int(cache)}")
        conn.exec_driver_sql(f"PRAGMA mmap_size={int(mmap)}")
        conn.exec_driver_sql(f"PRAGMA threads={int(threads)}")
