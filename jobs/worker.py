"""The prefeed worker: RQ's forking Worker with initialisation before the fork, and recovery from killed workers
bounded in time.

Public hooks only: ``execute_job`` (in the parent, before each fork: pick up a newly promoted bundle),
``main_work_horse`` (in the child, first thing: drop inherited DB connections), ``handle_job_failure`` and an
exception handler (a job whose process died is retried however often that happens), ``clean_registries`` (a dead
worker's cleaning lock is not waited out).

Recovery after SIGKILLs is bounded by ``recovery_delay``: RQ finds a dead worker's jobs and restarts a dead
scheduler only in its maintenance pass, every 10 minutes by default, and blocks up to ``worker_ttl`` − 15 s waiting
for a job before it looks; prefeed workers do both every ``PREFEED_WORKER_INTERVAL`` seconds.

A Redis that lost its data (restarted empty) is noticed here too, between jobs: ``jobs/recovery.py``'s check runs
before each job, at each heartbeat (idle, or watching a horse; at most every ``PREFEED_REDIS_CHECK_INTERVAL``) and at each
maintenance pass; when the queue Redis lost it, the worker also registers itself again (``status`` lists it).

``children_die_with_parent`` covers what RQ cannot: a worker killed with SIGKILL (the OOM killer, ``kill -9``)
runs no code, so the scheduler process it forked (and, under ``WorkerPool``, the pool's worker processes) would
run on as orphans. On Linux the kernel sends them SIGTERM instead, and they shut down as RQ does on SIGTERM.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time

import redis
from rq import Queue, Worker, worker_registration
from rq.exceptions import AbandonedJobError
from sqlalchemy.exc import SQLAlchemyError

from precompute.errors import PrefeedError
from precompute.settings import Settings

from . import context, metrics, recovery

_PR_SET_PDEATHSIG = 1      # linux/prctl.h

# RQ's fixed delays (rq 2.x), in seconds:
RQ_HEARTBEAT_GRACE = 60    # a running job's entry in the started registry outlives its last heartbeat by this
RQ_INTERMEDIATE_GRACE = 60  # a dequeued job never started is retried this long after maintenance first sees it
RQ_SCHEDULER_LOCK = 61     # a scheduler lock outlives the scheduler that last refreshed it by this
RQ_DEQUEUE_MARGIN = 15     # a worker waits worker_ttl − this for a job before it looks at anything else
RQ_SCHEDULER_POLL = 1      # the scheduler enqueues due jobs this often

# A job's process died under it; neither message comes from code that ran the job.
_DEATHS = ("Work-horse terminated unexpectedly", "Job was stuck in intermediate queue")

REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError)

#: Sent by a stopping worker to its horse (SIGUSR1 is ``manage.py worker``'s stack dump).
STOP_SIGNAL = signal.SIGUSR2


class PrefeedWorker(Worker):
    def __init__(self, *args, **kwargs) -> None:
        # WorkerPool constructs its workers itself, so the timing comes from the settings the pipeline was built with.
        settings = context.get().settings
        beat = settings.worker_interval
        self._max_deaths = settings.job_max_deaths
        kwargs.setdefault("maintenance_interval", beat)
        kwargs.setdefault("job_monitoring_interval", beat)
        kwargs.setdefault("worker_ttl", beat + RQ_DEQUEUE_MARGIN)
        super().__init__(*args, **kwargs)
        self.push_exc_handler(self._retry_abandoned)
        # A worker process forked by WorkerPool inherits the pool parent's pipeline: give it its own sockets.
        context.after_fork()
        self._loads = context.get().loads       # loads before this worker existed are counted where they ran
        self._check_every = settings.redis_check_interval
        self._checked = float("-inf")
        self._token: str | None = None          # the markers' token as this process last saw it
        # Ignored here, and so in a horse until it sets its handler: a stop signal in between changes nothing.
        signal.signal(STOP_SIGNAL, signal.SIG_IGN)

    def execute_job(self, job, queue):
        """Here in the worker process, around the horse's whole life: pick up a new bundle before the fork, and
        record the job's metrics after the horse exited, from its result (``jobs/metrics.py`` says why not in the
        horse)."""
        self.check_redis()
        context.refresh()
        self._loads = metrics.loaded(context.get(), self._loads)
        started, t0 = time.time(), time.perf_counter()
        try:
            return super().execute_job(job, queue)
        except REDIS_DOWN as exc:
            # Redis went away while this worker prepared or watched the job. The horse, if forked, finishes or
            # fails on its own; once Redis is back, RQ's maintenance finds the job abandoned and retries it.
            self.log.warning("Redis unavailable while running job %s (%s): it will be retried", job.id, exc)
            self._reap_horse()
        finally:
            metrics.record_job(job, started, time.perf_counter() - t0)

    def check_redis(self, force: bool = False) -> None:
        """Notice a Redis that lost its data and start the rebuild (``jobs/recovery.py``); at most every
        ``PREFEED_REDIS_CHECK_INTERVAL`` unless ``force``. Never ends the worker: a Redis or database that does not
        answer is asked again at the next check."""
        now = time.monotonic()
        if not force and now - self._checked < self._check_every:
            return
        self._checked = now
        try:
            found, token = recovery.check(context.get(), self.connection, self._token)
            if self._token is not None and token != self._token:
                self._register_again()
            self._token = token
        except (redis.RedisError, SQLAlchemyError, PrefeedError) as exc:
            self.log.warning("Could not check Redis for lost data (%s): checking again shortly", exc)

    def _register_again(self) -> None:
        """The markers changed since this worker last looked: the queue Redis may have lost this worker's record
        (the rebuild changes the markers whichever Redis lost its data). Written again, as at its birth."""
        with self.connection.pipeline() as pipe:
            pipe.hset(self.key, mapping=self.serialize())
            worker_registration.register(self, pipe)
            pipe.expire(self.key, self.worker_ttl + 60)
            pipe.execute()

    def _reap_horse(self) -> None:
        if self._horse_pid:
            try:
                os.waitpid(self._horse_pid, 0)
            except ChildProcessError:
                pass
            self._horse_pid = 0

    def main_work_horse(self, job, queue):
        context.after_fork()
        signal.signal(STOP_SIGNAL, context.request_stop)
        # A horse finishes its job even if its worker dies meanwhile (it exits right after): nothing is lost.
        _set_parent_death_signal(0)
        return super().main_work_horse(job, queue)

    def handle_warm_shutdown_request(self):
        """Warm shutdown (SIGTERM, or SIGINT): RQ waits for the running horse. Tell it, so that a drain job ends
        after its current batch instead of after ``PREFEED_DRAIN_MAX_BATCHES`` of them (minutes), and hands the
        rest over; a supervisor's grace period (Kubernetes: 30 s) then sees the worker out without a SIGKILL."""
        super().handle_warm_shutdown_request()
        if self.horse_pid:
            try:
                os.kill(self.horse_pid, STOP_SIGNAL)
            except ProcessLookupError:
                pass

    def handle_job_failure(self, job, queue, started_job_registry=None, exc_string=""):
        if exc_string.startswith(_DEATHS):
            self._retry_dead(job, queue)
        return super().handle_job_failure(job, queue, started_job_registry=started_job_registry,
                                          exc_string=exc_string)

    def _retry_abandoned(self, job, exc_type, exc_value, tb) -> bool:
        """An exception handler; RQ's maintenance calls it for a job whose worker stopped heartbeating."""
        if exc_type is AbandonedJobError:
            self._retry_dead(job, Queue(job.origin, connection=self.connection))
        return True     # fall through: RQ then retries the job

    def _retry_dead(self, job, queue: Queue) -> None:
        """A job's retries (``PREFEED_RETRY_INTERVALS``) count the times it failed; a process killed under it (OOM,
        SIGKILL, a lost host) is not a failure of the job. Once its retries are spent, such a job is retried
        again after the last interval, up to ``PREFEED_JOB_MAX_DEATHS`` deaths, counted in a field of the job's
        hash (writing the job's meta here instead left retried jobs stuck in the scheduled registry in the kill
        test, twice; the cause was not pinned down): a batch that kills its horse every time (out
        of memory; RQ also kills a horse that outlived its timeout by 60 s) then fails with its reason instead of
        being tried for ever. The run that died may have left the job's id
        in RQ's list of dequeued jobs (a horse removes it when it starts): removed, or RQ would run the job once
        more a minute after it is done."""
        deaths = self.connection.hincrby(job.key, "prefeed_deaths", 1)   # a field of the job's own hash
        if deaths <= self._max_deaths and job.retries_left is not None and job.retries_left < 1:
            job.retries_left = 1
        self.connection.lrem(queue.intermediate_queue_key, 1, job.id)

    # A Redis outage must not end the worker wherever it lands. RQ's loop quits on any error outside its dequeue,
    # and its dequeue waits out a refused connection but quits on a timeout (a hung server or a lost network).
    # Everything that talks to Redis between two jobs, or while a horse runs, leaves the waiting to the dequeue,
    # which waits out both (tests/test_faults.py stops and hangs the server at each point).

    def dequeue_job_and_maintain_ttl(self, timeout, max_idle_time=None):
        wait = 1.0
        while True:
            try:
                return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
            except REDIS_DOWN as exc:      # RQ's own wait covers its blocking pop, not the calls around it
                self.log.warning("Redis unavailable (%s): retrying in %.0f s", exc, wait)
                time.sleep(wait)
                wait = min(wait * self.exponential_backoff_factor, self.max_connection_wait_time)

    def check_for_suspension(self, burst: bool) -> None:
        try:
            super().check_for_suspension(burst)
        except REDIS_DOWN as exc:
            self.log.warning("Redis unavailable (%s): waiting for it in the dequeue", exc)

    def run_maintenance_tasks(self):
        try:
            super().run_maintenance_tasks()
        except REDIS_DOWN as exc:
            self.log.warning("Redis unavailable during maintenance (%s): waiting for it in the dequeue", exc)
        self.check_redis(force=True)

    def heartbeat(self, timeout=None, pipeline=None):
        if pipeline is not None:            # queued on a pipeline: its caller executes it
            return super().heartbeat(timeout, pipeline)
        try:
            super().heartbeat(timeout)
        except REDIS_DOWN as exc:
            self.log.warning("Redis unavailable for a heartbeat (%s)", exc)
        else:
            self.check_redis()

    def maintain_heartbeats(self, job):
        # while a horse runs: keep watching it whatever Redis does
        try:
            super().maintain_heartbeats(job)
        except REDIS_DOWN as exc:
            self.log.warning("Redis unavailable for job %s's heartbeat (%s)", job.id, exc)
        else:
            self.check_redis()

    def clean_registries(self):
        # RQ's cleaning lock lasts 899 s: a worker killed while holding it (a pass takes milliseconds) would keep
        # every worker from retrying dead workers' jobs for 15 minutes. Any lock still there is cut to one beat.
        for queue in self.queues:
            if self.connection.ttl(queue.registry_cleaning_key) > self.maintenance_interval:
                self.connection.expire(queue.registry_cleaning_key, self.maintenance_interval)
        super().clean_registries()


