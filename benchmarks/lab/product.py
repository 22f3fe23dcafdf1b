"""A prefeed of its own for a benchmark that drives the running product over HTTP (``served``, ``experiment``): a
temporary folder and SQLite database holding a log's catalogue and its events before a cut, a model trained on them
and promoted, and its worker and API processes; the events after the cut are posted in log order."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
from sqlalchemy import insert, select, text

from cli.net import free_port, start_valkey, stop_all, wait_for_http
from precompute.data import api_keys, engine as db
from precompute.data.importing import import_events
from precompute.data.tables import Item, ItemAttribute, ItemCategory
from precompute.data.log import load_events
from precompute.learning.fit import fit_ranker
from precompute.learning.split import cut_time
from precompute.ranking import bundle

from .logs import open_log
from .pg import own_schema
from .world import ROOT

#: Longest wait for a judged user's feed to catch up with their events before the read counts as late.
CATCH_UP = 60.0


@contextlib.contextmanager
def product_of_log(quick: bool, cfg: dict):
    """A ``Product`` of the log a benchmark runs on (``logs.open_log``), cut at the quantile ``cfg["cut"]``:
    ``(product, source engine, log name)``; its events and cut are the product's ``events`` and ``cut``."""
    with open_log(quick) as (source, source_settings, name):
        events = load_events(source)
        with Product(source, source_settings, events, cut_time(events.ts, cfg["cut"]), cfg) as product:
            yield product, source, name


