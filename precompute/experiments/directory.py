"""Which experiment and arm a served page belongs to, as an API process answers it (``GET /feed``).

A precomputed page belongs to the arm that ranked its feed (the feed's header records it: ``feeds/codec.py``), even
when the user's arm has changed since and their feed is still being rebuilt; a page ranked outside any experiment
belongs to none. A fallback page (no feed yet) belongs to the arm the user is assigned to now. The experiments are
read from the database at most every ``ttl`` seconds per process, by the page that finds the last read too old while
the pages that arrive during the read go on with the last one (if it is at most ``2 * ttl`` old; else they wait for
the read); while the database cannot be reached the last read stands.
"""

from __future__ import annotations

import logging
import threading
import time

from ..errors import database_errors
from .experiment import RUNNING, Experiment, assign_one
from .registry import all_experiments

log = logging.getLogger(__name__)


class Directory:
    def __init__(self, engine, ttl: float = 2.0) -> None:
        self.engine, self.ttl = engine, ttl
        self.by_id: dict[int, Experiment] = {}
        self.running: list[Experiment] = []
        self.read_at = float("-inf")
        self.lock = threading.Lock()

    def refresh(self) -> None:
        now = time.monotonic()
        if now - self.read_at < self.ttl:
            return
        # While one thread reads, the others go on with the last read if it is at most two ages old; an older one
        # (the first read, or the first after a quiet spell) is waited for.
        if not self.lock.acquire(blocking=now - self.read_at >= 2 * self.ttl):
            return
        try:
            if now - self.read_at < self.ttl:
                return
            try:
                every = all_experiments(self.engine)
            except database_errors() as exc:
                log.warning("experiments: keeping the last read (%s)", type(exc).__name__)
                self.read_at = now
                return
            self.by_id = {e.id: e for e in every}
            self.running = [e for e in every if e.status == RUNNING]
            self.read_at = now
        finally:
            self.lock.release()

    def place(self, user_id: int, experiment: int | None, arm: int | None) -> tuple[int, int, str | None,
                                                                               str | None]:
        """``(experiment id, arm index, experiment name, arm name)`` of a page, ``(0, 0, None, None)`` outside any:
        of the feed's ``experiment`` id and ``arm`` index when the page is precomputed (``experiment`` 0: none), of
        the user's assignment now when it is a fallback (None)."""
        self.refresh()
        if experiment is None:
            which, arm = assign_one(self.running, user_id)
            if which < 0:
                return 0, 0, None, None
            found = self.running[which]
        else:
            found = self.by_id.get(experiment) if experiment else None
            if found is None or not 0 <= arm < len(found.arms):
                return 0, 0, None, None
        return found.id, arm, found.name, found.arms[arm].name
