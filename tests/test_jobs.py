"""The job path through real RQ workers (``manage.py worker``, forking work horses): batch precompute, event
coalescing, drains scheduled for leased users, pre-fork initialisation, and picking up a new bundle (or refusing a
broken one) without a restart."""

import dataclasses
import os
import shutil
import signal
import time

import pytest
from rq.exceptions import StopRequested
from rq.job import Job
from rq.serializers import JSONSerializer
from sqlalchemy import select

from jobs import metrics
from jobs.queues import enqueue_batches, make_queue, notify_changed, retry
from precompute.data.tables import User
from precompute.errors import BundleError
from precompute.feeds.dirty import DirtyUsers
from precompute.feeds.store import FeedStore
from precompute.ranking import bundle
from tests.conftest import ROOT, manage
from tests.faults import spawn_worker, stop_worker, wait_until


def _results(r, queue):
    ids = queue.finished_job_registry.get_job_ids()
    return [Job.fetch(i, connection=r, serializer=JSONSerializer).return_value() for i in ids]


def test_batches_are_computed_by_a_real_forking_worker(settings, r, own_users):
    users = own_users(30)
    queue = make_queue(settings, r)
    assert enqueue_batches(queue, users, 12, settings) == 3
    done = manage(settings, "worker", "--burst")
    assert done.returncode == 0, done.stderr
    store = FeedStore(r, settings)
    assert all(store.read(u) is not None for u in users)
    assert queue.failed_job_registry.count == 0
    results = _results(r, queue)
    assert sorted(res["users"] for res in results) == [6, 12, 12]


def test_work_horses_inherit_init_instead_of_repeating_it(settings, r, own_users):
    # given four single-user jobs, each of which runs ORM queries (its users' histories)
    queue = make_queue(settings, r)
    enqueue_batches(queue, own_users(4), 1, settings)
    # when a real worker runs them
    done = manage(settings, "worker", "--burst")
    assert done.returncode == 0, done.stderr
    procs = [res["process"] for res in _results(r, queue)]
    assert len(procs) == 4
    parent = {p["init_pid"] for p in procs}
    assert len(parent) == 1, "one parent initialised"
    for p in procs:
        # then each job ran in its own forked horse, which inherited the parent's one bundle load and its
        # configured mappers: configuration ran once, in the parent, and never in the horse (a horse forked with
        # mappers still to configure would have configured them at its first query, under its own pid)
        assert p["pid"] != p["init_pid"]
        assert p["bundle_loads"] == 1
        assert p["mapper_configured_in"] == [p["init_pid"]]
        # and numpy's BLAS runs on one thread in each horse (the parent's limit, inherited)
        assert p["blas_threads"] == 1
    assert len({p["pid"] for p in procs}) == 4


def test_job_timeouts_are_sized_to_the_batches_a_job_carries(settings, r):
    s = dataclasses.replace(settings, batch_size=10, job_timeout=7, drain_max_batches=3)
    queue = make_queue(s, r)
    enqueue_batches(queue, range(1, 26), 10, s)       # 10 + 10 + 5 users: one batch each
    enqueue_batches(queue, range(1, 26), 25, s)       # 25 users: 3 batches' worth
    notify_changed(s, r, [1])                         # a drain job may process 3 batches
    timeouts = [Job.fetch(i, connection=r, serializer=JSONSerializer).timeout for i in queue.job_ids]
    assert timeouts == [7, 7, 7, 21, 21]


def test_a_burst_of_events_for_one_user_yields_one_pending_recompute(client, settings, r, pipeline, user_id):
    queue = make_queue(settings, r)
    item = int(pipeline.items.ids[3])
    for k in range(20):
        resp = client.post("/events", json={"user_id": user_id, "item_id": item, "type": "view"})
        assert resp.status_code == 202
    assert DirtyUsers(r, settings).pending() == 1
    assert queue.count == 1
    done = manage(settings, "worker", "--burst")
    assert done.returncode == 0, done.stderr
    assert DirtyUsers(r, settings).pending() == 0
    feed = FeedStore(r, settings).read(user_id)
    with pipeline.engine.connect() as conn:
        version = conn.execute(select(User.history_version).where(User.id == user_id)).scalar()
    assert feed.header.history_version == version


def test_events_for_many_users_are_drained_in_batches(settings, r, pipeline, own_users):
    users = own_users(30)          # more than one batch (25)
    notify_changed(settings, r, users)
    queue = make_queue(settings, r)
    assert queue.count == 1
    done = manage(settings, "worker", "--burst")
    assert done.returncode == 0, done.stderr
    res = _results(r, queue)
    assert sum(x["users"] for x in res) == 30 and max(x["batches"] for x in res) >= 2
    store = FeedStore(r, settings)
    assert all(store.read(u) is not None for u in users)


