"""A user's taste in categories (``precompute/feeds/taste.py``) against a plain statement of the rule, for generated
events, categories and type weights."""

import numpy as np
from hypothesis import given, settings as hsettings, strategies as st

from precompute.feeds import taste

# Few categories and weights, so that totals tie often; a weight of 0 (an undeclared type) and negative ones too.
WEIGHTS = st.sampled_from([0.0, 0.1, 0.2, 0.3, 1.0, 2.5, 3.0, -1.0])
CATEGORY_IDS = st.sampled_from([3, 5, 17, 2**40, 2**63 - 1])


def reference_totals(events: list[tuple[int, float, list[int]]]) -> dict[tuple[int, int], float]:
    """(owner, category) -> the summed weights of the owner's events whose item is in the category, event by event."""
    totals: dict[tuple[int, int], float] = {}
    for owner, weight, categories in events:
        for c in categories:
            totals[owner, c] = totals.get((owner, c), 0.0) + weight
    return totals


def reference_top(events: list[tuple[float, list[int]]], k: int) -> list[int]:
    """The user's categories of positive total, largest first, ties by category id, the first ``k``."""
    totals = reference_totals([(0, w, cats) for w, cats in events])
    ranked = sorted((c for (_, c), t in totals.items() if t > 0), key=lambda c: (-totals[0, c], c))
    return ranked[:k]


@hsettings(max_examples=500, deadline=None, database=None)
@given(st.integers(1, 4).flatmap(lambda n_owners: st.tuples(
    st.just(n_owners),
    st.lists(st.tuples(st.integers(0, n_owners - 1), WEIGHTS, st.lists(st.integers(0, 5), unique=True, max_size=4)),
             max_size=30))))
def test_category_weights_sum_each_owners_event_weights_per_category(case):
    # given events of several owners, each with its type's weight and its item's (dense) categories
    n_owners, events = case
    owner = np.array([o for o, _, _ in events], dtype=np.int64)
    weight = np.array([w for _, w, _ in events], dtype=np.float64)
    event = np.array([k for k, (_, _, cats) in enumerate(events) for _ in cats], dtype=np.int64)
    category = np.array([c for _, _, cats in events for c in cats], dtype=np.int64)
    # when they are summed as whole arrays
    got = taste.category_weights(owner, weight, event, category, n_owners, 6)
    # then each total is the plain sum, to the bit (same order of additions), and categories without events are 0
    want = np.zeros((n_owners, 6))
    for (o, c), t in reference_totals(events).items():
        want[o, c] = t
    assert got.shape == (n_owners, 6) and got.tolist() == want.tolist()


@hsettings(max_examples=500, deadline=None, database=None)
@given(st.lists(st.tuples(WEIGHTS, st.lists(CATEGORY_IDS, unique=True, max_size=3)), max_size=20),
       st.integers(0, 6))
def test_a_users_top_categories_follow_the_rule(events, k):
    # given one user's newest events (each its type's weight and its item's category ids)
    # when their top k categories are taken
    got = taste.user_top_categories([cats for _, cats in events], [w for w, _ in events], k)
    # then they are the positive totals, largest first, ties by category id
    assert got == reference_top(events, k)
    assert all(type(c) is int for c in got)
