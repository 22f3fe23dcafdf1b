"""What an experiment's arms cost a worker: the precompute time per user in each kind of arm, and the resident
memory each extra model-arm bundle adds to a worker (``precompute/pipeline/arms.py``: a worker loads every running
model arm's bundle before fork, beside the promoted one).

Time: two pipelines in one process, on one world: ``plain``, loaded with no experiment (every user ranked by the
promoted bundle), and one loaded while an experiment over every user runs with a model arm of a second bundle (the
same number of trees), ``recent:1d`` and ``popular``. Each arm's users are rebuilt by both pipelines in turn, round
after round (the order reversed every other round; one untimed round first), so each ratio compares the same users
a few seconds apart.

Memory: ``python -m benchmarks.lab.arm_costs`` in a fresh process does what a worker parent does before fork
(``jobs.context.init``) and prints its RSS, PSS and USS; run with 0, 1 and 2 extra model-arm bundles running, in
rounds. The extra bundles are copies of the promoted one written under new versions, so each is exactly its size.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np

from precompute.experiments import registry
from precompute.feeds.client import redis_client
from precompute.learning.fit import fit_ranker
from precompute.ranking import bundle
from precompute.ranking.layout import for_settings
from precompute.pipeline.pipeline import STAGES, Pipeline

from .results import median
from .world import ROOT

#: The experiment's arms, by label: ``{other}`` is the second bundle's version.
ARMS = {"model:other": "model:{other}", "recent:1d": "recent:1d", "popular": "popular"}
MiB = 1 << 20


def bundle_disk_bytes(model_dir, version: int) -> int:
    """A bundle's files on disk: the CatBoost model and the candidate pairs (``bundle.FILES``)."""
    return sum((model_dir / str(version) / name).stat().st_size for name in bundle.FILES)


def per_arm_cost(world, plain: Pipeline, users: list[int], iterations: int, repeats: int) -> dict:
    """Milliseconds per user of a rebuild of each arm's users, by ``plain`` (no experiment) and in the arm, medians
    over ``repeats`` interleaved rounds, and their ratio. Stops its experiment before returning."""
    s = world.settings
    fitted = fit_ranker(world.engine, s, iterations=iterations, users=200, seed=1)
    other = bundle.write(s.model_dir, fitted.model, fitted.pairs, {"metrics": fitted.metrics}, fitted.cascade)
    specs = {label: spec.format(other=other) for label, spec in ARMS.items()}
    experiment = registry.create(world.engine, "bench-arms", [(label.replace(":", "-"), spec)
                                                              for label, spec in specs.items()],
                                 None, 1.0, s.model_dir, for_settings(s))
    try:
        # Its own key prefix: both pipelines write every feed (no version guard keeps one's write from the other).
        in_arms = Pipeline(dataclasses.replace(s, key_prefix=s.key_prefix + "arms:"), world.engine,
                           redis_client(s.feed_url))
        in_arms.load()
        assert other in in_arms.arms.bundles and not plain.arms.experiments
        which = experiment.arm_of(np.array(users))
        groups = {label: [u for u, a in zip(users, which.tolist()) if a == k] for k, label in enumerate(specs)}
        runs = {label: {"none": [], "arm": []} for label in specs}
        for label in groups:            # untimed: each pipeline's first pass touches its heap and Redis keys
            _rebuild(plain, groups[label], s.batch_size), _rebuild(in_arms, groups[label], s.batch_size)
        for round_ in range(repeats):
            for label in (list(groups) if round_ % 2 == 0 else list(reversed(groups))):
                sides = [("none", plain), ("arm", in_arms)]
                for side, pipeline in (sides if round_ % 2 == 0 else reversed(sides)):
                    runs[label][side].append(_rebuild(pipeline, groups[label], s.batch_size))
    finally:
        registry.stop(world.engine, "bench-arms", None)

    def ms(run: dict, n: int) -> float:
        return 1000 * sum(run["seconds"].values()) / n

    arms = {}
    for label, run in runs.items():
        n = len(groups[label])
        arms[label] = dict(
            spec=specs[label], users=n,
            per_user_ms=median([ms(x, n) for x in run["arm"]]),
            none_per_user_ms=median([ms(x, n) for x in run["none"]]),
            ratios_per_round=[ms(a, n) / ms(b, n) for a, b in zip(run["arm"], run["none"])],
            per_user_ms_by_stage={k: 1000 * median([x["seconds"][k] for x in run["arm"]]) / n for k in STAGES},
            kept_newer=sum(x["kept_newer"] for x in run["arm"] + run["none"]))
    none_stages = [{k: 1000 * sum(runs[label]["none"][r]["seconds"][k] for label in runs) / len(users)
                    for k in STAGES} for r in range(repeats)]
    return dict(
        rounds=repeats, users=len(users), second_bundle=dict(version=other, trees=int(fitted.model.tree_count_)),
        per_user_ms_by_arm={"none": median([sum(x.values()) for x in none_stages]),
                            **{k: v["per_user_ms"] for k, v in arms.items()}},
        ratio_by_arm={"none": 1.0, **{k: median(v["ratios_per_round"]) for k, v in arms.items()}},
        none_per_user_ms_by_stage={k: median([x[k] for x in none_stages]) for k in STAGES}, arms=arms)


