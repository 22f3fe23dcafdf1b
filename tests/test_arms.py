"""Experiments in the worker and the API: each user's feed is ranked by their arm and records it, a simple-method arm
is a full-length list of that method, and ``GET /feed`` answers the page's experiment and arm."""

import dataclasses
import time

import numpy as np
import pytest
from sqlalchemy import select

from api import create_app
from precompute.data import bulk, engine as db, synthetic
from precompute.data.tables import Event
from precompute.experiments import registry
from precompute.feeds.codec import NO_ARM
from precompute.learning.fit import fit_ranker
from precompute.ranking import bundle
from precompute.pipeline.pipeline import Pipeline
from tests.conftest import own_database, with_key

N_USERS = 300


@pytest.fixture(scope="module")
def own_url(tmp_path_factory):
    yield from own_database(tmp_path_factory, "arms")


@pytest.fixture(scope="module")
def market(own_url, tmp_path_factory):
    """A small marketplace of its own, a promoted bundle, and a second bundle (not promoted) for a model arm."""
    m = synthetic.generate(N_USERS, 400, 20_000, seed=5, now=time.time())
    engine = db.make_engine(own_url)
    db.init_db(engine)
    models = tmp_path_factory.mktemp("arms-models")
    return m, engine, models


@pytest.fixture
def s(settings, own_url, market):
    m, engine, models = market
    s = dataclasses.replace(settings, database_url=own_url, model_dir=models, item_attributes=synthetic.ATTRIBUTES,
                            feed_length=50)        # shorter than the catalogue: a list is cut, past the seen items
    if not bundle.versions(models):
        bulk.load(engine, m, s)
        for seed in (0, 1):
            result = fit_ranker(engine, s, iterations=10, users=200, seed=seed)
            version = bundle.write(models, result.model, result.pairs, {"metrics": result.metrics})
        bundle.promote(models, bundle.versions(models)[0])
    yield s
    with engine.begin() as conn:                       # this module's experiments only live in its own database
        from precompute.data.tables import StoredExperiment
        conn.execute(StoredExperiment.__table__.delete())


def test_each_user_is_ranked_by_their_arm_and_the_feed_records_it(s, market, r):
    m, engine, models = market
    current, other = bundle.current_version(models), [v for v in bundle.versions(models)
                                                         if v != bundle.current_version(models)][0]
    # given an experiment over every user: the promoted bundle, another bundle, popular and recent:1d
    experiment = registry.create(engine, "four", [("control", "model:current"), ("next", f"model:{other}"),
                                                  ("pop", "popular"), ("yesterday", "recent:1d")], None, 1.0, models)
    pipeline = Pipeline(s, engine, r)
    pipeline.load()
    users = m.user_id.tolist()
    # when every feed is recomputed
    assert pipeline.recompute(users).written == len(users)
    arms = experiment.arm_of(np.array(users))
    items = pipeline.items
    for uid, arm in zip(users, arms.tolist()):
        feed = pipeline.store.read(uid)
        # then each feed records the experiment, the user's arm and the bundle that ranked it (0: none)
        assert (feed.header.experiment, feed.header.arm) == (experiment.id, arm), uid
        assert feed.header.model_version == {0: current, 1: other}.get(arm, 0)
        if arm in (2, 3):
            # and a simple method's feed is its full-length list of active unseen items, best first
            seen = set(items.ids[pipeline_seen(pipeline, uid)].tolist())
            score = items.popularity if arm == 2 else items.windowed[:, 1]
            rows = [r_ for r_ in np.flatnonzero(items.active) if items.ids[r_] not in seen]
            rows = sorted(rows, key=lambda r_: (-score[r_], r_))[: s.feed_length]
            assert feed.items.tolist() == items.ids[rows].tolist(), (uid, arm)
    # and every arm got users
    assert sorted(set(arms.tolist())) == [0, 1, 2, 3]


def pipeline_seen(pipeline, uid):
    from precompute.data.history import load_histories

    return load_histories(pipeline.engine, [uid], pipeline.items, pipeline.settings).seen(0)


def test_outside_every_experiment_a_feed_records_no_arm(s, market, r):
    m, engine, _ = market
    pipeline = Pipeline(s, engine, r)
    pipeline.load()
    uid = int(m.user_id[0])
    pipeline.recompute([uid])
    header = pipeline.store.read(uid).header
    assert (header.experiment, header.arm) == (0, NO_ARM)


