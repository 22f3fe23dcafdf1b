"""The core pipeline: candidates, feature parity between training and precompute, the version guard across
racing jobs, and model bundle checks."""

import shutil
import time

import numpy as np
import pytest
from sqlalchemy import update

from precompute import bundle, defaults, features, ranker
from precompute.errors import BundleError
from precompute.events import NewEvent, record
from precompute.history import load_histories
from precompute.models import Item
from precompute.pipeline import STAGES


def test_recompute_writes_a_ranked_feed_per_user(pipeline, user_id):
    result = pipeline.recompute([user_id, user_id + 1000])   # the second user does not exist
    assert result.users == 2 and result.written == 2 and set(result.seconds) == set(STAGES)
    feed = pipeline.store.read(user_id)
    assert feed.header.model_version == pipeline.bundle.version
    assert 0 < feed.header.count <= pipeline.settings.feed_length
    assert np.all(np.diff(feed.scores) <= 0), "best first"
    assert len(np.unique(feed.items)) == len(feed.items)


def test_candidates_exclude_seen_and_inactive_items(pipeline, world, user_id):
    hist = load_histories(world.engine, [user_id], pipeline.items)
    cand = pipeline.candidates(hist)
    seen = hist.item_rows[hist.item_rows >= 0]
    assert len(cand.rows) > 0
    assert not np.isin(cand.rows, seen).any()
    assert pipeline.items.active[cand.rows].all()
    assert len(cand.rows) <= pipeline.settings.max_candidates
    assert set(np.unique(cand.flags)) <= set(range(1, 8))


def test_training_and_precompute_build_identical_feature_rows(pipeline, world, user_id):
    # given the same user, history and clock, through training's path (in-memory log) and precompute's (SQL)
    now = time.time()
    events = ranker.load_events(world.engine)
    _, cand_t, X_t = ranker.feature_rows(pipeline.items, pipeline.cov, events, np.array([user_id]), now,
                                         pipeline.settings.max_candidates)
    hist = load_histories(world.engine, [user_id], pipeline.items)
    cand_s = pipeline.candidates(hist)
    X_s = features.build(pipeline.items, hist, cand_s, now)
    # then the candidates and every feature of every row are identical
    assert X_s.shape[1] == features.N_FEATURES >= 40
    assert np.array_equal(cand_t.rows, cand_s.rows)
    assert np.array_equal(X_t, X_s)


def test_history_truncation_is_the_same_on_both_paths(pipeline, world, user_id, monkeypatch):
    monkeypatch.setattr(defaults, "HISTORY_LIMIT", 5)
    from precompute import history

    events = ranker.load_events(world.engine)
    a = history.histories_from_arrays(np.array([user_id]), *events, pipeline.items, limit=5)
    b = history.load_histories(world.engine, [user_id], pipeline.items, limit=5)
    assert len(a.ts) == len(b.ts) == 5
    assert np.array_equal(a.item_rows, b.item_rows) and np.array_equal(a.ts, b.ts)


def test_a_slow_job_never_overwrites_a_newer_feed(pipeline, world, user_id):
    # given job A read the user's history at version v
    seconds = dict.fromkeys(STAGES, 0.0)
    hist_a = load_histories(world.engine, [user_id], pipeline.items)
    feeds_a, _ = pipeline.build_feeds(hist_a, seconds)
    # when a new event arrives and job B recomputes and finishes first
    item = int(pipeline.items.ids[pipeline.items.global_popular[0]])
    rec = record(world.engine, [NewEvent(user_id, item, 2, time.time())])
    result_b = pipeline.recompute([user_id])
    assert result_b.written == 1
    # then job A finishing late is refused, and the stored feed carries B's newer version
    assert pipeline.store.write_many(feeds_a) == [False]
    stored = pipeline.store.read(user_id)
    assert stored.header.history_version == rec.versions[user_id] > hist_a.versions[0]


def test_deactivated_items_leave_candidates_after_reload(pipeline, world):
    row = int(pipeline.items.global_popular[0])
    item_id = int(pipeline.items.ids[row])
    with world.engine.begin() as conn:
        conn.execute(update(Item).where(Item.id == item_id).values(active=False))
    try:
        pipeline.load()
        assert item_id not in pipeline.items.ids[pipeline.items.global_popular]
    finally:
        with world.engine.begin() as conn:
            conn.execute(update(Item).where(Item.id == item_id).values(active=True))


_copies = iter(range(1, 1000))


def _copy_bundle(settings, version) -> int:
    """A byte-identical copy of bundle ``version`` under a new version number."""
    new = version + 1_000_000 * next(_copies)
    shutil.copytree(settings.model_dir / str(version), settings.model_dir / str(new))
    return new


def test_bad_bundles_are_refused_and_the_pipeline_keeps_its_own(pipeline, settings, world):
    good = pipeline.bundle.version
    truncated = _copy_bundle(settings, world.version)
    path = settings.model_dir / str(truncated) / "model.cbm"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(BundleError, match="truncated"):
        bundle.promote(settings.model_dir, truncated)
    assert bundle.current_version(settings.model_dir) == world.version

    wrong_format = _copy_bundle(settings, world.version)
    meta = settings.model_dir / str(wrong_format) / "meta.json"
    meta.write_text(meta.read_text().replace('"format": 1', '"format": 99'))
    with pytest.raises(BundleError, match="format 99"):
        bundle.load(settings.model_dir, wrong_format)

    wrong_features = _copy_bundle(settings, world.version)
    meta = settings.model_dir / str(wrong_features) / "meta.json"
    meta.write_text(meta.read_text().replace('"item_log_price"', '"something_else"'))
    with pytest.raises(BundleError, match="features"):
        bundle.load(settings.model_dir, wrong_features)

    # a running pipeline told to use a broken bundle keeps the one it has
    pointer = settings.model_dir / "CURRENT"
    pointer.write_text(f"{truncated}\n")
    try:
        pipeline.refresh()
        assert pipeline.bundle.version == good
    finally:
        pointer.write_text(f"{world.version}\n")


def test_a_promoted_bundle_is_picked_up_by_refresh(pipeline, settings, world):
    new = _copy_bundle(settings, world.version)
    bundle.promote(settings.model_dir, new)
    try:
        assert pipeline.refresh() is True
        assert pipeline.bundle.version == new
        assert pipeline.refresh() is False
    finally:
        bundle.promote(settings.model_dir, world.version)


def test_model_beats_popularity_on_the_seeded_marketplace(world):
    metrics = bundle.load(world.settings.model_dir).meta["metrics"]
    assert metrics["ndcg10"] > metrics["ndcg10_popular"]


def test_stale_users_are_those_whose_feed_is_missing_or_older(pipeline, world, user_id):
    from sqlalchemy import select

    from precompute.models import User

    fresh, missing = user_id, user_id + 2000        # ``missing`` has never had a feed stored
    pipeline.recompute([fresh])
    with world.engine.connect() as conn:
        version = conn.execute(select(User.history_version).where(User.id == fresh)).scalar()
    pipeline.store.r.set(pipeline.store.keys.feed(missing + 1), b"garbage")
    stale = pipeline.store.stale_users([(fresh, version), (fresh, version + 1), (missing, 3), (missing + 1, 1)])
    # the feed is current for its version, older than version + 1, absent for one user and unreadable for another
    assert stale == [fresh, missing, missing + 1]
