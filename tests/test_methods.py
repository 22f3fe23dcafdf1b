"""The simple methods rank by one set of rules, shared by an experiment's arms (``ranking/methods.py``) and
evaluate's baselines (``learning/lists.py``): a user's list from a global order leaves out what they have seen, in
order; scored candidates are ranked per user, best first, ties by the more popular row. Each rule is checked against
a plain Python reference."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from precompute.learning import lists
from precompute.ranking import methods


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), unique=True, max_size=30), st.lists(st.integers(0, 40), max_size=15),
       st.integers(0, 12))
def test_a_list_from_a_global_order_is_its_first_n_unseen_rows(order, seen, n):
    got = methods.first_unseen(np.array(order, dtype=np.int64), np.array(seen, dtype=np.int64), n)
    assert got.tolist() == [r for r in order if r not in seen][:n]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 30), st.integers(0, 3)), max_size=40),
       st.integers(0, 6))
def test_scored_candidates_are_ranked_per_user_best_first_ties_by_row(cands, n):
    # given candidates (user, row, score) with ties (scores of 0..3), a row at most once per user
    seen, unique = set(), []
    for u, r, s in cands:
        if (u, r) not in seen:
            seen.add((u, r))
            unique.append((u, r, s))
    owner, rows, score = (np.array([c[k] for c in unique], dtype=np.int64) for k in range(3))
    idx = methods.best_per_user(owner, rows, score.astype(np.float64), n)
    got = [(int(owner[i]), int(rows[i])) for i in idx]
    # then each user's n best, users in order, best score first, ties by the lower (more popular) row
    want = []
    for u in sorted({c[0] for c in unique}):
        mine = sorted((c for c in unique if c[0] == u), key=lambda c: (-c[2], c[1]))[:n]
        want += [(c[0], c[1]) for c in mine]
    assert got == want


def test_arms_and_baselines_rank_by_the_same_rules():
    # the baselines' list builders reach the arms' rules, not copies of them
    assert lists.first_unseen is methods.first_unseen and lists.best_per_user is methods.best_per_user
