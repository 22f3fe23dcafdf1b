"""Engine and session factories. Connections are created here and passed in; nothing connects at import."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import BigInteger, Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from ..errors import as_prefeed_error
from ..settings import Settings
from . import event_types, upgrade
from .tables import Base


def make_engine(url: str, settings: Settings | None = None) -> Engine:
    """The process's engine for ``url``. On PostgreSQL the pool holds at most ``PREFEED_DB_POOL_SIZE`` +
    ``PREFEED_DB_MAX_OVERFLOW`` connections and psycopg prepares statements on the server only with
    ``PREFEED_DB_PREPARED_STATEMENTS`` (``settings``; None: the declared defaults), so that by default ``url`` may
    name a PgBouncer in transaction mode (docs/operating.md, "Database connections"). SQLite keeps SQLAlchemy's pool for
    files: a connection per thread, nothing to bound."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    s = settings or Settings(database_url=url)
    # psycopg's own threshold (5 executions) when prepared statements are wanted; None: never prepare.
    prepare = {} if s.db_prepared_statements else {"prepare_threshold": None}
    return create_engine(url, pool_pre_ping=True, pool_size=s.db_pool_size, max_overflow=s.db_max_overflow,
                         pool_timeout=s.db_pool_timeout, connect_args=prepare)


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    # WAL lets the API read while a worker or the seeder writes; NORMAL sync is safe with WAL.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    # History reads walk the events index for every user in a batch: a 64 MiB page cache and memory-mapped
    # I/O keep them off the read() syscall path.
    cur.execute("PRAGMA cache_size=-65536")
    cur.execute("PRAGMA mmap_size=268435456")
    cur.close()


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def init_db(engine: Engine, settings: Settings | None = None) -> None:
    """Create missing tables, add the columns and indexes later versions introduced to existing ones, widen
    32-bit id columns to 64 bits on PostgreSQL, move an earlier version's item columns to their tables
    (``upgrade.split_item_columns``), make event ids unique per user (``upgrade.scope_event_ids``) and, given
    ``settings``, record the declared event types and refuse a declaration that contradicts the stored ones
    (``event_types.register``). Idempotent."""
    try:
        Base.metadata.create_all(engine)
        upgrade.split_item_columns(engine)
        upgrade.scope_event_ids(engine)
        with engine.begin() as conn:
            for table in Base.metadata.sorted_tables:
                columns = {c["name"]: c for c in inspect(conn).get_columns(table.name)}
                have = set(columns)
                for column in table.columns:
                    if column.name not in have and column.nullable:
                        kind = column.type.compile(dialect=engine.dialect)
                        conn.execute(text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}'))
                for index in table.indexes:
                    index.create(conn, checkfirst=True)
                if engine.dialect.name == "postgresql":
                    for column in table.columns:
                        old = columns.get(column.name)
                        if old is not None and isinstance(column.type, BigInteger) and \
                                not isinstance(old["type"], BigInteger):
                            conn.execute(text(f'ALTER TABLE {table.name} ALTER COLUMN "{column.name}" TYPE BIGINT'))
            if settings is not None:
                event_types.register(conn, settings)
    except SQLAlchemyError as exc:
        raise as_prefeed_error(exc) from exc


def ping(engine: Engine) -> None:
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        raise as_prefeed_error(exc) from exc

