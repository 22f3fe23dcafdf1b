"""An experiment's report and the records it rests on: ``judge`` finds a lift, no lift and a reversed lift on per-user
arrays, and refuses a verdict when the split is not the shares; ``experiments report --json`` counts exactly what the
database holds plus the pages still in Redis, and refuses a bad input with one line, exit 2 and nothing collected;
pages an API process served reach the database across a graceful restart of ``manage.py serve`` (its exit hook
sends them); serving pages schedules one collector job, not one per page; a page served under a long request id is
collected like any other."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import signal
import subprocess
import sys
import time
import urllib.request
import uuid

import numpy as np
import pytest
from sqlalchemy import insert, select

from cli.net import free_port, wait_for_http
from jobs.queues import COLLECT, make_queue
from precompute.data import api_keys, bulk, engine as db, synthetic
from precompute.data.tables import Attribution, Event, Exposure, ServedPage
from precompute.experiments import assign_one, registry
from precompute.experiments.collect import collect
from precompute.experiments.impressions import pack
from precompute.experiments.report import build, interval, judge, resampled_means
from precompute.feeds.client import redis_client
from precompute.feeds.keys import Keys
from precompute.settings import Settings
from tests.conftest import ROOT, delete_own_keys, manage, own_database

TYPES = ("view", "click", "contact", "purchase")
VIEW, CLICK = 1, 2
_event_ids = itertools.count(1)


@pytest.fixture
def own(tmp_path_factory, redis_url):
    """Settings and an engine on a database of this test's own (tables created, nothing in them), the test Redis
    under a key prefix and queue of its own, pages flushed every 10 ms (the report waits two flushes and a second)."""
    for url in own_database(tmp_path_factory, "report"):
        tag = uuid.uuid4().hex[:10]
        settings = Settings(database_url=url, redis_url=redis_url, model_dir=tmp_path_factory.mktemp("models"),
                            var_dir=tmp_path_factory.mktemp("var"), key_prefix=f"pftest:{tag}:",
                            queue_name=f"pftest-{tag}", impressions_flush_ms=10)
        engine = db.make_engine(url)
        db.init_db(engine, settings)
        yield settings, engine
        engine.dispose()
        delete_own_keys(settings)


@pytest.fixture
def r(own):
    client = redis_client(own[0].redis_url)
    yield client
    client.close()


def users_of(experiment, arm: int, n: int, start: int = 1) -> list[int]:
    """The first ``n`` user ids from ``start`` that ``experiment`` places in ``arm``."""
    ids = np.arange(start, start + 50 * n + 100, dtype=np.int64)
    return ids[experiment.arm_of(ids) == arm][:n].tolist()


def expose(engine, experiment_id: int, arm: int, rows: list[tuple[int, int, int]]) -> None:
    """``exposures`` rows ``(user, pages, impressions)``, as the collector would have stored them."""
    with engine.begin() as conn:
        conn.execute(insert(Exposure), [dict(experiment=experiment_id, arm=arm, user_id=u, pages=p, impressions=m,
                                             first_served_at=1000.0) for u, p, m in rows])


def attribute(engine, experiment_id: int, arm: int, per_user: dict[int, int], type_code: int) -> None:
    """``per_user[u]`` attributed events of ``type_code`` for each user, as the collector would have stored them."""
    rows = [dict(event_id=next(_event_ids), experiment=experiment_id, arm=arm, user_id=u, type=type_code,
                 position=0, served_at=1000.0) for u, n in per_user.items() for _ in range(n)]
    if rows:
        with engine.begin() as conn:
            conn.execute(insert(Attribution), rows)


def one_line_error(done, code: int, fragment: str) -> None:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert fragment in done.stderr, done.stderr
    assert done.stdout == "", done.stdout


# -- judge: the verdict on per-user arrays ---------------------------------------------------------------------------

def test_a_clear_lift_wins_equal_arms_have_no_verdict_and_a_reversed_lift_gives_the_control():
    rng = np.random.default_rng(11)
    control = rng.poisson(0.5, 3000)
    double = rng.poisson(1.0, 3000)
    # given a treatment whose users do twice what the control's do, then it wins, its interval above 1, around 2
    lift = judge([control, double], [0.5, 0.5])
    assert lift.verdict == 1
    assert lift.ratios[0] == 1.0 and lift.intervals[0] is None
    assert lift.ratios[1] == pytest.approx(double.mean() / control.mean())
    lo, hi = lift.intervals[1]
    assert 1 < lo < lift.ratios[1] < hi and 1.7 < lo and hi < 2.4, lift.intervals[1]
    # given two arms of the very same users' values, then no verdict: the interval holds 1
    same = judge([control, control.copy()], [0.5, 0.5])
    assert same.verdict is None and same.ratios[1] == 1.0
    assert same.intervals[1][0] < 1 < same.intervals[1][1]
    # given the lift reversed, then the control wins: the treatment's interval lies below 1
    reversed_ = judge([double, control], [0.5, 0.5])
    assert reversed_.verdict == 0 and reversed_.intervals[1][1] < 1
    # given three arms, two above the control, then the one of the higher ratio wins
    more = judge([control, rng.poisson(0.75, 3000), double], [1 / 3, 1 / 3, 1 / 3])
    assert more.intervals[1][0] > 1 and more.intervals[2][0] > 1 and more.verdict == 2
    # and equal user counts at equal shares are no sample-ratio concern
    assert lift.sample_ratio_p == pytest.approx(1.0)


def test_a_split_unlike_the_shares_has_a_tiny_sample_ratio_p():
    # given 700 against 300 exposed users
    a, b = np.ones(700, dtype=np.int64), np.ones(300, dtype=np.int64)
    # when the shares say 0.5/0.5, then p is tiny; when they say 0.7/0.3, it is no concern at all
    assert judge([a, b], [0.5, 0.5]).sample_ratio_p < 0.001
    assert judge([a, b], [0.7, 0.3]).sample_ratio_p == pytest.approx(1.0)


def test_the_report_gives_no_verdict_when_the_split_is_not_the_shares(own):
    # given an experiment of two equal shares whose exposed users split 700/300, the treatment doing twice as much
    settings, engine = own
    e = registry.create(engine, "skewed", [("control", "popular"), ("treat", "recent:1d")], None, 1.0,
                        settings.model_dir)
    control, treat = list(range(1, 701)), list(range(1001, 1301))
    expose(engine, e.id, 0, [(u, 1, 10) for u in control])
    expose(engine, e.id, 1, [(u, 1, 10) for u in treat])
    attribute(engine, e.id, 0, {u: u % 2 for u in control}, CLICK)          # 0.5 per user
    attribute(engine, e.id, 1, {u: 1 for u in treat}, CLICK)                # 1 per user
    # then the ratio alone would name the treatment
    alone = judge([np.arange(1, 701) % 2, np.ones(300, dtype=np.int64)], [0.5, 0.5])
    assert alone.verdict == 1 and alone.sample_ratio_p < 0.001
    # but the report flags the split and gives no verdict
    out = build(engine, e, TYPES, "click")
    assert out["sample_ratio_flagged"] is True and out["verdict"] is None
    assert out["sample_ratio_p"] == pytest.approx(alone.sample_ratio_p)
    assert [a["users"] for a in out["arms"]] == [700, 300] and [a["ratio"] for a in out["arms"]] == [1.0, 2.0]


def test_the_bootstrap_interval_of_a_mean_covers_it():
    rng = np.random.default_rng(5)
    # given half zeros and half ones (mean 0.5, standard error 0.5 / sqrt(1000))
    half = np.array([0] * 500 + [1] * 500)
    lo, hi = interval(resampled_means(half, rng))
    # then the interval holds 0.5, about 1.96 standard errors either side
    assert lo < 0.5 < hi and hi - lo == pytest.approx(2 * 1.96 * 0.5 / np.sqrt(1000), rel=0.15)
    # and over 200 samples of 400 users from a Poisson of mean 2, about 95% of the intervals hold 2
    covered = 0
    for _ in range(200):
        lo, hi = interval(resampled_means(rng.poisson(2.0, 400), rng))
        covered += lo <= 2.0 <= hi
    assert 0.90 <= covered / 200 <= 0.99, covered
    # and an arm without users has no interval
    assert interval(resampled_means(np.array([], dtype=np.int64), rng)) is None


# -- experiments report ----------------------------------------------------------------------------------------------

def lift(settings, engine, r) -> list[int]:
    """An experiment ``lift`` of two equal arms, four users of each exposed: the control's four and three of the
    treatment's stored, the fourth's page still in Redis; one click per control user, two per treatment user,
    three views of one control user; and a click of a control user in another experiment, which ``lift``'s report
    does not count. Returns the treatment's users."""
    e = registry.create(engine, "lift", [("control", "popular"), ("treat", "recent:1d")], None, 1.0,
                        settings.model_dir)
    control, treat = users_of(e, 0, 4), users_of(e, 1, 4)
    expose(engine, e.id, 0, [(control[0], 2, 20), (control[1], 1, 10), (control[2], 1, 10), (control[3], 1, 10)])
    expose(engine, e.id, 1, [(u, 1, 10) for u in treat[:3]])
    r.rpush(Keys(settings.key_prefix).impressions, pack(77, 1, treat[3], e.id, 1, 1000.0, 0, [11, 12, 13], "late"))
    attribute(engine, e.id, 0, {u: 1 for u in control}, CLICK)
    attribute(engine, e.id, 1, {u: 2 for u in treat}, CLICK)
    attribute(engine, e.id, 0, {control[0]: 3}, VIEW)
    attribute(engine, e.id + 100, 0, {control[0]: 5}, CLICK)
    return treat


