"""What the pages did for each item, day by day (``precompute/data/item_days.py``): the collector counts each stored
page's items as impressions of the page's day and each attributed event for its item on the event's day, once each
(a batch read twice, a collection run twice, count nothing twice); an item's rate over a window is smoothed towards
every item's, so an item never shown has that prior's rate."""

import itertools

import numpy as np
import pytest
from hypothesis import given, strategies as st
from sqlalchemy import select

from precompute.data import item_days
from precompute.data.clock import newest_event
from precompute.data.tables import ItemDay, StoredEventType
from precompute.experiments import collect as collector
from precompute.experiments.impressions import pack
from tests.test_impressions import api, post, short, take_in  # noqa: F401  (fixtures)

#: Item ids of this module's own, far from the suite's catalogue, so no other test's pages count for them
_ids = itertools.count(987_650_001)


def counts(engine, items) -> dict[tuple[int, int, int], int]:
    with engine.connect() as conn:
        rows = conn.execute(select(ItemDay.item_id, ItemDay.day, ItemDay.kind, ItemDay.count)
                            .where(ItemDay.item_id.in_(items))).all()
    return {(i, d, k): n for i, d, k, n in rows}


def type_code(engine, name: str) -> int:
    with engine.connect() as conn:
        return conn.execute(select(StoredEventType.code).where(StoredEventType.name == name)).scalar_one()


def test_stored_pages_count_their_items_once_per_day_however_often_a_batch_is_read(api, short, world, r,
                                                                                    user_id):
    client, svc = api
    key = f"{short.key_prefix}impressions"
    a, b, c = next(_ids), next(_ids), next(_ids)
    with world.engine.connect() as conn:
        now = newest_event(conn) + 1
    post(client, [{"user_id": user_id, "item_id": 1, "type": "click", "ts": now}])
    take_in(svc, short, world.engine)
    day = item_days.day_of(now)
    # given pages, one of them on the next day, and a copy of one page in the same batch
    pages = [(1, user_id, now, [a, b]), (2, user_id, now + 1, [b, c]), (3, user_id, now + 86_400, [a])]
    records = [pack(5151, seq, user, 0, 0, ts, 0, items, f"req-{seq}") for seq, user, ts, items in pages]
    r.rpush(key, *records, records[0])
    # when the collector stores them, and then reads the same batch again (it died before trimming)
    assert collector.collect(world.engine, r, short).stored == 3
    r.rpush(key, *records)
    assert collector.collect(world.engine, r, short).stored == 0
    # then each item counts one impression per page that showed it, on the page's day
    shown = item_days.SHOWN
    assert counts(world.engine, [a, b, c]) == {(a, day, shown): 1, (b, day, shown): 2, (c, day, shown): 1,
                                               (a, day + 1, shown): 1}


def test_an_attributed_event_counts_for_its_item_on_its_own_day_once(api, short, world, r, user_id):
    client, svc = api
    key = f"{short.key_prefix}impressions"
    shown_item, other = next(_ids), next(_ids)
    with world.engine.connect() as conn:
        now = newest_event(conn) + 1
    post(client, [{"user_id": user_id, "item_id": shown_item, "type": "view", "ts": now},
                  {"user_id": user_id, "item_id": other, "type": "view", "ts": now}])
    take_in(svc, short, world.engine)
    # given a page that showed one item to the user, and then the user's click on it and on an item not shown
    r.rpush(key, pack(6161, 1, user_id, 0, 0, now + 1, 0, [shown_item], "req"))
    post(client, [{"user_id": user_id, "item_id": shown_item, "type": "click", "ts": now + 2},
                  {"user_id": user_id, "item_id": other, "type": "click", "ts": now + 3}])
    # when the collector attributes them, twice over
    take_in(svc, short, world.engine)
    take_in(svc, short, world.engine)
    # then the click counts once for the shown item, on its own day, and the organic one counts nothing
    day, click = item_days.day_of(now + 1), type_code(world.engine, "click")
    assert counts(world.engine, [shown_item, other]) == {(shown_item, day, item_days.SHOWN): 1,
                                                         (shown_item, item_days.day_of(now + 2), click): 1}
    day = item_days.day_of(now + 2)
    # and read over the complete days before the next day, the shown item has 1 of 1; the other, never shown, has
    # the prior's rate; the ranker's columns read the same window
    seen = item_days.exposure(world.engine, [shown_item, other], (day + 1) * 86_400)
    assert seen.shown.tolist() == [1, 0] and seen.acted.tolist() == [1, 0]
    assert seen.by_type[click].tolist() == [1, 0]
    assert seen.rate[1] == pytest.approx(seen.prior) and seen.rate[0] > seen.prior
    rows = {shown_item: 0, other: 1}
    daily = item_days.daily(world.engine, lambda ids: np.array([rows.get(i, -1) for i in ids.tolist()]),
                            day + 1 - item_days.WINDOW_DAYS, day + 1)
    for read in (daily, item_days.window_sums(world.engine, lambda ids: np.array([rows.get(i, -1) for i in
                                                                                  ids.tolist()]), day + 1)):
        # (a worker reads the window summed per item: the same numbers)
        shown_, acted, prior = read.window(np.array([0, 1]), np.array([0, 0]), np.array([day + 1]))
        assert shown_.tolist() == seen.shown.tolist() and acted.tolist() == seen.acted.tolist()
        assert prior.tolist() == pytest.approx([seen.prior] * 2)
    # and the same window read from the next day on counts nothing of that day
    assert item_days.exposure(world.engine, [shown_item], day * 86_400).shown.tolist() == [0]


