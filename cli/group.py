"""The ``manage.py`` command group and what every command module shares: ``command`` (expected failures as one line
and their declared exit code), ``fail``, ``echo_table`` and ``main``."""

from __future__ import annotations

import functools
import logging

import click

from precompute.errors import as_prefeed_error
from precompute.settings import Settings


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Log progress of workers and jobs.")
@click.pass_context
def cli(ctx: click.Context, verbose: bool) -> None:
    """prefeed: precomputed, ranked recommendation feeds."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ctx.obj = _Lazy()


class _Lazy:
    """Settings are read when a command runs, not when the CLI module is imported."""

    _settings: Settings | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = Settings.from_env()
        return self._settings


def command(group: click.Group = cli, **kwargs):
    """Like ``group.command`` but expected failures become one line on stderr and their declared exit code."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kw):
            try:
                return fn(*args, **kw)
            except Exception as exc:
                known = as_prefeed_error(exc)
                if known is None:
                    raise
                fail(str(known), known.exit_code)

        return group.command(**kwargs)(wrapper)

    return decorate


def echo_table(rows: list[tuple[str, ...]]) -> None:
    """Print ``rows`` (the header first) as left-aligned columns two spaces apart; a shorter row leaves its last
    columns empty."""
    widths = [max(len(r[i]) for r in rows if len(r) > i) for i in range(len(rows[0]))]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def fail(message: str, code: int):
    """Print ``error: message`` on stderr and exit with ``code``."""
    click.echo(f"error: {message}", err=True)
    raise SystemExit(code)


def main() -> int:
    """``manage.py``: run the group; bad arguments and Ctrl-C end in one line too."""
    try:
        result = cli.main(standalone_mode=False)
    except click.ClickException as exc:          # bad arguments: one line, exit 2
        click.echo(f"error: {exc.format_message()}", err=True)
        return exc.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        return 130
    return result if isinstance(result, int) else 0
