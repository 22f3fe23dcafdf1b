"""precompute: a full feed rebuild, stage by stage, next to CatBoost's own predict on identical matrices.

Reports per-user time split into history / candidates / features / model / store, item-scores per second per core
for the whole pipeline (in one process, one thread) and for CatBoost predict alone on the very same feature
matrices (same process, one thread), and their ratio. Then the same rebuild through 2 forking RQ workers, with the
queue overhead (worker wall time not spent in any stage).
"""

from __future__ import annotations

import time

from rq.job import Job
from rq.serializers import JSONSerializer

from jobs.queues import enqueue_batches, make_queue
from precompute import defaults, features, ranker
from precompute.history import load_histories
from precompute.pipeline import STAGES

from .common import make_world, median, table, write_result

FULL = dict(users=3000, items=30_000, events=600_000, iterations=defaults.TRAIN_ITERATIONS, rebuild_users=2000,
            repeats=3)
QUICK = dict(users=200, items=3000, events=20_000, iterations=30, rebuild_users=100, repeats=1)


def run(quick: bool = False) -> dict:
    cfg = QUICK if quick else FULL
    world = make_world(cfg["users"], cfg["items"], cfg["events"], cfg["iterations"])
    try:
        s = world.settings
        pipeline = world.pipeline()
        r = pipeline.store.r
        users = list(range(1, cfg["rebuild_users"] + 1))
        batches = [users[i:i + s.batch_size] for i in range(0, len(users), s.batch_size)]

        # 1. The pipeline in this process, one thread, several repeats; median of per-repeat totals.
        totals, scored = [], 0
        for _ in range(cfg["repeats"]):
            seconds = dict.fromkeys(STAGES, 0.0)
            scored = 0
            for batch in batches:
                res = pipeline.recompute(batch)
                scored += res.scored_items
                for k in STAGES:
                    seconds[k] += res.seconds[k]
            totals.append(seconds)
        stage = {k: median([t[k] for t in totals]) for k in STAGES}
        pipeline_s = sum(stage.values())
        pipeline_rate = scored / pipeline_s

        # 2. CatBoost alone on the identical matrices, same process, one thread.
        now = time.time()
        mats = []                       # the matrices the pipeline scores: one per chunk of users inside a job
        for batch in batches:
            hist = load_histories(world.engine, batch, pipeline.items)
            for a in range(0, len(hist), defaults.RANK_CHUNK_USERS):
                part = hist.slice(a, min(a + defaults.RANK_CHUNK_USERS, len(hist)))
                mats.append(features.build(pipeline.items, part, pipeline.candidates(part), now))
        predict_s = median([_time(lambda: [ranker.score(pipeline.bundle.model, X) for X in mats])
                            for _ in range(cfg["repeats"])])
        rows = sum(len(X) for X in mats)
        predict_rate = rows / predict_s
        # The same predict in 2 processes at once: the per-core rate when both cores are busy, which is the fair
        # reference for 2 workers (the cores share caches and memory bandwidth, and may be hyperthreads).
        predict_rate_2 = _parallel_predict_rate(pipeline.bundle.model, mats, cfg["repeats"])

        # 3. The same rebuild through 2 forking RQ workers.
        queue = make_queue(s, r)
        n_jobs = enqueue_batches(queue, users, s.batch_size)
        t0 = time.perf_counter()
        world.manage("worker", "--workers", "2", "--burst")
        wall = time.perf_counter() - t0
        jobs = [Job.fetch(i, connection=r, serializer=JSONSerializer)
                for i in queue.finished_job_registry.get_job_ids()]
        results = [j.return_value() for j in jobs]
        # The rebuild spans from the first job's start to the last job's end (worker start-up, which loads the
        # bundle and matrices once, is reported separately).
        span = (max(j.ended_at for j in jobs) - min(j.started_at for j in jobs)).total_seconds()
        in_jobs = sum(sum(x["seconds"].values()) for x in results)
        worker_scored = sum(x["scored_items"] for x in results)
        workers_rate_per_core = worker_scored / span / 2

        per_user_ms = {k: 1000 * v / len(users) for k, v in stage.items()}
        out = dict(
            config=cfg, users=len(users), candidates_per_user=scored / len(users), features=features.N_FEATURES,
            trees=int(pipeline.bundle.model.tree_count_),
            per_user_ms=per_user_ms, per_user_ms_total=sum(per_user_ms.values()),
            pipeline_item_scores_per_s_per_core=pipeline_rate,
            catboost_predict_rows_per_s_per_core=predict_rate,
            ratio_pipeline_to_catboost=pipeline_rate / predict_rate,
            workers=dict(jobs=n_jobs, wall_s=wall, rebuild_s=span, startup_s=wall - span,
                         item_scores_per_s_per_core=workers_rate_per_core,
                         ratio_to_catboost=workers_rate_per_core / predict_rate,
                         catboost_predict_rows_per_s_per_core_2_processes=predict_rate_2,
                         ratio_to_catboost_2_processes=workers_rate_per_core / predict_rate_2,
                         queue_overhead_share=max(0.0, 1 - in_jobs / (2 * span)),
                         failed=queue.failed_job_registry.count),
        )
        print(table(f"precompute: {len(users)} users x {out['candidates_per_user']:.0f} candidates, "
                    f"{out['features']} features, {out['trees']} trees (per user, ms)",
                    STAGES + ("total",), [[*per_user_ms.values(), out["per_user_ms_total"]]]))
        print()
        print(table("item-scores per second per core", ["path", "rate", "vs CatBoost, 1 process",
                                                        "vs CatBoost, 2 processes"], [
            ["CatBoost predict alone, 1 process (same matrices)", predict_rate, 1.0, "-"],
            ["CatBoost predict alone, 2 processes at once", predict_rate_2, predict_rate_2 / predict_rate, 1.0],
            ["prefeed pipeline, in-process", pipeline_rate, out["ratio_pipeline_to_catboost"], "-"],
            ["prefeed through 2 RQ workers", workers_rate_per_core, out["workers"]["ratio_to_catboost"],
             out["workers"]["ratio_to_catboost_2_processes"]],
        ]))
        print(f"workers: {n_jobs} jobs, rebuild {span:.2f}s (+{wall - span:.2f}s worker start-up), queue/fork "
              f"overhead {100 * out['workers']['queue_overhead_share']:.1f}% of worker time")
        print(f"wrote {write_result('precompute', out, quick)}")
        return out
    finally:
        world.close()


def _parallel_predict_rate(model, mats, repeats: int) -> float:
    """Rows per second per process with two forked processes predicting the same matrices simultaneously."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    rows = sum(len(X) for X in mats)
    start = ctx.Barrier(2)
    results = ctx.Queue()

    def child() -> None:
        start.wait()
        results.put(median([_time(lambda: [ranker.score(model, X) for X in mats]) for _ in range(repeats)]))

    procs = [ctx.Process(target=child) for _ in range(2)]
    for p in procs:
        p.start()
    times = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return rows / max(times)


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0



