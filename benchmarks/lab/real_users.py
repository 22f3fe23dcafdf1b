"""The abuse benchmark's real users: users of the log, taken in turn, each posting one event through the running
API and reading their feed, at a modest steady rate; for each event, the time from sending it to the user's feed in
Redis carrying the user's new history version (``freshness``'s method, with the POST itself inside the time, since a
flood could slow the answer as much as the recompute)."""

from __future__ import annotations

import http.client
import itertools
import queue
import threading
import time

import numpy as np
from sqlalchemy import text

from precompute.feeds.client import redis_client
from precompute.feeds.codec import HEADER_SIZE
from precompute.feeds.keys import Keys
from precompute.feeds.store import header_of

#: Longest wait for an event's fresh feed before it counts as not fresh.
DEADLINE = 30.0


class RealUsers:
    """``run(seconds)`` drives ``users`` (ids the database has) through ``product`` at ``rate`` events/s plus as
    many feed reads, from ``threads`` connections; returns the latencies in ms and what was late or refused."""

    def __init__(self, product, users: list[int], items: list[int], rate: float, threads: int = 4) -> None:
        self.product, self.users, self.items, self.rate, self.threads = product, users, items, rate, threads
        self.kind = product.settings.event_types[0][0]
        self.keys = Keys(product.settings.key_prefix)
        self.redis = redis_client(product.settings.feed_url)
        self.serial = itertools.count()

    def run(self, seconds: float, settled_after: float = 10.0) -> dict:
        """``settled_after``: the p99 of the events sent that many seconds or more into the run is given apart
        (``p99_ms_settled``), to tell a start-up burst from a steady cost."""
        pending: dict[int, list[tuple[int, float]]] = {}        # user -> [(version awaited, sent at), ...]
        fresh, reads, posts, errors, late = [], [], [], [0], [0]
        lock = threading.Lock()
        slots: queue.Queue = queue.Queue()
        n = int(self.rate * seconds)
        start = time.perf_counter() + 0.1
        for k in range(n):
            slots.put((start + k / self.rate, self.users[k % len(self.users)]))
        posting = threading.Event()
        posting.set()

        def drive() -> None:
            conn = self.product.connect()
            with self.product.engine.connect() as db:
                while True:
                    try:
                        at, uid = slots.get_nowait()
                    except queue.Empty:
                        return
                    delay = at - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                    event = {"user_id": uid, "item_id": int(self.items[hash((uid, at)) % len(self.items)]),
                             "type": self.kind, "ts": time.time(), "event_id": f"real-{next(self.serial)}"}
                    t0 = time.perf_counter()
                    try:
                        self.product.post([event], conn)
                    except (RuntimeError, OSError, http.client.HTTPException):    # refused, or no answer in 30 s
                        errors[0] += 1
                        conn.close()                    # the next request opens a fresh connection
                        continue
                    posts.append(time.perf_counter() - t0)
                    want = db.execute(text("SELECT history_version FROM users WHERE id = :u"), {"u": uid}).scalar()
                    db.rollback()
                    with lock:
                        pending.setdefault(uid, []).append((int(want), t0))
                    t1 = time.perf_counter()
                    try:
                        status, _ = self.product.get(f"/feed/{uid}?limit=20", conn)
                    except (OSError, http.client.HTTPException):
                        status = None
                        conn.close()
                    if status == 200:
                        reads.append(time.perf_counter() - t1)
                    else:
                        errors[0] += 1

        def poll() -> None:
            while posting.is_set() or pending:
                with lock:
                    waiting = list(pending)
                if waiting:
                    pipe = self.redis.pipeline(transaction=False)
                    for uid in waiting:
                        pipe.getrange(self.keys.feed(uid), 0, HEADER_SIZE - 1)
                    now = time.perf_counter()
                    for uid, head in zip(waiting, pipe.execute()):
                        header = header_of(head)
                        stored = header.history_version if header is not None else -1
                        with lock:
                            caught, expired = caught_up(pending, uid, stored, now, DEADLINE)
                            fresh.extend((t0 - start, now - t0) for t0 in caught)
                            late[0] += expired
                time.sleep(0.002)

        poller = threading.Thread(target=poll)
        poller.start()
        drivers = [threading.Thread(target=drive) for _ in range(self.threads)]
        for t in drivers:
            t.start()
        for t in drivers:
            t.join()
        posting.clear()
        poller.join(timeout=DEADLINE + 5)
        sent_at = np.array([at for at, _ in fresh])
        ms = np.array([took for _, took in fresh]) * 1000
        read_ms, post_ms = np.array(reads) * 1000, np.array(posts) * 1000
        return dict(events=n, fresh=len(ms), not_fresh=late[0], errors=errors[0],
                    post_p50_ms=_pct(post_ms, 50), post_p99_ms=_pct(post_ms, 99),
                    p50_ms=_pct(ms, 50), p99_ms=_pct(ms, 99), p99_ms_settled=_pct(ms[sent_at >= settled_after], 99),
                    settled_after_s=settled_after, feed_read_p50_ms=_pct(read_ms, 50),
                    feed_read_p99_ms=_pct(read_ms, 99))


def _pct(xs: np.ndarray, q: float) -> float:
    return float(np.percentile(xs, q)) if len(xs) else float("nan")


def caught_up(pending: dict[int, list[tuple[int, float]]], uid: int, stored: int, now: float,
              deadline: float) -> tuple[list[float], int]:
    """Settle ``uid``'s awaited versions against the version its stored feed carries: the times (``perf_counter``)
    the events now fresh were accepted at, and how many waited past ``deadline``; the rest stay in ``pending``. The
    caller holds the lock that guards ``pending``."""
    fresh, late, left = [], 0, []
    for version, t0 in pending.get(uid, []):
        if stored >= version:
            fresh.append(t0)
        elif now - t0 > deadline:
            late += 1
        else:
            left.append((version, t0))
    if left:
        pending[uid] = left
    else:
        pending.pop(uid, None)
    return fresh, late
