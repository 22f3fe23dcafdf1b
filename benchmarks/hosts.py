"""hosts: a full rebuild split across worker hosts that share one queue Redis, one feed store and one database.

The hosts are Linux network namespaces on this machine (``netns.Lab``: a server namespace running PostgreSQL, the
queue Redis and the feed store, and two worker hosts, each on its own link); everything talks over TCP exactly as
between machines, and the model directory is one directory all of them see, as a shared volume is in production.
The world is built with the CLI from a host (``init-db``, ``seed``, ``train``). Then, for each layout of worker
processes over the hosts (1 on h1; 1 + 1; 2 + 2 with ``manage.py worker --workers 2``):

- the workers start on their hosts (``ip netns exec pf-hK-… manage.py worker``, long-lived as in production) and
  start-up is timed until every worker process has registered with the queue (it loads the model bundle and the
  item matrices from the shared directory and the database before that, once, before forking);
- ``manage.py precompute --all`` enqueues the full rebuild from h1, and the rebuild is timed from the first job's
  enqueue to the last job's end (RQ's own timestamps), then checked: every user has a feed in the feed store
  (counted with SCAN under the key prefix) and no job failed. Which host ran each job comes from the address the
  queue Redis saw its worker connect from (RQ records it from CLIENT LIST), not from anything the worker says.

Workers already running when the rebuild is enqueued is how production runs them, and it keeps the comparison
about the rebuild: burst workers started together would race each other's start-up, and on a small rebuild the one
that starts first takes most of it. Speed-ups are against one worker process; this machine has 2 cores, which the
servers share with the workers, so 4 processes cannot beat 2 here.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from .lab import servers
from .lab.netns import Lab, stop, unavailable, wait_until
from .lab.results import median, table, write_result
from .lab.world import QUICK_TRAIN_PERIODS, ROOT, Skipped

FULL = dict(users=10_000, items=30_000, events=600_000, train_users=3000, iterations=None, batch=250,
            layouts=[(1, 0), (1, 1), (2, 2)], rounds=3)
QUICK = dict(users=400, items=2000, events=20_000, train_users=300, iterations=30, batch=25,
             layouts=[(1, 0), (1, 1)], rounds=1)


def run(quick: bool = False) -> dict:
    cfg = QUICK if quick else FULL
    reason = unavailable() or servers.missing_programs()
    if reason:
        raise Skipped(reason)
    tmp = Path(tempfile.mkdtemp(prefix="prefeed-hosts-"))
    tmp.chmod(0o711)      # the database runs as another user and needs to reach its directory inside
    lab = Lab(hosts=2)
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)      # so `finally` removes the namespaces
    failed = False
    try:
        lab.open()
        with lab.inside(lab.server):    # this process works from the server, like an operator's shell there
            return _measure(lab, tmp, cfg, quick)
    except Exception:
        failed = True
        raise
    finally:
        lab.close()
        signal.signal(signal.SIGTERM, previous)
        if failed:
            print(f"servers' and workers' logs kept in {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def _measure(lab: Lab, tmp: Path, cfg: dict, quick: bool) -> dict:
    from precompute.data import synthetic
    from precompute.feeds.client import redis_client
    from precompute.settings import Settings

    servers.start_postgres(lab, tmp)
    servers.start_redis(lab, tmp, "queue", servers.QUEUE_PORT)
    feeds = servers.start_feed_store(lab, tmp)
    # The same settings on every host; MODEL_DIR is one directory they all see (a shared volume in production).
    settings = servers.configure(Settings(
        database_url=servers.database_url(), redis_url=servers.queue_url(), model_dir=tmp / "models",
        var_dir=tmp / "var", item_attributes=synthetic.ATTRIBUTES, batch_size=cfg["batch"],
        **({"train_periods": QUICK_TRAIN_PERIODS} if quick else {})), feeds)
    env = settings.child_env()
    h1 = lab.hosts[0]

    def manage(*args: str, host: str = h1, **extra) -> float:
        t0 = time.perf_counter()
        lab.run(host, [sys.executable, str(ROOT / "manage.py"), *args], env={**env, **extra}, cwd=ROOT)
        return time.perf_counter() - t0

    setup = {"init_db_s": manage("init-db"),
             "seed_s": manage("seed", "--users", str(cfg["users"]), "--items", str(cfg["items"]), "--events",
                              str(cfg["events"]), "--seed", "1"),
             "train_s": manage("train", "--users", str(cfg["train_users"]), "--force",
                               *(["--iterations", str(cfg["iterations"])] if cfg["iterations"] else []))}
    t0 = time.perf_counter()
    probe = json.loads(lab.run(h1, [sys.executable, "-m", "benchmarks.hosts", "probe", str(time.time())], env=env,
                               cwd=ROOT).stdout.strip().splitlines()[-1])
    probe["process_s"] = time.perf_counter() - t0

    queue_r = redis_client(settings.redis_url)
    store = servers.FeedCounter(feeds, settings.key_prefix)
    # Rounds of every layout in turn, so a change in the machine's other load falls on all of them alike.
    load_before = os.getloadavg()[0]
    tries: dict[tuple, list[dict]] = {layout: [] for layout in cfg["layouts"]}
    for k in range(cfg["rounds"]):
        for layout in cfg["layouts"]:
            tries[layout].append(_rebuild(lab, tmp, dataclasses.replace(
                settings, queue_name=f"rebuild-{sum(layout)}-{k}"), layout, cfg, queue_r, store, manage))
    load_after = os.getloadavg()[0]
    store.close()
    queue_r.close()
    runs = []
    for layout, results in tries.items():
        res = sorted(results, key=lambda x: x["rebuild_s"])[(len(results) - 1) // 2]      # the median try
        res.update(rebuild_s_all=[x["rebuild_s"] for x in results], startup_s=median([x["startup_s"] for x in results]))
        res["speedup"] = runs[0]["rebuild_s"] / res["rebuild_s"] if runs else 1.0
        runs.append(res)

    print(table(f"hosts: full rebuild of {cfg['users']:,} users ({cfg['batch']} per job) from {len(lab.hosts)} "
                f"worker hosts; {feeds.describe}", ["workers", "hosts", "per host", "start-up s", "rebuild s",
                                                    "users/s", "speedup vs 1", "users done per host"],
                [[r["workers"], r["hosts"], r["per_host"], r["startup_s"], r["rebuild_s"], r["users_per_s"],
                  r["speedup"], " + ".join(str(n) for n in r["users_by_host"].values())] for r in runs]))
    print(f"worker start-up, measured alone on h1: {probe['process_s']:.2f} s for the process, of which launch and "
          f"imports {probe['import_s']:.2f} s and loading the model ({probe['trees']} trees) and the item matrices "
          f"({probe['items']:,} items) {probe['init_s']:.2f} s; set-up: seed {setup['seed_s']:.1f} s, "
          f"train {setup['train_s']:.1f} s (PostgreSQL over the link)")
    print(f"{os.cpu_count()} cores on this machine, shared by the servers and every worker host; medians of "
          f"{cfg['rounds']} rounds; load average {load_before:.1f} before the rounds, {load_after:.1f} after")
    out = dict(config={k: (list(map(list, v)) if k == "layouts" else v) for k, v in cfg.items()},
               cores=os.cpu_count(), namespaces=[lab.server, *lab.hosts], feed_store=feeds.describe, setup=setup,
               worker_startup=probe, runs=runs, load_average=[load_before, load_after],
               speedup={str(r["workers"]): r["speedup"] for r in runs})
    print(f"wrote {write_result('hosts', out, quick)}")
    return out


def _rebuild(lab: Lab, tmp: Path, settings, layout, cfg: dict, r, store, manage) -> dict:
    """Start the workers of ``layout`` (processes per host), enqueue a full rebuild from h1, wait for it, check it."""
    from rq.job import Job
    from rq.serializers import JSONSerializer

    from jobs.queues import make_queue

    store.delete_feeds()
    env = settings.child_env()
    total = sum(layout)
    queue = make_queue(settings, r)
    t0 = time.perf_counter()
    procs = [lab.spawn(host, [sys.executable, str(ROOT / "manage.py"), "worker", "--workers", str(n)], env=env,
                       cwd=ROOT, log=tmp / f"worker-{total}-{host}.log") for host, n in zip(lab.hosts, layout) if n]
    try:
        workers_key = f"rq:workers:{settings.queue_name}"
        wait_until(lambda: r.scard(workers_key) >= total, 300, f"workers registering (logs in {tmp})", procs=procs)
        startup = time.perf_counter() - t0
        # The address the queue Redis saw each worker connect from: which host it runs on.
        addresses = {key.decode().removeprefix("rq:worker:"): (r.hget(key, "ip_address") or b"").decode()
                     for key in r.smembers(workers_key)}
        enqueue_s = manage("precompute", "--all", PREFEED_QUEUE=settings.queue_name)
        n_jobs = math.ceil(cfg["users"] / cfg["batch"])
        registries = (queue.finished_job_registry, queue.failed_job_registry)
        wait_until(lambda: sum(reg.count for reg in registries) >= n_jobs, 1800, f"the rebuild (logs in {tmp})",
                   interval=0.05, procs=procs)
    finally:
        for proc in procs:
            stop(proc)
    jobs = Job.fetch_many(queue.finished_job_registry.get_job_ids(), connection=r, serializer=JSONSerializer)
    failed = queue.failed_job_registry.count
    feeds = store.count_feeds()
    if failed or len(jobs) != n_jobs or feeds != cfg["users"]:
        raise RuntimeError(f"rebuild with {total} workers: {failed} jobs failed, {len(jobs)}/{n_jobs} finished, "
                           f"{feeds}/{cfg['users']} feeds written (logs in {tmp})")
    seconds = (max(j.ended_at for j in jobs) - min(j.enqueued_at for j in jobs)).total_seconds()
    by_host = {lab.label(h): 0 for h in lab.hosts}
    jobs_by_host = dict(by_host)
    for job in jobs:
        host = lab.host_of(addresses.get(job.worker_name, ""))
        label = lab.label(host) if host else "unknown"
        by_host[label] = by_host.get(label, 0) + len(job.args[0])
        jobs_by_host[label] = jobs_by_host.get(label, 0) + 1
    return dict(workers=total, hosts=sum(1 for n in layout if n), per_host="+".join(str(n) for n in layout),
                startup_s=startup, enqueue_s=enqueue_s, rebuild_s=seconds, users=cfg["users"],
                users_per_s=cfg["users"] / seconds, jobs=len(jobs), failed_jobs=failed, feeds_written=feeds,
                users_by_host=by_host, jobs_by_host=jobs_by_host, worker_addresses=addresses)


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def probe(launched: float) -> None:
    """What a worker does before it takes its first job, timed: from its launch at epoch second ``launched`` to its
    imports done (the interpreter, numpy, CatBoost, SQLAlchemy, RQ), then ``context.init`` (mappers, the model
    bundle from MODEL_DIR, the item matrices from the database). Prints one JSON line."""
    import rq  # noqa: F401

    import cli  # noqa: F401
    from jobs import context
    from precompute.settings import Settings

    t1 = time.perf_counter()
    imported = time.time() - launched
    pipeline = context.init(Settings.from_env())
    print(json.dumps({"import_s": imported, "init_s": time.perf_counter() - t1, "items": len(pipeline.items),
                      "trees": int(pipeline.bundle.model.tree_count_)}))


if __name__ == "__main__" and sys.argv[1:2] == ["probe"]:
    probe(float(sys.argv[2]))