def test_report_json_counts_exposures_attributions_and_the_pages_still_in_redis(own, r):
    # given the experiment ``lift`` (see there), one treatment user's page still in Redis
    settings, engine = own
    treat = lift(settings, engine, r)
    # when the report runs
    done = manage(settings, "experiments", "report", "lift", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    # then it names the experiment, the metric (click by default) and what it means
    assert set(out) == {"name", "status", "metric", "metric_means", "arms", "verdict", "sample_ratio_p",
                        "sample_ratio_flagged"}
    assert (out["name"], out["status"], out["metric"]) == ("lift", "running", "click")
    assert out["metric_means"] == "attributed click events per exposed user"
    control_arm, treat_arm = out["arms"]
    assert set(control_arm) == {"name", "spec", "share", "users", "pages", "impressions", "events", "ratio",
                                "ratio_interval"}
    # and the control's counts are the stored rows'
    assert (control_arm["name"], control_arm["spec"], control_arm["share"]) == ("control", "popular", 0.5)
    assert (control_arm["users"], control_arm["pages"], control_arm["impressions"]) == (4, 5, 50)
    assert set(control_arm["events"]) == set(TYPES)
    assert control_arm["events"]["click"] == {"attributed": 4, "per_user": 1.0, "per_impression": 4 / 50,
                                              "interval": [1.0, 1.0]}
    view = control_arm["events"]["view"]
    assert (view["attributed"], view["per_user"], view["per_impression"]) == (3, 0.75, 3 / 50)
    assert control_arm["events"]["purchase"] == {"attributed": 0, "per_user": 0.0, "per_impression": 0.0,
                                                 "interval": [0.0, 0.0]}
    assert (control_arm["ratio"], control_arm["ratio_interval"]) == (1.0, None)
    # and the treatment's include the page that was still in Redis (its user, page and three items)
    assert (treat_arm["name"], treat_arm["users"], treat_arm["pages"], treat_arm["impressions"]) == ("treat", 4, 4, 33)
    assert treat_arm["events"]["click"] == {"attributed": 8, "per_user": 2.0, "per_impression": 8 / 33,
                                            "interval": [2.0, 2.0]}
    # and every treatment user doing exactly twice what every control user does is a ratio of 2, surely
    assert (treat_arm["ratio"], treat_arm["ratio_interval"]) == (2.0, [2.0, 2.0])
    assert out["verdict"] == "treat"
    assert out["sample_ratio_p"] == pytest.approx(1.0) and out["sample_ratio_flagged"] is False
    # and the page was moved from Redis to the database
    assert r.llen(Keys(settings.key_prefix).impressions) == 0
    with engine.connect() as conn:
        assert conn.execute(select(ServedPage.request_id, ServedPage.user_id)).all() == [("late", treat[3])]
    # when the metric is views, then the ratio is the treatment's none over the control's 0.75
    done = manage(settings, "experiments", "report", "lift", "--json", "--metric", "view")
    assert done.returncode == 0, done.stderr
    by_view = json.loads(done.stdout)
    assert by_view["metric"] == "view" and [a["ratio"] for a in by_view["arms"]] == [1.0, 0.0]


def test_report_as_a_table_shows_each_arm_the_verdict_and_the_sample_ratio_check(own, r):
    # given the experiment ``lift`` (see there)
    settings, engine = own
    lift(settings, engine, r)
    # when the report runs without --json, then it is a table of a line per arm, the verdict and the sample ratio
    done = manage(settings, "experiments", "report", "lift")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:7] == ["ARM", "SPEC", "SHARE", "USERS", "PAGES", "IMPRESSIONS", "CLICK"]
    assert [line.split()[:7] for line in lines[1:3]] == [["control", "popular", "0.5", "4", "5", "50", "4"],
                                                          ["treat", "recent:1d", "0.5", "4", "4", "33", "8"]]
    assert lines[2].endswith("2 [2, 2]")
    assert lines[3:] == ["verdict on attributed click events per exposed user: treat", "sample ratio: p = 1 (fine)"]


