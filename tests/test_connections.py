"""Database connections: each process's pool is bounded by the settings, a process at its bound fails as
"database unavailable" after the pool timeout, and a connection carries nothing from one transaction to the next
(no prepared statement, no staging table) unless asked to, so that the database URL may name a PgBouncer in
transaction mode. The suite as a whole runs through one with ``make test-pgbouncer``."""

from __future__ import annotations

import os
import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import TimeoutError as PoolTimeout

from precompute.data import engine as db
from precompute.data.importing import import_events
from precompute.errors import Unavailable, as_prefeed_error
from precompute.settings import Settings
from tests.conftest import own_database

postgres_only = pytest.mark.skipif(not os.environ.get("PREFEED_TEST_DATABASE_URL"),
                                   reason="PostgreSQL only (SQLite keeps SQLAlchemy's pool: nothing to bound)")


def test_the_pool_settings_reach_the_engine():
    # given a PostgreSQL URL (the engine connects lazily: no server needed) and pool settings off their defaults
    url = "postgresql+psycopg://prefeed@127.0.0.1:1/prefeed"
    s = Settings(database_url=url, db_pool_size=3, db_max_overflow=1, db_pool_timeout=7)
    # when the process builds its engine from them
    pool = db.make_engine(url, s).pool
    # then its pool keeps 3, may open 1 more, and waits 7 s for one beyond that
    assert (pool.size(), pool._max_overflow, pool.timeout()) == (3, 1, 7)
    # and without settings, the declared defaults hold
    pool = db.make_engine(url).pool
    assert (pool.size(), pool._max_overflow, pool.timeout()) == (2, 2, 10)


@pytest.fixture
def own_url(tmp_path_factory):
    yield from own_database(tmp_path_factory, "connections")


@postgres_only
def test_a_process_at_its_bound_waits_the_pool_timeout_then_fails_as_unavailable(own_url):
    # given a pool of one connection and one more at most, both held
    engine = db.make_engine(own_url, Settings(database_url=own_url, db_pool_size=1, db_max_overflow=1,
                                              db_pool_timeout=1))
    held = [engine.connect(), engine.connect()]
    # when the process asks for a third
    start = time.monotonic()
    with pytest.raises(PoolTimeout) as caught:
        engine.connect()
    # then it waited the timeout, and the error is the one "database unavailable" (HTTP 503, one CLI line)
    assert 1.0 <= time.monotonic() - start < 5.0
    assert isinstance(as_prefeed_error(caught.value), Unavailable)
    for conn in held:
        conn.close()
    engine.dispose()


def _prepared_after_repeats(engine) -> int:
    """Statements the server holds prepared for the connection after it ran one query ten times (in ten
    transactions, as the API runs requests)."""
    with engine.connect() as conn:
        for _ in range(10):
            conn.execute(text("SELECT count(*) FROM users WHERE id = :u"), {"u": 1}).scalar()
            conn.commit()
        return conn.execute(text("SELECT count(*) FROM pg_prepared_statements")).scalar()


def _sessions_persist(engine) -> bool:
    """Whether what a connection sets in its session is still there in its next transaction: not so through a
    transaction pooler (``make test-pgbouncer``'s resets each server connection after every transaction)."""
    with engine.connect() as conn:
        conn.execute(text("SET prefeed.probe = 'kept'"))
        conn.commit()
        kept = conn.execute(text("SELECT current_setting('prefeed.probe', true)")).scalar() == "kept"
        conn.commit()
    return kept


@postgres_only
def test_statements_are_prepared_on_the_server_only_when_asked(own_url):
    engine = db.make_engine(own_url)
    db.init_db(engine)
    # by default, a statement run ten times leaves nothing prepared on the server connection
    assert _prepared_after_repeats(engine) == 0
    if not _sessions_persist(engine):
        pytest.skip("through a transaction pooler: prepared statements are off by default for this reason")
    engine.dispose()
    # with PREFEED_DB_PREPARED_STATEMENTS=true on a direct connection, psycopg prepares it
    engine = db.make_engine(own_url, Settings(database_url=own_url, db_prepared_statements=True))
    assert _prepared_after_repeats(engine) >= 1
    engine.dispose()


@postgres_only
def test_an_import_leaves_no_staging_table_on_its_connection(own_url, tmp_path):
    # given a pool of exactly one connection, and users who already have events (their rows take the staging path)
    s = Settings(database_url=own_url, db_pool_size=1, db_max_overflow=0)
    engine = db.make_engine(own_url, s)
    db.init_db(engine, s)
    path = tmp_path / "ev.csv"
    path.write_text("user_id,item_id,ts,type\n1,2,100,view\n2,3,100,view\n")
    import_events(engine, path, "csv", s)
    # when the same users' events are imported again
    path.write_text("user_id,item_id,ts,type\n1,2,100,view\n1,4,200,click\n2,5,300,view\n")
    res = import_events(engine, path, "csv", s)
    assert (res.events_stored, res.duplicates) == (2, 1)
    # then the import's connection (the pool's only one) holds no temporary table once its transactions ended
    with engine.connect() as conn:
        assert conn.execute(text("SELECT to_regclass('pg_temp.import_stage')")).scalar() is None
    engine.dispose()
