"""Bringing a database written by an earlier version up to date: the kept values on user rows
(``users.recent``, ``history.py``; ``users.seen``, ``seen.py``) for users that have none, or one in an earlier
layout."""

from __future__ import annotations

from sqlalchemy import Engine, func, or_, select, update

from ..settings import Settings
from . import history, seen
from .models import User


def fill_missing(engine: Engine, settings: Settings, batch: int = 500) -> int:
    """Write both kept values for users missing either one, from the events table; returns how many users.

    Each batch runs in one transaction that first takes the users' row locks (a no-op UPDATE; the write lock on
    SQLite), so an event recorded meanwhile waits and is then folded into the values, never lost from them.
    """
    limit, cap = settings.history_limit, settings.seen_max_items
    _drop_old_layouts(engine, settings, batch)
    filled = 0
    while True:
        with engine.begin() as conn:
            ids = conn.execute(select(User.id).where(or_(User.recent.is_(None), User.seen.is_(None)))
                               .order_by(User.id).limit(batch)).scalars().all()
            if not ids:
                return filled
            conn.execute(update(User).where(User.id.in_(ids)).values(history_version=User.history_version))
            events = history.from_events(conn, ids, limit)
            items = seen.from_events(conn, ids, float("-inf"), cap)
            for uid in ids:
                rec, kept = events[uid], items[uid]
                conn.execute(update(User).where(User.id == uid).values(
                    recent=history.pack(rec["item"], rec["type"], rec["ts"], limit),
                    seen=seen.pack(kept["item"], kept["ts"], cap)))
            filled += len(ids)


def _drop_old_layouts(engine: Engine, settings: Settings, batch: int) -> None:
    """Kept values readers cannot use become NULL, to be refilled like missing ones: events in an earlier layout
    (32-bit item ids, no magic) and seen items kept under a smaller ``seen_max_items`` than today's. Readers
    already skip both (reading the events table); this restores the fast path."""
    with engine.begin() as conn:
        heads = conn.execute(select(User.id, func.substr(User.recent, 1, len(history.MAGIC)))
                             .where(User.recent.is_not(None))).all()
        old = [uid for uid, head in heads if bytes(head) != history.MAGIC]
        for i in range(0, len(old), batch):
            conn.execute(update(User).where(User.id.in_(old[i:i + batch])).values(recent=None))
        heads = conn.execute(select(User.id, func.substr(User.seen, 1, seen.HEADER.size))
                             .where(User.seen.is_not(None))).all()
        small = [uid for uid, head in heads
                 if len(head) < seen.HEADER.size or seen.HEADER.unpack(bytes(head))[0] < settings.seen_max_items]
        for i in range(0, len(small), batch):
            conn.execute(update(User).where(User.id.in_(small[i:i + batch])).values(seen=None))
