"""protocols: ``manage.py evaluate --protocol both`` at three cuts (0.7, 0.8, 0.9) and several training seeds, on the
database of the environment's settings (``PREFEED_VAR_DIR`` / ``DATABASE_URL``: import a log there first), or on the
synthetic marketplace at the demo's size when that database holds no events.

Prints one line per run (static and replay ratios with their intervals, the replay's best baseline, candidate recall
per source) and writes ``results/protocols-<name>.json`` (name: the var dir's folder, or ``synthetic``) with every
method's metrics per run: the docs' quality tables are rendered from it. A run with ``PREFEED_CASCADE_KEEP=0`` (the full
model on every candidate) writes ``results/protocols-<name>-full-model.json``, one with ``PREFEED_RANK_SHOWN=1`` (the
ranker with the columns of what each user was shown) ``results/protocols-<name>-shown.json``: the page sets each beside
the default's.
"""

from __future__ import annotations

import os
import time

from precompute.learning.evaluate import evaluate

from .lab.logs import open_log
from .lab.results import table, variant, write_result

FULL = dict(cuts=(0.7, 0.8, 0.9), seeds=(0,), iterations=None)
QUICK = dict(cuts=(0.8,), seeds=(0,), iterations=30)


def run(quick: bool = False) -> dict:
    cfg = dict(QUICK if quick else FULL)
    if os.environ.get("PREFEED_BENCH_SEEDS"):
        cfg["seeds"] = tuple(int(s) for s in os.environ["PREFEED_BENCH_SEEDS"].split(","))
    with open_log(quick) as (engine, settings, name):
        runs, rows = [], []
        for cut in cfg["cuts"]:
            for seed in cfg["seeds"]:
                t0 = time.perf_counter()
                ev = evaluate(engine, settings, cut_quantile=cut, seed=seed, iterations=cfg["iterations"])
                rp = ev.replay
                runs.append(dict(cut=cut, seed=seed, seconds=time.perf_counter() - t0, static=dict(
                    users=ev.users, methods=ev.methods, best=ev.best_baseline, ratio=ev.ratio,
                    interval=ev.ratio_interval), replay=rp.as_dict(), train=ev.train))
                rows.append([f"{cut:g}", seed, ev.users, _ratio(ev.ratio, ev.ratio_interval), ev.best_baseline,
                             rp.steps, _ratio(rp.ratio, rp.ratio_interval), rp.best_baseline,
                             f"{rp.methods['ranker']['candidate_recall']:.3f}"])
                print(f"  cut {cut:g} seed {seed}: {time.perf_counter() - t0:.0f}s")
        print(table(f"evaluate --protocol both on {name}", ["cut", "seed", "users", "static ratio", "static best",
                                                           "steps", "replay ratio", "replay best", "cand. recall"],
                    rows))
        out = dict(log=name, cuts=list(cfg["cuts"]), seeds=list(cfg["seeds"]), cascade_keep=settings.cascade_keep,
                   rank_shown=settings.rank_shown, runs=runs)
        suffix = variant(settings.cascade_keep, settings.rank_shown)
        stem = f"protocols-{name}" + (f"-{suffix}" if suffix else "")
        print(f"wrote {write_result('protocols' if quick else stem, out, quick)}")
        return out


def _ratio(ratio, interval) -> str:
    if ratio is None:
        return "n/a"
    return f"{ratio:.2f}x" + (f" ({interval[0]:.2f}-{interval[1]:.2f})" if interval else "")
