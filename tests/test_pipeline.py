"""The core pipeline: candidates and every feature column against plain Python references (``tests/reference.py``),
feature parity between training and precompute, histories, the version guard across racing jobs, and what a reload
of the item matrices brings (new items, deactivations)."""

import dataclasses
import time

import numpy as np
import pytest
from sqlalchemy import select, text, update

from precompute.data import history
from precompute.data.tables import Item, User
from precompute.data.recording import NewEvent, record
from precompute.data.log import load_events
from precompute.learning import periods
from precompute.ranking import candidates, features, latent, popularity
from precompute.ranking.item_loader import load_item_table
from precompute.pipeline.pipeline import STAGES
from precompute.units import DAY
from tests import reference


def histories(pipeline, user_ids, limit=None):
    """The pipeline's history read, at its settings' limit unless one is given."""
    s = dataclasses.replace(pipeline.settings, history_limit=limit) if limit else pipeline.settings
    return history.load_histories(pipeline.engine, user_ids, pipeline.items, s)


def test_recompute_writes_a_ranked_feed_per_user(pipeline, user_id, new_user_ids):
    result = pipeline.recompute([user_id, *new_user_ids(1)])   # the second user does not exist
    assert result.users == 2 and result.written == 2 and set(result.seconds) == set(STAGES)
    feed = pipeline.store.read(user_id)
    assert feed.header.model_version == pipeline.bundle.version
    assert 0 < feed.header.count <= pipeline.settings.feed_length
    assert np.all(np.diff(feed.scores) <= 0), "best first"
    assert len(np.unique(feed.items)) == len(feed.items)


def seen_in_window(pipeline, user_id) -> set[int]:
    """Rows of the items ``user_id`` interacted with inside the seen window, straight from the events table."""
    with pipeline.engine.connect() as conn:
        clock = conn.execute(text("SELECT max(ts) FROM events")).scalar()
        ids = conn.execute(text("SELECT DISTINCT item_id FROM events WHERE user_id = :u AND ts >= :since"),
                           {"u": user_id, "since": clock - pipeline.settings.seen_window}).scalars().all()
    return set(pipeline.items.rows(np.array(ids, dtype=np.int64)).tolist()) - {-1}


def test_candidates_exclude_seen_and_inactive_items(pipeline, world, user_id):
    hist = histories(pipeline, [user_id])
    cand = pipeline.candidates(hist)
    seen = seen_in_window(pipeline, user_id)
    assert len(cand.rows) > 0 and seen
    assert not np.isin(cand.rows, list(seen)).any()
    assert pipeline.items.active[cand.rows].all()
    assert len(cand.rows) <= pipeline.settings.max_candidates
    assert set(np.unique(cand.flags)) <= set(range(1, candidates.ALL_SOURCES + 1))


def test_popular_lists_are_each_categorys_most_popular_active_items(pipeline):
    items = pipeline.items
    # given every active item ranked the obvious way: popularity descending, then id
    ranked = sorted((r for r in range(len(items)) if items.active[r]),
                    key=lambda r: (-items.popularity[r], items.ids[r]))
    # then each category's list is its first CATEGORY_POPULAR items, most popular first, and nothing else
    # (an item in several categories is on each one's list)
    assert (items.n_cats > 1).any()
    for c, rows in enumerate(items.category_popular):
        want = [r for r in ranked if c in reference.categories(items, r)][: pipeline.settings.category_popular]
        assert rows.tolist() == want, c
    assert items.global_popular.tolist() == ranked[: pipeline.settings.global_popular]
    # and rows themselves are in popularity order, which candidate generation relies on
    assert np.all(np.diff(items.popularity) <= 0)


