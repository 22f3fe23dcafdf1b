"""The hot-path array helpers against the plain NumPy they replace."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from precompute.arrays import top_desc, unique_sorted

scores = hnp.arrays(np.float32, st.integers(0, 300),
                    elements=st.floats(-1e6, 1e6, width=32) | st.sampled_from([0.0, -0.0, 1.5, -2.25]))


@settings(max_examples=300, deadline=None)
@given(scores, st.integers(1, 320))
def test_top_desc_is_a_stable_descending_argsort_cut_at_k(s, k):
    want = np.argsort(-s, kind="stable")[:k]
    got = top_desc(s, k)
    # the same items in the same order: equal scores (0.0 and -0.0 included) in index order
    assert np.array_equal(got, want)


@given(hnp.arrays(np.int64, st.integers(0, 200), elements=st.integers(-5, 50)))
def test_unique_sorted_matches_numpy(a):
    assert np.array_equal(unique_sorted(a), np.unique(a))
