"""Worker metrics (Prometheus), recorded in the long-lived worker process and never in a work horse.

RQ forks a work horse per job. In prometheus_client's multiprocess mode every process that records a value keeps
its own file per metric kind in ``PROMETHEUS_MULTIPROC_DIR`` and a scrape reads them all: a horse that recorded its
job's counts would leave a new set of files per job, and every scrape would read thousands of them. So a job
returns its stage times and counts in its (JSON) result, and its worker records them once the horse has exited
(``record_job``, called from ``PrefeedWorker.execute_job``), reading the job's latest result from Redis: the
directory holds files for the worker processes only (one, or the pool's N and its parent).

``serve`` (``manage.py worker`` with ``PREFEED_WORKER_METRICS_PORT``) answers scrapes from the process that runs
the command: the worker itself, or a ``--workers N`` pool's parent, whose worker processes it forks after this
module was imported with ``PROMETHEUS_MULTIPROC_DIR`` set, so their counts land in the same directory.
"""

from __future__ import annotations

import logging
import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server, values
from rq.exceptions import StopRequested
from rq.job import Job
from rq.results import Result

from precompute.errors import ConfigError
from precompute.metric_files import ProcessFiles
from precompute.pipeline.pipeline import STAGES, Pipeline

log = logging.getLogger("prefeed.jobs")

_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

JOBS = Counter("prefeed_jobs", "jobs run, by job function and outcome (finished, failed, retried, stopped, "
               "unknown: no result of this run)", ["function", "outcome"], registry=None)
DURATION = Histogram("prefeed_job_duration_seconds", "a job's time in its worker, fork to exit", ["function"],
                     buckets=_SECONDS, registry=None)
STAGE = Histogram("prefeed_job_stage_seconds", "a finished job's time in each pipeline stage", ["stage"],
                  buckets=_SECONDS, registry=None)
USERS = Counter("prefeed_users_scored", "users ranked by finished jobs", registry=None)
ITEMS = Counter("prefeed_items_scored", "candidate items scored by finished jobs", registry=None)
WRITTEN = Counter("prefeed_feeds_written", "feeds written by finished jobs", registry=None)
KEPT = Counter("prefeed_version_guard_rejections", "feeds not written because the stored one had a newer history "
               "version (the version guard)", registry=None)
MODEL = Gauge("prefeed_model_version", "the model bundle version workers rank with (the latest a worker loaded)",
              multiprocess_mode="mostrecent", registry=None)
LOADS = Counter("prefeed_bundle_loads", "loads of a model bundle and item matrices by worker processes (the one "
                "before the fork counted once)", registry=None)
PAGES = Counter("prefeed_experiment_pages_collected", "served pages stored in the database, by experiment and arm "
                "(\"\" outside any)", ["experiment", "arm"], registry=None)
IMPRESSIONS = Counter("prefeed_experiment_impressions_collected", "items on the served pages stored, by experiment "
                      "and arm", ["experiment", "arm"], registry=None)
ATTRIBUTED = Counter("prefeed_attributed_events", "events attributed to the page that served their item, by "
                     "experiment, arm and event type", ["experiment", "arm", "type"], registry=None)
LOST = Counter("prefeed_impressions_lost", "served pages that never reached the database (a Redis that restarted "
               "empty, a buffer over PREFEED_IMPRESSIONS_BUFFER_MAX)", registry=None)

REJECTED = Counter("prefeed_impressions_rejected", "served pages the database refused to store (set aside in the "
                   "queue Redis's impressions:rejected list)", registry=None)

_OUTCOMES = {Result.Type.SUCCESSFUL: "finished", Result.Type.FAILED: "failed", Result.Type.RETRIED: "retried",
             Result.Type.MAX_RETRIES_EXCEEDED: "failed", Result.Type.STOPPED: "stopped"}


def serve(port: int, pipeline: Pipeline) -> None:
    """Answer scrapes on ``port`` from this process, for every process of ``PROMETHEUS_MULTIPROC_DIR``; count the
    load ``pipeline`` made before any fork."""
    if values.ValueClass is values.MutexValue:
        raise RuntimeError("PROMETHEUS_MULTIPROC_DIR must be set before prometheus_client is imported")
    registry = CollectorRegistry()
    registry.register(ProcessFiles(os.environ["PROMETHEUS_MULTIPROC_DIR"]))
    try:
        server, _ = start_http_server(port, registry=registry)
    except OSError as exc:
        raise ConfigError(f"PREFEED_WORKER_METRICS_PORT {port}: {exc.strerror or exc}") from None
    # Forked processes (horses, the scheduler, a pool's workers) would hold the listening socket open after this
    # process exits, and a restarted worker could not bind the port.
    os.register_at_fork(after_in_child=server.socket.close)
    loaded(pipeline, 0)


def loaded(pipeline: Pipeline, seen: int) -> int:
    """Record loads ``pipeline`` made since it had made ``seen`` and the bundle it holds; returns its loads."""
    if pipeline.loads > seen:
        LOADS.inc(pipeline.loads - seen)
    if pipeline.bundle is not None:
        MODEL.set(pipeline.bundle.version)
    return pipeline.loads


def record_job(job: Job, started: float, seconds: float) -> None:
    """Record the run of ``job`` that began at ``started`` (epoch s) and took ``seconds``, from its latest result
    (written by the horse, or by this worker when the horse died), and log its line."""
    function = job.func_name.rsplit(".", 1)[-1]
    try:
        result = job.latest_result()
    except StopRequested:
        # RQ's SIGTERM handler raises this wherever an idle worker is, and here the worker is idle again (the job
        # is over): swallowed, the warm stop would be lost and the worker would go on taking jobs
        raise
    except Exception as exc:        # never let metrics take a worker down
        log.warning("no result for job %s: %s", job.id, exc)
        result = None
    if result is not None and result.created_at.timestamp() < started - 1:
        result = None               # an earlier run's: this one left none
    outcome = _OUTCOMES.get(result.type, "unknown") if result is not None else "unknown"
    JOBS.labels(function=function, outcome=outcome).inc()
    DURATION.labels(function=function).observe(seconds)
    summary = result.return_value if outcome == "finished" and isinstance(result.return_value, dict) else {}
    stages = summary.get("seconds") or {}
    for stage in STAGES:
        if stage in stages:
            STAGE.labels(stage=stage).observe(stages[stage])
    USERS.inc(summary.get("users", 0))
    ITEMS.inc(summary.get("scored_items", 0))
    WRITTEN.inc(summary.get("written", 0))
    KEPT.inc(summary.get("kept_newer", 0))
    for experiment, arm, pages, items in summary.get("served", ()):
        PAGES.labels(experiment=experiment, arm=arm).inc(pages)
        IMPRESSIONS.labels(experiment=experiment, arm=arm).inc(items)
    for experiment, arm, kind, n in summary.get("attributed_by", ()):
        ATTRIBUTED.labels(experiment=experiment, arm=arm, type=kind).inc(n)
    LOST.inc(summary.get("lost", 0))
    REJECTED.inc(summary.get("rejected", 0))
    if log.isEnabledFor(logging.INFO):
        log.info("job", extra={"fields": {
            "job_id": job.id, "function": function, "outcome": outcome, "duration_ms": round(seconds * 1000, 3),
            "users": summary.get("users"), "written": summary.get("written"),
            "kept_newer": summary.get("kept_newer"), "scored_items": summary.get("scored_items"),
            "stages_ms": {k: round(v * 1000, 3) for k, v in stages.items()}}})
