"""soak: mixed feed reads and event posts against the API under gunicorn with 2 RQ workers recomputing, for a
bounded time (default 5 minutes; loopback only). Samples the RSS of the API and worker processes and counts
errors: memory should stay flat after warm-up and errors at zero."""

from __future__ import annotations

import http.client
import subprocess
import sys
import threading
import time

import numpy as np
import orjson
import psutil

from cli.net import free_port, wait_for_http

from .lab.results import table, write_result
from .lab.world import ROOT, make_world

FULL = dict(users=1000, items=10_000, events=100_000, iterations=300, seconds=300, rate=200, event_share=0.1)
QUICK = dict(users=100, items=1000, events=10_000, iterations=20, seconds=12, rate=60, event_share=0.2)
MiB = 1 << 20


def run(quick: bool = False) -> dict:
    cfg = QUICK if quick else FULL
    world = make_world(cfg["users"], cfg["items"], cfg["events"], cfg["iterations"], quick=quick)
    procs = []
    try:
        pipeline = world.pipeline()
        world.precompute_all(pipeline, cfg["users"])
        item_ids = pipeline.items.ids[pipeline.items.global_popular].tolist()
        port = free_port()
        api = subprocess.Popen([sys.executable, "-m", "gunicorn", "--workers", "2", "--bind", f"127.0.0.1:{port}",
                                "--log-level", "warning", "api.wsgi:app"], env=world.env(), cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        workers = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "worker", "--workers", "2"],
                                   env=world.env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs = [api, workers]
        wait_for_http(f"http://127.0.0.1:{port}/healthz", timeout=60)
        auth = world.auth

        counts = {"requests": 0, "errors": 0, "events": 0}
        lock = threading.Lock()
        stop = time.monotonic() + cfg["seconds"]
        n_threads = 4
        interval = n_threads / cfg["rate"]

        def client(seed: int) -> None:
            rng = np.random.default_rng(seed)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            next_at = time.monotonic()
            k = 0
            while time.monotonic() < stop:
                next_at += interval
                uid = int(rng.integers(1, cfg["users"] + 1))
                try:
                    if rng.random() < cfg["event_share"]:
                        body = orjson.dumps({"user_id": uid, "item_id": int(rng.choice(item_ids)), "type": "view",
                                             "event_id": f"soak-{seed}-{k}"})
                        conn.request("POST", "/events", body, {"Content-Type": "application/json", **auth})
                        ok_status = 202
                    else:
                        conn.request("GET", f"/feed/{uid}?limit=20", headers=auth)
                        ok_status = 200
                    resp = conn.getresponse()
                    resp.read()
                    ok = resp.status == ok_status
                except OSError:
                    ok = False
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                k += 1
                with lock:
                    counts["requests"] += 1
                    counts["errors"] += not ok
                    counts["events"] += ok_status == 202 and ok
                time.sleep(max(0.0, next_at - time.monotonic()))

        threads = [threading.Thread(target=client, args=(t,)) for t in range(n_threads)]
        for t in threads:
            t.start()
        samples = []
        t0 = time.monotonic()
        while any(t.is_alive() for t in threads):
            samples.append((time.monotonic() - t0, _rss(api), _rss(workers, skip_horses=True)))
            time.sleep(max(1.0, cfg["seconds"] / 60))
        for t in threads:
            t.join()
        warm = [x for x in samples if x[0] >= cfg["seconds"] * 0.2] or samples
        api_start, api_end = warm[0][1], max(x[1] for x in warm[-3:])
        wk_start, wk_end = warm[0][2], max(x[2] for x in warm[-3:])
        out = dict(config=cfg, **counts, seconds=cfg["seconds"],
                   api_rss_mib=dict(after_warmup=api_start / MiB, end=api_end / MiB,
                                    growth=(api_end - api_start) / api_start),
                   worker_rss_mib=dict(after_warmup=wk_start / MiB, end=wk_end / MiB,
                                       growth=(wk_end - wk_start) / wk_start),
                   samples=[(round(a, 1), b / MiB, c / MiB) for a, b, c in samples])
        print(table(f"soak: {cfg['seconds']}s at ~{cfg['rate']} req/s ({int(cfg['event_share'] * 100)}% events), "
                    f"gunicorn x2 + 2 RQ workers", ["requests", "events", "errors", "API RSS MiB (warm -> end)",
                                                   "workers RSS MiB (warm -> end)"],
                    [[counts["requests"], counts["events"], counts["errors"],
                      f"{api_start / MiB:.0f} -> {api_end / MiB:.0f}", f"{wk_start / MiB:.0f} -> {wk_end / MiB:.0f}"]]))
        print(f"wrote {write_result('soak', out, quick)}")
        return out
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
        world.close()


def _rss(proc: subprocess.Popen, skip_horses: bool = False) -> int:
    """Summed RSS of a process tree; work horses (children of worker processes) come and go, so can be left out."""
    try:
        root = psutil.Process(proc.pid)
        tree = [root] + root.children(recursive=not skip_horses)
        return sum(p.memory_info().rss for p in tree if p.is_running())
    except psutil.NoSuchProcess:
        return 0
