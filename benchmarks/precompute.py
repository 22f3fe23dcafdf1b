"""precompute: a full feed rebuild, stage by stage, next to CatBoost's own predict on identical matrices.

Reports per-user time split into history / candidates / features / model / store, item-scores per second per core
for the whole pipeline (in one process, one thread) and for CatBoost predict alone on the very same feature
matrices (same process, one thread), and their ratio. Then the same rebuild through 2 forking RQ workers, with the
queue overhead (worker wall time not spent in any stage). Beside the rebuild, what ranking with the shown columns
(``PREFEED_RANK_SHOWN``) adds per user with stored pages to read (``lab/side_by_side.py``). Last, the cost per user in
an experiment's arms, side by side with no experiment on the same users (``lab/arm_costs.py``): a model arm of a
second bundle, ``recent:1d`` and ``popular``; and the memory a worker parent holds after its pre-fork init with 0, 1
and 2 extra model-arm bundles.
"""

from __future__ import annotations

import time

from rq.job import Job
from rq.serializers import JSONSerializer
from threadpoolctl import threadpool_limits

from jobs.queues import enqueue_batches, make_queue
from precompute.data.history import load_histories
from precompute.ranking import features, scoring
from precompute.settings import Settings
from precompute.pipeline.pipeline import STAGES

from .lab.arm_costs import bundle_memory, per_arm_cost
from .lab.results import median, table, write_result
from .lab.side_by_side import cascade_side_by_side, per_user_ms_of, shown_cost as shown_cost_of, timed
from .lab.world import make_world

FULL = dict(users=3000, items=45_000, events=600_000, iterations=Settings().train_iterations, rebuild_users=2000,
            repeats=3, arm_rounds=5)
#: The bundle formats the memory table compares (``ranking/bundle.py``).
FORMATS = {"1": "format 1 (covisit.npz, in memory)", "2": "format 2 (sources mapped)"}
QUICK = dict(users=200, items=3000, events=20_000, iterations=30, rebuild_users=100, repeats=1, arm_rounds=1)


def run(quick: bool = False) -> dict:
    # numpy's BLAS on one thread, as in a worker (``jobs/context.init``): "one process, one thread" holds for the
    # whole pipeline, not only CatBoost.
    with threadpool_limits(limits=1, user_api="blas"):
        return _run(quick)


