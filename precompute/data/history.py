"""Users' interaction histories: the newest events kept packed on each user row, and a batch's histories read
from it in one query, as one flat set of arrays.

Kept value (``users.recent``, next to ``history_version``): the events table stays the source of truth; this is a
copy of its newest ``limit`` events per user, rewritten in the same transaction that stores new events and bumps the
version (``recording.py``), so the value a batch reads always matches the version it reads with it. A precompute
batch then reads one short binary value per user instead of ~100 rows, which turns Python tuple building (the
dominant cost of the history stage) into one ``frombuffer``. Layout (little-endian)::

    magic "H2", limit u4              the layout (2: 64-bit item ids); how many events the writer kept at most
    records, 17 bytes each            item_id i8, type u1, ts f8 — oldest first, in (ts, id) order

A value with fewer records than its ``limit`` is the user's complete history. ``NULL`` means "not kept" (rows
written before this column existed): readers fall back to the events table, as they do for a value of another
layout (``manage.py init-db`` rewrites both, ``upgrade.py``).

``Histories``: events of user ``k`` (k-th in ``user_ids``) live at ``offsets[k]:offsets[k+1]``, oldest first. The
same ``Histories`` is built from the database at precompute time and from in-memory arrays at training time, with
the same truncation to the newest ``limit`` events, so both paths feed identical inputs to the feature code. Item
ids are mapped to the rows of the caller's item table (anything with a ``rows(ids)`` method, see ``ItemRows``).
Each history also carries the items to keep out of the user's feed: every item interacted with inside the seen
window, from a second kept value (``seen.py``), not from the truncated events.
"""

from __future__ import annotations

import dataclasses
import struct
import time
from typing import Protocol

import numpy as np
from sqlalchemy import Engine, select

from ..settings import Settings
from . import clock as clocks, seen as seen_items
from .tables import User
from .rows import table

RECORD = np.dtype([("item", "<i8"), ("type", "u1"), ("ts", "<f8")])     # packed: 17 bytes
MAGIC = b"H2"
HEADER = struct.Struct("<2sI")


def empty(limit: int) -> bytes:
    """The value of a user with no events yet."""
    return HEADER.pack(MAGIC, limit)


def records(item, type_, ts) -> np.ndarray:
    """Events as a ``RECORD`` array (columns of equal length)."""
    rec = np.empty(len(item), dtype=RECORD)
    rec["item"], rec["type"], rec["ts"] = item, type_, ts
    return rec


def pack(item: np.ndarray, type_: np.ndarray, ts: np.ndarray, limit: int) -> bytes:
    """The value for events already in (ts, id) order; keeps the newest ``limit``."""
    newest = slice(max(len(item) - limit, 0), None)
    return HEADER.pack(MAGIC, limit) + records(item[newest], type_[newest], ts[newest]).tobytes()


def readable(value: bytes) -> bool:
    """Whether ``value`` has this layout's shape (a header and whole records)."""
    return len(value) >= HEADER.size and value[:2] == MAGIC and (len(value) - HEADER.size) % RECORD.itemsize == 0


def unpack(value: bytes) -> tuple[np.ndarray, int]:
    """Records (oldest first) and the writer's limit. Raises ``ValueError`` on a malformed value."""
    if not readable(value):
        raise ValueError(f"recent-history value of {len(value)} bytes is malformed")
    _, limit = HEADER.unpack_from(value)
    return np.frombuffer(value, dtype=RECORD, offset=HEADER.size), limit


def covers(value: bytes, limit: int) -> bool:
    """Whether ``value`` holds a user's newest ``limit`` events (complete, or kept with a limit at least as big);
    False for a malformed value, which readers then replace with the events table."""
    if not readable(value):
        return False
    n = (len(value) - HEADER.size) // RECORD.itemsize
    _, kept = HEADER.unpack_from(value)
    return n < kept or limit <= kept


