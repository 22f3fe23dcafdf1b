"""What an experiment's arms cost a worker: the precompute time per user in each kind of arm, and the resident
memory each extra model-arm bundle adds to a worker (``precompute/pipeline/arms.py``: a worker loads every running
model arm's bundle before fork, beside the promoted one).

Time: two pipelines in one process, on one world: ``plain``, loaded with no experiment (every user ranked by the
promoted bundle), and one loaded while an experiment over every user runs with a model arm of a second bundle (the
same number of trees), ``recent:1d`` and ``popular``. Each arm's users are rebuilt by both pipelines in turn, round
after round (the order reversed every other round; one untimed round first), so each ratio compares the same users
a few seconds apart.

Memory: ``python -m benchmarks.lab.arm_costs`` in a fresh process does what a worker parent does before fork
(``jobs.context.init``) and prints its RSS, PSS and USS (``/proc/self/smaps_rollup``); run with 0, 1 and 2 extra
model-arm bundles running, in rounds. The extra bundles are copies of the promoted one written under new versions,
so each is exactly its size: in the format ``train`` writes (sources mapped from disk) and, in the same rounds, in
the format it wrote before (id pairs loaded into memory).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys

import numpy as np

from precompute.experiments import registry
from precompute.feeds.client import redis_client
from precompute.learning.fit import fit_ranker
from precompute.ranking import bundle
from precompute.ranking.layout import for_settings
from precompute.ranking.source_arrays import SourceArrays
from precompute.pipeline.pipeline import STAGES, Pipeline

from .results import median
from .world import ROOT

#: The experiment's arms, by label: ``{other}`` is the second bundle's version.
ARMS = {"model:other": "model:{other}", "recent:1d": "recent:1d", "popular": "popular"}
MiB = 1 << 20
#: What ``own_memory`` reports of a process.
KINDS = ("rss", "pss", "pss_anon", "pss_file", "uss")


def bundle_disk_bytes(model_dir, version: int) -> int:
    """A bundle's files on disk: its CatBoost models and candidate sources (``bundle.disk_bytes``)."""
    return bundle.disk_bytes(model_dir / str(version))


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
    experiment of model arms, topped up to two arms with simple methods), in ``rounds`` interleaved rounds, with the
    extra bundles in each format side by side: as ``train`` writes them (format 2, sources mapped from disk) and as
    it wrote them before (format 1, the same model and sources as id pairs in ``covisit.npz``, loaded into memory).
    The growth per extra bundle is the least-squares slope over every sample. Each sample is taken twice: after the
    init, and after every page of every mapped array was read (the most a process can hold of them: what a work
    horse that ranked users of every item reaches)."""
    s = world.settings
    promoted = bundle.load(s.model_dir, layout=for_settings(s))
    mapped = [bundle.write(s.model_dir, promoted.model, promoted.sources, {"metrics": promoted.meta.get("metrics")},
                           promoted.cascade) for _ in range(max(extras))]
    copies = {2: mapped, 1: [as_format_1(s.model_dir, v) for v in mapped]}
    samples: dict[int, dict[int, list[dict]]] = {f: {n: [] for n in extras} for f in copies}
    for round_ in range(rounds):
        for n in (extras if round_ % 2 == 0 else tuple(reversed(extras))):
            for f in ((2, 1) if round_ % 2 == 0 else (1, 2)) if n else (2,):
                arms = [(f"copy{k}", f"model:{v}") for k, v in enumerate(copies[f][:n])]
                arms += [("popular", "popular"), ("recent", "recent:1d")][:max(0, 2 - n)]
                name = f"bench-memory-{round_}-{n}-{f}"
                registry.create(world.engine, name, arms, None, 1.0, s.model_dir, for_settings(s))
                try:
                    sample = _worker_memory(world)
                finally:
                    registry.stop(world.engine, name, None)
                for g in copies if n == 0 else (f,):      # no extra bundle: the same process for both formats
                    samples[g][n].append(sample)
    assert all(x["extra_bundles"] == n for f in samples for n in extras for x in samples[f][n]), samples
    by_format = {str(f): dict(_slopes(samples[f], extras), bundle_disk_mib=bundle_disk_bytes(s.model_dir, v[0]) / MiB)
                 for f, v in copies.items()}
    # The format ``train`` writes at the top level, as before; the older one beside it, measured in the same rounds.
    return dict(rounds=rounds, trees=int(promoted.model.tree_count_), format=bundle.BUNDLE_FORMAT,
                **by_format[str(bundle.BUNDLE_FORMAT)], by_format=by_format)


def _slopes(samples: dict[int, list[dict]], extras: tuple[int, ...]) -> dict:
    out: dict = dict(by_extra_bundles={}, touched={})
    for kind in KINDS:
        xs = [n for n in extras for _ in samples[n]]
        out[f"{kind}_mib_per_extra_bundle"] = float(np.polyfit(xs, [x[kind] / MiB for n in extras
                                                                    for x in samples[n]], 1)[0])
        out["touched"][f"{kind}_mib_per_extra_bundle"] = float(np.polyfit(
            xs, [x["touched"][kind] / MiB for n in extras for x in samples[n]], 1)[0])
    for n in extras:
        out["by_extra_bundles"][str(n)] = {f"{kind}_mib": median([x[kind] / MiB for x in samples[n]]) for kind in KINDS}
        out["touched"][str(n)] = {f"{kind}_mib": median([x["touched"][kind] / MiB for x in samples[n]])
                                  for kind in KINDS}
    return out


def as_format_1(model_dir, version: int) -> int:
    """Bundle ``version`` written again as the older format wrote it, under a new version: the same model(s), its
    sources as id pairs in ``covisit.npz`` (``np.savez``), meta.json of format 1 with the checksums it recorded."""
    old = bundle.versions(model_dir)[0] + 1
    src, dst = model_dir / str(version), model_dir / str(old)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(bundle.SOURCES))
    np.savez(dst / "covisit.npz", **bundle.load(model_dir, version).sources.pairs())
    meta = json.loads((dst / "meta.json").read_text())
    names = ["model.cbm", "covisit.npz", *([bundle.FIRST_STAGE] if "cascade" in meta else [])]
    meta.update(format=1, version=old, sha256={n: bundle.file_sha256(dst / n) for n in names})
    (dst / "meta.json").write_text(json.dumps(meta, indent=2))
    return old


def _worker_memory(world) -> dict:
    done = subprocess.run([sys.executable, "-m", "benchmarks.lab.arm_costs"], env=world.env(), cwd=ROOT,
                          check=True, capture_output=True, text=True, timeout=600)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _report_own_memory() -> None:
    """In a fresh process: a worker parent's pre-fork init, then its memory as one JSON line (``smaps_rollup``), and
    again after reading every page of every mapped array of its bundles."""
    import gc

    from jobs import context

    pipeline = context.init()
    gc.collect()
    after_init = own_memory()
    held = [pipeline.bundle] + [b for b, _ in pipeline.arms.bundles.values()]
    for b in held:
        for array in (b.sources.files().values() if isinstance(b.sources, SourceArrays) else ()):
            np.asarray(array).reshape(-1).view(np.uint8)[::4096].sum()     # one byte of every page
    print(json.dumps(dict(after_init, touched=own_memory(), extra_bundles=len(pipeline.arms.bundles))))


def own_memory() -> dict:
    """This process's RSS, PSS (and its anonymous and file-backed parts) and USS, bytes, from
    ``/proc/self/smaps_rollup``: a page mapped from a file counts in PSS divided by the processes mapping it."""
    fields = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return dict(rss=fields["Rss"], pss=fields["Pss"], pss_anon=fields.get("Pss_Anon", 0),
                pss_file=fields.get("Pss_File", 0), uss=fields["Private_Clean"] + fields["Private_Dirty"])


if __name__ == "__main__":
    _report_own_memory()
