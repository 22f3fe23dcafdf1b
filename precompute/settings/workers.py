"""The job side: how long a job may run and how it is retried, the workers' beat and metrics, draining dirty
users, the log level, and what ``status`` and the dashboard sample."""

from __future__ import annotations

import dataclasses

from .environment import setting

#: The levels ``PREFEED_LOG_LEVEL`` may name.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclasses.dataclass(frozen=True)
class WorkerSettings:
    # -- jobs ----------------------------------------------------------------------------------------------
    job_timeout: int = setting(60, "PREFEED_JOB_TIMEOUT", "time a job may run per `PREFEED_BATCH_SIZE` users it "
                               "carries (a drain job: per batch it may process), then it is stopped and retried; a "
                               "500-user batch takes ~1.5 s", unit="s")
    worker_interval: int = setting(10, "PREFEED_WORKER_INTERVAL", "each worker's beat: it marks its running job alive "
                                   "this often (RQ `job_monitoring_interval`) and, between jobs, runs RQ's maintenance "
                                   "this often (`maintenance_interval`, RQ's default 600): retaking the scheduler "
                                   "lock, retrying jobs of dead workers", unit="s")
    job_max_deaths: int = setting(10, "PREFEED_JOB_MAX_DEATHS", "times a job's process may be killed under it "
                                  "(OOM, SIGKILL, a lost host) and the job still be retried past its retries; then it "
                                  "fails like a job that raised (a batch that always runs out of memory)")
    retry_intervals: tuple[int, ...] = setting((5, 30, 120), "PREFEED_RETRY_INTERVALS", "seconds before each retry "
                                               "of a failed job (their count = retries; RQ `Retry`)", unit="s",
                                               minimum=0)
    dirty_lease: int = setting(60, "PREFEED_DIRTY_LEASE", "a user claimed by a drain job becomes claimable again "
                               "after this long", unit="s")
    drain_flag_ttl: int = setting(30, "PREFEED_DRAIN_FLAG_TTL", "lifetime of the flag that keeps one drain job "
                                  "waiting at a time", unit="s")
    drain_max_batches: int = setting(20, "PREFEED_DRAIN_MAX_BATCHES", "batches one drain job processes before "
                                     "handing the rest to a fresh job", unit="batches")
    new_users_batch_ms: int = setting(100, "PREFEED_NEW_USERS_BATCH_MS", "time a drain may spend on one batch of "
                                      "users new to the database (a flood of made-up ids, a surge of first visits): "
                                      "it claims as many as its last batches say fit, so a known user's recompute "
                                      "waits about this long at most behind them (with one worker: with more, "
                                      "one drain at a time ranks new users and another takes the known user at "
                                      "once); known users are claimed `PREFEED_BATCH_SIZE` at a time",
                                      unit="ms", minimum=1)
    new_users_share: float = setting(0.5, "PREFEED_NEW_USERS_SHARE", "most of a drain's time spent ranking users new "
                                     "to the database (one drain at a time ranks them, however many workers run): "
                                     "after a batch of them it claims only known users for as long as keeps this "
                                     "share (1: no pause). New users are served the fallback until "
                                     "their feed is ranked; known users' recomputes, and what shares the host with "
                                     "the workers, keep the rest", minimum=0.01, maximum=1)
    reassign_batch: int = setting(2000, "PREFEED_REASSIGN_BATCH", "users looked at per step when an experiment is "
                                  "created or stopped: those whose arm changed are marked for a recompute, and the "
                                  "next step runs `PREFEED_REASSIGN_INTERVAL` later (a bounded rate; their old feeds "
                                  "serve meanwhile)", unit="users")
    reassign_interval: float = setting(1.0, "PREFEED_REASSIGN_INTERVAL", "pause between two steps of marking the "
                                       "users whose arm changed", unit="s", minimum=0)
    recovery_batch: int = setting(500, "PREFEED_RECOVERY_BATCH", "users looked at per step of the rebuild that "
                                  "follows a Redis which lost its data (`docs/operating.md`): those active within "
                                  "`PREFEED_FEED_TTL` whose feed is missing or behind their history are marked for a "
                                  "recompute, most recently active first, and the next step runs "
                                  "`PREFEED_RECOVERY_INTERVAL` later (a bounded rate)", unit="users")
    recovery_interval: float = setting(1.0, "PREFEED_RECOVERY_INTERVAL", "pause between two steps of that rebuild",
                                       unit="s", minimum=0)
    redis_check_interval: float = setting(2.0, "PREFEED_REDIS_CHECK_INTERVAL", "how often, between jobs, a worker "
                                          "reads the markers that tell a Redis which lost its data (restarted empty, "
                                          "a cluster node included) from one that kept it; also at every RQ "
                                          "maintenance pass", unit="s", minimum=0)
    worker_metrics_port: int = setting(0, "PREFEED_WORKER_METRICS_PORT", "`manage.py worker` serves Prometheus "
                                       "metrics on this port, all interfaces (`--workers N`: the pool's parent, for "
                                       "every worker process); 0: off", unit="port", minimum=0, maximum=65535)
    log_level: str = setting("INFO", "PREFEED_LOG_LEVEL", "level of prefeed's JSON log lines (`DEBUG`, `INFO`, "
                             "`WARNING`, `ERROR`): one per request and one per job at `INFO`")

    status_sample: int = setting(10_000, "PREFEED_STATUS_SAMPLE", "users whose feed headers `status` and the "
                                 "dashboard read for coverage and feed age (all when fewer)", unit="users")
    freshness_points: int = setting(1440, "PREFEED_FRESHNESS_POINTS", "feed-age samples kept for the dashboard's "
                                    "chart, at most one a minute (1440: a day)", unit="samples")