def append(value: bytes, item: list[int], type_: list[int], ts: list[float], limit: int) -> bytes:
    """``value`` with new events (in id order, all newer ids than any stored) merged in (ts, id) order.

    A stable sort on ts keeps stored events before new ones with the same ts, which is (ts, id) order because new
    events have larger ids. An event older than the newest ``limit`` falls off the front, as it would in SQL.
    """
    old, _ = unpack(value)
    both = np.concatenate([old, records(item, type_, ts)])
    both = both[np.argsort(both["ts"], kind="stable")]
    return pack(both["item"], both["type"], both["ts"], limit)


class ItemRows(Protocol):
    """What histories need of an item table: the row of each item id (-1 for unknown ids)."""

    def rows(self, item_ids: np.ndarray) -> np.ndarray: ...


@dataclasses.dataclass
class Histories:
    user_ids: np.ndarray     # (B,) int64
    versions: np.ndarray     # (B,) history version each history was read at
    offsets: np.ndarray      # (B+1,)
    item_rows: np.ndarray    # rows in the caller's item table; -1 for items it does not know
    types: np.ndarray        # EventType values
    ts: np.ndarray           # epoch s
    clock: float             # the log's clock the batch was read at (``clock.py``): nothing newer is in it
    #: Items the user interacted with inside the seen window (``seen.py``): user k's rows are
    #: ``seen_rows[seen_offsets[k]:seen_offsets[k+1]]``, only rows the item table knows.
    seen_offsets: np.ndarray
    seen_rows: np.ndarray

    def __len__(self) -> int:
        return len(self.user_ids)

    def slice(self, a: int, b: int) -> Histories:
        """Users ``a:b`` of the batch (views, no copies)."""
        lo, hi = self.offsets[a], self.offsets[b]
        s_lo, s_hi = self.seen_offsets[a], self.seen_offsets[b]
        return Histories(self.user_ids[a:b], self.versions[a:b], self.offsets[a:b + 1] - lo,
                         self.item_rows[lo:hi], self.types[lo:hi], self.ts[lo:hi], self.clock,
                         self.seen_offsets[a:b + 1] - s_lo, self.seen_rows[s_lo:s_hi])

    def take(self, positions: np.ndarray) -> Histories:
        """Users at ``positions`` of the batch (ascending), as a batch of their own (copies)."""
        at, off, s_off = np.asarray(positions, dtype=np.int64), self.offsets, self.seen_offsets
        ev, seen = ranges(off[at], off[at + 1]), ranges(s_off[at], s_off[at + 1])
        return Histories(self.user_ids[at], self.versions[at], np.r_[0, np.cumsum(off[at + 1] - off[at])],
                         self.item_rows[ev], self.types[ev], self.ts[ev], self.clock,
                         np.r_[0, np.cumsum(s_off[at + 1] - s_off[at])], self.seen_rows[seen])

    def newest_event(self) -> np.ndarray:
        """Each user's newest event time (-inf: none): events are oldest first, so it ends each user's segment."""
        has = np.diff(self.offsets) > 0
        out = np.full(len(self), -np.inf)
        out[has] = self.ts[self.offsets[1:][has] - 1]
        return out

    def seen(self, k: int) -> np.ndarray:
        """Item rows to keep out of user ``k``'s feed."""
        return self.seen_rows[self.seen_offsets[k]:self.seen_offsets[k + 1]]

    @property
    def owner(self) -> np.ndarray:
        """Position in ``user_ids`` of every event."""
        return np.repeat(np.arange(len(self.user_ids)), np.diff(self.offsets))


