"""memory: RSS and PSS of the worker parents and their work horses during a full rebuild (copy-on-write sharing
of the model and item matrices shows as PSS well below RSS), the bytes one user's feed takes in Redis, and the bytes
one item's similar items take (the workers write them when they load the bundle), scaled to a million items."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np
import psutil

from jobs.queues import enqueue_batches, make_queue
from precompute.feeds.client import redis_client
from precompute.feeds.keys import Keys
from precompute.settings import Settings

from .lab.results import table, write_result
from .lab.world import ROOT, make_world

FULL = dict(users=3000, items=45_000, events=600_000, rebuild_users=3000)
QUICK = dict(users=150, items=2000, events=15_000, rebuild_users=150)
MiB = 1 << 20


def similar_bytes(r, keys: Keys, s: Settings, sample: int = 2000) -> dict:
    """Bytes per item of the similar lists the workers wrote (``feeds/similar.py``): the value and MEMORY USAGE
    (key, value and Redis's per-key overhead) over a sample of the items, by list length, scaled to a million
    items as written and to 10 million items whose lists are all full."""
    found = list(r.scan_iter(match=f"{keys.prefix}similar:[0-9]*", count=10_000))
    pick = [found[i] for i in np.random.default_rng(0).permutation(len(found))[:sample]]
    pipe = r.pipeline(transaction=False)
    for key in pick:
        pipe.memory_usage(key, samples=0)
        pipe.strlen(key)
    vals = pipe.execute()
    mem, length = np.array(vals[0::2], dtype=float), np.array(vals[1::2], dtype=float)
    full = length == 4 + 8 * s.similar_length
    per_full = float(mem[full].mean()) if full.any() else float("nan")
    return dict(items=len(found), sampled=len(pick), value_bytes_mean=float(length.mean()),
                redis_bytes_mean=float(mem.mean()), listed_share=float((length > 4).mean()),
                redis_bytes_full_list=per_full, redis_bytes_empty_list=float(mem[length == 4].mean())
                if (length == 4).any() else float("nan"), similar_length=s.similar_length,
                mib_per_million_items=float(mem.mean()) * 1e6 / MiB,
                gib_10m_items_full=per_full * 1e7 / (1 << 30))


def run(quick: bool = False) -> dict:
    cfg = QUICK if quick else FULL
    world = make_world(cfg["users"], cfg["items"], cfg["events"], 30 if quick else Settings().train_iterations,
                       quick=quick)
    try:
        s = world.settings
        r = redis_client(s.redis_url)
        enqueue_batches(make_queue(s, r), range(1, cfg["rebuild_users"] + 1), s.batch_size, s)
        proc = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "worker", "--workers", "2", "--burst"],
                                env=world.env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        samples: dict[str, dict[int, tuple[float, float, float]]] = {"pool": {}, "worker": {}, "horse": {}}
        done = threading.Event()

        def sample() -> None:
            root = psutil.Process(proc.pid)
            while not done.is_set():
                try:
                    procs = [root] + root.children(recursive=True)
                except psutil.NoSuchProcess:
                    return
                for p in procs:
                    try:
                        info = p.memory_full_info()
                        depth = 0 if p.pid == root.pid else (1 if p.ppid() == root.pid else 2)
                    except (psutil.NoSuchProcess, psutil.AccessDenied):
                        continue
                    role = ("pool", "worker", "horse")[depth]
                    prev = samples[role].get(p.pid, (0, 0, 0))
                    samples[role][p.pid] = (max(prev[0], info.rss), max(prev[1], info.pss), max(prev[2], info.uss))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        proc.wait(timeout=900)
        done.set()
        sampler.join()

        keys = Keys(s.key_prefix)
        users = np.arange(1, cfg["rebuild_users"] + 1)
        pipe = r.pipeline(transaction=False)
        for u in users[:500]:
            pipe.memory_usage(keys.feed(int(u)), samples=0)
            pipe.strlen(keys.feed(int(u)))
        vals = pipe.execute()
        mem, length = np.array(vals[0::2], dtype=float), np.array(vals[1::2], dtype=float)

        rows = []
        out = dict(config=cfg, feed_value_bytes_mean=float(length.mean()),
                   feed_redis_bytes_mean=float(mem.mean()), feed_length=s.feed_length, processes={},
                   similar=similar_bytes(r, keys, s))
        for role in ("pool", "worker", "horse"):
            if not samples[role]:
                continue
            rss = np.array([v[0] for v in samples[role].values()]) / MiB
            pss = np.array([v[1] for v in samples[role].values()]) / MiB
            uss = np.array([v[2] for v in samples[role].values()]) / MiB
            out["processes"][role] = dict(count=len(rss), rss_mib_max=float(rss.max()), pss_mib_max=float(pss.max()),
                                          uss_mib_max=float(uss.max()), rss_mib_median=float(np.median(rss)),
                                          pss_mib_median=float(np.median(pss)))
            rows.append([role, len(rss), float(np.median(rss)), float(rss.max()), float(np.median(pss)),
                         float(pss.max()), float(uss.max())])
        print(table("memory during a rebuild through `manage.py worker --workers 2` (MiB, peak per process)",
                    ["process", "count", "RSS median", "RSS max", "PSS median", "PSS max", "USS max"], rows))
        print(f"feed in Redis: {out['feed_value_bytes_mean']:.0f} bytes of value, {out['feed_redis_bytes_mean']:.0f} "
              f"bytes with key and overhead (MEMORY USAGE), {s.feed_length} items max")
        sim = out["similar"]
        print(f"similar items in Redis: {sim['items']} items, {sim['value_bytes_mean']:.0f} bytes of value and "
              f"{sim['redis_bytes_mean']:.0f} with key and overhead (MEMORY USAGE) per item, "
              f"{sim['listed_share']:.0%} of items with neighbours; {sim['mib_per_million_items']:.0f} MiB per million "
              f"items, {sim['gib_10m_items_full']:.2f} GiB for 10 million items every one with "
              f"{s.similar_length} neighbours")
        print(f"wrote {write_result('memory', out, quick)}")
        return out
    finally:
        world.close()
