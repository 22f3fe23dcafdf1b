"""freshness: a steady stream of events at R/s for T s while 2 workers run; for each event, the time from the
event being accepted (stored and its recompute scheduled, exactly what POST /events does) until the user's feed in
Redis carries the new history version. Reports p50/p99 and how many never arrived within the deadline."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np
from rq import Worker

from jobs.queues import make_queue, notify_changed
from precompute.data.recording import NewEvent, record
from precompute.settings import Settings
from precompute.feeds.client import redis_client
from precompute.feeds.codec import HEADER, HEADER_SIZE
from precompute.feeds.keys import Keys

from .lab.real_users import caught_up
from .lab.results import median, table, write_result
from .lab.world import ROOT, make_world

FULL = dict(users=2000, items=20_000, events=300_000, rate=100, seconds=20, deadline=10.0)
QUICK = dict(users=150, items=2000, events=15_000, rate=20, seconds=3, deadline=10.0)


def run(quick: bool = False) -> dict:
    cfg = QUICK if quick else FULL
    world = make_world(cfg["users"], cfg["items"], cfg["events"], 30 if quick else Settings().train_iterations,
                       quick=quick)
    worker = None
    try:
        s = world.settings
        r = redis_client(s.redis_url)
        keys = Keys(s.key_prefix)
        worker = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "worker", "--workers", "2"],
                                  env=world.env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        queue = make_queue(s, r)
        _wait_for_workers(r, queue, 2)

        rng = np.random.default_rng(0)
        from sqlalchemy import select

        from precompute.data.tables import Item
        with world.engine.connect() as conn:
            item_ids = np.array(conn.execute(select(Item.id).where(Item.active)).scalars().all())
        pending: dict[int, list[tuple[int, float]]] = {}   # user -> [(version awaited, accepted at), ...]
        latencies: list[float] = []
        timed_out = [0]
        lock = threading.Lock()
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set() or pending:
                with lock:
                    waiting = list(pending.items())
                if waiting:
                    pipe = r.pipeline(transaction=False)
                    for uid, _ in waiting:
                        pipe.getrange(keys.feed(uid), 0, HEADER_SIZE - 1)
                    now = time.perf_counter()
                    for (uid, _), head in zip(waiting, pipe.execute()):
                        stored = HEADER.unpack(head)[4] if len(head) == HEADER_SIZE else -1
                        with lock:
                            caught, expired = caught_up(pending, uid, stored, now, cfg["deadline"])
                            latencies.extend(now - t0 for t0 in caught)
                            timed_out[0] += expired
                if stop.is_set() and not pending:
                    return
                time.sleep(0.002)

        poller = threading.Thread(target=poll)
        poller.start()
        n_events = cfg["rate"] * cfg["seconds"]
        start = time.perf_counter()
        sent = 0
        for k in range(n_events):
            target = start + k / cfg["rate"]
            delay = target - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            uid = int(rng.integers(1, cfg["users"] + 1))
            ev = NewEvent(uid, int(rng.choice(item_ids)), int(rng.choice([1, 1, 1, 2, 3])), time.time())
            rec = record(world.engine, [ev], s)
            notify_changed(s, r, rec.versions)
            with lock:
                pending.setdefault(uid, []).append((rec.versions[uid], time.perf_counter()))
            sent += 1
        achieved = sent / (time.perf_counter() - start)
        stop.set()
        poller.join(timeout=cfg["deadline"] + 5)
        lat = np.array(latencies) * 1000
        out = dict(config=cfg, events=sent, achieved_rate=achieved, measured=len(lat),
                   timed_out=timed_out[0], p50_ms=median(lat), p99_ms=float(np.percentile(lat, 99)),
                   max_ms=float(lat.max()), failed_jobs=queue.failed_job_registry.count)
        print(table(f"freshness: {cfg['rate']} events/s for {cfg['seconds']}s, 2 workers (event accepted -> feed "
                    f"in Redis carries its version)", ["events", "rate/s", "p50 ms", "p99 ms", "max ms",
                                                       f"not fresh after {cfg['deadline']:.0f}s"],
                    [[sent, achieved, out["p50_ms"], out["p99_ms"], out["max_ms"], out["timed_out"]]]))
        print(f"wrote {write_result('freshness', out, quick)}")
        return out
    finally:
        if worker is not None:
            # SIGTERM is RQ's warm shutdown: each worker process finishes its job first (a drain job may run up
            # to PREFEED_DRAIN_MAX_BATCHES batches, slow on a loaded machine). The measurement is done: past a
            # minute, kill the pool (its processes die with it) rather than fail the run.
            worker.terminate()
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                print("freshness: the workers did not stop within 60 s of SIGTERM; killed", file=sys.stderr)
                worker.kill()
                worker.wait(timeout=30)
        world.close()


def _wait_for_workers(r, queue, n: int, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while Worker.count(connection=r, queue=queue) < n:
        if time.monotonic() > end:
            raise RuntimeError("workers did not start")
        time.sleep(0.2)
