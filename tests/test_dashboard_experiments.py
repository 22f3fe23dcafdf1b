"""The dashboard's experiments panel: each running experiment's report (and the most recently stopped one's) per arm,
from what the database holds, with a chart of the metric per exposed user; no experiment and a database error
are said in the panel, never a failed page."""

import dataclasses
import re
import time
import uuid

import pytest
from sqlalchemy import delete, insert, text

from api import chart
from precompute.experiments.report import default_metric
from precompute.data import engine as db
from precompute.data.tables import Attribution, Exposure
from precompute.errors import InvalidInput
from precompute.experiments import registry
from tests.conftest import delete_own_keys, own_database

ADMIN = {"Authorization": "Bearer test-admin-token-0123456789abcdef"}


def _section(html: str, name: str) -> str:
    """The panel's block of the experiment ``name``."""
    found = re.search(rf'<div class="experiment" data-experiment="{name}".*?(?=<div class="experiment"|</section>)',
                      html, re.S)
    assert found, f"no block for experiment {name!r}"
    return found.group(0)


def _cells(block: str, arm: str) -> list[str]:
    """The text of each cell of ``arm``'s row in the table of ``block``."""
    row = re.search(rf'<tr data-arm="{arm}">(.*?)</tr>', block, re.S).group(1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    return [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", c)).strip() for c in cells]


@pytest.fixture
def experiment(world, settings):
    """A running experiment of this test's own in the shared world database (arms a: popular, b: recent:1d, on a
    tenth of the users); stopped at the end, its exposure and attribution rows deleted, so it holds no slot and
    leaves no rows for other tests."""
    name = f"dash-{uuid.uuid4().hex[:10]}"
    made = registry.create(world.engine, name, [("a", "popular"), ("b", "recent:1d")], None, 0.1, settings.model_dir)
    yield made
    try:
        registry.stop(world.engine, name, None)
    except InvalidInput:                            # the test stopped it already
        pass
    with world.engine.begin() as conn:
        conn.execute(delete(Exposure).where(Exposure.experiment == made.id))
        conn.execute(delete(Attribution).where(Attribution.experiment == made.id))


def _expose(engine, experiment_id: int, arm: int, users: list[int], pages: int, impressions: int) -> None:
    with engine.begin() as conn:
        conn.execute(insert(Exposure), [dict(experiment=experiment_id, arm=arm, user_id=u, pages=pages,
                                             impressions=impressions, first_served_at=time.time()) for u in users])


def _attribute(engine, experiment_id: int, arm: int, user_events: list[tuple[int, int]], code: int,
               event_ids: list[int]) -> None:
    """``user_events``: (user, how many events of type ``code``), given ids from ``event_ids``."""
    rows = [dict(event_id=event_ids.pop(), experiment=experiment_id, arm=arm, user_id=u, type=code, position=0,
                 served_at=time.time()) for u, n in user_events for _ in range(n)]
    with engine.begin() as conn:
        conn.execute(insert(Attribution), rows)


def test_the_panel_shows_each_arms_report_and_chart(client, world, settings, experiment, new_user_ids):
    # given 4 exposed users per arm, 2 pages of 10 items each; arm a's users made 2 clicks, arm b's 6
    metric = default_metric(settings.event_types)
    assert metric == "click"
    code = [n for n, _ in settings.event_types].index(metric) + 1
    a_users, b_users = new_user_ids(4), new_user_ids(4)
    event_ids = new_user_ids(20)        # unique in this session, far above the world's event ids
    _expose(world.engine, experiment.id, 0, a_users, 2, 20)
    _expose(world.engine, experiment.id, 1, b_users, 2, 20)
    _attribute(world.engine, experiment.id, 0, [(a_users[0], 1), (a_users[1], 1)], code, event_ids)
    _attribute(world.engine, experiment.id, 1, [(b_users[0], 2), (b_users[1], 2), (b_users[2], 1), (b_users[3], 1)],
               code, event_ids)
    # when the operator opens the dashboard
    resp = client.get("/dashboard", headers=ADMIN)
    assert resp.status_code == 200
    html = resp.get_data(as_text=True)
    # then the panel says what it counts, and shows the experiment, running
    assert 'id="experiments"' in html and "As of the last collection, every few seconds" in html
    block = _section(html, experiment.name)
    assert "running" in block and "attributed click events per exposed user" in block
    # and each arm's row: users, pages, impressions, clicks, per user with its interval, per impression, ratio
    a, b = _cells(block, "a"), _cells(block, "b")
    assert a[:7] == ["a", "popular", "0.5", "4", "8", "80", "2"] and b[:7] == ["b", "recent:1d", "0.5", "4", "8", "80",
                                                                                "6"]
    assert re.fullmatch(r"0\.5 \[[\d.]+, [\d.]+\]", a[7]) and re.fullmatch(r"1\.5 \[[\d.]+, [\d.]+\]", b[7])
    assert (a[8], b[8]) == ("0.025", "0.075")
    assert a[9] == "1" and b[9].startswith("3")
    # and the sample ratio is fine with 4 users each (p = 1), not flagged
    assert re.search(r'class="sample-ratio ">p = 1<', block)
    # and the chart has a point per arm, b's higher than a's (smaller y), each inside its error bar
    svg = block[block.index("<svg"):]
    points = {arm: float(y) for arm, y in re.findall(r'<g data-arm="(\w+)">.*?<circle cx="[\d.]+" cy="([\d.]+)"',
                                                     svg, re.S)}
    assert set(points) == {"a", "b"} and points["b"] < points["a"]
    assert "stroke-dasharray" in svg            # the control's line

    # given many more users exposed to arm a than its share says
    _expose(world.engine, experiment.id, 0, new_user_ids(60), 1, 10)
    html = client.get("/dashboard", headers=ADMIN).get_data(as_text=True)
    # then the sample ratio is flagged and there is no verdict
    block = _section(html, experiment.name)
    assert re.search(r'class="sample-ratio bad">p = [\d.e-]+ — flagged', block)
    assert "none (no interval excludes 1)" in block

    # when the experiment is stopped, it is still shown (the most recently stopped one), as stopped
    registry.stop(world.engine, experiment.name, None)
    block = _section(client.get("/dashboard", headers=ADMIN).get_data(as_text=True), experiment.name)
    assert "stopped" in block and _cells(block, "b")[6] == "6"


@pytest.fixture
def own_app(tmp_path_factory, world):
    """An app on a database of its own, empty of experiments (the shared world's may hold other tests' ones)."""
    from api import create_app
    from api.services import services

    for url in own_database(tmp_path_factory, "dashboard"):
        tag = uuid.uuid4().hex[:10]
        s = dataclasses.replace(world.settings, database_url=url, model_dir=tmp_path_factory.mktemp("models"),
                                key_prefix=f"pftest:{tag}:", queue_name=f"pftest-{tag}")
        engine = db.make_engine(url)
        db.init_db(engine, s)
        app = create_app(s, {"TESTING": True})
        yield app, engine, s
        services(app).engine.dispose()
        engine.dispose()
        delete_own_keys(s)


def test_no_experiment_and_a_database_error_are_said_in_the_panel(own_app):
    app, engine, s = own_app
    client = app.test_client()
    # given no experiment: the panel says so
    resp = client.get("/dashboard", headers=ADMIN)
    assert resp.status_code == 200
    html = resp.get_data(as_text=True)
    assert "No experiments; start one with" in html and 'data-experiment="' not in html
    # given an experiment whose exposures cannot be read (the table is gone)
    registry.create(engine, "broken", [("a", "popular"), ("b", "popular")], None, 1.0, s.model_dir)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE exposures"))
    # then the page still answers, with the other cards, and the panel names the failure, not the driver's message
    resp = client.get("/dashboard", headers=ADMIN)
    assert resp.status_code == 200
    html = resp.get_data(as_text=True)
    assert 'id="queue"' in html and 'id="feeds"' in html
    panel = html[html.index('id="experiments"'):]
    assert re.search(r'<div class="bad">the experiments could not be read: the database answered \w+</div>', panel)
    assert "exposures" not in panel


def test_the_arm_chart_places_points_inside_their_intervals():
    # given a control at 0.5 [0.2, 0.8], an arm at 1.5 [1.0, 2.0] and an arm with no users
    c = chart.per_arm([("a", 0.5, [0.2, 0.8]), ("b", 1.5, [1.0, 2.0]), ("c", None, None)])
    a, b, none = c["bars"]
    # then higher values are drawn higher (SVG y grows downwards), each point between its interval's ends
    assert c["top"] <= b["high"] < b["y"] < b["low"] < a["high"] < a["y"] < a["low"] <= c["bottom"]
    assert c["control"] == a["y"] and a["x"] < b["x"] < none["x"]
    # and the axis reaches the nice number at or above the highest end (2)
    assert c["ticks"][-1][1] == "2" and b["high"] == c["top"]
    assert none["y"] is None and none["label"] == "no users"
    # and with no arm holding a value there is nothing to draw
    assert chart.per_arm([("a", None, None), ("b", None, None)]) is None
