"""The API's Prometheus instruments (``ApiMetrics``), recorded as each request ends, and the collector of the queue's
global state (``Backlog``); ``metrics.py`` renders them at ``GET /metrics``.

Per-process counts (request latency by route and status, feeds served by source, boosted items served, the served
feed's age) are recorded in memory as each request ends: a few microseconds, never a Redis read. Under
``manage.py serve`` gunicorn runs several worker processes; ``PROMETHEUS_MULTIPROC_DIR`` (set by ``serve``, a
directory emptied at each start) makes prometheus_client keep each process's counts in a file there, so a scrape
answered by any worker adds up every process's (a gunicorn ``child_exit`` hook marks dead ones:
``api/gunicorn_hooks.py``).
Without it (the Flask test client, a plain gunicorn) each app counts in its own registry.

Global state (the queue by job state, the dirty-user set and how long its first user has been due) is not a
per-process count: ``Backlog`` reads it from the queue Redis at scrape time, in one round trip.
"""

from __future__ import annotations

import logging
import os
import time

import redis
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

from jobs.queues import backlog
from precompute.metric_files import ProcessFiles
from precompute.settings import Settings

log = logging.getLogger(__name__)

#: Request latency buckets (s): a page takes ~1.5 ms on one core; the database's pool timeout is 10 s.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
#: Feed age buckets (s): a recompute follows an event within seconds; a feed lives up to PREFEED_FEED_TTL (7 days).
AGE_BUCKETS = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86400, 3 * 86400, 7 * 86400)


def multiprocess() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


class ApiMetrics:
    """The API's metrics and the registry ``/metrics`` renders; one per app."""

    def __init__(self, settings: Settings, queue_redis: redis.Redis) -> None:
        self.registry = CollectorRegistry()
        if multiprocess():
            self.registry.register(ProcessFiles(os.environ["PROMETHEUS_MULTIPROC_DIR"]))
            own = None          # counted in the directory's files, which the collector reads
        else:
            own = self.registry
        self.latency = Histogram("prefeed_http_request_duration_seconds", "API requests by route (the URL rule, "
                                 "not the path) and status", ["route", "method", "status"],
                                 buckets=LATENCY_BUCKETS, registry=own)
        self.feeds = Counter("prefeed_feeds_served", "feed pages served, by source", ["source"], registry=own)
        self.boosted = Counter("prefeed_boosted_items_served", "boosted items on served feed pages", registry=own)
        self.age = Histogram("prefeed_feed_age_seconds", "age of each precomputed feed served (now − its "
                             "computed_at)", buckets=AGE_BUCKETS, registry=own)
        self.pages = Counter("prefeed_experiment_pages_served", "pages served, by experiment and arm (\"\" outside "
                             "any)", ["experiment", "arm"], registry=own)
        self.impressions = Counter("prefeed_experiment_impressions_served", "items on the pages served, by "
                                   "experiment and arm", ["experiment", "arm"], registry=own)
        #: (source, experiment, arm) -> the counters a page of them counts in (``served``)
        self._served: dict[tuple, tuple] = {}
        self.not_recorded = Counter("prefeed_impressions_capped", "pages served but not recorded: their user had "
                                    "PREFEED_IMPRESSIONS_USER_MAX pages recorded by the process that minute",
                                    registry=own)
        self._latency: dict[tuple[str, str, int], object] = {}
        self.registry.register(Backlog(settings, queue_redis))

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, status)
        child = self._latency.get(key)
        if child is None:       # bounded: routes × methods × statuses, never paths
            child = self._latency[key] = self.latency.labels(route=route, method=method, status=str(status))
        child.observe(seconds)

    def served(self, source: str, boosted: int, computed_at: float | None, experiment: str | None,
               arm: str | None, items: int) -> None:
        """A feed page served: by its source, the boosted items on it, its feed's age (precomputed pages), and
        its experiment and arm with the items on it."""
        key = (source, experiment, arm)
        children = self._served.get(key)
        if children is None:    # bounded: two sources × the experiments' arms
            labels = dict(experiment=experiment or "", arm=arm or "")
            children = self._served[key] = (self.feeds.labels(source=source), self.pages.labels(**labels),
                                            self.impressions.labels(**labels))
        feeds, pages, impressions = children
        feeds.inc()
        pages.inc()
        if items:
            impressions.inc(items)
        if boosted:
            self.boosted.inc(boosted)
        if computed_at is not None:
            self.age.observe(max(0.0, time.time() - computed_at))

    def capped(self) -> None:
        self.not_recorded.inc()


class Backlog:
    """A collector of the queue's global state, read from the queue Redis at each scrape."""

    def __init__(self, settings: Settings, r: redis.Redis) -> None:
        self.settings, self.r = settings, r

    def collect(self):
        try:
            state = backlog(self.settings, self.r)
        except redis.RedisError as exc:
            log.warning("metrics: queue state unavailable: %s", type(exc).__name__)
            return
        jobs = GaugeMetricFamily("prefeed_queue_jobs", "RQ jobs of prefeed's queue by state", labels=["state"])
        for state_name, n in state["jobs"].items():
            jobs.add_metric([state_name], n)
        yield jobs
        yield GaugeMetricFamily("prefeed_dirty_users", "users waiting for a recompute (the dirty set)",
                                value=state["dirty_users"])
        first = state["dirty_first_due"]
        yield GaugeMetricFamily("prefeed_dirty_oldest_age_seconds", "how long the dirty user due first has been due "
                                "(0 when none is due yet)", value=max(0.0, time.time() - first) if first else 0.0)
