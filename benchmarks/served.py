"""served: the replay protocol through the running product, against what ``evaluate --protocol replay`` reports.

The log of the environment's database (``PREFEED_VAR_DIR`` / ``DATABASE_URL``; the synthetic marketplace when it
holds nothing) is cut at a quantile. A fresh prefeed gets the catalogue and the events before the cut, trains on
them as ``evaluate`` does, and starts its worker and API processes. The events after the cut are then posted through
``POST /events`` in log order; before each judged step (a sample of users, their first steps after the cut) the
feed is read with ``GET /feed/<user>?limit=10`` once it has caught up with the user's own events (its
``history_version`` is the database's). The same model, users and steps are judged in process by the replay
protocol (``learning/replay.py``).

Prints the served and evaluated NDCG@10 with the best baseline, the served ratio with its interval, and the share of
steps whose served list scores exactly what the evaluated one does; writes ``results/served-<name>.json``.

Events go in requests of ``PREFEED_EVENTS_BATCH_MAX`` (500); ``PREFEED_BENCH_EVENTS_PER_REQUEST=1`` posts them one
at a time, as a client posting each event as it happens would. On a log stamped by the day, a worker whose item
table reloads at a new day's first request sees the rest of that request's events of the day too.
"""

from __future__ import annotations

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
from precompute.data.log import load_events
from precompute.data.tables import Item, ItemAttribute, ItemCategory
from precompute.learning import bootstrap, replay
from precompute.learning.fit import fit_ranker
from precompute.learning.split import cut_time
from precompute.ranking import bundle, covisit
from precompute.ranking.item_loader import load_item_table
from precompute.learning.steps import find

from .lab.logs import open_log
from .lab.results import table, write_result
from .lab.world import ROOT

FULL = dict(cut=0.8, users=300, steps=5, workers=2, iterations=None, k=10)
QUICK = dict(cut=0.8, users=6, steps=2, workers=1, iterations=30, k=10)
#: Longest wait for a judged user's feed to catch up with their events before the read counts as late.
CATCH_UP = 60.0


def run(quick: bool = False) -> dict:
    cfg = QUICK if quick else FULL
    with open_log(quick) as (source, source_settings, name):
        log = load_events(source)
        events = log
        cut = cut_time(log.ts, cfg["cut"])
        with _Product(source, source_settings, events, cut, cfg) as product:
            # The judged users and steps, and what the replay protocol says of them, with the product's model.
            items = load_item_table(source, product.settings, as_of=cut)
            cov = covisit.index_for(items, product.trained.pairs)
            steps = find(events, items, cut, float("inf"), cfg["steps"])
            who = steps.users()
            if len(who) > cfg["users"]:
                who = np.sort(np.random.default_rng(0).choice(who, size=cfg["users"], replace=False))
            detail: dict = {}
            judged = replay.judge_replay(items, cov, events, cut, product.trained.model, product.settings,
                                         n_steps=cfg["steps"], only=who, k=cfg["k"], detail=detail)
            steps = detail["steps"]
            t0 = time.perf_counter()
            lists, late = product.replay(steps, items, cfg["k"])
            seconds = time.perf_counter() - t0
            per_request = product.per_request
        ndcg, hit = {"served": np.zeros(len(steps))}, {"served": np.zeros(len(steps))}
        replay.score_lists("served", lists, steps, 0, cfg["k"], ndcg, hit)
        evaluated = detail["ndcg"]["ranker"]
        best = judged.best_baseline
        user_pos = np.unique(steps.user, return_inverse=True)[1].ravel()
        per_user = {m: np.bincount(user_pos, weights=v) for m, v in
                    (("served", ndcg["served"]), ("evaluated", evaluated), (best, detail["ndcg"][best]))}
        served_mean = float(ndcg["served"].mean()) if len(steps) else 0.0
        base = judged.methods[best]["ndcg"]
        out = dict(
            log=name, cut=cut, cut_quantile=cfg["cut"], users=int(len(who)), steps=len(steps), late_reads=late,
            replay_seconds=seconds, events_per_request=per_request, best_baseline=best, baseline_ndcg=base,
            served=dict(ndcg=served_mean, hit_rate=float(hit["served"].mean()) if len(steps) else 0.0,
                        ratio=served_mean / base if base > 0 else None,
                        interval=bootstrap.ratio_interval(per_user["served"], per_user[best])),
            evaluated=dict(ndcg=judged.methods["ranker"]["ndcg"], ratio=judged.ratio, interval=judged.ratio_interval),
            served_vs_evaluated=bootstrap.ratio_interval(per_user["served"], per_user["evaluated"]),
            same_score_share=float(np.mean(np.isclose(ndcg["served"], evaluated))) if len(steps) else None,
            methods=judged.methods)
        print(table(f"replay on {name} at cut {cfg['cut']:g}: {len(steps)} steps of {len(who)} users",
                    ["feed", "NDCG@10", f"/ {best}", "95% interval"],
                    [["served (HTTP)", served_mean, _x(out["served"]["ratio"]), _iv(out["served"]["interval"])],
                     ["evaluated", judged.methods["ranker"]["ndcg"], _x(judged.ratio), _iv(judged.ratio_interval)],
                     [best, base, "1.00x", ""]]))
        print(f"served / evaluated: {_iv(out['served_vs_evaluated'])} (95% interval); steps scoring the same: "
              f"{out['same_score_share']:.1%}; reads that waited over {CATCH_UP:g}s: {late}; "
              f"replay through HTTP {seconds:.0f}s, {per_request} events per request")
        print(f"wrote {write_result('served' if quick else f'served-{name}', out, quick)}")
        return out


