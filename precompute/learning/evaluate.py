"""``evaluate``: read the log once, split it at a quantile of event time, rank the judged users with every baseline
and the ranker trained on the pre-cut log, and summarize each method's lists against the truth.

``validate`` is the same protocol at training's own validation cut: the promotion check ``train`` applies, so the
numbers ``train`` and ``models list`` show mean what ``evaluate`` shows.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np
from sqlalchemy import Engine

from ..data import log as event_log
from ..errors import InvalidInput
from ..progress import indented
from ..ranking import bootstrap, covisit, periods, ranker
from ..ranking.covisit import CoVisit
from ..ranking.item_table import ItemTable, load_item_table
from ..ranking.periods import Period
from ..settings import Settings
from . import baselines, metrics, model, replay
from .split import Split, cut_time, split_log

Events = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]      # (user, item, type, ts) in (ts, id) order

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

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Scene:
    """What every method ranks from at a cut: the split, the item table and the co-visitation index as of it."""

    split: Split
    items: ItemTable
    cov: CoVisit


def scene(engine: Engine, settings: Settings, events: Events, cut: float, *, users: int | None = None,
          seed: int = 0, exclude: np.ndarray | None = None, known: Period | None = None,
          progress: Callable[[str], None] = lambda msg: None) -> Scene:
    """The split of ``events`` at ``cut`` with the item table and co-visitation known at it; refuses a split with
    nobody to judge. ``users``: judge a seeded random sample of that many; ``exclude``: user ids not judged;
    ``known``: training's period at this cut, whose item table and co-visitation are reused (both are built from
    the log up to the cut with the same settings)."""
    items = load_item_table(engine, settings, as_of=cut) if known is None else known.items
    split = split_log(events, cut, items, users=users, seed=seed, exclude=exclude)
    if split.n_after == 0 or len(split.users) == 0:
        raise InvalidInput(f"no user has history before the cut ({_utc(cut)}) and a new item of positive weight "
                           "after it: nothing to judge")
    progress(f"time split at {cut:.0f}: {split.n_before} events before, {split.n_after} after; "
             f"{len(split.users)} users judged")
    if known is not None:
        return Scene(split=split, items=items, cov=known.cov)
    progress("building co-visitation and item-kNN neighbours from the pre-cut log")
    return Scene(split=split, items=items, cov=covisit.index_for(items, periods.pairs(split.pre, slice(None),
                                                                                      settings)))


def judge(at: Scene, settings: Settings, ranker_model, *, k: int = 10, recent_days: float = 7.0, seed: int = 0,
          progress: Callable[[str], None] = lambda msg: None
          ) -> tuple[dict[str, dict[str, float]], str, tuple[float, float] | None]:
    """Every baseline and ``ranker_model`` (a CatBoost ranker trained on the log before the cut) ranked at the
    cut and summarized; returns the metrics by method ("ranker" last), the best baseline's name and the 95 %
    bootstrap interval of the ranker / best baseline NDCG@k ratio over the judged users (None when undefined)."""
    n = max(k, LIST_LENGTH)
    ranked = baselines.rank_all(at.split, at.items, at.cov, settings, n, recent_days=recent_days, progress=progress)
    progress(f"ranking {len(at.split.users)} users with the ranker")
    ranked["ranker"] = model.rank(ranker_model, at.split, at.items, at.cov, settings, n)
    n_active = int(at.items.active.sum())
    summary = {name: metrics.summarize(at.split.truth, r, k, n_active) for name, r in ranked.items()}
    best = max(baselines.BASELINES, key=lambda name: summary[name]["ndcg"])
    interval = bootstrap.ratio_interval(metrics.ndcg_per_user(at.split.truth, ranked["ranker"], k),
                                        metrics.ndcg_per_user(at.split.truth, ranked[best], k), seed=seed)
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
    log = event_log.load_events(engine, settings.as_of or float("inf"))
    if len(log) < MIN_EVENTS:
        raise InvalidInput(f"only {len(log)} events in the log; evaluation needs at least {MIN_EVENTS}")
    at = scene(engine, settings, (log.user, log.item, log.type, log.ts), cut_time(log.ts, cut_quantile),
               users=users, seed=seed, progress=progress)
    progress("training the ranker on the pre-cut log")
    result = model.train(engine, settings, at.split, iterations=iterations, seed=seed,
                         progress=indented(progress), ignore=ignore)
    summary, best, interval, ratio = {}, "", None, None
    if protocol in ("static", "both"):
        summary, best, interval = judge(at, settings, result.model, k=k, recent_days=recent_days, seed=seed,
                                        progress=progress)
        base = summary[best]["ndcg"]
        ratio = summary["ranker"]["ndcg"] / base if base > 0 else None
    replayed = None
    if protocol in ("replay", "both"):
        replayed = replay.judge(at.items, at.cov, (log.user, log.item, log.type, log.ts), at.split.cut, result.model,
                                settings, n_steps=steps, users=users, k=k, seed=seed, progress=progress)
    split = at.split
    return Evaluation(cut=split.cut, cut_quantile=cut_quantile, k=k, users=len(split.users),
                      events_before=split.n_before, events_after=split.n_after, methods=summary, best_baseline=best,
                      ratio=ratio, ratio_interval=interval,
                      train={key: v for key, v in result.metrics.items() if np.isscalar(v)},
                      seconds=time.perf_counter() - t0, protocol=protocol, replay=replayed)


def train(engine: Engine, settings: Settings, *, iterations: int | None = None, depth: int | None = None,
          users: int | None = None, seed: int = 0,
          progress: Callable[[str], None] = lambda msg: None) -> ranker.TrainResult:
    """``manage.py train``'s model and its promotion check: the ranker trained on the whole log (up to
    ``settings.as_of``), then judged with ``validate``; the check's numbers join the training metrics."""
    log = event_log.load_events(engine, settings.as_of or float("inf"))
    events = (log.user, log.item, log.type, log.ts)
    result = ranker.train(engine, settings, iterations=iterations, depth=depth, users=users, seed=seed,
                          progress=progress, events=events)
    progress("judging the model against the baselines at the validation cut")
    result.metrics.update(validate(engine, settings, events, result, users=users or settings.train_users,
                                   seed=seed, progress=indented(progress)))
    return result


