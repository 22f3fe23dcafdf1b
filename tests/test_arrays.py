"""The hot-path array helpers against the plain NumPy they replace."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from precompute.ranking.arrays import lookup, on_every_core, strongest, top_desc_grouped, unique_sorted

scores = hnp.arrays(np.float32, st.integers(0, 300),
                    elements=st.floats(-1e6, 1e6, width=32) | st.sampled_from([0.0, -0.0, 1.5, -2.25]))


@settings(max_examples=300, deadline=None)
@given(st.lists(scores, min_size=1, max_size=6), st.integers(1, 320))
def test_top_desc_grouped_is_a_stable_descending_argsort_per_group_cut_at_k(groups, k):
    flat = np.concatenate(groups)
    offsets = np.r_[0, np.cumsum([len(g) for g in groups])]
    got, new = top_desc_grouped(flat, offsets, k)
    for g, seg in enumerate(groups):
        # the same items in the same order: equal scores (0.0 and -0.0 included) in index order
        want = np.argsort(-seg, kind="stable")[:k] + offsets[g]
        assert np.array_equal(got[new[g]:new[g + 1]], want)
    assert new[-1] == len(got)


@given(hnp.arrays(np.int64, st.integers(0, 200), elements=st.integers(-5, 50)))
def test_unique_sorted_matches_numpy(a):
    assert np.array_equal(unique_sorted(a), np.unique(a))


def test_on_every_core_returns_each_call_in_the_order_of_its_input():
    # given calls that finish out of order (the first sleeps longest)
    import time

    def slow_square(x):
        time.sleep((20 - x) / 2000)
        return x * x

    # then the results still come in input order
    assert on_every_core(slow_square, range(20)) == [x * x for x in range(20)]


@given(st.data())
def test_strongest_is_the_first_n_by_score_then_row(data):
    # given scores with many ties (a few distinct values) over distinct rows
    m = data.draw(st.integers(2, 60))
    score = np.array(data.draw(st.lists(st.sampled_from([0.5, 1.0, 1.5, 2.0]), min_size=m, max_size=m)))
    row = np.array(data.draw(st.permutations(range(100, 100 + m))))
    pick = np.arange(m) * 7
    n = data.draw(st.integers(1, m - 1))
    # then the picks are those a full sort by (score descending, row) puts first, in that order
    want = pick[np.lexsort((row, -score))[:n]]
    assert np.array_equal(strongest(pick, score, row, n), want)


@given(st.sets(st.integers(0, 50), max_size=20), st.lists(st.integers(-5, 55), max_size=30))
def test_lookup_gives_each_querys_value_or_missing(keys, query):
    keys = np.array(sorted(keys), dtype=np.int64)
    values = keys * 10.0 + 1
    got = lookup(keys, values, np.array(query, dtype=np.int64), missing=-1.0)
    assert got.tolist() == [q * 10.0 + 1 if q in set(keys.tolist()) else -1.0 for q in query]
