"""Offline evaluation (``manage.py evaluate``): the time split, the baselines and the ranker judged on logs where the
right answer is known, the metrics on a hand-checked example, and the command's outputs and one-line errors."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
import time

import numpy as np
import pytest

from precompute.data import engine as db, importing, log as event_log
from precompute.errors import InvalidInput
from precompute.learning import baselines, bootstrap, evaluate, metrics, ranker_lists, steps, train
from precompute.learning.fit import fit_ranker
from precompute.learning.lists import Ranked
from precompute.learning.split import Truth, cut_time, split_log
from precompute.ranking import covisit, source_index
from precompute.ranking.item_loader import load_item_table
from precompute.units import DAY, HOUR
from tests.conftest import ROOT, manage, own_database


@pytest.fixture
def own(settings, tmp_path_factory, tmp_path):
    """Settings and an engine of an empty database of this test's own (no attributes declared)."""
    for url in own_database(tmp_path_factory, "evaluate"):
        s = dataclasses.replace(settings, database_url=url, var_dir=tmp_path, model_dir=tmp_path / "models",
                                item_attributes=())
        engine = db.make_engine(url)
        db.init_db(engine, s)
        yield s, engine
        engine.dispose()


def _split_at_gap(engine, s):
    """The database's log split between its last pre-cut and first post-cut event (a gap of a day)."""
    log = event_log.load_events(engine)
    gap = int(np.argmax(np.diff(log.ts)))
    cut = float(log.ts[gap])
    items = load_item_table(engine, s, as_of=cut)
    return split_log(log, cut, items), items


