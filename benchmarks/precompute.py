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
    # Trained on 300 users (not 600) to keep the run under 2 minutes: the model is the same size (1,000 oblivious
    # trees of depth 6), so it costs the same to evaluate, which is all this benchmark needs of it.
    world = make_world(cfg["users"], cfg["items"], cfg["events"], cfg["iterations"], train_users=300)
    try:
        s = world.settings
        pipeline = world.pipeline()
        r = pipeline.store.r
        users = list(range(1, cfg["rebuild_users"] + 1))
        batches = [users[i:i + s.batch_size] for i in range(0, len(users), s.batch_size)]

        # The matrices the pipeline scores (one per chunk of users inside a job), for CatBoost alone.
        now = time.time()
        mats = []
        for batch in batches:
            hist = load_histories(world.engine, batch, pipeline.items)
            for a in range(0, len(hist), defaults.RANK_CHUNK_USERS):
                part = hist.slice(a, min(a + defaults.RANK_CHUNK_USERS, len(hist)))
                mats.append(features.build(pipeline.items, part, pipeline.candidates(part), now))
        rows = sum(len(X) for X in mats)

        # 1+2. The pipeline in this process and CatBoost alone on the identical matrices, one thread each, in
        # alternating repeats: each ratio compares two passes a few seconds apart, so drift on a shared machine
        # moves both sides of it. Medians over repeats.
        totals, predict_times, ratios, scored = [], [], [], 0
        for _ in range(cfg["repeats"]):
            seconds = dict.fromkeys(STAGES, 0.0)
            scored = 0
            for batch in batches:
                res = pipeline.recompute(batch)
                scored += res.scored_items
                for k in STAGES:
                    seconds[k] += res.seconds[k]
            totals.append(seconds)
            predict_times.append(_time(lambda: [ranker.score(pipeline.bundle.model, X) for X in mats]))
            ratios.append((scored / sum(seconds.values())) / (rows / predict_times[-1]))
        stage = {k: median([t[k] for t in totals]) for k in STAGES}
        pipeline_rate = scored / sum(stage.values())
        predict_rate = rows / median(predict_times)

        # 3. The same rebuild through 2 forking RQ workers, between two runs of the same predict in 2 processes at
        # once (the per-core rate when both cores are busy: the fair reference for 2 workers, whose cores share
        # caches and memory bandwidth, and may be hyperthreads).
        before = _parallel_predict_rate(pipeline.bundle.model, mats)
        queue = make_queue(s, r)
        n_jobs = enqueue_batches(queue, users, s.batch_size)
        t0 = time.perf_counter()
        world.manage("worker", "--workers", "2", "--burst")
        wall = time.perf_counter() - t0
        predict_rate_2 = (before + _parallel_predict_rate(pipeline.bundle.model, mats)) / 2
        jobs = [Job.fetch(i, connection=r, serializer=JSONSerializer)
                for i in queue.finished_job_registry.get_job_ids()]
        results = [j.return_value() for j in jobs]
        # The rebuild spans from the first job's start to the last job's end (worker start-up, which loads the
        # bundle and matrices once, is reported separately).
        span = (max(j.ended_at for j in jobs) - min(j.started_at for j in jobs)).total_seconds()
        in_jobs = sum(sum(x["seconds"].values()) for x in results)
        worker_scored = sum(x["scored_items"] for x in results)
        workers_rate_per_core = worker_scored / span / 2
        in_job_ms = {k: 1000 * sum(x["seconds"][k] for x in results) / len(users) for k in STAGES}

        per_user_ms = {k: 1000 * v / len(users) for k, v in stage.items()}
        out = dict(
            config=cfg, users=len(users), candidates_per_user=scored / len(users), features=features.N_FEATURES,
            trees=int(pipeline.bundle.model.tree_count_),
            per_user_ms=per_user_ms, per_user_ms_total=sum(per_user_ms.values()),
            pipeline_item_scores_per_s_per_core=pipeline_rate,
            catboost_predict_rows_per_s_per_core=predict_rate,
            ratio_pipeline_to_catboost=median(ratios),
            ratios_per_repeat=ratios,
            workers=dict(jobs=n_jobs, users_per_job=s.batch_size, wall_s=wall, rebuild_s=span,
                         startup_s=wall - span, per_user_ms_in_jobs=in_job_ms,
                         item_scores_per_s_per_core=workers_rate_per_core,
                         ratio_to_catboost=workers_rate_per_core / predict_rate,
                         catboost_predict_rows_per_s_per_core_2_processes=predict_rate_2,
                         ratio_to_catboost_2_processes=workers_rate_per_core / predict_rate_2,
                         queue_overhead_share=max(0.0, 1 - in_jobs / (2 * span)),
                         failed=queue.failed_job_registry.count),
        )
        print(table(f"precompute: {len(users)} users x {out['candidates_per_user']:.0f} candidates, "
                    f"{out['features']} features, {out['trees']} trees (per user, ms)",
                    ("where",) + STAGES + ("total",),
                    [["in one process", *per_user_ms.values(), out["per_user_ms_total"]],
                     [f"in RQ jobs ({s.batch_size} users each)", *in_job_ms.values(), sum(in_job_ms.values())]]))
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


def _parallel_predict_rate(model, mats) -> float:
    """Rows per second per process with two forked processes predicting the same matrices simultaneously."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    rows = sum(len(X) for X in mats)
    start = ctx.Barrier(2)
    results = ctx.Queue()

    def child() -> None:
        start.wait()
        results.put(_time(lambda: [ranker.score(model, X) for X in mats]))

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



