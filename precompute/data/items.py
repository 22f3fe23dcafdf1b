"""Writing the catalogue: whole items upserted in batches (``PUT``/``POST /items``, ``import-items``), the given
fields of one item changed (``PATCH /items``), and bare items created for events that name an item the catalogue
does not have yet.

An upsert replaces the whole item: its price, created_at, categories and attributes become exactly the given
ones (absent = none), in the caller's transaction. Rows are written with driver-level ``executemany`` in batches;
nothing here loops over Python objects per item beyond building those parameter rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence

import numpy as np
from sqlalchemy import Connection, delete, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from ..errors import NotFound
from .parsing.chunks import ItemChunk
from .tables import Item, ItemAttribute, ItemCategory

#: Ids per ``IN (...)`` list: under SQLite's limit of bound parameters (32,766) with room to spare.
IN_BATCH = 10_000


@dataclasses.dataclass
class Upserted:
    created: int = 0
    updated: int = 0
    #: the ids this upsert created (one upsert's; ``+=`` adds the counts only)
    new_ids: tuple[int, ...] = ()

    def __iadd__(self, other: Upserted) -> Upserted:
        self.created += other.created
        self.updated += other.updated
        return self


@dataclasses.dataclass(frozen=True)
class NewItem:
    """One item as a request states it (``PUT``/``PATCH``/``POST /items``): everything but the id optional.
    ``categories`` ascending and distinct; ``created_at`` epoch seconds; an attribute of value None has none."""

    item_id: int
    categories: tuple[int, ...] = ()
    price: float | None = None
    created_at: float | None = None
    attributes: Mapping[str, float | None] = dataclasses.field(default_factory=dict)
    active: bool = True


def chunk_of(new: Sequence[NewItem], attributes: Sequence[str]) -> tuple[ItemChunk, np.ndarray]:
    """``new`` as an ``ItemChunk`` for ``upsert`` (a row's line is its position in ``new``), and the active flag
    of each row."""
    sizes = np.fromiter((len(it.categories) for it in new), dtype=np.int64, count=len(new))
    offsets = np.zeros(len(new) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])

    def numbers(values) -> np.ndarray:
        return np.array([np.nan if v is None else v for v in values], dtype=np.float64)

    chunk = ItemChunk(item_id=np.array([it.item_id for it in new], dtype=np.int64), category_offsets=offsets,
                      categories=np.fromiter((c for it in new for c in it.categories), dtype=np.int64,
                                             count=int(sizes.sum())),
                      price=numbers(it.price for it in new), created_at=numbers(it.created_at for it in new),
                      attributes={name: numbers(it.attributes.get(name) for it in new) for name in attributes},
                      lines=np.arange(len(new), dtype=np.int64))
    return chunk, np.array([it.active for it in new], dtype=bool)


def existing(conn: Connection, ids: Sequence[int]) -> set[int]:
    """Which of ``ids`` the catalogue has."""
    return set(present(conn, "items", np.asarray(list(ids), dtype=np.int64)).tolist())


def present(conn: Connection, table_name: str, ids: np.ndarray) -> np.ndarray:
    """Which of ``ids`` (distinct) ``table_name`` (``items`` or ``users``, keyed by ``id``) has, in the caller's
    transaction: driver-level queries with literal id lists (compiling 25 k bound parameters per import chunk
    through SQLAlchemy cost more than the inserts)."""
    cur = conn.connection.driver_connection.cursor()
    found = []
    for start in range(0, len(ids), IN_BATCH):
        cur.execute(f"SELECT id FROM {table_name} WHERE id IN ({literal_ids(ids[start:start + IN_BATCH])})")
        found += cur.fetchall()
    cur.close()
    return np.array([row[0] for row in found], dtype=np.int64)


def literal_ids(ids: np.ndarray | Sequence[int]) -> str:
    """Integer ids as an SQL list literal: ids are int64 values we produced, never text from a request or file."""
    return ", ".join(str(int(i)) for i in ids)


def upsert(conn: Connection, chunk: ItemChunk, attributes: Sequence[str], active: np.ndarray | None = None,
           keep_active: bool = False) -> Upserted:
    """Insert or replace the items of ``chunk`` (the same id twice: the last row wins), with their categories
    and the values of the declared ``attributes`` (others are not stored). ``active``: bool per row (default:
    all active); ``keep_active``: existing items keep their active flag (an import does not revive a listing an
    admin deactivated), new ones are active."""
    n = len(chunk)
    if n == 0:
        return Upserted()
    # The last row of each id: unique over the reversed ids gives each id's last position.
    rev = chunk.item_id[::-1]
    _, first_in_rev = np.unique(rev, return_index=True)
    last = n - 1 - first_in_rev        # in id order (np.unique sorts): concurrent upserts lock rows alike
    ids = chunk.item_id[last]
    id_list = ids.tolist()
    before = existing(conn, id_list)
    flags = np.ones(n, dtype=bool) if active is None else np.asarray(active, dtype=bool)
    price, created = chunk.price[last], chunk.created_at[last]
    rows = [{"id": i, "price": None if p != p else p, "created_at": None if c != c else c, "active": a}
            for i, p, c, a in zip(id_list, price.tolist(), created.tolist(), flags[last].tolist())]
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    stmt = insert(Item)
    update = {"price": stmt.excluded.price, "created_at": stmt.excluded.created_at}
    if not keep_active:
        update["active"] = stmt.excluded.active
    conn.execute(stmt.on_conflict_do_update(index_elements=["id"], set_=update), rows)
    for start in range(0, len(id_list), IN_BATCH):
        part = id_list[start:start + IN_BATCH]
        conn.execute(delete(ItemCategory).where(ItemCategory.item_id.in_(part)))
        # Only the declared names: values stored under a name declared elsewhere or earlier are not this
        # upsert's to drop (a shell with a narrower PREFEED_ITEM_ATTRIBUTES must not erase them).
        conn.execute(delete(ItemAttribute).where(ItemAttribute.item_id.in_(part),
                                                 ItemAttribute.name.in_(list(attributes))))
    sizes = np.diff(chunk.category_offsets)[last]
    starts = chunk.category_offsets[:-1][last]
    take = np.repeat(starts - np.r_[0, np.cumsum(sizes)[:-1]], sizes) + np.arange(int(sizes.sum()))
    cat_rows = [{"item_id": i, "category": c}
                for i, c in zip(np.repeat(ids, sizes).tolist(), chunk.categories[take].tolist())]
    if cat_rows:
        conn.execute(ItemCategory.__table__.insert(), cat_rows)
    attr_rows = []
    for name in attributes:
        values = chunk.attributes.get(name)
        if values is None:
            continue
        values = values[last]
        given = ~np.isnan(values)
        attr_rows += [{"item_id": i, "name": name, "value": v}
                      for i, v in zip(ids[given].tolist(), values[given].tolist())]
    if attr_rows:
        conn.execute(ItemAttribute.__table__.insert(), attr_rows)
    created = len(id_list) - len(before)
    return Upserted(created=created, updated=len(id_list) - created,
                    new_ids=tuple(i for i in id_list if i not in before))


def ensure(conn: Connection, ids: Sequence[int], create: bool) -> int:
    """Make sure every item of ``ids`` exists: create the missing ones bare (active, nothing else known) when
    ``create``, else raise ``NotFound`` naming them. Returns how many were created by this call (an item another
    transaction created meanwhile is not counted)."""
    ids = sorted(set(ids))
    have = existing(conn, ids)
    missing = [i for i in ids if i not in have]
    if not missing:
        return 0
    if not create:
        raise NotFound(f"unknown item id(s): {', '.join(map(str, missing[:10]))}"
                       + (f" and {len(missing) - 10} more" if len(missing) > 10 else ""))
    # The driver's own executemany / array insert: compiling a multi-row VALUES construct cost ~0.2 ms per item,
    # a minute for an event log naming 300 k items the catalogue does not have.
    cur = conn.connection.driver_connection.cursor()
    if conn.dialect.name == "postgresql":
        cur.execute("INSERT INTO items (id, active) SELECT unnest(%s::bigint[]), true ON CONFLICT (id) DO NOTHING",
                    (missing,))
    else:
        cur.executemany("INSERT INTO items (id, active) VALUES (?, 1) ON CONFLICT (id) DO NOTHING",
                        [(i,) for i in missing])
    made = max(cur.rowcount, 0)
    cur.close()
    return made


def patch(conn: Connection, item: NewItem, given: Collection[str]) -> None:
    """Change only the ``given`` fields of an existing item (``NotFound`` otherwise): price, created_at and active
    take the new value; categories are replaced by the given ones; attributes are set by name (None removes one),
    the others kept. The item's row is locked first, so concurrent changes of one item apply one after another."""
    columns = {name: getattr(item, name) for name in ("price", "created_at", "active") if name in given}
    if columns:
        found = conn.execute(update(Item).where(Item.id == item.item_id).values(**columns)).rowcount > 0
    else:
        found = conn.execute(select(Item.id).where(Item.id == item.item_id).with_for_update()).first() is not None
    if not found:
        raise NotFound(f"item {item.item_id} does not exist")
    if "categories" in given:
        conn.execute(delete(ItemCategory).where(ItemCategory.item_id == item.item_id))
        if item.categories:
            conn.execute(ItemCategory.__table__.insert(),
                         [{"item_id": item.item_id, "category": c} for c in item.categories])
    if "attributes" in given and item.attributes:
        conn.execute(delete(ItemAttribute).where(ItemAttribute.item_id == item.item_id,
                                                 ItemAttribute.name.in_(list(item.attributes))))
        rows = [{"item_id": item.item_id, "name": k, "value": v} for k, v in item.attributes.items() if v is not None]
        if rows:
            conn.execute(ItemAttribute.__table__.insert(), rows)
