"""Importing a catalogue or an event log into the database: the parsed chunks (``parsing/``) written in
constant memory, one transaction per chunk, idempotently.

    result = import_events(engine, "ratings.csv", "movielens", settings, progress=bar_update)
    result.events_stored, result.duplicates, result.report.refused, result.users_affected

**Chunks.** Each chunk (``parsing.CHUNK_ROWS`` rows) commits on its own: events, new users and items, version
bumps and kept values together. A crash leaves whole chunks; running the import again stores the rest and nothing
twice (``events.py`` says when two events are the same). Items are upserted whole (``items.upsert``) with
``keep_active``: an import does not revive an item an admin deactivated; new items are active.

**Strict.** ``strict=True`` writes nothing when any row is bad: the file is read twice, a first pass that only
validates (every row, and with ``PREFEED_EVENTS_CREATE_ITEMS=false`` that every item exists), then the same chunked
writing pass. One transaction over the whole file would give the same guarantee, but on SQLite it would hold the
database's only write lock for the whole import and the API's event writers would time out meanwhile; two passes
cost a second parse (~1 M rows/s) and keep them waiting for one chunk at most. ``progress`` then counts the bytes
of both passes (up to twice the file's size).

**Afterwards.** The affected users' feeds are older than their history version, so ``manage.py precompute
--stale`` rebuilds exactly them (``import-events --precompute`` does it for ``users_affected``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from sqlalchemy import Engine

from ...errors import as_prefeed_error, database_errors
from ...settings import Settings
from .. import items as catalogue
from ..event_types import EventTypes
from ..parsing import CHUNK_ROWS, EventChunk, RatingRule, Report, read_events, read_items
from . import events, kept, stage, tuning

Progress = Callable[[int], None]


@dataclasses.dataclass
class ImportResult:
    report: Report                  # accepted/refused rows, the first bad rows (file:line: reason), notes
    items_created: int = 0          # items new to the catalogue (upserted, or created bare for events)
    items_updated: int = 0          # existing items replaced by a row of the file
    users_created: int = 0
    events_stored: int = 0
    duplicates: int = 0             # accepted rows not stored: already stored, or earlier in the file
    #: ids of the users with newly stored events (their history version grew), ascending
    users_affected: np.ndarray = dataclasses.field(default_factory=lambda: np.empty(0, dtype=np.int64))


def default_rating_rule(settings: Settings) -> RatingRule:
    """Ratings ≥ 4 become the heaviest declared type, others the lightest (the first of equals): with the default
    declaration, ``purchase`` and ``view``, ``RatingRule``'s own default and reasons. Derived from the weights so
    that a declaration without those names (``watch:1,like:3``) still imports ratings without extra options."""
    weights = [w for _, w in settings.event_types]
    names = [n for n, _ in settings.event_types]
    strong = max(range(len(names)), key=lambda k: (weights[k], k))
    base = min(range(len(names)), key=lambda k: (weights[k], k))
    return RatingRule(threshold=4.0, strong=names[strong], base=names[base])


def import_items(engine: Engine, path: str | Path, format: str, settings: Settings, *, strict: bool = False,
                 encoding: str | None = None, progress: Progress | None = None,
                 chunk_rows: int = CHUNK_ROWS) -> ImportResult:
    """Upsert the items of ``path`` (``parsing.ITEM_FORMATS``) with their categories and declared attributes
    (``Settings.item_attributes``; other columns are ignored with a note), ``chunk_rows`` per transaction."""
    def chunks(report: Report, on_bytes: Progress | None) -> Iterator:
        return read_items(path, format, report=report, attributes=settings.item_attributes, encoding=encoding,
                          progress=on_bytes, chunk_rows=chunk_rows, max_future=settings.event_max_future)

    result = ImportResult(Report(strict=strict))
    with _connection(engine) as conn:
        if strict:
            _validate(chunks, progress)
        for chunk in chunks(result.report, _after_check(progress, path, strict)):
            with stage.transaction(conn):
                done = catalogue.upsert(conn, chunk, settings.item_attributes, keep_active=True)
            result.items_created += done.created
            result.items_updated += done.updated
    return result


def import_events(engine: Engine, path: str | Path, format: str, settings: Settings, *, strict: bool = False,
                  encoding: str | None = None, progress: Progress | None = None,
                  rating_rule: RatingRule | None = None, default_type: str | None = None,
                  chunk_rows: int = CHUNK_ROWS, notify: Callable[[str], None] | None = None) -> ImportResult:
    """Store the events of ``path`` (``parsing.EVENT_FORMATS``), creating unknown users, and unknown items bare
    unless ``Settings.events_create_items`` is off (then their rows are refused like bad rows). Types are the
    declared ``Settings.event_types``; ``default_type`` (default: the first declared) for rows without one;
    ``rating_rule`` for MovieLens ratings (default: ``default_rating_rule``). On a connection tuned for bulk
    writing, with two indexes built at the end when the table is small next to the file (``tuning.py``;
    ``notify`` hears of that last step, which has no progress of its own)."""
    types = EventTypes.of(settings).codes
    rule = rating_rule or default_rating_rule(settings)
    default = default_type or settings.event_types[0][0]
    create = settings.events_create_items
    name = str(path)

    def chunks(report: Report, on_bytes: Progress | None) -> Iterator[EventChunk]:
        return read_events(path, format, report=report, types=types, default_type=default, rating_rule=rule,
                           encoding=encoding, progress=on_bytes, chunk_rows=chunk_rows,
                           max_future=settings.event_max_future)

    result = ImportResult(Report(strict=strict))
    affected = [np.empty(0, dtype=np.int64)]
    with _connection(engine) as conn, tuning.tuned(conn):
        if strict:
            check = None if create else lambda chunk, report: events.refuse_unknown(
                chunk, events.unknown_items(conn, chunk.item_id), report, name)
            _validate(chunks, progress, check)
            conn.rollback()                     # the checks' reads: no transaction left open between chunks
        deferred = tuning.defer(conn, path)
        if deferred:
            tuning.drop_deferred(conn)
        stage.create_stage(conn)
        known_items = events.KnownItems()
        for chunk in chunks(result.report, _after_check(progress, path, strict)):
            with stage.transaction(conn):
                done = events.write(conn, chunk, result.report, name, create, settings.history_limit,
                                    settings.seen_max_items, known_items)
                users = kept.apply(conn, done.stored, settings.history_limit, settings.seen_max_items)
            result.items_created += done.items_created
            result.users_created += done.users_created
            result.events_stored += len(done.stored)
            result.report.accepted -= done.refused          # refused by the writer: counted once, as refused
            result.duplicates += len(chunk) - done.refused - len(done.stored)
            affected = [np.union1d(affected[0], users)]
        if deferred:
            tuning.build_deferred(conn, notify)
    result.users_affected = affected[0]
    return result


def _validate(chunks, progress: Progress | None, check=None) -> None:
    """The strict first pass: read every chunk with a strict report (the first bad row raises), writing nothing."""
    report = Report(strict=True)
    for chunk in chunks(report, progress):
        if check is not None:
            check(chunk, report)


def _after_check(progress: Progress | None, path: str | Path, strict: bool) -> Progress | None:
    """The writing pass's progress: after the strict pass's bytes when there was one."""
    if progress is None or not strict:
        return progress
    size = Path(path).stat().st_size
    return lambda done: progress(size + done)


class _connection:
    """One connection for the whole import; database errors become ``Unavailable`` (one line in the CLI)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def __enter__(self):
        try:
            self.conn = self.engine.connect()
        except database_errors() as exc:
            raise as_prefeed_error(exc) from exc
        return self.conn

    def __exit__(self, kind, exc, tb) -> None:
        self.conn.close()
        if isinstance(exc, database_errors()):
            raise as_prefeed_error(exc) from exc
