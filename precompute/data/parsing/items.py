"""The catalogue formats: ``read_items`` and the generic CSV and JSON lines layouts (MovieLens: ``movielens.py``).

Generic CSV: a header naming the columns, in any order::

    item_id,categories,price,created_at,quality
    17,3|12,9.99,2024-05-01T10:00:00Z,0.8
    9223372036854775807,,,,

``item_id`` is required; ``categories`` are ``|``-joined category ids (empty: none), ``price`` a number ≥ 0,
``created_at`` unix seconds or ISO-8601 (``timestamps.py``); empty means not given. Every other column is a numeric
attribute (empty or ``nan``: not given), or, when the caller passes the declared attribute names, only those are,
and the other columns are ignored with a note in the report.

JSON lines: one object per line with the same keys, ``categories`` a list of ids and the attributes in an
``attributes`` object: ``{"item_id": 17, "categories": [3, 12], "price": 9.99, "attributes": {"quality": 0.8}}``.
Attributes sit in their own object, not at the top level, because JSON records usually carry descriptive keys too
(a title, a URL): those are ignored rather than read as attributes, and a future core field cannot collide with an
attribute's name. Any other top-level key is ignored.

The same item id twice in a file gives two rows; the writer decides (an upsert keeps the last).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from pathlib import Path

import numpy as np

from ...errors import InvalidInput
from . import convert, movielens
from .chunks import CHUNK_ROWS, ItemChunk, emit, item_chunk
from .delimited import CsvTable
from .jsonl import JsonLines
from .report import Report
from .rows import Rows
from .source import Source

ITEM_FORMATS = ("movielens", "csv", "jsonl")
CORE = ("item_id", "categories", "price", "created_at")


def read_items(path: str | Path, format: str, *, report: Report, chunk_rows: int = CHUNK_ROWS,
               progress: Callable[[int], None] | None = None, attributes: Collection[str] | None = None,
               encoding: str | None = None, max_future: float) -> Iterator[ItemChunk]:
    """Chunks of at most ``chunk_rows`` accepted items from ``path``, in file order, in constant memory.

    ``format``: ``movielens`` (``u.item`` or ``movies.csv``, told apart by the first line), ``csv`` or ``jsonl``.
    ``attributes``: the declared attribute names (None: every non-core CSV column, every key of ``attributes``).
    ``progress(bytes_read)`` is called after each chunk with the bytes read so far (the file size at the end).
    ``encoding``: default UTF-8, Latin-1 for ``u.item``. Refused rows go to ``report``. A file that cannot be
    used at all (missing, unknown encoding, a header without ``item_id``) raises ``InvalidInput`` at the call,
    whatever the mode, before any chunk. ``max_future``: seconds a ``created_at`` may lie after the wall clock
    (``PREFEED_EVENT_MAX_FUTURE``); a later one is a refused row.
    """
    if format not in ITEM_FORMATS:
        raise InvalidInput(f"unknown item format {format!r}: expected one of {', '.join(ITEM_FORMATS)}")
    if chunk_rows < 1:
        raise InvalidInput("chunk_rows must be at least 1")
    if format == "movielens":
        return movielens.read_items(path, report, chunk_rows, progress, encoding, max_future)
    with Source(path, encoding or "utf-8", progress) as source:
        if format == "csv":
            table = CsvTable(source, header=True)
            table.require("item_id")
            extra = [name for name in table.names if name not in CORE]
            names = extra if attributes is None else [name for name in extra if name in attributes]
            for name in extra:
                if name not in names:
                    report.note(f"{source.path}: column {name!r} is not a declared attribute: ignored")
            tables = table.chunks([*CORE, *names], chunk_rows)
        else:
            tables = JsonLines(source, report).chunks(("item_id", "price", "created_at"), chunk_rows,
                                                      list_field="categories", object_field="attributes",
                                                      declared=attributes)
    return emit(source, report, tables, lambda rows: _generic(rows, max_future))


def _generic(rows: Rows, max_future: float) -> ItemChunk:
    columns = rows.columns
    item_id = convert.ids(rows, "item_id")
    owner, categories = category_lists(rows, "categories") if "categories" in columns else _none()
    price = convert.numbers(rows, "price", minimum=0) if "price" in columns else None
    created_at = (convert.times(rows, "created_at", required=False, max_future=max_future) if "created_at" in columns
                  else None)
    attributes = {}
    for column in columns:
        if column not in CORE:
            name = column.removeprefix("attributes.") if column.startswith("attributes.") else column
            attributes[name] = convert.numbers(rows, column)
    return item_chunk(rows, item_id, owner, categories, price, created_at, attributes)


def category_lists(rows: Rows, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``|``-joined category ids of each row, cut apart in one pass: (owner row, id) pairs."""
    cells = rows.columns[name]
    text = np.strings.strip(np.asarray(cells, dtype=str))
    counts = np.where(np.strings.str_len(text) > 0, np.strings.count(text, "|") + 1, 0)
    tokens = "|".join(t for t in text.tolist() if t).split("|") if counts.any() else []
    owner = np.repeat(np.arange(rows.n), counts)
    return owner, convert.category_ids(tokens, owner, rows, name)


def _none() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
