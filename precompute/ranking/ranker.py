"""Training the CatBoost ranker on a time-ordered split of the event log, and scoring with it.

Two cuts at quantiles of event time (``PREFEED_TRAIN_CUT_QUANTILE`` < ``PREFEED_TRAIN_VALID_QUANTILE``, ``split.py``):
training examples are built at the first (features from the log up to it, labels from the events between the two
cuts), validation examples at the second (features, item table and co-visitation from the log up to it, labels after
it). The model learns from one period and is judged on the next, as in production. CatBoost stops adding trees once
NDCG@10 on the validation examples has not improved for ``PREFEED_TRAIN_EARLY_STOPPING`` trees and keeps the best
count (``train_iterations`` is the maximum). The reported NDCG@10 ranks each validation user's full candidate set,
against the baselines on the same users, truth and cut (``validation.py``).

Labels: a candidate is relevant if the user interacted with it in the label period, graded by the weight of the
strongest interaction (``PREFEED_EVENT_TYPES``: view 1 … purchase 6 by default). NDCG uses the same grades.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
from sqlalchemy import Engine

from ..data import log as event_log
from ..errors import InvalidInput
from ..settings import Settings
from . import split, validation
from .split import Period, feature_rows  # noqa: F401  (feature_rows: training's feature path, used by tests)

#: CatBoost's NDCG with the gain ``validation.ndcg_at`` uses (2^grade - 1), on the top 10.
EVAL_METRIC = "NDCG:top=10;type=Exp"


@dataclasses.dataclass
class TrainResult:
    model: object
    pairs: dict[str, np.ndarray]
    metrics: dict


def score(model, X: np.ndarray, thread_count: int = 1) -> np.ndarray:
    """Raw ranking scores, higher is better. One thread: workers scale by process, not by thread."""
    return np.asarray(model.predict(X, prediction_type="RawFormulaVal", thread_count=thread_count),
                      dtype=np.float32)


def load_events(engine: Engine, until: float = float("inf")) -> tuple[np.ndarray, ...]:
    """The event log up to ``until`` as arrays (user, item, type, ts), in (ts, id) order (``data/log.py``)."""
    ev = event_log.load_events(engine, until)
    return ev.user, ev.item, ev.type, ev.ts


def train(engine: Engine, settings: Settings, *, iterations: int | None = None, depth: int | None = None,
          users: int | None = None, seed: int = 0, progress: Callable[[str], None] = lambda msg: None,
          events: tuple[np.ndarray, ...] | None = None) -> TrainResult:
    """Train on a time-ordered split of the whole event log. ``iterations`` (the most trees early stopping may
    keep), ``depth`` and ``users`` default to the ``train_*`` settings; everything else (negatives, learning rate,
    the cuts, candidates) comes from ``settings``. ``events``: the log as (user, item, type, ts) arrays in (ts, id)
    order (``load_events``), when the caller has read it already (evaluation trains on the part before its cut);
    default: the database's, up to ``settings.as_of``."""
    from catboost import CatBoost, Pool

    iterations = iterations or settings.train_iterations
    depth = depth or settings.train_depth
    users = users or settings.train_users
    events = events if events is not None else load_events(engine, settings.as_of or float("inf"))
    ev_user, ev_ts = events[0], events[3]
    if len(ev_user) < 100:
        raise InvalidInput(f"only {len(ev_user)} events in the database; seed or collect more before training")
    cut, valid_cut = (split.quantile_cut(ev_ts, q) for q in (settings.train_cut_quantile,
                                                               settings.train_valid_quantile))
    if not cut < valid_cut:
        raise InvalidInput("the log's events are too close in time to split into a training and a validation "
                           "period; collect a longer log")
    everyone = np.unique(ev_user)
    progress(f"training period: features at {cut:.0f}, labels to {valid_cut:.0f}; validation: features at "
             f"{valid_cut:.0f}, labels after")
    learn = split.period(engine, settings, events, cut, valid_cut, everyone)
    judge = split.period(engine, settings, events, valid_cut, users=everyone)
    rng = np.random.default_rng(seed)
    n_valid = max(5, users // 5)
    train_users = _sample(learn.eligible(), users - n_valid, rng, "training")
    valid_users = _sample(judge.eligible(), n_valid, rng, "validation")

    progress(f"building features for {len(train_users)} training users")
    X_train, y_train, g_train = _examples(learn, train_users, settings, rng)
    if not (y_train > 0).any():
        raise InvalidInput("no training user has a relevant candidate; the log has too little structure to learn")
    X_eval, y_eval, g_eval = _examples(judge, valid_users, settings, rng)
    names = list(learn.items.layout.names)
    progress(f"training CatBoost YetiRank on {len(y_train)} rows x {X_train.shape[1]} features, at most "
             f"{iterations} trees, stopping early on {len(y_eval)} validation rows")
    model = CatBoost(dict(loss_function="YetiRank", iterations=iterations, depth=depth,
                          learning_rate=settings.train_learning_rate, random_seed=seed, verbose=False,
                          thread_count=-1, allow_writing_files=False, eval_metric=EVAL_METRIC))
    stop = dict(eval_set=Pool(X_eval, y_eval, group_id=g_eval, feature_names=names), use_best_model=True,
                early_stopping_rounds=settings.train_early_stopping) if (y_eval > 0).any() else {}
    model.fit(Pool(X_train, y_train, group_id=g_train, feature_names=names), **stop)
    del X_train, X_eval

    progress(f"validating {model.tree_count_} trees on {len(valid_users)} users after the validation cut")
    judged = validation.validate(lambda X: score(model, X, thread_count=-1), judge, valid_users, settings)
    all_pairs = split.pairs(events, slice(None), settings)      # serving index uses the whole log
    # ``baseline``/``baseline_ndcg10``: the best baseline on the same users, truth and cut (the bar promotion
    # compares against); ``data_clock``: the newest event the model saw; ``trees``: the count early stopping chose.
    metrics = dict(judged, data_clock=float(ev_ts[-1]), valid_users=int(len(valid_users)),
                   train_users=int(len(train_users)), train_rows=int(len(y_train)), iterations=iterations,
                   trees=int(model.tree_count_), depth=depth, cut=cut, valid_cut=valid_cut,
                   events=int(len(ev_user)))
    return TrainResult(model=model, pairs=all_pairs, metrics=metrics)


def _sample(eligible: np.ndarray, n: int, rng: np.random.Generator, what: str) -> np.ndarray:
    if len(eligible) < 5:
        raise InvalidInput(f"too few users with history on both sides of the {what} cut to train "
                           f"({len(eligible)}); collect a longer log")
    return np.sort(rng.permutation(eligible)[:max(n, 5)])


def _examples(at: Period, user_ids: np.ndarray, settings: Settings,
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Feature rows, grades and group ids (user ids) of ``user_ids``' candidates at ``at``: all positives and
    ``train_negatives`` random negatives per user with a positive, which keeps the example set small."""
    Xs, ys, gs = [], [], []
    for start in range(0, len(user_ids), 200):
        hist, cand, X, rel = at.examples(user_ids[start:start + 200], settings)
        owner = cand.owner
        noise = rng.random(len(rel))
        neg_rank = np.zeros(len(rel))
        for k in range(len(hist)):
            a, b = cand.offsets[k], cand.offsets[k + 1]
            neg_rank[a:b] = np.argsort(np.argsort(noise[a:b]))
        keep = (rel > 0) | (neg_rank < settings.train_negatives)
        has_pos = np.bincount(owner[rel > 0], minlength=len(hist)) > 0
        keep &= has_pos[owner]
        Xs.append(X[keep]), ys.append(rel[keep]), gs.append(hist.user_ids[owner[keep]])
    return np.concatenate(Xs), np.concatenate(ys), np.concatenate(gs)
