"""The ranking cascade (``ranking/scoring.py``, ``learning/first_stage.py``): a small first stage picks each user's best
``keep`` candidates, the full model orders them, the rest follow in the first stage's order; a bundle carries its
first stage, and one written without it ranks as the full model alone."""

import json

import numpy as np
import pytest
from catboost import CatBoost, Pool

from precompute.errors import BundleError
from precompute.learning import first_stage
from precompute.ranking import bundle, scoring

N_COLUMNS = 6


def model(X, y, trees, columns=None, seed=0):
    names = [f"c{j}" for j in range(X.shape[1])] if columns is None else [f"c{j}" for j in columns]
    m = CatBoost(dict(loss_function="RMSE", iterations=trees, depth=4, random_seed=seed, verbose=False,
                      allow_writing_files=False, thread_count=1))
    m.fit(Pool(X if columns is None else X[:, columns], y, feature_names=names))
    return m


@pytest.fixture(scope="module")
def world():
    rng = np.random.default_rng(3)
    X = np.asfortranarray(rng.normal(size=(3000, N_COLUMNS)).astype(np.float32))
    y = X[:, 0] * 2 + X[:, 1] - X[:, 2] ** 2 + rng.normal(scale=0.3, size=len(X))
    full = model(X, y, 60)
    # A first stage that sees two columns only: it orders the candidates otherwise than the full model.
    first = scoring.Cascade(model=model(X, scoring.score(full, X), 20, columns=[0, 3]), columns=np.array([0, 3]),
                            keep=7)
    offsets = np.array([0, 25, 25, 31, 80, 200, 3000])     # an empty list, one shorter than keep
    return X, full, first, offsets


def reference(X, full, first, offsets):
    """Each user's list the slow way: the first stage's best ``keep`` by the full model, then the rest by the first
    stage (ties by position)."""
    s1 = scoring.score(first.model, np.asfortranarray(X[:, first.columns]))
    s2 = scoring.score(full, X)
    lists = []
    for a, b in zip(offsets[:-1], offsets[1:]):
        by_first = sorted(range(a, b), key=lambda i: (-s1[i], i))
        top, rest = by_first[:first.keep], by_first[first.keep:]
        lists.append(sorted(top, key=lambda i: (-s2[i], i)) + rest)
    return lists


def test_the_served_order_is_the_full_models_order_of_the_first_stages_best_then_the_rest(world):
    X, full, first, offsets = world
    got = scoring.rank_scores(scoring.Ranker(full, first), X, offsets)
    for (a, b), want in zip(zip(offsets[:-1], offsets[1:]), reference(X, full, first, offsets)):
        order = sorted(range(a, b), key=lambda i: (-got[i], i))
        assert order == want


def test_the_top_keep_are_scored_by_the_full_model_unchanged(world):
    X, full, first, offsets = world
    got = scoring.rank_scores(scoring.Ranker(full, first), X, offsets)
    s2 = scoring.score(full, X)
    for a, b in zip(offsets[:-1], offsets[1:]):
        top = sorted(range(a, b), key=lambda i: -got[i])[:first.keep]
        np.testing.assert_array_equal(got[top], s2[top])


def test_without_a_first_stage_every_candidate_is_scored_by_the_full_model(world):
    X, full, _, offsets = world
    np.testing.assert_array_equal(scoring.rank_scores(full, X, offsets), scoring.score(full, X))
    np.testing.assert_array_equal(scoring.rank_scores(scoring.Ranker(full), X, offsets), scoring.score(full, X))


def test_a_distilled_first_stage_keeps_the_full_top_10_on_held_out_lists():
    rng = np.random.default_rng(5)
    X = np.asfortranarray(rng.normal(size=(40_000, N_COLUMNS)).astype(np.float32))
    full = model(X, X[:, 0] * 2 + X[:, 1] + 0.1 * X[:, 4], 80)
    lists = [(X[k:k + 4000], None, np.arange(0, 4001, 200), None) for k in range(0, len(X), 4000)]
    cascade, metrics = first_stage.fit(full, lists, [f"c{j}" for j in range(N_COLUMNS)], keep=40)
    assert metrics["cascade_lists"] == 100 and metrics["cascade_top10_kept"] > 0.95
    assert list(cascade.model.feature_names_) == [f"c{j}" for j in cascade.columns]


def test_a_bundle_keeps_its_first_stage_and_one_without_ranks_as_before(world, tmp_path):
    X, full, first, offsets = world
    pairs = {k: np.empty(0) for k in ("src", "dst", "weight")}
    staged = bundle.load(tmp_path, bundle.write(tmp_path, full, pairs, {}, first))
    plain = bundle.load(tmp_path, bundle.write(tmp_path, full, pairs, {}))
    assert plain.cascade is None and staged.cascade.keep == first.keep
    np.testing.assert_array_equal(scoring.rank_scores(staged.ranker, X, offsets),
                                  scoring.rank_scores(scoring.Ranker(full, first), X, offsets))
    np.testing.assert_array_equal(scoring.rank_scores(plain.ranker, X, offsets), scoring.score(full, X))
    # A first stage that reads other columns than its bundle records is refused
    meta_path = tmp_path / str(staged.version) / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["cascade"]["columns"] = ["c1", "c3"]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(BundleError, match="first stage"):
        bundle.load(tmp_path, staged.version)
