"""ablation: what each candidate source and each column group adds, under both protocols. ``evaluate --protocol both``
at one cut (0.8, or ``PREFEED_BENCH_CUT``), once with everything and once without each part: a source is removed by
its setting (its candidates are never gathered), a column group by keeping the model from splitting on its columns
(the layout, and so the bundle format, stay the same).

Runs on the database of the environment's settings (``PREFEED_VAR_DIR`` / ``DATABASE_URL``), or on the synthetic
marketplace at the demo's size when that database holds no events (as ``protocols``); writes
``results/ablation-<name>.json`` (``ablation-<name>-cut<cut>.json`` at another cut).
"""

from __future__ import annotations

import dataclasses
import os
import time

from precompute.learning.evaluate import evaluate
from precompute.ranking.layout import for_settings

from .lab.logs import open_log
from .lab.results import table, write_result

#: Each source off, by the settings that gather it.
SOURCES = {
    "covisit": dict(covisit_recent_items=0),
    "knn": dict(knn_candidates=0),
    "latent": dict(latent_candidates=0),
    "recent popularity (1h, 1d)": dict(recent_popular_1h=0, recent_popular_1d=0),
    "category and global popularity": dict(category_popular=0, global_popular=0),
}
#: Column groups of the layout (``layout.for_declaration``), each left out in turn; the sources' flags and scores
#: live in "source" and "user_item".
GROUPS = ("item_static", "item_clock", "item_live", "user", "user_category", "user_item", "source")


def run(quick: bool = False) -> dict:
    cut = float(os.environ.get("PREFEED_BENCH_CUT") or 0.8)
    with open_log(quick) as (engine, settings, name):
        variants = [("everything", {}, ())]
        variants += [(f"without source: {s}", change, ()) for s, change in SOURCES.items()]
        layout = for_settings(settings)
        variants += [(f"without columns: {g}", {}, layout.group(g)) for g in GROUPS]
        if quick:
            variants = variants[:2]
        rows, runs = [], []
        for label, change, ignore in variants:
            t0 = time.perf_counter()
            ev = evaluate(engine, dataclasses.replace(settings, **change), cut_quantile=cut, ignore=tuple(ignore),
                          iterations=30 if quick else None)
            rp = ev.replay
            runs.append(dict(variant=label, static_ndcg=ev.methods["ranker"]["ndcg"], static_ratio=ev.ratio,
                             static_best=ev.best_baseline, replay_ndcg=rp.methods["ranker"]["ndcg"],
                             replay_ratio=rp.ratio, replay_best=rp.best_baseline,
                             candidate_recall=rp.methods["ranker"]["candidate_recall"], sources=rp.sources,
                             seconds=time.perf_counter() - t0))
            r = runs[-1]
            rows.append([label, f"{r['static_ndcg']:.4f}", f"{r['static_ratio']:.2f}x", f"{r['replay_ndcg']:.4f}",
                         f"{r['replay_ratio']:.2f}x", f"{r['candidate_recall']:.3f}"])
            print(f"  {label}: {r['seconds']:.0f}s")
        print(table(f"ablation on {name} (cut {cut:g})", ["variant", "static NDCG@10", "static ratio", "replay NDCG@10",
                                                      "replay ratio", "replay cand. recall"], rows))
        stem = f"ablation-{name}" + ("" if cut == 0.8 else f"-cut{cut:g}")
        path = write_result("ablation" if quick else stem, dict(log=name, cut=cut, runs=runs), quick)
        print(f"wrote {path}")
        return runs