def test_a_user_marked_again_while_claimed_stays_dirty(settings, r):
    dirty = DirtyUsers(r, dataclasses.replace(settings, recompute_interval_ms=0))
    dirty.mark([7, 8])
    claimed, stamp = dirty.claim(10)
    assert sorted(claimed) == [7, 8]
    assert dirty.claim(10)[0] == []             # leased: nobody else takes them
    time.sleep(0.002)
    dirty.mark([8])                             # a new event for 8 while it is being computed
    assert dirty.complete(claimed, stamp) == 1
    assert dirty.claim(10)[0] == [8]


def test_a_user_flooding_events_is_recomputed_at_most_once_per_interval(settings, r):
    # given a recompute cap of 400 ms and a user (a bot) whose events keep arriving
    dirty = DirtyUsers(r, dataclasses.replace(settings, recompute_interval_ms=400))
    dirty.mark([9])
    claimed, stamp = dirty.claim(10)
    assert claimed == [9]
    dirty.complete(claimed, stamp)
    # when events arrive all through the interval, each marking the user
    start, claims = time.monotonic(), []
    while time.monotonic() - start < 0.3:
        dirty.mark([9])
        got, stamp = dirty.claim(10)
        claims += got
        if got:
            dirty.complete(got, stamp)
        time.sleep(0.005)
    # then nothing is claimable within the interval, yet the user stays dirty and is claimed once it ends
    assert claims == []
    assert dirty.pending() == 1
    due = dirty.next_due() / 1000
    assert 0.3 < due - (time.time() - (time.monotonic() - start)) <= 0.45
    time.sleep(max(0.0, due - time.time()) + 0.01)
    assert dirty.claim(10)[0] == [9]


@pytest.mark.timeout(120)
def test_a_running_worker_switches_to_a_promoted_bundle_and_keeps_it_when_a_broken_one_is_made_current(
        settings, r, world, tmp_path, own_users):
    # given a running worker (one process: RQ's worker forking a horse per job)
    with (tmp_path / "worker.log").open("w") as log:
        worker = spawn_worker(settings, log=log)
    queue = make_queue(settings, r)
    new, broken = world.version + 77_000_000, world.version + 78_000_000
    one, two, three, four = own_users(4)
    try:
        first = _run_one(queue, r, [one])
        assert first["process"]["bundle_version"] == world.version
        # when a copy of the bundle is promoted, the next job runs with it, without a restart
        shutil.copytree(settings.model_dir / str(world.version), settings.model_dir / str(new))
        bundle.promote(settings.model_dir, new)
        second = _run_one(queue, r, [two])
        assert second["process"]["bundle_version"] == new
        assert second["process"]["pid"] != first["process"]["pid"]
        # when a bundle whose model file is truncated is made current behind promote's back (promote refuses it)
        shutil.copytree(settings.model_dir / str(new), settings.model_dir / str(broken))
        model = settings.model_dir / str(broken) / "model.cbm"
        model.write_bytes(model.read_bytes()[:1000])
        with pytest.raises(BundleError, match="truncated"):
            bundle.promote(settings.model_dir, broken)
        (settings.model_dir / "CURRENT").write_text(f"{broken}\n")
        # then the worker refuses it in its own process: later jobs succeed with the bundle it had
        for users in ([three], [four]):
            assert _run_one(queue, r, users)["process"]["bundle_version"] == new
    finally:
        bundle.promote(settings.model_dir, world.version)
        stop_worker(worker)
    # and it logged the refusal once (the broken version is checked once, not before every job)
    refusals = [line for line in (tmp_path / "worker.log").read_text().splitlines()
                if f"keeping bundle {new}: model bundle {broken}: model.cbm is truncated" in line]
    assert len(refusals) == 1, refusals
    assert queue.failed_job_registry.count == 0


def _run_one(queue, r, users):
    job = queue.enqueue("jobs.tasks.recompute_users", users)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        job.refresh()
        if job.is_finished:
            return job.return_value()
        assert not job.is_failed, job.latest_result().exc_string if job.latest_result() else "failed"
        time.sleep(0.1)
    raise AssertionError("job did not finish")