def test_metrics_match_a_hand_computed_example():
    # given three judged users' truth (graded) and ranked lists, one of them empty, among 10 active items
    truth = Truth(offsets=np.array([0, 2, 3, 4]), rows=np.array([3, 5, 2, 7]), rel=np.array([6.0, 1.0, 1.0, 2.0]))
    ranked = Ranked(offsets=np.array([0, 3, 3, 4]), rows=np.array([5, 9, 3, 7]),
                    candidate_hit=np.array([True, False, False, True]))
    # when summarized at k = 2
    m = metrics.summarize(truth, ranked, k=2, n_active=10)
    # then each metric is the hand-computed mean over the three users
    ndcg0 = 1.0 / (63.0 + 1.0 / np.log2(3))          # user 0: grade 1 at place 1 against ideal (6, 1)
    assert m["ndcg"] == pytest.approx((ndcg0 + 0.0 + 1.0) / 3)
    assert m["recall"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert m["recall100"] == pytest.approx((1 + 0 + 1) / 3)        # user 0's item 3 is third
    assert m["map"] == pytest.approx((1 / 2 + 0 + 1) / 3)           # P@1 = 1 over min(|T|, k) = 2
    assert m["coverage"] == pytest.approx(3 / 10)                  # {5, 9} and {7} in the first two places
    assert m["non_empty"] == pytest.approx(2 / 3)
    assert m["candidate_recall"] == pytest.approx((1 / 2 + 0 + 1) / 3)


def test_the_ratio_interval_is_a_paired_bootstrap_over_users():
    # given per-user NDCG of two methods on the same users
    rng = np.random.default_rng(5)
    theirs = rng.gamma(0.5, 0.3, 1600)
    ours = theirs * rng.lognormal(0.1, 0.5, 1600)
    # then a method equal to, or a constant multiple of, the other has a point interval (resamples are paired)
    assert bootstrap.ratio_interval(theirs, theirs) == pytest.approx((1.0, 1.0))
    assert bootstrap.ratio_interval(1.25 * theirs, theirs) == pytest.approx((1.25, 1.25))
    # and a noisy one an interval around the ratio of means that narrows with more users (~ 1 / sqrt(users))
    wide = bootstrap.ratio_interval(ours[:100], theirs[:100])
    narrow = bootstrap.ratio_interval(ours, theirs)
    assert narrow[0] < ours.mean() / theirs.mean() < narrow[1]
    assert wide[0] < ours[:100].mean() / theirs[:100].mean() < wide[1]
    assert 2.5 < (wide[1] - wide[0]) / (narrow[1] - narrow[0]) < 6
    # and a baseline that scores 0 for every user of a resample leaves the ratio undefined
    assert bootstrap.ratio_interval(ours[:3], np.zeros(3)) is None
    with pytest.raises(ValueError):
        bootstrap.ratio_interval(ours[:3], theirs[:4])


def test_the_ratio_interval_is_fixed_by_its_seed_and_moves_only_a_little_with_another(tmp_path):
    # given per-user NDCG of two methods on 1,600 users, saved for another process to read too
    rng = np.random.default_rng(5)
    theirs = rng.gamma(0.5, 0.3, 1600)
    ours = theirs * rng.lognormal(0.1, 0.5, 1600)
    np.save(tmp_path / "ours.npy", ours)
    np.save(tmp_path / "theirs.npy", theirs)
    # when the interval is taken with seed 3 here and in another Python process
    here = bootstrap.ratio_interval(ours, theirs, seed=3)
    code = ("import sys, numpy as np; from precompute.learning import bootstrap; "
            "print(repr(bootstrap.ratio_interval(np.load(sys.argv[1]), np.load(sys.argv[2]), seed=3)))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ours.npy"), str(tmp_path / "theirs.npy")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # then it is the same interval, to the last bit (a run's report can be reproduced)
    assert ast.literal_eval(done.stdout.strip()) == here
    # and another seed draws other resamples: other bounds, ~0.005 away at RESAMPLES resamples
    other = bootstrap.ratio_interval(ours, theirs, seed=4)
    assert other[0] != here[0] and other[1] != here[1]
    assert abs(other[0] - here[0]) < 0.02 and abs(other[1] - here[1]) < 0.02


def test_popular_is_perfect_when_everyone_buys_the_most_popular_film(own, tmp_path):
    # given MovieLens files: film 1 is rated by 40 users, films 2-6 by 8 each; ten users each rated one film of
    # 7-11 before the cut and, a day later, give film 1 five stars
    s, engine = own
    now = time.time() - 30 * DAY
    movies = tmp_path / "movies.csv"
    movies.write_text("movieId,title,genres\n" + "".join(f"{i},Film {i} (1995),Drama|Comedy\n" for i in range(1, 13)))
    rows = [(100 + u, 1, 3.0, now + u) for u in range(40)] + [(100 + u, 2 + u % 5, 3.0, now + 50 + u)
                                                             for u in range(40)]
    rows += [(u, 7 + u % 5, 3.0, now + 100 + u) for u in range(1, 11)]
    rows += [(u, 1, 5.0, now + DAY + u) for u in range(1, 11)]
    ratings = tmp_path / "ratings.csv"
    ratings.write_text("userId,movieId,rating,timestamp\n" + "".join(f"{u},{i},{r},{int(t)}\n" for u, i, r, t in rows))
    importing.import_items(engine, movies, "movielens", s)
    importing.import_events(engine, ratings, "movielens", s)
    # when popularity ranks the judged users at the cut
    split, items = _split_at_gap(engine, s)
    ranked = baselines.popular(split, items, 100)
    m = metrics.summarize(split.truth, ranked, 10, int(items.active.sum()))
    # then the ten users are judged, each list starts with film 1, and NDCG and recall are 1
    assert list(split.users) == list(range(1, 11))
    assert items.ids[ranked.rows[ranked.offsets[:-1]]].tolist() == [1] * 10
    assert m["ndcg"] == pytest.approx(1.0) and m["recall"] == pytest.approx(1.0)
    assert m["candidate_recall"] == pytest.approx(1.0)


def test_covisit_beats_popular_when_users_go_on_to_the_co_visited_item(own, tmp_path):
    # given a CSV log: 40 users view item 1 twice, then, an hour later, an item a then its partner b in one
    # session; ten users view an a before the cut and its b after it
    s, engine = own
    now = time.time() - 30 * DAY
    rows = []
    for u in range(200, 240):
        a = 10 + u % 5
        rows += [(u, 1, now + u), (u, 1, now + u + 1), (u, a, now + HOUR + u * 100), (u, a + 20, now + HOUR + 60 + u * 100)]
    rows += [(u, 10 + u % 5, now + 10 * HOUR + u) for u in range(1, 11)]
    rows += [(u, 30 + u % 5, now + 2 * DAY + u) for u in range(1, 11)]
    events = tmp_path / "events.csv"
    events.write_text("user_id,item_id,ts,type\n" + "".join(f"{u},{i},{int(t)},view\n" for u, i, t in rows))
    importing.import_events(engine, events, "csv", s)
    # when co-visitation (built from the pre-cut log) and popularity rank the judged users
    split, items = _split_at_gap(engine, s)
    user, item, type_, ts = split.pre.user, split.pre.item, split.pre.type, split.pre.ts
    pairs = covisit.build_pairs(user, item, ts, s.covisit_window, s.session_gap, s.covisit_neighbours,
                                covisit.event_factors(type_, s))
    ranked = baselines.rank_all(split, items, source_index.for_items(items, pairs), s, 100)
    got = {name: metrics.summarize(split.truth, r, 10, int(items.active.sum())) for name, r in ranked.items()}
    # then co-visitation puts each user's b first, popularity puts item 1 first: co-visitation wins
    assert got["covisit"]["ndcg"] == pytest.approx(1.0)
    assert got["popular"]["ndcg"] < 0.9 * got["covisit"]["ndcg"]
    assert got["covisit"]["non_empty"] == 1.0


def test_no_method_lists_an_item_the_user_had_before_the_cut(world):
    # given the synthetic world's log and settings whose seen window (an hour) and cap (3 items) would let most
    # pre-cut items back into the ranker's candidates
    s = dataclasses.replace(world.settings, seen_window=HOUR, seen_max_items=3)
    log = event_log.load_events(world.engine)
    cut = cut_time(log.ts, 0.8)
    items = load_item_table(world.engine, s, as_of=cut)
    split = split_log(log, cut, items, users=40, seed=1)
    assert np.diff(split.seen_offsets).max() > 3
    # when every baseline and the ranker (trained on the pre-cut log) rank the judged users
    user, item, type_, ts = split.pre.user, split.pre.item, split.pre.type, split.pre.ts
    pairs = covisit.build_pairs(user, item, ts, s.covisit_window, s.session_gap, s.covisit_neighbours,
                                covisit.event_factors(type_, s))
    index = source_index.for_items(items, pairs)
    ranked = baselines.rank_all(split, items, index, s, 100)
    ranked["ranker"] = ranker_lists.rank(fit_ranker(world.engine, s, iterations=20, events=split.pre).model, split,
                                        items, index, s, 100)
    # then no list of any method holds an item its user interacted with before the cut, and the ranker ranks
    for name, r in ranked.items():
        for u in range(len(split.users)):
            listed = r.rows[r.offsets[u]:r.offsets[u + 1]]
            assert not np.isin(listed, split.seen(u)).any(), (name, u)
            assert len(np.unique(listed)) == len(listed), (name, u)
    assert (np.diff(ranked["ranker"].offsets) == 100).all()


def test_an_empty_log_and_a_cut_outside_the_log_are_refused(own):
    # given an empty database; when evaluated, then a one-line refusal names the problem
    s, engine = own
    with pytest.raises(InvalidInput, match="only 0 events"):
        evaluate.evaluate(engine, s)
    with pytest.raises(InvalidInput, match="strictly between 0 and 1"):
        cut_time(np.arange(10.0), 1.0)


def test_evaluate_command_prints_the_table_and_writes_json_and_chart(settings, tmp_path):
    # given the synthetic world; when `evaluate` runs on a sample of users with a small ranker
    out, chart = tmp_path / "eval.json", tmp_path / "eval.png"
    done = manage(settings, "evaluate", "--users", "40", "--json", str(out), "--chart", str(chart), timeout=180,
                  extra_env={"PREFEED_TRAIN_ITERATIONS": "20"})
    assert done.returncode == 0, done.stderr
    # then the table has one row per method, the ranker last, and the ratio line
    lines = done.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("method"))
    ratio = head + 2 + len(baselines.BASELINES)
    assert [line.split()[0] for line in lines[head + 1:ratio]] == [*baselines.BASELINES, "ranker"]
    assert lines[ratio].startswith("ranker / best baseline (")
    assert lines[ratio].endswith("×)") and "95% interval over the 40 judged users" in lines[ratio]
    # and the JSON holds the protocol and every method's metrics; the chart is a PNG
    got = json.loads(out.read_text())
    assert got["users"] == 40 and got["k"] == 10 and got["events_before"] > got["events_after"] > 0
    assert list(got["methods"]) == [*baselines.BASELINES, "ranker"]
    assert got["ratio"] == pytest.approx(got["methods"]["ranker"]["ndcg"]
                                         / got["methods"][got["best_baseline"]]["ndcg"])
    low, high = got["ratio_interval"]
    assert low <= got["ratio"] <= high
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, message", [
    (("--cut", "1.5"), "strictly between 0 and 1"),
    (("--json", "/nonexistent-folder/eval.json"), "cannot write /nonexistent-folder/eval.json"),
])
def test_evaluate_command_refuses_bad_arguments_in_one_line(settings, args, message):
    # given bad arguments; when `evaluate` runs; then one line on stderr and exit 2, before any work
    done = manage(settings, "evaluate", *args)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and message in done.stderr, done.stderr
    assert "time split" not in done.stdout