@pytest.mark.parametrize("factorless", [False, True], ids=["every-item-factored", "a-third-without-factors"])
def test_candidates_match_a_plain_python_reference(pipeline, world, own_users, new_user_ids, factorless):
    # given a batch of users with histories and one without (a user who does not exist)
    batch = [*own_users(3), *new_user_ids(1)]
    hist = histories(pipeline, batch)
    index = pipeline.index
    if factorless:
        # and a latent model in which every third item has no factor (nobody interacted with it before the fit):
        # the batch product leaves those out, and the rest must still be found by item row
        factors = index.latent.factors_of(np.arange(len(pipeline.items)))
        factors[::3] = 0.0
        index = dataclasses.replace(index, latent=latent.LatentIndex.of(factors))
    # when candidates are generated without a cap
    uncapped = dataclasses.replace(pipeline.settings, max_candidates=10**9)
    cand = candidates.for_batch(pipeline.items, index, hist, uncapped)
    for k in range(len(batch)):
        a, b = hist.offsets[k], hist.offsets[k + 1]
        want = reference.candidates_of(pipeline.settings, pipeline.items, index, hist.item_rows[a:b],
                                       hist.types[a:b], seen_in_window(pipeline, batch[k]))
        lo, hi = cand.offsets[k], cand.offsets[k + 1]
        got = {int(r): (s, c, s0, f, kn, lt) for r, s, c, s0, f, kn, lt in zip(
            cand.rows[lo:hi], cand.cov_score[lo:hi], cand.cov_count[lo:hi], cand.cov_last[lo:hi], cand.flags[lo:hi],
            cand.knn_score[lo:hi], cand.latent_score[lo:hi])}
        # then each user gets exactly the reference's items, once each, with its scores and source bits
        assert hi - lo == len(got) == len(want)
        assert got.keys() == want.keys()
        for n, (s, c, s0, f, kn, lt) in want.items():
            assert got[n][0] == pytest.approx(s) and got[n][2] == pytest.approx(s0), n
            assert got[n][4] == pytest.approx(kn) and got[n][5] == pytest.approx(lt, rel=1e-4, abs=1e-6), n
            assert (got[n][1], got[n][3]) == (c, f), n
    # and with a cap, every co-visited item is kept, then every kNN, latent and recently popular one, then the most
    # popular of the others
    full = cand.rows[: cand.offsets[1]]
    covisited = set(full[cand.cov_score[: cand.offsets[1]] > 0].tolist())
    recent = (candidates.FROM_RECENT_1H | candidates.FROM_RECENT_1D | candidates.FROM_KNN
              | candidates.FROM_LATENT)
    hot = set(full[(cand.flags[: cand.offsets[1]] & recent) > 0].tolist()) - covisited
    assert hot, "the test world has items interacted with in the last day"
    cap = len(covisited) + len(hot) + 100
    capped = candidates.for_batch(pipeline.items, index, hist.slice(0, 1),
                                  dataclasses.replace(pipeline.settings, max_candidates=cap))
    kept = set(capped.rows.tolist())
    assert len(kept) == len(capped.rows) == cap and covisited | hot < kept < set(full.tolist())
    rank = pipeline.items.pop_rank
    assert max(rank[n] for n in kept - covisited - hot) < min(rank[n] for n in set(full.tolist()) - kept)


def test_every_feature_column_matches_a_plain_python_reference(pipeline, world, own_users, new_user_ids):
    # given a batch of users with histories and one without (a user who does not exist), and their candidates
    batch = [*own_users(2), *new_user_ids(1)]
    hist = histories(pipeline, batch)
    cand = pipeline.candidates(hist)
    now = time.time()
    # when the feature matrix is built
    X = features.build(pipeline.items, hist, cand, now)
    # then every column of every candidate row equals the reference computed from the user's history, the item
    # table and the settings, to float32 precision (item age: the float32 day numbers it is a difference of), NaN
    # exactly where the reference has no value (the user without history has no price level)
    layout = pipeline.items.layout
    assert X.shape == (len(cand.rows), len(layout)) and not np.isinf(X).any()
    per_item = reference.item_features(pipeline.items, now)
    for k in range(len(batch)):
        a, b = hist.offsets[k], hist.offsets[k + 1]
        want = reference.feature_rows(pipeline.settings, pipeline.items, pipeline.index, hist.item_rows[a:b],
                                      hist.types[a:b], hist.ts[a:b], now, per_item,
                                      seen_in_window(pipeline, batch[k]))
        rows = cand.rows[cand.offsets[k]: cand.offsets[k + 1]].tolist()
        assert sorted(rows) == sorted(want) and len(rows) > 0
        for name in layout.names:
            got = X[cand.offsets[k]: cand.offsets[k + 1], layout.index(name)]
            expected = np.array([want[r][name] for r in rows], dtype=np.float64)
            atol = 4e-3 if name in ("item_age_days", "item_days_since_first_event") else 1e-5
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=atol, err_msg=f"user {batch[k]}: {name}")


