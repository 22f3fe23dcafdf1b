"""manage.py: expected failures are one line on stderr with a non-zero exit, never a traceback; and what the commands
do (precompute --inline and --stale, init-db, seed, train, requeue-failed, demo)."""

import dataclasses
import json
import struct
import time

import numpy as np
import pytest
from sqlalchemy import select, text

from precompute.data import bulk, engine as db, synthetic
from precompute.data.history import load_histories
from precompute.ranking.item_loader import load_item_table

from tests.conftest import manage


def one_line_error(done, code, fragment):
    assert done.returncode == code, (done.returncode, done.stderr)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("error: ") and fragment in lines[-1], done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args,fragment", [
    (["precompute"], "one of --all, --stale"),
    (["precompute", "--all", "--user", "3"], "one of --all, --stale"),
    (["precompute", "--user", "0"], "--user"),
    (["seed", "--users", "0"], "--users"),
    (["worker", "--workers", "x"], "--workers"),
    (["no-such-command"], "No such command"),
])
def test_bad_arguments(settings, args, fragment):
    one_line_error(manage(settings, *args), 2, fragment)


def test_unreachable_redis(settings):
    bad = dataclasses.replace(settings, redis_url="redis://127.0.0.1:1/0")
    one_line_error(manage(bad, "precompute", "--all"), 4, "redis is unavailable")


def test_unreachable_database(settings):
    bad = dataclasses.replace(settings, database_url="postgresql+psycopg://nobody@127.0.0.1:1/none")
    one_line_error(manage(bad, "init-db"), 4, "database is unavailable")


def test_missing_model_bundle(settings, tmp_path):
    bad = dataclasses.replace(settings, model_dir=tmp_path / "empty")
    one_line_error(manage(bad, "precompute", "--user", "1", "--inline"), 3, "no current model bundle")


def test_seed_refuses_to_mix_marketplaces(settings):
    one_line_error(manage(settings, "seed", "--users", "10", "--items", "10", "--events", "10"), 2, "--reset")


def test_train_on_an_empty_database(settings, tmp_path):
    empty = dataclasses.replace(settings, database_url=f"sqlite:///{tmp_path / 'empty.db'}")
    one_line_error(manage(empty, "train"), 2, "events in the database")


def test_precompute_inline(settings, r):
    done = manage(settings, "precompute", "--user", "5", "--user", "6", "--inline")
    assert done.returncode == 0, done.stderr
    assert "2 feeds written" in done.stdout
    assert r.exists(f"{settings.key_prefix}{{u:5}}:feed")


def test_precompute_stale_rebuilds_missing_old_and_unreadable_feeds_and_leaves_current_ones(settings, r, world,
                                                                                            pipeline, own_users):
    from rq.job import Job
    from rq.serializers import JSONSerializer

    from jobs.queues import make_queue
    from precompute.data.tables import User
    from precompute.data.recording import NewEvent, record

    def versions():
        with world.engine.connect() as conn:
            return dict(conn.execute(select(User.id, User.history_version).where(User.history_version > 0)).all())

    def view(user):
        record(world.engine, [NewEvent(user, int(pipeline.items.ids[0]), 1, time.time())], settings)

    # given every user with a history has a current feed (this test's user among them)
    older, missing, unreadable = own_users(3)
    view(older)
    users = sorted(versions())
    pipeline.recompute(users)
    # and then one user had a new event, one feed was lost (Redis lost data) and one became unreadable
    view(older)
    r.delete(f"{settings.key_prefix}{{u:{missing}}}:feed")
    r.set(f"{settings.key_prefix}{{u:{unreadable}}}:feed", b"PF\x09\x00" + b"\xff" * 60)
    before = {u: r.get(f"{settings.key_prefix}{{u:{u}}}:feed") for u in users}
    # when `precompute --stale` runs, it enqueues exactly those users
    done = manage(settings, "precompute", "--stale")
    assert done.returncode == 0, done.stderr
    assert "enqueued 1 jobs for 3 users" in done.stdout
    queue = make_queue(settings, r)
    jobs = [Job.fetch(j, connection=r, serializer=JSONSerializer) for j in queue.job_ids]
    assert [job.args[0] for job in jobs] == [sorted([older, missing, unreadable])]
    # then a worker rebuilds them at their users' latest versions, and every current feed is left as it was
    done = manage(settings, "worker", "--burst")
    assert done.returncode == 0, done.stderr
    after = {u: r.get(f"{settings.key_prefix}{{u:{u}}}:feed") for u in users}
    latest = versions()
    stale = {older, missing, unreadable}
    for u in stale:
        assert after[u] != before[u] and pipeline.store.read(u).header.history_version == latest[u]
    assert {u: v for u, v in after.items() if u not in stale} == {u: v for u, v in before.items() if u not in stale}