@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)), min_size=1, max_size=20),
       st.floats(0, 1), st.floats(0.1, 1000))
def test_a_smoothed_rate_is_the_counts_with_the_priors_weight_added(pairs, prior, weight):
    acted = [min(a, s) for a, s in pairs]
    shown = [s for _, s in pairs]
    got = item_days.smoothed(acted, shown, prior, weight)
    for k, (x, n) in enumerate(zip(acted, shown)):
        assert got[k] == pytest.approx((x + weight * prior) / (n + weight))
        if n == 0:
            assert got[k] == pytest.approx(prior)
        assert min(prior, x / n if n else prior) - 1e-12 <= got[k] <= max(prior, x / n if n else prior) + 1e-12


def test_a_worker_reads_the_window_once_a_day_and_maps_it_to_each_new_item_table(settings, world):
    from sqlalchemy import event

    from precompute.data import engine as db

    engine = db.make_engine(settings.database_url)
    reads: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda conn, cursor, statement, *rest: reads.append(statement))

    class Table:                     # what ``Held`` reads of an item table: ``rows``, ids -> rows
        def __init__(self, place):
            self.place = place

        def rows(self, ids):
            return np.array([self.place.get(i, -1) for i in ids.tolist()], dtype=np.int64)

    held, day = item_days.Held(engine), 30_000
    one, other = Table({}), Table({})
    # given the window read for one table, then another table (reloaded) on the same day: one read
    held.before(day * 86_400.0 + 5, one)
    held.before(day * 86_400.0 + 50, other)
    assert len(reads) == 1
    # and the next day, a read again
    held.before((day + 1) * 86_400.0, other)
    assert len(reads) == 2
    engine.dispose()


def test_a_collection_deletes_the_days_past_keeping_and_keeps_the_window(api, short, world, r, user_id):
    from collections import Counter

    from precompute.experiments.intake import insert_for

    client, svc = api
    old, kept = next(_ids), next(_ids)
    with world.engine.connect() as conn:
        now = newest_event(conn) + 1
    post(client, [{"user_id": user_id, "item_id": 1, "type": "click", "ts": now}])
    take_in(svc, short, world.engine)
    # given counts of the day past keeping, and of the oldest day kept, on the events' clock
    day = item_days.day_of(now)
    with world.engine.begin() as conn:
        item_days.add(conn, insert_for(world.engine), Counter({(old, day - item_days.KEEP_DAYS - 1, item_days.SHOWN): 5,
                                                               (kept, day - item_days.KEEP_DAYS, item_days.SHOWN): 5}))
    # when a collection runs, then the first is deleted and the second kept
    collector.collect(world.engine, r, short)
    assert counts(world.engine, [old, kept]) == {(kept, day - item_days.KEEP_DAYS, item_days.SHOWN): 5}
