"""Queues and enqueueing. Job payloads are JSON (RQ's JSONSerializer): plain ids and numbers, never pickles."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterable
from datetime import datetime, timezone

import redis
from rq import Queue, Retry
from rq.serializers import JSONSerializer

from precompute.feeds.dirty import DirtyUsers
from precompute.feeds.keys import Keys
from precompute.settings import Settings

RECOMPUTE = "jobs.tasks.recompute_users"
DRAIN = "jobs.tasks.drain_dirty"
REASSIGN = "jobs.tasks.mark_reassigned"
COLLECT = "jobs.tasks.collect_impressions"
RECOVER = "jobs.tasks.rebuild_lost"


def make_queue(settings: Settings, r: redis.Redis) -> Queue:
    return Queue(settings.queue_name, connection=r, serializer=JSONSerializer,
                 default_timeout=settings.job_timeout)


def timeout(settings: Settings, batches: float) -> int:
    """A job's timeout, sized to its work: ``PREFEED_JOB_TIMEOUT`` per batch of ``PREFEED_BATCH_SIZE`` users."""
    return settings.job_timeout * max(1, math.ceil(batches))


def drain_timeout(settings: Settings) -> int:
    return timeout(settings, settings.drain_max_batches)


def retry(settings: Settings) -> Retry:
    """RQ's Retry with the configured backoff (``PREFEED_RETRY_INTERVALS``)."""
    intervals = settings.retry_intervals
    return Retry(max=len(intervals), interval=list(intervals))


def enqueue_batches(queue: Queue, user_ids: Iterable[int], batch_size: int, settings: Settings) -> int:
    """One job per ``batch_size`` users, enqueued in pipelined chunks; returns the number of jobs."""
    ids = [int(u) for u in user_ids]
    specs = [Queue.prepare_data(RECOMPUTE, args=(ids[i:i + batch_size],), retry=retry(settings), result_ttl=3600,
                                failure_ttl=7 * 86400, timeout=timeout(settings, batch_size / settings.batch_size))
             for i in range(0, len(ids), batch_size)]
    for i in range(0, len(specs), 500):
        queue.enqueue_many(specs[i:i + 500])
    return len(specs)


def notify_changed(settings: Settings, r: redis.Redis, user_ids: Iterable[int]) -> bool:
    """Mark users dirty and make sure a drain job is waiting. True if this call enqueued it."""
    dirty = DirtyUsers(r, settings)
    dirty.mark(list(user_ids))
    job_id = str(uuid.uuid4())
    if dirty.try_flag_drain(job_id):
        try:
            make_queue(settings, r).enqueue(DRAIN, job_id=job_id, retry=retry(settings), result_ttl=600,
                                            failure_ttl=7 * 86400, job_timeout=drain_timeout(settings))
        except BaseException:
            dirty.clear_drain_flag(job_id)
            raise
        return True
    return False


def drain_time_ms(at_ms: float) -> int:
    """When a drain scheduled for ``at_ms`` runs: rounded up to a whole second. RQ keeps scheduled times in whole
    seconds, truncated, so a drain due at 12.7 s would run at 12 s, find the leased users not yet due, and leave
    them to the next event (a scheduled drain is one at a time)."""
    return math.ceil(max(at_ms, time.time() * 1000) / 1000) * 1000


def schedule_drain(settings: Settings, r: redis.Redis, at: float) -> None:
    """A drain job at epoch second ``at``, rounded up (``drain_time_ms``); RQ's scheduler, which prefeed workers
    run, enqueues it then."""
    when = datetime.fromtimestamp(drain_time_ms(at * 1000) / 1000, tz=timezone.utc)
    make_queue(settings, r).enqueue_at(when, DRAIN, retry=retry(settings), result_ttl=600, failure_ttl=7 * 86400,
                                       job_timeout=drain_timeout(settings))