def test_training_and_precompute_build_identical_feature_rows(pipeline, world, user_id):
    # given the same user, history and clock, through training's path (in-memory log) and precompute's (SQL)
    now = time.time()
    events = load_events(world.engine)
    _, cand_t, X_t = periods.feature_rows(pipeline.items, pipeline.index, events, np.array([user_id]), now,
                                         pipeline.settings)
    hist = histories(pipeline, [user_id])
    cand_s = pipeline.candidates(hist)
    X_s = features.build(pipeline.items, hist, cand_s, now)
    # then the candidates and every feature of every row are identical
    assert X_s.shape[1] == len(pipeline.items.layout) >= 40
    assert np.array_equal(cand_t.rows, cand_s.rows)
    assert np.array_equal(X_t, X_s, equal_nan=True)


def test_training_features_of_sampled_candidates_are_the_rows_of_the_whole_set(pipeline, own_users):
    # given several users' candidates and their feature rows, and a sample of them that leaves out each user's
    # strongest co-visited candidate (the features scale co-visitation by it)
    users = own_users(6)
    hist = histories(pipeline, users)
    cand = pipeline.candidates(hist)
    now = time.time()
    X = features.build(pipeline.items, hist, cand, now)
    keep = np.random.default_rng(0).random(len(cand.rows)) < 0.3
    for k in range(len(users)):
        a, b = cand.offsets[k], cand.offsets[k + 1]
        keep[a + np.argmax(cand.cov_score[a:b])] = False
    assert cand.cov_score[keep].any()
    # when features are built for the sample only, as training does
    X_keep = features.build(pipeline.items, hist, cand.take(keep), now)
    # then they are the whole set's rows of the sample, column for column
    assert np.array_equal(X_keep, X[keep], equal_nan=True)


def test_history_truncation_is_the_same_on_both_paths(pipeline, world):
    # given the user with the most events (more than the limit of 5: both paths must cut; this test only reads)
    events = load_events(world.engine)
    ids, counts = np.unique(events.user, return_counts=True)
    user_id = int(ids[np.argmax(counts)])
    assert counts.max() > 5
    a = history.histories_from_arrays(np.array([user_id]), events.user, events.item, events.type, events.ts,
                                      pipeline.items,
                                      dataclasses.replace(pipeline.settings, history_limit=5), clock=time.time())
    b = histories(pipeline, [user_id], 5)
    assert len(a.ts) == len(b.ts) == 5
    assert np.array_equal(a.item_rows, b.item_rows) and np.array_equal(a.ts, b.ts)


def _from_events(world, user_ids, limit):
    with world.engine.connect() as conn:
        return history.from_events(conn, user_ids, limit)


