"""Impressions: every page ``GET /feed`` serves, recorded without costing the page.

A page is appended to its API process's in-memory buffer as it was served; a thread of that process packs each
into one binary record (``pack``) and sends the buffer to a Redis list (the queue Redis) every
``PREFEED_IMPRESSIONS_FLUSH_MS``, in one ``RPUSH``, and at exit; then it hands the pages' items to ``on_pages``
(the API counts new items' impressions there: ``feeds/new_items.py``). A worker job moves the list to the database in
batches (``collect.py``).

Each record is named by ``(writer, seq)``: a random 63-bit id of the API process and its own count of the pages it
served. The database stores a name once, so a batch moved twice stores nothing twice, and a gap in one writer's
numbers is a page lost on the way (a Redis that restarted empty, a buffer over ``PREFEED_IMPRESSIONS_BUFFER_MAX``):
the collector counts them (``prefeed_impressions_lost_total``). An API process killed without its exit hook loses
its unsent buffer, at most one flush interval of pages.

A process records at most ``PREFEED_IMPRESSIONS_USER_MAX`` pages of one user per minute (a fixed window); the rest
are served but not recorded, and counted (``record`` says so). A person reads a page in seconds; a client that reads
one user's feed hundreds of times a second would otherwise store millions of pages that user's next event must be
matched against, and fill the Redis list and the table for nothing an experiment could learn.

Record layout, little-endian: writer u64, seq u64, user i64, experiment u32, arm u16, served_at f64, position u32,
item count u16, request id length u8, the request id (ASCII), then the item ids (i64 each).
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import math
import os
import secrets
import struct
import threading
import time
from collections.abc import Callable

import numpy as np
import redis

log = logging.getLogger(__name__)

HEAD = struct.Struct("<QQqIHdIHB")
#: The longest request id recorded: the API keeps a client's ``X-Request-ID`` up to 128 characters (``api/logs.py``).
REQUEST_ID_MAX = 128


@dataclasses.dataclass(frozen=True)
class Impression:
    """One served page."""

    writer: int
    seq: int
    user_id: int
    experiment: int         # 0: outside any experiment
    arm: int                # index of the arm in the experiment (0 outside)
    served_at: float        # the events' clock when it was served
    position: int           # 0-based place of its first item in the user's scroll (or its offset)
    items: np.ndarray       # int64 item ids, in page order
    request_id: str


def pack(writer: int, seq: int, user_id: int, experiment: int, arm: int, served_at: float, position: int,
         items: list[int], request_id: str) -> bytes:
    rid = request_id.encode("ascii", "replace")[:REQUEST_ID_MAX]
    return HEAD.pack(writer, seq, user_id, experiment, arm, served_at, position, len(items), len(rid)) + rid + \
        struct.pack(f"<{len(items)}q", *items)


def unpack(record: bytes) -> Impression:
    """A record back; ``ValueError`` for one that is not a record (cut short, not this format, or holding what
    ``pack`` never writes: a longer request id, a time that is not a number)."""
    try:
        writer, seq, user, experiment, arm, served_at, position, n, n_rid = HEAD.unpack_from(record)
    except struct.error:
        raise ValueError("not an impression record") from None
    start = HEAD.size + n_rid
    if len(record) != start + 8 * n or n_rid > REQUEST_ID_MAX or not math.isfinite(served_at):
        raise ValueError("not an impression record")
    return Impression(writer, seq, user, experiment, arm, served_at, position,
                      np.frombuffer(record, dtype="<i8", offset=start, count=n).astype(np.int64),
                      record[HEAD.size:start].decode("ascii"))


class ImpressionBuffer:
    """One API process's pages waiting to be sent to Redis (see the module doc). ``record`` is called on the page's
    path and only appends; ``flush`` sends, from the buffer's own thread (started at the first record, again after
    a fork) and at exit. ``on_sent(n)`` runs after each send (the API schedules the collector there)."""

    def __init__(self, r: redis.Redis, key: str, flush_ms: int, max_pending: int,
                 on_sent: Callable[[int], None] | None = None, user_max: int = 0,
                 on_pages: Callable[[list[list[int]]], object] | None = None) -> None:
        self.r, self.key, self.flush_s, self.on_sent = r, key, flush_ms / 1000.0, on_sent
        self.on_pages = on_pages              # given the item ids of each page sent, after each send
        self.max_pending = max_pending        # here and in the Redis list alike
        self.user_max = user_max              # pages of one user recorded per minute (0: no bound)
        self.pid = -1
        self.lock = threading.Lock()          # guards pending and seq
        self.sending = threading.Lock()       # one send at a time: a writer's records reach Redis in order
        self.stopped = threading.Event()
        self.dropped = 0                      # pages dropped here (Redis unreachable while the buffer was full)
        self.capped = 0                       # pages not recorded: their user's pages this minute were enough
        self._start()
        atexit.register(self.close)

    def _start(self) -> None:
        self.pid = os.getpid()
        self.writer = secrets.randbits(63)
        self.seq = 0
        self.pending: list[tuple] = []          # ``pack``'s arguments, one tuple per page
        self.thread: threading.Thread | None = None
        self.minute = -1                      # the window ``per_user`` counts in (whole minutes of the wall clock)
        self.per_user: dict[int, int] = {}    # pages recorded per user in it: bounded by the pages of one minute

    def record(self, user_id: int, experiment: int, arm: int, served_at: float, position: int, items: list[int],
               request_id: str) -> bool:
        """Append the page; False when it is not recorded: its user had ``user_max`` pages recorded this minute."""
        if self.pid != os.getpid():             # a forked child: its own writer id and thread
            self._start()
        with self.lock:
            if self.user_max:
                minute = int(time.time() // 60)
                if minute != self.minute:
                    self.minute, self.per_user = minute, {}
                n = self.per_user.get(user_id, 0)
                if n >= self.user_max:
                    self.capped += 1
                    return False
                self.per_user[user_id] = n + 1
            self.seq += 1
            # packed by the thread that sends it (``flush``), off the page's path
            self.pending.append((self.writer, self.seq, user_id, experiment, arm, served_at, position, items,
                                 request_id))
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="impressions", daemon=True)
                self.thread.start()
        return True

    def _run(self) -> None:
        while not self.stopped.wait(self.flush_s):
            self.flush()

    def flush(self) -> int:
        """Send what is pending; returns how many pages were sent. On a Redis error they stay pending (the oldest
        dropped, and counted, beyond ``max_pending``) and the next flush tries again."""
        with self.sending:
            with self.lock:
                batch, self.pending = self.pending, []
            if not batch:
                return 0
            try:
                records = [pack(*page) for page in batch]
                with self.r.pipeline(transaction=False) as pipe:
                    pipe.rpush(self.key, *records)
                    pipe.ltrim(self.key, -self.max_pending, -1)     # no collector: the oldest go, counted lost
                    pipe.execute()
            except redis.RedisError as exc:
                with self.lock:
                    self.pending = batch + self.pending
                    over = len(self.pending) - self.max_pending
                    if over > 0:
                        del self.pending[:over]
                        self.dropped += over
                log.warning("impressions: %d pages wait for Redis (%s)", len(batch), type(exc).__name__)
                return 0
        if self.on_sent is not None:
            try:
                self.on_sent(len(batch))
            except redis.RedisError as exc:
                log.warning("impressions: the collector could not be scheduled (%s)", type(exc).__name__)
        if self.on_pages is not None:
            try:
                self.on_pages([page[7] for page in batch])
            except redis.RedisError as exc:
                log.warning("impressions: new items' impressions not counted (%s)", type(exc).__name__)
        return len(batch)

    def close(self) -> None:
        """Stop the thread and send what is left (at exit)."""
        self.stopped.set()
        if self.pid == os.getpid():
            self.flush()

    def waiting(self) -> int:
        with self.lock:
            return len(self.pending)
