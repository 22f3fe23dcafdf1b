"""The whole event log as numpy arrays, for training: read in chunks straight into preallocated columns.

A 25 M-event log (MovieLens-25M's size) fetched as Python tuples would take ~5 GB; here no Python object outlives
its chunk, so peak memory is the final columns (26 bytes an event, 34 with values) plus one chunk. The rows are
counted first and the columns allocated once; rows stored between the count and the read (a live log) grow them.

PostgreSQL streams ``COPY (SELECT …) TO STDOUT (FORMAT BINARY)``: every row then has the same byte layout (no
NULLs: a missing value is sent as NaN) and a block of rows is one ``frombuffer``. Other databases go through the
driver's ``fetchmany``, one chunk of tuples at a time.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from sqlalchemy import Engine

CHUNK_ROWS = 100_000
#: A binary COPY row: field count, then (length, big-endian value) per field.
_COPY_ROW = np.dtype([("n", ">i2"), ("l1", ">i4"), ("user", ">i8"), ("l2", ">i4"), ("item", ">i8"),
                      ("l3", ">i4"), ("type", ">i2"), ("l4", ">i4"), ("ts", ">f8"), ("l5", ">i4"), ("value", ">f8")])
_COPY_HEADER = 19      # signature (11), flags (4), header extension length (4); followed by no extension
_COPY_TRAILER = b"\xff\xff"


@dataclasses.dataclass
class EventLog:
    """Events in (ts, id) order, one array per column."""

    user: np.ndarray            # int64
    item: np.ndarray            # int64
    type: np.ndarray            # int16: code, position in ``Settings.event_types`` from 1
    ts: np.ndarray              # float64, epoch s
    value: np.ndarray | None    # float64, NaN = none; None unless asked for

    def __len__(self) -> int:
        return len(self.user)

    def head(self, n: int) -> EventLog:
        """The log's first ``n`` events (views, not copies): the log up to a cut is a prefix."""
        return EventLog(self.user[:n], self.item[:n], self.type[:n], self.ts[:n],
                        None if self.value is None else self.value[:n])

    def take(self, at: np.ndarray) -> EventLog:
        """The events at positions ``at`` (an index array or mask), in that order."""
        return EventLog(self.user[at], self.item[at], self.type[at], self.ts[at],
                        None if self.value is None else self.value[at])

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.user, self.item, self.type, self.ts, self.value) if a is not None)


class _Columns:
    """Preallocated columns filled chunk by chunk; grown by half when more rows come than were counted."""

    def __init__(self, capacity: int, values: bool) -> None:
        self.dtypes = {"user": np.int64, "item": np.int64, "type": np.int16, "ts": np.float64}
        if values:
            self.dtypes["value"] = np.float64
        self.arrays = {name: np.empty(capacity, dtype=dt) for name, dt in self.dtypes.items()}
        self.n = 0

    def add(self, chunk) -> None:
        """Append ``chunk`` (anything indexable by column name, equal lengths)."""
        k = len(chunk["user"])
        if self.n + k > len(self.arrays["user"]):
            size = max(self.n + k, len(self.arrays["user"]) * 3 // 2 + CHUNK_ROWS)
            for name, a in self.arrays.items():
                grown = np.empty(size, dtype=a.dtype)
                grown[:self.n] = a[:self.n]
                self.arrays[name] = grown
        for name, a in self.arrays.items():
            a[self.n:self.n + k] = chunk[name]
        self.n += k

    def log(self) -> EventLog:
        cols = {name: a[:self.n] if self.n == len(a) else a[:self.n].copy() for name, a in self.arrays.items()}
        return EventLog(cols["user"], cols["item"], cols["type"], cols["ts"], cols.get("value"))


def load_events(engine: Engine, until: float = float("inf"), *, values: bool = False,
                chunk_rows: int = CHUNK_ROWS) -> EventLog:
    """Events with ``ts <= until`` in (ts, id) order; ``values`` also reads each event's value (NaN = none)."""
    bound = "" if until == float("inf") else f" WHERE ts <= {float(until)!r}"
    postgres = engine.dialect.name == "postgresql"
    # PostgreSQL sends a missing value as NaN, so that every binary COPY row has the same layout.
    nan = "'NaN'::float8" if postgres else "NULL"
    value = (f"COALESCE(value, {nan})" if postgres else "value") if values else nan
    sql = f"SELECT user_id, item_id, type, ts, {value} FROM events{bound} ORDER BY ts, id"
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute(f"SELECT count(*) FROM events{bound}")
        columns = _Columns(int(cur.fetchone()[0]), values)
        (_copy_binary if postgres else _fetch)(cur, sql, columns, chunk_rows)
        cur.close()
    finally:
        raw.close()
    return columns.log()


def _fetch(cur, sql: str, columns: _Columns, chunk_rows: int) -> None:
    row = np.dtype([("user", "<i8"), ("item", "<i8"), ("type", "<i2"), ("ts", "<f8"), ("value", "<f8")])
    cur.execute(sql)
    while rows := cur.fetchmany(chunk_rows):
        columns.add(np.array(rows, dtype=row))       # a NULL value becomes NaN


def _copy_binary(cur, sql: str, columns: _Columns, chunk_rows: int) -> None:
    """Stream a binary COPY of ``sql``; blocks of whole rows are parsed with one ``frombuffer`` each."""
    size = _COPY_ROW.itemsize
    pending = bytearray()
    header = True
    with cur.copy(f"COPY ({sql}) TO STDOUT (FORMAT BINARY)") as copy:
        for block in copy:
            pending += block
            if header:
                if len(pending) < _COPY_HEADER:
                    continue
                del pending[:_COPY_HEADER]
                header = False
            whole = len(pending) // size * size
            if whole >= chunk_rows * size:
                columns.add(np.frombuffer(bytes(pending[:whole]), dtype=_COPY_ROW))
                del pending[:whole]
    if pending[-2:] == _COPY_TRAILER:
        del pending[-2:]
    if len(pending) % size:
        raise ValueError(f"COPY stream ended with {len(pending) % size} stray bytes")
    if pending:
        columns.add(np.frombuffer(bytes(pending), dtype=_COPY_ROW))
