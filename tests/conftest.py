"""Fixtures: a real Redis-protocol server (embedded Valkey, or PREFEED_TEST_REDIS_URL) and a real database
(a temporary SQLite file, or a database of its own on the server of PREFEED_TEST_DATABASE_URL). Each test gets its
own key prefix and queue and deletes only those keys; the PostgreSQL database is dropped at the end."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import numpy as np
from sqlalchemy import create_engine, delete, insert, make_url, select, text
from sqlalchemy.pool import NullPool

from cli.net import start_valkey
from precompute.data import api_keys, bulk, engine as db, synthetic
from precompute.data.tables import ServedPage
from precompute.learning import train as training
from precompute.ranking import bundle
from precompute.settings import Settings, normalize_database_url
from precompute.pipeline.pipeline import Pipeline
from precompute.feeds.client import redis_client

ROOT = Path(__file__).resolve().parent.parent
N_USERS, N_ITEMS, N_EVENTS = 300, 1500, 30_000


@dataclasses.dataclass
class World:
    settings: Settings
    engine: object
    version: int
    users_with_events: list[int]
    key: str            # an API key with the data scopes (feed:read, events:write, items:write), no practical rate


@pytest.fixture(scope="session")
def redis_url():
    url = os.environ.get("PREFEED_TEST_REDIS_URL")
    if url:
        yield url
        return
    server = start_valkey()
    yield server.connection_url
    server.stop()


@pytest.fixture(scope="session")
def nginx() -> str:
    """The nginx binary on PATH, for the tests that run the shipped ``deploy/nginx/prefeed.conf`` in front of the API
    (``tests/proxy.py``). Without one they are skipped, or fail where ``PREFEED_TEST_REQUIRE_NGINX=1`` (``.ci/run``
    sets it): CI runs them, or says why not."""
    path = shutil.which("nginx")
    if path is None:
        if os.environ.get("PREFEED_TEST_REQUIRE_NGINX", "") not in ("", "0"):
            pytest.fail("nginx is not on PATH, and PREFEED_TEST_REQUIRE_NGINX is set: install it "
                        "(apt-get install nginx-light) or put /usr/sbin on PATH", pytrace=False)
        pytest.skip("nginx is not on PATH: apt-get install nginx-light (PREFEED_TEST_REQUIRE_NGINX=1 fails instead)")
    return path


@pytest.fixture(scope="session")
def database_url(tmp_path_factory):
    yield from own_database(tmp_path_factory, "test")


def own_database(tmp_path_factory, name: str):
    """Yields the URL of a database of its own, then removes it: a temporary SQLite file, or a fresh database on
    the server of PREFEED_TEST_DATABASE_URL (for a fixture to ``yield from``). A database rather than a schema:
    selecting a schema takes a startup parameter (``options``) or session state, which PgBouncer in transaction
    mode refuses or loses, and the suite must also run through one (``make test-pgbouncer``)."""
    url = os.environ.get("PREFEED_TEST_DATABASE_URL")
    if not url:
        yield f"sqlite:///{tmp_path_factory.mktemp(name) / 'prefeed.db'}"
        return
    base = make_url(normalize_database_url(url))
    database = f"prefeed_{name}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {database}"))
    yield base.set(database=database).render_as_string(hide_password=False)
    with admin.connect() as conn:       # FORCE: engines a test left open would otherwise keep it in use
        conn.execute(text(f"DROP DATABASE {database} WITH (FORCE)"))
    admin.dispose()


@pytest.fixture(scope="session")
def world(tmp_path_factory, database_url, redis_url) -> World:
    var = tmp_path_factory.mktemp("var")
    settings = Settings(database_url=database_url, redis_url=redis_url, model_dir=var / "models", var_dir=var,
                        admin_token="test-admin-token-0123456789abcdef", batch_size=25,
                        item_attributes=synthetic.ATTRIBUTES,
                        # no practical limits but in the tests of limits (tests/test_auth.py sets its own)
                        rate_limit=1e6, rate_burst=10 ** 6, user_events_per_minute=10 ** 6,
                        # a first stage that leaves most of each user's candidates to its order, so that every
                        # test of what workers store and evaluate ranks goes through the cascade
                        cascade_keep=30)
    engine = db.make_engine(database_url)
    db.init_db(engine, settings)
    market = synthetic.generate(N_USERS, N_ITEMS, N_EVENTS, seed=7, now=time.time())
    bulk.load(engine, market, settings)
    result = training.train(engine, settings, iterations=40, users=N_USERS)     # what `manage.py train` runs
    version = bundle.write(settings.model_dir, result.model, result.pairs, {"metrics": result.metrics},
                           result.cascade)
    bundle.promote(settings.model_dir, version)
    key = api_keys.create(engine, "tests", frozenset({"feed:read", "events:write", "items:write"}), rate=1e6,
                          burst=10 ** 6)
    return World(settings, engine, version, sorted(set(market.event_user.tolist())), key)


#: Ids past every seeded user's (1 to N_USERS), that ``new_user_ids`` hands out; below 2**31, the most
#: ``manage.py precompute --user`` takes.
NEW_USER_IDS_FROM = 10**9
_seeded_handed_out = itertools.count(0)
_new_handed_out = itertools.count(NEW_USER_IDS_FROM)


@pytest.fixture
def own_users(world) -> Callable[[int], list[int]]:
    """``own_users(n)``: ``n`` users of the seeded world, each with events, that no other test of this session is
    handed (call it as often as the test needs). A test records events for its own users, changes their rows and
    reads back their histories and feeds, so it finds them as seeded whatever ran before it: tests run in any
    order, and each pytest-xdist process has a world of its own."""

    def take(n: int) -> list[int]:
        picks = [next(_seeded_handed_out) for _ in range(n)]
        assert not picks or picks[-1] < len(world.users_with_events), \
            f"more users handed out than the {len(world.users_with_events)} seeded with events: raise N_USERS"
        return [world.users_with_events[k] for k in picks]

    return take


@pytest.fixture
def user_id(own_users) -> int:
    """A seeded user with events that no other test of this session is handed."""
    return own_users(1)[0]


@pytest.fixture
def new_user_ids() -> Callable[[int], list[int]]:
    """``new_user_ids(n)``: ``n`` ids that no user of the database has and no other test of this session is handed:
    users a test creates with their first event, or ids that name nobody."""
    return lambda n: [next(_new_handed_out) for _ in range(n)]


def every_user_with_history(world: World) -> list[int]:
    """Every user of the database with at least one event now (those other tests created too): for a test of what
    happens to all of them, which writes only its own Redis keys for them."""
    from precompute.data.tables import User

    with world.engine.connect() as conn:
        return list(conn.execute(select(User.id).where(User.history_version > 0).order_by(User.id)).scalars())


@pytest.fixture
def settings(world):
    tag = uuid.uuid4().hex[:10]
    s = dataclasses.replace(world.settings, key_prefix=f"pftest:{tag}:", queue_name=f"pftest-{tag}")
    yield s
    delete_own_keys(s)


def delete_own_keys(s: Settings) -> None:
    """Delete this test's keys only: its prefix, its queue, its jobs and results, its workers."""
    from jobs.queues import make_queue

    r = redis_client(s.redis_url)
    queue = make_queue(s, r)
    job_ids = set(queue.job_ids)
    for registry in (queue.finished_job_registry, queue.failed_job_registry, queue.started_job_registry,
                     queue.scheduled_job_registry, queue.deferred_job_registry, queue.canceled_job_registry):
        job_ids.update(registry.get_job_ids())
    workers = {w.decode() for w in r.smembers(f"rq:workers:{s.queue_name}")}
    doomed = [k for j in job_ids for k in (f"rq:job:{j}", f"rq:results:{j}", f"rq:job:{j}:dependents",
                                           f"rq:job:{j}:dependencies")]
    doomed += [f"rq:worker:{w}" for w in workers]
    doomed += list(r.scan_iter(match=f"{s.key_prefix}*", count=1000))
    doomed += list(r.scan_iter(match=f"rq:*{s.queue_name}*", count=1000))
    for i in range(0, len(doomed), 500):
        r.delete(*doomed[i:i + 500])
    if workers:
        r.srem("rq:workers", *workers)
    r.srem("rq:queues", queue.key)
    r.close()


