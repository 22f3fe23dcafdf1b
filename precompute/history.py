"""Users' recent interaction histories for a batch, in one flat set of arrays.

Events of user ``k`` (k-th in ``user_ids``) live at ``offsets[k]:offsets[k+1]``, oldest first. The same
``Histories`` is built from SQL at precompute time and from in-memory arrays at training time, with the same
truncation to the newest ``limit`` events, so both paths feed identical inputs to the feature code.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from sqlalchemy import Engine, func, select

from . import defaults
from .items import ItemTable
from .models import Event, User


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

    @property
    def owner(self) -> np.ndarray:
        """Position in ``user_ids`` of every event."""
        return np.repeat(np.arange(len(self.user_ids)), np.diff(self.offsets))


def load_histories(engine: Engine, user_ids: list[int], items: ItemTable,
                   limit: int = defaults.HISTORY_LIMIT) -> Histories:
    """Two queries for the whole batch: versions first, then events.

    Reading the version before the events means a feed may include events newer than its stamp, never the
    reverse: a later recompute with the higher version then replaces it.
    """
    uids = np.asarray(sorted(set(int(u) for u in user_ids)), dtype=np.int64)
    with engine.connect() as conn:
        versions = dict(conn.execute(select(User.id, User.history_version).where(User.id.in_(uids.tolist()))).all())
        ranked = (
            select(Event.user_id, Event.item_id, Event.type, Event.ts, Event.id,
                   func.row_number().over(partition_by=Event.user_id,
                                          order_by=(Event.ts.desc(), Event.id.desc())).label("rn"))
            .where(Event.user_id.in_(uids.tolist()))
            .subquery()
        )
        rows = conn.execute(
            select(ranked.c.user_id, ranked.c.item_id, ranked.c.type, ranked.c.ts)
            .where(ranked.c.rn <= limit)
            .order_by(ranked.c.user_id, ranked.c.ts, ranked.c.id)
        ).all()
    # Column-wise conversion: numpy converting a list of Row objects element by element is ~6x slower.
    cols = list(zip(*rows)) if rows else ((), (), (), ())
    return _assemble(uids, np.array([versions.get(int(u), 0) for u in uids], dtype=np.int64),
                     np.array(cols[0], dtype=np.int64), np.array(cols[1], dtype=np.int64),
                     np.array(cols[2], dtype=np.int64), np.array(cols[3], dtype=np.float64), items)


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
