"""The hot-user benchmark's reader: one key reading one user's feed as fast as its limits let it, from a process of
its own pinned to one core, as a client that honours the limits does: after a 429 a connection waits the answer's
``Retry-After`` seconds before its next request."""

from __future__ import annotations

import http.client
import multiprocessing
import os
import threading
import time
from collections import Counter


def start(port: int, key: str, user_id: int, seconds: float, connections: int = 16
          ) -> tuple[multiprocessing.Process, multiprocessing.Queue]:
    """The reader's process, started; its report (``read``'s dict) arrives on the queue when it ends."""
    ctx = multiprocessing.get_context("spawn")        # not fork: the parent runs threads and holds connections
    out = ctx.Queue()
    proc = ctx.Process(target=read, args=(port, key, user_id, seconds, connections, out), daemon=True)
    proc.start()
    return proc, out


def read(port: int, key: str, user_id: int, seconds: float, connections: int, out) -> None:
    """Runs in the reader's process: ``GET /feed/<user_id>`` in a loop on each of ``connections`` connections for
    ``seconds``. Puts on ``out``: answers by status, requests, elapsed seconds, the Retry-After seconds waited."""
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
    statuses: Counter = Counter()
    waited = [0.0]
    lock = threading.Lock()
    headers = {"Authorization": f"Bearer {key}"}
    end_at = time.monotonic() + seconds

    def loop() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.monotonic() < end_at:
            try:
                conn.request("GET", f"/feed/{user_id}?limit=20", headers=headers)
                reply = conn.getresponse()
                reply.read()
                status, retry = reply.status, reply.getheader("Retry-After")
            except (OSError, http.client.HTTPException):
                conn.close()
                status, retry = "error", None
            with lock:
                statuses[status] += 1
            if status == 429:
                pause = min(float(retry or 1), max(0.0, end_at - time.monotonic()))
                with lock:
                    waited[0] += pause
                time.sleep(pause)
        conn.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=loop) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(dict(statuses={str(k): v for k, v in statuses.items()}, requests=sum(statuses.values()),
                 seconds=time.monotonic() - t0, retry_after_waited_s=waited[0], connections=connections))
