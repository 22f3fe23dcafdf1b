"""MovieLens files: ``u.item`` and ``u.data`` (ML-100K), ``movies.csv`` and ``ratings.csv`` (ML-25M, ml-latest).

Categories are genres, with one table for both item files (``GENRES``), so a film gets the same category ids
from either: the 19 ``u.item`` flags in their order are ids 0 to 18 (``unknown`` is 0), ``movies.csv`` names the
same genres (``Children`` is ``u.item``'s ``Children's``) plus ``IMAX``, 19. ``(no genres listed)`` is no
category. A genre name outside the table is not refused: it gets the stable id ``2**32 + crc32(name)``, the same in
every import, noted once in the report; refusing it would drop the film and leave its ratings pointing at nothing.
A ``u.item`` release date (``01-Jan-1995``) becomes ``created_at``, UTC midnight; ``movies.csv`` has none. Titles
and URLs are not kept. The ``::``-separated ``.dat`` files of ML-1M and ML-10M are refused with a hint.

**Ratings become events by ``RatingRule``**: each rating is one event with ``value`` = the rating, of type
``purchase`` when the rating is at least 4, else ``view``. Why one event and not a view plus a purchase: type
weights already grade the two (popularity, co-visitation strength and the ranker's graded labels all read the
type), and a second event at the same time for half of all ratings would double-count each film in co-visitation
windows and inflate the log by ~50% for no new information. Why ≥ 4 is the strong type: MovieLens ratings are
explicit feedback, and ≥ 4 (of 5) is the usual "relevant" threshold in evaluations on it; a low rating is still an
interaction (the user chose and watched the film), so it stays a view, and the feed leaves it out as seen. The
threshold and both types are parameters; ``threshold=None`` makes every rating the base type.
"""

from __future__ import annotations

import csv
import dataclasses
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np

from ...errors import ConfigError, InvalidInput
from . import convert
from .chunks import EventChunk, ItemChunk, emit, item_chunk
from .delimited import CsvTable
from .report import Report, short
from .rows import Rows
from .source import Source
from .timestamps import parse

U_ITEM_GENRES = ("unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary",
                 "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller",
                 "War", "Western")
GENRES = {**{name: i for i, name in enumerate(U_ITEM_GENRES)}, "Children": 4, "IMAX": 19}
NO_GENRES = "(no genres listed)"
UNKNOWN_GENRE_BASE = 1 << 32
MONTHS = {m: f"{i:02d}" for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
                                                "Nov", "Dec"), 1)}
U_ITEM_FIELDS = ("item_id", "title", "release_date", "video_release_date", "imdb_url",
                 *(f"genre{k}" for k in range(19)))


@dataclasses.dataclass(frozen=True)
class RatingRule:
    """A rating becomes one event: type ``strong`` when rating ≥ ``threshold``, else ``base``; value = rating."""

    threshold: float | None = 4.0
    strong: str = "purchase"
    base: str = "view"

    def types(self, ratings: np.ndarray, codes: Mapping[str, int]) -> np.ndarray:
        for name in (self.base, self.strong):
            if name not in codes:
                raise ConfigError(f"rating rule: event type {name!r} is not declared ({', '.join(codes)})")
        if self.threshold is None:
            return np.full(len(ratings), codes[self.base], dtype=np.int16)
        return np.where(ratings >= self.threshold, codes[self.strong], codes[self.base]).astype(np.int16)


