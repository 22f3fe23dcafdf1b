"""The core's progress (``precompute/progress.py``) on the terminal: lines echoed, counts drawn as a progress bar."""

from __future__ import annotations

import click

from precompute.progress import Count


class Reporter:
    """A ``progress`` callable for the core's long functions, used as a context manager (the last bar is closed on
    the way out, whatever happens). Each line is echoed, indented; a run of ``Count`` lines of one total and unit
    is one ``click.progressbar`` (on a terminal it redraws in place; into a file or pipe it writes its label once,
    not a line per update)."""

    def __init__(self, indent: str = "  ") -> None:
        self.indent = indent
        self._bar = None
        self._of: tuple[int, str] | None = None
        self._at = 0

    def __call__(self, line: str) -> None:
        if not isinstance(line, Count):
            self.close()
            click.echo(f"{self.indent}{line}")
            return
        if self._bar is None or self._of != (line.total, line.unit) or line.done < self._at:
            self.close()
            self._bar = click.progressbar(length=line.total, label=f"{self.indent}{line.unit}")
            self._bar.__enter__()
            self._of, self._at = (line.total, line.unit), 0
        self._bar.update(line.done - self._at)
        self._at = line.done
        if line.done >= line.total:
            self.close()

    def close(self) -> None:
        if self._bar is not None:
            bar, self._bar = self._bar, None
            bar.__exit__(None, None, None)

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
