"""Delimited text files (CSV, tab- or pipe-separated) cut into ``Rows`` of at most ``chunk_rows`` rows.

Two paths give the same rows. A chunk without quote characters (or in a format without quoting) whose lines all
hold the expected number of fields is split with ``str`` methods over the whole chunk, and its columns are slices
of one token list: no Python object per row beyond the cells, about four times the csv module's speed. Any other
chunk (quoted fields, blank lines, a wrong field count, a stray ``\\r``) goes through the csv module, which reads
quoted fields across lines and tells the rows apart.
"""

from __future__ import annotations

import csv
import operator
from collections.abc import Iterator, Sequence
from itertools import chain, islice, repeat

import numpy as np

from ...errors import InvalidInput
from .rows import Rows
from .source import Source


class CsvTable:
    """``header=True`` reads the column names from the first row; otherwise ``names`` names the columns by
    position. Rows with another number of fields are refused; blank lines are skipped silently."""

    def __init__(self, source: Source, *, header: bool, names: Sequence[str] = (), delimiter: str = ",",
                 quoting: int = csv.QUOTE_MINIMAL) -> None:
        self.source = source
        self._lines = source.lines()
        self._dialect = {"delimiter": delimiter, "quoting": quoting}
        self._consumed = 0                  # lines read so far
        if header:
            reader = csv.reader(_ended(self._lines), **self._dialect)
            try:
                first = next(reader, None)
            except csv.Error as exc:
                raise InvalidInput(f"{source.path}:1: unreadable header: {exc}") from None
            if not first:
                raise InvalidInput(f"{source.path}:1: no header (the file is empty or starts with a blank line)")
            if 1 in source.undecodable:
                raise InvalidInput(f"{source.path}:1: the header is not valid {source.encoding}")
            self._consumed = reader.line_num
            names = [name.strip() for name in first]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise InvalidInput(f"{source.path}:1: column {twice[0]!r} appears twice in the header")
        self.names = list(names)

    def require(self, *required: str) -> None:
        missing = [n for n in required if n not in self.names]
        if missing:
            raise InvalidInput(f"{self.source.path}:1: no {missing[0]!r} column in the header "
                               f"(found: {', '.join(self.names) or 'nothing'})")

    def chunks(self, wanted: Sequence[str], chunk_rows: int) -> Iterator[Rows]:
        """Chunks holding the ``wanted`` columns (those of them the file has)."""
        index = {name: self.names.index(name) for name in wanted if name in self.names}
        while True:
            lines = list(islice(self._lines, chunk_rows))
            if not lines:
                return
            tokens = self._split(lines)
            if tokens is not None:
                width = len(self.names)
                starts = np.arange(self._consumed + 1, self._consumed + 1 + len(lines), dtype=np.int64)
                self._consumed += len(lines)
                rows = Rows(self.source.path, {name: tokens[i::width] for name, i in index.items()}, starts)
            else:
                rows = self._parse(lines, index)
            if rows.n:
                rows.refuse_undecodable(self.source.undecodable, self.source.encoding, self._consumed)
                yield rows

    def _split(self, lines: list[str]) -> list[str] | None:
        """Every cell of the chunk in one list (row-major), or None when the chunk needs the csv module."""
        text = "\n".join(lines)
        delimiter = self._dialect["delimiter"]
        if "\r" in text or (self._dialect["quoting"] != csv.QUOTE_NONE and '"' in text) or "" in lines:
            return None
        fields = np.fromiter(map(str.count, lines, repeat(delimiter)), dtype=np.int64, count=len(lines))
        if (fields != len(self.names) - 1).any():
            return None
        return text.replace("\n", delimiter).split(delimiter)

    def _parse(self, lines: list[str], index: dict[str, int]) -> Rows:
        """The chunk's rows by the csv module; a quoted field may run on past the chunk's last line."""
        reader = csv.reader(_ended(chain(lines, self._lines)), **self._dialect)
        raw, starts, errors = _gather(reader, len(lines))
        starts += self._consumed
        errors = {line + self._consumed: text for line, text in errors.items()}
        self._consumed += reader.line_num
        width = len(self.names)
        lengths = np.fromiter(map(len, raw), dtype=np.int64, count=len(raw))
        blank = (lengths == 0) & ~np.isin(starts, list(errors))
        if blank.any():
            raw = [row for row, b in zip(raw, blank.tolist()) if not b]
            starts, lengths = starts[~blank], lengths[~blank]
        wrong = lengths != width
        if wrong.any():
            filler = [""] * width
            raw = [filler if w else row for row, w in zip(raw, wrong.tolist())]
        columns = list(zip(*raw)) if raw else [()] * width
        rows = Rows(self.source.path, {name: columns[i] for name, i in index.items()}, starts)
        for line, text in errors.items():
            rows.refuse_row(int(np.searchsorted(starts, line)), text)
        rows.refuse(wrong, lambda i: f"expected {width} fields, found {lengths[i]}")
        return rows


def _ended(lines: Iterator[str]) -> Iterator[str]:
    """Lines with their ``\\n`` back: the csv module keeps the line end inside a quoted field only if it sees it."""
    return map(operator.add, lines, repeat("\n"))


def _gather(reader, n: int) -> tuple[list, np.ndarray, dict[int, str]]:
    """Up to ``n`` rows, each row's first line (counted from the reader's start), and the rows the csv module
    could not read (line → reason, each standing as an empty row in its place)."""
    rows, starts, errors = [], [], {}
    while len(rows) < n:
        before, k = reader.line_num, len(rows)
        try:
            rows.extend(islice(reader, n - k))
            error = None
        except csv.Error as exc:
            error = exc
        got = len(rows) - k
        if error is None and reader.line_num - before == got:
            starts.append(np.arange(before + 1, before + 1 + got, dtype=np.int64))
        else:                               # quoted fields spanning lines: count the line ends inside them
            spans = np.fromiter((1 + sum(cell.count("\n") for cell in row) for row in rows[k:]),
                                dtype=np.int64, count=got)
            starts.append(before + 1 + np.cumsum(spans) - spans)
            if error is not None:
                line = before + 1 + int(spans.sum())
                errors[line] = f"unreadable CSV: {error}"
                rows.append([])
                starts.append(np.array([line], dtype=np.int64))
                continue
        if got < n - k:
            break
    return rows, (np.concatenate(starts) if starts else np.zeros(0, np.int64)), errors
