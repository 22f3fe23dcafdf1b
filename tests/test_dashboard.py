"""The operator's views: ``manage.py status`` and GET /dashboard (status at a glance, feed age over time, and the
user lookup that says why a user sees what they see), behind the admin token; rq-dashboard mounted beside it."""

import base64
import dataclasses
import json
import re
import time

import pytest

from cli.net import start_valkey
from jobs.queues import make_queue, schedule_drain
from jobs.status import snapshot
from precompute.feeds.codec import encode
from precompute.feeds.dirty import DirtyUsers
from precompute.feeds.item_states import ItemStates
from precompute.feeds.keys import Keys
from precompute.feeds.store import FeedStore
from tests.conftest import manage, stored_pages

TOKEN = "test-admin-token-0123456789abcdef"


def basic(user: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_the_dashboard_asks_for_the_admin_token(app, world):
    # given no credentials: 401 with a basic-auth challenge, so a browser prompts; a JSON error all the same
    client = app.test_client()
    resp = client.get("/dashboard")
    assert resp.status_code == 401 and resp.headers["WWW-Authenticate"].startswith("Basic ")
    assert resp.json["error"]
    # given a wrong token, as bearer or as basic-auth password: 403
    # (a data key is a wrong one here: the dashboard needs the admin scope)
    for headers in ({"Authorization": "Bearer wrong"}, basic("admin", "wrong"), {"Authorization": "Basic %%%"},
                    {"Authorization": f"Bearer {world.key}"}, basic("admin", world.key)):
        resp = client.get("/dashboard", headers=headers)
        assert resp.status_code == 403 and resp.json["error"], headers
    # then the token gets in as a basic-auth password under any user name, or as a bearer token
    for headers in (basic("admin", TOKEN), basic("anyone", TOKEN), {"Authorization": f"Bearer {TOKEN}"}):
        resp = client.get("/dashboard", headers=headers)
        assert resp.status_code == 200 and resp.mimetype == "text/html", headers
    # and rq-dashboard, mounted beside it, is behind the same check
    assert client.get("/dashboard/rq/").status_code == 401
    assert client.get("/dashboard/rq/", headers=basic("x", "wrong")).status_code == 403
    assert client.get("/dashboard/rq/", headers=basic("x", TOKEN)).status_code == 200
    # and /openapi.json describes the dashboard's routes (the fuzzer's list of routes)
    paths = client.get("/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}).json["paths"]
    assert {"/dashboard", "/dashboard/status.json"} <= set(paths)


def test_the_dashboard_is_closed_without_a_token(settings):
    from api import create_app
    from api.services import services

    app = create_app(dataclasses.replace(settings, admin_token=None), {"TESTING": True})
    assert app.test_client().get("/dashboard", headers=basic("a", "")).status_code == 403
    services(app).engine.dispose()


def test_rq_dashboard_reads_prefeeds_json_jobs_and_refuses_foreign_posts(client, settings, r):
    # given a drain job on prefeed's queue (its arguments and meta stored as JSON)
    job = make_queue(settings, r).enqueue("jobs.tasks.drain_dirty", meta={"why": "test"})
    # when rq-dashboard shows it
    resp = client.get(f"/dashboard/rq/0/data/job/{job.id}.json", headers=basic("a", TOKEN))
    # then it reads it with the JSON serializer
    assert resp.status_code == 200 and "drain_dirty" in resp.json["description"]
    assert json.loads(resp.json["metadata"]) == {"why": "test"}
    # and bad paths are JSON 4xx, a state change posted from another site is refused
    assert client.get("/dashboard/rq/0/data/job/nope.json", headers=basic("a", TOKEN)).status_code == 404
    assert client.get("/dashboard/rq/7/data/queues.json", headers=basic("a", TOKEN)).status_code == 404
    # (the origin must be the dashboard's exactly: a host that merely starts with it is another site)
    for origin in ("https://evil.example", "http://localhost.evil.example", "http://localhost:80.evil.example",
                   "https://localhost", "http://localhost:8080", "http://localhost:x"):
        resp = client.post(f"/dashboard/rq/job/{job.id}/delete", headers={**basic("a", TOKEN), "Origin": origin})
        assert resp.status_code == 403 and resp.json["error"], origin
    assert r.exists(f"rq:job:{job.id}")
    # and one from the dashboard's own page goes through
    resp = client.post(f"/dashboard/rq/job/{job.id}/delete", headers={**basic("a", TOKEN),
                                                                      "Origin": "http://localhost"})
    assert resp.status_code == 200


def test_dashboard_pages_refuse_to_be_framed(client):
    for path in ("/dashboard", "/dashboard/status.json", "/dashboard/rq/"):
        resp = client.get(path, headers=basic("a", TOKEN))
        assert resp.headers["X-Frame-Options"] == "DENY", path
        assert resp.headers["Content-Security-Policy"] == "frame-ancestors 'none'", path


def test_the_status_snapshot_and_every_rq_panel_answer_are_never_stored(app, client, settings, r):
    job = make_queue(settings, r).enqueue("jobs.tasks.drain_dirty")
    auth = basic("a", TOKEN)
    # given the status snapshot and the RQ panel's pages, data, static files and refusals, as an admin reads them
    answers = {path: (status, client.get(path, headers=auth)) for path, status in [
        ("/dashboard", 200), ("/dashboard/status.json", 200), ("/dashboard/rq/", 200),
        ("/dashboard/rq/0/view/workers", 200), (f"/dashboard/rq/0/view/job/{job.id}", 200),
        ("/dashboard/rq/0/data/queues.json", 200), (f"/dashboard/rq/0/data/job/{job.id}.json", 200),
        ("/dashboard/rq/favicon.ico", 200), ("/dashboard/rq/static/css/main.css", 200),
        ("/dashboard/rq/0/data/job/nope.json", 404), ("/dashboard/rq/7/data/queues.json", 404)]}
    # (and as others are refused them)
    answers["no credentials"] = 401, app.test_client().get("/dashboard/rq/")
    answers["a data key"] = 403, client.get("/dashboard/status.json")
    answers["a foreign post"] = 403, client.post(f"/dashboard/rq/job/{job.id}/delete",
                                                 headers={**auth, "Origin": "https://evil.example"})
    # then none of them may be kept by a browser or a proxy
    for what, (status, resp) in answers.items():
        assert resp.status_code == status, what
        assert resp.headers.get("Cache-Control") == "no-store", what


def _rows(html: str, table: str) -> list[tuple[int, str]]:
    """(item id, row html) of each item row of the table with id ``table``."""
    body = re.search(rf'<table id="{table}">(.*?)</table>', html, re.S)
    return [(int(i), row) for i, row in re.findall(r'<tr data-item="(\d+)">(.*?)</tr>', body.group(1), re.S)] \
        if body else []


def test_the_user_lookup_shows_the_served_page_and_why(client, settings, r, pipeline, user_id, world):
    # given a user with a precomputed feed
    pipeline.recompute([user_id])
    feed = FeedStore(r, settings).read(user_id)
    ids = feed.items.tolist()
    keys = Keys(settings.key_prefix)
    # and, since: the 2nd item deactivated, the 3rd interacted with, the 15th boosted
    ItemStates(r, keys).set_active({ids[1]: False})
    r.zadd(keys.seen_recent(user_id), {str(ids[2]): feed.header.history_version + 1})
    ItemStates(r, keys).boost(ids[14], 5.0, time.time() + 600)
    served = client.get(f"/feed/{user_id}?limit=20").json
    # when the operator looks the user up
    resp = client.get(f"/dashboard?user={user_id}&limit=20", headers=basic("ops", TOKEN))
    assert resp.status_code == 200
    html = resp.get_data(as_text=True)
    # then the page lists exactly what /feed serves, in order, the boosted item marked with its organic rank
    rows = _rows(html, "feed-items")
    assert [i for i, _ in rows] == [it["item_id"] for it in served["items"]]
    boosted = [i for i, row in rows if "boosted" in row]
    assert boosted == [it["item_id"] for it in served["items"] if it["boosted"]] == [ids[14]]
    assert re.search(r'<td class="num">14</td>', dict(rows)[ids[14]])
    # and the dropped items, each with its reason
    dropped = dict(_rows(html, "dropped"))
    assert set(dropped) == {ids[1], ids[2]}
    assert "deactivated" in dropped[ids[1]] and "interacted with since" in dropped[ids[2]]
    # and the feed's stamps and the user's newest events
    assert f"model {world.version}" in html and "precomputed" in html
    assert re.search(r'<table id="events">.*?<td>(view|click|contact|purchase)</td>', html, re.S)


def test_the_user_lookup_says_what_the_users_stored_pages_showed(client, settings, r, pipeline, user_id):
    # given a user's feed, and two stored pages that showed its first item (at places 3 and 0), one its second
    pipeline.recompute([user_id])
    ids = [it["item_id"] for it in client.get(f"/feed/{user_id}?limit=5").json["items"]]
    pages = [(user_id, 100.0, 0, [ids[2], ids[1], ids[4], ids[0]]), (user_id, 200.0, 0, [ids[0]])]
    with stored_pages(pipeline.engine, 993_000 + user_id, pages):
        # when the operator looks the user up
        html = client.get(f"/dashboard?user={user_id}&limit=5", headers=basic("ops", TOKEN)).get_data(as_text=True)
        shown = {i: re.search(r'<td class="shown">(.*?)</td>', row).group(1) for i, row in _rows(html, "feed-items")}
        # then each item says how many of those pages showed it, the last one's time and its best place
        assert re.fullmatch(r"2 pages, last .+, best place 0", shown[ids[0]]), shown[ids[0]]
        assert re.fullmatch(r"1 page, last .+, best place 1", shown[ids[1]]), shown[ids[1]]
        assert "never" in shown[ids[3]]


def test_the_user_lookup_says_what_every_users_pages_did_with_each_item(client, settings, r, pipeline, user_id):
    from collections import Counter

    from sqlalchemy import delete

    from precompute.data import item_days
    from precompute.data.clock import newest_event
    from precompute.data.tables import ItemDay
    from precompute.experiments.intake import insert_for

    def everyone() -> dict[int, tuple[int, int, float] | None]:
        html = client.get(f"/dashboard?user={user_id}&limit=5", headers=basic("ops", TOKEN)).get_data(as_text=True)
        cells = {i: re.search(r'<td class="everyone">(.*?)</td>', row).group(1) for i, row in _rows(html, "feed-items")}
        out = {}
        for i, cell in cells.items():
            found = re.fullmatch(r"(\d+) shown, (\d+) acted, rate (\d+\.\d\d)%", cell)
            assert found or "never shown" in cell, cell
            out[i] = (int(found.group(1)), int(found.group(2)), float(found.group(3))) if found else None
        return out

    # given a user's feed, and what the lookup says of its items now (other tests' pages may have shown them)
    pipeline.recompute([user_id])
    ids = [it["item_id"] for it in client.get(f"/feed/{user_id}?limit=5").json["items"]]
    before = everyone()
    # when a day within the window (the complete days before today's) counts 40 impressions of the first item on
    # every user's pages, 3 events of one type and (the day before) 1 of another type attributed to them
    engine = pipeline.engine
    with engine.begin() as conn:
        day = item_days.day_of(min(newest_event(conn), time.time())) - 1
        item_days.add(conn, insert_for(engine), Counter({(ids[0], day, item_days.SHOWN): 40, (ids[0], day, 1): 3,
                                                         (ids[0], day - 1, 2): 1}))
    try:
        after = everyone()
    finally:
        with engine.begin() as conn:
            conn.execute(delete(ItemDay).where(ItemDay.item_id == ids[0], ItemDay.day >= day - 1,
                                               ItemDay.day <= day))
    # then the lookup counts them for that item, with its smoothed rate, and for no other
    shown, acted, _ = before[ids[0]] or (0, 0, 0.0)
    assert after[ids[0]][:2] == (shown + 40, acted + 4)
    assert 0 < after[ids[0]][2] < 100
    assert {i: after[i] for i in ids[1:]} == {i: before[i] for i in ids[1:]}


def test_a_user_without_a_feed_is_shown_the_fallback_and_nothing_is_scheduled(client, settings, r, user_id):
    # given a user with history and no feed under this test's prefix
    resp = client.get(f"/dashboard?user={user_id}", headers=basic("ops", TOKEN))
    # then the lookup says fallback, and looking did not mark the user dirty
    assert resp.status_code == 200 and '<b id="source">fallback</b>' in resp.get_data(as_text=True)
    assert DirtyUsers(r, settings).pending() == 0
    # and a user id that is no id is a JSON 400
    bad = client.get("/dashboard?user=12x", headers=basic("ops", TOKEN))
    assert bad.status_code == 400 and bad.json["error"]


def test_the_snapshot_counts_what_is_there(settings, r, world, own_users):
    # given 3 users with history: two with current feeds computed 100 s and 10 s ago, one behind its history
    (a, va), (b, vb), (c, vc) = _versions(world, own_users(3))
    now = time.time()
    store = FeedStore(r, settings)
    feed = lambda version, at: encode(*_ranked(), version, at, world.version)    # noqa: E731
    store.write_many([(a, feed(va, now - 100), va), (b, feed(vb, now - 10), vb), (c, feed(vc - 1, now - 50), vc - 1)])
    # and a user dirty since 30 s ago, a queued and a scheduled drain, a failed job
    DirtyUsers(r, settings).mark([a])
    queue = make_queue(settings, r)
    schedule_drain(settings, r, now + 300)
    failed = queue.enqueue("jobs.tasks.drain_dirty")
    queue.failed_job_registry.add(failed, ttl=600, exc_string="boom")
    queue.remove(failed)
    queue.enqueue("jobs.tasks.drain_dirty")
    # when status is taken 30 s later, reading every user's header (the other users have no feed here)
    s = snapshot(settings, world.engine, r, r, sample=10**6, now=now + 30)
    # then
    f = s["feeds"]
    n = f["users_with_history"]
    assert n > 4 and f["sampled_all"] and (f["sampled"], f["current"], f["behind_history"]) == (n, 2, 1)
    assert f["missing"] == n - 3 and f["coverage"] == pytest.approx(2 / n)
    assert f["age_p50_s"] == pytest.approx(80, abs=1) and f["age_p99_s"] == pytest.approx(129, abs=1)
    assert f["age_max_s"] == pytest.approx(130, abs=1)
    assert s["dirty"]["users"] == 1 and s["dirty"]["oldest_due_age_s"] == pytest.approx(30, abs=1)
    q = s["queues"][0]
    assert (q["name"], q["queued"], q["scheduled"], q["failed"]) == (settings.queue_name, 1, 1, 1)
    assert s["workers"] == [] and s["model"]["version"] == world.version and s["model"]["error"] is None
    assert s["model"]["ndcg10"] is not None
    # and feed age is kept for the chart at most once a minute
    assert len(s["freshness"]) == 1
    assert len(snapshot(settings, world.engine, r, r, now=now + 60)["freshness"]) == 1
    again = snapshot(settings, world.engine, r, r, now=now + 95)["freshness"]
    assert len(again) == 2 and again[0]["t"] < again[1]["t"]
    json.dumps(s)          # plain values only


def _versions(world, users: list[int]) -> list[tuple[int, int]]:
    """(user, history version) of each of ``users``."""
    from sqlalchemy import select

    from precompute.data.tables import User

    with world.engine.connect() as conn:
        versions = dict(conn.execute(select(User.id, User.history_version).where(User.id.in_(users))).all())
    return [(u, versions[u]) for u in users]


def _ranked():
    import numpy as np

    return np.arange(1, 11, dtype=np.int64), np.linspace(1, 0, 10).astype(np.float32)


def test_status_prints_state_and_no_secret(settings, tmp_path):
    # given a Redis that needs a password, and the admin token set
    import redis
    server = start_valkey()
    redis.Redis.from_url(server.connection_url).config_set("requirepass", "redis-pa55")
    try:
        url = server.connection_url.replace("redis://", "redis://:redis-pa55@")
        secret = dataclasses.replace(settings, redis_url=url, admin_token="s3cret-token")
        # when status runs as text and as JSON
        text = manage(secret, "status", "--sample", "50")
        as_json = manage(secret, "status", "--json", "--sample", "50")
    finally:
        server.stop()
    # then both describe the deployment
    assert text.returncode == 0 and as_json.returncode == 0, text.stderr + as_json.stderr
    assert "workers        0 alive" in text.stdout and "model" in text.stdout
    assert "a random sample of 50 read" in text.stdout
    s = json.loads(as_json.stdout)
    assert s["feeds"]["sampled"] == 50 and s["feeds"]["sampled_all"] is False and s["model"]["version"]
    # and neither shows a secret; the URL is shown with its password masked
    for out in (text.stdout + text.stderr, as_json.stdout + as_json.stderr):
        assert "redis-pa55" not in out and "s3cret-token" not in out
        assert ":***@127.0.0.1" in out


def test_status_shows_the_bundles_every_worker_holds_and_the_workers_memory(settings, tmp_path_factory):
    # given a marketplace of its own (experiments live in its database), its promoted bundle and a copy of it under
    # another version, an experiment with a model arm of the copy, and a worker running on this host
    import psutil
    from rq import Worker

    from precompute.data import bulk, engine as db, synthetic
    from precompute.experiments import registry
    from precompute.feeds.client import clients
    from precompute.learning.fit import fit_ranker
    from precompute.ranking import bundle
    from tests.conftest import own_database
    from tests.faults import spawn_worker, stop_worker

    url_gen = own_database(tmp_path_factory, "status")
    s = dataclasses.replace(settings, database_url=next(url_gen), model_dir=tmp_path_factory.mktemp("status-models"))
    engine = db.make_engine(s.database_url)
    worker = None
    try:
        db.init_db(engine, s)
        bulk.load(engine, synthetic.generate(200, 300, 10_000, seed=3, now=time.time()), s)
        fitted = fit_ranker(engine, s, iterations=10, users=200)
        promoted = bundle.write(s.model_dir, fitted.model, fitted.pairs, {"metrics": fitted.metrics})
        bundle.promote(s.model_dir, promoted)
        copy = bundle.write(s.model_dir, fitted.model, fitted.pairs, {"metrics": fitted.metrics})
        registry.create(engine, "next", [("control", "model:current"), ("copy", f"model:{copy}"),
                                         ("pop", "popular")], None, 1.0, s.model_dir)
        worker = spawn_worker(s)
        deadline = time.time() + 60
        queue = make_queue(s, clients(s)[0])
        while not Worker.all(queue=queue) and time.time() < deadline:
            time.sleep(0.2)
        # when status runs, as JSON and as text
        as_json = manage(s, "status", "--json", "--sample", "20")
        text = manage(s, "status", "--sample", "20")
        assert as_json.returncode == 0 and text.returncode == 0, as_json.stderr + text.stderr
        snap = json.loads(as_json.stdout)
        # then it lists the bundles every worker holds: the promoted one, and the copy with the arm that uses it
        # (the control arm is the promoted bundle: no extra one), each with its size on disk
        size = round(bundle.disk_bytes(s.model_dir / str(copy)) / (1 << 20), 1)
        assert snap["bundles"] == {
            "loaded": [{"version": promoted, "promoted": True, "arms": ["next/control"], "disk_mib": size},
                       {"version": copy, "promoted": False, "arms": ["next/copy"], "disk_mib": size}],
            "extra": 1, "extra_disk_mib": size}
        assert "bundles        2 loaded by every worker before fork (1 extra for experiments, " in text.stdout
        assert f"    {copy}  arm next/copy; {size:.1f} MiB on disk" in text.stdout
        # and the worker's resident memory, read on this host, is the process's own
        (w,) = snap["workers"]
        rss = psutil.Process(w["pid"]).memory_info().rss / (1 << 20)
        assert w["rss_mib"] is not None and abs(w["rss_mib"] - rss) < 0.2 * rss, (w, rss)
        assert f"RSS {w['rss_mib']:.0f} MiB" in text.stdout
        # and once the experiment stops, the copy is no longer among them
        registry.stop(engine, "next", None)
        after = json.loads(manage(s, "status", "--json", "--sample", "20").stdout)["bundles"]
        assert [b["version"] for b in after["loaded"]] == [promoted] and after["extra"] == 0
    finally:
        if worker is not None:
            stop_worker(worker)
        engine.dispose()
        next(url_gen, None)


def test_rq_panel_actions_work_behind_a_trusted_tls_proxy_and_refuse_a_foreign_origin(settings, r):
    from api import create_app
    from api.services import services

    # given an app behind the shipped nginx (a trusted proxy at 10.0.0.2) that ends TLS on port 8443
    app = create_app(dataclasses.replace(settings, trusted_proxies="10.0.0.2"), {"TESTING": True})
    client = app.test_client()
    behind = {"REMOTE_ADDR": "10.0.0.2"}
    proxied = {**basic("a", TOKEN), "Host": "feeds.example:8443", "X-Forwarded-Proto": "https"}
    job = make_queue(settings, r).enqueue("jobs.tasks.drain_dirty")
    # when the dashboard's own page (https://feeds.example:8443) posts through the proxy, it goes through
    resp = client.post(f"/dashboard/rq/job/{job.id}/delete", environ_base=behind,
                       headers={**proxied, "Origin": "https://feeds.example:8443"})
    assert resp.status_code == 200
    # and another site, or the right origin from a client that only claims the proxy's header, is refused
    job = make_queue(settings, r).enqueue("jobs.tasks.drain_dirty")
    for origin, remote in (("https://evil.example", "10.0.0.2"), ("https://feeds.example", "10.0.0.2"),
                           ("https://feeds.example:8443", "203.0.113.9")):
        resp = client.post(f"/dashboard/rq/job/{job.id}/delete", environ_base={"REMOTE_ADDR": remote},
                           headers={**proxied, "Origin": origin})
        assert resp.status_code == 403, (origin, remote)
    assert r.exists(f"rq:job:{job.id}")
    services(app).engine.dispose()
