"""The import's database plumbing: one connection for a whole file, one transaction per chunk, and a temporary
staging table a chunk is loaded into at driver speed (``executemany`` on SQLite, ``COPY`` on PostgreSQL, as
``bulk.py`` loads a generated marketplace) so that deduplication, user creation and the insert itself run as
set-based SQL over the chunk instead of one statement per row.

On PostgreSQL nothing outlives a transaction: the staging table is created in the chunk's transaction and
dropped at its commit, and ``synchronous_commit`` is set for that transaction only, so the import runs unchanged
behind PgBouncer in transaction mode, where consecutive transactions of one connection may reach different server
connections.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
from sqlalchemy import Connection

STAGE = "import_stage"
COLUMNS = ("seq", "user_id", "item_id", "type", "ts", "value", "client_event_id")
_SQL_TYPES = {"sqlite": ("INTEGER", "INTEGER", "INTEGER", "INTEGER", "REAL", "REAL", "TEXT"),
              "postgresql": ("BIGINT", "BIGINT", "BIGINT", "SMALLINT", "DOUBLE PRECISION", "DOUBLE PRECISION",
                             "TEXT")}


def postgres(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql"


def create_stage(conn: Connection) -> None:
    """SQLite: the connection's staging table (temporary: private to it, gone with it), emptied by each ``load``.
    PostgreSQL: nothing; ``load`` creates the table in the chunk's transaction."""
    if not postgres(conn):
        conn.exec_driver_sql(_create("sqlite"))
        conn.commit()


def _create(dialect: str) -> str:
    cols = ", ".join(f"{name} {kind}" for name, kind in zip(COLUMNS, _SQL_TYPES[dialect]))
    tail = " ON COMMIT DROP" if dialect == "postgresql" else ""
    return f"CREATE TEMPORARY TABLE IF NOT EXISTS {STAGE} ({cols}){tail}"


@contextlib.contextmanager
def transaction(conn: Connection) -> Iterator[None]:
    """One chunk's transaction: everything of the chunk commits together or not at all.

    On SQLite it starts with ``BEGIN IMMEDIATE``: the write lock is taken before the chunk's first read, so what
    the chunk reads (which events and users exist) cannot change before it writes, and the API's writers wait
    (their 30 s busy timeout) for one chunk, a fraction of a second, never for the whole file. A deferred
    transaction would instead fail with "database is locked" when a writer committed between its read and its
    first write. PostgreSQL locks the users it updates (``FOR NO KEY UPDATE``, in id order as ``recording.py`` does),
    and commits without waiting for the WAL flush (``synchronous_commit = off``, this transaction only): a server
    crash may lose the last chunks committed before it (never corrupts anything, and a chunk is lost whole,
    events with their version bumps), which running the import again stores, as after any interrupted import.
    """
    if postgres(conn):
        conn.exec_driver_sql("SET LOCAL synchronous_commit = off")
    else:
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.rollback()
        raise
    conn.commit()


def load(conn: Connection, user_id: np.ndarray, item_id: np.ndarray, type_: np.ndarray, ts: np.ndarray,
         value: np.ndarray, event_id: np.ndarray | None) -> None:
    """Replace the staging table's rows with one chunk's events (``seq`` = position in the chunk; NaN values and
    absent event ids become NULL)."""
    n = len(user_id)
    values = nullable(value)
    ids = [None] * n if event_id is None else event_id.tolist()
    rows = list(zip(range(n), user_id.tolist(), item_id.tolist(), type_.tolist(), ts.tolist(), values, ids))
    cur = conn.connection.driver_connection.cursor()
    cols = ", ".join(COLUMNS)
    if postgres(conn):
        cur.execute(_create("postgresql"))      # IF NOT EXISTS: a second load in one transaction reuses it
        cur.execute(f"DELETE FROM {STAGE}")
        with cur.copy(f"COPY {STAGE} ({cols}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
    else:
        cur.execute(f"DELETE FROM {STAGE}")
        cur.executemany(f"INSERT INTO {STAGE} ({cols}) VALUES ({', '.join('?' * len(COLUMNS))})", rows)
    cur.close()


def nullable(values: np.ndarray) -> list:
    """Floats as a list for the driver, NaN as None (NULL)."""
    return np.where(np.isnan(values), None, values).tolist() if np.isnan(values).any() else values.tolist()
