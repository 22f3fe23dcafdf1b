"""The abuse benchmark's flood: one key posting ``POST /events`` batches of made-up user ids at a stated offered rate,
from a process of its own whose CPU is capped (pinned to one core, and paced: it never sends faster than offered).

Offered, not closed-loop: ``connections`` threads each keep a schedule of ``rate / connections`` requests a second
and skip the slots they fell behind on, so a slow server is offered the same rate rather than a burst to catch up
(what the flood reached is reported beside it). Every event names a user id never used before, counting up from
``first_user``; items are the catalogue's, so a batch is refused only for a limit, never for a missing item."""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import random
import threading
import time
from collections import Counter


def start(port: int, key: str, items: list[int], kind: str, rate: float, per_request: int, seconds: float,
          first_user: int, connections: int = 32) -> tuple[multiprocessing.Process, multiprocessing.Queue]:
    """The flood's process, started; its report (``flood``'s dict) arrives on the queue when it ends."""
    ctx = multiprocessing.get_context("spawn")        # not fork: the parent runs threads and holds connections
    out = ctx.Queue()
    proc = ctx.Process(target=flood, args=(port, key, items, kind, rate, per_request, seconds, first_user, connections,
                                           out), daemon=True)
    proc.start()
    return proc, out


def flood(port: int, key: str, items: list[int], kind: str, rate: float, per_request: int, seconds: float,
          first_user: int, connections: int, out) -> None:
    """Runs in the flood's process: pinned to the machine's last core, ``rate`` requests/s of ``per_request``
    events for ``seconds``. Puts what happened on ``out``: answers by status, requests sent, the slots offered, the
    elapsed and CPU seconds (the cap, shown), the user ids used."""
    core = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    statuses: Counter = Counter()
    lock = threading.Lock()
    next_user = [first_user]
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    start_at = time.monotonic() + 0.2
    end_at = start_at + seconds
    per_thread = rate / connections

    def send(index: int) -> None:
        rng = random.Random(index)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        slot = 0
        while True:
            at = start_at + (slot + index / connections) / per_thread
            if at >= end_at:
                break
            delay = at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif -delay > 1 / per_thread:            # behind: skip the missed slots (offered, not caught up)
                slot += int(-delay * per_thread)
                continue
            slot += 1
            with lock:
                first = next_user[0]
                next_user[0] += per_request
            now = time.time()
            body = json.dumps([{"user_id": first + k, "item_id": rng.choice(items), "type": kind, "ts": now}
                               for k in range(per_request)])
            try:
                conn.request("POST", "/events", body=body, headers=headers)
                reply = conn.getresponse()
                reply.read()
                status = reply.status
            except (OSError, http.client.HTTPException):
                conn.close()
                status = "error"
            with lock:
                statuses[status] += 1
        conn.close()

    cpu0 = time.process_time()
    threads = [threading.Thread(target=send, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start_at
    out.put(dict(statuses={str(k): v for k, v in statuses.items()}, sent=sum(statuses.values()),
                 slots=int(rate * seconds), seconds=elapsed, cpu_seconds=time.process_time() - cpu0, core=core,
                 first_user=first_user, last_user=next_user[0] - 1))
