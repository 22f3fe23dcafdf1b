"""``manage.py serve``: the API under gunicorn."""

from __future__ import annotations

import os
import sys

import click

from precompute.data import api_keys
from precompute.errors import ConfigError

from . import metrics_dir
from .group import command
from .embedded import ensure_redis

#: Default request threads per API worker process: 50 slow clients (the security review's test) leave threads free
#: on either of two workers, however the connections fall between them.
THREADS = 64


@command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=8000, show_default=True)
@click.option("--workers", "http_workers", type=click.IntRange(1, 64), default=2, show_default=True)
@click.option("--threads", type=click.IntRange(1, 1024), default=THREADS, show_default=True,
              help="Request threads per worker process: each connection still sending its request holds one.")
@click.pass_obj
def serve(obj, host: str, port: int, http_workers: int, threads: int) -> None:
    """Serve the API under gunicorn. Its worker processes count metrics in one directory, emptied now
    (``<PREFEED_VAR_DIR>/metrics/api-<port>``), so a scrape of ``/metrics`` sees every process's counts; each request
    is one JSON line on stderr (gunicorn's own access log is off).

    Threaded workers (gunicorn's ``gthread``): an idle connection waits in the worker's poller and costs no thread,
    and a client that sends its request slowly holds one thread of ``--threads``, not the whole process as a sync
    worker would (two such clients stopped a two-worker API). Past workers × threads slow clients, requests queue:
    in production a buffering proxy in front (docker-compose's nginx) takes whole requests before they reach
    gunicorn."""
    token = obj.settings.admin_token
    if token and len(token) < api_keys.ADMIN_TOKEN_MIN_LENGTH:
        raise ConfigError(f"PREFEED_ADMIN_TOKEN must be at least {api_keys.ADMIN_TOKEN_MIN_LENGTH} characters, got "
                          f"{len(token)}: make one with `openssl rand -hex 32`")
    settings = ensure_redis(obj.settings)
    metrics_dir.fresh(settings, f"api-{port}")
    _gunicorn(host, port, http_workers, threads)


def _gunicorn(host: str, port: int, http_workers: int, threads: int) -> None:
    os.execvp(sys.executable, [sys.executable, "-m", "gunicorn", "--workers", str(http_workers),
                               "--worker-class", "gthread", "--threads", str(threads),
                               "--bind", f"{host}:{port}", "--log-level", "warning",
                               "-c", "python:api.gunicorn_hooks", "api.wsgi:app"])
