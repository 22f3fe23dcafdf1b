"""``evaluate``: read the log once, split it at a quantile of event time, rank the judged users with every baseline
and the ranker trained on the pre-cut log, and summarize each method's lists against the truth (``judge_static``),
and replay each judged user's next steps (``replay.judge_replay``).

``train.validate`` applies the same protocols at training's own validation cut: the promotion check, so the numbers
``train`` and ``models list`` show mean what ``evaluate`` shows.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np
from sqlalchemy import Engine

from ..data.log import EventLog, load_events
from ..errors import InvalidInput
from ..feeds.diversity import Diversity
from ..progress import indented
from ..ranking.item_loader import load_item_table
from ..ranking.item_table import ItemTable
from ..ranking.source_index import SourceIndex, for_items
from ..settings import Settings
from . import baselines, bootstrap, diversity_cost, item_to_item, metrics, periods, ranker_lists, replay
from .fit import fit_ranker
from .periods import Period
from .split import Split, cut_time, split_log

#: Fewer events than this cannot be split into a history and a future worth judging.
MIN_EVENTS = 100
#: Lists are this long at least, so Recall@100 is defined whatever ``k``.
LIST_LENGTH = 100
#: ``evaluate``'s protocols: the frozen history (``static``), the feed as lived (``replay``), or both.
PROTOCOLS = ("static", "replay", "both")


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
    #: 95 % bootstrap interval of ``ratio`` over the judged users (``bootstrap.ratio_interval``); None when the best
    #: baseline scores 0 for every user of a resample (and so with ``ratio``)
    ratio_interval: tuple[float, float] | None
    train: dict                         # the ranker's own training metrics (inner split of the pre-cut log)
    seconds: float
    protocol: str = "static"
    #: The replay protocol's result (``replay.py``) when it ran; the static fields above are empty without it.
    replay: replay.ReplayResult | None = None
    #: The diversity rule's cost on the ranker's static lists, by setting (``diversity_cost.py``)
    diversity: dict | None = None
    #: The item-to-item check (``item_to_item.py``) on the replayed steps, when the replay protocol ran.
    item_to_item: item_to_item.ItemToItem | None = None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Scene:
    """What every method ranks from at a cut: the split, the item table and the fitted sources as of it."""

    split: Split
    items: ItemTable
    index: SourceIndex


def scene(engine: Engine, settings: Settings, events: EventLog, cut: float, *, users: int | None = None,
          seed: int = 0, exclude: np.ndarray | None = None, known: Period | None = None,
          progress: Callable[[str], None] = lambda msg: None) -> Scene:
    """The split of ``events`` at ``cut`` with the item table and fitted sources known at it; refuses a split with
    nobody to judge. ``users``: judge a seeded random sample of that many; ``exclude``: user ids not judged;
    ``known``: training's period at this cut, whose item table and source index are reused (both are built from
    the log up to the cut with the same settings)."""
    items = load_item_table(engine, settings, as_of=cut) if known is None else known.items
    split = split_log(events, cut, items, users=users, seed=seed, exclude=exclude)
    if split.n_after == 0 or len(split.users) == 0:
        raise InvalidInput(f"no user has history before the cut ({_utc(cut)}) and a new item of positive weight "
                           "after it: nothing to judge")
    progress(f"time split at {cut:.0f}: {split.n_before} events before, {split.n_after} after; "
             f"{len(split.users)} users judged")
    if known is not None:
        return Scene(split=split, items=items, index=known.index)
    progress("building co-visitation and item-kNN neighbours from the pre-cut log")
    return Scene(split=split, items=items, index=for_items(items, periods.pairs(split.pre, slice(None), settings)))


def judge_static(at: Scene, settings: Settings, ranker_model, *, k: int = 10, recent_days: float = 7.0, seed: int = 0,
          progress: Callable[[str], None] = lambda msg: None, diversity: dict | None = None
          ) -> tuple[dict[str, dict[str, float]], str, tuple[float, float] | None]:
    """Every baseline and ``ranker_model`` (a CatBoost ranker trained on the log before the cut) ranked at the
    cut and summarized; returns the metrics by method ("ranker" last), the best baseline's name and the 95 %
    bootstrap interval of the ranker / best baseline NDCG@k ratio over the judged users (None when undefined).
    ``diversity``, when given, receives the diversity rule's cost on the ranker's lists by setting."""
    n = max(k, LIST_LENGTH)
    ranked = baselines.rank_all(at.split, at.items, at.index, settings, n, recent_days=recent_days, progress=progress)
    progress(f"ranking {len(at.split.users)} users with the ranker")
    ranked["ranker"] = ranker_lists.rank(ranker_model, at.split, at.items, at.index, settings, n)
    n_active = int(at.items.active.sum())
    summary = {name: metrics.summarize(at.split.truth, r, k, n_active) for name, r in ranked.items()}
    best = max(baselines.BASELINES, key=lambda name: summary[name]["ndcg"])
    interval = bootstrap.ratio_interval(metrics.ndcg_per_user(at.split.truth, ranked["ranker"], k),
                                        metrics.ndcg_per_user(at.split.truth, ranked[best], k), seed=seed)
    if diversity is not None:
        diversity.update(diversity_cost.static_cost(at.split.truth, ranked["ranker"], at.items,
                                                    diversity_cost.settings_measured(Diversity.of(settings)), k,
                                                    seed=seed))
    return summary, best, interval


def evaluate(engine: Engine, settings: Settings, *, cut_quantile: float = 0.8, k: int = 10, recent_days: float = 7.0,
             users: int | None = None, seed: int = 0, iterations: int | None = None, protocol: str = "both",
             steps: int = 10, ignore: tuple[str, ...] = (),
             progress: Callable[[str], None] = lambda msg: None) -> Evaluation:
    """Evaluate every method on the database's log (up to ``settings.as_of``); see ``manage.py evaluate``.
    ``ignore``: feature columns the ranker may not use (``benchmarks/ablation.py``)."""
    if protocol not in PROTOCOLS:
        raise InvalidInput(f"--protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
    if not 0.0 < cut_quantile < 1.0:
        raise InvalidInput(f"--cut must be strictly between 0 and 1, not {cut_quantile:g}")
    if k < 1:
        raise InvalidInput(f"--k must be at least 1, not {k}")
    t0 = time.perf_counter()
    log = load_events(engine, settings.as_of or float("inf"))
    if len(log) < MIN_EVENTS:
        raise InvalidInput(f"only {len(log)} events in the log; evaluation needs at least {MIN_EVENTS}")
    at = scene(engine, settings, log, cut_time(log.ts, cut_quantile),
               users=users, seed=seed, progress=progress)
    progress("training the ranker on the pre-cut log")
    # Trained on the pre-cut log only (``fit_ranker`` makes its own inner time split of it).
    result = fit_ranker(engine, settings, iterations=iterations, seed=seed, progress=indented(progress),
                        events=at.split.pre, ignore=ignore)
    summary, best, interval, ratio, cost = {}, "", None, None, None
    if protocol in ("static", "both"):
        cost = {}
        summary, best, interval = judge_static(at, settings, result.ranker, k=k, recent_days=recent_days, seed=seed,
                                        progress=progress, diversity=cost)
        base = summary[best]["ndcg"]
        ratio = summary["ranker"]["ndcg"] / base if base > 0 else None
    replayed = similar = None
    if protocol in ("replay", "both"):
        detail: dict = {}
        replayed = replay.judge_replay(at.items, at.index, log, at.split.cut, result.ranker,
                                settings, n_steps=steps, users=users, k=k, seed=seed, progress=progress,
                                       diversity=diversity_cost.settings_measured(Diversity.of(settings)),
                                       detail=detail)
        progress("the item-to-item check: each step's first item's similar items against its others")
        similar = item_to_item.judge(at.items, at.index, log, at.split.cut, settings, n_steps=steps,
                                     users=detail["steps"].users(), k=k)
    split = at.split
    return Evaluation(cut=split.cut, cut_quantile=cut_quantile, k=k, users=len(split.users),
                      events_before=split.n_before, events_after=split.n_after, methods=summary, best_baseline=best,
                      ratio=ratio, ratio_interval=interval,
                      train={key: v for key, v in result.metrics.items() if np.isscalar(v)},
                      seconds=time.perf_counter() - t0, protocol=protocol, replay=replayed,
                      diversity=cost, item_to_item=similar)


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))