def test_item_knn_ranks_by_summed_cosine_similarity_to_the_users_items(world):
    # given the world's log split at 0.8, and the cosine similarity of every item pair computed densely
    log = event_log.load_events(world.engine)
    cut = cut_time(log.ts, 0.8)
    items = load_item_table(world.engine, world.settings, as_of=cut)
    split = split_log(log, cut, items, users=25, seed=3)
    user, item, type_ = split.pre.user, split.pre.item, split.pre.type
    rows, w = items.rows(item), items.weight_of(type_)
    ok = (rows >= 0) & (w > 0)
    users = np.unique(user)
    x = np.zeros((len(users), len(items)))
    x[np.searchsorted(users, user[ok]), rows[ok]] = 1.0
    norms = np.sqrt(x.sum(axis=0))
    norms[norms == 0] = 1.0
    cos = (x.T @ x) / np.outer(norms, norms)
    # when item_knn ranks the judged users
    r = baselines.item_knn(split, items, 10)
    # then each list is the user's top 10 by Σ cos(i, j) over their items, leaving out their own and inactive ones
    for u, uid in enumerate(split.users):
        score = x[np.searchsorted(users, uid)] @ cos
        score[split.seen(u)] = -np.inf
        score[~items.active] = -np.inf
        listed = r.rows[r.offsets[u]:r.offsets[u + 1]]
        np.testing.assert_allclose(score[listed], np.sort(score)[::-1][:len(listed)], rtol=1e-4)
        assert len(listed) == min(10, int((score > 0).sum()))