def _first_line(path: str | Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.readline(65536)
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read: {exc.strerror or exc}") from None


def _refuse_dat(path: str | Path, first: bytes) -> None:
    if b"::" in first:
        raise InvalidInput(f"{path}: a '::'-separated MovieLens .dat file (ML-1M/10M) is not supported; convert it "
                           "first, e.g. sed 's/::/\\t/g' for ratings.dat (then it reads as u.data)")


def read_items(path: str | Path, report: Report, chunk_rows: int, progress: Callable[[int], None] | None,
               encoding: str | None, max_future: float) -> Iterator[ItemChunk]:
    first = _first_line(path)
    _refuse_dat(path, first)
    if first.lstrip(b"\xef\xbb\xbf").startswith(b"movieId"):
        with Source(path, encoding or "utf-8", progress) as source:
            table = CsvTable(source, header=True)
            table.require("movieId", "genres")
        return emit(source, report, table.chunks(["movieId", "genres"], chunk_rows),
                    lambda rows: _movies_csv(rows, report))
    source = Source(path, encoding or "latin-1", progress)
    table = CsvTable(source, header=False, names=U_ITEM_FIELDS, delimiter="|", quoting=csv.QUOTE_NONE)
    return emit(source, report, table.chunks(["item_id", "release_date", *U_ITEM_FIELDS[5:]], chunk_rows),
                lambda rows: _u_item(rows, max_future))


def _u_item(rows: Rows, max_future: float) -> ItemChunk:
    item_id = convert.ids(rows, "item_id")
    cells = rows.columns["release_date"]
    iso = [_iso_date(cell) for cell in cells]             # ~1,700 films: a Python step per row costs nothing
    created_at, failed = parse(iso)
    rows.refuse(failed, lambda i: f"release date {short(cells[i])} is not a date like 01-Jan-1995")
    rows.refuse(convert.after(created_at, max_future),
                lambda i: f"release date {short(cells[i])} is more than {max_future:g} s after now")
    flags = np.array([rows.columns[f"genre{k}"] for k in range(19)], dtype=str).reshape(19, rows.n)
    rows.refuse(~np.isin(flags, ("0", "1")).all(axis=0), lambda i: "genre flags must be 0 or 1, found "
                + short("|".join(flags[:, i].tolist()), 60))
    owner, genre = np.nonzero((flags == "1").T)
    return item_chunk(rows, item_id, owner, genre, created_at=created_at)


def _iso_date(cell: str) -> str:
    """``01-Jan-1995`` → ``1995-01-01``; empty stays empty; anything else → ``?`` (no time)."""
    if not cell.strip():
        return ""
    parts = cell.strip().split("-")
    if len(parts) != 3 or parts[1] not in MONTHS or not parts[0].isdigit() or len(parts[2]) != 4:
        return "?"
    return f"{parts[2]}-{MONTHS[parts[1]]}-{parts[0].zfill(2)}"


def _movies_csv(rows: Rows, report: Report) -> ItemChunk:
    item_id = convert.ids(rows, "movieId")
    cells = [cell.strip() for cell in rows.columns["genres"]]
    counts = np.array([0 if not c or c == NO_GENRES else c.count("|") + 1 for c in cells], dtype=np.int64)
    names = "|".join(c for c, k in zip(cells, counts.tolist()) if k).split("|") if counts.any() else []
    owner = np.repeat(np.arange(rows.n), counts)
    genre = np.array([GENRES.get(name, -1) for name in names], dtype=np.int64)
    for k in np.flatnonzero(genre < 0).tolist():
        name = names[k]
        if not name:
            rows.refuse_row(int(owner[k]), f"genres {short(cells[owner[k]])} has an empty name")
            continue
        genre[k] = UNKNOWN_GENRE_BASE + zlib.crc32(name.encode("utf-8"))
        if not rows.refused[owner[k]]:
            report.note(f"{rows.path}: genre {name!r} is not a MovieLens genre: category id {genre[k]}")
    return item_chunk(rows, item_id, owner, genre)


def read_events(path: str | Path, report: Report, chunk_rows: int, progress: Callable[[int], None] | None,
                encoding: str | None, codes: Mapping[str, int], rule: RatingRule,
                max_future: float) -> Iterator[EventChunk]:
    first = _first_line(path)
    _refuse_dat(path, first)
    rule.types(np.zeros(0), codes)                        # an impossible rule fails before any row is read
    with Source(path, encoding or "utf-8", progress) as source:
        if first.lstrip(b"\xef\xbb\xbf").startswith(b"userId"):
            names = ("userId", "movieId", "rating", "timestamp")
            table = CsvTable(source, header=True)
            table.require(*names)
        else:
            names = ("user_id", "item_id", "rating", "ts")
            table = CsvTable(source, header=False, names=names, delimiter="\t", quoting=csv.QUOTE_NONE)
    return emit(source, report, table.chunks(names, chunk_rows),
                lambda rows: _ratings(rows, names, codes, rule, max_future))


def _ratings(rows: Rows, names: tuple[str, ...], codes: Mapping[str, int], rule: RatingRule,
             max_future: float) -> EventChunk:
    user, item, rating, ts = names
    user_id = convert.ids(rows, user)
    item_id = convert.ids(rows, item)
    value = convert.numbers(rows, rating, required=True)
    ts = convert.times(rows, ts, required=True, max_future=max_future)
    return EventChunk(user_id, item_id, ts, rule.types(value, codes), value, None, rows.lines)
