"""prefeed's structured log lines: one JSON object per line, under the ``prefeed`` logger.

The API logs one line per request (``prefeed.requests``, ``api/logs.py``) and the worker one line per job
(``prefeed.jobs``, ``jobs/metrics.py``); their fields are passed as ``extra={"fields": {...}}`` and become keys of
the object next to ``ts`` (epoch s), ``level``, ``logger`` and ``msg``. ``configure`` sends the ``prefeed`` logger's
lines to stderr at ``PREFEED_LOG_LEVEL`` and stops them propagating to the root logger, whose plain-text format
(the CLI's ``-v``) would print them a second time.
"""

from __future__ import annotations

import logging
import sys

import orjson

from .settings import Settings

ROOT = "prefeed"


class JsonFormatter(logging.Formatter):
    """A record as one line of JSON: its fields, and the exception's traceback as ``exc`` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line = {"ts": round(record.created, 6), "level": record.levelname, "logger": record.name,
                "msg": record.getMessage()}
        fields = getattr(record, "fields", None)
        if fields:
            line.update(fields)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at each line (a test's capture, a redirected stream), never to a stream
    closed since ``configure`` ran."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def configure(settings: Settings, handler: logging.Handler | None = None) -> logging.Logger:
    """Send ``prefeed.*`` lines as JSON to ``handler`` (default: stderr) at ``PREFEED_LOG_LEVEL``; idempotent (the
    handler installed by an earlier call is replaced). Returns the ``prefeed`` logger."""
    logger = logging.getLogger(ROOT)
    for old in [h for h in logger.handlers if isinstance(h.formatter, JsonFormatter)]:
        logger.removeHandler(old)
    handler = handler or _StderrHandler()
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    logger.setLevel(settings.log_level)
    logger.propagate = False
    return logger
