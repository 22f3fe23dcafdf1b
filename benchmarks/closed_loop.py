"""closed_loop: the ranker with and without the "shown" columns, judged by an experiment on pages the product served.

Imported logs carry no pages: what a user does after being shown an item can only be learned from pages the product
really served. So the product serves them first. The log (the environment's database, else the synthetic
marketplace) is cut at a quantile, and a fresh prefeed gets the catalogue and the events before the cut
(``lab/product.py``) with ``PREFEED_RANK_SHOWN`` on and a model trained without the shown columns (they are in the
layout and ignored), as a deployment runs before it turns them on. Then:

1. **Served and recorded.** The first half of the steps after the cut is lived through the running API and workers,
   as the experiment benchmark lives the log (``experiment.Simulation``): before each step the user reads a page of
   10 and clicks what they chose on it; the log's own events follow. The collector stores every page read.
2. **Two bundles, the same data.** Once the log up to the half is posted and the pages taken in, two bundles are
   trained on the product's database as ``manage.py train`` would: one with the shown columns ignored, one using
   them, where the training steps after the cut see the pages stored before each of them
   (``learning/derived.StoredPages``). Same seed, same sample, same trees at most. Their last training period is
   the served one (``served_period``): its steps are the ones whose pages are stored.
3. **The experiment.** An experiment over every user, ``without`` (the control) against ``with``, and the second
   half lived through the product. ``experiments report`` judges clicks per user; its counts must equal the
   simulation's (``exact``). Beside it, per arm, the pages' NDCG@10 against the step that followed and the share of
   a page that repeats the user's previous page.

The simulated users follow the log, not the page: an item passed over is not less likely to be chosen next for having
been shown. What the shown columns can learn here is what the pages' skips say about the log's own next steps,
which is what the verdict measures. Pages are kept for the whole run (``PREFEED_IMPRESSIONS_KEEP`` of a year): the
log is replayed faster than it happened, and a user's pages of the first half would otherwise be gone by the second.
"""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
from sqlalchemy import func, select

from precompute.data.tables import ServedPage
from precompute.experiments.collect import collect, newest_event_id, settle_seconds
from precompute.feeds.client import clients
from precompute.learning.fit import fit_ranker
from precompute.learning.replay import repeat_share
from precompute.ranking import bundle, shown
from precompute.units import DAY

from .experiment import FAST, Simulation, fmt_num, fmt_ratio, judged_steps
from .lab.product import Product, product_of_log
from .lab.results import table, write_result

SETTINGS = {**FAST, "rank_shown": True, "impressions_keep": 365 * DAY}
FULL = dict(cut=0.8, users=None, steps=10, workers=2, iterations=None, k=10, concurrency=16, settings=SETTINGS,
            ignore=shown.COLUMNS)
QUICK = dict(cut=0.8, users=40, steps=4, workers=1, iterations=30, k=10, concurrency=8, settings=SETTINGS,
             ignore=shown.COLUMNS)
#: The control first: the ranker as it runs before the shown columns are turned on.
ARMS = ("without", "with")


