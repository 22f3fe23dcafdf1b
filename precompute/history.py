"""Users' recent interaction histories for a batch, in one flat set of arrays.

Events of user ``k`` (k-th in ``user_ids``) live at ``offsets[k]:offsets[k+1]``, oldest first. The same
``Histories`` is built from SQL at precompute time and from in-memory arrays at training time, with the same
truncation to the newest ``limit`` events, so both paths feed identical inputs to the feature code.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
from sqlalchemy import Engine, select

from . import defaults
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
    """Two queries for the whole batch: versions first, then each user's newest ``limit`` events.

    Reading the version before the events means a feed may include events newer than its stamp, never the
    reverse: a later recompute with the higher version then replaces it. The events query is a UNION ALL of one
    index range scan per user (newest first, LIMIT), so a long history costs no more than ``limit`` rows.
    Rows are fetched from the DBAPI cursor as plain tuples: building ORM rows would cost more than the query.
    """
    uids = np.asarray(sorted(set(int(u) for u in user_ids)), dtype=np.int64)
    if len(uids) == 0:
        return _assemble(uids, uids, uids, uids, uids, np.empty(0), items)
    # One statement, literal integers (ids are ints we produced, limit an int): SQLite plans a bound LIMIT per
    # subquery noticeably slower, and the text is valid for SQLite and PostgreSQL alike.
    sql = " UNION ALL ".join(
        f"SELECT * FROM (SELECT user_id, item_id, type, ts FROM events WHERE user_id = {int(u)} "
        f"ORDER BY ts DESC, id DESC LIMIT {int(limit)}) AS h{k}"
        for k, u in enumerate(uids)
    )
    with engine.connect() as conn:
        versions = dict(conn.execute(select(User.id, User.history_version)
                                     .where(User.id.in_(uids.tolist()))).cursor.fetchall())
        rows = conn.exec_driver_sql(sql).cursor.fetchall()
    ev = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.float64, count=4 * len(rows)).reshape(-1, 4)
    # Rows arrive user by user (ascending), each newest first: reverse everything, then a stable sort by user
    # gives users ascending with events oldest first, ties in (ts, id) order, as the event log has them.
    ev = ev[::-1]
    ev = ev[np.argsort(ev[:, 0], kind="stable")]
    return _assemble(uids, np.array([versions.get(int(u), 0) for u in uids], dtype=np.int64),
                     ev[:, 0].astype(np.int64), ev[:, 1].astype(np.int64), ev[:, 2].astype(np.int64), ev[:, 3],
                     items)


def histories_from_arrays(user_ids: np.ndarray, ev_user: np.ndarray, ev_item: np.ndarray, ev_type: np.ndarray,
                          ev_ts: np.ndarray, items: ItemTable, limit: int = defaults.HISTORY_LIMIT,
                          versions: np.ndarray | None = None) -> Histories:
    """Same as ``load_histories`` from arrays already in memory, ordered by (ts, id) as the event log is."""
    uids = np.unique(np.asarray(user_ids, dtype=np.int64))
    keep = np.isin(ev_user, uids)
    u, it, ty, ts = ev_user[keep], ev_item[keep], ev_type[keep], ev_ts[keep]
    order = np.argsort(u, kind="stable")           # stable: keeps (ts, id) order inside each user
    u, it, ty, ts = u[order], it[order], ty[order], ts[order]
    # Keep each user's newest ``limit`` events.
    ends = np.searchsorted(u, u, side="right")
    recent = (ends - np.arange(len(u))) <= limit
    u, it, ty, ts = u[recent], it[recent], ty[recent], ts[recent]
    if versions is None:
        versions = np.zeros(len(uids), dtype=np.int64)
    return _assemble(uids, versions, u, it, ty, ts, items)


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
