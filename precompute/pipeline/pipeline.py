"""The precompute pipeline: histories → candidates → features → CatBoost → feed values in Redis.

A ``Pipeline`` holds what is expensive to build (model bundle, item matrices, the bundle's source index). Workers build
it once in the parent process before forking; ``refresh()`` picks up a newly promoted bundle or stale item
matrices between jobs.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import numpy as np
import redis
from sqlalchemy import Engine

from ..data import catalog, clock, item_days
from ..data.history import Histories, load_histories
from ..data.shown_pages import load_pages
from ..errors import BundleError
from ..feeds.codec import encode_many
from ..feeds.similar import SimilarStore
from ..feeds.store import FeedStore
from ..settings import Settings
from ..ranking import bundle as bundles
from ..ranking import candidates, features, methods, scoring, similar
from ..ranking import shown as shown_columns
from ..ranking.arrays import top_desc_grouped
from ..ranking.item_loader import load_item_table
from ..ranking.item_table import ItemTable
from ..ranking.layout import for_settings
from ..ranking.source_index import SourceIndex, for_items
from ..ranking.workspace import Workspace
from . import arms as experiment_arms

log = logging.getLogger(__name__)
STAGES = ("history", "candidates", "features", "model", "store")


@dataclasses.dataclass
class BatchResult:
    users: int
    written: int
    kept_newer: int
    scored_items: int
    seconds: dict[str, float]
    #: The users whose feeds were written, each one's newest event time, and the log's clock they were ranked at
    #: (``feeds/refresh.py`` records them); not part of the job's result.
    written_ids: np.ndarray = dataclasses.field(default_factory=lambda: np.empty(0, dtype=np.int64))
    newest_event: np.ndarray = dataclasses.field(default_factory=lambda: np.empty(0))
    clock: float = 0.0

    def as_dict(self) -> dict:
        return dict(users=self.users, written=self.written, kept_newer=self.kept_newer,
                    scored_items=self.scored_items, seconds=self.seconds)


class Pipeline:
    def __init__(self, settings: Settings, engine: Engine, r: redis.Redis) -> None:
        self.settings = settings
        self.engine = engine
        self.store = FeedStore(r, settings)
        self.similar = SimilarStore(r, settings)
        self.bundle: bundles.Bundle | None = None
        self.items: ItemTable | None = None
        self.index: SourceIndex | None = None
        self.work: Workspace | None = None      # the candidate stage's scratch for ``items``
        self.arms = experiment_arms.Arms()      # the running experiments' arms (``arms.py``)
        self.loads = 0          # bundle + matrices loads in this process (a forked horse inherits the count)
        self._refused: int | None = None      # a bundle version that failed its checks
        self._daily = item_days.Held(engine)    # every user's pages per item, for the "shown" columns

    # -- loading ----------------------------------------------------------------------------------------
    def load(self) -> None:
        """Load the current bundle and fresh item matrices; publish the fallback popular lists and rebuild the
        inactive-item set from the database."""
        new_bundle = bundles.load(self.settings.model_dir, layout=for_settings(self.settings))
        self._install(new_bundle, load_item_table(self.engine, self.settings))

    def _install(self, new_bundle: bundles.Bundle, items: ItemTable) -> None:
        self.index = for_items(items, new_bundle.sources)
        # Warm CatBoost's evaluator here, so a worker does it once before forking instead of every work horse doing
        # it on its first batch (the item table's blocks are built when it is made).
        scoring.score(new_bundle.model, np.zeros((1, len(items.layout)), dtype=np.float32, order="F"))
        if new_bundle.cascade is not None:
            scoring.score(new_bundle.cascade.model,
                          np.zeros((1, len(new_bundle.cascade.columns)), dtype=np.float32, order="F"))
        self.bundle, self.items, self.work = new_bundle, items, Workspace.for_items(len(items))
        if items.layout.has("shown"):       # read once here, before the work horses fork
            with self.engine.connect() as conn:
                self._daily.before(clock.log_clock(conn, self.settings), items)
        self.arms = self._arms(*experiment_arms.Arms.read(self.engine))
        self.loads += 1
        self.store.publish_popular(items.ids[items.global_popular],
                                   {int(c): items.ids[rows] for c, rows in zip(items.category_ids,
                                                                              items.category_popular)})
        # Serving drops what this set holds; rebuilt at every load so it cannot stay behind the database after
        # Redis lost data (within ``item_table_max_age`` of a running worker).
        self.store.replace_inactive(lambda: catalog.inactive_ids(self.engine))
        self.publish_similar(new_bundle, items)

    def publish_similar(self, bundle: bundles.Bundle, items: ItemTable) -> bool:
        """Write the bundle's similar lists to Redis unless they are there already (``feeds/similar.py``), only for
        the current bundle: a worker still holding an older one never writes over the newer's. Returns True when
        written. The lists are stacked here from the bundle's sources (``ranking/similar.py``): a few seconds per
        million items, once per bundle, beside the popular lists."""
        if self.similar.written() == bundle.version or \
                bundles.current_version(self.settings.model_dir) != bundle.version:
            return False
        t0 = time.perf_counter()
        sources = bundle.sources
        pairs = similar.build(sources if isinstance(sources, dict) else sources.pairs(), self.settings.similar_length)
        n = self.similar.publish(bundle.version, pairs["similar_src"], pairs["similar_dst"], items.ids)
        log.info("similar items of bundle %s written: %d items in %.1fs", bundle.version, n,
                 time.perf_counter() - t0)
        return True

    def stale(self) -> str | None:
        """Whether the item matrices are due a reload: ``"full"`` once the last full load is
        ``item_table_full_reload`` old in wall time; ``"forward"`` once they are ``item_table_max_age`` old in wall
        time or in the log's (an incremental load, ``load_item_table(since=...)``); else None. A log replayed or
        imported faster than it happened moves the clock popularity is counted at (``popularity.py``) faster than
        the wall clock, and its hourly and daily windows must follow it. A full load reads the whole log (a minute
        at 25 M events in SQLite), an incremental one the events since and the last 30 days (half a second)."""
        now, s = time.time(), self.settings
        if self.items is None or now - self.items.loaded_at > max(s.item_table_full_reload, s.item_table_max_age):
            return "full"
        if now - self.items.read_at > s.item_table_max_age:
            return "forward"
        with self.engine.connect() as conn:
            moved = clock.log_clock(conn, s) - self.items.as_of > s.item_table_max_age
        return "forward" if moved else None

    def refresh(self) -> bool:
        """Reload if a different bundle is current or the item matrices are older than their max age (``stale``).

        A bundle that fails its checks is logged and skipped: the pipeline keeps serving with the one it has.
        Returns True when something was reloaded.
        """
        try:
            version = bundles.current_version(self.settings.model_dir)
        except BundleError as exc:
            log.error("keeping bundle %s: %s", self.bundle and self.bundle.version, exc)
            return False
        stale = self.stale()
        current = self.bundle is not None and version in (self.bundle.version, self._refused)
        if current and not stale:
            return self.refresh_arms()
        try:
            new_bundle = self.bundle if current else bundles.load(self.settings.model_dir, version,
                                                                       for_settings(self.settings))
        except BundleError as exc:
            if self.bundle is None:
                raise
            log.error("keeping bundle %s: %s", self.bundle.version, exc)
            self._refused = version          # checked once, not before every job
            new_bundle = self.bundle
            if not stale:
                return self.refresh_arms()
        # Between full loads a table is carried forward: its all-time counts plus the events since.
        since = self.items if stale == "forward" and current else None
        self._install(new_bundle, load_item_table(self.engine, self.settings, since=since))
        log.info("loaded bundle %s and %d items", new_bundle.version, len(self.items))
        return True

    def _arms(self, experiments: list, assignment: int) -> experiment_arms.Arms:
        return experiment_arms.Arms.load(experiments, assignment, self.settings, self.items,
                                         for_settings(self.settings), self.bundle.version, known=self.arms)

    def refresh_arms(self) -> bool:
        """Take in experiments created or stopped since the last look (one small query); True if any was. Jobs call
        it before each batch: a drain that began before an experiment was created must not rank the users its walk
        marked under the old assignment (they would stay in the old arm until their next event)."""
        experiments, assignment = experiment_arms.Arms.read(self.engine)
        if assignment == self.arms.assignment:
            return False
        self.arms = self._arms(experiments, assignment)
        log.info("assignment %d: %d running experiment(s)", assignment, len(experiments))
        return True

    # -- ranking ----------------------------------------------------------------------------------------
    def candidates(self, hist: Histories, index: SourceIndex | None = None) -> candidates.Candidates:
        return candidates.for_batch(self.items, index or self.index, hist, self.settings, work=self.work)

    def features(self, hist: Histories) -> tuple[candidates.Candidates, np.ndarray]:
        """Candidates and their feature matrix."""
        cand = self.candidates(hist)
        return cand, self._build(hist, cand)

    def _build(self, hist: Histories, cand: candidates.Candidates,
               shown: shown_columns.Shown | None = None) -> np.ndarray:
        """Features at the clock the histories were read at (``data/clock.py``), as training builds them at its
        time split; never the wall clock. ``shown``: what the batch was shown, when the caller read it already."""
        return features.build(self.items, hist, cand, hist.clock,
                              shown=self.shown(hist) if shown is None else shown)

    def shown(self, hist: Histories) -> shown_columns.Shown | None:
        """What each of the batch's users was shown (the pages stored in the last ``PREFEED_IMPRESSIONS_KEEP``),
        when the layout ranks with it; None otherwise."""
        if not self.items.layout.has("shown"):
            return None
        pages = load_pages(self.engine, hist.user_ids, hist.clock - self.settings.impressions_keep)
        imp = shown_columns.Impressions(pages.owner, self.items.rows(pages.item_ids), pages.ts, pages.position)
        return shown_columns.aggregate(imp, len(self.items) + 1, np.full(len(hist), float(hist.clock)),
                                       self._daily.before(hist.clock, self.items))

    def rank(self, hist: Histories, seconds: dict[str, float], bundle: bundles.Bundle | None = None,
             index: SourceIndex | None = None,
             shown: shown_columns.Shown | None = None) -> tuple[candidates.Candidates, np.ndarray]:
        """Candidates and their scores for a batch of histories, timing each stage into ``seconds``; by ``bundle``
        with its source index ``index`` (default: the promoted bundle's); ``shown`` as ``_build``'s."""
        if self.bundle is None:
            raise BundleError("pipeline has no model bundle loaded")
        t0 = time.perf_counter()
        cand = self.candidates(hist, index)
        t1 = time.perf_counter()
        X = self._build(hist, cand, shown)
        t2 = time.perf_counter()
        scores = scoring.rank_scores((bundle or self.bundle).ranker, X, cand.offsets)
        t3 = time.perf_counter()
        seconds["candidates"] += t1 - t0
        seconds["features"] += t2 - t1
        seconds["model"] += t3 - t2
        return cand, scores

    def build_feeds(self, hist: Histories, seconds: dict[str, float]) -> tuple[list[tuple[int, bytes, int]], int]:
        """Encoded feed values ``(user_id, value, history_version)`` for a batch, and the items scored.

        Ranked ``Settings.rank_chunk_users`` users at a time: the feature matrix stays ~15 MB, so after the first chunk
        malloc hands back the same memory instead of faulting in fresh pages (which costs a forked work horse,
        whose heap starts cold, more than the arithmetic). The pages the batch was shown are read once for it (one
        query, not one per chunk), timed with the features.
        """
        t0 = time.perf_counter()
        shown = self.shown(hist)
        seconds["features"] += time.perf_counter() - t0
        now = time.time()
        values, scored = [], 0
        chunk = self.settings.rank_chunk_users
        promoted = ("model", str(self.bundle.version))
        for start in range(0, len(hist), chunk):
            part = hist.slice(start, min(start + chunk, len(hist)))
            seen = None if shown is None else shown.slice(start, start + len(part))
            if not self.arms.experiments:
                encoded, n = self._ranked(part, promoted, None, None, now, seconds, seen)
                values += zip(part.user_ids.tolist(), encoded, part.versions.tolist())
                scored += n
                continue
            # Users of each arm ranked together, their values put back in the batch's order.
            keys, experiments, arms = self.arms.keys(part.user_ids, self.bundle.version)
            out: list = [None] * len(part)
            for key in sorted(set(keys)):
                at = np.flatnonzero([k == key for k in keys])
                whole = len(at) == len(part)
                encoded, n = self._ranked(part if whole else part.take(at), key, experiments[at], arms[at], now,
                                          seconds, seen if whole or seen is None else seen.take(at))
                for k, value in zip(at.tolist(), encoded):
                    out[k] = value
                scored += n
            values += zip(part.user_ids.tolist(), out, part.versions.tolist())
        return values, scored

    def _ranked(self, part: Histories, key: experiment_arms.Key, experiments, arms, now: float,
                seconds: dict[str, float], shown: shown_columns.Shown | None) -> tuple[list[bytes], int]:
        """The encoded feeds of ``part``, every user ranked by ``key`` (``arms.py``), and the items scored;
        ``shown``: what ``part`` was shown (None: the layout does not rank with it)."""
        kind, arg = key
        if kind == "model":
            version = int(arg)
            bundle, index = (self.bundle, self.index) if version == self.bundle.version else self.arms.bundles[version]
            cand, scores = self.rank(part, seconds, bundle, index, shown)
            t0 = time.perf_counter()
            top, offsets = top_desc_grouped(scores, cand.offsets, self.settings.feed_length)
            rows, n, kept = cand.rows[top], len(scores), scores[top]
        else:
            t0 = time.perf_counter()
            rows, kept, offsets = methods.by_method(kind, arg, self.items, self.index, part, self.settings)
            version, n = 0, 0
            seconds["candidates"] += time.perf_counter() - t0
            t0 = time.perf_counter()
        encoded = encode_many(self.items.ids[rows], kept, offsets, part.versions.tolist(), now, version,
                              experiments, self.arms.assignment, arms)
        seconds["store"] += time.perf_counter() - t0
        return encoded, n

    def recompute(self, user_ids: list[int]) -> BatchResult:
        """Rank ``user_ids`` and write their feeds (version-guarded). One history query for the batch."""
        seconds = dict.fromkeys(STAGES, 0.0)
        t0 = time.perf_counter()
        hist = load_histories(self.engine, user_ids, self.items, self.settings)
        seconds["history"] = time.perf_counter() - t0
        values, scored = self.build_feeds(hist, seconds)
        t0 = time.perf_counter()
        written = self.store.write_many(values, self.arms.assignment)
        seconds["store"] += time.perf_counter() - t0
        ok = np.array(written, dtype=bool)
        return BatchResult(users=len(values), written=sum(written), kept_newer=len(written) - sum(written),
                           scored_items=scored, seconds=seconds, written_ids=hist.user_ids[ok],
                           newest_event=hist.newest_event()[ok], clock=float(hist.clock))
