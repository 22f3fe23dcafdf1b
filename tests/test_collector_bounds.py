"""What one client cannot do to attribution and the report: the pages of one user recorded per minute are bounded
(the rest counted), an event is matched against a bounded number of its user's pages, a record the database
refuses is set aside instead of blocking the list, copies of one record in a batch count once, a collection that
lost its lock trims nothing, an event's time ahead of the wall clock does not move the events' clock past it, and
pages of ids the database holds no event of are placed in no arm, so a key reading made-up ids changes neither the
report's sample-ratio check nor its verdict."""

from __future__ import annotations

import json
import time

import numpy as np
from sqlalchemy import insert, select, text

from precompute.data.tables import Attribution, Event, Exposure, Item, ServedPage, User
from precompute.experiments import collect as collector, intake
from precompute.experiments.collect import collect
from precompute.experiments.impressions import ImpressionBuffer, pack, unpack
from precompute.feeds.keys import Keys
from tests.conftest import manage
from tests.test_experiment_report import app_on, lift, own, r  # noqa: F401  (fixtures: a database of the test's own)

POISON_USER = -4242


def _event(engine, user: int, item: int, ts: float) -> int:
    """A click of ``user`` on ``item`` at ``ts`` (the user and the item made when missing); its id."""
    with engine.begin() as conn:
        for table, key in ((User, user), (Item, item)):
            if conn.execute(select(table.id).where(table.id == key)).first() is None:
                conn.execute(insert(table).values(id=key))
        return conn.execute(insert(Event).values(user_id=user, item_id=item, type=2, ts=ts)
                            .returning(Event.id)).scalar()


def test_a_process_records_at_most_user_max_pages_of_one_user_a_minute_and_counts_the_rest(own, r):
    # given a buffer that records at most 5 pages of a user a minute
    settings, _ = own
    key = Keys(settings.key_prefix).impressions
    buffer = ImpressionBuffer(r, key, 10_000, 1000, user_max=5)
    # when one user's feed is read 8 times and another's twice
    recorded = [buffer.record(7, 0, 0, 1000.0, i, [1, 2], "") for i in range(8)]
    others = [buffer.record(8, 0, 0, 1000.0, 0, [1], "") for _ in range(2)]
    # then the first 5 of the first user's pages are recorded, the other 3 counted, the other user's both recorded
    assert recorded == [True] * 5 + [False] * 3 and others == [True, True] and buffer.capped == 3
    assert buffer.flush() == 7
    assert sorted(unpack(x).user_id for x in r.lrange(key, 0, -1)) == [7] * 5 + [8] * 2
    # and a new minute starts a new count
    buffer.minute -= 1
    assert buffer.record(7, 0, 0, 1000.0, 9, [1], "")
    buffer.close()


def test_an_event_is_matched_against_its_users_newest_pages_only(own, r, monkeypatch):
    # given a user with more pages in the window than an event is matched against (20 here), the newest holding
    # item 1 and only the oldest holding item 2
    settings, engine = own
    monkeypatch.setattr(collector, "USER_PAGES", 20)
    with engine.begin() as conn:
        conn.execute(insert(ServedPage), [
            dict(writer=9, seq=s, user_id=50, experiment=0, arm=0, served_at=1000.0 + s, position=0,
                 items=np.array([1 if s == 30 else 2 if s == 1 else 3], dtype="<i8").tobytes(), request_id="")
            for s in range(1, 31)])
    newest, oldest = _event(engine, 50, 1, 1100.0), _event(engine, 50, 2, 1101.0)
    light = _event(engine, 51, 1, 1100.0)                   # a user without pages: organic, by the bulk path
    # when the events are attributed
    done = collect(engine, r, settings, through=light)
    # then the newest page takes its event and the item only on a page past the bound is organic
    with engine.connect() as conn:
        got = dict(conn.execute(select(Attribution.event_id, Attribution.served_at)).all())
    assert got == {newest: 1030.0} and done.bounded == 2 and oldest not in got


