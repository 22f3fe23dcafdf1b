"""hot_user: one key reading one user's feed at its full rate while real users read and click; attribution keeps up.

A prefeed of its own (``lab/product.py``: the log's catalogue and events before a cut, a trained model, its worker
and API processes) runs an experiment of two arms over every user, every feed ranked in its arm before the run.
Then, for ``seconds``, side by side:

- real users of the log read a page of their feed and click one of its items at once (``POST /events``, type
  ``click``, at the wall clock), ``real_rate`` times a second in all, from 4 connections;
- a key of its own with the default limits reads one other user's feed as fast as they let it, honouring 429 and
  ``Retry-After`` (``lab/hot_reader.py``, a process pinned to one core).

Sampled every half second: the impressions list in Redis (length and bytes), Redis's ``used_memory``, and how many
of the run's own events wait for attribution (the newest event id less the collector's ``attributed`` mark, or
less the newest id before the run while the log's own events are still being attributed). After the run:
how long the collector takes to attribute every event stored during it (without the report's help), then
``experiments report --json``: every real click is on an item of the page its user just read, so the clicks the
report attributes over the arms must equal the clicks posted. Reported beside them: the hot user's pages served,
recorded (at most ``PREFEED_IMPRESSIONS_USER_MAX`` a minute per API process) and stored, and the collector jobs that
failed (none).
"""

from __future__ import annotations

import http.client
import itertools
import json
import math
import threading
import time

import numpy as np
from sqlalchemy import func, select, text

from jobs.queues import COLLECT, make_queue
from precompute.data import api_keys
from precompute.data.tables import CollectorMark, ServedPage
from precompute.feeds.client import redis_client
from precompute.feeds.dirty import DirtyUsers
from precompute.feeds.keys import Keys

from .lab import hot_reader
from .lab.product import product_of_log
from .lab.results import machine, table, write_result

FULL = dict(seconds=60, real_users=200, real_rate=10, cut=0.8, workers=2, iterations=200)
QUICK = dict(seconds=12, real_users=60, real_rate=10, cut=0.8, workers=1, iterations=30)
#: API processes of the product (``Product`` serves with two gunicorn workers): each records its own minute's cap.
API_PROCESSES = 2
#: Longest wait for the precompute before the run, and for attribution to catch up after it.
SETTLE = 180.0


def run(quick: bool = False) -> dict:
    cfg = QUICK if quick else FULL
    with product_of_log(quick, cfg) as (product, _, name):
        out = _measure(product, cfg)
    out = dict(log=name, config=cfg, **out, machine=machine())
    _print(out)
    print(f"wrote {write_result('hot_user', out, quick)}")
    return out