def load_histories(engine: Engine, user_ids: list[int], items: ItemRows, settings: Settings) -> Histories:
    """Each user's newest ``history_limit`` events, seen items and history version, in one query for the batch.

    All three come from the user row (``users.recent`` above, ``users.seen`` in ``seen.py``), written in the
    transaction that bumped the version, so a feed is stamped with exactly the version of the history it was
    ranked from. Users whose row has no kept value fall back to the events table. The batch is read at the log's
    clock (``clock.py``), and seen items are those inside ``seen_window`` before it. Replaying an earlier instant
    (``PREFEED_AS_OF``) reads everything from the events table up to it: the kept values are of the present.
    """
    limit, cap = settings.history_limit, settings.seen_max_items
    uids = np.asarray(sorted(set(int(u) for u in user_ids)), dtype=np.int64)
    parts: dict[int, np.ndarray] = {}
    seen: dict[int, np.ndarray] = {}
    versions: dict[int, int] = {}
    now = time.time()
    if len(uids):
        with engine.connect() as conn:
            rows = conn.execute(select(User.id, User.history_version, User.recent, User.seen)
                                .where(User.id.in_(uids.tolist()))).all()
            now = clocks.log_clock(conn, settings)
            since = now - settings.seen_window
            replay = bool(settings.as_of)
            rest, unseen = [], []
            for uid, version, value, seen_value in rows:
                versions[uid] = version
                if replay:
                    value = seen_value = None
                if value is not None and covers(value, limit):
                    rec, _ = unpack(value)
                    parts[uid] = rec[max(len(rec) - limit, 0):]
                else:
                    rest.append(uid)
                if seen_value is not None and seen_items.covers(seen_value, cap):
                    rec = seen_items.unpack(seen_value)
                    rec = rec[max(len(rec) - cap, 0):]
                    seen[uid] = rec[(rec["ts"] >= since) & (rec["ts"] <= now)]
                else:
                    unseen.append(uid)
            if rest:
                parts.update(from_events(conn, rest, limit, now if replay else None))
            if unseen:
                seen.update(seen_items.from_events(conn, unseen, since, cap, now))
    rec, owner = _flatten(uids, parts, RECORD)
    srec, sowner = _flatten(uids, seen, seen_items.RECORD)
    return _assemble(uids, np.array([versions.get(int(u), 0) for u in uids], dtype=np.int64),
                     owner, rec["item"].astype(np.int64), rec["type"].astype(np.int64), rec["ts"], now, items,
                     sowner, srec["item"])


