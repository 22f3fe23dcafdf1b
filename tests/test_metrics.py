"""Prometheus metrics, scraped as Prometheus does: the API's ``/metrics`` under the real gunicorn ``manage.py serve``
starts (several worker processes adding up in one multiprocess directory) and through the app, and a running
worker's metrics port after it ran jobs. The text is parsed with prometheus_client's own parser."""

import dataclasses
import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cli.net import free_port, wait_for_http
from jobs.queues import enqueue_batches, make_queue, notify_changed
from precompute.feeds.codec import encode
from precompute.feeds.keys import Keys
from precompute.feeds.store import FeedStore
from precompute.ranking import bundle
from tests.conftest import ROOT
from tests.faults import spawn_worker, stop_worker, wait_until


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample of a scrape: (name, sorted labels) → value."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(scrape: dict, name: str, **labels) -> float:
    return scrape.get((name, tuple(sorted(labels.items()))), 0.0)


#: The settings' admin token: an admin key, which has the metrics:read and feed:read scopes.
ADMIN = {"Authorization": "Bearer test-admin-token-0123456789abcdef"}


def scrape_url(url: str, headers: dict | None = None) -> dict:
    request = urllib.request.Request(url, headers=ADMIN if headers is None else headers)
    return samples(urllib.request.urlopen(request, timeout=10).read().decode())


def _get(url: str, headers: dict | None = None):
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or ADMIN), timeout=10) as resp:
        return json.loads(resp.read()), resp.headers


def test_the_api_metrics_add_up_every_gunicorn_worker(settings, r, pipeline, own_users, admin, tmp_path):
    # given 4 users with precomputed feeds, one of their items boosted, and 2 users without a feed
    users = own_users(6)
    precomputed, without = users[:4], users[4:]
    pipeline.recompute(precomputed)
    boosted = FeedStore(r, settings).read(precomputed[0]).items[7]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = (tmp_path / "api.log").open("w")
    api = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "serve", "--port", str(port), "--workers", "2"],
                           env=settings.child_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_for_http(base + "/healthz", timeout=60)
        req = urllib.request.Request(f"{base}/boosts/{int(boosted)}", method="PUT", headers={
            **admin, "Content-Type": "application/json"}, data=b'{"weight": 5, "ttl_seconds": 600}')
        urllib.request.urlopen(req, timeout=10).read()
        # when the API serves each precomputed user 2 pages and each of the others one (the fallback), each a new
        # connection, so gunicorn's two workers share them
        served_boosted, sources = 0, []
        for u in precomputed:
            for offset in (0, 20):
                body, _ = _get(f"{base}/feed/{u}?offset={offset}")
                sources.append(body["source"])
                served_boosted += sum(x["boosted"] for x in body["items"])
        for u in without:
            body, _ = _get(f"{base}/feed/{u}")
            sources.append(body["source"])
        assert sources == ["precomputed"] * 8 + ["fallback"] * 2 and served_boosted >= 1
        # and a process caught between creating its metrics file and sizing it (a gunicorn worker starting)
        (Path(settings.var_dir) / "metrics" / f"api-{port}" / "counter_1.db").touch()
        # then every scrape, whichever worker answers it, counts every request of both
        for _ in range(4):
            m = scrape_url(base + "/metrics")
            assert value(m, "prefeed_feeds_served_total", source="precomputed") == 8
            assert value(m, "prefeed_feeds_served_total", source="fallback") == 2
            assert value(m, "prefeed_boosted_items_served_total") == served_boosted
            assert value(m, "prefeed_feed_age_seconds_count") == 8
            assert value(m, "prefeed_http_request_duration_seconds_count", route="/feed/<user_id>", method="GET",
                         status="200") == 10
            # and no label carries a raw path (a user id): routes are URL rules
            assert not [k for k in m if any(v.startswith("/feed/") and v != "/feed/<user_id>" for _, v in k[1])]
            # and the queue's global state is read from Redis: the 2 users without a feed wait in the dirty set,
            # and one drain job in the queue
            assert value(m, "prefeed_dirty_users") == 2
            assert value(m, "prefeed_queue_jobs", state="queued") == 1
            assert value(m, "prefeed_queue_jobs", state="failed") == 0
        # when both gunicorn workers are killed and replaced by fresh ones that served nothing
        master = psutil.Process(api.pid)
        old = master.children()
        assert len(old) == 2
        for child in old:
            child.send_signal(signal.SIGKILL)
        wait_until(lambda: len([c for c in master.children() if c not in old]) == 2, 30, "two new gunicorn workers")
        wait_for_http(base + "/healthz", timeout=30)
        # then the counts of the dead ones are still in the totals
        m = scrape_url(base + "/metrics")
        assert value(m, "prefeed_feeds_served_total", source="precomputed") == 8
    finally:
        api.terminate()
        api.wait(timeout=30)
        log.close()
    # and each request was one JSON line on stderr, with its request id
    lines = [json.loads(x) for x in (tmp_path / "api.log").read_text().splitlines() if x.startswith("{")]
    feed_lines = [x for x in lines if x.get("route") == "/feed/<user_id>"]
    assert len(feed_lines) == 10 and all(len(x["request_id"]) == 32 and x["status"] == 200 for x in feed_lines)


