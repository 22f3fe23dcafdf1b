"""scaling: how a rebuild grows with the number of users, the candidates per user and the model size (trees), in
one process on one core; a table and a PNG plot in benchmarks/results/. Model sizes are the trained model cut to
its first N trees (CatBoost ``shrink``), so only the size changes."""

from __future__ import annotations

import dataclasses
import time

from precompute.settings import Settings
from precompute.pipeline.pipeline import STAGES, Pipeline

from .lab.results import RESULTS, table, write_result
from .lab.world import make_world

FULL = dict(users=3000, items=45_000, events=600_000, user_steps=[250, 500, 1000, 2000],
            candidate_steps=[500, 1000, 2000, 3000], tree_steps=[100, 250, 500, 1000], fixed_users=500)
QUICK = dict(users=150, items=2000, events=15_000, user_steps=[25, 50], candidate_steps=[200, 500],
             tree_steps=[10, 30], fixed_users=40)


def run(quick: bool = False) -> dict:
    cfg = QUICK if quick else FULL
    world = make_world(cfg["users"], cfg["items"], cfg["events"], max(cfg["tree_steps"]) if quick
                       else Settings().train_iterations, quick=quick)
    try:
        base = world.pipeline()
        r = base.store.r

        def rebuild(pipeline: Pipeline, n_users: int) -> dict:
            users = list(range(1, n_users + 1))
            seconds = dict.fromkeys(STAGES, 0.0)
            scored = 0
            t0 = time.perf_counter()
            for i in range(0, len(users), world.settings.batch_size):
                res = pipeline.recompute(users[i:i + world.settings.batch_size])
                scored += res.scored_items
                for k in STAGES:
                    seconds[k] += res.seconds[k]
            wall = time.perf_counter() - t0
            return dict(users=n_users, seconds=wall, ms_per_user=1000 * wall / n_users,
                        candidates_per_user=scored / n_users, model_share=seconds["model"] / sum(seconds.values()))

        def variant(**changes) -> Pipeline:
            p = Pipeline(dataclasses.replace(world.settings, **changes.pop("settings", {})), world.engine, r)
            p.items, p.index, p.bundle = base.items, base.index, changes.get("bundle", base.bundle)
            return p

        by_users = [rebuild(base, n) for n in cfg["user_steps"]]
        by_cands = [dict(max_candidates=k, **rebuild(variant(settings={"max_candidates": k}), cfg["fixed_users"]))
                    for k in cfg["candidate_steps"]]
        by_trees = []
        for n in cfg["tree_steps"]:
            model = base.bundle.model.copy()
            model.shrink(ntree_end=min(n, base.bundle.model.tree_count_))
            res = rebuild(variant(bundle=dataclasses.replace(base.bundle, model=model)), cfg["fixed_users"])
            by_trees.append(dict(trees=int(model.tree_count_), **res))

        print(table("rebuild time by users (one core)", ["users", "seconds", "ms/user"],
                    [[x["users"], x["seconds"], x["ms_per_user"]] for x in by_users]))
        print(table(f"\nby candidates per user ({cfg['fixed_users']} users)", ["cap", "candidates/user", "ms/user",
                                                                            "model share"],
                    [[x["max_candidates"], x["candidates_per_user"], x["ms_per_user"], x["model_share"]]
                     for x in by_cands]))
        print(table(f"\nby model size ({cfg['fixed_users']} users)", ["trees", "ms/user", "model share"],
                    [[x["trees"], x["ms_per_user"], x["model_share"]] for x in by_trees]))
        out = dict(config=cfg, by_users=by_users, by_candidates=by_cands, by_trees=by_trees)
        png = _plot(by_users, by_cands, by_trees, quick)
        out["plot"] = png.name
        print(f"plot: {png}")
        print(f"wrote {write_result('scaling', out, quick)}")
        return out
    finally:
        world.close()


def _plot(by_users, by_cands, by_trees, quick: bool):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    axes[0].plot([x["users"] for x in by_users], [x["seconds"] for x in by_users], "o-")
    axes[0].set(xlabel="users", ylabel="rebuild seconds (one core)", title="by users")
    axes[1].plot([x["candidates_per_user"] for x in by_cands], [x["ms_per_user"] for x in by_cands], "o-")
    axes[1].set(xlabel="candidates per user", ylabel="ms per user", title="by candidates")
    axes[2].plot([x["trees"] for x in by_trees], [x["ms_per_user"] for x in by_trees], "o-", label="ms per user")
    ax2 = axes[2].twinx()
    ax2.plot([x["trees"] for x in by_trees], [x["model_share"] for x in by_trees], "s--", color="tab:orange",
             label="model share")
    ax2.set_ylim(0, 1)
    axes[2].set(xlabel="trees", ylabel="ms per user", title="by model size")
    ax2.set_ylabel("share of time in CatBoost")
    fig.tight_layout()
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"scaling{'-quick' if quick else ''}.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
