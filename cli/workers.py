"""Feed computation commands: precompute, worker, requeue-failed."""

from __future__ import annotations

import faulthandler
import logging
import signal

import click
from sqlalchemy import select

from precompute.data import engine as db
from precompute.data.tables import User
from precompute.errors import InvalidInput
from precompute.feeds.client import clients, ping_redis

from . import metrics_dir
from .group import command
from .embedded import ensure_redis


def _all_user_ids(engine) -> list[int]:
    with engine.connect() as conn:
        return list(conn.execute(select(User.id).order_by(User.id)).scalars())


def _all_user_versions(engine) -> list[tuple[int, int]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(select(User.id, User.history_version)
                                               .where(User.history_version > 0).order_by(User.id))]


@command()
@click.option("--all", "all_users", is_flag=True, help="Every user in the database.")
@click.option("--stale", is_flag=True, help="Users whose stored feed is missing, older than their history (after "
                                            "Redis lost data, or events stored while it was down) or built by a "
                                            "bundle other than the current one (after a promotion or rollback).")
@click.option("--user", "user_ids", type=click.IntRange(1, 2**31 - 1), multiple=True, help="A user id (repeatable).")
@click.option("--inline", is_flag=True, help="Compute in this process instead of enqueueing jobs.")
@click.option("--batch-size", type=click.IntRange(1, 10_000), default=None, help="Users per job.")
@click.pass_obj
def precompute(obj, all_users: bool, stale: bool, user_ids: tuple[int, ...], inline: bool,
               batch_size: int | None) -> None:
    """Recompute feeds: enqueue batches for the workers (default) or run them here."""
    if sum([all_users, stale, bool(user_ids)]) != 1:
        raise InvalidInput("give one of --all, --stale or one or more --user ID")
    settings = ensure_redis(obj.settings)
    engine = db.make_engine(settings.database_url, settings)
    db.ping(engine)
    r, feeds = clients(settings)
    ping_redis(r)
    ping_redis(feeds)
    if stale:
        from precompute.feeds.store import FeedStore
        from precompute.ranking.bundle import current_version

        ids = FeedStore(feeds, settings).stale_users(_all_user_versions(engine), current_version(settings.model_dir))
    else:
        ids = _all_user_ids(engine) if all_users else sorted(set(user_ids))
    size = batch_size or settings.batch_size
    if inline:
        from jobs import context
        from precompute.feeds.refresh import FeedClocks

        pipeline = context.init(settings)
        clocks = FeedClocks(r, settings)
        written = kept = 0
        with click.progressbar(length=len(ids), label="precomputing") as bar:
            for i in range(0, len(ids), size):
                res = pipeline.recompute(ids[i:i + size])
                clocks.record(res.written_ids, res.newest_event, res.clock)
                written, kept = written + res.written, kept + res.kept_newer
                bar.update(res.users)
        click.echo(f"{written} feeds written, {kept} kept (a newer feed was already stored)")
        return
    from jobs.queues import enqueue_batches, make_queue

    n_jobs = enqueue_batches(make_queue(settings, r), ids, size, settings)
    click.echo(f"enqueued {n_jobs} jobs for {len(ids)} users on queue {settings.queue_name!r}")


@command()
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True)
@click.option("--burst", is_flag=True, help="Exit when the queue is empty.")
@click.pass_obj
def worker(obj, workers: int, burst: bool) -> None:
    """Run RQ workers. Mappers, model bundle and item matrices load once here, before any fork; with
    PREFEED_WORKER_METRICS_PORT, this process serves every worker process's metrics."""
    # `kill -USR1 <pid>` prints every thread's stack to stderr: where a worker that will not stop is stuck
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    settings = ensure_redis(obj.settings)
    port = settings.worker_metrics_port
    if port:
        metrics_dir.fresh(settings, f"worker-{port}")     # before jobs.worker imports prometheus_client
    from rq.serializers import JSONSerializer

    from jobs import context, metrics
    from jobs.queues import make_queue
    from jobs.worker import PrefeedWorker, children_die_with_parent
    from precompute.logs import configure as configure_logs

    configure_logs(settings)
    pipeline = context.init(settings)
    if port:
        metrics.serve(port, pipeline)
    children_die_with_parent()
    r = context.queue_redis()
    queue = make_queue(settings, r)
    level = logging.getLevelName(logging.getLogger().getEffectiveLevel())   # -v on the group: INFO
    if workers == 1:
        PrefeedWorker([queue], connection=r, serializer=JSONSerializer).work(
            burst=burst, with_scheduler=True, logging_level=level)
        return
    from rq.worker_pool import WorkerPool

    WorkerPool([queue], connection=r, num_workers=workers, worker_class=PrefeedWorker,
               serializer=JSONSerializer).start(burst=burst, logging_level=level)


@command(name="requeue-failed")
@click.pass_obj
def requeue_failed(obj) -> None:
    """Move every job in RQ's failed registry back onto the queue."""
    settings = ensure_redis(obj.settings)
    from jobs.queues import make_queue

    queue = make_queue(settings, clients(settings)[0])
    registry = queue.failed_job_registry
    ids = registry.get_job_ids()
    for job_id in ids:
        registry.requeue(job_id)
    click.echo(f"requeued {len(ids)} failed jobs")