def test_the_feed_answers_the_experiment_and_arm_of_the_page(s, market, r):
    m, engine, models = market
    pipeline = Pipeline(s, engine, r)
    experiment = registry.create(engine, "pair", [("control", "model:current"), ("pop", "popular")], None, 1.0,
                                 models)
    pipeline.load()
    users = [int(u) for u in m.user_id[:40]]
    pipeline.recompute(users[:20])                    # the first 20 have a feed, the others get a fallback page
    client = with_key(create_app(s, {"TESTING": True}).test_client())
    arms = experiment.arm_of(np.array(users))
    with engine.connect() as conn:
        acted = set(conn.execute(select(Event.user_id).where(Event.user_id.in_(users))).scalars())
    assert len(acted - set(users[:20])) > 0                    # some fallback pages are of users with events
    for uid, arm in zip(users, arms.tolist()):
        body = client.get(f"/feed/{uid}?limit=5").get_json()
        assert body["source"] == ("precomputed" if uid in users[:20] else "fallback"), body
        # a fallback page of a user the database holds no event of is in no arm (docs/experiments.md, "Who is
        # counted"); a precomputed feed was ranked in its arm
        placed = ("pair", experiment.arms[arm].name) if uid in acted or uid in users[:20] else (None, None)
        assert (body["experiment"], body["arm"]) == placed, uid
    # and once the experiment is stopped, a feed ranked in it still answers its arm until it is rebuilt; a fallback
    # page answers none
    registry.stop(engine, "pair", None)
    time.sleep(2.1)                                   # the API reads the experiments every 2 s
    first = client.get(f"/feed/{users[0]}?limit=5").get_json()
    assert first["experiment"] == "pair"
    last = client.get(f"/feed/{users[-1]}?limit=5").get_json()
    assert (last["source"], last["experiment"], last["arm"]) == ("fallback", None, None)


def test_creating_and_stopping_an_experiment_mark_exactly_its_users_a_bounded_step_at_a_time(s, market, r, monkeypatch):
    from jobs import context, queues, tasks
    from precompute.feeds.dirty import DirtyUsers

    m, engine, models = market
    pipeline = Pipeline(dataclasses.replace(s, reassign_batch=100, reassign_interval=5.0), engine, r)
    pipeline.load()
    monkeypatch.setattr(context, "_pipeline", pipeline)
    monkeypatch.setattr(context, "_queue_redis", r)
    # given an experiment over a third of the users
    experiment = registry.create(engine, "third", [("control", "model:current"), ("pop", "popular")], None, 0.33,
                                 models)
    ids = sorted(int(u) for u in m.user_id)
    # when its first step runs
    done = tasks.mark_reassigned(experiment.id)
    # then of the first 100 users exactly those of its slot are dirty, and the next step waits its interval
    inside = [u for u, arm in zip(ids, experiment.arm_of(np.array(ids)).tolist()) if arm >= 0]
    dirty = DirtyUsers(r, pipeline.settings)
    assert 0 < done["marked"] < 100 and done["next_after"] == ids[99]
    assert sorted(int(u) for u in r.zrange(dirty.keys.dirty, 0, -1)) == [u for u in inside if u <= ids[99]]
    scheduled = queues.make_queue(pipeline.settings, r).scheduled_job_registry
    assert len(scheduled.get_job_ids()) == 1
    # and the steps that follow mark the rest of its users, and no one else
    after = done["next_after"]
    while after is not None:
        after = tasks.mark_reassigned(experiment.id, after)["next_after"]
    assert sorted(int(u) for u in r.zrange(dirty.keys.dirty, 0, -1)) == inside
    # and stopping it marks exactly the same users again: they go back to the current bundle
    r.delete(dirty.keys.dirty)
    registry.stop(engine, "third", None)
    after = 0
    while after is not None:
        after = tasks.mark_reassigned(experiment.id, after)["next_after"]
    assert sorted(int(u) for u in r.zrange(dirty.keys.dirty, 0, -1)) == inside


def test_a_model_arms_bundle_is_loaded_once_and_its_index_follows_the_item_table(s, market, r):
    m, engine, models = market
    other = [v for v in bundle.versions(models) if v != bundle.current_version(models)][0]
    registry.create(engine, "again", [("control", "model:current"), ("next", f"model:{other}")], None, 1.0, models)
    pipeline = Pipeline(s, engine, r)
    pipeline.load()
    loaded, index = pipeline.arms.bundles[other]
    # when the worker loads fresh item matrices
    pipeline.load()
    # then the arm's bundle is the one already in memory, and its candidate index is rebuilt over the new table
    again, rebuilt = pipeline.arms.bundles[other]
    assert again is loaded and rebuilt is not index and pipeline.arms.items is pipeline.items


def test_a_drain_that_began_before_an_experiment_ranks_its_users_in_their_new_arm(s, market, r, monkeypatch):
    from jobs import context, tasks
    from precompute.feeds.dirty import DirtyUsers

    m, engine, models = market
    # given a worker whose pipeline was loaded before the experiment existed (a drain job already running)
    pipeline = Pipeline(s, engine, r)
    pipeline.load()
    monkeypatch.setattr(context, "_pipeline", pipeline)
    monkeypatch.setattr(context, "_queue_redis", r)
    experiment = registry.create(engine, "late", [("control", "model:current"), ("pop", "popular")], None, 1.0,
                                 models)
    users = [int(u) for u in m.user_id[:40]]
    # when the users its walk marked are drained
    DirtyUsers(r, pipeline.settings).mark(users)
    tasks.drain_dirty()
    # then every feed is ranked in the user's arm of the new experiment, not outside it
    arms = experiment.arm_of(np.array(users)).tolist()
    assert [(pipeline.store.read(u).header.experiment, pipeline.store.read(u).header.arm) for u in users] == \
        [(experiment.id, a) for a in arms]
    registry.stop(engine, "late", None)