def validate(engine: Engine, settings: Settings, events: Events, result: ranker.TrainResult, *,
             users: int | None, seed: int = 0, progress: Callable[[str], None] = lambda msg: None) -> dict:
    """The promotion check of a freshly trained model: the evaluation protocol at training's validation cut
    (``valid_cut``: the model learned from the log before it), every baseline on the same users and truth. Users
    whose validation examples chose the tree count are not judged (their period is no longer unseen), unless
    nobody else could be. Returns the training metrics' keys that ``models list`` and promotion read: ``ndcg10``,
    ``baseline``, ``baseline_ndcg10``, ``ratio_interval`` (``judge``'s, or None), ``baselines``, ``candidate_recall``,
    ``valid_users``: under the replay protocol when training labels replayed steps (``PREFEED_TRAIN_LABELS``), with
    the static protocol's beside them (``static_*``), else the static protocol's."""
    cut = result.metrics["valid_cut"]
    try:
        at = scene(engine, settings, events, cut, users=users, seed=seed, exclude=result.stopping_users,
                   known=result.validation, progress=progress)
    except InvalidInput:                 # a log so small that every judged user also chose the tree count
        at = scene(engine, settings, events, cut, users=users, seed=seed, known=result.validation,
                   progress=progress)
    summary, best, interval = judge(at, settings, result.model, k=10, seed=seed, progress=progress)
    static = dict(static_ndcg10=summary["ranker"]["ndcg"], static_baseline=best,
                  static_baseline_ndcg10=summary[best]["ndcg"],
                  static_ratio_interval=None if interval is None else list(interval))
    if settings.train_labels != "steps":
        return dict(ndcg10=summary["ranker"]["ndcg"], baseline=best, baseline_ndcg10=summary[best]["ndcg"],
                    ratio_interval=None if interval is None else list(interval), protocol="static",
                    baselines={name: m["ndcg"] for name, m in summary.items() if name != "ranker"},
                    candidate_recall=summary["ranker"]["candidate_recall"], valid_users=len(at.split.users),
                    **static)
    # The model learned to rank steps as they are lived: promotion asks whether it beats every baseline there.
    rp = replay.judge(at.items, at.cov, events, cut, result.model, settings, n_steps=settings.replay_steps,
                      users=users, exclude=result.stopping_users, seed=seed, progress=progress)
    if rp.steps == 0:
        rp = replay.judge(at.items, at.cov, events, cut, result.model, settings, n_steps=settings.replay_steps,
                          users=users, seed=seed, progress=progress)
    best = rp.best_baseline
    return dict(ndcg10=rp.methods["ranker"]["ndcg"], baseline=best, baseline_ndcg10=rp.methods[best]["ndcg"],
                ratio_interval=None if rp.ratio_interval is None else list(rp.ratio_interval), protocol="replay",
                baselines={name: m["ndcg"] for name, m in rp.methods.items() if name != "ranker"},
                candidate_recall=rp.methods["ranker"]["candidate_recall"], valid_users=rp.users,
                valid_steps=rp.steps, **static)


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))
