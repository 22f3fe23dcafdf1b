"""quality: offline evaluation (``manage.py evaluate``) on the synthetic marketplace at the demo's size, over several
training seeds: every baseline's and the ranker's metrics (mean over seeds), the ranker / best-baseline ratio of
each run, and the NDCG@10 chart the README shows (``benchmarks/results/quality.png``).

The world is the one ``make demo`` seeds (same sizes, generator seed 0, its declared attributes); only the seed of
the ranker's training varies, so the spread of the ratio is the noise of training, not of the data.
"""

from __future__ import annotations

import dataclasses
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from precompute.data import bulk, engine as db, synthetic
from precompute.evaluation import report
from precompute.evaluation.run import evaluate
from precompute.settings import Settings

from .common import RESULTS, table, write_result

FULL = dict(users=2000, items=3000, events=100_000, seeds=(0, 1, 2), iterations=None)
QUICK = dict(users=300, items=1500, events=30_000, seeds=(0,), iterations=30)


def run(quick: bool = False) -> dict:
    cfg = QUICK if quick else FULL
    tmp = Path(tempfile.mkdtemp(prefix="prefeed-quality-"))
    try:
        settings = Settings(database_url=f"sqlite:///{tmp / 'quality.db'}", var_dir=tmp, model_dir=tmp / "models",
                            item_attributes=synthetic.ATTRIBUTES)
        engine = db.make_engine(settings.database_url, settings)
        db.init_db(engine, settings)
        bulk.load(engine, synthetic.generate(cfg["users"], cfg["items"], cfg["events"], seed=0, now=time.time()),
                  settings)
        runs = []
        for seed in cfg["seeds"]:
            t0 = time.perf_counter()
            ev = evaluate(engine, settings, seed=seed, iterations=cfg["iterations"])
            runs.append((seed, ev, time.perf_counter() - t0))
        engine.dispose()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    first = runs[0][1]
    mean = {name: {key: float(np.mean([ev.methods[name][key] for _, ev, _ in runs])) for key in m}
            for name, m in first.methods.items()}
    best = max((name for name in mean if name != "ranker"), key=lambda name: mean[name]["ndcg"])
    ratios = [ev.ratio for _, ev, _ in runs if ev.ratio is not None]
    averaged = dataclasses.replace(first, methods=mean, best_baseline=best,
                                   ratio=mean["ranker"]["ndcg"] / mean[best]["ndcg"] if mean[best]["ndcg"] else None)
    print(table(f"evaluate on the synthetic marketplace ({cfg['users']} users, {cfg['items']} items, "
                f"{cfg['events']:,} events; cut 0.8; mean over training seeds {list(cfg['seeds'])})",
                ["method", "NDCG@10", "Recall@10", "Recall@100", "MAP@10", "coverage", "non-empty", "cand. recall"],
                [[name, m["ndcg"], m["recall"], m["recall100"], m["map"], m["coverage"], m["non_empty"],
                  m["candidate_recall"]] for name, m in mean.items()]))
    shown = "n/a (the best baseline scores 0)" if averaged.ratio is None else f"{averaged.ratio:.2f}×"
    print(f"ranker / best baseline ({best}) = {shown} (mean NDCG); per seed: "
          + ", ".join(f"{r:.2f}×" for r in ratios)
          + f"; {first.users} users judged; {statistics.median(s for *_, s in runs):.1f}s per run (median)")
    chart = RESULTS / f"quality{'-quick' if quick else ''}.png"
    RESULTS.mkdir(parents=True, exist_ok=True)
    report.write_chart(averaged, chart)
    data = dict(config={k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}, users_judged=first.users,
                methods=mean, best_baseline=best, ratio=averaged.ratio, ratios=ratios,
                runs=[dict(seed=seed, seconds=s, ratio=ev.ratio, best_baseline=ev.best_baseline, train=ev.train,
                           methods=ev.methods) for seed, ev, s in runs], chart=chart.name)
    out = write_result("quality", data, quick)
    print(f"wrote {out} and {chart}")
    return data