def _rebuild(pipeline: Pipeline, users: list[int], batch_size: int) -> dict:
    seconds, kept = dict.fromkeys(STAGES, 0.0), 0
    for i in range(0, len(users), batch_size):
        res = pipeline.recompute(users[i:i + batch_size])
        kept += res.kept_newer
        for k in STAGES:
            seconds[k] += res.seconds[k]
    return dict(seconds=seconds, kept_newer=kept)


def bundle_memory(world, extras: tuple[int, ...] = (0, 1, 2), rounds: int = 3) -> dict:
    """A worker parent's memory after its pre-fork init with ``extras`` extra model-arm bundles running (an
    experiment of model arms, topped up to two arms with simple methods), in ``rounds`` interleaved rounds; the
    growth per extra bundle is the least-squares slope over every sample."""
    s = world.settings
    promoted = bundle.load(s.model_dir, layout=for_settings(s))
    copies = [bundle.write(s.model_dir, promoted.model, promoted.pairs, {"metrics": promoted.meta.get("metrics")},
                           promoted.cascade) for _ in range(max(extras))]
    samples: dict[int, list[dict]] = {n: [] for n in extras}
    for round_ in range(rounds):
        for n in (extras if round_ % 2 == 0 else tuple(reversed(extras))):
            arms = [(f"copy{k}", f"model:{v}") for k, v in enumerate(copies[:n])]
            arms += [("popular", "popular"), ("recent", "recent:1d")][:max(0, 2 - n)]
            name = f"bench-memory-{round_}-{n}"
            registry.create(world.engine, name, arms, None, 1.0, s.model_dir, for_settings(s))
            try:
                samples[n].append(_worker_memory(world))
            finally:
                registry.stop(world.engine, name, None)
    assert all(x["extra_bundles"] == n for n in extras for x in samples[n]), samples
    out = dict(rounds=rounds, bundle_disk_mib=bundle_disk_bytes(s.model_dir, promoted.version) / MiB,
               trees=int(promoted.model.tree_count_), by_extra_bundles={})
    for kind in ("rss", "pss", "uss"):
        xs = [n for n in extras for _ in samples[n]]
        ys = [x[kind] / MiB for n in extras for x in samples[n]]
        out[f"{kind}_mib_per_extra_bundle"] = float(np.polyfit(xs, ys, 1)[0])
    for n in extras:
        out["by_extra_bundles"][str(n)] = {f"{kind}_mib": median([x[kind] / MiB for x in samples[n]])
                                           for kind in ("rss", "pss", "uss")}
    return out


def _worker_memory(world) -> dict:
    done = subprocess.run([sys.executable, "-m", "benchmarks.lab.arm_costs"], env=world.env(), cwd=ROOT,
                          check=True, capture_output=True, text=True, timeout=600)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _report_own_memory() -> None:
    """In a fresh process: a worker parent's pre-fork init, then its memory as one JSON line."""
    import gc

    import psutil

    from jobs import context

    pipeline = context.init()
    gc.collect()
    info = psutil.Process().memory_full_info()
    print(json.dumps(dict(rss=info.rss, pss=info.pss, uss=info.uss, extra_bundles=len(pipeline.arms.bundles))))


if __name__ == "__main__":
    _report_own_memory()
