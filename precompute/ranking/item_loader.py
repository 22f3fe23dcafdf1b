"""Loading the item table from the database: items, their categories and declared attributes, and interaction
statistics up to a clock (``load_item_table``). The table itself, and what it derives, is ``item_table.py``."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
from sqlalchemy import Engine, case, func, select

from ..data import clock, event_types
from ..data.rows import table
from ..data.tables import Event, Item, ItemAttribute, ItemCategory
from ..settings import Settings
from .item_table import ItemTable
from .layout import WINDOWS, for_settings


def load_item_table(engine: Engine, settings: Settings, as_of: float | None = None,
                    since: ItemTable | None = None) -> ItemTable:
    """Items, their categories and declared attributes, plus interaction statistics from events at or before
    ``as_of`` (default: the log's clock, ``data/clock.py``); type weights and popular-list lengths from
    ``settings``.

    Training and evaluation pass their time cut as ``as_of`` so the statistics hold no future information, and an
    item created after an explicit instant (``as_of``, or ``PREFEED_AS_OF``) is inactive in the table: it did not
    exist then, so it is no candidate and no negative age to learn from. Precompute otherwise reads at the log's
    clock, which its batches are read at too; there an item listed after the newest event stays active: it is live.

    ``since``: a table of the same database at an earlier ``as_of``, whose all-time counts are carried forward: only
    the events after it and those inside the longest popularity window are read (two range scans of the time
    index instead of a pass over the whole log), which is what lets workers follow a fast log's clock. An event
    stored late with a time before ``since.as_of`` is counted at the next full load (``Pipeline.refresh``).
    """
    explicit = as_of is not None or bool(settings.as_of)
    names = tuple(settings.item_attributes)
    with engine.connect() as conn:
        types = event_types.check(conn, settings)      # stored type codes still mean what the settings say
        as_of = clock.log_clock(conn, settings) if as_of is None else as_of
        items = table(conn.execute(select(Item.id, Item.price, Item.created_at, Item.active).order_by(Item.id))
                      .all(), id="<i8", price="<f8", created="<f8", active="?")
        members = table(conn.execute(select(ItemCategory.item_id, ItemCategory.category)).all(),
                        item="<i8", category="<i8")
        attributes = table(conn.execute(select(ItemAttribute.item_id, ItemAttribute.name, ItemAttribute.value)
                                        .where(ItemAttribute.name.in_(names))).all() if names else [],
                           item="<i8", name="O", value="<f8")
        since = since if since is not None and since.as_of <= as_of else None
        after = (Event.ts > since.as_of) if since is not None else True
        stats = conn.execute(select(Event.item_id, Event.type, func.count(), func.min(Event.ts))
                             .where(after, Event.ts <= as_of).group_by(Event.item_id, Event.type)).all()
        longest = max(seconds for _, seconds in WINDOWS)
        recent = conn.execute(
            select(Event.item_id, Event.type,
                   *(func.sum(case((Event.ts >= as_of - seconds, 1), else_=0)) for _, seconds in WINDOWS))
            .where(Event.ts >= as_of - longest, Event.ts <= as_of).group_by(Event.item_id, Event.type)).all()
    ids = items["id"]
    n = len(ids)
    index = pd.Index(ids)
    attr = np.full((n, len(names)), np.nan)
    if len(attributes):
        # An item written between the items read and this one is not in the table (-1): its values are left out,
        # never written into row -1 (the last item's).
        at = index.get_indexer(attributes["item"])
        ok = at >= 0
        col = np.array([names.index(a) for a in attributes["name"]], dtype=np.int64)
        attr[at[ok], col[ok]] = attributes["value"][ok]
    counts = np.zeros((n, len(types) + 1), dtype=np.float64)
    windowed = np.zeros((n, len(WINDOWS)), dtype=np.float64)
    first_seen = np.full(n, np.inf)
    if since is not None and n:
        old = since.rows(ids)
        had = old >= 0
        counts[had] = since.counts[old[had]]
        first_seen[had] = np.where(np.isnan(since.first_seen[old[had]]), np.inf, since.first_seen[old[had]])
    if stats and n:
        s = table(stats, item="<i8", type="<i8", count="<f8", first="<f8")
        known = index.get_indexer(s["item"])
        ok = (known >= 0) & (s["type"] >= 1) & (s["type"] <= len(types))    # codes past the declaration: none
        np.add.at(counts, (known[ok], s["type"][ok]), s["count"][ok])
        np.minimum.at(first_seen, known[known >= 0], s["first"][known >= 0])   # any type: the item was there
    if recent and n:
        s = table(recent, item="<i8", type="<i8", **{f"w{k}": "<f8" for k in range(len(WINDOWS))})
        known = index.get_indexer(s["item"])
        ok = (known >= 0) & (s["type"] >= 1) & (s["type"] <= len(types))
        w = event_types.by_code(types.weight_by_code(), s["type"][ok])
        for k in range(len(WINDOWS)):
            np.add.at(windowed[:, k], known[ok], w * s[f"w{k}"][ok])
    m_item = index.get_indexer(members["item"])
    return ItemTable(
        ids=ids, price=items["price"], created_at=items["created"],
        active=items["active"].astype(bool) & ~(explicit & (items["created"] > as_of)),     # NaN: not after
        attributes=attr, counts=counts, windowed=windowed,
        first_seen=np.where(np.isfinite(first_seen), first_seen, np.nan),
        member_item=m_item[m_item >= 0], member_category=members["category"][m_item >= 0],
        as_of=as_of, type_names=types.names, type_weights=types.weight_by_code(), attribute_names=names,
        layout=for_settings(settings),
        recent_lengths=(settings.recent_popular_1h, settings.recent_popular_1d),
        n_global_popular=settings.global_popular, n_category_popular=settings.category_popular,
        loaded_at=since.loaded_at if since is not None else time.time(),     # the last full load's time
    )
