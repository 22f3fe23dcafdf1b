"""Training the CatBoost ranker on a time split of the event log, and scoring with it.

Labels: a candidate generated from a user's history before the cut is relevant if the user interacted with it
after the cut, graded by the weight of the strongest interaction (``PREFEED_EVENT_TYPES``: view 1 … purchase 6 by
default; a type of weight 0, or a code past the declaration, is no interaction). NDCG uses the same grades. Validation users are held out entirely;
NDCG@10 is reported for the model and for a popularity baseline on the same users, truth and cut.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
from sqlalchemy import Engine

from ..data import log as event_log
from ..data.history import histories_from_arrays
from ..errors import InvalidInput
from ..settings import Settings
from . import candidates, covisit, features
from .item_table import load_item_table


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


def feature_rows(items, cov, events: tuple[np.ndarray, ...], user_ids: np.ndarray, now: float, settings: Settings):
    """Training's path from an in-memory event log to feature rows: the same candidate and feature functions
    precompute uses, on histories truncated the same way. Returns (histories, candidates, X)."""
    ev_user, ev_item, ev_type, ev_ts = events
    hist = histories_from_arrays(user_ids, ev_user, ev_item, ev_type, ev_ts, items, settings, clock=now)
    cand = candidates.for_batch(items, cov, hist, settings)
    return hist, cand, features.build(items, hist, cand, now=now)


def ndcg_at(k: int, ranked_rel: np.ndarray, ideal_rel: np.ndarray) -> float:
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    gain = (2.0 ** ranked_rel[:k] - 1) @ disc[: len(ranked_rel[:k])]
    ideal = np.sort(ideal_rel)[::-1][:k]
    best = (2.0 ** ideal - 1) @ disc[: len(ideal)]
    return float(gain / best) if best > 0 else 0.0


def train(engine: Engine, settings: Settings, *, iterations: int | None = None, depth: int | None = None,
          users: int | None = None, seed: int = 0, progress: Callable[[str], None] = lambda msg: None,
          events: tuple[np.ndarray, ...] | None = None) -> TrainResult:
    """Train on a time split of the whole event log. ``iterations``, ``depth`` and ``users`` default to the
    ``train_*`` settings; everything else (negatives, learning rate, the cut, candidates) comes from ``settings``.
    ``events``: the log as (user, item, type, ts) arrays in (ts, id) order (``load_events``), when the caller has
    read it already (evaluation trains on the part before its cut); default: the database's, up to
    ``settings.as_of``."""
    from catboost import CatBoost, Pool

    iterations = iterations or settings.train_iterations
    depth = depth or settings.train_depth
    users = users or settings.train_users
    negatives = settings.train_negatives
    ev_user, ev_item, ev_type, ev_ts = events if events is not None else \
        load_events(engine, settings.as_of or float("inf"))
    if len(ev_user) < 100:
        raise InvalidInput(f"only {len(ev_user)} events in the database; seed or collect more before training")
    cut = float(np.quantile(ev_ts, settings.train_cut_quantile))
    # Known at the cut, as precompute knows everything at or before its clock. The log is in time order, so the
    # events before the cut are a prefix and the rest a suffix: slices (views), never copies of the log.
    n_pre = int(np.searchsorted(ev_ts, cut, side="right"))
    pre, post = slice(0, n_pre), slice(n_pre, None)
    progress(f"time split at {cut:.0f}: {n_pre} events before, {len(ev_ts) - n_pre} after")
    items = load_item_table(engine, settings, as_of=cut)

    def pairs_of(keep) -> dict[str, np.ndarray]:
        return covisit.build_pairs(ev_user[keep], ev_item[keep], ev_ts[keep], settings.covisit_window,
                                   settings.session_gap, settings.covisit_neighbours,
                                   covisit.event_factors(ev_type[keep], settings))

    pre_pairs = pairs_of(pre)
    cov = covisit.index_for(items, pre_pairs)

    # Truth: strongest post-cut interaction per (user, item row), excluding items seen before the cut.
    # (user, item) pairs coded as user position * span + item row: user ids are 64-bit, positions small.
    span = len(items) + 1
    all_users = np.unique(ev_user)

    def user_pos(user_ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(all_users, user_ids)

    post_code = user_pos(ev_user[post]) * span + items.rows(ev_item[post])
    # Items seen inside the seen window before the cut are no candidates (as in serving), so no labels either;
    # an item seen before the window may come back, and its later interaction counts.
    seen = slice(int(np.searchsorted(ev_ts, cut - settings.seen_window, side="left")), n_pre)
    pre_code = np.unique(user_pos(ev_user[seen]) * span + items.rows(ev_item[seen]))
    truth_code, inv = np.unique(post_code, return_inverse=True)
    truth_rel = np.zeros(len(truth_code))
    np.maximum.at(truth_rel, inv, items.weight_of(ev_type[post]))
    fresh = ~np.isin(truth_code, pre_code) & (truth_rel > 0)
    truth_code, truth_rel = truth_code[fresh], truth_rel[fresh]

    eligible = np.intersect1d(np.unique(ev_user[pre]), all_users[np.unique(truth_code // span)])
    if len(eligible) < 10:
        raise InvalidInput("too few users with history on both sides of the time split to train")
    rng = np.random.default_rng(seed)
    chosen = rng.permutation(eligible)[:users]
    n_valid = max(5, len(chosen) // 5)
    valid_users, train_users = np.sort(chosen[:n_valid]), np.sort(chosen[n_valid:])

    def examples(user_ids: np.ndarray):
        hist, cand, X = feature_rows(items, cov, (ev_user[pre], ev_item[pre], ev_type[pre], ev_ts[pre]), user_ids,
                                     cut, settings)
        code = user_pos(hist.user_ids[cand.owner]) * span + cand.rows
        pos = np.searchsorted(truth_code, code)
        pos = np.minimum(pos, len(truth_code) - 1)
        rel = np.where(truth_code[pos] == code, truth_rel[pos], 0.0)
        return hist, cand, X, rel

    progress(f"building features for {len(train_users)} training users")
    Xs, ys, gs = [], [], []
    for start in range(0, len(train_users), 200):
        hist, cand, X, rel = examples(train_users[start:start + 200])
        owner = cand.owner
        # All positives and a random sample of negatives per user keep the training set small.
        noise = rng.random(len(rel))
        neg_rank = np.zeros(len(rel))
        for k in range(len(hist)):
            a, b = cand.offsets[k], cand.offsets[k + 1]
            neg_rank[a:b] = np.argsort(np.argsort(noise[a:b]))
        keep = (rel > 0) | (neg_rank < negatives)
        has_pos = np.bincount(owner[rel > 0], minlength=len(hist)) > 0
        keep &= has_pos[owner]
        Xs.append(X[keep]), ys.append(rel[keep]), gs.append(user_pos(hist.user_ids[owner[keep]]))
    X_train, y_train, g_train = np.concatenate(Xs), np.concatenate(ys), np.concatenate(gs)
    if not (y_train > 0).any():
        raise InvalidInput("no training user has a relevant candidate; the log has too little structure to learn")
    progress(f"training CatBoost YetiRank on {len(y_train)} rows x {X_train.shape[1]} features")
    model = CatBoost(dict(loss_function="YetiRank", iterations=iterations, depth=depth,
                          learning_rate=settings.train_learning_rate, random_seed=seed, verbose=False,
                          thread_count=-1, allow_writing_files=False))
    model.fit(Pool(X_train, y_train, group_id=g_train, feature_names=list(items.layout.names)))

    progress(f"validating on {len(valid_users)} held-out users")
    model_ndcg, pop_ndcg = [], []
    popular_active = np.argsort(-items.popularity, kind="stable")
    popular_active = popular_active[items.active[popular_active]]
    for start in range(0, len(valid_users), 200):      # batches as in training: one feature matrix at a time
        hist, cand, X, rel = examples(valid_users[start:start + 200])
        pred = score(model, X, thread_count=-1)
        _validate(hist, cand, pred, rel, truth_code, truth_rel, user_pos, span, popular_active, model_ndcg,
                  pop_ndcg)

    all_pairs = pairs_of(slice(None))     # serving index uses the whole log
    # ``baseline``/``baseline_ndcg10``: the best baseline on the same users, truth and cut (the bar promotion
    # compares against); ``data_clock``: the newest event the model saw.
    metrics = dict(ndcg10=float(np.mean(model_ndcg)), baseline="popularity", baseline_ndcg10=float(np.mean(pop_ndcg)),
                   data_clock=float(ev_ts[-1]),
                   valid_users=int(len(valid_users)), train_users=int(len(train_users)),
                   train_rows=int(len(y_train)), iterations=iterations, depth=depth, cut=cut,
                   events=int(len(ev_user)))
    return TrainResult(model=model, pairs=all_pairs, metrics=metrics)


def _validate(hist, cand, pred, rel, truth_code, truth_rel, user_pos, span, popular_active, model_ndcg: list,
              pop_ndcg: list) -> None:
    """NDCG@10 of the model's order and of popularity for each user of one validation batch, appended."""
    for k, uid in enumerate(hist.user_ids):
        lo, hi = np.searchsorted(truth_code, [user_pos(uid) * span, (user_pos(uid) + 1) * span])
        ideal = truth_rel[lo:hi]
        a, b = cand.offsets[k], cand.offsets[k + 1]
        order = np.argsort(-pred[a:b], kind="stable")
        model_ndcg.append(ndcg_at(10, rel[a:b][order], ideal))
        seen = hist.seen(k)
        head = popular_active[:10 + len(seen)]
        top = head[~np.isin(head, seen)][:10]
        tcode = user_pos(uid) * span + top
        p = np.minimum(np.searchsorted(truth_code, tcode), len(truth_code) - 1)
        pop_ndcg.append(ndcg_at(10, np.where(truth_code[p] == tcode, truth_rel[p], 0.0), ideal))