def _run(quick: bool) -> dict:
    cfg = QUICK if quick else FULL
    # Trained on 200 users (not 600) to keep the run under 2 minutes, with no early stopping: the model is the same
    # size every run (1,000 oblivious trees of depth 6), so it costs the same to evaluate, which is all this benchmark
    # needs of it. (Early stopping kept 59-184 trees from run to run, and the totals moved with it.)
    world = make_world(cfg["users"], cfg["items"], cfg["events"], cfg["iterations"], train_users=200,
                       every_tree=True, quick=quick)
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
            hist = load_histories(world.engine, batch, pipeline.items, pipeline.settings)
            chunk = pipeline.settings.rank_chunk_users
            for a in range(0, len(hist), chunk):
                part = hist.slice(a, min(a + chunk, len(hist)))
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
            predict_times.append(_predict_seconds(pipeline.bundle.model, mats))
            ratios.append((scored / sum(seconds.values())) / (rows / predict_times[-1]))
        stage = {k: median([t[k] for t in totals]) for k in STAGES}
        pipeline_rate = scored / sum(stage.values())
        predict_rate = rows / median(predict_times)

        # 1b. The cascade beside the full model alone, on the same users in alternating rounds.
        cascade = cascade_side_by_side(pipeline, batches, cfg["repeats"])
        # 1c. What the "shown" columns add: the stored pages read and the columns built, per user.
        shown_cost = shown_cost_of(pipeline, batches, cfg["repeats"], sum(per_user_ms_of(stage, users).values()))

        # 3. The same rebuild through 2 forking RQ workers, repeated, each run between two runs of the same predict
        # in 2 processes at once (the per-core rate when both cores are busy: the fair reference for 2 workers,
        # whose cores share caches and memory bandwidth, and may be hyperthreads). Medians over repeats.
        queue = make_queue(s, r)
        runs, around = [], [_parallel_predict_rate(pipeline.bundle.model, mats)]
        for _ in range(cfg["repeats"]):
            runs.append(_rebuild_through_workers(world, queue, users))
            around.append(_parallel_predict_rate(pipeline.bundle.model, mats))
        for run_, (a, b) in zip(runs, zip(around, around[1:])):
            run_["ratio_2"] = run_["rate"] / ((a + b) / 2)
            run_["ratio_2_over_span"] = run_["rate_over_span"] / ((a + b) / 2)
        workers_rate_per_core = median([x["rate"] for x in runs])
        rate_over_span = median([x["rate_over_span"] for x in runs])
        predict_rate_2 = median(around)
        in_job_ms = {k: 1000 * median([x["seconds"][k] for x in runs]) / len(users) for k in STAGES}
        span, wall = median([x["span"] for x in runs]), median([x["wall"] for x in runs])

        # 4. The arms of an experiment, after the workers ran (they would have loaded its second bundle).
        by_arm = per_arm_cost(world, pipeline, users, cfg["iterations"], cfg["arm_rounds"])
        memory = bundle_memory(world, rounds=cfg["repeats"])

        per_user_ms = per_user_ms_of(stage, users)
        out = dict(
            config=cfg, users=len(users), candidates_per_user=scored / len(users), features=len(pipeline.items.layout),
            trees=int(pipeline.bundle.model.tree_count_),
            per_user_ms=per_user_ms, per_user_ms_total=sum(per_user_ms.values()),
            pipeline_item_scores_per_s_per_core=pipeline_rate,
            catboost_predict_rows_per_s_per_core=predict_rate,
            ratio_pipeline_to_catboost=median(ratios),
            ratios_per_repeat=ratios,
            workers=dict(jobs=runs[0]["jobs"], users_per_job=s.batch_size, repeats=len(runs), wall_s=wall,
                         rebuild_s=span, startup_s=wall - span, per_user_ms_in_jobs=in_job_ms,
                         item_scores_per_s_per_core=workers_rate_per_core,
                         ratio_to_catboost=workers_rate_per_core / predict_rate,
                         catboost_predict_rows_per_s_per_core_2_processes=predict_rate_2,
                         ratio_to_catboost_2_processes=median([x["ratio_2"] for x in runs]),
                         item_scores_per_s_per_core_over_span=rate_over_span,
                         ratio_to_catboost_2_processes_over_span=median([x["ratio_2_over_span"] for x in runs]),
                         runs=runs,
                         queue_overhead_share=median([x["queue_overhead_share"] for x in runs]),
                         idle_tail_share=median([x["idle_tail_share"] for x in runs]),
                         failed=queue.failed_job_registry.count),
            per_user_ms_by_arm=by_arm["per_user_ms_by_arm"], ratio_by_arm=by_arm["ratio_by_arm"], by_arm=by_arm,
            worker_mib_per_extra_bundle=memory["uss_mib_per_extra_bundle"], bundle_memory=memory,
            cascade=cascade, shown=shown_cost,
        )
        print(table(f"precompute: {len(users)} users x {out['candidates_per_user']:.0f} candidates, "
                    f"{out['features']} features, {out['trees']} trees (per user, ms)",
                    ("where",) + STAGES + ("total",),
                    [["in one process", *per_user_ms.values(), out["per_user_ms_total"]],
                     [f"in RQ jobs ({s.batch_size} users each)", *in_job_ms.values(), sum(in_job_ms.values())]]))
        print()
        print(table(f"the cascade (first stage on every candidate, the full model on the best "
                    f"{cascade['keep']}) beside the full model on every candidate, in one process (per user, ms)",
                    ("ranked by",) + STAGES + ("total", "users/s per core", "vs full model"),
                    [[label, *ms.values(), sum(ms.values()), cascade["users_per_s_per_core"][label],
                      cascade["users_per_s_per_core"][label] / cascade["users_per_s_per_core"]["full model"]]
                     for label, ms in cascade["per_user_ms"].items()]))
        print()
        print(table(f"the shown columns (PREFEED_RANK_SHOWN): {shown_cost['pages_per_user']} stored pages of "
                    f"{shown_cost['page_items']} items per user, read and built in the same rounds as the columns "
                    f"without them (per user, ms); every item's days read once per worker and day in "
                    f"{shown_cost['daily_read_ms']:.0f} ms",
                    ["pages read", "columns built, with / without", "added", "rebuild without", "with / without"],
                    [[shown_cost["read_ms"],
                      f"{shown_cost['features_on_ms']:.3f} / {shown_cost['features_off_ms']:.3f}",
                      shown_cost["added_ms"], shown_cost["rebuild_ms"], shown_cost["ratio"]]]))
        print()
        print(table("item-scores per second per core", ["path", "rate", "vs CatBoost, 1 process",
                                                        "vs CatBoost, 2 processes"], [
            ["CatBoost predict alone, 1 process (same matrices)", predict_rate, 1.0, "-"],
            ["CatBoost predict alone, 2 processes at once", predict_rate_2, predict_rate_2 / predict_rate, 1.0],
            ["prefeed pipeline, in-process", pipeline_rate, out["ratio_pipeline_to_catboost"], "-"],
            ["prefeed through 2 RQ workers (per busy worker-second)", workers_rate_per_core,
             out["workers"]["ratio_to_catboost"], out["workers"]["ratio_to_catboost_2_processes"]],
            ["prefeed through 2 RQ workers (per second of the whole rebuild)", rate_over_span,
             rate_over_span / predict_rate, out["workers"]["ratio_to_catboost_2_processes_over_span"]],
        ]))
        print(f"workers: {runs[0]['jobs']} jobs, rebuild {span:.2f}s (+{wall - span:.2f}s worker start-up), "
              f"queue/fork overhead {100 * out['workers']['queue_overhead_share']:.1f}% of busy worker time, "
              f"idle end {100 * out['workers']['idle_tail_share']:.1f}%; medians of {len(runs)} runs")
        print()
        arms = by_arm["arms"]
        print(table(f"per user in an experiment's arms, in one process (ms; medians of {by_arm['rounds']} interleaved "
                    f"rounds; ratio: to no experiment on the same users)",
                    ["arm", "users", "ms per user", "no experiment, same users", "ratio", *STAGES],
                    [["no experiment (promoted bundle)", len(users), by_arm["per_user_ms_by_arm"]["none"], "-", 1.0,
                      *by_arm["none_per_user_ms_by_stage"].values()]] +
                    [[f"{label} ({a['spec']})", a["users"], a["per_user_ms"], a["none_per_user_ms"],
                      by_arm["ratio_by_arm"][label], *a["per_user_ms_by_stage"].values()]
                     for label, a in arms.items()]))
        print()
        print(table(f"a worker parent after its pre-fork init, by the format of its extra model-arm bundles (MiB, "
                    f"medians of {memory['rounds']} rounds; {memory['trees']} trees; 'touched': after reading every "
                    f"page of its mapped arrays)", ["bundles", "extra", "on disk", "RSS", "PSS", "USS", "RSS touched",
                                                    "PSS touched", "USS touched"],
                    [[FORMATS[f], n, x["bundle_disk_mib"], *(b[f"{k}_mib"] for k in ("rss", "pss", "uss")),
                      *(x["touched"][n][f"{k}_mib"] for k in ("rss", "pss", "uss"))]
                     for f, x in memory["by_format"].items() for n, b in x["by_extra_bundles"].items()] +
                    [[FORMATS[f], "per extra bundle (slope)", x["bundle_disk_mib"],
                      *(x[f"{k}_mib_per_extra_bundle"] for k in ("rss", "pss", "uss")),
                      *(x["touched"][f"{k}_mib_per_extra_bundle"] for k in ("rss", "pss", "uss"))]
                     for f, x in memory["by_format"].items()]))
        print(f"wrote {write_result('precompute', out, quick)}")
        return out
    finally:
        world.close()


