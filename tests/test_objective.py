"""Training fits each objective and keeps the one whose whole candidate lists rank the validation period better."""

import dataclasses

import numpy as np
import pytest
from catboost import CatBoost

from precompute.learning import objective
from precompute.learning.fit import fit_ranker


def _line(sign: float) -> CatBoost:
    """A real model whose score rises with column 0 (sign 1) or falls with it (sign -1)."""
    x = np.arange(40, dtype=np.float32)[:, None]
    model = CatBoost(dict(loss_function="RMSE", iterations=60, depth=2, learning_rate=0.5, verbose=False,
                          allow_writing_files=False, random_seed=0))
    model.fit(x, sign * x[:, 0])
    return model


def test_the_choice_scores_each_model_by_ndcg_within_its_lists():
    # given three lists of candidates: in the first two the item with the largest column 0 is the one relevant
    # (grades 1 and 2), and the third has no relevant candidate
    X = np.array([[1], [5], [9], [2], [30], [3], [7], [8]], dtype=np.float32)
    rel = np.array([0, 0, 1, 0, 2, 0, 0, 0], dtype=np.float64)
    offsets = np.array([0, 3, 6, 8])
    models = {"up": _line(1.0), "down": _line(-1.0)}
    # when each model ranks the lists, in two batches
    batches = [(X[:6], rel[:6], offsets[:3], [1, 2]), (X[6:], rel[6:], offsets[2:] - 6, [3])]
    kept, got = objective.choose(models, batches)
    # then the model that ranks the relevant item first scores 1; the other puts it last of three in both lists
    # (DCG g / log2(4) of an ideal g, g = 2^grade - 1: 0.5); the list without a positive counts for neither
    assert got == pytest.approx({"up": 1.0, "down": 0.5})
    assert kept == "up"


def _lists(users_up: int, users_down: int):
    """One list of three candidates per user: for the first ``users_up`` users the largest column 0 is the relevant
    one, for the next ``users_down`` the smallest."""
    X = np.tile(np.array([[1], [5], [9]], dtype=np.float32), (users_up + users_down, 1))
    rel = np.tile([0.0, 0.0, 1.0], users_up + users_down)
    rel[3 * users_up:] = np.tile([1.0, 0.0, 0.0], users_down)
    return [(X, rel, np.arange(0, 3 * (users_up + users_down) + 1, 3), np.arange(users_up + users_down))]


def test_the_default_objective_is_left_only_on_confident_evidence():
    models = {"down": _line(-1.0), "up": _line(1.0)}        # "down" listed first: the default
    # given forty users whose lists the other model ranks better, it is kept
    kept, means = objective.choose(models, _lists(40, 0))
    assert kept == "up" and means["up"] > means["down"]
    # but given three users, two for it and one against, its higher mean is not evidence enough: the default stays
    kept, means = objective.choose(models, _lists(2, 1))
    assert means["up"] > means["down"]
    assert kept == "down"


def test_a_named_objective_is_the_only_one_fitted(world):
    # given training told to use YetiRank
    settings = dataclasses.replace(world.settings, train_loss="YetiRank")
    result = fit_ranker(world.engine, settings, iterations=20, depth=3, users=300)
    # then it fits that one and makes no choice
    assert result.metrics["loss"] == "YetiRank" == result.model.get_params()["loss_function"]
    assert not any(key.startswith("choice_") for key in result.metrics)


def test_auto_fits_the_default_only_when_too_few_users_could_choose(world):
    # given the small world, whose validation cut has fewer users to choose on than the choice needs
    result = fit_ranker(world.engine, world.settings, iterations=20, depth=3, users=300)
    # then auto fits Logloss alone and makes no choice
    assert result.metrics["loss"] == "Logloss" == result.model.get_params()["loss_function"]
    assert not any(key.startswith("choice_") for key in result.metrics)