def test_kept_recent_events_follow_the_event_log(pipeline, world, user_id):
    # given new events out of time order, ties with stored ones, and a duplicate client id
    stored = histories(pipeline, [user_id])
    items = pipeline.items.ids[pipeline.items.global_popular[:4]].tolist()
    newest, oldest = float(stored.ts.max()), float(stored.ts.min())
    record(world.engine, [NewEvent(user_id, items[0], 1, newest + 5, "kept-a"),
                          NewEvent(user_id, items[1], 2, newest),             # same ts as the newest stored
                          NewEvent(user_id, items[2], 3, oldest - DAY)], pipeline.settings)  # older than all kept
    record(world.engine, [NewEvent(user_id, items[3], 4, newest + 1), NewEvent(user_id, items[0], 1, 0, "kept-a")],
           pipeline.settings)
    # then the kept value equals the events table's newest events, in (ts, id) order, at every limit
    for limit in (pipeline.settings.history_limit, 5):
        kept = histories(pipeline, [user_id], limit)
        want = _from_events(world, [user_id], limit)[user_id]
        assert np.array_equal(pipeline.items.ids[kept.item_rows], want["item"])
        assert np.array_equal(kept.types, want["type"]) and np.array_equal(kept.ts, want["ts"])
    assert kept.item_rows[-1] == pipeline.items.rows(np.array([items[0]]))[0]


def test_users_without_a_kept_value_are_read_from_the_events_table(pipeline, world, own_users):
    user_id, other = own_users(2)
    before = histories(pipeline, [user_id, other])
    with world.engine.begin() as conn:
        conn.execute(update(User).where(User.id == user_id).values(recent=None))
    after = histories(pipeline, [user_id, other])
    for field in ("user_ids", "versions", "offsets", "item_rows", "types", "ts"):
        assert np.array_equal(getattr(before, field), getattr(after, field)), field
    # and recording events leaves it to the events table (no value is invented from a partial view)
    record(world.engine, [NewEvent(user_id, int(pipeline.items.ids[0]), 1, time.time())], pipeline.settings)
    with world.engine.connect() as conn:
        assert conn.execute(select(User.recent).where(User.id == user_id)).scalar() is None
    n_before = int(before.offsets[1])
    assert len(histories(pipeline, [user_id]).ts) == min(n_before + 1, pipeline.settings.history_limit)


def test_a_malformed_kept_value_is_replaced_by_the_events_table(pipeline, world, user_id):
    before = histories(pipeline, [user_id])
    with world.engine.begin() as conn:
        conn.execute(update(User).where(User.id == user_id).values(recent=b"not a packed history"))
    # reading falls back to the events table
    after = histories(pipeline, [user_id])
    assert np.array_equal(before.item_rows, after.item_rows) and np.array_equal(before.ts, after.ts)
    # recording still succeeds; the unreadable value is dropped (NULL) instead of failing the events
    rec = record(world.engine, [NewEvent(user_id, int(pipeline.items.ids[0]), 1, time.time())],
                 pipeline.settings)
    assert rec.accepted == 1
    with world.engine.connect() as conn:
        assert conn.execute(select(User.recent).where(User.id == user_id)).scalar() is None
    assert len(histories(pipeline, [user_id]).ts) == min(len(before.ts) + 1, pipeline.settings.history_limit)


def test_a_slow_job_never_overwrites_a_newer_feed(pipeline, world, user_id):
    # given job A read the user's history at version v
    seconds = dict.fromkeys(STAGES, 0.0)
    hist_a = histories(pipeline, [user_id])
    feeds_a, _ = pipeline.build_feeds(hist_a, seconds)
    # when a new event arrives and job B recomputes and finishes first
    item = int(pipeline.items.ids[pipeline.items.global_popular[0]])
    rec = record(world.engine, [NewEvent(user_id, item, 2, time.time())], pipeline.settings)
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


def test_stale_users_are_those_whose_feed_is_missing_or_older(pipeline, world, user_id, new_user_ids):
    from sqlalchemy import select

    from precompute.data.tables import User

    fresh, (missing, unreadable) = user_id, new_user_ids(2)      # ``missing`` has never had a feed stored
    pipeline.recompute([fresh])
    with world.engine.connect() as conn:
        version = conn.execute(select(User.history_version).where(User.id == fresh)).scalar()
    pipeline.store.r.set(pipeline.store.keys.feed(unreadable), b"garbage")
    stale = pipeline.store.stale_users([(fresh, version), (fresh, version + 1), (missing, 3), (unreadable, 1)])
    # the feed is current for its version, older than version + 1, absent for one user and unreadable for another
    assert stale == [fresh, missing, unreadable]