def enqueue_reassign(settings: Settings, r: redis.Redis, experiment_id: int, after: int = 0,
                     at: float | None = None) -> None:
    """Mark, a step at a time, the users whose arm changed with experiment ``experiment_id`` (``mark_reassigned``):
    now, or at epoch second ``at``."""
    queue = make_queue(settings, r)
    kwargs = dict(args=(int(experiment_id), int(after)), retry=retry(settings), result_ttl=600,
                  failure_ttl=7 * 86400)
    if at is None:
        queue.enqueue(REASSIGN, **kwargs)
    else:
        queue.enqueue_at(datetime.fromtimestamp(at, tz=timezone.utc), REASSIGN, **kwargs)


def enqueue_recovery(settings: Settings, r: redis.Redis, token: str, offset: int, at: float | None = None) -> None:
    """The step of rebuild ``token`` (``jobs/recovery.py``) that looks at its users from position ``offset``: now, or
    at epoch second ``at``."""
    queue = make_queue(settings, r)
    kwargs = dict(args=(str(token), int(offset)), retry=retry(settings), result_ttl=600, failure_ttl=7 * 86400)
    if at is None:
        queue.enqueue(RECOVER, **kwargs)
    else:
        queue.enqueue_at(datetime.fromtimestamp(at, tz=timezone.utc), RECOVER, **kwargs)


#: How long a collector's schedule flag outlives its job's time, should the job never start (a queue Redis that lost
#: it): another is scheduled then.
COLLECT_FLAG_SLACK = 60.0


def schedule_collect(settings: Settings, r: redis.Redis, delay: float | None = None) -> bool:
    """Make sure a collector job (``collect_impressions``) runs ``delay`` seconds from now (default
    ``PREFEED_IMPRESSIONS_COLLECT_INTERVAL``), unless one is already scheduled: a flag, dropped by the job as it
    starts (``collect_started``), keeps it one at a time. True if this call scheduled it.

    The job drops the flag rather than the flag expiring at the job's time: RQ keeps a scheduled time in whole
    seconds, so a job may start up to a second early; a collection that then found the flag still set when it
    scheduled its successor (events still waiting for attribution) would schedule none, and attribution would stop
    until the next event."""
    delay = settings.impressions_collect_interval if delay is None else delay
    flag = Keys(settings.key_prefix).impressions_scheduled
    if not r.set(flag, 1, nx=True, px=max(1, int((delay + COLLECT_FLAG_SLACK) * 1000))):
        return False
    try:
        make_queue(settings, r).enqueue_at(datetime.fromtimestamp(time.time() + delay, tz=timezone.utc), COLLECT,
                                           retry=retry(settings), result_ttl=600, failure_ttl=7 * 86400)
    except BaseException:
        r.delete(flag)
        raise
    return True


def collect_started(settings: Settings, r: redis.Redis) -> None:
    """A collector job has started: the next ``schedule_collect`` schedules another."""
    r.delete(Keys(settings.key_prefix).impressions_scheduled)


def backlog(settings: Settings, r: redis.Redis) -> dict:
    """The queue's global state in one round trip, for the API's /metrics: jobs by state (``queued``, ``started``,
    ``scheduled``, ``failed``), dirty users, and the earliest time (epoch s) a dirty user was due, None when none
    is. Raw counts: RQ's registry ``count`` would first clean the registry, which a scrape must not do."""
    queue = make_queue(settings, r)
    dirty = Keys(settings.key_prefix).dirty
    with r.pipeline(transaction=False) as p:
        p.llen(queue.key)
        for registry in (queue.started_job_registry, queue.scheduled_job_registry, queue.failed_job_registry):
            p.zcard(registry.key)
        p.zcard(dirty)
        p.zrange(dirty, 0, 0, withscores=True)
        queued, started, scheduled, failed, dirty_users, first = p.execute()
    return {"jobs": {"queued": queued, "started": started, "scheduled": scheduled, "failed": failed},
            "dirty_users": dirty_users, "dirty_first_due": first[0][1] / 1000 if first else None}
