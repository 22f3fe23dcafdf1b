"""Progress of the core's long work (replaying steps, training periods), told to whoever runs it.

The long functions take ``progress: Callable[[str], None]`` and call it with lines of text, so the core knows
nothing of terminals. A line that counts work done is a ``Count``: still text (any caller may print it as it is),
and it carries ``done`` and ``total``, which the CLI (``cli/progress.py``) draws as one progress bar instead of a
line per update.
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]


class Count(str):
    """``"done/total unit"``, with its numbers: ``Count(128, 12071, "steps")``."""

    done: int
    total: int
    unit: str

    def __new__(cls, done: int, total: int, unit: str) -> Count:
        line = super().__new__(cls, f"{done}/{total} {unit}")
        line.done, line.total, line.unit = int(done), int(total), unit
        return line


def indented(progress: Progress, prefix: str = "  ") -> Progress:
    """``progress`` for a part of the work: its lines indented by ``prefix``, its counts passed on as they are."""
    return lambda line: progress(line if isinstance(line, Count) else f"{prefix}{line}")
