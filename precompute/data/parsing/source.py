"""A file read in binary blocks of whole lines: decoded text, exact line numbers, bytes read so far.

Reading bytes ourselves, rather than through a text-mode file, gives three things the parsers need: a byte count
for a progress bar, a decode error tied to its line (a text-mode file raises ``UnicodeDecodeError`` mid-iteration
and loses its place), and lines split only at ``\\n`` (``str.splitlines`` also splits at ``\\r``, ``\\x1c`` and
Unicode line separators, which may sit inside a quoted CSV field). Memory is one block plus its lines.
"""

from __future__ import annotations

import codecs
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from ...errors import InvalidInput

BLOCK_BYTES = 1 << 20


class Source:
    """Lines of ``path`` without their line end (``\\n`` or ``\\r\\n``).

    A line that is not valid in ``encoding`` is decoded with replacement characters and its number kept in
    ``undecodable``, so the row parsed from it can be refused with its line. A UTF-8 byte-order mark is dropped.
    The file is closed by ``close()``, at the end of the lines, or when the source is dropped (its reader holds
    no reference back to it, so that happens at once, not at the next garbage collection).
    """

    def __init__(self, path: str | Path, encoding: str = "utf-8", progress: Callable[[int], None] | None = None,
                 block_bytes: int | None = None) -> None:
        self.path = str(path)
        try:
            ascii_compatible = "\n|,".encode(codecs.lookup(encoding).name) == b"\n|,"
        except LookupError:
            ascii_compatible = False
        if not ascii_compatible:
            raise InvalidInput(f"{self.path}: encoding {encoding!r} is not known or not ASCII-compatible")
        self.encoding = encoding
        self._progress = progress
        try:
            self._file = open(path, "rb")  # noqa: SIM115 -- closed by close() or the reader's end
        except OSError as exc:
            raise InvalidInput(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        self._state = _Decoded(encoding)
        self._blocks = _blocks(self._file, block_bytes or BLOCK_BYTES, self._state)
        self._first = next(self._blocks, [])        # enters the reader's ``with``: its end closes the file

    @property
    def undecodable(self) -> set[int]:
        return self._state.undecodable

    @property
    def bytes_read(self) -> int:
        return self._state.bytes_read

    def lines(self) -> Iterator[str]:
        """Every line once, in order; each list of a block is chained in C, so a line costs no Python call."""
        return itertools.chain(self._first, itertools.chain.from_iterable(self._blocks))

    def report_progress(self) -> None:
        if self._progress is not None:
            self._progress(self.bytes_read)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Source:
        return self

    def __exit__(self, kind: type | None, *_: object) -> None:
        """Close the file if the block raised (a header that cannot be used); else the chunk loop closes it."""
        if kind is not None:
            self.close()


class _Decoded:
    """What reading has found so far: bytes read, lines handed out, lines that were not valid."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self.bytes_read = 0
        self.lines_out = 0
        self.undecodable: set[int] = set()

    def lines(self, data: bytes, final: bool) -> list[str]:
        first = self.lines_out + 1
        try:
            text = data.decode(self.encoding)
            if "\r" in text:
                text = text.replace("\r\n", "\n")
            lines = text.split("\n")
        except UnicodeDecodeError:
            lines = []
            for number, raw in enumerate(data.split(b"\n"), first):
                try:
                    lines.append(raw.decode(self.encoding).removesuffix("\r"))
                except UnicodeDecodeError:
                    lines.append(raw.decode(self.encoding, errors="replace").removesuffix("\r"))
                    self.undecodable.add(number)
        if not final:
            lines.pop()                     # the empty text after the block's last "\n"
        if first == 1 and lines and lines[0].startswith("\ufeff"):
            lines[0] = lines[0][1:]
        self.lines_out += len(lines)
        return lines


def _blocks(file: BinaryIO, size: int, state: _Decoded) -> Iterator[list[str]]:
    """The lines of each block of whole lines (a block grows until it holds a line end)."""
    rest = b""
    with file:
        while True:
            data = file.read(size)
            if not data:
                if rest:
                    state.bytes_read += len(rest)
                    yield state.lines(rest, final=True)
                return
            data = rest + data
            end = data.rfind(b"\n") + 1
            if end == 0:
                rest = data
                continue
            rest = data[end:]
            state.bytes_read += end
            yield state.lines(data[:end], final=False)