def _refuse_user(engine, user: int) -> None:
    """A trigger that makes the database refuse any served page of ``user``: a record it will not store."""
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text(f"""CREATE FUNCTION refuse_page() RETURNS trigger AS $$ BEGIN
                IF NEW.user_id = {user} THEN RAISE EXCEPTION 'refused' USING ERRCODE = 'check_violation'; END IF;
                RETURN NEW; END $$ LANGUAGE plpgsql"""))
            conn.execute(text("CREATE TRIGGER refuse BEFORE INSERT ON served_pages FOR EACH ROW "
                              "EXECUTE FUNCTION refuse_page()"))
        else:
            conn.execute(text(f"CREATE TRIGGER refuse BEFORE INSERT ON served_pages WHEN NEW.user_id = {user} "
                              "BEGIN SELECT RAISE(ABORT, 'refused'); END"))


def test_a_page_the_database_refuses_is_set_aside_and_the_pages_around_it_are_stored(own, r):
    # given a database that refuses one user's pages, and a batch with such a page between two others
    settings, engine = own
    keys = Keys(settings.key_prefix)
    _refuse_user(engine, POISON_USER)
    batch = [pack(5, 1, 60, 0, 0, 1000.0, 0, [1], "a"), pack(5, 2, POISON_USER, 0, 0, 1000.0, 0, [1], "b"),
             pack(5, 3, 61, 0, 0, 1000.0, 0, [1, 2], "c")]
    r.rpush(keys.impressions, *batch)
    # when the collector runs
    done = collect(engine, r, settings)
    # then the two others are stored and counted, the refused one set aside and counted, and the list is empty
    assert (done.stored, done.rejected, done.lost) == (2, 1, 1)       # seq 2 never reached the table: a gap
    with engine.connect() as conn:
        assert sorted(conn.execute(select(ServedPage.user_id)).scalars()) == [60, 61]
        assert sorted(conn.execute(select(Exposure.user_id, Exposure.pages)).all()) == [(60, 1), (61, 1)]
    assert r.llen(keys.impressions) == 0 and r.lrange(keys.impressions_rejected, 0, -1) == [batch[1]]
    # and the next pages are collected as usual
    r.rpush(keys.impressions, pack(5, 4, 60, 0, 0, 1001.0, 0, [3], "d"))
    assert collect(engine, r, settings).stored == 1


def test_two_copies_of_a_page_in_one_batch_are_stored_and_counted_once(own, r):
    # given a flush sent twice (its reply lost), both copies in the list
    settings, engine = own
    key = Keys(settings.key_prefix).impressions
    page = pack(6, 1, 70, 0, 0, 1000.0, 0, [1, 2, 3], "twice")
    r.rpush(key, page, pack(6, 2, 71, 0, 0, 1000.0, 0, [4], "once"), page)
    # when one collection reads them in one batch
    done = collect(engine, r, settings)
    # then the page is counted once, in the collection and in its user's exposure
    assert (done.stored, done.duplicates, done.served) == (2, 1, {(0, 0): [2, 4]})
    with engine.connect() as conn:
        assert conn.execute(select(Exposure.pages, Exposure.impressions).where(Exposure.user_id == 70)).one() == (1, 3)


def test_a_collection_whose_lock_was_taken_over_trims_nothing(own, r):
    # given a collection holding the lock, and pages in the list
    settings, engine = own
    keys = Keys(settings.key_prefix)
    r.rpush(keys.impressions, pack(7, 1, 80, 0, 0, 1000.0, 0, [1], ""), pack(7, 2, 81, 0, 0, 1000.0, 0, [1], ""))
    lock = r.lock(keys.impressions_lock, timeout=60)
    assert lock.acquire(blocking=False)
    # when its lock expires and another collection takes it before the first trims its batch
    r.set(keys.impressions_lock, "another collection")
    done = collector.Collected()
    # then the first stops without trimming: the other reads the batch again
    assert intake.move_pages(engine, r, keys, lock, float("-inf"), done) is False
    assert r.llen(keys.impressions) == 2
    # and when the lock is free again, a collection stores nothing twice and empties the list
    r.delete(keys.impressions_lock)
    again = collect(engine, r, settings)
    assert (again.stored, r.llen(keys.impressions)) == (0, 0)
    with engine.connect() as conn:
        assert sorted(conn.execute(select(ServedPage.user_id)).scalars()) == [80, 81]