def _drains_here(monkeypatch, pipeline, r, settings, **changes):
    """Drain jobs run in this process on ``pipeline`` and ``r``, with ``settings`` changed by ``changes``; returns
    those settings."""
    from jobs import context

    s = dataclasses.replace(settings, **changes)
    monkeypatch.setattr(pipeline, "settings", s)
    monkeypatch.setattr(context, "_pipeline", pipeline)
    monkeypatch.setattr(context, "_queue_redis", r)
    monkeypatch.setattr(context, "_stopping", False)
    return s


def test_a_failing_drain_job_hands_its_users_back(settings, r, pipeline, monkeypatch):
    from jobs import tasks

    settings = _drains_here(monkeypatch, pipeline, r, settings)
    dirty = DirtyUsers(r, settings)
    dirty.mark([21, 22])

    def broken(user_ids):
        raise RuntimeError("database went away")

    monkeypatch.setattr(pipeline, "recompute", broken)
    with pytest.raises(RuntimeError):
        tasks.drain_dirty()
    # the users are due again at once, so RQ's retry of the job recomputes them
    assert sorted(dirty.claim(10)[0]) == [21, 22]


def _perform_next(queue, r):
    """Take the queue's next job and run it in this process, as a work horse would (``get_current_job`` is it)."""
    return Job.fetch(queue.pop_job_id(), connection=r, serializer=JSONSerializer).perform()


def test_a_drain_that_leaves_users_due_now_adds_one_drain_however_many_drains_run(settings, r, pipeline,
                                                                                  monkeypatch, own_users):
    from rq.registry import ScheduledJobRegistry

    # given drains that take one user each, and more users due now than drains run: as while events keep arriving
    s = _drains_here(monkeypatch, pipeline, r, settings, batch_size=1, drain_max_batches=1)
    queue = make_queue(s, r)
    assert notify_changed(s, r, own_users(6))
    for n in range(1, 4):
        # when the waiting drain job runs
        assert _perform_next(queue, r)["users"] == 1
        # then it leaves exactly one drain behind, waiting in the queue, and none scheduled for later: a drain
        # scheduled for "now" beside the queued one made every drain two, and the jobs doubled while events came
        assert (queue.count, ScheduledJobRegistry(queue=queue).count) == (1, 0), f"after drain {n}"


def test_drains_queued_beside_the_flagged_one_die_out_while_events_keep_coming(settings, r, pipeline, monkeypatch,
                                                                               user_id):
    s = _drains_here(monkeypatch, pipeline, r, settings, recompute_interval_ms=0)
    queue = make_queue(s, r)
    # given the flagged drain and three more queued beside it (scheduled drains come due, or enqueued after the
    # flag's TTL ran out while a long drain held the workers)
    assert notify_changed(s, r, [user_id])
    for _ in range(3):
        queue.enqueue("jobs.tasks.drain_dirty")
    counts = []
    for _ in range(6):
        # when an event comes before each drain starts, as it does on a busy site
        notify_changed(s, r, [user_id])
        _perform_next(queue, r)
        counts.append(queue.count)
    # then the extra drains are not replaced as they run (each start let one more in, and the queue stayed at 3)
    assert counts == sorted(counts, reverse=True) and counts[-1] == 0, counts
    assert DirtyUsers(r, s).pending() == 0
    # and the next event enqueues one drain again, the one after it none
    assert notify_changed(s, r, [user_id]) and not notify_changed(s, r, [user_id]) and queue.count == 1


def test_a_drain_asked_to_stop_ends_after_its_batch_and_hands_the_rest_over(settings, r, pipeline, monkeypatch,
                                                                             own_users):
    from jobs import context, tasks

    s = _drains_here(monkeypatch, pipeline, r, settings, batch_size=2, drain_max_batches=100)
    recompute = pipeline.recompute

    def stop_during(user_ids):
        context.request_stop()          # as the horse's signal handler does when its worker is told to stop
        return recompute(user_ids)

    monkeypatch.setattr(pipeline, "recompute", stop_during)
    # given ten users due, and the worker told to stop while the drain computes its first batch
    DirtyUsers(r, s).mark(own_users(10))
    done = tasks.drain_dirty()
    # then the drain ends after that batch, the other eight stay dirty, and a drain waits for them
    assert (done["batches"], done["users"]) == (1, 2)
    assert DirtyUsers(r, s).pending() == 8 and make_queue(s, r).count == 1


