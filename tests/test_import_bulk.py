"""A bulk event import's speed measures (``precompute.data.importing.tuning``, ``events.insert_fresh``) change
nothing but speed: the deferred indexes exist again at the end, or after a crash once ``init_db`` ran; rows a file
repeats chunks apart are stored once although new users' rows skip the duplicate probe; the import connection's
foreign key setting stays its own. Small files written here, tiny chunks to cross chunk boundaries."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import exc, inspect, text

from precompute.data import engine as db
from precompute.data.importing import import_events, tuning
from tests.conftest import own_database
from tests.test_import_db import stored_events, write

ALL = {"ix_events_user_ts", "ix_events_item_type", "ix_events_ts"}


@pytest.fixture
def own_url(tmp_path_factory):
    yield from own_database(tmp_path_factory, "bulk")


@pytest.fixture
def setup(own_url, tmp_path):
    from precompute.settings import Settings
    s = Settings(database_url=own_url, var_dir=tmp_path)
    engine = db.make_engine(own_url)
    db.init_db(engine, s)
    yield s, engine
    engine.dispose()


def indexes(engine) -> set[str]:
    with engine.connect() as conn:
        return {ix["name"] for ix in inspect(conn).get_indexes("events") if ix["name"].startswith("ix_")}


def ratings(tmp_path, rows: list[tuple], name: str = "ratings.csv"):
    return write(tmp_path, name, "userId,movieId,rating,timestamp\n" + "".join(f"{u},{i},{r},{t}\n"
                                                                             for u, i, r, t in rows))


def test_a_bulk_load_builds_the_deferred_indexes_at_its_end(setup, tmp_path):
    s, engine = setup
    # given an empty events table and a file of several chunks
    path = ratings(tmp_path, [(u, i, 4.0, 1000 + i) for u in range(1, 6) for i in range(1, 5)])
    seen, told = [], []
    # when it is imported, looking at the indexes between chunks
    import_events(engine, path, "movielens", s, chunk_rows=4, notify=told.append,
                  progress=lambda _: seen.append(indexes(engine)))
    # then the two secondary indexes were absent meanwhile, the probe's index present, and all exist at the end
    assert seen and all(names == {"ix_events_user_ts"} for names in seen)
    assert told == ["building indexes…"]
    assert indexes(engine) == ALL


def test_an_import_into_a_table_larger_than_the_file_keeps_its_indexes(setup, tmp_path):
    s, engine = setup
    # given a table already holding more events than the small file has bytes / ROW_BYTES
    import_events(engine, ratings(tmp_path, [(1, i, 3.0, i) for i in range(1, 400)], "old.csv"), "movielens", s)
    path = ratings(tmp_path, [(2, i, 3.0, i) for i in range(1, 9)])
    assert (path.stat().st_size // tuning.ROW_BYTES) < 399
    seen, told = [], []
    # when it is imported
    import_events(engine, path, "movielens", s, chunk_rows=4, notify=told.append,
                  progress=lambda _: seen.append(indexes(engine)))
    # then the indexes stayed throughout
    assert seen and all(names == ALL for names in seen) and told == []


def test_an_import_interrupted_after_dropping_the_indexes_is_repaired_by_init_db(setup, tmp_path):
    s, engine = setup
    path = ratings(tmp_path, [(u, i, 4.0, 1000 + i) for u in range(1, 6) for i in range(1, 5)])

    def crash(_):
        raise KeyboardInterrupt

    # given an import cut short after its first chunk
    with pytest.raises(KeyboardInterrupt):
        import_events(engine, path, "movielens", s, chunk_rows=4, progress=crash)
    assert indexes(engine) == {"ix_events_user_ts"}
    # when the database is made ready again (every import command and init-db do it first)
    db.init_db(engine, s)
    # then the indexes are back, and importing the file again completes it
    assert indexes(engine) == ALL
    import_events(engine, path, "movielens", s, chunk_rows=4)
    assert len(stored_events(engine)) == 20 and indexes(engine) == ALL


@pytest.mark.parametrize("chunk_rows", [2, 3, 100])
def test_rows_a_file_repeats_chunks_apart_are_stored_once(setup, tmp_path, chunk_rows):
    s, engine = setup
    # given a file whose users are new, repeating rows of user 1 after other users' rows, and user 2's twice in
    # a row, one of them with another rating (same event: user, item, type, ts)
    rows = [(1, 10, 4.0, 100), (1, 11, 2.0, 101), (2, 10, 5.0, 50), (3, 12, 1.0, 60), (3, 13, 1.0, 61),
            (1, 10, 4.0, 100), (2, 10, 4.5, 50), (1, 11, 2.0, 101), (4, 10, 3.0, 70), (1, 12, 3.0, 102)]
    # when it is imported in chunks of various sizes
    res = import_events(engine, ratings(tmp_path, rows), "movielens", s, chunk_rows=chunk_rows)
    # then each event is stored once, the first row of each
    assert (res.events_stored, res.duplicates, res.users_created) == (7, 3, 4)
    assert sorted((u, i, ts, v) for u, i, _, ts, v, _ in stored_events(engine)) == [
        (1, 10, 100.0, 4.0), (1, 11, 101.0, 2.0), (1, 12, 102.0, 3.0), (2, 10, 50.0, 5.0), (3, 12, 60.0, 1.0),
        (3, 13, 61.0, 1.0), (4, 10, 70.0, 3.0)]


def test_the_import_connection_alone_skips_foreign_key_checks(setup, tmp_path):
    s, engine = setup
    if engine.dialect.name != "sqlite":
        pytest.skip("a SQLite connection setting")
    others = []

    def look(_):
        with engine.connect() as other:         # another connection while the import holds its own
            others.append(other.exec_driver_sql("PRAGMA foreign_keys").scalar())

    # when an import runs
    import_events(engine, ratings(tmp_path, [(1, 10, 4.0, 100), (2, 11, 3.0, 100)]), "movielens", s,
                  chunk_rows=1, progress=look)
    # then other connections kept their checks meanwhile, and the import's connection, back in the pool, has them
    assert others and set(others) == {1}
    pooled = [engine.connect() for _ in range(3)]           # the pool holds two: both are among these
    try:
        for conn in pooled:
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA cache_size").scalar() == -65536
            with pytest.raises(exc.IntegrityError):
                conn.execute(text("INSERT INTO events (user_id, item_id, type, ts) VALUES (999, 999, 1, 1)"))
            conn.rollback()
    finally:
        for conn in pooled:
            conn.close()


def test_items_are_looked_up_again_in_every_chunk_until_they_exist(setup, tmp_path):
    s, engine = setup
    rows = [(1, 10, 4.0, 1), (1, 20, 4.0, 2), (2, 20, 4.0, 3), (2, 30, 4.0, 4), (3, 10, 4.0, 5), (3, 30, 4.0, 6)]
    # given a catalogue with item 10 only, and a file naming items 20 and 30 in several chunks
    import_events(engine, ratings(tmp_path, [(9, 10, 3.0, 0)], "one.csv"), "movielens", s)
    # when items are not created, then the rows of 20 and 30 are refused in every chunk
    strict = dataclasses.replace(s, events_create_items=False)
    res = import_events(engine, ratings(tmp_path, rows), "movielens", strict, chunk_rows=2)
    assert (res.report.refused, res.events_stored, res.items_created) == (4, 2, 0)
    # and when they are, each is created once, by the chunk that first names it
    res = import_events(engine, ratings(tmp_path, rows), "movielens", s, chunk_rows=2)
    assert (res.events_stored, res.items_created, res.duplicates) == (4, 2, 2)