def test_items_created_after_a_cut_are_inactive_at_it_but_live_items_stay_active_for_precompute(world):
    # given the world's catalogue, where some items were listed after the log's 0.8 cut
    log = event_log.load_events(world.engine)
    cut = cut_time(log.ts, 0.8)
    live = load_item_table(world.engine, world.settings)
    later = live.created_at > cut
    assert later.any() and live.active[later].any()
    # when the item table is read as of the cut, then exactly those items are inactive there, no candidate of
    # any method (they did not exist yet), and everything else keeps its flag
    at_cut = load_item_table(world.engine, world.settings, as_of=cut)
    assert not at_cut.active[at_cut.rows(live.ids[later])].any()
    earlier = live.ids[~later]
    assert np.array_equal(at_cut.active[at_cut.rows(earlier)], live.active[live.rows(earlier)])


def test_the_promotion_check_reusing_trainings_validation_period_judges_as_a_fresh_build(world):
    # given a model trained on the world's log, which keeps its validation cut's item table and co-visitation
    log = event_log.load_events(world.engine)
    events = log
    result = fit_ranker(world.engine, world.settings, iterations=20, users=200, events=events)
    assert result.validation is not None
    # when the promotion check reuses them, and when it builds them again from the database and the log
    reused = train.validate(world.engine, world.settings, events, result, users=None)
    rebuilt = train.validate(world.engine, world.settings, events, dataclasses.replace(result, validation=None),
                           users=None)
    # then both judge the same users with the same numbers under the replay protocol (the static one beside), and
    # leave out the users that chose the tree count
    assert reused == rebuilt and reused["valid_users"] > 0 and reused["protocol"] == "replay"
    assert reused["static_ndcg10"] > 0
    cut = result.metrics["valid_cut"]
    everyone = steps.find(events, result.validation.items, cut, float("inf"), world.settings.replay_steps).users()
    assert set(result.stopping_users.tolist()) & set(everyone.tolist())
    assert reused["valid_users"] == len(set(everyone.tolist()) - set(result.stopping_users.tolist()))