def test_a_drain_leaves_new_users_to_the_drain_ranking_them_and_takes_over_when_it_ends(settings, r, pipeline,
                                                                                         monkeypatch, own_users):
    from rq.registry import ScheduledJobRegistry

    from jobs import tasks

    s = _drains_here(monkeypatch, pipeline, r, settings, recompute_interval_ms=0, dirty_lease=30)
    dirty, queue = DirtyUsers(r, s), make_queue(s, r)
    new = own_users(6)
    # given new users due, one of them claimed by another drain, which now ranks them
    dirty.mark_new(new)
    assert len(dirty.claim_tiers(10, 1, ranker="elsewhere")[1]) == 1
    # when a drain runs meanwhile
    done = tasks.drain_dirty()
    # then it ranks none of them, and neither queues another drain for them (which would find the same, and queue
    # another, round and round) nor leaves them without one: a drain is scheduled for the other's lease end
    assert done["users"] == 0 and queue.count == 0
    registry = ScheduledJobRegistry(queue=queue)
    assert registry.count == 1
    assert 0 < registry.get_scheduled_time(registry.get_job_ids()[0]).timestamp() - time.time() <= s.dirty_lease + 1
    # and once that drain has ended, the next ranks the 5 left
    dirty.stop_ranking("elsewhere")
    assert tasks.drain_dirty()["users"] == 5 and dirty.ranked_until() is None


@pytest.mark.timeout(120)
def test_a_worker_told_to_stop_mid_drain_stops_after_the_batch_and_loses_nothing(settings, r, world):
    # given one drain job of a user per batch over every user of the world, running in a real worker
    s = dataclasses.replace(settings, batch_size=1, drain_max_batches=10_000, recompute_interval_ms=0)
    dirty = DirtyUsers(r, s)
    users = world.users_with_events
    worker = spawn_worker(s)
    try:
        notify_changed(s, r, users)
        queue = make_queue(s, r)
        wait_until(lambda: queue.started_job_registry.count == 1 and dirty.pending() < len(users) - 5, 60,
                   "the drain under way")
    finally:
        # when the worker is told to stop (SIGTERM: RQ's warm shutdown, which waits for the running job)
        stop_worker(worker)
    # then the drain stopped after its batch: users are left dirty, none is lost, and a drain waits for them
    left = dirty.pending()
    assert 0 < left < len(users) - 5
    assert queue.count == 1 and dirty.claim(1000)[0] and queue.failed_job_registry.count == 0


@pytest.mark.timeout(120)
def test_users_leased_by_a_dead_drain_job_are_recomputed_by_a_scheduled_drain(settings, r, pipeline, monkeypatch,
                                                                              user_id):
    from rq.registry import FinishedJobRegistry, ScheduledJobRegistry

    from jobs import tasks

    short = _drains_here(monkeypatch, pipeline, r, settings, dirty_lease=3)
    dirty = DirtyUsers(r, short)
    store = FeedStore(r, short)
    # given a user claimed by a drain job that was then SIGKILLed: leased, never completed, no feed
    dirty.mark([user_id])
    dirty.claim(10)
    # when a later drain finds nobody due
    assert tasks.drain_dirty()["users"] == 0
    # then it schedules one drain for when the lease runs out, and only one however many drains see the lease
    registry = ScheduledJobRegistry(queue=make_queue(short, r))
    assert registry.count == 1
    scheduled = registry.get_job_ids()[0]
    assert 0 < registry.get_scheduled_time(scheduled).timestamp() - time.time() <= short.dirty_lease + 1
    tasks.drain_dirty()
    assert registry.count == 1 and store.read(user_id) is None
    # and a running worker runs that drain once the lease is over: the user gets a feed of their latest history
    worker = spawn_worker(short)
    try:
        wait_until(lambda: store.read(user_id) is not None, 60, "the leased user's feed")
    finally:
        stop_worker(worker)
    with pipeline.engine.connect() as conn:
        version = conn.execute(select(User.history_version).where(User.id == user_id)).scalar()
    assert store.read(user_id).header.history_version == version > 0
    assert dirty.pending() == 0
    assert scheduled in FinishedJobRegistry(queue=make_queue(short, r)).get_job_ids()


