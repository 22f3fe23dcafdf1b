"""Seen items stay out of precomputed feeds: every item a user interacted with inside the seen window, however many
events that is, counted at the log's clock; kept as one value per user (distinct items, capped)."""

import dataclasses
import time

import numpy as np
from sqlalchemy import select, text, update

from precompute.data import bulk, engine as db, history, seen, synthetic
from precompute.data.tables import User
from precompute.data.recording import NewEvent, record
from precompute.pipeline.pipeline import Pipeline
from precompute.units import DAY, HOUR


def _record(engine, settings, events: list[NewEvent]) -> None:
    for start in range(0, len(events), 500):
        record(engine, events[start:start + 500], settings)


def _kept(engine, user_id) -> bytes | None:
    with engine.connect() as conn:
        return conn.execute(select(User.seen).where(User.id == user_id)).scalar()


def test_a_heavy_user_gets_a_feed_without_any_item_of_their_window(pipeline, world, client, new_user_ids):
    # given a user with 2,000 events over 1,000 distinct items (the most popular active ones: candidates for
    # anyone), all inside the seen window
    uid = new_user_ids(1)[0]
    items = pipeline.items
    rows = np.flatnonzero(items.active)[:1000]
    ids = items.ids[rows].tolist()
    now = time.time()
    events = [NewEvent(uid, ids[k % 1000], 1 + (k % 4), now - 20 * DAY + k * 600.0) for k in range(2000)]
    _record(world.engine, pipeline.settings, events)
    assert len(seen.unpack(_kept(world.engine, uid))) == 1000
    # then before any feed is precomputed, the fallback served in its place leaves them out
    fallback = client.get(f"/feed/{uid}?limit=100").get_json()
    assert fallback["source"] == "fallback" and fallback["items"]
    assert not {i["item_id"] for i in fallback["items"]} & set(ids)
    # when their feed is precomputed
    pipeline.recompute([uid])
    # then it holds items, and none of the 1,000
    feed = pipeline.store.read(uid)
    assert feed.header.count > 0
    assert not set(feed.items.tolist()) & set(ids)
    # and neither does any page served from it
    served = client.get(f"/feed/{uid}?limit=100").get_json()
    assert served["source"] == "precomputed" and served["items"]
    assert not {i["item_id"] for i in served["items"]} & set(ids)


def test_items_seen_before_the_window_may_come_back(pipeline, world, new_user_ids):
    # given a user who interacted with popular items long ago, and with others inside the window
    uid = new_user_ids(1)[0]
    items = pipeline.items
    popular = items.ids[items.global_popular[:40]].tolist()
    old, recent = popular[:20], popular[20:]
    clock = time.time()
    window = pipeline.settings.seen_window
    _record(world.engine, pipeline.settings,
            [NewEvent(uid, i, 2, clock - window - DAY) for i in old] +
            [NewEvent(uid, i, 2, clock - DAY) for i in recent])
    # when candidates are generated
    hist = history.load_histories(world.engine, [uid], items, pipeline.settings)
    cand = set(items.ids[pipeline.candidates(hist).rows].tolist())
    # then items inside the window are out and the old ones are candidates again
    assert not cand & set(recent)
    assert set(old) <= cand


def test_the_kept_value_holds_the_newest_distinct_items_up_to_its_cap(pipeline, world, new_user_ids):
    # given a small cap and events with repeats, ties and out-of-order times, over several batches
    s = dataclasses.replace(pipeline.settings, seen_max_items=30)
    uid = new_user_ids(1)[0]
    rng = np.random.default_rng(3)
    ids = pipeline.items.ids[rng.choice(len(pipeline.items), 80, replace=False)].tolist()
    now = time.time()
    events = [NewEvent(uid, int(rng.choice(ids)), int(rng.integers(1, 5)), now - float(rng.integers(0, 50)) * HOUR)
              for _ in range(400)]
    for start in range(0, 400, 37):
        record(world.engine, events[start:start + 37], s)
    # then the value holds each item once at its latest time: the 30 most recent, oldest first
    latest: dict[int, float] = {}
    for e in events:
        latest[e.item_id] = max(latest.get(e.item_id, -1.0), e.ts)
    want = sorted(latest.items(), key=lambda kv: (kv[1], kv[0]))[-30:]
    rec = seen.unpack(_kept(world.engine, uid))
    assert list(zip(rec["item"].tolist(), rec["ts"].tolist())) == want
    # and under a larger cap the value (kept under 30) is read from the events table, and the next recording drops
    # it rather than extending it as if it were whole
    wider = dataclasses.replace(s, seen_max_items=50)
    assert len(history.load_histories(world.engine, [uid], pipeline.items, wider).seen_rows) == min(50, len(latest))
    saved = _kept(world.engine, uid)
    older = NewEvent(uid, want[-1][0], 1, now - 100 * HOUR)      # changes no item's latest time
    assert record(world.engine, [older], wider).accepted == 1
    assert _kept(world.engine, uid) is None
    with world.engine.begin() as conn:                  # put the cap-30 value back for what follows
        conn.execute(update(User).where(User.id == uid).values(seen=saved))
    # and a user row without the value is read the same way from the events table
    kept = history.load_histories(world.engine, [uid], pipeline.items, s)
    with world.engine.begin() as conn:
        conn.execute(update(User).where(User.id == uid).values(seen=None))
    from_table = history.load_histories(world.engine, [uid], pipeline.items, s)
    assert np.array_equal(kept.seen_rows, from_table.seen_rows) and len(kept.seen_rows) == 30
    # and a malformed value is dropped by the next recording instead of failing it
    with world.engine.begin() as conn:
        conn.execute(update(User).where(User.id == uid).values(seen=b"garbage"))
    assert record(world.engine, [NewEvent(uid, ids[0], 1, now)], s).accepted == 1
    assert _kept(world.engine, uid) is None


def test_the_window_ends_at_the_log_clock_not_the_wall_clock(settings, world, r, tmp_path):
    # given a replayed log whose newest event is 100 days old
    old = dataclasses.replace(settings, database_url=f"sqlite:///{tmp_path / 'replay.db'}", seen_window=30 * DAY)
    engine = db.make_engine(old.database_url)
    db.init_db(engine)
    bulk.load(engine, synthetic.generate(40, 300, 4000, seed=5, now=time.time() - 100 * DAY), old)
    pipeline = Pipeline(old, engine, r)
    pipeline.load()
    with engine.connect() as conn:
        clock = conn.execute(text("SELECT max(ts) FROM events")).scalar()
    # when a user's candidates are generated
    uid = 3
    hist = history.load_histories(engine, [uid], pipeline.items, old)
    cand = set(pipeline.candidates(hist).rows.tolist())
    # then every item of the user's last 30 days of that log is out of them (nothing is, by the wall clock)
    with engine.connect() as conn:
        ids = conn.execute(text("SELECT DISTINCT item_id FROM events WHERE user_id = :u AND ts >= :since"),
                           {"u": uid, "since": clock - old.seen_window}).scalars().all()
    assert len(ids) > 5
    assert not cand & set(pipeline.items.rows(np.array(ids)).tolist())
    engine.dispose()
