"""What an event import leaves behind besides events: history versions and kept values equal to what the events
table says, exactly the affected users' feeds stale, and the commands end to end (progress, summary, refused rows,
exit codes, ``--precompute``)."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from cli import cli
from precompute.data import engine as db, history, seen
from precompute.data.importing import import_events
from precompute.data.tables import Event, User
from precompute.data.recording import NewEvent, record
from precompute.feeds import codec
from precompute.feeds.store import FeedStore
from tests.test_import_db import counts, own_url, write  # noqa: F401  (own_url is a fixture)


@pytest.fixture
def own(settings, own_url, tmp_path):
    """The test's settings (Redis key prefix and queue of its own) on a database of its own."""
    s = dataclasses.replace(settings, database_url=own_url, var_dir=tmp_path, history_limit=3, seen_max_items=4)
    engine = db.make_engine(own_url)
    db.init_db(engine, s)
    yield s, engine
    engine.dispose()


def versions(engine) -> dict[int, int]:
    with engine.connect() as conn:
        return dict(conn.execute(select(User.id, User.history_version)).all())


def test_versions_and_kept_values_equal_a_recomputation_from_the_events_table(own, tmp_path):
    s, engine = own
    # given users with events the API recorded (kept values written by recording.py), newest at ts 500
    import_events(engine, write(tmp_path, "items.csv", "user_id,item_id,ts\n9,1,1\n"), "csv", s)
    record(engine, [NewEvent(1, 1, 1, 500.0), NewEvent(1, 1, 2, 400.0), NewEvent(2, 1, 1, 450.0)], s)
    # when a log is imported with events older and newer than those, items seen again, more than the limits keep
    rows = [(1, 2, 100), (1, 3, 600), (1, 1, 50), (1, 4, 450), (1, 5, 700), (1, 6, 10), (2, 1, 460), (3, 7, 5),
            (3, 8, 5), (3, 7, 6), (1, 3, 650)]
    log = write(tmp_path, "log.csv", "user_id,item_id,ts,type\n" + "".join(f"{u},{i},{t},click\n" for u, i, t in rows))
    result = import_events(engine, log, "csv", s)
    assert result.users_affected.tolist() == [1, 2, 3]
    # then each user's version is the number of their events (every stored event bumped it by one)
    with engine.connect() as conn:
        per_user = dict(conn.execute(select(Event.user_id, func.count()).group_by(Event.user_id)).all())
        assert versions(engine) == per_user
        # and the kept values are exactly what the events table gives
        users = conn.execute(select(User.id, User.recent, User.seen)).all()
        uids = [u for u, _, _ in users]
        newest = history.from_events(conn, uids, s.history_limit)
        items = seen.from_events(conn, uids, 0.0, s.seen_max_items)
    for uid, recent, seen_value in users:
        assert history.unpack(recent)[0].tolist() == newest[uid].tolist(), uid
        assert seen.unpack(seen_value).tolist() == items[uid].tolist(), uid
    assert [r["ts"] for r in history.unpack(users[uids.index(1)][1])[0]] == [600.0, 650.0, 700.0]
    assert len(seen.unpack(users[uids.index(1)][2])) == 4                       # capped


def test_exactly_the_affected_users_are_stale_afterwards(own, tmp_path, r):
    s, engine = own
    # given users 1-5, each with a current feed
    log = write(tmp_path, "first.csv", "user_id,item_id,ts\n" + "".join(f"{u},{u},{u}\n" for u in range(1, 6)))
    import_events(engine, log, "csv", s)
    store = FeedStore(r, s)
    store.write_many([(u, codec.encode(np.array([1]), np.array([1.0]), v, time.time(), 1), v)
                      for u, v in versions(engine).items()])
    assert store.stale_users(sorted(versions(engine).items())) == []
    # when a log with new events for users 2 and 4 (and an old one of user 5, stored already) is imported
    more = write(tmp_path, "more.csv", "user_id,item_id,ts\n2,9,10\n4,9,10\n4,8,11\n5,5,5\n")
    result = import_events(engine, more, "csv", s)
    # then exactly users 2 and 4 are stale: what `precompute --stale` rebuilds
    assert result.users_affected.tolist() == [2, 4]
    assert store.stale_users(sorted(versions(engine).items())) == [2, 4]


