"""The process-wide pipeline a worker builds once, before forking, and every work horse inherits.

``init`` runs in the worker parent: it limits numpy's BLAS to one thread, configures the SQLAlchemy mappers, loads
the model bundle and the item matrices. ``after_fork`` runs first thing in each child and drops (without closing)
the database connections inherited from the parent, so parent and child never share a socket. A job that runs where
``init`` was never called (a plain ``rq worker``) initialises on first use: correct, but it pays the whole cost in
every horse.
"""

from __future__ import annotations

import logging
import os

from sqlalchemy import event
from sqlalchemy.orm import Mapper, configure_mappers
from threadpoolctl import threadpool_info, threadpool_limits

from precompute.data.engine import make_engine
from precompute.feeds.client import clients
from precompute.pipeline.pipeline import Pipeline
from precompute.settings import Settings

log = logging.getLogger(__name__)

_pipeline: Pipeline | None = None
_queue_redis = None                 # the queue Redis (RQ, dirty users); the pipeline holds the feed Redis
_init_pid: int | None = None
_stopping = False                   # set in a work horse when its worker is asked to stop
#: The pid of every process of this lineage in which mapper configuration ran (a forked child inherits the list):
#: a work horse whose list holds only its worker's pid inherited configured mappers, since any ORM query it ran
#: would otherwise have configured them, in the horse.
mapper_configured_in: list[int] = []


@event.listens_for(Mapper, "after_configured")
def _record_configuration() -> None:
    mapper_configured_in.append(os.getpid())


def init(settings: Settings | None = None) -> Pipeline:
    global _pipeline, _init_pid, _queue_redis
    settings = settings or Settings.from_env()
    # One thread for numpy's BLAS in this process and the horses it forks: a host runs one worker process per core,
    # and a BLAS pool per process would oversubscribe them (the latent product of a 25-user chunk over 45,000
    # items: 3.8 ms on one thread, 16 ms on two while the other core was busy). CatBoost predicts on one thread too.
    threadpool_limits(limits=1, user_api="blas")
    configure_mappers()
    engine = make_engine(settings.database_url, settings)
    queue_redis, feed_redis = clients(settings)
    pipeline = Pipeline(settings, engine, feed_redis)
    pipeline.load()
    _pipeline, _init_pid, _queue_redis = pipeline, os.getpid(), queue_redis
    log.info("pipeline ready in pid %s: bundle %s, %d items", os.getpid(), pipeline.bundle.version,
             len(pipeline.items))
    return pipeline


def get() -> Pipeline:
    return _pipeline if _pipeline is not None else init()


def queue_redis():
    """The queue Redis of this process's pipeline (RQ, the dirty-user set)."""
    get()
    return _queue_redis


def after_fork() -> None:
    if _pipeline is not None:
        _pipeline.engine.dispose(close=False)


def refresh() -> None:
    if _pipeline is not None:
        _pipeline.refresh()


def stats() -> dict:
    """What a job reports about the process it ran in (used to prove init happened before the fork)."""
    return {
        "pid": os.getpid(),
        "init_pid": _init_pid,
        "bundle_loads": _pipeline.loads if _pipeline else 0,
        "mapper_configured_in": list(mapper_configured_in),
        "bundle_version": _pipeline.bundle.version if _pipeline and _pipeline.bundle else None,
        "blas_threads": max((lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"),
                            default=None),
    }


def request_stop(*_signal) -> None:
    """The worker is stopping (a signal handler in the work horse, see ``jobs/worker.py``): a drain job ends after
    its current batch and hands the rest to a fresh job."""
    global _stopping
    _stopping = True


def stopping() -> bool:
    return _stopping


def reset() -> None:
    """Forget the pipeline (tests)."""
    global _pipeline, _init_pid, _queue_redis, _stopping
    _pipeline, _init_pid, _queue_redis, _stopping = None, None, None, False
