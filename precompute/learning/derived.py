"""The pages a replay shows: for a log imported without recorded pages (every log imported from a file), what the
product would have served before each replayed step, so that the ranker's "shown" columns (``ranking/shown.py``)
mean in training and ``evaluate`` what they mean live.

One page of ``PAGE`` items is read before each replayed step, at the top of the user's feed, at the step's clock
(the log's newest event before it). Which policy fills it:

- ``evaluate``'s replay and ``train``'s promotion check (``replay.py``): the ranker being judged, its own top of
  each earlier step (closed loop, as the product runs: a feed recomputed after a step knows the page read before it);
- ``train``'s examples (``fit.py``): the pages the product served, where the database stores them (``StoredPages``:
  a log the running product has served, whose users saw those pages and acted after them). Before the oldest stored
  page, the model does not exist yet, so a model-free stand-in for it ranks each step's own candidates: the latent
  model's score, the personal ranking over the whole history nearest to what the ranker puts on top; co-visitation
  where no latent model is fitted (``PREFEED_LATENT_FACTORS=0``).
"""

from __future__ import annotations

import numpy as np
from sqlalchemy import Engine

from ..data import item_days
from ..data.item_days import Daily
from ..data.shown_pages import PER_USER, oldest_page, served
from ..ranking.candidates import Candidates
from ..ranking.methods import best_per_user
from ..ranking.shown import Impressions, Shown, aggregate
from ..ranking.source_index import SourceIndex

#: Items of the page read before each replayed step: the judged top (NDCG@10).
PAGE = 10


class DerivedPages:
    """Each user's derived pages in replay order: ``(step index, time, item rows)``. A step sees the pages of its
    user's earlier steps (smaller index), never its own or a later one."""

    def __init__(self) -> None:
        self._by_user: dict[int, list[tuple[int, float, np.ndarray]]] = {}

    def add(self, users: np.ndarray, index: np.ndarray, ts: np.ndarray, pages: list[np.ndarray]) -> None:
        for user, i, t, rows in zip(users.tolist(), index.tolist(), ts.tolist(), pages):
            self._by_user.setdefault(user, []).append((i, t, np.asarray(rows[:PAGE], dtype=np.int64)))

    def impressions(self, users: np.ndarray, index: np.ndarray) -> Impressions:
        """The impressions of each of a batch's steps (row ``j``: ``users[j]``'s step ``index[j]``)."""
        owner, rows, ts, pos = [], [], [], []
        for j, (user, i) in enumerate(zip(users.tolist(), index.tolist())):
            for step, t, page in self._by_user.get(user, ()):
                if step < i and len(page):
                    owner.append(np.full(len(page), j)), rows.append(page)
                    ts.append(np.full(len(page), t)), pos.append(np.arange(len(page)))
        if not owner:
            return Impressions.none()
        return Impressions(np.concatenate(owner), np.concatenate(rows), np.concatenate(ts), np.concatenate(pos))

    def shown(self, users: np.ndarray, index: np.ndarray, span: int) -> Shown:
        return aggregate(self.impressions(users, index), span)


class StoredPages:
    """The pages the product served and the collector stored (``served_pages``), as training reads them for its
    steps: a step whose feed was computed at ``f`` sees its user's pages served before ``f`` and within ``keep``
    (``PREFEED_IMPRESSIONS_KEEP``) of it, the newest ``PER_USER`` of them, as the worker that computed that feed read
    them (``data/shown_pages.py``). The page read before the step itself was served after its feed was computed, so
    it is never among them. Steps before ``since`` (the oldest page stored) are not covered: their pages are the
    stand-in's."""

    def __init__(self, engine: Engine, keep: float, since: float) -> None:
        self.engine, self.keep, self.since = engine, keep, since
        #: Step reads that found at least one stored page (training reports it; a step read for the examples and
        #: again for the objective's or the first stage's lists counts each time).
        self.steps_shown = 0

    @classmethod
    def of(cls, engine: Engine, keep: float) -> StoredPages | None:
        """The database's stored pages; None when it stores none (a log imported from a file)."""
        since = oldest_page(engine)
        return None if since is None else cls(engine, keep, float(since))

    def daily(self, feed_clock: np.ndarray, rows_of) -> Daily:
        """Every user's stored pages per item and day, for steps whose feeds were computed at ``feed_clock``: the
        window before the first step's day through the last step's (items as rows by ``rows_of``)."""
        if not len(feed_clock):
            return item_days.daily(self.engine, rows_of, 0, 0)
        first, last = item_days.day_of(float(feed_clock.min())), item_days.day_of(float(feed_clock.max()))
        return item_days.daily(self.engine, rows_of, first - item_days.WINDOW_DAYS, last)

    def covers(self, feed_clock: np.ndarray) -> np.ndarray:
        """Which steps (by their feed clock) the stored pages cover."""
        return feed_clock >= self.since

    def impressions(self, users: np.ndarray, feed_clock: np.ndarray, which: np.ndarray, rows_of) -> Impressions:
        """The stored impressions of the steps ``which`` (batch rows; ``users[j]`` at ``feed_clock[j]``), items as
        rows by ``rows_of`` (item ids → rows, < 0 unknown)."""
        if not len(which):
            return Impressions.none()
        pages = served(self.engine, users[which], float(feed_clock[which].min()) - self.keep)
        owner, ids, ts, pos = [], [], [], []
        for j in which.tolist():
            f, n = float(feed_clock[j]), 0
            for served_at, position, page in pages.get(int(users[j]), ()):      # newest first
                if served_at >= f:
                    continue
                if served_at < f - self.keep or n >= PER_USER:
                    break
                n += 1
                self.steps_shown += n == 1
                owner.append(np.full(len(page), j)), ids.append(page)
                ts.append(np.full(len(page), served_at)), pos.append(position + np.arange(len(page)))
        if not owner:
            return Impressions.none()
        return Impressions(np.concatenate(owner), rows_of(np.concatenate(ids).astype(np.int64)),
                           np.concatenate(ts), np.concatenate(pos))


def training_shown(pages: DerivedPages, stored: StoredPages | None, users: np.ndarray, index: np.ndarray,
                   feed_clock: np.ndarray, rows_of, span: int, daily: Daily | None = None) -> Shown:
    """What each of a batch of training steps was shown: the stored pages where they cover the step, else the
    stand-in's pages at the user's earlier steps (``pages``, already holding this batch's); ``daily``: every user's
    stored pages per item and day (``StoredPages.daily``)."""
    derived = pages.impressions(users, index)
    if stored is None:
        return aggregate(derived, span)
    covered = stored.covers(feed_clock)
    real = stored.impressions(users, feed_clock, np.flatnonzero(covered), rows_of)
    keep = ~covered[derived.owner]
    both = [np.concatenate([getattr(derived, f)[keep], getattr(real, f)]) for f in ("owner", "rows", "ts", "position")]
    return aggregate(Impressions(*both), span, daily=daily)


def stand_in_pages(cand: Candidates, index: SourceIndex) -> list[np.ndarray]:
    """Training's page for each row of ``cand``: its best ``PAGE`` candidates by the latent score (co-visitation
    without a latent model), best first."""
    score = cand.latent_score if index.latent is not None else cand.cov_score
    keep = best_per_user(cand.owner, cand.rows, score, PAGE)
    owner = cand.owner[keep]
    bounds = np.searchsorted(owner, np.arange(len(cand.offsets)))
    rows = cand.rows[keep]
    return [rows[bounds[j]:bounds[j + 1]] for j in range(len(cand.offsets) - 1)]
