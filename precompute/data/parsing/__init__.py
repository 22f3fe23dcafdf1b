"""Parsing: catalogue and interaction-log files turned into validated, normalized chunks of numpy arrays.

This package parses; it writes nothing. ``importing/`` stores each chunk while the import commands drive a progress
bar; here only ``errors`` and ``settings`` of prefeed are imported.

    from precompute.data.parsing import Report, read_events
    report = Report(strict=False)
    for chunk in read_events("ratings.csv", "movielens", report=report, max_future=60, progress=lambda done: ...):
        ...   # chunk.user_id, chunk.item_id, chunk.ts, chunk.type, chunk.value, chunk.event_id, chunk.lines
    report.accepted, report.refused, report.bad_rows, report.notes

Formats: ``items.py`` (generic CSV, JSON lines), ``events.py`` (generic CSV, JSON lines), ``movielens.py``
(``u.item``, ``movies.csv``, ``u.data``, ``ratings.csv``, the genre table and the rating rule). Validity of a
cell, for every format: ``convert.py`` and ``timestamps.py``. Chunks: ``chunks.py``; refused rows: ``report.py``.

Memory is constant: a file is read in 1 MiB blocks of whole lines (``source.py``), cut into chunks of
``chunk_rows`` rows (``rows.py``: the csv module, or ``jsonl.py``), and each chunk's columns are converted whole
(``cells.py``). Files are UTF-8 unless said otherwise (``encoding=``, any ASCII-compatible codec); ``u.item`` is
Latin-1. A row that cannot be used is refused with its file, line and reason, counted, and skipped; with
``Report(strict=True)`` the first one raises ``InvalidInput`` instead. A file that cannot be used as a whole (no
such file, a missing required column) raises ``InvalidInput`` in either mode.
"""

from .chunks import CHUNK_ROWS, EventChunk, ItemChunk
from .convert import MAX_ID
from .events import DEFAULT_EVENT_TYPES, EVENT_FORMATS, read_events
from .items import ITEM_FORMATS, read_items
from .movielens import GENRES, RatingRule
from .report import BadRow, Report

__all__ = ["BadRow", "CHUNK_ROWS", "DEFAULT_EVENT_TYPES", "EVENT_FORMATS", "EventChunk", "GENRES", "ITEM_FORMATS",
           "ItemChunk", "MAX_ID", "RatingRule", "Report", "read_events", "read_items"]
