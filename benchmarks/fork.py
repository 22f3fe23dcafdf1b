"""fork: the classic RQ measurement. Single-user precompute jobs on 2 forking workers, four ways:

(a) stock RQ ``Worker`` with nothing initialised in the parent: every work horse configures mappers, loads the
    bundle and the item matrices itself (what happens without pre-fork init);
(b) prefeed's worker, initialised once before fork;
(c) stock ``rq worker`` running no-op jobs: the floor of queue + fork cost;
(d) prefeed's worker with users batched per job.

Rates are jobs (or users) per second between the first job's start and the last job's end, so worker start-up
is not counted for anyone. (a) pays the same initialisation in every job, so it runs on fewer jobs to stay within
the time budget; its rate is per job all the same.
"""

from __future__ import annotations

import subprocess
import sys
import time


from jobs.queues import enqueue_batches, make_queue
from precompute.settings import Settings
from precompute.feeds.client import redis_client

from .lab.results import table, write_result
from .lab.world import ROOT, make_world

FULL = dict(users=3000, items=30_000, events=600_000, jobs=1000, jobs_a=40, batch=50)
QUICK = dict(users=200, items=2000, events=20_000, jobs=60, jobs_a=2, batch=20)     # (a): a job per worker


def run(quick: bool = False) -> dict:
    cfg = QUICK if quick else FULL
    world = make_world(cfg["users"], cfg["items"], cfg["events"], 30 if quick else Settings().train_iterations,
                       quick=quick)
    try:
        r = redis_client(world.settings.redis_url)
        queue = make_queue(world.settings, r)
        rq_bin = str(__import__("pathlib").Path(sys.executable).parent / "rq")
        stock = [rq_bin, "worker", "--burst", "--url", world.settings.redis_url, "--serializer",
                 "rq.serializers.JSONSerializer", "--worker-class", "rq.Worker", world.settings.queue_name]
        users = list(range(1, cfg["jobs"] + 1))

        def measure(enqueue, start_workers) -> tuple[float, int]:
            queue.finished_job_registry.cleanup()
            _clear(queue)
            n = enqueue()
            procs = start_workers()
            for p in procs:
                p.wait(timeout=900)
            jobs = [queue.fetch_job(i) for i in queue.finished_job_registry.get_job_ids()]
            failed = queue.failed_job_registry.count
            if failed or len(jobs) != n:
                raise RuntimeError(f"{failed} jobs failed, {len(jobs)}/{n} finished")
            span = (max(j.ended_at for j in jobs) - min(j.started_at for j in jobs)).total_seconds()
            return span, n

        env = world.env(PYTHONPATH=str(ROOT))
        two_stock = lambda: [subprocess.Popen(stock, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,  # noqa: E731
                                              stderr=subprocess.DEVNULL) for _ in range(2)]
        prefeed = lambda: [subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "worker", "--workers", "2",  # noqa: E731
                                             "--burst"], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL)]

        span_a, n_a = measure(lambda: enqueue_batches(queue, users[: cfg["jobs_a"]], 1, world.settings), two_stock)
        span_b, n_b = measure(lambda: enqueue_batches(queue, users, 1, world.settings), prefeed)
        span_c, n_c = measure(lambda: _enqueue_noops(queue, cfg["jobs"]), two_stock)
        span_d, n_d = measure(lambda: enqueue_batches(queue, users, cfg["batch"], world.settings), prefeed)
        rate = {"a": n_a / span_a, "b": n_b / span_b, "c": n_c / span_c, "d_users": len(users) / span_d,
                "d_jobs": n_d / span_d}
        out = dict(config=cfg, jobs_per_s=rate, ratio_b_over_a=rate["b"] / rate["a"],
                   ratio_b_over_c=rate["b"] / rate["c"], ratio_d_users_over_b=rate["d_users"] / rate["b"])
        print(table("fork: single-user precompute jobs on 2 forking workers", ["variant", "jobs", "jobs/s",
                                                                                "users/s"], [
            ["(a) init in every work horse (stock rq.Worker)", n_a, rate["a"], rate["a"]],
            ["(b) prefeed worker, init before fork", n_b, rate["b"], rate["b"]],
            ["(c) stock rq worker, no-op jobs (floor)", n_c, rate["c"], "-"],
            [f"(d) prefeed worker, {cfg['batch']} users per job", n_d, rate["d_jobs"], rate["d_users"]],
        ]))
        print(f"b/a = {out['ratio_b_over_a']:.1f}x   b/c = {out['ratio_b_over_c']:.2f}   "
              f"d/b (users/s) = {out['ratio_d_users_over_b']:.1f}x")
        print(f"wrote {write_result('fork', out, quick)}")
        return out
    finally:
        world.close()


def _enqueue_noops(queue, n: int) -> int:
    specs = [queue.prepare_data("benchmarks.lab.noop.noop", result_ttl=600) for _ in range(n)]
    queue.enqueue_many(specs)
    return n


def _clear(queue) -> None:
    queue.empty()
    for registry in (queue.finished_job_registry, queue.failed_job_registry):
        for job_id in registry.get_job_ids():
            registry.remove(job_id, delete_job=True)
    time.sleep(0)


