"""``manage.py serve``: the API under gunicorn."""

from __future__ import annotations

import os
import sys

import click

from . import command, metrics_dir
from .embedded import ensure_redis


@command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True)
@click.option("--workers", "http_workers", type=click.IntRange(1, 64), default=2, show_default=True)
@click.pass_obj
def serve(obj, host: str, port: int, http_workers: int) -> None:
    """Serve the API under gunicorn. Its worker processes count metrics in one directory, emptied now
    (``<PREFEED_VAR_DIR>/metrics/api-<port>``), so a scrape of ``/metrics`` sees every process's counts; each request
    is one JSON line on stderr (gunicorn's own access log is off)."""
    settings = ensure_redis(obj.settings)
    metrics_dir.fresh(settings, f"api-{port}")
    _gunicorn(host, port, http_workers)


def _gunicorn(host: str, port: int, http_workers: int) -> None:
    os.execvp(sys.executable, [sys.executable, "-m", "gunicorn", "--workers", str(http_workers),
                               "--bind", f"{host}:{port}", "--log-level", "warning",
                               "-c", "python:api.gunicorn_hooks", "api.wsgi:app"])
