"""The side channel of an import: rows refused (file, line, reason), counted without limit and kept up to a cap,
and notes about the file as a whole (columns ignored, genre names given new ids).

In strict mode the first refused row raises ``InvalidInput`` with the same one line (``path:line: reason``), so
a caller that writes nothing until the file has been read whole aborts with nothing written.
"""

from __future__ import annotations

import dataclasses

from ...errors import InvalidInput

KEEP = 100              # refused rows kept for display; more are counted only


@dataclasses.dataclass(frozen=True)
class BadRow:
    path: str
    line: int           # 1-based physical line where the row starts
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclasses.dataclass
class Report:
    """Pass one to ``read_items`` / ``read_events``; read it during or after the iteration."""

    strict: bool = False
    keep: int = KEEP
    accepted: int = 0                                       # rows yielded in chunks
    refused: int = 0                                        # rows refused, all of them
    bad_rows: list[BadRow] = dataclasses.field(default_factory=list)   # the first ``keep`` of them
    notes: list[str] = dataclasses.field(default_factory=list)         # about the file, each said once

    def refuse(self, path: str, line: int, reason: str) -> None:
        row = BadRow(path, line, reason)
        if self.strict:
            raise InvalidInput(str(row))
        self.refused += 1
        if len(self.bad_rows) < self.keep:
            self.bad_rows.append(row)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def short(value: object, width: int = 40) -> str:
    """``repr`` of a cell for a reason, cut to ``width`` characters so one bad row stays one line."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"
