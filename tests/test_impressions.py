"""Impressions and attribution: every page served is recorded with its experiment, arm, items, positions and time
on the events' clock; the collector moves them to the database once (a replayed batch stores nothing twice, a gap is
counted lost); an event is attributed to the newest page that served its item at or before it and at most the
attribution window before, and is organic otherwise."""

import dataclasses

import numpy as np
import pytest
from sqlalchemy import select

from precompute.data.clock import newest_event
from precompute.data.tables import Attribution, Event, Exposure, ImpressionWriter, ServedPage
from precompute.experiments import collect as collector
from precompute.experiments.impressions import pack, unpack
from tests.conftest import with_key

WINDOW = 30


@pytest.fixture
def short(settings):
    """The test's settings with a 30-second attribution window."""
    return dataclasses.replace(settings, attribution_window=WINDOW, impressions_keep=10 * WINDOW)


@pytest.fixture
def api(short, world):
    from api import create_app
    from api.services import services

    app = create_app(short, {"TESTING": True})
    yield with_key(app.test_client(), world.key), services(app)
    services(app).engine.dispose()


def post(client, events):
    reply = client.post("/events", json=events)
    assert reply.status_code == 202, reply.get_json()
    return reply


def event_ids(engine, user_id: int) -> dict[tuple[int, float], int]:
    with engine.connect() as conn:
        rows = conn.execute(select(Event.id, Event.item_id, Event.ts).where(Event.user_id == user_id)).all()
    return {(r.item_id, r.ts): r.id for r in rows}


def take_in(svc, short, engine):
    """What ``experiments report`` does: send the process's pages, then collect through the newest event."""
    svc.impressions.flush()
    return collector.collect(engine, svc.queue_redis, short, through=collector.newest_event_id(engine))


def test_a_page_is_recorded_and_events_at_the_window_edges_are_attributed_or_organic(api, short, pipeline,
                                                                                      user_id, world):
    client, svc = api
    pipeline.recompute([user_id])
    body = client.get(f"/feed/{user_id}?limit=6").get_json()
    items, served_at = [e["item_id"] for e in body["items"]], body["served_at"]
    assert len(items) == 6 and body["source"] == "precomputed" and served_at > 0
    missing = next(i for i in range(1, 10_000) if i not in items)
    # before the page, at it, at the window's far edge, just past it; and an item the page did not hold
    plan = [(items[0], served_at - 1), (items[1], served_at), (items[2], served_at + WINDOW),
            (items[3], served_at + WINDOW + 0.01), (missing, served_at + 1)]
    post(client, [{"user_id": user_id, "item_id": i, "type": "click", "ts": ts} for i, ts in plan])
    done = take_in(svc, short, world.engine)
    assert done.stored == 1 and done.lost == 0

    ids = event_ids(world.engine, user_id)
    with world.engine.connect() as conn:
        got = {r.event_id: r for r in conn.execute(select(Attribution).where(
            Attribution.event_id.in_([ids[p] for p in plan])))}
        page = conn.execute(select(ServedPage).where(ServedPage.user_id == user_id)).one()
        exposure = conn.execute(select(Exposure).where(Exposure.user_id == user_id)).one()
    assert sorted(got) == [ids[plan[1]], ids[plan[2]]]          # at the page and at the window's edge only
    assert [got[ids[plan[1]]].position, got[ids[plan[2]]].position] == [1, 2]
    assert all(a.experiment == 0 and a.served_at == served_at for a in got.values())
    assert np.frombuffer(page.items, dtype="<i8").tolist() == items and page.served_at == served_at
    assert (exposure.experiment, exposure.pages, exposure.impressions) == (0, 1, 6)


def test_the_newest_page_serving_the_item_takes_the_event(api, short, pipeline, user_id, world):
    client, svc = api
    pipeline.recompute([user_id])
    first = client.get(f"/feed/{user_id}?limit=4").get_json()
    second = client.get(f"/feed/{user_id}?limit=2&offset=2").get_json()   # the same items at places 2 and 3
    item = second["items"][1]["item_id"]
    assert item == first["items"][3]["item_id"]
    ts = max(first["served_at"], second["served_at"]) + 1
    post(client, [{"user_id": user_id, "item_id": item, "type": "purchase", "ts": ts}])
    take_in(svc, short, world.engine)
    with world.engine.connect() as conn:
        attributed = conn.execute(select(Attribution).where(Attribution.user_id == user_id)).one()
        pages = conn.execute(select(ServedPage.seq).where(ServedPage.user_id == user_id)
                             .order_by(ServedPage.seq)).scalars().all()
    assert attributed.position == 3 and len(pages) == 2
    # both pages hold it at place 3; the newer one is the one of the pair with the higher number
    assert collector._newest_serving([_page(5.0, 2, [7, 8]), _page(4.0, 9, [8, 7])], 7, 6.0, 10)[0].seq == 2


def _page(served_at, seq, items):
    from types import SimpleNamespace

    return SimpleNamespace(served_at=served_at, seq=seq, writer=1, items=np.array(items, dtype="<i8").tobytes(),
                           position=0, experiment=0, arm=0)


def test_a_batch_read_twice_stores_nothing_twice_and_gaps_are_counted_lost(api, short, world, r, user_id):
    client, svc = api
    key = f"{short.key_prefix}impressions"
    writer = 424242
    # the test's own starting point, whatever ran before it in this database: an event at the front of the events'
    # clock, attributed through, so keeping is measured from it
    with world.engine.connect() as conn:
        now = newest_event(conn) + 1
    post(client, [{"user_id": user_id, "item_id": 1, "type": "click", "ts": now}])
    take_in(svc, short, world.engine)
    records = [pack(writer, seq, 77, 0, 0, now + seq, 0, [1, 2, 3], f"req-{seq}") for seq in (1, 2, 5)]
    expired = pack(writer, 3, 77, 0, 0, now - 11 * WINDOW, 0, [1], "old")   # past PREFEED_IMPRESSIONS_KEEP
    assert unpack(records[2]).items.tolist() == [1, 2, 3] and unpack(records[2]).request_id == "req-5"
    r.rpush(key, *records, expired)
    first = collector.collect(world.engine, r, short)
    r.rpush(key, *records)                  # the job died after storing, before trimming: read again
    r.rpush(key, b"not a record")
    again = collector.collect(world.engine, r, short)
    with world.engine.connect() as conn:
        stored = conn.execute(select(ServedPage.seq).where(ServedPage.writer == writer)).scalars().all()
        exposure = conn.execute(select(Exposure).where(Exposure.user_id == 77)).one()
        lost = conn.execute(select(ImpressionWriter.lost).where(ImpressionWriter.writer == writer)).scalar()
    assert (first.stored, first.lost, first.expired) == (3, 2, 1) and (again.stored, again.lost, again.malformed) == (0, 0, 1)
    assert sorted(stored) == [1, 2, 5] and (exposure.pages, exposure.impressions) == (3, 9) and lost == 2
    assert first.users == {77} and again.users == set()     # a feed is due again for new pages only
    assert r.llen(key) == 0