@pytest.mark.parametrize("args,fragment", [
    (("experiments", "report", "nope", "--json"), "no experiment is called 'nope'"),
    (("experiments", "report", "lift", "--metric", "likes"), "--metric 'likes': not an event type"),
    (("experiments", "report", "lift", "--metric", "likes", "--json"), "--metric 'likes': not an event type"),
])
def test_a_bad_report_input_is_one_line_exit_2_and_nothing_collected(own, r, args, fragment):
    # given the experiment ``lift`` (see there): exposures stored and a page waiting in Redis
    settings, engine = own
    lift(settings, engine, r)
    key = Keys(settings.key_prefix).impressions
    # when the report is asked with a bad input, then it says so in one line and exits 2
    one_line_error(manage(settings, *args), 2, fragment)
    # and nothing was collected: the page still waits in Redis, and the tables are as they were
    assert r.llen(key) == 1
    with engine.connect() as conn:
        assert conn.execute(select(ServedPage)).all() == []
        assert len(conn.execute(select(Exposure)).all()) == 7


# -- impressions across a restart of the API ------------------------------------------------------------------------

@contextlib.contextmanager
def serving(settings: Settings, log_path):
    """``manage.py serve`` (one worker process) on a free port; yields its base URL and process once ``/healthz``
    answers, and makes sure it is gone at the end."""
    port = free_port()
    with log_path.open("w") as log:
        api = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "serve", "--port", str(port), "--workers", "1",
                                "--threads", "4"], env=settings.child_env(), cwd=ROOT, stdout=subprocess.DEVNULL,
                               stderr=log)
        try:
            wait_for_http(f"http://127.0.0.1:{port}/healthz", timeout=60)
            yield f"http://127.0.0.1:{port}", api
        finally:
            if api.poll() is None:
                api.kill()
                api.wait(timeout=30)


