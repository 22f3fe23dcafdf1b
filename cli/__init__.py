"""The ``manage.py`` command group. Expected failures print one line and exit non-zero; see ``run``."""

from __future__ import annotations

import functools
import logging

import click
import redis
from sqlalchemy.exc import SQLAlchemyError

from precompute.config import Settings
from precompute.errors import PrefeedError, Unavailable


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
    """Like ``group.command`` but expected failures become one line on stderr and a non-zero exit code."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kw):
            try:
                return fn(*args, **kw)
            except PrefeedError as exc:
                _fail(str(exc), exc.exit_code)
            except redis.RedisError as exc:
                _fail(str(Unavailable("redis", str(exc).splitlines()[0][:200])), Unavailable.exit_code)
            except SQLAlchemyError as exc:
                from precompute.db import _short
                _fail(str(Unavailable("database", _short(exc))), Unavailable.exit_code)

        return group.command(**kwargs)(wrapper)

    return decorate


def _fail(message: str, code: int):
    click.echo(f"error: {message}", err=True)
    raise SystemExit(code)


from . import data, run  # noqa: E402,F401  (commands register themselves on ``cli``)
