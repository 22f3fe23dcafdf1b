"""The latent factor model (``ranking/latent.py``) on a log with two planted taste groups."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from precompute.ranking import latent

GROUP_A = np.arange(100, 110)     # item ids liked by the first group of users
GROUP_B = np.arange(200, 210)     # and by the second


def planted_log(seed: int = 0):
    """40 users: the first 20 each interact with 6 random items of group A, the others with 6 of group B; one event
    of no type weight crosses over and must not count."""
    rng = np.random.default_rng(seed)
    user, item = [], []
    for u in range(40):
        mine = rng.choice(GROUP_A if u < 20 else GROUP_B, size=6, replace=False)
        user += [u] * 6
        item += mine.tolist()
    user.append(0), item.append(int(GROUP_B[0]))
    positive = np.ones(len(user), dtype=bool)
    positive[-1] = False
    return np.array(user), np.array(item), positive


def scores_for(model, history_ids):
    ids, v = model["latent_ids"], model["latent_factors"]
    rows = np.searchsorted(ids, history_ids)
    vec = latent.user_vectors(v, rows, np.zeros(len(rows), dtype=np.int64), 1)
    return dict(zip(ids.tolist(), (vec @ v.T)[0].tolist()))


def test_a_two_factor_model_recovers_two_planted_taste_groups():
    # given a log where two groups of users each keep to their own ten items
    user, item, positive = planted_log()
    # when two factors are fitted
    model = latent.fit(user, item, positive, factors=2)
    assert model["latent_factors"].shape == (20, 2) and model["latent_factors"].dtype == np.float32
    # then a new user folded in from two group-A items scores every other A item above every B item, and the
    # other way round: the factors are the two groups
    for mine, same, other in ((GROUP_A[:2], GROUP_A[2:], GROUP_B), (GROUP_B[3:5], GROUP_B[5:], GROUP_A)):
        s = scores_for(model, mine)
        assert min(s[i] for i in same) > max(s[i] for i in other) + 0.1, (mine, s)


def test_the_best_items_leave_out_excluded_ones_and_mark_non_positive_scores():
    # given scores for three users, one item excluded (-inf) for the first, none positive for the second, one for
    # the third
    scores = np.array([[0.5, 2.0, -np.inf, 1.0, 2.0], [0.0, -1.0, 0.0, 0.0, 0.0], [-0.5, 0.25, -3.0, -1.0, -2.0]],
                      dtype=np.float32)
    # when the three best are taken
    rows, val = latent.top(scores, 3)
    # then they come best first, ties by column, and a user gets no recommendation past their positive scores
    assert rows.tolist() == [[1, 4, 3], [-1, -1, -1], [1, -1, -1]]
    assert val[0].tolist() == [2.0, 2.0, 1.0]


def test_scores_equal_at_the_compared_decimals_tie_and_go_by_column():
    # given a first column a hair below the second (equal at latent.DECIMALS), and a clearly worse third
    scores = np.array([[0.9999999999, 1.0000000001, 0.5], [0.5, 1.0000000001, 0.9999999999]])
    # when the best one of each row is taken
    rows, val = latent.top(scores, 1)
    # then the tie goes to the lower column, whichever raw score was higher, and the scores are left as they were
    assert rows.tolist() == [[0], [1]]
    assert val.tolist() == [[1.0], [1.0]]
    assert scores[0, 0] == 0.9999999999


def test_the_best_items_from_float32_scores_are_the_ones_the_exact_scores_give():
    # given item factors on a coarse grid plus a difference in the 8th decimal (ties float32 cannot tell apart,
    # 9 decimals can), and users' vectors summed from 30 items each
    rng = np.random.default_rng(0)         # a seed where the n-th place hangs on float32's rounding error
    factors = np.round(rng.standard_normal((3000, 8)), 1) + rng.standard_normal((3000, 8)) * 1e-8
    vectors = np.stack([factors[rng.choice(3000, 30, replace=False)].sum(axis=0) for _ in range(20)])
    exact = vectors @ factors.T
    approx = vectors.astype(np.float32) @ factors.astype(np.float32).T
    norm = float(np.sqrt((factors ** 2).sum(axis=1).max()))
    # when the best 50 are taken from the float32 product, re-scored exactly
    rows, val = latent.top(approx, 50, rescore=lambda rows, cols: np.einsum("ij,ij->i", vectors[rows], factors[cols]),
                           error=latent.float32_error(vectors, norm))
    # then they are the best 50 of the exact scores, in the same order, with the same rounded scores
    want_rows, want_val = latent.top(exact, 50)
    assert rows.tolist() == want_rows.tolist()
    np.testing.assert_array_equal(val, want_val)


def test_factors_map_onto_item_rows_and_unknown_items_get_none():
    # given a model over items 100..109 and 200..209, and a table that knows 100, 205 and an item 300 it never saw
    user, item, positive = planted_log()
    model = latent.fit(user, item, positive, factors=2)

    class Table:
        ids = np.array([100, 205, 300])

        def __len__(self):
            return len(self.ids)

        def rows(self, ids):
            at = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
            return np.where(self.ids[at] == ids, at, -1)

    # when mapped onto its rows
    by_row = latent.by_row(Table(), model)
    # then known items carry their factors and the unseen one has zeros (no history reaches it)
    ids = model["latent_ids"].tolist()
    assert np.array_equal(by_row[0], model["latent_factors"][ids.index(100)])
    assert np.array_equal(by_row[1], model["latent_factors"][ids.index(205)])
    assert not by_row[2].any()


def test_a_log_too_small_for_a_factor_has_no_model():
    model = latent.fit(np.array([1, 1]), np.array([5, 6]), np.array([True, True]), factors=8)
    assert len(model["latent_ids"]) == 0


def coarse_scores(n_rows: int, seed: int, excluded: float) -> tuple[np.ndarray, np.random.Generator]:
    """Rows of 2,000 float32 scores on a grid of 0.1 (many ties), a share ``excluded`` of them -inf; and the
    generator, to draw more from."""
    rng = np.random.default_rng(seed)
    scores = np.round(rng.standard_normal((n_rows, 2000)), 1).astype(np.float32)
    scores[rng.random(scores.shape) < excluded] = -np.inf
    return scores, rng


def assert_whole_rows_best(scores: np.ndarray, n: int, rows: np.ndarray, val: np.ndarray) -> None:
    """``rows`` and ``val`` are each whole row's ``n`` best positive scores (rounded to ``latent.DECIMALS``), best
    first, ties by column, -1 past them."""
    near = np.round(scores.astype(np.float64), latent.DECIMALS)
    for r in range(len(scores)):
        best = np.lexsort((np.arange(scores.shape[1]), -near[r]))[:n]
        best = best[near[r, best] > 0]
        assert rows[r].tolist() == best.tolist() + [-1] * (n - len(best))
        assert val[r, :len(best)].tolist() == near[r, best].tolist()


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), st.integers(1, 40), st.integers(0, 2 ** 32 - 1), st.sampled_from([0.0, 0.3, 0.9]))
def test_the_best_items_are_the_whole_rows_best_whatever_the_rows_hold(n_rows, n, seed, excluded):
    # given rows of 2,000 scores with ties (a coarse grid), a share of excluded columns (-inf), and a row with none
    # finite but a few
    scores, _ = coarse_scores(n_rows, seed, excluded)
    scores[0, 5:] = -np.inf
    # when the n best of each row are taken (bounded by the n-th best of a sample of its columns)
    rows, val = latent.top(scores, n)
    # then they are each whole row's n best positive scores, best first, ties by column, -1 past them
    assert_whole_rows_best(scores, n, rows, val)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.integers(1, 40), st.integers(0, 2 ** 32 - 1), st.sampled_from([0.0, 0.3, 0.9]))
def test_the_best_items_are_the_whole_rows_best_beside_rows_the_model_knows_nothing_of(n_rows, n, seed, excluded):
    # given rows of 2,000 scores with ties (a coarse grid), a share of excluded columns (-inf), and a row of zeros
    # (a user the model knows nothing of: its sampled bound lets every column through) among them
    scores, rng = coarse_scores(n_rows, seed, excluded)
    scores[rng.integers(n_rows)] = 0.0
    # when the n best of each row are taken
    rows, val = latent.top(scores, n)
    # then they are each whole row's n best positive scores, best first, ties by column, -1 past them
    assert_whole_rows_best(scores, n, rows, val)
