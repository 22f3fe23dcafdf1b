"""The log's clock: the instant features, time windows and popularity are computed at, in training and precompute
alike.

It is the newest event time the database holds (one lookup on ``ix_events_ts``; a scan of the events table while a
bulk import has that index down, ``importing/tuning.py``), or ``PREFEED_AS_OF`` when set. Not the wall clock: a
replayed historical log then gets the same recency features at serve time that the model saw in training, where
the clock is the time split. Everything at or before the clock is known, nothing after.
"""

from __future__ import annotations

import time

from sqlalchemy import func, select

from ..settings import Settings
from .tables import Event


def newest_event(conn) -> float | None:
    """The newest event time in the database; None for an empty log."""
    newest = conn.execute(select(func.max(Event.ts))).scalar()
    return None if newest is None else float(newest)


def log_clock(conn, settings: Settings) -> float:
    """``PREFEED_AS_OF`` if set, else the newest event time (the wall clock for an empty log)."""
    if settings.as_of:
        return float(settings.as_of)
    newest = newest_event(conn)
    return time.time() if newest is None else newest