def test_a_job_whose_horse_is_killed_more_often_than_its_retries_still_completes(settings, r):
    # given one retry, at once (a burst worker runs no scheduler), for a job whose horse is SIGKILLed in its
    # first 3 runs, one that raises in its first 3 runs, and one whose horse is killed in every run
    s = dataclasses.replace(settings, retry_intervals=(0,), job_max_deaths=4)
    queue = make_queue(s, r)
    dies = queue.enqueue("tests.faults.die_first", f"{s.key_prefix}dies", 3, retry=retry(s))
    fails = queue.enqueue("tests.faults.fail_first", f"{s.key_prefix}fails", 3, retry=retry(s))
    always = queue.enqueue("tests.faults.die_first", f"{s.key_prefix}always", 100, retry=retry(s))
    # when a worker runs them
    done = manage(s, "worker", "--burst")
    assert done.returncode == 0, done.stderr
    # then the killed one is run until it completes: a process killed under a job is not the job failing
    assert dies.get_status(refresh=True) == "finished" and dies.return_value() == 4
    # and the one that raised has spent its retry and waits in the failed registry with its reason
    assert fails.get_status(refresh=True) == "failed" and r.get(f"{s.key_prefix}fails") == b"2"
    assert "failing on purpose" in fails.latest_result().exc_string
    # and the one killed every time is tried until its deaths exceed PREFEED_JOB_MAX_DEATHS, then fails
    assert always.get_status(refresh=True) == "failed" and r.get(f"{s.key_prefix}always") == b"5"
    assert sorted(queue.failed_job_registry.get_job_ids()) == sorted([fails.id, always.id])


@pytest.mark.timeout(120)
def test_a_dead_workers_job_is_retried_past_its_retries_and_rqs_cleaning_lock(settings, r):
    s = dataclasses.replace(settings, worker_interval=1, retry_intervals=(1,))
    queue = make_queue(s, r)
    # given a job whose worker and horse were SIGKILLed while it ran: its heartbeat has run out, its retries are
    # spent, and the dead worker held RQ's registry-cleaning lock (899 s)
    job = queue.create_job("tests.faults.fail_first", args=(f"{s.key_prefix}runs", 0), retry=retry(s))
    job.retries_left = 0
    job.save()
    r.zadd(queue.started_job_registry.key, {f"{job.id}:dead-execution": time.time() - 1})
    r.set(queue.registry_cleaning_key, 1, ex=899)
    # when a worker runs
    worker = spawn_worker(s)
    try:
        wait_until(lambda: job.get_status(refresh=True) in ("finished", "failed"), 60, "the job to end")
    finally:
        stop_worker(worker)
    # then its maintenance found the job within a few beats and ran it again
    assert job.get_status() == "finished", job.latest_result().exc_string
    assert r.zcard(queue.started_job_registry.key) == 0 and queue.failed_job_registry.count == 0


def test_a_warm_stop_landing_while_a_finished_job_is_recorded_stops_the_worker(settings, r, monkeypatch):
    # given a job, and RQ's SIGTERM handler as it behaves once the worker is idle again: it raises StopRequested
    # wherever the worker is (here: reading the job's result for its metrics, right after the horse exited)
    job = make_queue(settings, r).create_job("tests.faults.fail_first", args=(f"{settings.key_prefix}stop", 0))
    job.save()

    def stop(signum, frame):
        raise StopRequested()

    real = Job.latest_result

    def read_while_stopped(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGUSR2)        # the stop signal arrives during the read
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Job, "latest_result", read_while_stopped)
    previous = signal.signal(signal.SIGUSR2, stop)
    try:
        # when the worker records the job, then the stop request reaches RQ's loop instead of being logged as a
        # missing result and lost (the worker would go on taking jobs after SIGTERM)
        with pytest.raises(StopRequested):
            metrics.record_job(job, time.time(), 0.01)
    finally:
        signal.signal(signal.SIGUSR2, previous)


@pytest.mark.parametrize("rank_shown", [True, False])
def test_pages_collected_make_their_users_feeds_due_when_ranking_with_what_was_shown(settings, r, pipeline,
                                                                                     monkeypatch, rank_shown):
    from jobs import tasks
    from precompute.experiments.impressions import pack

    settings = _drains_here(monkeypatch, pipeline, r, settings, rank_shown=rank_shown)
    dirty = DirtyUsers(r, settings)
    dirty.claim(10_000)                     # the test's start: no user due
    from precompute.data.clock import newest_event
    with pipeline.engine.connect() as conn:
        now = newest_event(conn)
    # Given two pages served to user 31 and one to user 32, collected
    writer = 515151 + rank_shown
    r.rpush(f"{settings.key_prefix}impressions",
            *(pack(writer, seq, user, 0, 0, now, 0, [1, 2], f"r{seq}") for seq, user in ((1, 31), (2, 31), (3, 32))))
    assert tasks.collect_impressions()["stored"] == 3
    # Then, ranking with what was shown, both users' feeds are due once each; otherwise none is
    assert sorted(dirty.claim(10)[0]) == ([31, 32] if rank_shown else [])
