"""Metrics of ranked lists against held-out truth, as means over judged users, vectorized over the flat arrays.

With rel(u, p) the grade of the item at place p (0-based) of user u's list (0 when it is no truth item) and T_u the
user's truth items:

- NDCG@k: Σ_{p<k} (2^rel − 1) / log2(p + 2), over the same sum for the truth sorted by grade
  (``objective.py``'s definition);
- Recall@k: truth items in the first k places / |T_u|;
- MAP@k: Σ_{p<k, rel>0} precision@(p+1) / min(|T_u|, k);
- coverage: distinct items in all users' first k places / active items;
- non-empty share: users with a list of at least one item;
- candidate recall: truth items inside the method's candidate set / |T_u| (the ceiling of any order of that set).
"""

from __future__ import annotations

import numpy as np

from .lists import Ranked
from .split import Truth


def grades(truth: Truth, ranked: Ranked) -> np.ndarray:
    """The truth grade of every listed item (0 for an item that is no truth)."""
    span = int(max(truth.rows.max(initial=0), ranked.rows.max(initial=0))) + 1
    owner = np.repeat(np.arange(len(ranked.offsets) - 1), np.diff(ranked.offsets))
    code = owner * span + ranked.rows
    t_code = truth.owner * span + truth.rows              # ascending: owner-major, rows ascending per owner
    pos = np.minimum(np.searchsorted(t_code, code), max(len(t_code) - 1, 0))
    return np.where(t_code[pos] == code, truth.rel[pos], 0.0) if len(t_code) else np.zeros(len(code))


def ndcg_per_user(truth: Truth, ranked: Ranked, k: int) -> np.ndarray:
    """NDCG@k of each judged user (0 for a user whose truth has no positive grade)."""
    owner = np.repeat(np.arange(len(truth.offsets) - 1), np.diff(ranked.offsets))
    return _ndcg(truth, owner, np.arange(len(owner)) - ranked.offsets[owner], grades(truth, ranked), k)


def _ndcg(truth: Truth, owner: np.ndarray, place: np.ndarray, rel: np.ndarray, k: int) -> np.ndarray:
    """Per-user NDCG@k of listed items given by their user, place in the list and truth grade."""
    n_users = len(truth.offsets) - 1
    top = place < k
    dcg = np.bincount(owner[top], weights=(2.0 ** rel[top] - 1) / np.log2(place[top] + 2), minlength=n_users)
    t_owner = truth.owner
    by_grade = np.lexsort((-truth.rel, t_owner))
    t_place = np.arange(len(by_grade)) - truth.offsets[t_owner[by_grade]]
    t_top = t_place < k
    ideal = np.bincount(t_owner[by_grade][t_top], weights=(2.0 ** truth.rel[by_grade][t_top] - 1)
                        / np.log2(t_place[t_top] + 2), minlength=n_users)
    return np.divide(dcg, ideal, out=np.zeros(n_users), where=ideal > 0)


def summarize(truth: Truth, ranked: Ranked, k: int, n_active: int) -> dict[str, float]:
    """The metrics above for one method (keys ``ndcg``, ``recall``, ``recall100``, ``map``, ``coverage``,
    ``non_empty``, ``candidate_recall``; the ``@k`` ones at ``k``)."""
    n_users = len(truth.offsets) - 1
    if n_users == 0:
        raise ValueError("no judged users")
    n_truth = np.diff(truth.offsets).astype(np.float64)
    owner = np.repeat(np.arange(n_users), np.diff(ranked.offsets))
    place = np.arange(len(owner)) - ranked.offsets[owner]
    rel = grades(truth, ranked)
    hit = rel > 0
    top = place < k
    t_owner = truth.owner
    hits_before = np.cumsum(hit) - np.r_[0, np.cumsum(hit)][ranked.offsets[owner]]   # hits at places ≤ p
    ap = np.bincount(owner[top & hit], weights=hits_before[top & hit] / (place[top & hit] + 1), minlength=n_users)
    return {
        "ndcg": float(np.mean(_ndcg(truth, owner, place, rel, k))),
        "recall": float(np.mean(np.bincount(owner[top & hit], minlength=n_users) / n_truth)),
        "recall100": float(np.mean(np.bincount(owner[(place < 100) & hit], minlength=n_users) / n_truth)),
        "map": float(np.mean(ap / np.minimum(n_truth, k))),
        "coverage": float(len(np.unique(ranked.rows[top])) / max(n_active, 1)),
        "non_empty": float(np.mean(np.diff(ranked.offsets) > 0)),
        "candidate_recall": float(np.mean(np.bincount(t_owner, weights=ranked.candidate_hit, minlength=n_users)
                                          / n_truth)),
    }
