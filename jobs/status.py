"""One snapshot of prefeed's state, for ``manage.py status`` and the dashboard: the queue and its registries, the
workers alive (with their resident memory, for those on this host), the current model, the bundles every worker
loads (the promoted one and the running experiments' model arms', with their size on disk), feed coverage and age
over a sample of users, the dirty set's oldest user, and the feed-age history.

It lives on the job side because it reads RQ's own records (queue, registries, workers) through RQ's classes; the
API imports it, and ``jobs.queues``, and nothing else of ``jobs/`` (``tests/test_settings.py``). Every value is a plain
number, string or None, so the snapshot is its own JSON; no URL is shown with its password and no token at all.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import redis
from rq import Worker

from precompute.data import users
from precompute.errors import BundleError
from precompute.experiments import method_of, registry
from precompute.experiments.experiment import RUNNING
from precompute.feeds import freshness, recovery
from precompute.feeds.keys import Keys
from precompute.ranking import bundle
from precompute.settings import Settings
from precompute.settings.connections import redact_url

from .queues import make_queue


def snapshot(settings: Settings, engine, queue_redis: redis.Redis, feed_redis: redis.Redis,
             sample: int | None = None, now: float | None = None, record: bool = True) -> dict:
    """The state of the deployment ``settings`` describes. ``sample``: users whose feed headers are read (default
    ``PREFEED_STATUS_SAMPLE``); ``record``: append this snapshot's feed age to the history (at most once a
    minute)."""
    now = time.time() if now is None else now
    keys = Keys(settings.key_prefix)
    model = model_status(settings.model_dir)
    total, versions = users.with_history(engine, sample or settings.status_sample)
    headers = freshness.read_headers(feed_redis, keys, [u for u, _ in versions])
    feeds = {"users_with_history": total, "sampled_all": len(versions) == total,
             **freshness.summarize(versions, headers, model.get("version"), now)}
    status = {
        "at": now,
        "redis": {"queue": redact_url(settings.queue_url or ""), "feeds": redact_url(settings.feed_url or "")},
        "database": redact_url(settings.database_url),
        **queue_status(settings, queue_redis, now),
        "dirty": dirty_status(queue_redis, keys, now),
        "model": model,
        "bundles": bundles_status(engine, settings.model_dir, model.get("version")),
        "feeds": feeds,
        "recovery": recovery.progress(queue_redis, keys, headers),     # after Redis lost its data
    }
    if record and feeds["age_p50_s"] is not None:
        freshness.record(queue_redis, keys, {"p50": feeds["age_p50_s"], "p99": feeds["age_p99_s"],
                                             "coverage": feeds["coverage"]}, settings.freshness_points, now)
    status["freshness"] = freshness.history(queue_redis, keys, settings.freshness_points)
    return status


def queue_status(settings: Settings, r: redis.Redis, now: float) -> dict:
    """prefeed's queue (``PREFEED_QUEUE``) with the size of each of its registries, and the workers listening to it
    (a worker is alive while its key exists: RQ lets it expire ``worker_ttl`` after the last heartbeat)."""
    queue = make_queue(settings, r)
    scheduled = queue.scheduled_job_registry
    first = r.zrange(scheduled.key, 0, 0, withscores=True)
    workers = []
    for w in sorted(Worker.all(queue=queue), key=lambda w: w.name):
        beat = w.last_heartbeat.timestamp() if w.last_heartbeat else None
        workers.append({"name": w.name, "hostname": w.hostname, "pid": w.pid, "state": str(w.get_state()),
                        "current_job": w.get_current_job_id(),
                        "last_heartbeat_age_s": None if beat is None else round(max(0.0, now - beat), 1),
                        "successful_jobs": w.successful_job_count, "failed_jobs": w.failed_job_count,
                        "rss_mib": local_rss_mib(w.hostname, w.pid)})
    return {
        "queues": [{"name": queue.name, "queued": queue.count, "started": queue.started_job_registry.count,
                    "scheduled": scheduled.count, "deferred": queue.deferred_job_registry.count,
                    "failed": queue.failed_job_registry.count, "finished": queue.finished_job_registry.count,
                    "next_scheduled_in_s": round(first[0][1] - now, 1) if first else None}],
        "workers": workers,
    }


def local_rss_mib(hostname: str | None, pid: int | None) -> float | None:
    """A process's resident memory (``VmRSS`` of ``/proc/<pid>/status``, MiB) when it runs on this host (Linux);
    None for a worker elsewhere or a process gone. Shared pages count in full: a worker's RSS includes the bundles
    and item matrices it shares with the processes forked beside it."""
    if not pid or hostname != socket.gethostname():
        return None
    try:
        with open(f"/proc/{int(pid)}/status") as f:
            kib = next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), None)
    except (OSError, ValueError):
        return None
    return None if kib is None else round(kib / 1024, 1)


def bundles_status(engine, model_dir: Path, promoted: int | None) -> dict:
    """The bundles a worker loads before fork and holds for its lifetime (``pipeline/arms.py``): the promoted one,
    and every other one a running experiment's model arm names, each once, with the arms that use it and its size
    on disk (its models and sources, ``bundle.disk_bytes``; the memory it takes in a worker is measured by ``python -m
    benchmarks precompute``, not here). ``extra``: the bundles beyond the promoted one."""
    used: dict[int, list[str]] = {} if promoted is None else {int(promoted): []}
    for e in registry.all_experiments(engine):
        for arm in e.arms if e.status == RUNNING else ():
            kind, version = method_of(arm.spec)
            if kind == "model":
                used.setdefault(int(version), []).append(f"{e.name}/{arm.name}")
    loaded = [{"version": v, "promoted": v == promoted, "arms": arms, "disk_mib": _disk_mib(Path(model_dir) / str(v))}
              for v, arms in sorted(used.items(), key=lambda kv: (kv[0] != promoted, kv[0]))]
    extra = [b for b in loaded if not b["promoted"]]
    return {"loaded": loaded, "extra": len(extra),
            "extra_disk_mib": round(sum(b["disk_mib"] or 0.0 for b in extra), 1)}


def _disk_mib(path: Path) -> float | None:
    try:
        return round(bundle.disk_bytes(path) / (1 << 20), 1) if path.is_dir() else None
    except OSError:
        return None


def dirty_status(r: redis.Redis, keys: Keys, now: float) -> dict:
    """Users waiting for a recompute. A user's score is the time from which a drain may claim them (an event sets
    it to then, or the end of their recompute interval; a claim pushes it a lease ahead), so the oldest due user's
    age is how long the drain has kept someone waiting since their last event."""
    pending = int(r.zcard(keys.dirty))
    due = int(r.zcount(keys.dirty, "-inf", now * 1000))
    first = r.zrange(keys.dirty, 0, 0, withscores=True)
    oldest = max(0.0, now - first[0][1] / 1000) if first and first[0][1] <= now * 1000 else None
    return {"users": pending, "due": due, "leased_or_waiting": pending - due,
            "oldest_due_age_s": None if oldest is None else round(oldest, 3)}


def model_status(model_dir: Path) -> dict:
    """The current bundle's version, training time and validation NDCG@10 against the best baseline, from its
    ``meta.json`` (the checksums are not recomputed here: ``models list`` checks them); ``error`` when there is
    no current bundle or its metadata cannot be read."""
    try:
        version = bundle.current_version(model_dir)
    except BundleError as exc:
        return {"version": None, "error": str(exc)}
    if version is None:
        return {"version": None, "error": f"no current bundle in {model_dir}; run `manage.py train`"}
    try:
        meta = json.loads((Path(model_dir) / str(version) / "meta.json").read_text())
    except (OSError, ValueError) as exc:
        return {"version": version, "error": f"bundle {version}: meta.json cannot be read ({type(exc).__name__})"}
    m = meta.get("metrics") if isinstance(meta.get("metrics"), dict) else {}
    ndcg, base = m.get("ndcg10"), m.get("baseline_ndcg10")
    return {"version": version, "trained_at": meta.get("created_at"), "data_clock": m.get("data_clock"),
            "ndcg10": ndcg, "baseline": m.get("baseline"), "baseline_ndcg10": base,
            "beats_baseline": None if ndcg is None or base is None else ndcg > base,
            "trees": m.get("trees", m.get("iterations")), "error": None}


def utc_text(ts) -> str:
    """Epoch seconds as a UTC time for people; an em dash when missing."""
    return "—" if not isinstance(ts, (int, float)) else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def age_text(seconds) -> str:
    """A duration for people: 42s, 3m 20s, 5h 02m, 2d 03h; an em dash when missing."""
    if seconds is None:
        return "—"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"