def test_an_event_ahead_of_the_wall_clock_does_not_stamp_pages_in_the_future(own):
    # given an app, and an event whose time lies 50 s ahead (within PREFEED_EVENT_MAX_FUTURE's 60)
    settings, engine = own
    with app_on(own, seed=6, key_name="ahead", scopes=("feed:read", "events:write")) as (key, svc, client):
        auth = {"Authorization": f"Bearer {key}"}
        ahead = time.time() + 50
        reply = client.post("/events", json={"user_id": 3, "item_id": 5, "type": "click", "ts": ahead}, headers=auth)
        assert reply.status_code == 202, reply.get_json()
        # when a page is served after it
        svc.pages.states.clock = None            # read the clock again now, as a process that just started
        before = time.time()
        page = client.get("/feed/3", headers=auth).get_json()
        # then the page is stamped at most at the wall clock, not at the event's time
        assert page["served_at"] <= time.time() and page["served_at"] >= before - 1
        assert float(svc.queue_redis.get(svc.keys.live_clock) or 0) <= time.time()


def test_pages_of_ids_without_events_are_placed_in_no_arm_and_not_recorded(own):
    # given a running experiment of two arms and an app
    settings, engine = own
    from precompute.experiments import registry

    with app_on(own, seed=7, key_name="made-up") as (key, svc, client):
        registry.create(engine, "split", [("a", "popular"), ("b", "recent:1d")], None, 1.0, settings.model_dir)
        svc.experiments.read_at = float("-inf")
        auth = {"Authorization": f"Bearer {key}"}
        # when a key reads the feeds of ids the database holds no event of
        made_up = [10_000_000 + k for k in range(40)]
        bodies = [client.get(f"/feed/{u}", headers=auth).get_json() for u in made_up]
        # then each is answered (a fallback) but placed in no arm, and nothing is recorded
        assert all(b["source"] == "fallback" and b["experiment"] is None and b["arm"] is None for b in bodies)
        assert svc.impressions.waiting() == 0
        # while a user with events is placed and recorded
        known = client.get("/feed/1", headers=auth).get_json()
        assert known["experiment"] == "split" and known["arm"] in ("a", "b") and svc.impressions.waiting() == 1


def test_a_key_reading_made_up_ids_changes_neither_the_sample_ratio_check_nor_the_verdict(own, r):
    # given the experiment ``lift`` and its report
    settings, engine = own
    lift(settings, engine, r)
    first = manage(settings, "experiments", "report", "lift", "--json")
    assert first.returncode == 0, first.stderr
    before = json.loads(first.stdout)
    # when a key reads 300 made-up ids through the API (pages sent to Redis, then collected)
    with app_on(own, seed=8, key_name="skew") as (key, svc, client):
        svc.experiments.read_at = float("-inf")
        for u in range(20_000_000, 20_000_300):
            assert client.get(f"/feed/{u}", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        svc.impressions.flush()
    collect(engine, r, settings)
    after = json.loads(manage(settings, "experiments", "report", "lift", "--json").stdout)
    # then the arms' users, the sample-ratio check and the verdict are what they were
    assert [a["users"] for a in after["arms"]] == [a["users"] for a in before["arms"]]
    assert (after["sample_ratio_p"], after["sample_ratio_flagged"], after["verdict"]) == \
        (before["sample_ratio_p"], before["sample_ratio_flagged"], before["verdict"])


def test_a_collector_job_that_starts_early_still_schedules_the_next(own, r):
    # given a collector job scheduled 5 s from now (RQ keeps the time in whole seconds: it may start a second early)
    settings, _ = own
    from jobs.queues import collect_started, schedule_collect

    assert schedule_collect(settings, r, delay=5)
    assert not schedule_collect(settings, r, delay=5)          # one at a time
    # when the job starts, before the time it was scheduled for
    collect_started(settings, r)
    # then the collection can schedule its successor (events still wait for attribution): the chain goes on
    assert schedule_collect(settings, r, delay=5)
