"""The prefeed worker: RQ's forking Worker with initialisation before the fork.

Only two public hooks are overridden: ``execute_job`` (in the parent, before each fork: pick up a newly promoted
bundle) and ``main_work_horse`` (in the child, first thing: drop inherited DB connections).
"""

from __future__ import annotations

from rq import Worker

from . import context


class PrefeedWorker(Worker):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # A worker process forked by WorkerPool inherits the pool parent's pipeline: give it its own sockets.
        context.after_fork()

    def execute_job(self, job, queue):
        context.refresh()
        return super().execute_job(job, queue)

    def main_work_horse(self, job, queue):
        context.after_fork()
        return super().main_work_horse(job, queue)