@pytest.fixture
def r(settings):
    client = redis_client(settings.redis_url)
    yield client
    client.close()


@pytest.fixture
def pipeline(settings, world, r) -> Pipeline:
    p = Pipeline(settings, world.engine, r)
    p.load()
    return p


@pytest.fixture
def app(settings):
    from api import create_app

    return create_app(settings, {"TESTING": True})


@pytest.fixture
def client(app, world):
    """A test client whose requests carry the data key (``World.key``) unless they name other credentials."""
    c = app.test_client()
    c.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {world.key}"
    return c


@pytest.fixture
def refusing_client(settings, world):
    """A client of an app that refuses events naming items the catalogue does not have
    (``PREFEED_EVENTS_CREATE_ITEMS=false``) instead of creating them."""
    from api import create_app
    from api.services import services

    app = create_app(dataclasses.replace(settings, events_create_items=False), {"TESTING": True})
    c = app.test_client()
    c.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {world.key}"
    yield c
    services(app).engine.dispose()


@pytest.fixture
def admin():
    return {"Authorization": "Bearer test-admin-token-0123456789abcdef"}


def manage(settings: Settings, *args: str, timeout: float = 120, extra_env: dict | None = None):
    """Run ``manage.py`` in a child process configured like ``settings``."""
    env = {**settings.child_env(), **(extra_env or {})}
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def with_key(client, key: str = "test-admin-token-0123456789abcdef"):
    """``client`` sending ``key`` as its bearer key (default: the settings' admin token, an admin key whatever the
    database) on every request that names no other credentials."""
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    return client


@contextlib.contextmanager
def stored_pages(engine, writer: int, pages: list[tuple[int, float, int, list[int]]]):
    """``pages`` stored as the collector stores them, ``(user, served_at, position, item ids)`` each, under a writer
    id of the test's own; removed after."""
    with engine.begin() as conn:
        conn.execute(insert(ServedPage), [dict(writer=writer, seq=k, user_id=u, experiment=0, arm=0, served_at=t,
                                               position=p, items=np.asarray(i, "<i8").tobytes(), request_id="t")
                                          for k, (u, t, p, i) in enumerate(pages)])
    try:
        yield
    finally:
        with engine.begin() as conn:
            conn.execute(delete(ServedPage).where(ServedPage.writer == writer))
