"""A user's taste in categories: which categories the fallback fills a page from, and the candidates' category
source draws from (``ranking/candidates.py``).

Each of the user's events adds its type's weight (``PREFEED_EVENT_TYPES``; a type code past the declaration weighs
0) to every category of its item. The user's top categories are those of largest total, ties by category id, at
most ``PREFEED_USER_TOP_CATEGORIES`` of them, and only those with a total above 0. Which events count is the caller's:
the API takes the user's newest events, precompute each user's history at the clock.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def category_weights(owner: np.ndarray, weight: np.ndarray, event: np.ndarray, category: np.ndarray,
                     n_owners: int, n_categories: int) -> np.ndarray:
    """``(n_owners, n_categories)`` float64: the total weight of each owner's events in each category.

    ``owner``, ``weight``: each event's owner (0 to ``n_owners - 1``) and its type's weight; ``event``, ``category``:
    one pair per category of each event's item (event index, dense category index below ``n_categories``). Each
    total is summed in the order of the pairs, so callers listing the same pairs get the same floats."""
    return np.bincount(owner[event] * n_categories + category, weights=weight[event],
                       minlength=n_owners * n_categories).reshape(n_owners, n_categories)


def top_categories(weights: np.ndarray, k: int) -> np.ndarray:
    """Dense indexes of the ``k`` largest totals of one owner's ``weights`` that are above 0, largest first, ties by
    index (dense indexes follow category ids)."""
    order = np.argsort(-weights, kind="stable")[:k]
    return order[weights[order] > 0]


def user_top_categories(categories: Sequence[Sequence[int]], weights: Sequence[float], k: int) -> list[int]:
    """One user's top ``k`` category ids, from the categories of each event's item and each event's type weight."""
    ids, dense = np.unique(np.array([c for cats in categories for c in cats], dtype=np.int64), return_inverse=True)
    event = np.repeat(np.arange(len(categories)), [len(cats) for cats in categories])
    totals = category_weights(np.zeros(len(categories), dtype=np.int64), np.asarray(weights, dtype=np.float64),
                              event, dense.ravel(), 1, len(ids))[0]
    return ids[top_categories(totals, k)].tolist()
