"""quality: offline evaluation (``manage.py evaluate``) on the synthetic marketplace at the demo's size, over several
training seeds: every baseline's and the ranker's metrics (mean over seeds), the ranker / best-baseline ratio of
each run, and an NDCG@10 chart (``benchmarks/results/quality.png``).

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

from precompute.data import synthetic
from precompute.data import log as event_log
from precompute.learning import lists, metrics, report
from precompute.learning.evaluate import LIST_LENGTH, evaluate, scene
from precompute.learning.split import cut_time
from precompute.settings import Settings

from .lab.results import RESULTS, table, write_result
from .lab.logs import synthetic_log

FULL = dict(users=2000, items=3000, events=100_000, seeds=(0, 1, 2), iterations=None)
QUICK = dict(users=300, items=1500, events=30_000, seeds=(0,), iterations=30)


def run(quick: bool = False) -> dict:
    cfg = QUICK if quick else FULL
    tmp = Path(tempfile.mkdtemp(prefix="prefeed-quality-"))
    try:
        engine, settings, market = synthetic_log(tmp, cfg, quick)
        runs = []
        for seed in cfg["seeds"]:
            t0 = time.perf_counter()
            ev = evaluate(engine, settings, seed=seed, iterations=cfg["iterations"])
            runs.append((seed, ev, time.perf_counter() - t0))
        ceiling = oracle(engine, settings, market.latent)
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
    print(f"ceiling: ranking by the generator's own probabilities (no method can see them) reaches NDCG@10 "
          f"{ceiling['ndcg']:.4f}, Recall@100 {ceiling['recall100']:.4f}; the ranker is at "
          f"{mean['ranker']['ndcg'] / ceiling['ndcg']:.2f} of it, the best baseline at "
          f"{mean[best]['ndcg'] / ceiling['ndcg']:.2f}")
    shown = "n/a (the best baseline scores 0)" if averaged.ratio is None else f"{averaged.ratio:.2f}×"
    print(f"ranker / best baseline ({best}) = {shown} (mean NDCG); per seed: "
          + ", ".join(f"{r:.2f}×" for r in ratios)
          + f"; {first.users} users judged; {statistics.median(s for *_, s in runs):.1f}s per run (median)")
    chart = RESULTS / f"quality{'-quick' if quick else ''}.png"
    RESULTS.mkdir(parents=True, exist_ok=True)
    report.write_chart(averaged, chart)
    data = dict(config={k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}, users_judged=first.users,
                methods=mean, best_baseline=best, ratio=averaged.ratio, ratios=ratios, oracle=ceiling,
                runs=[dict(seed=seed, seconds=s, ratio=ev.ratio, ratio_interval=ev.ratio_interval,
                          best_baseline=ev.best_baseline, train=ev.train, methods=ev.methods)
                      for seed, ev, s in runs], chart=chart.name)
    out = write_result("quality", data, quick)
    print(f"wrote {out} and {chart}")
    return data


def oracle(engine, settings: Settings, latent: synthetic.Latent, cut_quantile: float = 0.8, k: int = 10) -> dict:
    """Metrics of the ranking an all-knowing recommender makes at ``evaluate``'s cut and for its judged users: each
    user's items by the generator's expected gain (``Latent.expected_events``), seen and inactive items left out
    as for every method. The ceiling the ranker / best-baseline ratio is to be read against."""
    log = event_log.load_events(engine)
    at = scene(engine, settings, log, cut_time(log.ts, cut_quantile))
    split, items = at.split, at.items
    generator_index = items.ids - 1          # the generator's item ids are 1..n in its own order
    out = lists.Collector()
    for a in range(0, len(split.users), 200):
        b = min(a + 200, len(split.users))
        gain = latent.expected_events(split.users[a:b] - 1)[:, generator_index]
        lists.from_dense(split, gain + 1e-12, items.active.copy(), a, b, max(k, LIST_LENGTH), out=out)
    return metrics.summarize(split.truth, out.ranked(), k, int(items.active.sum()))
