"""Training fits each objective and keeps the one whose whole candidate lists rank the validation period better."""

import dataclasses

import numpy as np
import pytest
from catboost import CatBoost

from precompute.ranking import objective, ranker


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
    got = objective.choose(models, [(X[:6], rel[:6], offsets[:3]), (X[6:], rel[6:], offsets[2:] - 6)])
    # then the model that ranks the relevant item first scores 1; the other puts it last of three in both lists
    # (DCG g / log2(4) of an ideal g, g = 2^grade - 1: 0.5); the list without a positive counts for neither
    assert got == pytest.approx({"up": 1.0, "down": 0.5})


def test_a_named_objective_is_the_only_one_fitted(world):
    # given training told to use YetiRank
    settings = dataclasses.replace(world.settings, train_loss="YetiRank")
    result = ranker.train(world.engine, settings, iterations=20, depth=3, users=300)
    # then it fits that one and makes no choice
    assert result.metrics["loss"] == "YetiRank" == result.model.get_params()["loss_function"]
    assert not any(key.startswith("choice_") for key in result.metrics)
