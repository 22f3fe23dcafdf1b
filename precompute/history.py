"""Users' recent interaction histories for a batch, in one flat set of arrays.

Events of user ``k`` (k-th in ``user_ids``) live at ``offsets[k]:offsets[k+1]``, oldest first. The same
``Histories`` is built from the database at precompute time and from in-memory arrays at training time, with the
same truncation to the newest ``limit`` events, so both paths feed identical inputs to the feature code.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
from sqlalchemy import Engine, select, update

from . import defaults, recent
from .items import ItemTable
from .models import User


@dataclasses.dataclass
class Histories:
    user_ids: np.ndarray     # (B,) int64
    versions: np.ndarray     # (B,) history version each history was read at
    offsets: np.ndarray      # (B+1,)
    item_rows: np.ndarray    # rows in the ItemTable; -1 for items it does not know
    types: np.ndarray        # EventType values
    ts: np.ndarray           # epoch s

    def __len__(self) -> int:
        return len(self.user_ids)

    def slice(self, a: int, b: int) -> Histories:
        """Users ``a:b`` of the batch (views, no copies)."""
        lo, hi = self.offsets[a], self.offsets[b]
        return Histories(self.user_ids[a:b], self.versions[a:b], self.offsets[a:b + 1] - lo,
                         self.item_rows[lo:hi], self.types[lo:hi], self.ts[lo:hi])

    @property
    def owner(self) -> np.ndarray:
        """Position in ``user_ids`` of every event."""
        return np.repeat(np.arange(len(self.user_ids)), np.diff(self.offsets))


def load_histories(engine: Engine, user_ids: list[int], items: ItemTable,
                   limit: int = defaults.HISTORY_LIMIT) -> Histories:
    """Each user's newest ``limit`` events and history version, in one query for the whole batch.

    Both come from the user row (``users.recent``, see ``recent.py``), written in the transaction that bumped the
    version, so a feed is stamped with exactly the version of the history it was ranked from. Users whose row has
    no kept value fall back to the events table (``_from_events``).
    """
    uids = np.asarray(sorted(set(int(u) for u in user_ids)), dtype=np.int64)
    parts: dict[int, np.ndarray] = {}
    versions: dict[int, int] = {}
    if len(uids):
        with engine.connect() as conn:
            rows = conn.execute(select(User.id, User.history_version, User.recent)
                                .where(User.id.in_(uids.tolist()))).all()
            rest = []
            for uid, version, value in rows:
                versions[uid] = version
                if value is not None and recent.covers(value, limit):
                    rec, _ = recent.unpack(value)
                    parts[uid] = rec[max(len(rec) - limit, 0):]
                else:
                    rest.append(uid)
            if rest:
                parts.update(_from_events(conn, rest, limit))
    empty = np.empty(0, dtype=recent.RECORD)
    per_user = [parts.get(int(u), empty) for u in uids]
    rec = np.concatenate(per_user) if per_user else empty
    owner = np.repeat(uids, [len(x) for x in per_user])
    return _assemble(uids, np.array([versions.get(int(u), 0) for u in uids], dtype=np.int64),
                     owner, rec["item"].astype(np.int64), rec["type"].astype(np.int64), rec["ts"], items)


def _from_events(conn, user_ids: list[int], limit: int) -> dict[int, np.ndarray]:
    """Newest ``limit`` events of each user from the events table, as ``recent.RECORD`` arrays oldest first.

    One statement: a UNION ALL of one index range scan per user (newest first, LIMIT), so a long history costs no
    more than ``limit`` rows. Literal integers (ids are ints we produced, limit an int): SQLite plans a bound LIMIT
    per subquery noticeably slower, and the text is valid for SQLite and PostgreSQL alike.
    """
    sql = " UNION ALL ".join(
        f"SELECT * FROM (SELECT user_id, item_id, type, ts FROM events WHERE user_id = {int(u)} "
        f"ORDER BY ts DESC, id DESC LIMIT {int(limit)}) AS h{k}"
        for k, u in enumerate(user_ids)
    )
    rows = conn.exec_driver_sql(sql).cursor.fetchall()
    ev = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.float64, count=4 * len(rows)).reshape(-1, 4)
    # Rows arrive newest first per user: reverse everything, then a stable sort by user gives each user's events
    # oldest first, ties in (ts, id) order, as the event log has them.
    ev = ev[::-1]
    ev = ev[np.argsort(ev[:, 0], kind="stable")]
    rec = recent.records(ev[:, 1], ev[:, 2], ev[:, 3])
    user = ev[:, 0].astype(np.int64)
    bounds = np.searchsorted(user, user_ids, side="left"), np.searchsorted(user, user_ids, side="right")
    return {uid: rec[a:b] for uid, a, b in zip(user_ids, *bounds)}


def histories_from_arrays(user_ids: np.ndarray, ev_user: np.ndarray, ev_item: np.ndarray, ev_type: np.ndarray,
                          ev_ts: np.ndarray, items: ItemTable, limit: int = defaults.HISTORY_LIMIT,
                          versions: np.ndarray | None = None) -> Histories:
    """Same as ``load_histories`` from arrays already in memory, ordered by (ts, id) as the event log is."""
    uids, u, it, ty, ts = _newest(user_ids, ev_user, ev_item, ev_type, ev_ts, limit)
    if versions is None:
        versions = np.zeros(len(uids), dtype=np.int64)
    return _assemble(uids, versions, u, it, ty, ts, items)


def recent_values_from_arrays(user_ids: np.ndarray, ev_user: np.ndarray, ev_item: np.ndarray, ev_type: np.ndarray,
                              ev_ts: np.ndarray) -> dict[int, bytes]:
    """``users.recent`` of each of ``user_ids`` from an in-memory log in (ts, id) order (bulk loading)."""
    uids, u, it, ty, ts = _newest(user_ids, ev_user, ev_item, ev_type, ev_ts, defaults.HISTORY_LIMIT)
    lo, hi = np.searchsorted(u, uids, side="left"), np.searchsorted(u, uids, side="right")
    return {uid: recent.pack(it[a:b], ty[a:b], ts[a:b]) for uid, a, b in zip(uids.tolist(), lo, hi)}


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


def _assemble(uids, versions, ev_user, ev_item, ev_type, ev_ts, items: ItemTable) -> Histories:
    counts = np.bincount(np.searchsorted(uids, ev_user), minlength=len(uids)) if len(ev_user) else \
        np.zeros(len(uids), dtype=np.int64)
    return Histories(
        user_ids=uids,
        versions=versions,
        offsets=np.r_[0, np.cumsum(counts)].astype(np.int64),
        item_rows=items.rows(ev_item),
        types=ev_type.astype(np.int64),
        ts=ev_ts.astype(np.float64),
    )


def fill_missing(engine: Engine, batch: int = 500) -> int:
    """Write ``users.recent`` for users that have none (databases from before the column), from the events
    table; returns how many were filled.

    Each batch runs in one transaction that first takes the users' row locks (a no-op UPDATE; the write lock on
    SQLite), so an event recorded meanwhile waits and is then appended to the value, never lost from it.
    """
    filled = 0
    while True:
        with engine.begin() as conn:
            ids = conn.execute(select(User.id).where(User.recent.is_(None)).order_by(User.id)
                               .limit(batch)).scalars().all()
            if not ids:
                return filled
            conn.execute(update(User).where(User.id.in_(ids)).values(history_version=User.history_version))
            events = _from_events(conn, ids, defaults.HISTORY_LIMIT)
            for uid in ids:
                rec = events[uid]
                conn.execute(update(User).where(User.id == uid)
                             .values(recent=recent.pack(rec["item"], rec["type"], rec["ts"])))
            filled += len(ids)
