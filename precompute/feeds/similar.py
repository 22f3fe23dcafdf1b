"""Similar items in Redis: one binary value per item, written when a worker loads a bundle, read by
``GET /items/<id>/similar`` with the live rules applied.

Value (key ``Keys.similar(item_id)``, no TTL; little-endian)::

    header (4 bytes)     magic "PS", format u8 (1), count u8
    records (8 bytes)    neighbour item_id i64 — most similar first (``ranking/similar.py``'s stacked list)

An item of the catalogue without neighbours gets a value of count 0, so a list of an earlier bundle never outlives
it. 4 + 8 × ``PREFEED_SIMILAR_LENGTH`` bytes per item (164 at 20; Redis adds its own per-key cost: docs/operating.md).

Written once per bundle: ``Keys.similar_version`` names the bundle whose lists are in Redis; a worker that loads
(or reloads its item table with) the current bundle and finds another version there, or none (Redis lost its data),
writes every item's value, then the version. Workers doing it at once write the same bytes.

The live rules (``similar_page``): the item's list read with the user's seen items in one pipelined round trip
(the item's key and the user's ``{u:<id>}`` key: two slots, on a cluster read from their nodes in parallel);
inactive items (the process's in-memory item states), the user's seen items and the item itself dropped; boosts
not applied. An item whose list leaves nothing (none stored, or every neighbour dropped) gets its categories'
popular items (``fallback.popular_page``), and says so: ``source`` ``"category_popular"`` instead of
``"neighbours"``.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable

import numpy as np
import redis

from ..settings import Settings
from .client import per_node
from .fallback import popular_page
from .keys import Keys
from .page import PageReader
from .rules import Ask

MAGIC = b"PS"
FORMAT = 1
HEADER = struct.Struct("<2sBB")
#: Items written per pipeline (per node on a cluster).
CHUNK = 10_000


def encode(neighbours: np.ndarray) -> bytes:
    ids = np.asarray(neighbours, dtype="<i8")
    if len(ids) > 255:
        raise ValueError("a similar list holds at most 255 items")
    return HEADER.pack(MAGIC, FORMAT, len(ids)) + ids.tobytes()


def decode(value: bytes | None) -> np.ndarray | None:
    """The neighbour ids of a value; None for a missing or unreadable one (served as no list)."""
    if not value or len(value) < HEADER.size:
        return None
    magic, fmt, count = HEADER.unpack_from(value)
    if magic != MAGIC or fmt != FORMAT or len(value) != HEADER.size + 8 * count:
        return None
    return np.frombuffer(value, dtype="<i8", offset=HEADER.size).astype(np.int64)


class SimilarStore:
    """Writes the similar lists of a bundle (a worker, when it loads one)."""

    def __init__(self, r: redis.Redis, settings: Settings) -> None:
        self.r = r
        self.keys = Keys(settings.key_prefix)

    def written(self) -> int | None:
        """The bundle version whose lists Redis holds, or None."""
        value = self.r.get(self.keys.similar_version)
        return int(value) if value and value.isdigit() else None

    def publish(self, version: int, src: np.ndarray, dst: np.ndarray, catalogue: np.ndarray) -> int:
        """Write every item's list (``src``/``dst``: the bundle's ``similar_*`` pairs, grouped by src, in list order)
        and an empty one for each item of ``catalogue`` without one, then record ``version``. Returns the values
        written."""
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        owners, start = np.unique(src, return_index=True)
        ends = np.r_[start[1:], len(src)]
        lists = {int(o): dst[a:b] for o, a, b in zip(owners.tolist(), start.tolist(), ends.tolist())}
        empty = encode(np.empty(0, np.int64))
        ids = np.union1d(owners, np.asarray(catalogue, np.int64)).tolist()
        for lo in range(0, len(ids), CHUNK):
            part = ids[lo:lo + CHUNK]
            keys = [self.keys.similar(i) for i in part]
            values = [encode(lists[i]) if i in lists else empty for i in part]
            per_node(self.r, keys, lambda pipe, j: pipe.set(keys[j], values[j]))
        self.r.set(self.keys.similar_version, str(version))
        return len(ids)


@dataclasses.dataclass
class SimilarPage:
    item_id: int
    items: list[int]
    source: str         # "neighbours" | "category_popular"


def read(pages: PageReader, item_id: int, user_id: int | None) -> tuple[np.ndarray | None, frozenset[bytes]]:
    """The item's stored list (None: none, or unreadable) and ``user_id``'s recent seen items as Redis holds them
    (decimal ids as bytes, up to ``PREFEED_SEEN_RECENT_MAX``; none without a user), in one pipelined round trip.
    The seen ids stay bytes: a list of 20 is looked up in them, where parsing 500 ids cost ~50 us."""
    pipe = pages.r.pipeline(transaction=False)
    pipe.get(pages.keys.similar(item_id))
    if user_id is not None:
        pipe.execute_command("ZRANGE", pages.keys.seen_recent(user_id), 0, -1)
    replies = pipe.execute()
    return decode(replies[0]), frozenset(replies[1]) if user_id is not None else frozenset()


def similar_page(pages: PageReader, item_id: int, limit: int, user_id: int | None,
                 categories: Callable[[int], list[int] | None],
                 newest: Callable[[int], list[int]]) -> SimilarPage | None:
    """The item's similar items as served: its stored list less inactive items, ``user_id``'s seen items and the item
    itself, first ``limit``; when that leaves none, its categories' popular items (then global popular, as the
    fallback feed's). ``categories(item_id)``: the item's category ids, None for an item the catalogue does not
    hold (then None is returned: the caller's 404). ``newest(n)``: the newest active listings, for a deployment
    whose workers have not published popular lists yet."""
    stored, seen = read(pages, item_id, user_id)
    pages.states.refresh()
    if stored is not None and len(stored):
        # ~20 items: a comprehension over Python ints is cheaper here than numpy's set operations
        inactive = pages.states.inactive_flags(stored)
        kept = [i for i, off in zip(stored.tolist(), inactive)
                if not off and i != item_id and not (seen and str(i).encode() in seen)]
        if kept:
            return SimilarPage(item_id, kept[:limit], "neighbours")
    cats = categories(item_id)
    if cats is None:
        return None
    drop = np.array(sorted({int(i) for i in seen} | {item_id}), dtype=np.int64)
    page = popular_page(pages, cats, Ask.of(limit), drop, newest)
    return SimilarPage(item_id, [i for i, _, _ in page.items], "category_popular")
