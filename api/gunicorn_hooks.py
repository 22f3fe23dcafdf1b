"""gunicorn configuration for ``manage.py serve`` (``-c python:api.gunicorn_hooks``).

A worker process that exits (restarted by gunicorn after a timeout or a crash) is marked dead in the metrics
directory: prometheus_client then drops its live gauges; its counters keep counting in the totals."""

from __future__ import annotations

import os


def child_exit(server, worker) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
