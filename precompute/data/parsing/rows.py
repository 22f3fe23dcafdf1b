"""Raw rows of one chunk as text columns, each row's line number, and the rows refused so far.

Every format (CSV, tab- or pipe-separated, JSON lines) becomes ``Rows`` of text cells first, so one set of
converters (``convert.py``) decides what a valid id, number or time is, whatever the file's syntax.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .report import Report


class Rows:
    """``columns``: name → a sequence of text cells ('' = empty), one per row; ``lines``: each row's first line."""

    def __init__(self, path: str, columns: dict[str, Sequence[str]], lines: np.ndarray) -> None:
        self.path = path
        self.columns = columns
        self.lines = lines
        self.n = len(lines)
        self.refused = np.zeros(self.n, dtype=bool)
        self._reasons: dict[int, str] = {}

    def refuse(self, mask: np.ndarray, reason: Callable[[int], str]) -> None:
        """Refuse the rows in ``mask``; ``reason(i)`` explains row ``i`` (a row keeps the first reason given)."""
        for i in np.flatnonzero(mask & ~self.refused).tolist():
            self._reasons[i] = reason(i)
        self.refused |= mask

    def refuse_row(self, i: int, reason: str) -> None:
        if not self.refused[i]:
            self.refused[i] = True
            self._reasons[i] = reason

    def refuse_undecodable(self, lines: set[int], encoding: str, last_line: int) -> None:
        """Refuse rows containing a line that was not valid in ``encoding``; ``last_line``: the chunk's last line
        (its last row may span several). The lines up to it are taken out of ``lines``."""
        if not lines or not self.n:
            return
        hit = sorted(x for x in lines if x <= last_line)    # rows of a later chunk keep theirs
        for line in hit:
            lines.discard(line)
            i = int(np.searchsorted(self.lines, line, side="right")) - 1
            if i >= 0:
                self.refuse_row(i, f"not valid {encoding} (is the file in another encoding?)")

    def finish(self, report: Report) -> np.ndarray:
        """Hand the refused rows to ``report`` in line order; the mask of the rows kept."""
        for i in sorted(self._reasons, key=lambda i: self.lines[i]):
            report.refuse(self.path, int(self.lines[i]), self._reasons[i])
        keep = ~self.refused
        report.accepted += int(keep.sum())
        return keep
