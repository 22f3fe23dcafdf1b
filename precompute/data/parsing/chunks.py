"""What the parsers yield: chunks of validated, normalized rows as numpy arrays, and the loop that makes them.

Every array of a chunk has one entry per accepted row (categories: one per category, with offsets), in file
order. ``lines`` gives each row's line in the file, so a later stage (the database writer) can name the line of a
row it cannot store. Missing numbers are NaN; ids are int64 from 1 to 2**63-1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import TypeVar

import numpy as np

from .report import Report
from .rows import Rows
from .source import Source

CHUNK_ROWS = 50_000         # rows read per chunk: ~10 MB of cells at once, a few ms of work per conversion call


@dataclasses.dataclass(frozen=True)
class ItemChunk:
    item_id: np.ndarray             # int64 (n,)
    category_offsets: np.ndarray    # int64 (n + 1,): item i's categories are categories[offsets[i]:offsets[i + 1]]
    categories: np.ndarray          # int64, ascending and distinct within an item; 0 to 2**63-1
    price: np.ndarray               # float64 (n,), NaN = not given
    created_at: np.ndarray          # float64 (n,), seconds since 1970-01-01 UTC, NaN = not given
    # name → float64 (n,), NaN = not given. CSV: the attribute columns of the header; JSON lines: the declared
    # names, or (none declared) the keys met in this chunk's ``attributes`` objects
    attributes: dict[str, np.ndarray]
    lines: np.ndarray               # int64 (n,), the row's first line in the file

    def __len__(self) -> int:
        return len(self.item_id)

    def categories_of(self, i: int) -> np.ndarray:
        return self.categories[self.category_offsets[i]:self.category_offsets[i + 1]]

    def take(self, keep: np.ndarray) -> ItemChunk:
        counts = np.diff(self.category_offsets)
        offsets = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
        np.cumsum(counts[keep], out=offsets[1:])
        return ItemChunk(self.item_id[keep], offsets, self.categories[np.repeat(keep, counts)], self.price[keep],
                         self.created_at[keep], {k: v[keep] for k, v in self.attributes.items()}, self.lines[keep])


def item_chunk(rows: Rows, item_id: np.ndarray, owner: np.ndarray, categories: np.ndarray,
               price: np.ndarray | None = None, created_at: np.ndarray | None = None,
               attributes: dict[str, np.ndarray] | None = None) -> ItemChunk:
    """An ``ItemChunk`` of every row of ``rows``; ``owner[k]`` is the row of ``categories[k]`` (any order,
    repeats allowed)."""
    order = np.lexsort((categories, owner))
    owner, categories = owner[order], categories[order]
    distinct = np.ones(len(owner), dtype=bool)
    distinct[1:] = (owner[1:] != owner[:-1]) | (categories[1:] != categories[:-1])
    offsets = np.zeros(rows.n + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner[distinct], minlength=rows.n), out=offsets[1:])
    missing = np.full(rows.n, np.nan)
    return ItemChunk(item_id, offsets, categories[distinct].astype(np.int64),
                     missing if price is None else price, missing if created_at is None else created_at,
                     attributes or {}, rows.lines)


@dataclasses.dataclass(frozen=True)
class EventChunk:
    user_id: np.ndarray             # int64 (n,)
    item_id: np.ndarray             # int64 (n,)
    ts: np.ndarray                  # float64 (n,), seconds since 1970-01-01 UTC
    type: np.ndarray                # int16 (n,), codes of the event types passed in
    value: np.ndarray               # float64 (n,), NaN = not given (MovieLens: the rating)
    event_id: np.ndarray | None     # object (n,) of str or None (not given); None when the file has no such field
    lines: np.ndarray               # int64 (n,)

    def __len__(self) -> int:
        return len(self.user_id)

    def take(self, keep: np.ndarray) -> EventChunk:
        return EventChunk(self.user_id[keep], self.item_id[keep], self.ts[keep], self.type[keep], self.value[keep],
                          None if self.event_id is None else self.event_id[keep], self.lines[keep])


Chunk = TypeVar("Chunk", ItemChunk, EventChunk)


def emit(source: Source, report: Report, tables: Iterator[Rows], build: Callable[[Rows], Chunk]) -> Iterator[Chunk]:
    """Build a chunk from each ``Rows``, hand its refused rows to ``report`` (which raises in strict mode),
    report progress, and yield the accepted rows (no empty chunks). Closes the file however the loop ends."""
    try:
        for rows in tables:
            chunk = build(rows)
            keep = rows.finish(report)
            source.report_progress()
            if keep.all():
                yield chunk
            elif keep.any():
                yield chunk.take(keep)
    finally:
        source.close()
