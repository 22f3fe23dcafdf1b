"""``manage.py serve``: the API under gunicorn."""

from __future__ import annotations

import os
import sys

import click

from . import command
from .embedded import ensure_redis


@command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True)
@click.option("--workers", "http_workers", type=click.IntRange(1, 64), default=2, show_default=True)
@click.pass_obj
def serve(obj, host: str, port: int, http_workers: int) -> None:
    """Serve the API under gunicorn."""
    ensure_redis(obj.settings)
    _gunicorn(host, port, http_workers)


def _gunicorn(host: str, port: int, http_workers: int) -> None:
    os.execvp(sys.executable, [sys.executable, "-m", "gunicorn", "--workers", str(http_workers),
                               "--bind", f"{host}:{port}", "--access-logfile", "-", "--log-level", "warning",
                               "api.wsgi:app"])