def _rebuild_through_workers(world, queue, users: list[int]) -> dict:
    """Enqueue the rebuild, run ``manage.py worker --workers 2 --burst`` until the queue is empty, and read the
    jobs' own timings back from RQ."""
    r = queue.connection
    done_before = set(queue.finished_job_registry.get_job_ids())
    n_jobs = enqueue_batches(queue, users, world.settings.batch_size, world.settings)
    t0 = time.perf_counter()
    world.manage("worker", "--workers", "2", "--burst")
    wall = time.perf_counter() - t0
    jobs = [Job.fetch(i, connection=r, serializer=JSONSerializer)
            for i in set(queue.finished_job_registry.get_job_ids()) - done_before]
    results = [j.return_value() for j in jobs]
    # The rebuild spans from the first job's start to the last job's end (worker start-up, which loads the bundle
    # and matrices once, is reported separately). Each worker is busy from its first job's start to its last job's
    # end: that counts fork, dequeue and RQ bookkeeping between its jobs, but not the idle end of the one that
    # finds the queue empty first (a property of a short rebuild, ~0.1 s here, not a cost per job).
    span = (max(j.ended_at for j in jobs) - min(j.started_at for j in jobs)).total_seconds()
    busy = 0.0
    for name in {j.worker_name for j in jobs}:
        mine = [j for j in jobs if j.worker_name == name]
        busy += (max(j.ended_at for j in mine) - min(j.started_at for j in mine)).total_seconds()
    seconds = {k: sum(x["seconds"][k] for x in results) for k in STAGES}
    scored = sum(x["scored_items"] for x in results)
    return dict(jobs=n_jobs, finished=len(jobs), wall=wall, span=span, busy=busy, seconds=seconds,
                rate=scored / busy, rate_over_span=scored / span / 2,
                queue_overhead_share=max(0.0, 1 - sum(seconds.values()) / busy), idle_tail_share=1 - busy / (2 * span))


def _parallel_predict_rate(model, mats) -> float:
    """Rows per second per process with two forked processes predicting the same matrices simultaneously."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    rows = sum(len(X) for X in mats)
    start = ctx.Barrier(2)
    results = ctx.Queue()

    def child() -> None:
        start.wait()
        results.put(_predict_seconds(model, mats))

    procs = [ctx.Process(target=child) for _ in range(2)]
    for p in procs:
        p.start()
    times = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return rows / max(times)


def _predict_seconds(model, mats) -> float:
    """CatBoost's predict time over ``mats``, each matrix read once (untimed) just before its predict, so it comes
    from cache as the pipeline's freshly built matrix does, not from the ~1 GB of matrices in memory."""
    total = 0.0
    for X in mats:
        X.sum()
        total += timed(lambda: scoring.score(model, X))
    return total