def recovery_delay(settings: Settings) -> float:
    """Seconds after the last SIGKILL, with workers running again, by which every job that was queued, running or
    waiting for a retry is back on the queue or done (the queue itself then takes the time its work takes).

    The slowest path of each kind, with one beat = ``PREFEED_WORKER_INTERVAL``: a dead worker may have held RQ's
    cleaning lock, cut to one beat by the first pass after the kill, so cleaning succeeds within 3 beats; a job
    whose worker and horse both died is seen abandoned when its started entry expires (a beat + RQ's 60 s grace
    after its last heartbeat), and one dequeued but never started 60 s after a pass first saw it; a dead
    scheduler's lock expires after 61 s and a worker takes it in its next pass; users leased by a killed drain job
    are due again after ``PREFEED_DIRTY_LEASE``. Then a retried job waits its retry interval (at most the last one:
    a job whose process died is retried however often it takes) and the scheduler's next poll."""
    beat = settings.worker_interval
    cleaning = 3 * beat
    abandoned = max(beat + RQ_HEARTBEAT_GRACE, cleaning) + beat
    never_started = cleaning + RQ_INTERMEDIATE_GRACE + beat
    scheduler = RQ_SCHEDULER_LOCK + beat
    found = max(abandoned, never_started, scheduler, settings.dirty_lease)
    return found + max(settings.retry_intervals) + RQ_SCHEDULER_POLL


def children_die_with_parent() -> None:
    """From now on, every process forked by this one (or by its forked children) gets SIGTERM when its parent
    dies. Linux only (``prctl(PR_SET_PDEATHSIG)``); elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    parent = [0]

    def before() -> None:
        parent[0] = os.getpid()

    def after_in_child() -> None:
        # The parent's SIGTERM handler is inherited, and RQ's pool parent's returns (it stops the pool's workers,
        # here: none), so a child told of the death before it installs its own handler would run on as an orphan.
        with contextlib.suppress(ValueError):       # fork() from a thread other than the main one
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _set_parent_death_signal(signal.SIGTERM)
        if os.getppid() != parent[0]:       # the parent died between fork() and prctl(): nobody will signal us
            os._exit(1)

    os.register_at_fork(before=before, after_in_child=after_in_child)


def _set_parent_death_signal(sig: int) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