def test_init_db_brings_an_older_database_up_to_date(settings, tmp_path):
    # given a database from before users kept their recent events and seen items (the columns are missing)
    old = dataclasses.replace(settings, database_url=f"sqlite:///{tmp_path / 'old.db'}")
    engine = db.make_engine(old.database_url)
    db.init_db(engine)
    bulk.load(engine, synthetic.generate(30, 60, 900, seed=3, now=time.time()), old)
    items = load_item_table(engine, old)
    want = load_histories(engine, list(range(1, 31)), items, old)
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE users DROP COLUMN recent"))
        conn.execute(text("ALTER TABLE users DROP COLUMN seen"))
    # when init-db runs
    done = manage(old, "init-db")
    # then the columns are back, every user's values are filled from the events table, and histories read the same
    assert done.returncode == 0, done.stderr
    assert "kept recent events and seen items for 30 existing users" in done.stdout
    engine.dispose()
    got = load_histories(engine, list(range(1, 31)), items, old)
    for field in ("versions", "offsets", "item_rows", "types", "ts", "seen_offsets", "seen_rows"):
        assert np.array_equal(getattr(want, field), getattr(got, field)), field
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM users WHERE recent IS NULL OR seen IS NULL")).scalar() == 0
    assert "kept recent" not in manage(old, "init-db").stdout          # idempotent


def test_init_db_rewrites_kept_events_of_the_32_bit_layout(settings, tmp_path):
    # given users whose kept events an earlier version wrote (no magic, 32-bit item ids, 13-byte records)
    old = dataclasses.replace(settings, database_url=f"sqlite:///{tmp_path / 'layout.db'}")
    engine = db.make_engine(old.database_url)
    db.init_db(engine)
    bulk.load(engine, synthetic.generate(20, 60, 600, seed=4, now=time.time()), old)
    items = load_item_table(engine, old)
    want = load_histories(engine, list(range(1, 21)), items, old)
    record = np.dtype([("item", "<i4"), ("type", "u1"), ("ts", "<f8")])
    with engine.begin() as conn:
        for k in range(5):
            a, b = want.offsets[k], want.offsets[k + 1]
            rec = np.empty(b - a, dtype=record)
            rec["item"], rec["type"], rec["ts"] = items.ids[want.item_rows[a:b]], want.types[a:b], want.ts[a:b]
            conn.execute(text("UPDATE users SET recent = :v WHERE id = :u"),
                         {"v": struct.pack("<I", old.history_limit) + rec.tobytes(), "u": int(want.user_ids[k])})
    # when init-db runs
    done = manage(old, "init-db")
    # then those values are rewritten in today's layout, and histories read the same
    assert done.returncode == 0, done.stderr
    assert "for 5 existing users" in done.stdout
    got = load_histories(engine, list(range(1, 21)), items, old)
    for field in ("offsets", "item_rows", "types", "ts"):
        assert np.array_equal(getattr(want, field), getattr(got, field)), field
    with engine.connect() as conn:
        assert all(bytes(v).startswith(b"H2") for v in conn.execute(text("SELECT recent FROM users")).scalars())
    engine.dispose()


def test_seed_train_and_requeue_on_a_fresh_database(settings, tmp_path):
    fresh = dataclasses.replace(settings, database_url=f"sqlite:///{tmp_path / 'fresh.db'}",
                                model_dir=tmp_path / "models")
    done = manage(fresh, "seed", "--users", "200", "--items", "300", "--events", "20000", "--seed", "3")
    assert done.returncode == 0, done.stderr
    done = manage(fresh, "train", "--iterations", "20", "--users", "150")
    assert done.returncode == 0, done.stderr
    assert "validation NDCG@10: model" in done.stdout and "best baseline (" in done.stdout
    assert "is current" in done.stdout
    # and the check's ratio interval is printed and kept with the bundle's metrics, around the ratio
    meta = json.loads(next((tmp_path / "models").glob("*/meta.json")).read_text())["metrics"]
    low, high = meta["ratio_interval"]
    assert low <= meta["ndcg10"] / meta["baseline_ndcg10"] <= high
    assert f"ratio 95% interval {low:.2f}×–{high:.2f}×" in done.stdout
    done = manage(fresh, "requeue-failed")
    assert done.returncode == 0 and "requeued 0 failed jobs" in done.stdout


