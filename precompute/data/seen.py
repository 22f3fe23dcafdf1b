"""The items each user interacted with lately, kept on the user row so a precompute batch drops every one of them
from candidates with one short value per user — however many events the user has.

The feature history (``history.py``) keeps a user's newest ``history_limit`` events: for a heavy user that is a
day or less, and items seen before it would come back into the feed. This value keeps *distinct items* instead,
each with the time of its latest interaction, up to ``Settings.seen_max_items`` of them (the most recent). Readers
exclude those inside ``Settings.seen_window`` of the log's clock (``clock.py``), so a replayed historical log
behaves as a live one. Rewritten with every history version bump (``recording.py``),
under the same row lock. Layout (little-endian)::

    cap u4                           how many distinct items the writer kept at most
    records, 16 bytes each           item_id i8, ts f8 (latest interaction) — oldest first, one per item

A value with fewer records than its cap holds every item the user ever interacted with. ``NULL`` means "not kept"
(rows written before this column existed): readers fall back to the events table (one grouped query per batch).
"""

from __future__ import annotations

import struct

import numpy as np
from sqlalchemy import func, select

from .tables import Event
from .rows import table

RECORD = np.dtype([("item", "<i8"), ("ts", "<f8")])
HEADER = struct.Struct("<I")


def empty(cap: int) -> bytes:
    """The value of a user with no events yet."""
    return HEADER.pack(cap)


def latest_per_item(owner: np.ndarray, item: np.ndarray, ts: np.ndarray, cap: int) -> np.ndarray:
    """Indices of each ``(owner, item)``'s latest interaction, at most ``cap`` per owner (the most recent),
    ordered by owner, then ts (oldest first; ties by item id)."""
    order = np.lexsort((ts, item, owner))                  # by owner, item, then ts: a pair's latest comes last
    o, it = owner[order], item[order]
    last = np.r_[(o[1:] != o[:-1]) | (it[1:] != it[:-1]), True] if len(order) else np.zeros(0, dtype=bool)
    latest = order[last]
    latest = latest[np.lexsort((item[latest], ts[latest], owner[latest]))]
    o = owner[latest]
    ends = np.searchsorted(o, o, side="right")
    return latest[ends - np.arange(len(o)) <= cap]


def pack(item: np.ndarray, ts: np.ndarray, cap: int) -> bytes:
    """The value for one user's interactions (any order, repeats allowed)."""
    item, ts = np.asarray(item, dtype=np.int64), np.asarray(ts, dtype=np.float64)
    keep = latest_per_item(np.zeros(len(item), dtype=np.int64), item, ts, cap)
    rec = np.empty(len(keep), dtype=RECORD)
    rec["item"], rec["ts"] = item[keep], ts[keep]
    return HEADER.pack(cap) + rec.tobytes()


def readable(value: bytes) -> bool:
    """Whether ``value`` has this layout's shape (a header and whole records)."""
    return len(value) >= HEADER.size and (len(value) - HEADER.size) % RECORD.itemsize == 0


def covers(value: bytes, cap: int) -> bool:
    """Whether ``value`` holds a user's newest ``cap`` distinct items (complete, or kept with a cap at least as
    big); False for a malformed value. A value kept under a smaller cap is read from the events table instead."""
    if not readable(value):
        return False
    n = (len(value) - HEADER.size) // RECORD.itemsize
    (kept,) = HEADER.unpack_from(value)
    return n < kept or cap <= kept


def unpack(value: bytes) -> np.ndarray:
    """The records, oldest first. Raises ``ValueError`` on a malformed value."""
    if not readable(value):
        raise ValueError(f"seen-items value of {len(value)} bytes is malformed")
    return np.frombuffer(value, dtype=RECORD, offset=HEADER.size)


def merge(value: bytes, item: list[int], ts: list[float], cap: int) -> bytes:
    """``value`` with new interactions folded in: an item seen again moves to its new time."""
    old = unpack(value)
    if len(item) == 1 and len(old) < cap and (not len(old) or (ts[0] > old["ts"][-1] and item[0] not in old["item"])):
        # The common case, one event on an item not kept, newer than all: it goes at the end (same bytes as below)
        rec = np.empty(1, dtype=RECORD)
        rec["item"], rec["ts"] = item[0], ts[0]
        return HEADER.pack(cap) + old.tobytes() + rec.tobytes()
    return pack(np.r_[old["item"], np.asarray(item, dtype=np.int64)], np.r_[old["ts"], np.asarray(ts, float)], cap)


def values_from_arrays(user_ids: np.ndarray, ev_user: np.ndarray, ev_item: np.ndarray, ev_ts: np.ndarray,
                       cap: int) -> dict[int, bytes]:
    """The value of each of ``user_ids`` from an in-memory log (bulk loading)."""
    uids = np.unique(np.asarray(user_ids, dtype=np.int64))
    keep = latest_per_item(ev_user, ev_item, ev_ts, cap)
    u, it, ts = ev_user[keep], ev_item[keep], ev_ts[keep]
    lo, hi = np.searchsorted(u, uids, side="left"), np.searchsorted(u, uids, side="right")
    out = {}
    for uid, a, b in zip(uids.tolist(), lo, hi):
        rec = np.empty(b - a, dtype=RECORD)
        rec["item"], rec["ts"] = it[a:b], ts[a:b]
        out[uid] = HEADER.pack(cap) + rec.tobytes()
    return out


def from_events(conn, user_ids: list[int], since: float, cap: int,
                until: float = float("inf")) -> dict[int, np.ndarray]:
    """Each user's items with their latest interaction in ``[since, until]``, from the events table: one
    grouped query over the users' index ranges (for rows without a kept value)."""
    user_ids = sorted(user_ids)
    rows = conn.execute(select(Event.user_id, Event.item_id, func.max(Event.ts))
                        .where(Event.user_id.in_(user_ids), Event.ts >= since, Event.ts <= until)
                        .group_by(Event.user_id, Event.item_id)).all()
    ev = table(rows, user="<i8", item="<i8", ts="<f8")
    owner, item, ts = ev["user"], ev["item"], ev["ts"]
    keep = latest_per_item(owner, item, ts, cap)
    owner = owner[keep]
    rec = np.empty(len(keep), dtype=RECORD)
    rec["item"], rec["ts"] = item[keep], ts[keep]
    lo, hi = np.searchsorted(owner, user_ids, side="left"), np.searchsorted(owner, user_ids, side="right")
    return {uid: rec[a:b] for uid, a, b in zip(user_ids, lo, hi)}