def run(quick: bool = False) -> dict:
    cfg = QUICK if quick else FULL
    with product_of_log(quick, cfg) as (product, source, name):
        events, cut = product.events, product.cut
        items, steps, who = judged_steps(source, product, events, cut, cfg)
        half = float(np.median(steps.ts))
        first, second = steps.take(np.flatnonzero(steps.ts < half)), steps.take(np.flatnonzero(steps.ts >= half))
        product.manage("precompute", "--all")      # every user's feed, as a deployment has before it serves
        t0 = time.perf_counter()
        served = Simulation(product, items, cfg)
        served.replay(first)
        n_half = int(np.searchsorted(events.ts, half))
        product.post_until([n for n, _ in product.settings.event_types], n_half)
        stored = _take_in(product)
        served_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        settings = served_period(product.settings, events.ts[:n_half], cut)
        trained = {arm: fit_ranker(product.engine, settings, iterations=cfg["iterations"], seed=0,
                                   ignore=shown.COLUMNS if arm == "without" else ())
                   for arm in ARMS}
        train_seconds = time.perf_counter() - t0
        versions = {arm: bundle.write(product.settings.model_dir, t.model, t.pairs, {"metrics": t.metrics},
                                      t.cascade) for arm, t in trained.items()}
        product.manage("experiments", "create", "shown", *[x for arm in ARMS
                                                           for x in ("--arm", f"{arm}=model:{versions[arm]}")],
                       "--users", "1")
        t0 = time.perf_counter()
        sim = Simulation(product, items, cfg)
        sim.replay(second)
        experiment_seconds = time.perf_counter() - t0
        report = json.loads(product.manage("experiments", "report", "shown", "--json"))
        expected = sim.expected()
    judged = per_arm(sim)
    checks, rows = [], []
    for arm in report["arms"]:
        mine = expected.get(("shown", arm["name"]), dict(users=0, pages=0, clicks=0))
        theirs = dict(users=arm["users"], pages=arm["pages"], clicks=arm["events"]["click"]["attributed"])
        checks.append(mine == theirs)
        j = judged.get(arm["name"], {})
        rows.append([arm["name"], theirs["users"], theirs["pages"], theirs["clicks"], mine["clicks"],
                     fmt_num(arm["events"]["click"]["per_user"]), fmt_ratio(arm), fmt_num(j.get("ndcg")),
                     fmt_num(j.get("repeated"))])
    treat = report["arms"][1]
    importance = _importance(trained["with"])
    out = dict(log=name, cut=cut, cut_quantile=cfg["cut"], half=half, users=int(len(who)), steps=len(steps),
               first_steps=len(first), second_steps=len(second), stored_pages=stored, served_seconds=served_seconds,
               train_seconds=train_seconds, experiment_seconds=experiment_seconds, late_reads=served.late + sim.late,
               trained={arm: dict(trees=t.metrics["trees"], train_rows=t.metrics["train_rows"],
                                  stored_steps=t.metrics.get("shown_stored_steps", 0))
                        for arm, t in trained.items()},
               shown_importance=importance, report=report,
               simulated={f"shown/{a}": v for (e, a), v in expected.items() if e == "shown"}, judged=judged,
               exact=all(checks), verdict=report["verdict"], ratio=treat["ratio"],
               ratio_interval=treat["ratio_interval"])
    print(table(f"closed loop on {name} at cut {cfg['cut']:g}: {len(first)} steps served and recorded "
                f"({stored:,} pages stored), then {len(second)} steps in the experiment",
                ["arm", "users", "pages", "clicks (report)", "clicks (simulation)", "clicks per user", "ratio (95%)",
                 "NDCG@10 of the pages", "repeated share"], rows))
    print(f"report counts equal the simulation's: {out['exact']}; verdict: {report['verdict']}; the shown columns' "
          f"share of the 'with' model's importance: {importance:.1%}; reads that waited: {out['late_reads']}")
    print(f"wrote {write_result('closed_loop' if quick else f'closed_loop-{name}', out, quick)}")
    return out


def served_period(settings, ts: np.ndarray, cut: float):
    """``settings`` whose last training period is the one the product served: its cut where serving began (``cut``),
    its validation cut halfway through the served log (``ts``: the log's times up to the half), so that training's
    steps, and validation's, read the pages stored before them. Earlier periods (``PREFEED_TRAIN_PERIODS``) come
    before serving began, with the stand-in's pages."""
    served = ts[ts > cut]
    return dataclasses.replace(settings, train_cut_quantile=float(np.mean(ts <= cut)),
                               train_valid_quantile=float(np.mean(ts <= np.median(served))))


def _take_in(product: Product) -> int:
    """Every page read so far moved to the database (as ``experiments report`` takes them in); the pages stored."""
    settings = product.settings
    time.sleep(settle_seconds(settings))
    collect(product.engine, clients(settings)[0], settings, through=newest_event_id(product.engine), lock_wait=120)
    with product.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(ServedPage)).scalar())


def per_arm(sim: Simulation) -> dict:
    """Per arm: the mean NDCG@10 of the pages read against the step each preceded (binary: the items chosen), and
    the share of a page's items on the same user's previous page (``replay.repeat_share``, as evaluate reports it)."""
    discount = 1.0 / np.log2(np.arange(2, 12))
    out = {}
    for arm in dict.fromkeys(a for _, a, _, _ in sim.reads):
        reads = [r for r in sim.reads if r[1] == arm]
        ndcg = []
        for _, _, page, chosen in reads:
            gains = np.array([i in chosen for i in page[:10]], dtype=float)
            ideal = discount[:min(len(chosen), 10)].sum()
            ndcg.append(float(gains @ discount[:len(gains)] / ideal) if ideal else 0.0)
        out[arm] = dict(pages=len(reads), ndcg=float(np.mean(ndcg)),
                        repeated=repeat_share(np.array([u for u, _, _, _ in reads]),
                                              [np.array(page, dtype=np.int64) for _, _, page, _ in reads]))
    return out


def _importance(fitted) -> float:
    """The share of the model's importance (prediction values change) its shown columns hold."""
    values = np.asarray(fitted.model.get_feature_importance(type="PredictionValuesChange"), dtype=float)
    names = list(fitted.model.feature_names_)
    mine = sum(values[names.index(c)] for c in shown.COLUMNS if c in names)
    return float(mine / values.sum()) if values.sum() else 0.0

