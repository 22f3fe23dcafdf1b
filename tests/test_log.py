"""Reading the whole event log into arrays in chunks (``precompute/data/log.py``): the same rows, in the same
(ts, id) order and up to the same bound, as one plain query, whatever the chunk size; 64-bit ids exact."""

import numpy as np
import pytest
from sqlalchemy import select

from precompute.data import engine as db, log
from precompute.data.tables import Event, Item, User
from precompute.settings import Settings
from tests.conftest import own_database


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    for url in own_database(tmp_path_factory, "log"):
        engine = db.make_engine(url)
        db.init_db(engine, Settings(database_url=url))
        rng = np.random.default_rng(3)
        n = 1000
        users = (2 ** 62 + np.arange(1, 31) * 3).tolist()
        items = (2 ** 63 - 1 - np.arange(0, 60) * 5).tolist()
        # inserted out of time order, many equal timestamps: the (ts, id) order is not the id order
        rows = [{"user_id": users[rng.integers(30)], "item_id": items[rng.integers(60)],
                 "type": int(rng.integers(1, 5)), "ts": float(rng.integers(0, 50)) + 1.7e9,
                 "value": None if k % 3 else float(k) / 2}
                for k in range(n)]
        with engine.begin() as conn:
            conn.execute(Item.__table__.insert(), [{"id": i} for i in items])
            conn.execute(User.__table__.insert(), [{"id": u} for u in users])
            conn.execute(Event.__table__.insert(), rows)
        yield engine
        engine.dispose()


def reference(engine, until=float("inf")):
    with engine.connect() as conn:
        return conn.execute(select(Event.user_id, Event.item_id, Event.type, Event.ts, Event.value)
                            .where(Event.ts <= until).order_by(Event.ts, Event.id)).all()


@pytest.mark.parametrize("chunk_rows", [1, 7, 100_000])
def test_the_log_reads_as_one_plain_query(engine, chunk_rows):
    # given the whole log read in chunks of several sizes, values too
    got = log.load_events(engine, values=True, chunk_rows=chunk_rows)
    want = reference(engine)
    # then every row is there, in (ts, id) order, ids exact, a missing value NaN
    assert len(got) == len(want) == 1000
    assert got.user.dtype == got.item.dtype == np.int64
    assert got.user.tolist() == [r[0] for r in want] and got.item.tolist() == [r[1] for r in want]
    assert got.type.tolist() == [r[2] for r in want] and got.ts.tolist() == [r[3] for r in want]
    np.testing.assert_array_equal(got.value, [np.nan if r[4] is None else r[4] for r in want])


def test_until_bounds_the_log_and_values_are_optional(engine):
    # given a bound in the middle of the log's time span
    until = 1.7e9 + 20
    got = log.load_events(engine, until, chunk_rows=64)
    want = reference(engine, until)
    # then exactly the events at or before it, and no value column unless asked for
    assert 0 < len(got) == len(want) < 1000 and got.ts.max() <= until
    assert got.ts.tolist() == [r[3] for r in want] and got.item.tolist() == [r[1] for r in want]
    assert got.value is None


def test_more_rows_than_counted_grow_the_columns():
    # given columns allocated for 8 rows (rows stored after the count), fed 3 chunks of 5
    columns = log._Columns(8, values=False)
    for k in range(3):
        columns.add({"user": np.arange(5) + 10 * k, "item": np.arange(5) * 2, "type": np.ones(5), "ts": np.arange(5.0)})
    # then nothing is lost and the arrays are exactly the rows read
    got = columns.log()
    assert got.user.tolist() == [u + 10 * k for k in range(3) for u in range(5)] and len(got.ts) == 15
