"""Training learns from one period of the log and is judged on the next, and early stopping chooses the tree count."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from precompute.data.log import load_events
from precompute.learning import fit, objective, periods, steps
from precompute.learning.fit import fit_ranker

from tests.conftest import manage
from tests.test_cli import one_line_error


def recording(calls: list):
    """A ``periods.each`` that records each period it yields: its cut, end, the newest event it knows and its item
    table's clock."""
    real = periods.each

    def each(engine, settings_, events, cuts, users, n_steps=None):
        for (cut, end), (at, found) in zip(cuts, real(engine, settings_, events, cuts, users, n_steps)):
            calls.append(dict(cut=cut, end=end, known_max=float(at.known.ts.max()), as_of=at.items.as_of))
            yield at, found
    return each


@pytest.fixture(scope="module")
def trained(world):
    """One training run on the session's small world that must stop early (a high learning rate overfits within a
    few dozen trees), with every time split it makes recorded."""
    settings = dataclasses.replace(world.settings, train_learning_rate=0.5, train_early_stopping=10)
    calls = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(periods, "each", recording(calls))
        patch.setattr(objective, "CHOICE_MIN_USERS", 5)        # the small world has a few dozen to choose on
        result = fit_ranker(world.engine, settings, iterations=300, depth=4, users=300)
    return result, calls


#: The tests of ``trained`` run in one test process (``make test``'s ``--dist loadgroup``): one training, not two.
one_training = pytest.mark.xdist_group("trained")


@one_training
def test_early_stopping_keeps_fewer_trees_than_the_maximum(trained):
    # given a training run allowed 300 trees at a learning rate that overfits the small world quickly
    result, _ = trained
    m = result.metrics
    # then early stopping on the validation period keeps fewer, the metrics record both numbers, and the model
    # holds the chosen count
    assert m["iterations"] == 300
    assert 1 <= m["trees"] < 300
    assert result.model.tree_count_ == m["trees"]
    for key in ("loss", "data_clock", "train_users", "train_rows", "events", "cut", "valid_cut"):
        assert key in m, key
    assert len(result.stopping_users) > 0


@one_training
def test_auto_fits_both_objectives_and_serves_the_one_it_kept(trained):
    # given the module's training run on the small world, with the default objective (auto)
    result, _ = trained
    m = result.metrics
    # then both objectives were fitted and judged on the validation period's lists (the rule between them:
    # tests/test_objective.py), YetiRank is kept only with the higher score, and the model is the one kept
    scores = {loss: m[f"choice_ndcg10_{loss}"] for loss in ("Logloss", "YetiRank")}
    assert all(0.0 < v <= 1.0 for v in scores.values())
    assert m["loss"] == "Logloss" or scores["YetiRank"] > scores["Logloss"]
    assert result.model.get_params()["loss_function"] == m["loss"]


def test_early_stopping_zero_keeps_every_tree(world):
    # given the learning rate that makes the run above stop early, and PREFEED_TRAIN_EARLY_STOPPING=0
    settings = dataclasses.replace(world.settings, train_learning_rate=0.5, train_early_stopping=0)
    result = fit_ranker(world.engine, settings, iterations=60, depth=2, users=100)
    # then every tree asked for is kept: a model of a known size (the precompute benchmark's)
    assert result.metrics["trees"] == result.model.tree_count_ == 60


@one_training
def test_the_validation_period_follows_the_training_period(trained, world):
    # given the time splits one training run made
    result, calls = trained
    m = result.metrics
    events = load_events(world.engine)
    assert m["cut"] == pytest.approx(np.quantile(events.ts, world.settings.train_cut_quantile))
    assert m["valid_cut"] == pytest.approx(np.quantile(events.ts, world.settings.train_valid_quantile))
    judge, *_, learn = calls
    # then the last training period knows the log up to the training cut and is labelled up to the validation cut
    assert learn["cut"] == m["cut"] < m["valid_cut"] == learn["end"]
    assert learn["known_max"] <= m["cut"] and learn["as_of"] == m["cut"]
    # and validation knows the log up to the validation cut (item table too) and is labelled by what follows it
    assert judge["cut"] == m["valid_cut"] and judge["end"] == float("inf")
    assert m["cut"] < judge["known_max"] <= m["valid_cut"] and judge["as_of"] == m["valid_cut"]


