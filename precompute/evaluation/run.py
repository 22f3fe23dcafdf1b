"""``evaluate``: read the log once, split it at a quantile of event time, rank the judged users with every baseline
and the ranker trained on the pre-cut log, and summarize each method's lists against the truth."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np
from sqlalchemy import Engine

from ..data import log as event_log
from ..errors import InvalidInput
from ..ranking import covisit
from ..ranking.item_table import load_item_table
from ..settings import Settings
from . import baselines, metrics, model
from .split import cut_time, split_log

#: Fewer events than this cannot be split into a history and a future worth judging.
MIN_EVENTS = 100
#: Lists are this long at least, so Recall@100 is defined whatever ``k``.
LIST_LENGTH = 100


@dataclasses.dataclass
class Evaluation:
    cut: float                          # epoch s
    cut_quantile: float
    k: int
    users: int                          # judged users
    events_before: int
    events_after: int
    methods: dict[str, dict[str, float]]     # metrics by method, baselines first, "ranker" last
    best_baseline: str
    ratio: float | None                 # ranker NDCG@k / best baseline's; None when the baseline scores 0
    train: dict                         # the ranker's own training metrics (inner split of the pre-cut log)
    seconds: float

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def evaluate(engine: Engine, settings: Settings, *, cut_quantile: float = 0.8, k: int = 10, recent_days: float = 7.0,
             users: int | None = None, seed: int = 0, iterations: int | None = None,
             progress: Callable[[str], None] = lambda msg: None) -> Evaluation:
    """Evaluate every method on the database's log (up to ``settings.as_of``); see ``manage.py evaluate``."""
    if not 0.0 < cut_quantile < 1.0:
        raise InvalidInput(f"--cut must be strictly between 0 and 1, not {cut_quantile:g}")
    if k < 1:
        raise InvalidInput(f"--k must be at least 1, not {k}")
    t0 = time.perf_counter()
    log = event_log.load_events(engine, settings.as_of or float("inf"))
    events = (log.user, log.item, log.type, log.ts)
    if len(log) < MIN_EVENTS:
        raise InvalidInput(f"only {len(log)} events in the log; evaluation needs at least {MIN_EVENTS}")
    cut = cut_time(log.ts, cut_quantile)
    items = load_item_table(engine, settings, as_of=cut)
    split = split_log(events, cut, items, users=users, seed=seed)
    progress(f"time split at {cut:.0f}: {split.n_before} events before, {split.n_after} after; "
             f"{len(split.users)} users judged")
    if split.n_after == 0 or len(split.users) == 0:
        raise InvalidInput(f"no user has history before the cut (quantile {cut_quantile:g}) and a new item of "
                           "positive weight after it: nothing to judge")
    n = max(k, LIST_LENGTH)
    progress("building co-visitation from the pre-cut log")
    user, item, type_, ts = split.pre
    pairs = covisit.build_pairs(user, item, ts, settings.covisit_window, settings.session_gap,
                                settings.covisit_neighbours, covisit.event_factors(type_, settings))
    ranked = baselines.rank_all(split, items, covisit.index_for(items, pairs), settings, n, recent_days=recent_days,
                                progress=progress)
    progress("training the ranker on the pre-cut log")
    result = model.train(engine, settings, split, iterations=iterations, seed=seed,
                         progress=lambda m: progress(f"  {m}"))
    progress(f"ranking {len(split.users)} users with the ranker")
    ranked["ranker"] = model.rank(result, split, items, settings, n)
    n_active = int(items.active.sum())
    summary = {name: metrics.summarize(split.truth, r, k, n_active) for name, r in ranked.items()}
    best = max(baselines.BASELINES, key=lambda name: summary[name]["ndcg"])
    base = summary[best]["ndcg"]
    return Evaluation(cut=cut, cut_quantile=cut_quantile, k=k, users=len(split.users),
                      events_before=split.n_before, events_after=split.n_after, methods=summary, best_baseline=best,
                      ratio=summary["ranker"]["ndcg"] / base if base > 0 else None,
                      train={key: v for key, v in result.metrics.items() if np.isscalar(v)},
                      seconds=time.perf_counter() - t0)
