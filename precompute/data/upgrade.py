"""Bringing a database written by an earlier version up to date: the kept values on user rows
(``users.recent``, ``history.py``; ``users.seen``, ``seen.py``) for users that have none, or one in an earlier
layout, the one-category ``items`` table of earlier versions (``split_item_columns``), and event ids unique across
all users where they are unique per user now (``scope_event_ids``)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Engine, func, inspect, or_, select, text, update
from sqlalchemy.schema import CreateTable

from ..settings import Settings
from . import history, seen
from .tables import Event, User


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


#: Item columns of earlier versions that are attributes now (the synthetic marketplace's own).
_LEGACY_ATTRIBUTES = ("quality", "photos", "seller_rating")


def split_item_columns(engine: Engine) -> bool:
    """Bring an ``items`` table of an earlier version (one ``category`` column, the generator's ``quality``,
    ``photos`` and ``seller_rating`` columns, NOT NULL price and created_at) to today's: its categories move to
    ``item_categories``, the three columns to ``item_attributes`` under their names, and the table is rebuilt
    without them (on SQLite, the documented copy-and-rename, with foreign key checks off meanwhile). Returns
    whether there was anything to do. Run after ``create_all``, so the new tables exist."""
    columns = {c["name"] for c in inspect(engine).get_columns("items")}
    if "category" not in columns:
        return False
    legacy = [name for name in _LEGACY_ATTRIBUTES if name in columns]
    copy = ["INSERT INTO item_categories (item_id, category) SELECT id, category FROM items "
            "WHERE category IS NOT NULL AND category >= 0"]
    copy += [f"INSERT INTO item_attributes (item_id, name, value) SELECT id, '{name}', {name} FROM items "
             f"WHERE {name} IS NOT NULL" for name in legacy]
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            for statement in copy:
                conn.execute(text(statement))
            conn.execute(text("DROP INDEX IF EXISTS ix_items_category"))
            for name in ["category", *legacy]:
                conn.execute(text(f'ALTER TABLE items DROP COLUMN "{name}"'))
            conn.execute(text("ALTER TABLE items ALTER COLUMN price DROP NOT NULL"))
            conn.execute(text("ALTER TABLE items ALTER COLUMN created_at DROP NOT NULL"))
        return True
    _rebuild_on_sqlite(engine, "items", "CREATE TABLE items_upgraded (id INTEGER NOT NULL PRIMARY KEY, price FLOAT, "
                       "created_at FLOAT, active BOOLEAN NOT NULL)", "id, price, created_at, active", first=copy)
    return True


def scope_event_ids(engine: Engine) -> bool:
    """Make ``client_event_id`` unique per user where an earlier version made it unique across all users (one
    client's ``order-0001`` made another user's event with that id a silent duplicate). Drops the old unique
    constraint; on SQLite, where a column's UNIQUE cannot be dropped, the events table is rebuilt (the documented
    copy-and-rename, foreign key checks off meanwhile, ids kept). ``init_db`` then creates the per-user index
    with the other missing ones. Returns whether there was anything to do. Run after ``create_all``."""
    if engine.dialect.name == "postgresql":
        old = [u["name"] for u in inspect(engine).get_unique_constraints("events")
               if u["column_names"] == ["client_event_id"]]
        with engine.begin() as conn:
            for name in old:
                conn.execute(text(f'ALTER TABLE events DROP CONSTRAINT "{name}"'))
        return bool(old)
    # SQLite: a column's UNIQUE is an automatic index (origin "u") that the inspector does not report.
    with engine.connect() as conn:
        automatic = [row[1] for row in conn.exec_driver_sql("PRAGMA index_list(events)") if row[3] == "u"]
        if not any([c[2] for c in conn.exec_driver_sql(f'PRAGMA index_info("{name}")')] == ["client_event_id"]
                   for name in automatic):
            return False
        have = {row[1] for row in conn.exec_driver_sql("PRAGMA table_info(events)")}
    # The columns both layouts have (columns added since are NULL in the copy, as ``init_db`` adds them).
    columns = ", ".join(c.name for c in Event.__table__.columns if c.name in have)
    create = str(CreateTable(Event.__table__).compile(engine)).replace("CREATE TABLE events", "CREATE TABLE "
                                                                       "events_upgraded", 1)
    _rebuild_on_sqlite(engine, "events", create, columns, order_by="id")
    return True


def _rebuild_on_sqlite(engine: Engine, table: str, create: str, columns: str, first: Sequence[str] = (),
                       order_by: str | None = None) -> None:
    """Rebuild ``table`` on SQLite by the documented copy-and-rename, in one transaction: ``create`` makes
    ``<table>_upgraded``, the ``columns`` (a comma-separated list) are copied into it (in ``order_by`` order, if
    given), the old table is dropped and the new one takes its name. ``first``: statements run before, in the same
    transaction. Foreign key checks are off meanwhile and checked before the commit: a rebuild that would break one
    is rolled back."""
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute("PRAGMA foreign_keys=OFF")          # no effect inside a transaction: set before it begins
        raw.commit()
        try:
            for statement in first:
                cur.execute(statement)
            cur.execute(create)
            order = f" ORDER BY {order_by}" if order_by else ""
            cur.execute(f"INSERT INTO {table}_upgraded ({columns}) SELECT {columns} FROM {table}{order}")
            cur.execute(f"DROP TABLE {table}")
            cur.execute(f"ALTER TABLE {table}_upgraded RENAME TO {table}")
            broken = cur.execute("PRAGMA foreign_key_check").fetchall()
            if broken:
                raise RuntimeError(f"{table} table rebuild would break {len(broken)} foreign key(s): {broken[:3]}")
            raw.commit()
        except BaseException:
            raw.rollback()
            raise
        finally:
            cur.execute("PRAGMA foreign_keys=ON")
    finally:
        raw.close()
