"""Work computed ahead in a forked child (``learning/ahead.py``): its result, its errors, and a child that is lost."""

import os
import signal
import time

import numpy as np
import pytest

from precompute.data import engine as db
from precompute.errors import InvalidInput
from precompute.learning import ahead


@pytest.fixture
def engine(tmp_path):
    e = db.make_engine(f"sqlite:///{tmp_path / 'a.db'}")
    yield e
    e.dispose()


def test_the_result_is_computed_in_another_process_and_comes_back_whole(engine):
    # given work that returns arrays and the process it ran in
    work = ahead.Ahead(lambda: (os.getpid(), np.arange(100_000) * 2), engine)
    # then its result is the work's, computed in a child
    pid, values = work.result()
    assert pid != os.getpid()
    assert np.array_equal(values, np.arange(100_000) * 2)


def test_an_error_in_the_child_is_raised_in_the_caller(engine):
    def fails():
        raise InvalidInput("too few users with history on both sides of the training cut")

    with pytest.raises(InvalidInput, match="too few users"):
        ahead.Ahead(fails, engine).result()


def _sleeps_saying_where(path):
    """Work that writes the id of the process it runs in to ``path``, then sleeps 30 s."""

    def work():
        path.with_suffix(".tmp").write_text(str(os.getpid()))
        path.with_suffix(".tmp").rename(path)
        time.sleep(30)

    return work


def _pid_in(path) -> int:
    deadline = time.monotonic() + 30
    while not path.exists():
        assert time.monotonic() < deadline, "the work did not start"
        time.sleep(0.01)
    return int(path.read_text())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_child_killed_before_its_result_is_a_clear_error(engine, tmp_path):
    # given work whose process is killed (as the kernel's out-of-memory killer would)
    work = ahead.Ahead(_sleeps_saying_where(tmp_path / "pid"), engine)
    os.kill(_pid_in(tmp_path / "pid"), signal.SIGKILL)
    # then asking for its result says so, instead of waiting
    with pytest.raises(ahead.ChildLost, match="exited with code -9"):
        work.result()


def test_leaving_the_block_stops_a_child_whose_result_is_not_wanted(engine, tmp_path):
    # given work of 30 s running in a child
    start = time.monotonic()
    with ahead.Ahead(_sleeps_saying_where(tmp_path / "pid"), engine):
        pid = _pid_in(tmp_path / "pid")
        assert pid != os.getpid() and _alive(pid)
    # when the block is left before its result is asked for, then the child is gone at once: killed, not waited for
    assert not _alive(pid)
    assert time.monotonic() - start < 10


def test_an_in_memory_database_is_not_forked_the_work_runs_in_the_caller():
    # given an in-memory SQLite database, which a child could not read
    e = db.make_engine("sqlite://")
    # then the work runs in this process when its result is asked for
    assert ahead.Ahead(os.getpid, e).result() == os.getpid()


def _pid_ahead_in(url, out):
    out.put(ahead.Ahead(os.getpid, db.make_engine(url)).result() == os.getpid())


def test_in_a_daemonic_process_which_may_not_have_children_the_work_runs_in_it(tmp_path):
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    proc = ctx.Process(target=_pid_ahead_in, args=(f"sqlite:///{tmp_path / 'd.db'}", out), daemon=True)
    proc.start()
    assert out.get(timeout=30) is True
    proc.join()
