"""The prefeed worker: RQ's forking Worker with initialisation before the fork.

Only two public hooks are overridden: ``execute_job`` (in the parent, before each fork: pick up a newly promoted
bundle) and ``main_work_horse`` (in the child, first thing: drop inherited DB connections).

``children_die_with_parent`` covers what RQ cannot: a worker killed with SIGKILL (the OOM killer, ``kill -9``)
runs no code, so the scheduler process it forked (and, under ``WorkerPool``, the pool's worker processes) would
run on as orphans. On Linux the kernel sends them SIGTERM instead, and they shut down as RQ does on SIGTERM.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

from rq import Worker

from . import context

_PR_SET_PDEATHSIG = 1      # linux/prctl.h


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
        # A horse finishes its job even if its worker dies meanwhile (it exits right after): nothing is lost.
        _set_parent_death_signal(0)
        return super().main_work_horse(job, queue)


def children_die_with_parent() -> None:
    """From now on, every process forked by this one (or by its forked children) gets SIGTERM when its parent
    dies. Linux only (``prctl(PR_SET_PDEATHSIG)``); elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    parent = [0]

    def before() -> None:
        parent[0] = os.getpid()

    def after_in_child() -> None:
        _set_parent_death_signal(signal.SIGTERM)
        if os.getppid() != parent[0]:       # the parent died between fork() and prctl(): nobody will signal us
            os._exit(1)

    os.register_at_fork(before=before, after_in_child=after_in_child)


def _set_parent_death_signal(sig: int) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