def invoke(s, *args):
    return CliRunner().invoke(cli, list(args), env=s.child_env(), catch_exceptions=False)


def test_import_commands_end_to_end(own, tmp_path):
    s, engine = own
    # given a catalogue and a log with 25 bad rows among good ones
    items = write(tmp_path, "items.csv", "item_id,categories,quality,colour\n1,2|3,0.5,red\n2,,,\n")
    done = invoke(s, "import-items", str(items), "--format", "csv")
    assert done.exit_code == 0, done.output
    assert "importing items" in done.stdout and "2 rows accepted, 0 refused; 2 items created, 0 updated" in done.stdout
    assert "note: " in done.stderr and "'colour'" in done.stderr
    bad = "".join(f"{u},1,not-a-time\n" for u in range(1, 26))
    log = write(tmp_path, "log.csv", "user_id,item_id,ts\n1,1,100\n2,3,100\n" + bad)
    # when it is imported: the good rows are stored, the first 20 refused rows shown with file and line, exit 0
    done = invoke(s, "import-events", str(log), "--format", "csv")
    assert done.exit_code == 0, done.output
    assert ("2 rows accepted, 25 refused; 2 events stored, 0 duplicates skipped; 2 users and 1 items created; "
            "2 users affected") in done.stdout
    assert "precompute --stale" in done.stdout
    refused = [line for line in done.stderr.splitlines() if line.startswith(f"{log}:")]
    assert refused[0].startswith(f"{log}:4: ") and len(refused) == 20
    assert "... and 5 more refused rows" in done.stderr
    # and again: nothing stored twice
    done = invoke(s, "import-events", str(log), "--format", "csv")
    assert "0 events stored, 2 duplicates skipped" in done.stdout
    # and with --strict: one line naming the first bad row, exit 2, nothing written
    before = counts(engine)
    other = write(tmp_path, "other.csv", "user_id,item_id,ts\n7,7,700\n" + bad)
    done = invoke(s, "import-events", str(other), "--format", "csv", "--strict")
    assert done.exit_code == 2 and done.stderr.strip().splitlines()[-1] == \
        f"error: {other}:3: ts 'not-a-time' is not unix seconds or an ISO-8601 time"
    assert counts(engine) == before
    # and a file that cannot be used is one line and exit 2
    done = invoke(s, "import-events", str(tmp_path / "nope.csv"), "--format", "csv")
    assert done.exit_code == 2 and "does not exist" in done.stderr
    done = invoke(s, "import-events", str(items), "--format", "csv")
    assert done.exit_code == 2 and done.stderr.strip().startswith("error: ") and "user_id" in done.stderr


def test_import_events_precompute_enqueues_exactly_the_affected_users(own, tmp_path, r):
    from rq.job import Job
    from rq.serializers import JSONSerializer

    from jobs.queues import make_queue

    s, engine = own
    import_events(engine, write(tmp_path, "first.csv", "user_id,item_id,ts\n1,1,1\n2,1,1\n3,1,1\n"), "csv", s)
    log = write(tmp_path, "log.csv", "user_id,item_id,ts\n3,2,5\n1,2,5\n3,4,6\n")
    done = invoke(s, "import-events", str(log), "--format", "csv", "--precompute")
    assert done.exit_code == 0, done.output
    assert "enqueued 1 jobs for 2 users" in done.stdout
    jobs = [Job.fetch(j, connection=r, serializer=JSONSerializer) for j in make_queue(s, r).job_ids]
    assert [job.args[0] for job in jobs] == [[1, 3]]
