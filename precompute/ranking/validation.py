"""Judging a trained model on a later period than it learned from, against baselines on the same users and truth.

The model ranks each validation user's full candidate set at the validation cut (the candidates precompute would
score); each baseline ranks whatever it ranks. Both are scored by NDCG@k against every graded interaction of the
user after the cut (``split.Truth``), including items no candidate source found: the ideal ranking does not care
where an item could come from. Baselines are a function from a batch's histories to each baseline's top-k item rows
per user, so other baselines (recent popularity, co-visitation, item-kNN) can be judged alongside popularity.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..data.history import Histories
from ..settings import Settings
from .item_table import ItemTable
from .split import Period

#: ``baselines(items, hist, k)``: ``{name: [top-k item rows of user j of hist, for each j]}``.
Baselines = Callable[[ItemTable, Histories, int], dict[str, list[np.ndarray]]]


def ndcg_at(k: int, ranked_rel: np.ndarray, ideal_rel: np.ndarray) -> float:
    """NDCG@k with gain 2^grade - 1 of a ranking's grades against the user's graded interactions."""
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    gain = (2.0 ** ranked_rel[:k] - 1) @ disc[: len(ranked_rel[:k])]
    ideal = np.sort(ideal_rel)[::-1][:k]
    best = (2.0 ** ideal - 1) @ disc[: len(ideal)]
    return float(gain / best) if best > 0 else 0.0


def popularity(items: ItemTable, hist: Histories, k: int) -> dict[str, list[np.ndarray]]:
    """The most popular active items at the cut, less each user's seen items."""
    popular = np.flatnonzero(items.active)         # rows are in popularity order
    lists = []
    for j in range(len(hist)):
        seen = hist.seen(j)
        head = popular[:k + len(seen)]
        lists.append(head[~np.isin(head, seen)][:k])
    return {"popularity": lists}


def validate(predict: Callable[[np.ndarray], np.ndarray], period: Period, user_ids: np.ndarray, settings: Settings,
             *, k: int = 10, baselines: Baselines = popularity, batch: int = 200) -> dict:
    """Mean NDCG@k of the model's order (``predict``: feature rows to scores, higher is better) of each user's candidates and of each baseline's list; the best baseline
    (``baseline``, ``baseline_ndcg10``) is the bar promotion compares against. ``candidate_recall``: the share of
    the users' graded items inside their candidate sets (the ceiling of any ranker on these candidates)."""
    model_ndcg: list[float] = []
    base_ndcg: dict[str, list[float]] = {}
    found = wanted = 0
    truth = period.truth
    for start in range(0, len(user_ids), batch):      # one feature matrix at a time
        hist, cand, X, rel = period.examples(user_ids[start:start + batch], settings)
        pred = predict(X) if len(X) else np.empty(0)
        for name, lists in baselines(period.items, hist, k).items():
            grades = [truth.grade(np.full(len(rows), uid), rows) for uid, rows in zip(hist.user_ids, lists)]
            base_ndcg.setdefault(name, []).extend(
                ndcg_at(k, g, truth.of_user(uid)[1]) for uid, g in zip(hist.user_ids, grades))
        for j, uid in enumerate(hist.user_ids):
            a, b = cand.offsets[j], cand.offsets[j + 1]
            ideal = truth.of_user(uid)[1]
            order = np.argsort(-pred[a:b], kind="stable")
            model_ndcg.append(ndcg_at(k, rel[a:b][order], ideal))
            found += int((rel[a:b] > 0).sum())
            wanted += len(ideal)
    means = {name: float(np.mean(v)) for name, v in base_ndcg.items()}
    best = max(means, key=means.get)
    return dict(ndcg10=float(np.mean(model_ndcg)), baseline=best, baseline_ndcg10=means[best], baselines=means,
                candidate_recall=found / max(wanted, 1))