def _flatten(uids: np.ndarray, parts: dict[int, np.ndarray], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Per-user record arrays concatenated in ``uids`` order, and each record's user id."""
    empty = np.empty(0, dtype=dtype)
    per_user = [parts.get(int(u), empty) for u in uids]
    rec = np.concatenate(per_user) if per_user else empty
    return rec, np.repeat(uids, [len(x) for x in per_user])


def from_events(conn, user_ids: list[int], limit: int, until: float | None = None) -> dict[int, np.ndarray]:
    """Newest ``limit`` events of each user (at or before ``until`` if given) from the events table, as ``RECORD``
    arrays oldest first.

    One statement: a UNION ALL of one index range scan per user (newest first, LIMIT), so a long history costs no
    more than ``limit`` rows. Literal integers (ids are ints we produced, limit an int): SQLite plans a bound LIMIT
    per subquery noticeably slower, and the text is valid for SQLite and PostgreSQL alike.
    """
    upto = "" if until is None else f"AND ts <= {float(until)!r} "
    rows = []
    for start in range(0, len(user_ids), 500):          # SQLite allows 500 terms in one compound SELECT
        sql = " UNION ALL ".join(
            f"SELECT * FROM (SELECT user_id, item_id, type, ts FROM events WHERE user_id = {int(u)} {upto}"
            f"ORDER BY ts DESC, id DESC LIMIT {int(limit)}) AS h{k}"
            for k, u in enumerate(user_ids[start:start + 500])
        )
        rows += conn.exec_driver_sql(sql).cursor.fetchall()
    ev = table(rows, user="<i8", item="<i8", type="<i8", ts="<f8")
    # Rows arrive newest first per user: reverse everything, then a stable sort by user gives each user's events
    # oldest first, ties in (ts, id) order, as the event log has them.
    ev = ev[::-1]
    ev = ev[np.argsort(ev["user"], kind="stable")]
    rec = records(ev["item"], ev["type"], ev["ts"])
    user = ev["user"]
    bounds = np.searchsorted(user, user_ids, side="left"), np.searchsorted(user, user_ids, side="right")
    return {uid: rec[a:b] for uid, a, b in zip(user_ids, *bounds)}


def histories_from_arrays(user_ids: np.ndarray, ev_user: np.ndarray, ev_item: np.ndarray, ev_type: np.ndarray,
                          ev_ts: np.ndarray, items: ItemRows, settings: Settings, clock: float,
                          versions: np.ndarray | None = None) -> Histories:
    """Same as ``load_histories`` from arrays already in memory, ordered by (ts, id) as the event log is, read at
    ``clock`` (the arrays must hold no event after it)."""
    uids, u, it, ty, ts = _newest(user_ids, ev_user, ev_item, ev_type, ev_ts, settings.history_limit)
    if versions is None:
        versions = np.zeros(len(uids), dtype=np.int64)
    recent = np.isin(ev_user, uids) & (ev_ts >= clock - settings.seen_window)
    keep = np.flatnonzero(recent)[seen_items.latest_per_item(ev_user[recent], ev_item[recent], ev_ts[recent],
                                                             settings.seen_max_items)]
    return _assemble(uids, versions, u, it, ty, ts, clock, items, ev_user[keep], ev_item[keep])


def recent_values_from_arrays(user_ids: np.ndarray, ev_user: np.ndarray, ev_item: np.ndarray, ev_type: np.ndarray,
                              ev_ts: np.ndarray, limit: int) -> dict[int, bytes]:
    """``users.recent`` of each of ``user_ids`` from an in-memory log in (ts, id) order (bulk loading)."""
    uids, u, it, ty, ts = _newest(user_ids, ev_user, ev_item, ev_type, ev_ts, limit)
    lo, hi = np.searchsorted(u, uids, side="left"), np.searchsorted(u, uids, side="right")
    return {uid: pack(it[a:b], ty[a:b], ts[a:b], limit) for uid, a, b in zip(uids.tolist(), lo, hi)}


def _newest(user_ids, ev_user, ev_item, ev_type, ev_ts, limit: int) -> tuple[np.ndarray, ...]:
    """Distinct ``user_ids`` ascending, and their newest ``limit`` events each, grouped by user, oldest first."""
    uids = np.unique(np.asarray(user_ids, dtype=np.int64))
    keep = np.isin(ev_user, uids)
    u, it, ty, ts = ev_user[keep], ev_item[keep], ev_type[keep], ev_ts[keep]
    order = np.argsort(u, kind="stable")           # stable: keeps (ts, id) order inside each user
    u, it, ty, ts = u[order], it[order], ty[order], ts[order]
    ends = np.searchsorted(u, u, side="right")
    newest = (ends - np.arange(len(u))) <= limit
    return uids, u[newest], it[newest], ty[newest], ts[newest]


def _assemble(uids, versions, ev_user, ev_item, ev_type, ev_ts, clock: float, items: ItemRows, seen_user,
              seen_item) -> Histories:
    seen_rows = items.rows(np.asarray(seen_item, dtype=np.int64))
    known = seen_rows >= 0
    return Histories(
        user_ids=uids,
        versions=versions,
        offsets=_offsets(uids, ev_user),
        item_rows=items.rows(ev_item),
        types=ev_type.astype(np.int64),
        ts=ev_ts.astype(np.float64),
        clock=float(clock),
        seen_offsets=_offsets(uids, np.asarray(seen_user)[known]),
        seen_rows=seen_rows[known],
    )


def _offsets(uids: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """Segment bounds of ``owner`` (user ids grouped in ``uids`` order)."""
    counts = np.bincount(np.searchsorted(uids, owner), minlength=len(uids)) if len(owner) else \
        np.zeros(len(uids), dtype=np.int64)
    return np.r_[0, np.cumsum(counts)].astype(np.int64)


def ranges(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(start[k], end[k])`` over k."""
    count = np.maximum(end - start, 0)
    return np.repeat(start - np.r_[0, np.cumsum(count)[:-1]], count) + np.arange(int(count.sum()))
