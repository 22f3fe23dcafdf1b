"""Each user's newest events, kept packed on the user row (``users.recent``) next to ``history_version``.

The events table stays the source of truth; this is a copy of its newest ``HISTORY_LIMIT`` events per user,
rewritten in the same transaction that stores new events and bumps the version, so the value a batch reads always
matches the version it reads with it. A precompute batch then reads one short binary value per user instead of
~100 rows, which turns Python tuple building (the dominant cost of the history stage) into one ``frombuffer``.

Value layout (little-endian)::

    limit u4                          how many events the writer kept at most
    records, 13 bytes each            item_id i4, type u1, ts f8 — oldest first, in (ts, id) order

A value with fewer records than its ``limit`` is the user's complete history. ``NULL`` means "not kept" (rows
written before this column existed): readers fall back to the events table.
"""

from __future__ import annotations

import struct

import numpy as np

from . import defaults

RECORD = np.dtype([("item", "<i4"), ("type", "u1"), ("ts", "<f8")])     # packed: 13 bytes
HEADER = struct.Struct("<I")


def empty(limit: int = defaults.HISTORY_LIMIT) -> bytes:
    """The value of a user with no events yet."""
    return HEADER.pack(limit)


def records(item, type_, ts) -> np.ndarray:
    """Events as a ``RECORD`` array (columns of equal length)."""
    rec = np.empty(len(item), dtype=RECORD)
    rec["item"], rec["type"], rec["ts"] = item, type_, ts
    return rec


def pack(item: np.ndarray, type_: np.ndarray, ts: np.ndarray, limit: int = defaults.HISTORY_LIMIT) -> bytes:
    """The value for events already in (ts, id) order; keeps the newest ``limit``."""
    newest = slice(max(len(item) - limit, 0), None)
    return HEADER.pack(limit) + records(item[newest], type_[newest], ts[newest]).tobytes()


def readable(value: bytes) -> bool:
    """Whether ``value`` has this layout's shape (a header and whole records)."""
    return len(value) >= HEADER.size and (len(value) - HEADER.size) % RECORD.itemsize == 0


def unpack(value: bytes) -> tuple[np.ndarray, int]:
    """Records (oldest first) and the writer's limit. Raises ``ValueError`` on a malformed value."""
    if not readable(value):
        raise ValueError(f"recent-history value of {len(value)} bytes is malformed")
    (limit,) = HEADER.unpack_from(value)
    return np.frombuffer(value, dtype=RECORD, offset=HEADER.size), limit


def covers(value: bytes, limit: int) -> bool:
    """Whether ``value`` holds a user's newest ``limit`` events (complete, or kept with a limit at least as big);
    False for a malformed value, which readers then replace with the events table."""
    if not readable(value):
        return False
    n = (len(value) - HEADER.size) // RECORD.itemsize
    (kept,) = HEADER.unpack_from(value)
    return n < kept or limit <= kept


def append(value: bytes, item: list[int], type_: list[int], ts: list[float],
           limit: int = defaults.HISTORY_LIMIT) -> bytes:
    """``value`` with new events (in id order, all newer ids than any stored) merged in (ts, id) order.

    A stable sort on ts keeps stored events before new ones with the same ts, which is (ts, id) order because new
    events have larger ids. An event older than the newest ``limit`` falls off the front, as it would in SQL.
    """
    old, _ = unpack(value)
    both = np.concatenate([old, records(item, type_, ts)])
    both = both[np.argsort(both["ts"], kind="stable")]
    return pack(both["item"], both["type"], both["ts"], limit)