@pytest.mark.timeout(300)
def test_demo_runs_the_newcomers_path_on_embedded_defaults(tmp_path):
    # given nothing configured: no REDIS_URL, no DATABASE_URL (the demo starts its own Valkey and uses SQLite)
    import subprocess
    import sys

    from precompute.settings import without_prefeed_config
    from tests.conftest import ROOT

    env = without_prefeed_config()
    env["PREFEED_VAR_DIR"] = str(tmp_path / "var")
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "demo", "--once", "--port", "0", "--users", "200",
                           "--items", "300", "--events", "15000"], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"source": "precomputed"' in done.stdout and "curl" in done.stdout and "admin token:" in done.stdout
    assert "all 200 feeds precomputed" in done.stdout


@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_stopping_the_demo_stops_everything_it_started(tmp_path, sig):
    import json
    import signal
    import subprocess
    import sys
    import urllib.request

    import psutil

    from precompute.settings import without_prefeed_config
    from tests.conftest import ROOT

    # given the demo serving on embedded defaults
    env = without_prefeed_config()
    env["PREFEED_VAR_DIR"] = str(tmp_path / "var")
    demo = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "demo", "--port", "0", "--users", "200",
                             "--items", "300", "--events", "15000"], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    started = []
    try:
        base = None
        for line in demo.stdout:
            if line.startswith("  curl '"):
                base = base or line.split("'")[1].split("/feed")[0]
            if line.startswith("serving;"):
                break
        assert base, "the demo did not print its address"
        started = psutil.Process(demo.pid).children(recursive=True)
        server = psutil.Process(json.loads((tmp_path / "var" / "valkey" / "server.json").read_text())["pid"])
        assert urllib.request.urlopen(base + "/healthz", timeout=5).status == 200
        # when it is asked to stop
        demo.send_signal(getattr(signal, sig))
        # then it exits cleanly, and the workers, the API and the embedded server it started are gone
        assert demo.wait(timeout=60) == 0
        _, alive = psutil.wait_procs([*started, server], timeout=30)
        assert not alive, [p.cmdline()[:3] for p in alive]
    finally:
        demo.kill()
        for p in started:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass


@pytest.mark.timeout(200)
def test_a_failing_demo_step_is_one_line(tmp_path):
    # given a marketplace too small to train on (the demo's train step refuses it)
    import subprocess
    import sys

    from precompute.settings import without_prefeed_config
    from tests.conftest import ROOT

    env = without_prefeed_config()
    env["PREFEED_VAR_DIR"] = str(tmp_path / "var")
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "demo", "--once", "--port", "0", "--users", "10",
                           "--items", "50", "--events", "100"], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=180)
    # then the demo stops with the step's own error and one line of its own, and the step's exit code
    one_line_error(done, 2, "demo stopped: `manage.py train` failed (exit 2)")
    assert "error: too few users" in done.stderr or "error: only" in done.stderr, done.stderr


@pytest.mark.parametrize("args", [["--rate", "inf"], ["--rate", "nan"], ["--rate", "-inf"], ["--burst", "inf"]])
def test_a_key_limit_that_is_not_finite_is_refused_and_nothing_is_written(settings, args):
    name = f"unlimited-{time.monotonic_ns()}"
    # when a key is created with an infinite or NaN rate or burst (float() reads "inf" and "nan")
    done = manage(settings, "keys", "create", name, "--scopes", "feed:read", *args)
    # then it is one line, exit 2, and no key of that name exists
    one_line_error(done, 2, args[0])
    assert done.stderr.count("\n") == 1 and not done.stdout
    listed = manage(settings, "keys", "list", "--json")
    assert listed.returncode == 0 and name not in listed.stdout