def _measure(product, cfg: dict) -> dict:
    s = product.settings
    queue_redis, keys = redis_client(s.queue_url), Keys(s.key_prefix)
    with product.engine.connect() as db:
        users = db.execute(text("SELECT id FROM users ORDER BY id LIMIT :n"),
                           {"n": cfg["real_users"] + 1}).scalars().all()
    hot, real = users[-1], users[:-1]
    names = [n for n, _ in s.event_types]
    kind = "click" if "click" in names else names[0]
    product.manage("experiments", "create", "hot", "--arm", "a=model:current", "--arm", "b=recent:1d",
                   "--users", "1.0")
    # the events' clock at the wall clock (the log's own times lie in the past), then every feed ranked in its arm
    product.post([{"user_id": real[0], "item_id": _any_item(product), "type": kind, "ts": time.time(),
                   "event_id": "hot-warm"}])
    product.manage("precompute", "--all")
    _wait(lambda: DirtyUsers(queue_redis, s).pending() == 0, SETTLE)
    key = api_keys.create(product.engine, "hot-reader", frozenset({"feed:read"}))
    used0 = int(queue_redis.info("memory")["used_memory"])
    with product.engine.connect() as db:          # the run's own events come after this one
        first = int(db.execute(text("SELECT max(id) FROM events")).scalar() or 0)

    samples: list[tuple[float, int, int, int, int]] = []
    running = threading.Event()
    running.set()

    def sample() -> None:
        with product.engine.connect() as db:
            while running.is_set():
                newest = db.execute(text("SELECT max(id) FROM events")).scalar() or 0
                mark = db.execute(select(CollectorMark.event_id).where(CollectorMark.name == "attributed")).scalar()
                db.rollback()
                samples.append((time.monotonic(), int(queue_redis.llen(keys.impressions)),
                                int(queue_redis.memory_usage(keys.impressions) or 0),
                                int(queue_redis.info("memory")["used_memory"]) - used0,
                                int(newest) - max(int(mark or 0), first)))
                time.sleep(0.5)

    sampler = threading.Thread(target=sample)
    sampler.start()
    proc, report = hot_reader.start(product.port, key, hot, cfg["seconds"])
    clicks = _click(product, real, kind, cfg["real_rate"], cfg["seconds"])
    reader = report.get(timeout=cfg["seconds"] + 120)
    proc.join(timeout=30)
    with product.engine.connect() as db:
        newest_at_end = int(db.execute(text("SELECT max(id) FROM events")).scalar() or 0)

    def caught_up() -> bool:
        with product.engine.connect() as db:
            mark = db.execute(select(CollectorMark.event_id).where(CollectorMark.name == "attributed")).scalar()
        return int(mark or 0) >= newest_at_end and queue_redis.llen(keys.impressions) == 0

    attributed_after = _wait(caught_up, SETTLE)
    running.clear()
    sampler.join()
    behind = None if attributed_after is not None else _why_behind(product, queue_redis, keys, newest_at_end)
    got = json.loads(product.manage("experiments", "report", "hot", "--json"))
    attributed = sum(arm["events"][kind]["attributed"] for arm in got["arms"])
    with product.engine.connect() as db:
        hot_stored = int(db.execute(select(func.count()).select_from(ServedPage)
                                    .where(ServedPage.user_id == hot)).scalar())
    queue = make_queue(s, queue_redis)
    failed = [j for j in (queue.fetch_job(i) for i in queue.failed_job_registry.get_job_ids())
              if j is not None and j.func_name == COLLECT]
    minutes = math.ceil(reader["seconds"] / 60) + 1            # the run may straddle one minute more
    cap = s.impressions_user_max * API_PROCESSES * minutes
    arr = np.array(samples, dtype=np.float64) if samples else np.zeros((1, 5))
    served = reader["statuses"].get("200", 0)
    return dict(
        hot=dict(user=hot, requests=reader["requests"], served=served, refused_429=reader["statuses"].get("429", 0),
                 statuses=reader["statuses"], served_per_s=served / reader["seconds"],
                 retry_after_waited_s=reader["retry_after_waited_s"], pages_stored=hot_stored,
                 pages_cap=cap, within_cap=hot_stored <= cap, user_max_per_minute=s.impressions_user_max),
        real=dict(users=len(real), reads=clicks["reads"], clicks=clicks["clicks"], errors=clicks["errors"],
                  read_p99_ms=clicks["read_p99_ms"], attributed=attributed,
                  exact=attributed == clicks["clicks"]),
        redis=dict(list_len_max=int(arr[:, 1].max()), list_bytes_max=int(arr[:, 2].max()),
                   used_memory_added_max=int(arr[:, 3].max())),
        collector=dict(events_behind_max=int(arr[:, 4].max()), caught_up_s_after_run=attributed_after,
                       caught_up=attributed_after is not None, failed_jobs=len(failed), behind=behind,
                       seconds_sampled=float(arr[-1, 0] - arr[0, 0]) if len(samples) > 1 else 0.0))


