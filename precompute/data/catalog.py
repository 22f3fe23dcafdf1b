"""The catalogue as the API and the fallback feed see it: does an item exist, (de)activate it, the newest active
listings, a user's latest interactions with their items' categories, and the items a feed leaves out for them."""

from __future__ import annotations

import numpy as np
from sqlalchemy import Engine, func, select, update

from ..errors import NotFound
from ..settings import Settings
from . import clock, seen
from .tables import Event, Item, ItemCategory, User


def require_item(engine: Engine, item_id: int) -> None:
    """Raise ``NotFound`` unless ``item_id`` is in the catalogue."""
    with engine.connect() as conn:
        if conn.execute(select(Item.id).where(Item.id == item_id)).scalar() is None:
            raise NotFound(f"item {item_id} does not exist")


def item_categories(engine: Engine, item_id: int) -> list[int] | None:
    """The category ids of ``item_id``, ascending; None when the catalogue does not hold it."""
    with engine.connect() as conn:
        rows = conn.execute(select(Item.id, ItemCategory.category)
                            .outerjoin(ItemCategory, ItemCategory.item_id == Item.id)
                            .where(Item.id == item_id).order_by(ItemCategory.category)).all()
    return None if not rows else [c for _, c in rows if c is not None]


def set_active(engine: Engine, item_id: int, active: bool) -> None:
    """Mark ``item_id`` active or not; ``NotFound`` if it does not exist."""
    with engine.begin() as conn:
        if conn.execute(update(Item).where(Item.id == item_id).values(active=active)).rowcount == 0:
            raise NotFound(f"item {item_id} does not exist")


def inactive_ids(engine: Engine) -> list[int]:
    """Ids of every deactivated item."""
    with engine.connect() as conn:
        return list(conn.execute(select(Item.id).where(~Item.active)).scalars())


def newest_active(engine: Engine, n: int) -> list[int]:
    """Ids of the ``n`` most recently listed active items, newest first; items without a creation time last
    (PostgreSQL sorts NULL first in descending order, SQLite last: the explicit key makes both agree)."""
    with engine.connect() as conn:
        return list(conn.execute(select(Item.id).where(Item.active)
                                 .order_by(Item.created_at.is_(None), Item.created_at.desc(), Item.id.desc())
                                 .limit(n)).scalars())


def latest_interactions(engine: Engine, user_id: int, n: int) -> list[tuple[int, int, tuple[int, ...]]]:
    """``(item_id, type code, the item's categories)`` of the user's newest ``n`` events, newest first."""
    recent = (select(Event.id, Event.item_id, Event.type, Event.ts).where(Event.user_id == user_id)
              .order_by(Event.ts.desc(), Event.id.desc()).limit(n).subquery())
    with engine.connect() as conn:
        rows = conn.execute(
            select(recent.c.id, recent.c.item_id, recent.c.type, ItemCategory.category)
            .outerjoin(ItemCategory, ItemCategory.item_id == recent.c.item_id)
            .order_by(recent.c.ts.desc(), recent.c.id.desc(), ItemCategory.category)).all()
    events: dict[int, tuple[int, int, list[int]]] = {}
    for event_id, item_id, type_, category in rows:
        entry = events.setdefault(event_id, (item_id, type_, []))
        if category is not None:
            entry[2].append(category)
    return [(item_id, type_, tuple(cats)) for item_id, type_, cats in events.values()]


def seen_items(engine: Engine, user_id: int, settings: Settings) -> np.ndarray:
    """Ids of the items ``user_id`` interacted with inside the seen window (``seen.py``), as precompute leaves
    them out."""
    with engine.connect() as conn:
        now = clock.log_clock(conn, settings)
        since = now - settings.seen_window
        value = conn.execute(select(User.seen).where(User.id == user_id)).scalar()
        if value is None or settings.as_of or not seen.covers(value, settings.seen_max_items):
            rec = seen.from_events(conn, [user_id], since, settings.seen_max_items, now)[user_id]
        else:
            rec = seen.unpack(value)[-settings.seen_max_items:]
    return rec["item"][(rec["ts"] >= since) & (rec["ts"] <= now)]


def counted_categories(engine: Engine) -> tuple[np.ndarray, np.ndarray]:
    """Every item with a category and the category it counts in for the diversity rule (its lowest category id),
    ascending by item id, as two int64 arrays."""
    with engine.connect() as conn:
        rows = conn.execute(select(ItemCategory.item_id, func.min(ItemCategory.category))
                            .group_by(ItemCategory.item_id).order_by(ItemCategory.item_id)).all()
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    cats = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
    return ids, cats
