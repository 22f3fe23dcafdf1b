"""The interaction-log formats: ``read_events`` and the generic CSV and JSON lines layouts (MovieLens ratings:
``movielens.py``, with the rule that turns ratings into events).

Generic CSV: a header naming the columns, in any order; other columns are ignored (noted in the report)::

    user_id,item_id,ts,type,value,event_id
    42,17,2024-05-01T10:00:00+02:00,purchase,19.99,order-981
    42,18,1714550400,,,

``user_id``, ``item_id`` and ``ts`` are required; ``type`` is a declared type's name or its integer code (empty:
``default_type``); ``value`` a number (empty or ``nan``: not given); ``event_id`` a text of at most 64 characters
(empty: not given), the key that makes a re-import store nothing twice. ``ts`` is unix seconds or ISO-8601
(``timestamps.py``: ``Z`` and offsets honoured; no zone = UTC). JSON lines: one object per line with the same keys
(other keys ignored), e.g. ``{"user_id": 42, "item_id": 17, "ts": 1714550400, "type": "view"}``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np

from ...errors import ConfigError, InvalidInput
from . import convert, movielens
from .chunks import CHUNK_ROWS, EventChunk, emit
from .delimited import CsvTable
from .jsonl import JsonLines
from .movielens import RatingRule
from .report import Report
from .rows import Rows
from .source import Source

EVENT_FORMATS = ("movielens", "csv", "jsonl")
# The four types of today (models.EventType); the caller passes the types declared in settings.
DEFAULT_EVENT_TYPES: Mapping[str, int] = {"view": 1, "click": 2, "contact": 3, "purchase": 4}
FIELDS = ("user_id", "item_id", "ts", "type", "value", "event_id")


def read_events(path: str | Path, format: str, *, report: Report, chunk_rows: int = CHUNK_ROWS,
                progress: Callable[[int], None] | None = None, types: Mapping[str, int] = DEFAULT_EVENT_TYPES,
                default_type: str = "view", rating_rule: RatingRule = RatingRule(),
                encoding: str | None = None, max_future: float) -> Iterator[EventChunk]:
    """Chunks of at most ``chunk_rows`` accepted events from ``path``, in file order, in constant memory.

    ``format``: ``movielens`` (``u.data`` or ``ratings.csv``, told apart by the first line; ratings become events
    by ``rating_rule``), ``csv`` or ``jsonl``. ``types``: event type name → code. ``progress`` and ``encoding``
    (default UTF-8) as in ``read_items``; refused rows go to ``report``. ``max_future``: seconds a ``ts`` may lie
    after the wall clock (``PREFEED_EVENT_MAX_FUTURE``); a later one is a refused row.
    """
    if format not in EVENT_FORMATS:
        raise InvalidInput(f"unknown event format {format!r}: expected one of {', '.join(EVENT_FORMATS)}")
    if chunk_rows < 1:
        raise InvalidInput("chunk_rows must be at least 1")
    if default_type not in types:
        raise ConfigError(f"default event type {default_type!r} is not declared ({', '.join(types)})")
    if format == "movielens":
        return movielens.read_events(path, report, chunk_rows, progress, encoding, types, rating_rule,
                                     max_future)
    with Source(path, encoding or "utf-8", progress) as source:
        if format == "csv":
            table = CsvTable(source, header=True)
            table.require("user_id", "item_id", "ts")
            for name in table.names:
                if name not in FIELDS:
                    report.note(f"{source.path}: column {name!r} is not an event field: ignored")
            tables = table.chunks(FIELDS, chunk_rows)
            has_event_id = "event_id" in table.names
        else:
            tables = JsonLines(source, report).chunks(FIELDS, chunk_rows)
            has_event_id = True
    return emit(source, report, tables,
                lambda rows: _generic(rows, types, types[default_type], has_event_id, max_future))


def _generic(rows: Rows, types: Mapping[str, int], default: int, has_event_id: bool,
             max_future: float) -> EventChunk:
    columns = rows.columns
    user_id = convert.ids(rows, "user_id")
    item_id = convert.ids(rows, "item_id")
    ts = convert.times(rows, "ts", required=True, max_future=max_future)
    kind = (convert.choices(rows, "type", types, default) if "type" in columns
            else np.full(rows.n, default, dtype=np.int16))
    value = convert.numbers(rows, "value") if "value" in columns else np.full(rows.n, np.nan)
    event_id = convert.texts(rows, "event_id") if has_event_id else None
    return EventChunk(user_id, item_id, ts, kind, value, event_id, rows.lines)