def test_new_items_reach_candidates_and_feeds_once_the_item_matrices_reload(settings, world, r, user_id,
                                                                             new_user_ids):
    from sqlalchemy import delete, insert

    from precompute.data.tables import Event, ItemCategory
    from precompute.pipeline.pipeline import Pipeline

    # given a worker's pipeline whose popular lists are shorter than the catalogue, reading the whole log every 2 s
    # (the purchases below are dated at the matrices' clock: an incremental reload would count them in the
    # windows only)
    s = dataclasses.replace(settings, global_popular=20, category_popular=10, item_table_max_age=2,
                            item_table_full_reload=2)
    pipeline = Pipeline(s, world.engine, r)
    pipeline.load()
    user = user_id
    hist = histories(pipeline, [user])
    weight = reference.category_weights(pipeline.items, hist.item_rows, hist.types)
    strongest = int(pipeline.items.category_ids[max(weight, key=lambda c: (weight[c], -c))])
    # when two items are listed in the user's strongest category and bought more often than any other item
    new = [5_001, 5_002]
    crowd = new_user_ids(1)[0]
    purchases = int(pipeline.items.popularity.max() // pipeline.items.type_weights[4]) + 2
    now = time.time()
    with world.engine.begin() as conn:
        conn.execute(insert(Item), [dict(id=i, price=100.0, created_at=now, active=True) for i in new])
        conn.execute(insert(ItemCategory), [dict(item_id=i, category=strongest) for i in new])
    try:
        # (at the log's clock: the log's time does not move, so only the wall clock ages the matrices)
        record(world.engine, [NewEvent(crowd, i, 4, pipeline.items.as_of) for i in new for _ in range(purchases)],
               s)
        # then before the matrices are older than their max age, no candidate or feed holds them
        assert pipeline.refresh() is False
        assert not set(new) & set(pipeline.items.ids[pipeline.candidates(histories(pipeline, [user])).rows])
        pipeline.recompute([user])
        assert not set(new) & set(pipeline.store.read(user).items.tolist())
        assert not set(new) & set(np.frombuffer(r.get(f"{s.key_prefix}{{popular}}:global"), "<i8").tolist())
        # and once they are, the reload makes them the most popular items, candidates from both popular lists,
        # ranked into the user's feed and first on the fallback's global list
        time.sleep(max(0.0, pipeline.items.loaded_at + s.item_table_max_age + 0.05 - time.time()))
        assert pipeline.refresh() is True
        items = pipeline.items
        assert sorted(items.ids[items.global_popular[:2]]) == new
        cand = pipeline.candidates(histories(pipeline, [user]))
        flags = dict(zip(items.ids[cand.rows].tolist(), cand.flags.tolist()))
        both = candidates.FROM_CATEGORY | candidates.FROM_GLOBAL
        assert all(flags[i] & both == both for i in new)
        pipeline.recompute([user])
        assert set(new) <= set(pipeline.store.read(user).items.tolist())
        assert sorted(np.frombuffer(r.get(f"{s.key_prefix}{{popular}}:global"), "<i8")[:2]) == new
    finally:
        with world.engine.begin() as conn:
            conn.execute(delete(Event).where(Event.user_id == crowd))
            conn.execute(delete(User).where(User.id == crowd))
            conn.execute(delete(ItemCategory).where(ItemCategory.item_id.in_(new)))
            conn.execute(delete(Item).where(Item.id.in_(new)))


def test_wall_clock_reloads_carry_the_item_matrices_forward_and_a_full_reload_reads_late_events(settings, world, r,
                                                                                               new_user_ids):
    from sqlalchemy import delete

    from precompute.data.tables import Event
    from precompute.pipeline.pipeline import Pipeline

    # given a worker's pipeline reloading every second of wall time, and reading the whole log every 3 s
    s = dataclasses.replace(settings, item_table_max_age=1, item_table_full_reload=3)
    pipeline = Pipeline(s, world.engine, r)
    pipeline.load()
    first = pipeline.items
    crowd = new_user_ids(1)[0]
    item = int(first.ids[-1])
    row = lambda table: int(table.rows(np.array([item]))[0])     # noqa: E731 (rows follow popularity)
    weight = first.type_weights[4]
    try:
        # when a purchase is stored late, dated before the matrices' clock (the log's clock does not move)
        record(world.engine, [NewEvent(crowd, item, 4, first.as_of - 10)], s)
        # then the next reload after a second carries the table forward: the windows count the purchase, the
        # all-time counts do not yet, and the full load's time stays
        time.sleep(max(0.0, first.read_at + 1.05 - time.time()))
        assert pipeline.refresh() is True
        forward = pipeline.items
        assert forward.loaded_at == first.loaded_at and forward.read_at > first.read_at
        np.testing.assert_allclose(forward.windowed[row(forward)], first.windowed[row(first)] + weight)
        assert forward.counts[row(forward), 4] == first.counts[row(first), 4]
        # and once the last full load is 3 s old, the whole log is read again and the all-time counts hold it
        time.sleep(max(0.0, first.loaded_at + 3.05 - time.time()))
        assert pipeline.refresh() is True
        full = pipeline.items
        assert full.loaded_at > first.loaded_at
        assert full.counts[row(full), 4] == first.counts[row(first), 4] + 1
        np.testing.assert_array_equal(full.counts, load_item_table(world.engine, s).counts)
    finally:
        with world.engine.begin() as conn:
            conn.execute(delete(Event).where(Event.user_id == crowd))
            conn.execute(delete(User).where(User.id == crowd))


def test_the_item_matrices_reload_once_the_logs_clock_moves_past_their_max_age(settings, world, r, new_user_ids):
    from precompute.pipeline.pipeline import Pipeline

    # given a worker's pipeline loaded at the log's clock, reloading every 300 s (of wall time or of the log's)
    s = dataclasses.replace(settings, item_table_max_age=300)
    pipeline = Pipeline(s, world.engine, r)
    pipeline.load()
    as_of = pipeline.items.as_of
    crowd = new_user_ids(1)[0]
    item = int(pipeline.items.ids[-1])                  # the least popular item: nobody bought it in the last hour
    row = lambda: int(pipeline.items.rows(np.array([item]))[0])    # noqa: E731
    try:
        # when the log moves on by less than that (a replay posts a log faster than it happened), nothing reloads
        record(world.engine, [NewEvent(crowd, item, 4, as_of + 100)], s)
        assert pipeline.refresh() is False
        # and once it moves on by more, the next job reloads: the hour's popularity counts the new purchases
        record(world.engine, [NewEvent(crowd, item, 4, as_of + 301)], s)
        loaded_at = pipeline.items.loaded_at
        assert pipeline.refresh() is True and pipeline.items.as_of == as_of + 301
        block = pipeline.items.live(1, (0, 0)).blocks[0]
        column = pipeline.items.layout.index("item_log_weighted_1h") - pipeline.items.layout.start("item_live")
        assert block[row(), column] == pytest.approx(np.log1p(2 * pipeline.items.type_weights[4]))
        # and that reload carried the table forward (the events since it), to the numbers a full load reads; the
        # wall-clock age still runs from the last full load
        full = load_item_table(world.engine, s, as_of=as_of + 301)
        assert pipeline.items.loaded_at == loaded_at
        for name in ("ids", "counts", "windowed", "first_seen", "active", "popularity"):
            np.testing.assert_array_equal(getattr(pipeline.items, name), getattr(full, name), err_msg=name)
        np.testing.assert_array_equal(pipeline.items.static, full.static)
    finally:
        from sqlalchemy import delete

        from precompute.data.tables import Event
        with world.engine.begin() as conn:
            conn.execute(delete(Event).where(Event.user_id == crowd))
            conn.execute(delete(User).where(User.id == crowd))