class _Product:
    """A prefeed of its own (temporary folder, SQLite, the embedded Valkey unless ``REDIS_URL``) holding the
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
        self.procs: list[subprocess.Popen] = []
        redis_url = os.environ.get("REDIS_URL")
        if not redis_url:
            self.server = start_valkey()
            redis_url = self.server.connection_url
        tag = uuid.uuid4().hex[:8]
        self.settings = dataclasses.replace(
            source_settings, database_url=f"sqlite:///{self.tmp / 'served.db'}", var_dir=self.tmp,
            model_dir=self.tmp / "models", redis_url=redis_url, queue_redis_url=None, feed_redis_url=None,
            key_prefix=f"pfserved:{tag}:", queue_name=f"pfserved-{tag}", as_of=0.0,
            # A historical log is posted with its own times: accept any age; and faster than it happened: a user's
            # events of an hour may arrive within a second.
            event_max_age=100 * 365 * 86400, user_events_per_minute=10 ** 9)
        self.engine = db.make_engine(self.settings.database_url, self.settings)

    def __enter__(self) -> _Product:
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
        if self.server is not None:
            self.server.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _load(self) -> None:
        db.init_db(self.engine, self.settings)
        with self.source.connect() as src, self.engine.begin() as dst:
            for model in (Item, ItemCategory, ItemAttribute):
                rows = [dict(r._mapping) for r in src.execute(select(model.__table__))]
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
        self.trained = fit_ranker(self.engine, self.settings, iterations=self.cfg["iterations"], seed=0)
        bundle.promote(self.settings.model_dir, bundle.write(self.settings.model_dir, self.trained.model,
                                                             self.trained.pairs, {"metrics": {}}))

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
                self._post(names, int(steps.posted[s]))
                uid = int(steps.user[s])
                want = conn.execute(text("SELECT history_version FROM users WHERE id = :u"), {"u": uid}).scalar()
                conn.rollback()
                deadline = time.monotonic() + CATCH_UP
                while True:
                    status, body = self._get(f"/feed/{uid}?limit={k}")
                    if status == 200 and (body["history_version"] or -1) >= want:
                        break
                    if time.monotonic() > deadline:
                        late += 1
                        break
                    time.sleep(0.01)
                ids = np.array([e["item_id"] for e in body.get("items", [])], dtype=np.int64)
                lists.append(items.rows(ids)[:k])
        return lists, late

    def _post(self, names: list[str], upto: int) -> None:
        user, item, type_, ts = self.events.user, self.events.item, self.events.type, self.events.ts
        while self.n_posted < upto:
            hi = min(upto, self.n_posted + self.per_request)
            batch = [{"user_id": int(u), "item_id": int(i), "type": names[int(t) - 1], "ts": float(s)}
                     for u, i, t, s in zip(user[self.n_posted:hi], item[self.n_posted:hi], type_[self.n_posted:hi],
                                           ts[self.n_posted:hi])]
            self.http.request("POST", "/events", body=json.dumps(batch),
                              headers={"Content-Type": "application/json", **self.auth})
            reply = self.http.getresponse()
            answer = reply.read()
            if reply.status != 202:
                raise RuntimeError(f"POST /events answered {reply.status}: {answer[:200]!r}")
            self.n_posted = hi

    def _get(self, path: str) -> tuple[int, dict]:
        self.http.request("GET", path, headers=self.auth)
        reply = self.http.getresponse()
        return reply.status, json.loads(reply.read() or b"{}")


def _x(ratio) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def _iv(interval) -> str:
    return "-" if interval is None else f"{interval[0]:.2f}-{interval[1]:.2f}"
