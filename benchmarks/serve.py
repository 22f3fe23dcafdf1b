"""serve: requests per second and latency at fixed concurrency, on loopback, for

- ``GET /feed/<user>?limit=20`` with boosts active (prefeed), as production serves it: with a real ``feed:read``
  key (its rate checked on every request), impressions recorded, and every user in a running A/A experiment (two
  arms of the current model), so each page is placed in an arm and recorded with it,
- ``GET /floor/<user>?limit=20`` of the same app (``benchmarks/lab/floor.py``): one ``GETRANGE`` of the page's bytes
  returned as the same JSON, no live rules (the serving floor: feed/floor is what the live rules cost),
- ``GET /livez`` of the same app under the same gunicorn config (the framework floor),
- a real-time endpoint that ranks the user's candidates at request time (the architecture prefeed replaces);
- the feed again under gunicorn's sync workers (before threaded ones, which ``manage.py serve`` runs so that slow
  clients hold a thread, not a process): what the threads cost the page;
- the feed again with every thread a turn of its own (``PREFEED_API_CONCURRENCY`` at the thread count): what the
  turns cost the page when the process is not overloaded (``api/turns.py``).

What each request costs the app itself, with no HTTP server (the feed against the floor, the key check, the cursor,
recording impressions on against off), is measured in process first (``benchmarks/lab/in_process.py``).

The load generator is wrk when it is installed (``apt-get install wrk``), otherwise a bounded Python client.
Every run is bounded in time and sends traffic only to 127.0.0.1.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import http.client
import urllib.request
from pathlib import Path

import numpy as np

from cli.net import free_port, wait_for_http
from cli.server import THREADS
from precompute.experiments import registry
from precompute.feeds.keys import Keys
from precompute.feeds.item_states import ItemStates
from precompute.settings import Settings

from .lab import in_process
from .lab.in_process import DEEP_PAGE, FEED, FLOOR
from .lab.results import median, table, write_result
from .lab.world import ROOT, make_world

FULL = dict(users=2000, items=20_000, events=300_000, iterations=None, seconds=10, connections=32, http_workers=2,
            repeats=5, calls=3000, deep_users=200)
QUICK = dict(users=150, items=2000, events=15_000, iterations=30, seconds=2, connections=4, http_workers=1,
             repeats=1, calls=300, deep_users=20)
#: The experiment every user of the benchmark is in (an A/A: both arms rank with the current model).
EXPERIMENT = "serve-a-a"


def run(quick: bool = False) -> dict:
    cfg = QUICK if quick else FULL
    world = make_world(cfg["users"], cfg["items"], cfg["events"], cfg["iterations"] or Settings().train_iterations,
                       quick=quick)
    servers = []
    try:
        s = world.settings
        # Every user in an experiment, before the feeds are ranked: each feed's header names its arm, and each page
        # is placed in it and recorded with it (``PREFEED_IMPRESSIONS`` is on by default), as in production.
        registry.create(world.engine, EXPERIMENT, [("a", "model:current"), ("b", "model:current")], None, 1.0,
                        s.model_dir)
        pipeline = world.pipeline()
        r = pipeline.store.r
        world.precompute_all(pipeline, cfg["users"])
        # Boost 2% of items, popular ones, so pages do carry boosted items.
        rng = np.random.default_rng(0)
        boosted = rng.choice(pipeline.items.ids[pipeline.items.global_popular], max(1, len(pipeline.items) // 50))
        live = ItemStates(r, Keys(s.key_prefix))
        for i in boosted:
            live.boost(int(i), float(rng.uniform(0.5, 3)), time.time() + 3600)

        floor = in_process.measure(world, cfg["users"], cfg["calls"], cfg["deep_users"])    # before any server runs
        cursor_chars = floor.pop("cursor_chars")    # sizes, not microseconds
        per_send, on_over_off = floor.pop("impressions_per_send"), floor.pop("impressions_on_over_off")
        waiting = {k: floor.pop(k) for k in ("new_items_waiting", "new_items_pages_placed")}    # counts, not us
        api_port, rt_port, sync_port, open_port = free_port(), free_port(), free_port(), free_port()
        servers.append(_gunicorn(world, "benchmarks.lab.floor:create_app()", api_port, cfg["http_workers"]))
        servers.append(_gunicorn(world, "benchmarks.lab.realtime:create_app()", rt_port, cfg["http_workers"]))
        servers.append(_gunicorn(world, "benchmarks.lab.floor:create_app()", sync_port, cfg["http_workers"],
                                 threads=None))
        servers.append(_gunicorn(world, "benchmarks.lab.floor:create_app()", open_port, cfg["http_workers"],
                                 PREFEED_API_CONCURRENCY=str(THREADS)))
        for port in (api_port, rt_port, sync_port, open_port):
            wait_for_http(f"http://127.0.0.1:{port}/feed/1", timeout=60, headers=world.auth)
        body = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{api_port}/feed/1?limit=20",
                                                             headers=world.auth)).read()
        assert b'"source":"precomputed"' in body and f'"experiment":"{EXPERIMENT}"'.encode() in body
        assert urllib.request.urlopen(f"http://127.0.0.1:{api_port}/floor/1?limit=20").read().count(b"item_id") == 20

        # feed and floor taken side by side, ``repeats`` pairs, which of the two goes first alternating: this
        # machine's noise moves a single pair by +-25%, so the ratio is the median of the pairs' ratios.
        pairs, classes, turns = [], [], []
        for k in range(cfg["repeats"]):
            got = {path: _load(api_port, path, cfg, world.auth) for path in (FEED, FLOOR)[:: 1 if k % 2 == 0 else -1]}
            pairs.append((got[FEED], got[FLOOR]))
            # the same feed from the sync-worker server, next to the threaded one's run just taken
            classes.append((got[FEED], _load(sync_port, FEED, cfg, world.auth)))
            # and from the server whose threads each have a turn
            turns.append((got[FEED], _load(open_port, FEED, cfg, world.auth)))
        runs = {
            "feed": _median_run([f for f, _ in pairs]),
            "floor": _median_run([f for _, f in pairs]),
            "feed_sync_workers": _median_run([f for _, f in classes]),
            "feed_turns_unbounded": _median_run([f for _, f in turns]),
            "bare": _load(api_port, "/livez", cfg),
            "realtime": _load(rt_port, "/feed/{user}", cfg),
            # last: it writes events (the feeds above are read before any of them)
            "events": _load(api_port, EVENTS, cfg, world.auth),
        }
        out = dict(config=cfg, generator=runs["feed"]["generator"], runs=runs, in_process_us=floor,
                   cursor_chars=cursor_chars, ratio_feed_over_floor=median([f["rps"] / g["rps"] for f, g in pairs]),
                   ratio_feed_over_floor_per_pair=[f["rps"] / g["rps"] for f, g in pairs],
                   ratio_feed_over_bare=runs["feed"]["rps"] / runs["bare"]["rps"],
                   ratio_feed_over_realtime=runs["feed"]["rps"] / runs["realtime"]["rps"],
                   ratio_threaded_over_sync=median([t["rps"] / s_["rps"] for t, s_ in classes]),
                   ratio_turns_over_unbounded=median([t["rps"] / u["rps"] for t, u in turns]),
                   ratio_impressions_on_over_off=on_over_off,
                   impressions_per_send=per_send, new_items=waiting)
        print(table(f"serve: {cfg['connections']} connections, {cfg['seconds']}s each, gunicorn x"
                    f"{cfg['http_workers']}, load by {out['generator']}", ["endpoint", "rps", "p50 ms", "p99 ms",
                                                                          "errors"],
                    [[name, x["rps"], x["p50_ms"], x["p99_ms"], x["errors"]] for name, x in runs.items()]))
        each = ", ".join(f"{x:.2f}" for x in out["ratio_feed_over_floor_per_pair"])
        print(f"feed/floor = {out['ratio_feed_over_floor']:.2f} (median of the pairs: {each})   feed/bare = "
              f"{out['ratio_feed_over_bare']:.2f}   feed/realtime = {out['ratio_feed_over_realtime']:.1f}x   "
              f"threaded/sync workers = {out['ratio_threaded_over_sync']:.2f}   turns/a turn per thread = "
              f"{out['ratio_turns_over_unbounded']:.2f}")
        print(table("\nwhat the diversity rule (?diversity=3/10) costs a page (interleaved), median microseconds",
                    ["page 1 on", "page 1 off", "on / off", "page 2 by cursor on", "off", "on / off"],
                    [[floor["feed_diversity_us"], floor["feed_diversity_off_us"], floor["diversity_over_off"],
                      floor["feed_diversity_cursor_us"], floor["feed_diversity_off_cursor_us"],
                      floor["diversity_over_off_cursor"]]]))
        print(table(f"\nwhat the new-item rule costs a page with {waiting['new_items_waiting']} items waiting "
                    f"(interleaved; {waiting['new_items_pages_placed']:.0%} of the pages placed one), median "
                    "microseconds", ["page 1 on", "off", "on / off"],
                    [[floor["feed_new_items_us"], floor["feed_new_items_off_us"], floor["new_items_over_off"]]]))
        print(table("\nthe page with every rule on (5 of its items left out, ?diversity=3/10, the items waiting) "
                    "against none of them (boosts and the seen filter in both), interleaved, median microseconds",
                    ["every rule", "none", "every / none"],
                    [[floor["feed_every_rule_us"], floor["feed_no_new_rule_us"], floor["every_rule_over_none"]]]))
        print(table("\nin-process cost per request (no HTTP server), median microseconds",
                    ["one Redis round trip (PING)", "GET /livez", "GET /floor (limit 20)", "GET /feed (limit 20)",
                     "floor/feed (interleaved)"],
                    [[floor["redis_ping_us"], floor["livez_us"], floor["floor_us"], floor["feed_us"],
                      floor["floor_over_feed"]]]))
        print(table("\nwhat the key check and the cursor cost a page (interleaved), median microseconds",
                    ["page 1, no key (auth off)", "page 1 with a key", "keyed / no key"],
                    [[floor["feed_open_us"], floor["feed_keyed_us"], floor["keyed_over_open"]]]))
        print(table("", ["page (with the key)", "by cursor", "by offset", "cursor / offset", "cursor characters"],
                    [[k, floor[f"feed_cursor{s}_us"], floor[f"feed_offset{s}_us"], floor[f"cursor_over_offset{s}"],
                      cursor_chars[f"page_{k}"]] for k, s in ((2, ""), (DEEP_PAGE, "_deep"))]))
        print(table(f"\nwhat recording impressions costs a page (interleaved), median microseconds, and the median "
                    f"of the rounds' ratios; a send of the {per_send} pages of one flush interval, per page",
                    ["impressions on", "impressions off", "on / off", "send per page"],
                    [[floor["feed_impressions_on_us"], floor["feed_impressions_off_us"],
                      out["ratio_impressions_on_over_off"], floor["impressions_send_per_page_us"]]]))
        print(table("\nwhat the turns cost a page when nothing waits (interleaved), median microseconds",
                    ["with turns", "without", "with / without"],
                    [[floor["feed_turns_us"], floor["feed_no_turns_us"], floor["turns_over_none"]]]))
        print(f"wrote {write_result('serve', out, quick)}")
        return out
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait(timeout=30)
        world.close()


def _gunicorn(world, target: str, port: int, workers: int, threads: int | None = THREADS,
              **env: str) -> subprocess.Popen:
    """gunicorn as ``manage.py serve`` runs it (threaded workers), or with sync workers (``threads=None``);
    ``env``: settings of its own."""
    worker_class = ["--worker-class", "sync"] if threads is None else ["--worker-class", "gthread", "--threads",
                                                                         str(threads)]
    return subprocess.Popen([sys.executable, "-m", "gunicorn", "--workers", str(workers), *worker_class, "--bind",
                             f"127.0.0.1:{port}", "--log-level", "warning", target],
                            env=world.env(PYTHONPATH=str(ROOT), **env), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


#: The ingestion row: POST /events, one event per request (wrk only).
EVENTS = "POST /events"


def _load(port: int, path: str, cfg: dict, headers: dict | None = None) -> dict:
    """``headers``: sent with every request (the API key)."""
    headers = headers or {}
    if path == EVENTS and not shutil.which("wrk"):
        return dict(generator="none", rps=None, p50_ms=None, p99_ms=None, errors=0)
    if shutil.which("wrk"):
        return _wrk(port, path, cfg, headers)
    return _python_load(port, path, cfg, headers)


def _wrk(port: int, path: str, cfg: dict, headers: dict) -> dict:
    head, placeholder, tail = path.partition("{user}")
    lua_headers = "".join(f', ["{k}"] = "{v}"' for k, v in headers.items())
    user = f"math.random(1, {cfg['users']})" if placeholder else '""'
    if path == EVENTS:          # one view event per request, of a random user and item
        call = (f'wrk.format("POST", "/events", {{["Content-Type"] = "application/json"{lua_headers}}}, '
                f'\'{{"user_id": \' .. math.random(1, {cfg["users"]}) .. \', "item_id": \' .. '
                f'math.random(1, {cfg["items"]}) .. \', "type": "view"}}\')')
    else:
        call = f'wrk.format("GET", "{head}" .. {user} .. "{tail}", {{{lua_headers.lstrip(", ")}}})'
    script = f"""