def _why_behind(product, r, keys: Keys, newest: int) -> dict:
    """What the collector's state is when attribution did not catch up: its marks, its lock and schedule flag, and
    its jobs by registry."""
    with product.engine.connect() as db:
        marks = {m.name: [int(m.event_id), float(m.at)] for m in db.execute(select(CollectorMark))}
    queue = make_queue(product.settings, r)
    registries = {"queued": queue.get_job_ids(), "started": queue.started_job_registry.get_job_ids(),
                  "scheduled": queue.scheduled_job_registry.get_job_ids(),
                  "failed": queue.failed_job_registry.get_job_ids(),
                  "finished": queue.finished_job_registry.get_job_ids()}
    jobs = {}
    for name, ids in registries.items():
        found = [queue.fetch_job(i) for i in ids]
        jobs[name] = sum(1 for j in found if j is not None and j.func_name == COLLECT)
    return dict(newest=newest, marks=marks, now=time.time(), list_len=int(r.llen(keys.impressions)),
                lock_ttl_ms=int(r.pttl(keys.impressions_lock)), flag_ttl_ms=int(r.pttl(keys.impressions_scheduled)),
                collect_jobs=jobs)


def _click(product, users: list[int], kind: str, rate: float, seconds: float, threads: int = 4) -> dict:
    """Real users in turn, ``rate`` a second: each reads a page of their feed and clicks one of its items."""
    slots = iter(range(int(rate * seconds)))
    lock = threading.Lock()
    start = time.monotonic() + 0.1
    serial = itertools.count()
    reads, clicks, errors = [], [0], [0]

    def drive() -> None:
        conn = product.connect()
        while True:
            with lock:
                k = next(slots, None)
            if k is None:
                return
            delay = start + k / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            uid = users[k % len(users)]
            t0 = time.perf_counter()
            try:
                status, body = product.get(f"/feed/{uid}?limit=10", conn)
            except (OSError, http.client.HTTPException):
                conn.close()
                status, body = None, {}
            items = [e["item_id"] for e in body.get("items", [])]
            if status != 200 or not items:
                with lock:
                    errors[0] += 1
                continue
            reads.append(time.perf_counter() - t0)
            event = {"user_id": uid, "item_id": items[k % len(items)], "type": kind, "ts": time.time(),
                     "event_id": f"hot-{next(serial)}"}
            try:
                product.post([event], conn)
            except (RuntimeError, OSError, http.client.HTTPException):
                conn.close()
                with lock:
                    errors[0] += 1
                continue
            with lock:
                clicks[0] += 1

    drivers = [threading.Thread(target=drive) for _ in range(threads)]
    for t in drivers:
        t.start()
    for t in drivers:
        t.join()
    ms = np.array(reads) * 1000
    return dict(reads=len(reads), clicks=clicks[0], errors=errors[0],
                read_p99_ms=float(np.percentile(ms, 99)) if len(ms) else float("nan"))


def _any_item(product) -> int:
    with product.engine.connect() as db:
        return int(db.execute(text("SELECT id FROM items WHERE active ORDER BY id LIMIT 1")).scalar())


def _wait(done, timeout: float) -> float | None:
    """Seconds until ``done()`` held (polled every 0.2 s), None if it did not within ``timeout``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if done():
            return time.monotonic() - t0
        time.sleep(0.2)
    return None


def _print(out: dict) -> None:
    h, real, rd, c = out["hot"], out["real"], out["redis"], out["collector"]
    m = out["machine"]
    print(f"machine: {m['cpus']} cores ({m['cpu']}), {m['memory_gib']} GiB, load {m['load_average']}")
    print(table(f"one key reading user {h['user']}'s feed at its full rate for {out['config']['seconds']} s",
                ["requests", "200", "429", "served /s", "Retry-After waited s", "pages stored", "cap"],
                [[h["requests"], h["served"], h["refused_429"], h["served_per_s"], h["retry_after_waited_s"],
                  h["pages_stored"], h["pages_cap"]]]))
    print(table("real users beside it: every click on an item of the page just read",
                ["users", "reads", "clicks", "errors", "read p99 ms", "attributed (report)", "equal"],
                [[real["users"], real["reads"], real["clicks"], real["errors"], real["read_p99_ms"],
                  real["attributed"], real["exact"]]]))
    print(table("Redis and the collector",
                ["list max", "list max KiB", "used_memory added max MiB", "events behind max",
                 "caught up s after run", "failed collector jobs"],
                [[rd["list_len_max"], rd["list_bytes_max"] / 1024, rd["used_memory_added_max"] / 2 ** 20,
                  c["events_behind_max"], c["caught_up_s_after_run"], c["failed_jobs"]]]))