def read_page(base: str, user: int, key: str, request_id: str) -> dict:
    req = urllib.request.Request(f"{base}/feed/{user}?limit=5",
                                 headers={"Authorization": f"Bearer {key}", "X-Request-ID": request_id})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
        return json.loads(resp.read())


def stop(api: subprocess.Popen) -> None:
    """The graceful stop an orchestrator sends: SIGTERM, then wait for gunicorn to exit."""
    api.send_signal(signal.SIGTERM)
    assert api.wait(timeout=30) == 0


def test_pages_served_just_before_a_graceful_stop_survive_the_restart(own, r, tmp_path):
    # given a small marketplace, an experiment over all its users, and the API sending its pages to Redis only
    # once a minute: a page can reach Redis only through the exit hook
    settings, engine = own
    settings = dataclasses.replace(settings, impressions_flush_ms=60_000)
    bulk.load(engine, synthetic.generate(30, 200, 600, seed=3, now=time.time()), settings)
    key = api_keys.create(engine, "restart", frozenset({"feed:read"}))
    e = registry.create(engine, "restart", [("control", "popular"), ("treat", "recent:1d")], None, 1.0,
                        settings.model_dir)
    tag = uuid.uuid4().hex[:8]
    read = {}
    users = with_events(engine, 4)
    # when three pages are read and the API is stopped at once (SIGTERM), then started again and one more page is
    # read and it is stopped again
    with serving(settings, tmp_path / "first.log") as (base, api):
        for user in users[:3]:
            read[f"before-{tag}-{user}"] = read_page(base, user, key, f"before-{tag}-{user}")
        stop(api)
    # then the stopped process sent its three pages on its way out
    assert r.llen(Keys(settings.key_prefix).impressions) == 3
    with serving(settings, tmp_path / "second.log") as (base, api):
        read[f"after-{tag}-4"] = read_page(base, users[3], key, f"after-{tag}-4")
        stop(api)
    # and the collector stores every page read, under its request id, with its user, items, time and arm
    done = collect(engine, r, settings)
    assert (done.pages, done.stored, done.lost, done.malformed) == (4, 4, 0, 0)
    with engine.connect() as conn:
        stored = {p.request_id: p for p in conn.execute(select(ServedPage))}
    assert sorted(stored) == sorted(read)
    for rid, body in read.items():
        page = stored[rid]
        assert page.user_id == body["user_id"] and page.served_at == body["served_at"]
        assert np.frombuffer(page.items, dtype="<i8").tolist() == [i["item_id"] for i in body["items"]]
        assert len(body["items"]) == 5 and body["source"] == "fallback"
        # a fallback page is in the arm its user is placed in
        arm = assign_one([e], page.user_id)[1]
        assert (page.experiment, page.arm) == (e.id, arm) and body["arm"] == e.arms[arm].name
    # and two processes wrote them: the first server's and the second's, each numbering its own pages from 1
    assert sorted(p.seq for p in stored.values()) == [1, 1, 2, 3]
    assert len({p.writer for p in stored.values()}) == 2


