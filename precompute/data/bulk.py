"""Bulk loading of a generated marketplace: driver-level executemany on SQLite, COPY on PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
from sqlalchemy import Engine, delete, func, select

from ..settings import Settings
from . import seen
from .history import recent_values_from_arrays
from .tables import Event, Item, ItemAttribute, ItemCategory, User
from .synthetic import Marketplace

CHUNK = 50_000


def load(engine: Engine, m: Marketplace, settings: Settings, progress: Callable[[int], None] = lambda n: None) -> None:
    """Insert items, users and events in one transaction; on any error nothing is left behind. Each user row gets
    its kept values: newest ``history_limit`` events (``history.py``) and seen items (``seen.py``).

    Refuses to load into a database that already holds events, so a second ``seed`` cannot mix two
    marketplaces (``--reset`` in the CLI clears them first).
    """
    items = zip(m.item_id.tolist(), m.item_price.tolist(), m.item_created_at.tolist(), m.item_active.tolist())
    categories = zip(*(column.tolist() for column in m.categories()))
    attributes = [(i, name, v) for name, values in (("quality", m.item_quality), ("photos", m.item_photos),
                                                    ("seller_rating", m.item_seller_rating))
                  for i, v in zip(m.item_id.tolist(), values.tolist())]
    by_time = np.argsort(m.event_ts, kind="stable")      # (ts, id) order: ids follow the arrays' order
    kept = recent_values_from_arrays(m.user_id, m.event_user[by_time], m.event_item[by_time],
                                     m.event_type[by_time], m.event_ts[by_time], settings.history_limit)
    seen_items = seen.values_from_arrays(m.user_id, m.event_user, m.event_item, m.event_ts, settings.seen_max_items)
    users = zip(m.user_id.tolist(), m.user_created_at.tolist(), m.user_history_version.tolist(),
                [kept[u] for u in m.user_id.tolist()], [seen_items[u] for u in m.user_id.tolist()])
    events = (m.event_user, m.event_item, m.event_type, m.event_ts)
    with engine.begin() as conn:
        raw = conn.connection.driver_connection
        cur = raw.cursor()
        postgres = engine.dialect.name == "postgresql"
        _copy_or_insert(cur, postgres, "items", ["id", "price", "created_at", "active"], list(items))
        _copy_or_insert(cur, postgres, "item_categories", ["item_id", "category"], list(categories))
        _copy_or_insert(cur, postgres, "item_attributes", ["item_id", "name", "value"], attributes)
        progress(len(m.item_id))
        _copy_or_insert(cur, postgres, "users", ["id", "created_at", "history_version", "recent", "seen"],
                        list(users))
        progress(len(m.user_id))
        for chunk in _event_chunks(*events):
            _copy_or_insert(cur, postgres, "events", ["user_id", "item_id", "type", "ts"], chunk)
            progress(len(chunk))


def clear(engine: Engine) -> None:
    with engine.begin() as conn:
        for table in (Event, User, ItemCategory, ItemAttribute, Item):
            conn.execute(delete(table))


def has_data(engine: Engine) -> bool:
    with engine.connect() as conn:
        return bool(conn.execute(select(func.count()).select_from(Item)).scalar())


def _event_chunks(user, item, type_, ts) -> Iterator[list[tuple]]:
    for start in range(0, len(user), CHUNK):
        sl = slice(start, start + CHUNK)
        yield list(zip(user[sl].tolist(), item[sl].tolist(), type_[sl].tolist(), ts[sl].tolist()))


def _copy_or_insert(cur, postgres: bool, table: str, columns: list[str], rows: list[tuple]) -> None:
    cols = ", ".join(columns)
    if postgres:
        with cur.copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
    else:
        marks = ", ".join("?" for _ in columns)
        cur.executemany(f"INSERT INTO {table} ({cols}) VALUES ({marks})", rows)


def event_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(Event)).scalar() or 0)
