"""Garbage in: thousands of generated requests against the real app (real Redis, real database). Whatever arrives
— wrong methods, odd paths, huge integers, unicode, deep or oversized JSON, wrong content types — the answer is
never a 5xx, and every 4xx carries a JSON ``error``.

The app runs on a small catalogue of its own: with the admin token the fuzzer replaces whole items and its events
create items, which must not change the shared test world."""

import dataclasses
import json
import time
from urllib.parse import quote

import orjson
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from sqlalchemy import select

from api import create_app
from api.services import services
from precompute.data import bulk, engine as db, synthetic
from precompute.data.tables import Item
from tests.conftest import own_database, with_key

TOKEN = {"Authorization": "Bearer test-admin-token-0123456789abcdef"}
ids = st.one_of(st.integers(-2**70, 2**70).map(str), st.text(max_size=30),
                st.sampled_from(["1", "2", "0", "-1", "1.5", "1e3", "9" * 40, "%00", "%2F", "١٢", "a b"]))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**80, 2**80) | st.floats(allow_nan=True) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=20,
)
# Every field sometimes takes any JSON kind (null, bool, int, huge int, float, string, list, object).
events = st.fixed_dictionaries(
    {"user_id": st.one_of(st.integers(1, 400), st.integers(-5, 2**40), st.text(max_size=5), json_values),
     "item_id": st.one_of(st.integers(1, 900), st.integers(-5, 2**40), st.none(), json_values),
     "type": st.one_of(st.sampled_from(["view", "click", "contact", "purchase", "like", "", None]), json_values)},
    optional={"ts": st.one_of(st.floats(), st.integers(-2**64, 2**64), st.text(max_size=5), json_values),
              "event_id": st.one_of(st.text(max_size=80), st.integers(), json_values),
              "value": st.one_of(st.floats(), st.integers(-2**64, 2**64), json_values)},
)
# Item bodies (PUT, PATCH, and inside POST /items): plausible values mixed with any JSON kind.
items = st.fixed_dictionaries(
    {},
    optional={"item_id": st.one_of(st.integers(-5, 2**64), json_values),
              "categories": st.one_of(st.lists(st.integers(-2, 2**64), max_size=4), json_values),
              "price": st.one_of(st.floats(), st.integers(-5, 2**64), json_values),
              "created_at": st.one_of(st.floats(), st.text(max_size=30), st.sampled_from(
                  ["2024-05-01T12:00:00Z", "2024-05-01 12:00", "2024-02-30", "2024-05-01T12:00:00+25:00",
                   "1700000000", "99999-01-01", "2024-05-01T12:00:00.123456789-0330"]), json_values),
              "attributes": st.one_of(st.dictionaries(st.sampled_from(["quality", "photos", "colour", ""]),
                                                      st.one_of(st.floats(), json_values), max_size=3), json_values),
              "active": st.one_of(st.booleans(), json_values)},
)
bodies = st.one_of(
    json_values.map(lambda v: orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS) if _dumpable(v) else b"{}"),
    events.map(lambda e: orjson.dumps(e) if _dumpable(e) else b"{}"),
    st.lists(events, max_size=4).map(lambda e: orjson.dumps(e) if _dumpable(e) else b"[]"),
    items.map(lambda i: orjson.dumps(i) if _dumpable(i) else b"{}"),
    st.lists(items, max_size=4).map(lambda i: orjson.dumps({"items": i}) if _dumpable(i) else b"{}"),
    st.binary(max_size=200),
    st.sampled_from([b"", b"{", b"[" * 5000 + b"]" * 5000, b'{"a":' * 2000 + b"1" + b"}" * 2000,
                     b'{"weight": 1e999}', b'{"user_id": 123456789012345678901234567890}', b"\xff\xfe",
                     b'"' + "é".encode() * 1000 + b'"', b"0" * (1 << 20 | 1)]),
)
requests = st.tuples(
    st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]),
    st.sampled_from(["/feed/{}", "/events", "/boosts/{}", "/items/{}", "/items", "/healthz", "/openapi.json", "/{}",
                     "/feed/{}/x", "/events/{}", "/dashboard", "/dashboard/{}", "/dashboard/status.json",
                     "/dashboard/rq/{}", "/dashboard/rq/0/data/job/{}.json", "/dashboard/rq/job/{}/requeue"]),
    ids,
    st.dictionaries(st.sampled_from(["limit", "offset", "user", "x"]), st.one_of(ids, st.text(max_size=8)),
                    max_size=3),
    bodies,
    st.sampled_from(["application/json", "text/plain", "application/x-www-form-urlencoded", None]),
    st.booleans(),
)


def _dumpable(value) -> bool:
    try:
        orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
        return True
    except (TypeError, orjson.JSONEncodeError):
        return False


@pytest.fixture
def own_url(tmp_path_factory):
    yield from own_database(tmp_path_factory, "fuzz")