# -- the collector job ---------------------------------------------------------------------------------------------

def test_serving_pages_schedules_one_collector_job_not_one_per_page(own):
    # given an app sending its pages every 10 ms
    settings, _ = own
    with app_on(own, seed=4, key_name="schedule") as (key, svc, client):
        r = svc.queue_redis
        impressions = Keys(settings.key_prefix).impressions
        queue = make_queue(settings, r)
        # when five pages are served, each sent to Redis on its own (one flush each)
        for k, user in enumerate(with_events(svc.engine, 5)):
            reply = client.get(f"/feed/{user}", headers={"Authorization": f"Bearer {key}"})
            assert reply.status_code == 200
            deadline = time.monotonic() + 5
            while r.llen(impressions) < k + 1 and time.monotonic() < deadline:
                time.sleep(0.005)
            assert r.llen(impressions) == k + 1 and svc.impressions.waiting() == 0
        # then one collector job is scheduled, after the first page, for PREFEED_IMPRESSIONS_COLLECT_INTERVAL later
        scheduled = [queue.fetch_job(j) for j in queue.scheduled_job_registry.get_job_ids()]
        collectors = [j for j in scheduled if j.func_name == COLLECT]
        assert len(collectors) == 1, [j.func_name for j in scheduled]
        at = queue.scheduled_job_registry.get_scheduled_time(collectors[0])
        assert 0 < at.timestamp() - time.time() <= settings.impressions_collect_interval + 1
        assert list(collectors[0].args) == [] and not collectors[0].kwargs      # a wire format: nothing to pass


def test_a_page_served_under_a_long_request_id_is_collected_and_does_not_block_the_pages_after_it(own):
    # given an app and a client that names its requests with ids of 100 characters, which the API accepts
    settings, engine = own
    sent = ["l" * 100, "short-after-long"]
    with app_on(own, seed=5, key_name="long-ids") as (key, svc, client):
        for user, rid in zip(with_events(svc.engine, 2), sent):
            reply = client.get(f"/feed/{user}", headers={"Authorization": f"Bearer {key}", "X-Request-ID": rid})
            assert reply.status_code == 200 and reply.headers["X-Request-ID"] == rid
        svc.impressions.close()                 # what the exit hook does: send what is pending
        # when the collector runs, then both pages are stored under the ids the API answered
        done = collect(engine, svc.queue_redis, settings)
        assert (done.stored, done.lost) == (2, 0)
        with engine.connect() as conn:
            assert sorted(conn.execute(select(ServedPage.request_id)).scalars()) == sorted(sent)


def with_events(engine, n: int) -> list[int]:
    """``n`` users the database holds events of: their pages are recorded (an id without events is not)."""
    with engine.connect() as conn:
        return list(conn.execute(select(Event.user_id).distinct().order_by(Event.user_id).limit(n)).scalars())


@contextlib.contextmanager
def app_on(own, seed: int, key_name: str, scopes: tuple[str, ...] = ("feed:read",)):
    """``(key, services, client)`` of an app on ``own``'s database, loaded with a small synthetic world and a key
    of ``scopes``; its impressions sent and its engine closed after."""
    from api import create_app
    from api.services import services

    settings, engine = own
    bulk.load(engine, synthetic.generate(30, 200, 600, seed=seed, now=time.time()), settings)
    key = api_keys.create(engine, key_name, frozenset(scopes))
    app = create_app(settings, {"TESTING": True})
    svc = services(app)
    try:
        yield key, svc, app.test_client()
    finally:
        svc.impressions.close()
        svc.engine.dispose()
