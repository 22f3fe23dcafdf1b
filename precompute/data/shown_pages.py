"""The pages each of a batch's users was served lately, as a worker reads them to rank with what was shown
(``ranking/shown.py``): the collector's stored pages (``served_pages``), which are kept ``PREFEED_IMPRESSIONS_KEEP``.

A page reaches the table within a collection interval of being served (``PREFEED_IMPRESSIONS_COLLECT_INTERVAL``):
a feed recomputed sooner after a page does not know it yet, and knows it the next time.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from sqlalchemy import Engine, func, select

from .tables import ServedPage

#: A user's newest pages read per recompute: a reader scrolling all day is described by their last hundred pages.
PER_USER = 100


@dataclasses.dataclass(frozen=True)
class Pages:
    """Impressions of a batch's users, one entry per (page, item): ``owner`` is the user's place in the batch,
    ``item_ids`` the catalogue ids, ``ts`` the page's time (the events' clock when served), ``position`` the item's
    0-based place in the user's scroll."""

    owner: np.ndarray
    item_ids: np.ndarray
    ts: np.ndarray
    position: np.ndarray


def _rows(engine: Engine, user_ids: np.ndarray, since: float) -> list:
    """Each of ``user_ids``' stored pages served at or after ``since``, by user then newest first: rows of
    ``(user_id, served_at, position, items)``, the items as stored (little-endian int64 bytes). One query on
    ``ix_served_pages_user``."""
    users = sorted({int(u) for u in user_ids.tolist()})
    if not users:
        return []
    with engine.connect() as conn:
        return conn.execute(
            select(ServedPage.user_id, ServedPage.served_at, ServedPage.position, ServedPage.items)
            .where(ServedPage.user_id.in_(users), ServedPage.served_at >= since)
            .order_by(ServedPage.user_id, ServedPage.served_at.desc())).all()


def served(engine: Engine, user_ids: np.ndarray, since: float) -> dict[int, list[tuple[float, int, np.ndarray]]]:
    """Each of ``user_ids``' pages served at or after ``since``, newest first: ``(served_at, position, item ids)``.
    A user served nothing is absent."""
    out: dict[int, list[tuple[float, int, np.ndarray]]] = {}
    for user, served_at, position, items in _rows(engine, user_ids, since):
        out.setdefault(user, []).append((served_at, position, np.frombuffer(items, dtype="<i8")))
    return out


def load_pages(engine: Engine, user_ids: np.ndarray, since: float, per_user: int = PER_USER) -> Pages:
    """The newest ``per_user`` pages served to each of ``user_ids`` at or after ``since``. The pages' bytes are
    joined and read as one array: a worker reads a batch's pages in a few array operations, not a few per page."""
    place = {int(u): j for j, u in enumerate(user_ids.tolist())}
    owner, blobs, ts, pos = [], [], [], []
    count: dict[int, int] = {}
    for user, served_at, position, items in _rows(engine, user_ids, since):
        n = count.get(user, 0)
        if n < per_user:
            count[user] = n + 1
            owner.append(place[user]), blobs.append(items), ts.append(served_at), pos.append(position)
    if not owner:
        return Pages(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0), np.empty(0, np.int64))
    sizes = np.fromiter((len(b) // 8 for b in blobs), dtype=np.int64, count=len(blobs))
    starts = np.cumsum(sizes) - sizes
    within = np.arange(int(sizes.sum())) - np.repeat(starts, sizes)
    return Pages(np.repeat(np.asarray(owner, dtype=np.int64), sizes),
                 np.frombuffer(b"".join(blobs), dtype="<i8").astype(np.int64), np.repeat(np.asarray(ts, float), sizes),
                 np.repeat(np.asarray(pos, dtype=np.int64), sizes) + within)


def shown_before(engine: Engine, user_id: int) -> dict[int, tuple[int, float, int]]:
    """What the user's newest ``PER_USER`` stored pages showed, as a worker ranking with the "shown" columns reads
    them: per item id, ``(pages that showed it, when the last of them was served, its best place)``."""
    out: dict[int, tuple[int, float, int]] = {}
    for served_at, position, page in served(engine, np.array([user_id]), float("-inf")).get(user_id, [])[:PER_USER]:
        for k, item in enumerate(page.tolist()):
            n, last, best = out.get(item, (0, served_at, position + k))
            out[item] = (n + 1, max(last, served_at), min(best, position + k))
    return out


def oldest_page(engine: Engine) -> float | None:
    """When the oldest page still stored was served (None: no page is stored)."""
    with engine.connect() as conn:
        return conn.execute(select(func.min(ServedPage.served_at))).scalar()