math.randomseed(42)
request = function()
  return {call}
end
"""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    done = subprocess.run(["wrk", "-t", "2", "-c", str(cfg["connections"]), "-d", f"{cfg['seconds']}s", "--latency",
                           "--timeout", "10s", "-s", f.name, f"http://127.0.0.1:{port}"],
                          capture_output=True, text=True, timeout=cfg["seconds"] + 60)
    Path(f.name).unlink()
    text = done.stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    pct = {m.group(1): _ms(m.group(2)) for m in re.finditer(r"^\s+(50|99)%\s+([\d.]+\w+)", text, re.M)}
    errors = sum(int(x) for x in re.findall(r"(?:connect|read|write|timeout) (\d+)", text))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    return dict(generator="wrk", rps=rps, p50_ms=pct.get("50"), p99_ms=pct.get("99"),
                errors=errors + (int(non2xx.group(1)) if non2xx else 0))


def _median_run(runs: list[dict]) -> dict:
    """The run of median rps (all of them kept under ``all_rps``)."""
    ordered = sorted(runs, key=lambda x: x["rps"])
    return {**ordered[len(ordered) // 2], "all_rps": [x["rps"] for x in runs]}


def _ms(value: str) -> float:
    num, unit = re.match(r"([\d.]+)(\w+)", value).groups()
    return float(num) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]


def _python_load(port: int, path: str, cfg: dict, headers: dict) -> dict:
    """Bounded closed-loop client: ``connections`` threads with keep-alive, for ``seconds``."""
    deadline = time.monotonic() + cfg["seconds"]
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        mine = []
        while time.monotonic() < deadline:
            url = path.replace("{user}", str(int(rng.integers(1, cfg["users"] + 1))))
            t0 = time.perf_counter()
            try:
                conn.request("GET", url, headers=headers)
                resp = conn.getresponse()
                resp.read()
                ok = resp.status == 200
            except OSError:
                ok = False
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            mine.append(time.perf_counter() - t0)
            if not ok:
                with lock:
                    errors[0] += 1
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(cfg["connections"])]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lat = np.array(latencies) * 1000
    return dict(generator="python", rps=len(lat) / (time.monotonic() - t0), p50_ms=median(lat),
                p99_ms=float(np.percentile(lat, 99)) if len(lat) else None, errors=errors[0])

