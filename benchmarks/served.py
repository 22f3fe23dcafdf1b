"""served: the replay protocol through the running product, against what ``evaluate --protocol replay`` reports.

The log of the environment's database (``PREFEED_VAR_DIR`` / ``DATABASE_URL``; the synthetic marketplace when it
holds nothing) is cut at a quantile. A fresh prefeed gets the catalogue and the events before the cut, trains on
them as ``evaluate`` does, and starts its worker and API processes. The events after the cut are then posted through
``POST /events`` in log order; before each judged step (a sample of users, their first steps after the cut) the
feed is read with ``GET /feed/<user>?limit=10`` once it has caught up with the user's own events (its
``history_version`` is the database's). The same model, users and steps are judged in process by the replay
protocol (``learning/replay.py``).

Prints the served and evaluated NDCG@10 with the best baseline, the served ratio with its interval, and the share of
steps whose served list scores exactly what the evaluated one does; writes ``results/served-<name>.json``.

With ``PREFEED_RANK_SHOWN=1`` the product and the judged model rank with the columns of what each user was shown
(the pages the product served, as the collector stored them; in process, the ranker's own earlier pages), and the
results go to ``results/served-<name>-shown.json``.

Events go in requests of ``PREFEED_EVENTS_BATCH_MAX`` (500); ``PREFEED_BENCH_EVENTS_PER_REQUEST=1`` posts them one
at a time, as a client posting each event as it happens would. On a log stamped by the day, a worker whose item
table reloads at a new day's first request sees the rest of that request's events of the day too.
"""

from __future__ import annotations

import time

import numpy as np

from precompute.data.log import load_events
from precompute.learning import bootstrap, replay
from precompute.learning.split import cut_time
from precompute.ranking import source_index
from precompute.ranking.item_loader import load_item_table
from precompute.learning.steps import find

from .lab.logs import open_log
from .lab.product import CATCH_UP, Product
from .lab.results import SHOWN, table, write_result

FULL = dict(cut=0.8, users=300, steps=5, workers=2, iterations=None, k=10)
QUICK = dict(cut=0.8, users=6, steps=2, workers=1, iterations=30, k=10)


def run(quick: bool = False) -> dict:
    cfg = QUICK if quick else FULL
    with open_log(quick) as (source, source_settings, name):
        log = load_events(source)
        events = log
        cut = cut_time(log.ts, cfg["cut"])
        with Product(source, source_settings, events, cut, cfg) as product:
            # The judged users and steps, and what the replay protocol says of them, with the product's model.
            items = load_item_table(source, product.settings, as_of=cut)
            index = source_index.for_items(items, product.trained.pairs)
            steps = find(events, items, cut, float("inf"), cfg["steps"])
            who = steps.users()
            if len(who) > cfg["users"]:
                who = np.sort(np.random.default_rng(0).choice(who, size=cfg["users"], replace=False))
            detail: dict = {}
            judged = replay.judge_replay(items, index, events, cut, product.trained.ranker, product.settings,
                                         n_steps=cfg["steps"], only=who, k=cfg["k"], detail=detail)
            steps = detail["steps"]
            t0 = time.perf_counter()
            lists, late = product.replay(steps, items, cfg["k"])
            seconds = time.perf_counter() - t0
            per_request = product.per_request
        ndcg, hit = {"served": np.zeros(len(steps))}, {"served": np.zeros(len(steps))}
        replay.score_lists("served", lists, steps, 0, cfg["k"], ndcg, hit)
        evaluated = detail["ndcg"]["ranker"]
        best = judged.best_baseline
        user_pos = np.unique(steps.user, return_inverse=True)[1].ravel()
        per_user = {m: np.bincount(user_pos, weights=v) for m, v in
                    (("served", ndcg["served"]), ("evaluated", evaluated), (best, detail["ndcg"][best]))}
        served_mean = float(ndcg["served"].mean()) if len(steps) else 0.0
        base = judged.methods[best]["ndcg"]
        out = dict(
            log=name, rank_shown=product.settings.rank_shown, cut=cut, cut_quantile=cfg["cut"], users=int(len(who)),
            steps=len(steps), late_reads=late,
            replay_seconds=seconds, events_per_request=per_request, best_baseline=best, baseline_ndcg=base,
            served=dict(ndcg=served_mean, hit_rate=float(hit["served"].mean()) if len(steps) else 0.0,
                        repeat_share=replay.repeat_share(steps.user, [rows[:cfg["k"]] for rows in lists]),
                        ratio=served_mean / base if base > 0 else None,
                        interval=bootstrap.ratio_interval(per_user["served"], per_user[best])),
            evaluated=dict(ndcg=judged.methods["ranker"]["ndcg"], ratio=judged.ratio, interval=judged.ratio_interval,
                           repeat_share=judged.methods["ranker"]["repeat_share"]),
            served_vs_evaluated=bootstrap.ratio_interval(per_user["served"], per_user["evaluated"]),
            same_score_share=float(np.mean(np.isclose(ndcg["served"], evaluated))) if len(steps) else None,
            methods=judged.methods)
        print(table(f"replay on {name} at cut {cfg['cut']:g}: {len(steps)} steps of {len(who)} users",
                    ["feed", "NDCG@10", f"/ {best}", "95% interval", "repeated"],
                    [["served (HTTP)", served_mean, _x(out["served"]["ratio"]), _iv(out["served"]["interval"]),
                      out["served"]["repeat_share"]],
                     ["evaluated", judged.methods["ranker"]["ndcg"], _x(judged.ratio), _iv(judged.ratio_interval),
                      out["evaluated"]["repeat_share"]],
                     [best, base, "1.00x", "", judged.methods[best]["repeat_share"]]]))
        print("repeated: the share of a step's page its user's previous page held")
        print(f"served / evaluated: {_iv(out['served_vs_evaluated'])} (95% interval); steps scoring the same: "
              f"{out['same_score_share']:.1%}; reads that waited over {CATCH_UP:g}s: {late}; "
              f"replay through HTTP {seconds:.0f}s, {per_request} events per request")
        stem = f"served-{name}" + (f"-{SHOWN}" if out["rank_shown"] else "")
        print(f"wrote {write_result('served' if quick else stem, out, quick)}")
        return out


def _x(ratio) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def _iv(interval) -> str:
    return "-" if interval is None else f"{interval[0]:.2f}-{interval[1]:.2f}"