class Product:
    """A prefeed of its own (temporary folder, SQLite or a schema of its own on the PostgreSQL server of
    ``cfg["postgres"]``, the embedded Valkey unless ``REDIS_URL``) holding the
    catalogue and the log before ``cut``, a model trained on it, and its worker and API processes."""

    def __init__(self, source, source_settings, events, cut: float, cfg: dict) -> None:
        self.source, self.events, self.cut, self.cfg = source, events, cut, cfg
        # Checked before anything is started: a bad value leaves no server or folder behind.
        most = source_settings.events_batch_max
        self.per_request = int(os.environ.get("PREFEED_BENCH_EVENTS_PER_REQUEST") or most)
        if not 1 <= self.per_request <= most:
            raise ValueError(f"PREFEED_BENCH_EVENTS_PER_REQUEST must be 1 to {most}")
        self.tmp = Path(tempfile.mkdtemp(prefix="prefeed-served-"))
        self.server = None
        self._drop_schema = None
        database_url = f"sqlite:///{self.tmp / 'served.db'}"
        if cfg.get("postgres"):             # a schema of its own on that server, dropped after
            database_url, self._drop_schema = own_schema(cfg["postgres"])
        self.procs: list[subprocess.Popen] = []
        redis_url = os.environ.get("REDIS_URL")
        if not redis_url:
            self.server = start_valkey()
            redis_url = self.server.connection_url
        tag = uuid.uuid4().hex[:8]
        self.settings = dataclasses.replace(
            source_settings, database_url=database_url, var_dir=self.tmp,
            model_dir=self.tmp / "models", redis_url=redis_url, queue_redis_url=None, feed_redis_url=None,
            key_prefix=f"pfserved:{tag}:", queue_name=f"pfserved-{tag}", as_of=0.0,
            # A historical log is posted with its own times: accept any age; and faster than it happened: a user's
            # events of an hour may arrive within a second.
            event_max_age=100 * 365 * 86400, user_events_per_minute=10 ** 9,
            # and every key of the run is the benchmark's own: no per-key cap on new users shapes it
            key_new_users_per_minute=10 ** 9, **cfg.get("settings", {}))
        self.engine = db.make_engine(self.settings.database_url, self.settings)

    def __enter__(self) -> Product:
        try:
            self._load()
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        stop_all(self.procs, timeout=30)
        self.engine.dispose()
        if self._drop_schema is not None:
            self._drop_schema()
        if self.server is not None:
            self.server.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _load(self) -> None:
        db.init_db(self.engine, self.settings)
        held = set(self.cfg.get("held_items", ()))     # items the benchmark creates itself, through the API
        with self.source.connect() as src, self.engine.begin() as dst:
            for model in (Item, ItemCategory, ItemAttribute):
                rows = [dict(r._mapping) for r in src.execute(select(model.__table__))]
                rows = [r for r in rows if r.get("id", r.get("item_id")) not in held]
                if rows:
                    dst.execute(insert(model.__table__), rows)
        user, item, type_, ts = self.events.user, self.events.item, self.events.type, self.events.ts
        n = int(np.searchsorted(ts, self.cut, side="right"))
        path = self.tmp / "before.csv"
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["user_id", "item_id", "ts", "type"])
            w.writerows(zip(user[:n].tolist(), item[:n].tolist(), ts[:n].tolist(), type_[:n].tolist()))
        import_events(self.engine, path, "csv", self.settings)
        key = api_keys.create(self.engine, "served", frozenset({"feed:read", "events:write", "items:write"}),
                              rate=1e9, burst=10 ** 9)
        self.auth = {"Authorization": f"Bearer {key}"}
        self.n_posted = n
        # Trained on the log before the cut, as ``evaluate`` trains, and made current.
        self.trained = fit_ranker(self.engine, self.settings, iterations=self.cfg["iterations"], seed=0,
                                  ignore=tuple(self.cfg.get("ignore", ())))
        bundle.promote(self.settings.model_dir, bundle.write(self.settings.model_dir, self.trained.model,
                                                             self.trained.pairs, {"metrics": {}},
                                                             self.trained.cascade))

    def _start(self) -> None:
        env = self.settings.child_env()
        self.port = free_port()
        manage = [sys.executable, str(ROOT / "manage.py")]
        quiet = dict(env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(subprocess.Popen([*manage, "worker", "--workers", str(self.cfg["workers"])], **quiet))
        self.procs.append(subprocess.Popen([*manage, "serve", "--port", str(self.port), "--workers", "2"], **quiet))
        wait_for_http(f"http://127.0.0.1:{self.port}/healthz", timeout=60)
        self.http = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def replay(self, steps, items, k: int) -> tuple[list[np.ndarray], int]:
        """Post the log after the cut in order; before each step, the user's caught-up feed (as item rows)."""
        names = [name for name, _ in self.settings.event_types]
        lists, late = [], 0
        with self.engine.connect() as conn:
            for s in range(len(steps)):
                self.post_until(names, int(steps.posted[s]))
                uid = int(steps.user[s])
                want = conn.execute(text("SELECT history_version FROM users WHERE id = :u"), {"u": uid}).scalar()
                conn.rollback()
                deadline = time.monotonic() + CATCH_UP
                while True:
                    status, body = self.get(f"/feed/{uid}?limit={k}")
                    if status == 200 and (body["history_version"] or -1) >= want:
                        break
                    if time.monotonic() > deadline:
                        late += 1
                        break
                    time.sleep(0.01)
                ids = np.array([e["item_id"] for e in body.get("items", [])], dtype=np.int64)
                lists.append(items.rows(ids)[:k])
        return lists, late

    def post_until(self, names: list[str], upto: int) -> None:
        user, item, type_, ts = self.events.user, self.events.item, self.events.type, self.events.ts
        while self.n_posted < upto:
            hi = min(upto, self.n_posted + self.per_request)
            # each with an event id (its place in the log): a request retried on a fresh connection stores once
            self.post([{"user_id": int(u), "item_id": int(i), "type": names[int(t) - 1], "ts": float(s),
                        "event_id": f"log-{k}"}
                       for k, u, i, t, s in zip(range(self.n_posted, hi), user[self.n_posted:hi],
                                                item[self.n_posted:hi], type_[self.n_posted:hi],
                                                ts[self.n_posted:hi])])
            self.n_posted = hi

    def post(self, events: list[dict], http: http.client.HTTPConnection | None = None) -> None:
        """``POST /events`` (on ``http``, default the product's own connection); anything but 202 raises. Give the
        events ids: a request is sent again when the server had closed the idle connection."""
        status, answer = self.request(http or self.http, "POST", "/events", json.dumps(events),
                                      {"Content-Type": "application/json"})
        if status != 202:
            raise RuntimeError(f"POST /events answered {status}: {answer[:200]!r}")

    def connect(self) -> http.client.HTTPConnection:
        """A connection of the caller's own to the product's API (one per thread)."""
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def manage(self, *args: str) -> str:
        """``manage.py ARGS`` against the product; its output; a failure raises with its error line."""
        done = subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], env=self.settings.child_env(),
                              cwd=ROOT, capture_output=True, text=True, timeout=900)
        if done.returncode:
            raise RuntimeError(f"manage.py {' '.join(args)}: {done.stderr.strip()[-500:]}")
        return done.stdout

    def get(self, path: str, http: http.client.HTTPConnection | None = None) -> tuple[int, dict]:
        status, answer = self.request(http or self.http, "GET", path)
        return status, json.loads(answer or b"{}")

    def request(self, conn: http.client.HTTPConnection, method: str, path: str, body: str | None = None,
                headers: dict | None = None) -> tuple[int, bytes]:
        """One request; sent again once on a fresh connection when the server had closed this one (gunicorn
        closes a keep-alive connection idle for 2 s)."""
        for attempt in (0, 1):
            try:
                conn.request(method, path, body=body, headers={**(headers or {}), **self.auth})
                reply = conn.getresponse()
                return reply.status, reply.read()
            except (http.client.RemoteDisconnected, ConnectionError):
                conn.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")