def test_labels_hold_only_the_period_after_their_cut(world):
    # given the small world's log split at two cuts
    events = load_events(world.engine)
    user, item, type_, ts = events.user, events.item, events.type, events.ts
    c1, c2 = np.quantile(ts, [0.6, 0.8])
    at = periods.period(world.engine, world.settings, events, c1, c2)
    # then every graded (user, item) is an interaction of that user with that item inside (c1, c2] with an item
    # they did not see in the seen window before c1, and every such interaction is graded
    rows = at.items.rows(item)
    inside = (ts > c1) & (ts <= c2) & (rows >= 0)
    pairs = set(zip(user[inside].tolist(), rows[inside].tolist()))
    graded = at.labels.users[at.labels.code // at.labels.span], at.labels.code % at.labels.span
    assert len(graded[0]) > 0
    assert set(zip(graded[0].tolist(), graded[1].tolist())) <= pairs
    seen = (ts >= c1 - world.settings.seen_window) & (ts <= c1)
    seen_pairs = set(zip(user[seen].tolist(), rows[seen].tolist()))
    graded_pairs = set(zip(graded[0].tolist(), graded[1].tolist()))
    assert not graded_pairs & seen_pairs
    assert pairs - seen_pairs <= graded_pairs


def test_a_training_cut_after_the_validation_cut_is_one_line(settings):
    # given a training cut at or after the validation cut
    done = manage(settings, "train", extra_env={"PREFEED_TRAIN_CUT_QUANTILE": "0.9",
                                                "PREFEED_TRAIN_VALID_QUANTILE": "0.8"})
    # then train refuses in one line naming both settings
    one_line_error(done, 2, "PREFEED_TRAIN_CUT_QUANTILE must be below PREFEED_TRAIN_VALID_QUANTILE")


def test_training_cuts_step_back_by_the_validation_share(world):
    # given a log whose event times are spread evenly, and three training periods with cuts at 0.7 and 0.85
    ts = np.linspace(0.0, 1000.0, 100_001)
    three = dataclasses.replace(world.settings, train_cut_quantile=0.7, train_valid_quantile=0.85, train_periods=3)
    # then the training cuts step back from the training cut by the validation period's share, the validation cut
    # comes last, and each training period is labelled up to the next cut
    assert periods.training_cuts(ts, three) == pytest.approx([400.0, 550.0, 700.0, 850.0])
    # and a cut that would fall below 5 % of the log is left out (the training and validation cuts always stay)
    many = dataclasses.replace(three, train_periods=10)
    assert periods.training_cuts(ts, many) == pytest.approx([100.0, 250.0, 400.0, 550.0, 700.0, 850.0])
    assert periods.training_cuts(ts, dataclasses.replace(three, train_periods=1)) == pytest.approx([700.0, 850.0])
    # and on a log whose first 80 % of events share one instant, the earlier cuts add no period
    stacked = np.r_[np.zeros(80_000), np.linspace(1.0, 1000.0, 20_001)]
    assert periods.training_cuts(stacked, three) == pytest.approx([0.0, np.quantile(stacked, 0.85)])


def test_several_training_periods_each_learn_from_their_own_past(world):
    # given training with three periods on the small world, labelled by period, every time split recorded
    settings = dataclasses.replace(world.settings, train_periods=3, train_labels="period")
    calls, groups, pairs = [], [], set()
    real_examples = fit._examples

    from catboost import CatBoost
    real_fit = CatBoost.fit

    def catboost_fit(self, pool, **kw):
        groups.append(np.asarray(pool.get_group_id_hash()))
        return real_fit(self, pool, **kw)

    def examples(at, user_ids, settings_, rng, **kw):
        X, y, g = real_examples(at, user_ids, settings_, rng, **kw)
        pairs.update((at.cut, int(u)) for u in np.unique(g))
        return X, y, g

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(periods, "each", recording(calls))
        patch.setattr(CatBoost, "fit", catboost_fit)
        patch.setattr(fit, "_examples", examples)
        result = fit_ranker(world.engine, settings, iterations=20, depth=3, users=300)
    judge, *learn = calls
    cuts = periods.training_cuts(load_events(world.engine).ts, settings)
    # then each training period knows the log (and item table) up to its own cut only and is labelled by all that
    # follows it up to the validation cut
    assert [c["cut"] for c in learn] == pytest.approx(cuts[:-1]) and len(learn) == 3
    assert [c["end"] for c in learn] == pytest.approx([cuts[-1]] * 3)
    assert all(c["known_max"] <= c["cut"] and c["as_of"] == c["cut"] for c in learn)
    assert judge["cut"] == pytest.approx(cuts[-1]) and judge["end"] == float("inf")
    # and a user learned from in several periods is a separate group in each: one group per (user, period)
    trained_pairs = {(c, u) for c, u in pairs if c != judge["cut"]}
    assert len({u for _, u in trained_pairs}) < len(trained_pairs)        # some user is in several periods
    assert len(np.unique(groups[0])) == len(trained_pairs) <= result.metrics["train_users"]


@hyp_settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=12), st.integers(0, 45), st.integers(0, 2 ** 32 - 1))
def test_each_group_keeps_the_rows_with_its_k_smallest_keys(sizes, k, seed):
    # given groups of rows (some empty) with random keys, as training draws them to sample negatives
    offsets = np.r_[0, np.cumsum(sizes)]
    owner = np.repeat(np.arange(len(sizes)), sizes)
    key = np.random.default_rng(seed).random(len(owner))
    # when each group keeps its k smallest
    kept = fit.group_smallest(owner, offsets, key, k)
    # then they are the first k of the group ranked by key (all of a group of at most k)
    want = np.zeros(len(key), dtype=bool)
    for g in range(len(sizes)):
        a, b = offsets[g], offsets[g + 1]
        want[a + np.argsort(key[a:b])[:k]] = True
    assert kept.tolist() == want.tolist()


def test_each_period_knows_what_a_full_load_at_its_cut_knows(world):
    # given the validation cut and three training cuts, fitted one after the other (each next in a child, each
    # later item table carrying the earlier one's counts forward)
    settings = dataclasses.replace(world.settings, train_periods=3)
    events = load_events(world.engine)
    cuts = periods.training_cuts(events.ts, settings)
    plan = [(cuts[-1], float("inf"))] + [(c, cuts[-1]) for c in cuts[:-1]]
    got = list(periods.each(world.engine, settings, events, plan, np.unique(events.user), settings.replay_steps))
    # then every period's item table, labels and steps are those of a period computed alone at its cut
    for (cut, end), (at, found) in zip(plan, got):
        alone = periods.period(world.engine, settings, events, cut, end)
        for name in ("counts", "windowed", "first_seen", "active"):
            assert np.array_equal(getattr(at.items, name), getattr(alone.items, name), equal_nan=True), (cut, name)
        assert np.array_equal(at.labels.code, alone.labels.code) and at.known.ts.max() <= cut
        assert np.array_equal(found.rows, steps.find(events, alone.items, cut, end, settings.replay_steps).rows)