@pytest.fixture
def own(settings, own_url):
    """A test client of an app on a catalogue of its own (900 items, ids 1 to 900), and one of its item ids."""
    s = dataclasses.replace(settings, database_url=own_url)
    engine = db.make_engine(own_url)
    db.init_db(engine, s)
    bulk.load(engine, synthetic.generate(400, 900, 4000, seed=3, now=time.time()), s)
    with engine.connect() as conn:
        item_id = conn.execute(select(Item.id).where(Item.active).limit(1)).scalar()
    app = create_app(s, {"TESTING": True})
    yield with_key(app.test_client()), item_id
    services(app).engine.dispose()
    engine.dispose()


def test_fuzzed_requests_never_get_a_5xx(own):
    client, _ = own
    seen = {"n": 0, "statuses": set()}

    @hsettings(max_examples=2500, deadline=None, database=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.function_scoped_fixture])
    @given(requests)
    def check(req):
        method, template, raw_id, query, body, content_type, with_token = req
        path = template.format(quote(raw_id, safe="%")) if "{}" in template else template
        headers = dict(TOKEN) if with_token else {}
        resp = client.open(path, method=method, query_string=query, data=body, headers=headers,
                           content_type=content_type)
        seen["n"] += 1
        seen["statuses"].add(resp.status_code)
        assert resp.status_code < 500, (method, path, query, body[:200], resp.data[:300])
        if resp.status_code >= 400:
            payload = orjson.loads(resp.data)
            assert isinstance(payload["error"], str) and payload["error"]

    check()
    assert seen["n"] >= 2000
    assert {200, 400, 404}.issubset(seen["statuses"])


def test_openapi_document_describes_the_api(client):
    spec = orjson.loads(client.get("/openapi.json").data)
    assert spec["openapi"].startswith("3.")
    assert {"/feed/{user_id}", "/events", "/boosts/{item_id}", "/items/{item_id}", "/items",
            "/healthz"} <= set(spec["paths"])
    assert set(spec["paths"]["/items/{item_id}"]) == {"put", "patch"}


#: One value of every JSON kind.
KINDS = {"null": None, "bool": True, "int": 7, "huge int": 2**70, "float": 1.5, "string": "x", "list": [1, 2],
         "object": {"a": 1}}


ITEM = {"categories": [3, 4], "price": 10.0, "created_at": "2024-05-01T12:00:00Z",
        "attributes": {"quality": 0.5}, "active": True}


def _valid_requests(item_id: int) -> list[tuple[str, str, dict, object]]:
    """(method, path, body, batch) of every route that takes a JSON body, each body valid as it stands; ``batch``
    wraps a body into the route's batch form (None: the route takes no batch)."""
    return [
        ("POST", "/events", {"user_id": 5, "item_id": item_id, "type": "view", "ts": None, "event_id": "kinds-1",
                             "value": 4.5}, lambda e: [e]),
        ("PUT", f"/boosts/{item_id}", {"weight": 1.0, "ttl_seconds": 60}, None),
        ("PUT", f"/items/{item_id}", ITEM, None),
        ("PATCH", f"/items/{item_id}", ITEM, None),
        ("POST", "/items", {"item_id": item_id, **ITEM}, lambda i: {"items": [i]}),
    ]


def test_every_field_of_every_route_answers_every_json_kind_without_a_5xx(own):
    client, item_id = own
    cases = []
    for method, path, body, batch in _valid_requests(item_id):
        body = {k: (time.time() if v is None else v) for k, v in body.items()}
        cases += [(method, path, kind, value, value) for kind, value in KINDS.items()]          # the body itself
        for field in body:
            cases += [(method, path, f"{field}={kind}", value, {**body, field: value}) for kind, value in KINDS.items()]
            if batch:                                             # and inside a batch
                cases += [(method, path, f"[{field}={kind}]", value, batch({**body, field: value}))
                          for kind, value in KINDS.items()]
        if "attributes" in body:                                  # and as an attribute's value
            cases += [(method, path, f"attributes.quality={kind}", value, {**body, "attributes": {"quality": value}})
                      for kind, value in KINDS.items()]
    # when each is sent with the admin token
    for method, path, what, value, body in cases:
        resp = client.open(path, method=method, data=json.dumps(body), headers=TOKEN,     # json: ints past 64 bits
                           content_type="application/json")
        # then none is a 5xx, and each refusal is a JSON error
        assert resp.status_code < 500, (method, path, what, resp.data[:300])
        if resp.status_code >= 400:
            assert isinstance(orjson.loads(resp.data)["error"], str), (method, path, what)
    # (the body itself, each field, each field in a batch, an attribute's value: events, boosts, PUT, PATCH, POST)
    assert len(cases) == 8 * ((1 + 6 + 6) + (1 + 2) + (1 + 5 + 1) * 2 + (1 + 6 + 6 + 1))
