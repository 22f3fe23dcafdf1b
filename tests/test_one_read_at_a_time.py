"""What an API process copies from the database (its keys, ``api/keyring.py``; the experiments, ``experiments/
directory.py``) is read again by one thread at a time: the requests that arrive during the read are answered from
the last one, not held behind it and not sent to the database too, as long as that is at most two of its ages old;
after a quiet spell they never get an answer older than that."""

import threading
import time

import pytest
from sqlalchemy import event

from api.keyring import Keyring
from precompute.data import api_keys, engine as db
from precompute.experiments import registry
from precompute.experiments.directory import Directory
from tests.conftest import own_database
from tests.test_auth import key

#: How long each query of the copies' engine takes here: long enough that every thread arrives during the read
SLOW = 0.3
THREADS = 8


@pytest.fixture
def slow_engine(settings):
    """An engine on the suite's database whose every query takes ``SLOW`` seconds more, and the reads (SELECTs) it
    ran (the database is real; the pause only widens the window in which the threads meet)."""
    engine = db.make_engine(settings.database_url)
    ran: list[str] = []

    def pause(conn, cursor, statement, *rest):
        if statement.lstrip().upper().startswith("SELECT"):
            ran.append(statement)
        time.sleep(SLOW)

    event.listen(engine, "before_cursor_execute", pause)
    yield engine, ran
    engine.dispose()


def at_once(call) -> tuple[list, list[float]]:
    """``call()`` from ``THREADS`` threads released together: the answers, and each thread's seconds."""
    start = threading.Barrier(THREADS)
    answers, took = [None] * THREADS, [0.0] * THREADS

    def one(k):
        start.wait()
        t = time.monotonic()
        answers[k] = call()
        took[k] = time.monotonic() - t

    threads = [threading.Thread(target=one, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers, took


def test_a_key_past_its_age_is_read_once_while_the_requests_meanwhile_keep_it(settings, world, slow_engine):
    engine, ran = slow_engine
    ring = Keyring(engine, settings, ttl=1.0)
    # given a key the process has read, now past its age (within two: its read and use took two slow queries)
    known = ring.find(world.key)
    assert known is not None and len(ran) == 1
    time.sleep(1.1)
    # when requests on many threads present it at once
    answers, took = at_once(lambda: ring.find(world.key))
    # then every one is answered with the key, the database was read for it once, and only the reader waited
    assert answers == [known] * THREADS
    assert len(ran) == 2
    assert sorted(took)[-2] < SLOW / 2


def test_experiments_past_their_age_are_read_by_one_page_while_the_others_go_on(settings, slow_engine):
    engine, ran = slow_engine
    directory = Directory(engine, ttl=0.5)
    directory.refresh()                          # the first read: waited for, there is nothing to go on with
    read = len(ran)
    assert read >= 1
    time.sleep(0.6)
    # when pages on many threads are placed at once, past the read's age
    answers, took = at_once(lambda: directory.place(1, None, None))
    # then one of them read again, and the others were placed by the last read without waiting for it
    assert len(ran) == 2 * read
    assert len(set(answers)) == 1
    assert sorted(took)[-2] < SLOW / 2


def test_after_a_quiet_spell_a_revoked_key_is_refused_to_every_request_at_once(settings, world, slow_engine):
    
    engine, _ = slow_engine
    ring = Keyring(engine, settings, ttl=0.3)
    presented = key(world, "quiet-spell", ["feed:read"])
    name = next(r["name"] for r in api_keys.listing(world.engine) if r["name"].startswith("quiet-spell"))
    assert ring.find(presented) is not None
    # given the key revoked, and no request for more than two of its ages
    api_keys.revoke(world.engine, name)
    time.sleep(0.7)
    # when requests on many threads present it at once, then none is let through on the old answer
    answers, _ = at_once(lambda: ring.find(presented))
    assert answers == [None] * THREADS


@pytest.fixture
def own_engine(tmp_path_factory, settings):
    """A database of this test's own, tables created: an experiment running in it places no other test's users."""
    for url in own_database(tmp_path_factory, "one_read"):
        engine = db.make_engine(url)
        db.init_db(engine, settings)
        yield engine
        engine.dispose()


def test_after_a_quiet_spell_pages_wait_for_the_experiments_read(settings, own_engine):
    reads: list[str] = []
    event.listen(own_engine, "before_cursor_execute", lambda conn, cursor, statement, *rest: reads.append(statement))
    directory = Directory(own_engine, ttl=0.3)
    directory.refresh()
    # given an experiment created after the last read, and no page for more than two of the read's ages
    registry.create(own_engine, "quiet", [("a", "popular"), ("b", "popular")], None, 0.5, settings.model_dir)
    created = next(e for e in registry.all_experiments(own_engine) if e.name == "quiet")
    assert created.id not in directory.by_id
    time.sleep(0.7)
    # when pages on many threads are placed at once, then every one knows the experiment
    answers, _ = at_once(lambda: directory.place(1, created.id, 0))
    assert all(a[2] == "quiet" for a in answers), answers