def test_the_app_labels_routes_not_paths_and_reports_the_dirty_set(client, settings, r):
    # given users marked dirty 30 s ago (due then) and requests to a path no route matches, with an odd method
    r.zadd(Keys(settings.key_prefix).dirty, {"11": (time.time() - 30) * 1000, "12": time.time() * 1000})
    for k in range(3):
        assert client.get(f"/nothing/here/{k}").status_code == 404
    assert client.open("/feed/1", method="BREW").status_code == 405
    # when /metrics is scraped through the app
    m = samples(client.get("/metrics", headers=ADMIN).data.decode())
    # then the unmatched paths share one label (a method no rule takes too), the method is "other", and the dirty set's first user has been
    # due about 30 s
    assert value(m, "prefeed_http_request_duration_seconds_count", route="<unmatched>", method="GET",
                 status="404") == 3
    assert value(m, "prefeed_http_request_duration_seconds_count", route="<unmatched>", method="other",
                 status="405") == 1
    assert value(m, "prefeed_dirty_users") == 2
    assert 29 <= value(m, "prefeed_dirty_oldest_age_seconds") < 60


@pytest.mark.parametrize("workers", [1, 2])
def test_a_worker_serves_the_metrics_of_the_jobs_it_ran(settings, r, world, tmp_path, workers, own_users):
    # given a running worker (a pool of 2 worker processes, or one) serving metrics on a port
    port = free_port()
    s = dataclasses.replace(settings, worker_metrics_port=port)
    users = own_users(12)
    # and one user whose stored feed has a newer history version than any job will compute
    store = FeedStore(r, s)
    assert store.write_many([(users[0], encode(*_one_item(), 10**9, time.time(), world.version), 10**9)]) == [True]
    queue = make_queue(s, r)
    with (tmp_path / "worker.log").open("w") as log:
        worker = spawn_worker(s, "--workers", str(workers), log=log)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        wait_for_http(url, timeout=60)
        # and a process caught between creating its metrics file and sizing it (prometheus_client does it in two
        # steps; a pool's worker process does it at its first job, as scrapes come in)
        files = Path(s.var_dir) / "metrics" / f"worker-{port}"
        (files / "counter_1.db").touch()
        # when it runs three 4-user jobs, a drain job for 5 dirty users and a job that raises (no retries)
        enqueue_batches(queue, users, 4, s)
        notify_changed(s, r, own_users(5))
        queue.enqueue("tests.faults.fail_first", f"{s.key_prefix}fails", 1)

        def ran() -> dict:
            m = scrape_url(url)
            done = sum(value(m, "prefeed_jobs_total", function=f, outcome=o) for f, o in (
                ("recompute_users", "finished"), ("drain_dirty", "finished"), ("fail_first", "failed")))
            return m if done == 5 else {}

        wait_until(ran, 60, "5 jobs in the worker's metrics")
        m = ran()
        # then the counts are the jobs': 17 users ranked, 16 feeds written, one kept by the version guard
        assert value(m, "prefeed_users_scored_total") == 17
        assert value(m, "prefeed_feeds_written_total") == 16
        assert value(m, "prefeed_version_guard_rejections_total") == 1
        assert value(m, "prefeed_items_scored_total") > 17
        for stage in ("history", "candidates", "features", "model", "store"):
            assert value(m, "prefeed_job_stage_seconds_count", stage=stage) == 4
            assert value(m, "prefeed_job_stage_seconds_sum", stage=stage) > 0
        assert value(m, "prefeed_job_duration_seconds_count", function="recompute_users") == 3
        assert value(m, "prefeed_model_version") == bundle.current_version(s.model_dir)
        assert value(m, "prefeed_bundle_loads_total") == 1
        # and only the long-lived worker processes wrote metrics files, never the 5 work horses
        (files / "counter_1.db").unlink()
        pids = {p.stem.rsplit("_", 1)[-1] for p in files.glob("*.db")}
        assert len(pids) <= workers + (1 if workers > 1 else 0)
    finally:
        stop_worker(worker)
    # and each job was one JSON line: its id, outcome, users and stage times
    lines = [json.loads(x) for x in (tmp_path / "worker.log").read_text().splitlines() if x.startswith("{")]
    jobs = sorted((x["function"], x["outcome"], x["users"]) for x in lines if x.get("msg") == "job")
    assert jobs == [("drain_dirty", "finished", 5), ("fail_first", "failed", None),
                    *[("recompute_users", "finished", 4)] * 3]
    assert all(set(x["stages_ms"]) == {"history", "candidates", "features", "model", "store"} and x["job_id"]
               for x in lines if x.get("outcome") == "finished")


def _one_item():
    import numpy as np

    return np.array([1], dtype=np.int64), np.array([1.0], dtype=np.float32)
