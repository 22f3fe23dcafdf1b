"""The catalogue through the API: PUT replaces a whole item, PATCH changes the given fields, POST /items writes a
batch all or nothing, and events naming unknown items create them bare (or are refused). Redis's inactive set
follows every write of ``active``.

Writes that create items run on a catalogue of their own, so the shared test world keeps its items; the test of
served feeds deactivates a world item through PUT and puts it back exactly as it was."""

from __future__ import annotations

import dataclasses
import time

import orjson
import pytest
from sqlalchemy import func, select

from api import create_app
from api.services import services
from precompute.data import engine as db
from precompute.data.tables import Event, Item, ItemAttribute, ItemCategory, User
from tests.conftest import own_database

BASE = 7_000_000_000_000          # ids of this file's items, far from the synthetic world's


@pytest.fixture(scope="module")
def catalogue_url(tmp_path_factory, world):
    url_of = own_database(tmp_path_factory, "items")
    url = next(url_of)
    engine = db.make_engine(url)
    db.init_db(engine, world.settings)
    engine.dispose()
    yield url
    next(url_of, None)


def _app(settings, url, **changes):
    return create_app(dataclasses.replace(settings, database_url=url, **changes), {"TESTING": True})


@pytest.fixture
def own(settings, catalogue_url):
    """(test client, engine) of an app on the catalogue of this file."""
    app = _app(settings, catalogue_url)
    client = app.test_client()
    # this database has no keys of its own
    client.environ_base["HTTP_AUTHORIZATION"] = "Bearer test-admin-token-0123456789abcdef"
    yield client, services(app).engine
    services(app).engine.dispose()


_ids = iter(range(BASE, BASE + 10**6, 100))


@pytest.fixture
def ids() -> range:
    """A hundred item ids no other test uses."""
    first = next(_ids)
    return range(first, first + 100)


def _stored(engine, item_id: int) -> dict | None:
    """The item as the database has it (the body a PUT would need to write it again), or None."""
    with engine.connect() as conn:
        row = conn.execute(select(Item.price, Item.created_at, Item.active).where(Item.id == item_id)).first()
        if row is None:
            return None
        categories = conn.execute(select(ItemCategory.category).where(ItemCategory.item_id == item_id)
                                  .order_by(ItemCategory.category)).scalars().all()
        attributes = dict(conn.execute(select(ItemAttribute.name, ItemAttribute.value)
                                       .where(ItemAttribute.item_id == item_id)).all())
    return {"categories": list(categories), "price": row.price, "created_at": row.created_at,
            "attributes": attributes, "active": row.active}


def _inactive(r, settings) -> set[int]:
    return {int(i) for i in r.zrange(f"{settings.key_prefix}{{live}}:inactive", 0, -1)}


def test_put_creates_an_item_then_replaces_all_of_it(own, admin, ids):
    client, engine = own
    item = ids[0]
    # when an item is put with everything
    resp = client.put(f"/items/{item}", headers=admin, json={
        "categories": [5, 3, 5, 2**63 - 1], "price": 12.5, "created_at": "2024-05-01T14:00:00+02:00",
        "attributes": {"quality": 0.5, "photos": 3, "seller_rating": None}})
    # then it is created: categories distinct, the ISO time in epoch seconds, a null attribute absent, active
    assert resp.status_code == 201 and resp.get_json() == {"item_id": item, "created": True}
    assert _stored(engine, item) == {"categories": [3, 5, 2**63 - 1], "price": 12.5, "created_at": 1714564800.0,
                                     "attributes": {"quality": 0.5, "photos": 3.0}, "active": True}
    # when it is put again with less
    resp = client.put(f"/items/{item}", headers=admin, json={"categories": [7], "attributes": {"photos": 1},
                                                             "created_at": 1700000000})
    # then the whole item is replaced: what the body leaves out is gone
    assert resp.status_code == 200 and resp.get_json() == {"item_id": item, "created": False}
    assert _stored(engine, item) == {"categories": [7], "price": None, "created_at": 1700000000.0,
                                     "attributes": {"photos": 1.0}, "active": True}
    # and an empty body leaves a bare item
    assert client.put(f"/items/{item}", headers=admin, json={}).status_code == 200
    assert _stored(engine, item) == {"categories": [], "price": None, "created_at": None, "attributes": {},
                                     "active": True}


def test_patch_changes_only_the_given_fields_and_the_inactive_set_follows(own, admin, ids, r, settings):
    client, engine = own
    item = ids[0]
    full = {"categories": [4, 9], "price": 3.0, "created_at": 1.6e9,
            "attributes": {"quality": 0.25, "photos": 2.0, "seller_rating": 4.5}}
    assert client.put(f"/items/{item}", headers=admin, json=full).status_code == 201
    # when the listing is sold
    resp = client.patch(f"/items/{item}", headers=admin, json={"active": False})
    # then only its flag changed, in the database and in Redis
    assert resp.status_code == 200 and resp.get_json() == {"item_id": item, "active": False}
    assert _stored(engine, item) == {**full, "active": False}
    assert item in _inactive(r, settings)
    # when it comes back with one attribute removed, one changed, and new categories
    resp = client.patch(f"/items/{item}", headers=admin, json={
        "active": True, "attributes": {"quality": None, "photos": 5}, "categories": [1, 1]})
    assert resp.status_code == 200
    # then the attribute not named is kept
    assert _stored(engine, item) == {**full, "categories": [1], "attributes": {"photos": 5.0, "seller_rating": 4.5},
                                     "active": True}
    assert item not in _inactive(r, settings)
    # and null clears a field: price, categories, every attribute
    resp = client.patch(f"/items/{item}", headers=admin, json={"price": None, "categories": None, "attributes": None})
    assert resp.status_code == 200
    assert _stored(engine, item) == {**full, "price": None, "categories": [], "attributes": {}, "active": True}
    # and a refused or unknown PATCH changes nothing
    before = _stored(engine, item)
    assert client.patch(f"/items/{item}", headers=admin, json={"price": -1, "active": False}).status_code == 400
    assert client.patch(f"/items/{ids[1]}", headers=admin, json={"active": False}).status_code == 404
    assert _stored(engine, item) == before and _stored(engine, ids[1]) is None
    assert not {item, ids[1]} & _inactive(r, settings)


def test_a_deactivation_through_put_drops_the_item_from_served_feeds_at_once(client, pipeline, user_id, admin,
                                                                            world, r, settings):
    # given a user's precomputed feed and its top item as the database has it
    pipeline.recompute([user_id])
    first = [x["item_id"] for x in client.get(f"/feed/{user_id}?limit=5").get_json()["items"]]
    item = first[0]
    before = _stored(world.engine, item)
    assert before["active"] and before["categories"]
    # when the whole item is put again, inactive
    resp = client.put(f"/items/{item}", headers=admin, json={**before, "active": False})
    try:
        assert resp.status_code == 200 and resp.get_json() == {"item_id": item, "created": False}
        # then the served feed leaves it out at once
        after = [x["item_id"] for x in client.get(f"/feed/{user_id}?limit=5").get_json()["items"]]
        assert item not in after and after[:4] == first[1:]
        assert item in _inactive(r, settings) and _stored(world.engine, item)["active"] is False
    finally:
        assert client.put(f"/items/{item}", headers=admin, json=before).status_code == 200
    # and putting it back restores it exactly, served again
    assert _stored(world.engine, item) == before and item not in _inactive(r, settings)
    assert [x["item_id"] for x in client.get(f"/feed/{user_id}?limit=5").get_json()["items"]] == first


def test_post_items_counts_created_and_updated_and_the_last_of_an_id_wins(own, admin, ids, r, settings):
    client, engine = own
    assert client.put(f"/items/{ids[0]}", headers=admin, json={"categories": [1]}).status_code == 201
    # when a batch replaces that item and creates two, one of them given twice and the other inactive
    resp = client.post("/items", headers=admin, json={"items": [
        {"item_id": ids[0], "categories": [2], "price": 1},
        {"item_id": ids[1], "categories": [3], "attributes": {"quality": 1}},
        {"item_id": ids[2], "active": False},
        {"item_id": ids[1], "categories": [4, 5]}]})
    # then each is counted once, and the last body of an id is the one stored
    assert resp.status_code == 200 and resp.get_json() == {"created": 2, "updated": 1}
    assert _stored(engine, ids[0])["categories"] == [2] and _stored(engine, ids[0])["price"] == 1.0
    assert _stored(engine, ids[1]) == {"categories": [4, 5], "price": None, "created_at": None, "attributes": {},
                                       "active": True}
    assert _stored(engine, ids[2])["active"] is False
    assert {ids[2]} == _inactive(r, settings) & set(ids)


BAD_ITEMS = [
    ({"categories": [-1]}, "categories"), ({"categories": [2**63]}, "categories"), ({"categories": "1"}, "categories"),
    ({"categories": [1.0]}, "categories"), ({"price": -0.5}, "price"), ({"price": "1"}, "price"),
    ({"created_at": "yesterday"}, "created_at"), ({"created_at": 1.7e12}, "created_at"),
    ({"created_at": "2024-02-30"}, "created_at"), ({"attributes": {"quality": "high"}}, "quality"),
    ({"attributes": [1]}, "attributes"), ({"attributes": {"colour": 1}}, "quality, photos, seller_rating"),
    ({"active": "no"}, "active"), ({"active": None}, "active"), ({"name": "x"}, "unknown field(s): name"),
    # further ahead than the allowed future of an event's ts (PREFEED_EVENT_MAX_FUTURE)
    ({"created_at": "5138-07-01T00:00:00Z"}, "created_at must not lie more than 60 s after now"),
    ({"created_at": 99_990_000_000}, "created_at"), ({"created_at": time.time() + 3600}, "created_at"),
]


@pytest.mark.parametrize("body,named", BAD_ITEMS)
def test_bad_items_are_refused_with_a_one_line_error_and_nothing_written(own, admin, ids, body, named, r, settings):
    client, engine = own
    # given a good item in a batch before the bad one
    batch = {"items": [{"item_id": ids[0], "active": False}, {"item_id": ids[1], "active": False, **body}]}
    # when the bad body is put, patched (onto the good item written first) or sent in a batch
    answers = {"put": client.put(f"/items/{ids[1]}", headers=admin, json=body),
               "post": client.post("/items", headers=admin, json=batch)}
    assert client.put(f"/items/{ids[2]}", headers=admin, json={"categories": [8]}).status_code == 201
    answers["patch"] = client.patch(f"/items/{ids[2]}", headers=admin, json=body)
    # then each is a 400 naming the field, and nothing was written
    for verb, resp in answers.items():
        error = orjson.loads(resp.data)["error"]
        assert resp.status_code == 400 and named in error and "\n" not in error, (verb, error)
    assert "item 1: " in answers["post"].get_json()["error"]
    assert _stored(engine, ids[0]) is None and _stored(engine, ids[1]) is None
    assert _stored(engine, ids[2])["categories"] == [8]
    assert not _inactive(r, settings) & set(ids)


def test_created_at_may_lie_ahead_by_the_allowed_future_and_no_more(own, admin, ids, settings):
    client, engine = own
    # when an item is put with a created_at in 5138, then it is a 400 with a JSON error, and nothing is written
    resp = client.put(f"/items/{ids[0]}", headers=admin, json={"created_at": "5138-07-01T00:00:00Z"})
    assert resp.status_code == 400 and resp.is_json
    assert resp.get_json() == {"error": f"created_at must not lie more than {settings.event_max_future} s after now"}
    assert _stored(engine, ids[0]) is None
    # and within the allowed future (clock skew), as an event's ts, it is stored as given, unchanged when read
    soon = time.time() + settings.event_max_future - 5
    assert client.put(f"/items/{ids[1]}", headers=admin, json={"created_at": soon}).status_code == 201
    assert _stored(engine, ids[1])["created_at"] == soon


def test_batches_over_the_limit_or_empty_are_refused(own, admin, ids, settings):
    client, engine = own
    over = [{"item_id": BASE - 1 - k} for k in range(settings.items_batch_max + 1)]
    for body in ({"items": over}, {"items": []}, {"items": {"item_id": ids[0]}}, {}, [{"item_id": ids[0]}]):
        resp = client.post("/items", headers=admin, json=body)
        assert resp.status_code == 400 and resp.get_json()["error"]
    assert _stored(engine, BASE - 1) is None and _stored(engine, ids[0]) is None


def _count(engine, model, *where) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(model).where(*where)).scalar()


def test_events_naming_unknown_items_create_them_bare_and_store_their_value(own, admin, ids, new_user_ids):
    client, engine = own
    assert client.put(f"/items/{ids[0]}", headers=admin, json={"categories": [3]}).status_code == 201
    user = new_user_ids(1)[0]
    # when events name a known item and two unknown ones (one of them twice), with values
    now = time.time()
    resp = client.post("/events", json=[
        {"user_id": user, "item_id": ids[0], "type": "view", "ts": now, "value": 4.5},
        {"user_id": user, "item_id": ids[1], "type": "click", "ts": now, "value": 0},
        {"user_id": user, "item_id": ids[2], "type": "view", "ts": now},
        {"user_id": user, "item_id": ids[1], "type": "view", "ts": now, "value": None}])
    # then all are stored, the two unknown items created bare
    assert resp.status_code == 202 and resp.get_json() == {"accepted": 4, "duplicates": 0, "items_created": 2}
    bare = {"categories": [], "price": None, "created_at": None, "attributes": {}, "active": True}
    assert _stored(engine, ids[1]) == bare and _stored(engine, ids[2]) == bare
    assert _stored(engine, ids[0])["categories"] == [3]
    with engine.connect() as conn:
        values = conn.execute(select(Event.item_id, Event.value).where(Event.user_id == user)
                              .order_by(Event.id)).all()
    assert [tuple(v) for v in values] == [(ids[0], 4.5), (ids[1], 0.0), (ids[2], None), (ids[1], None)]
    # and an event of a value that is not a number is refused
    for value in ("4", [1], True):
        resp = client.post("/events", json={"user_id": user, "item_id": ids[0], "type": "view", "value": value})
        assert resp.status_code == 400 and "value" in resp.get_json()["error"]
    assert _count(engine, Event, Event.user_id == user) == 4


def test_events_naming_unknown_items_are_refused_whole_when_creation_is_off(settings, catalogue_url, admin, ids,
                                                                             new_user_ids):
    app = _app(settings, catalogue_url, events_create_items=False)
    client, engine = app.test_client(), services(app).engine
    client.environ_base["HTTP_AUTHORIZATION"] = admin["Authorization"]      # this catalogue's database has no keys
    try:
        assert client.put(f"/items/{ids[0]}", headers=admin, json={}).status_code == 201
        user = new_user_ids(1)[0]
        # when a batch names a known item and an unknown one
        resp = client.post("/events", json=[{"user_id": user, "item_id": ids[0], "type": "view"},
                                            {"user_id": user, "item_id": ids[1], "type": "view"}])
        # then it is refused, naming the unknown item, and nothing is written: no event, no item, no user
        assert resp.status_code == 404 and str(ids[1]) in resp.get_json()["error"]
        assert _stored(engine, ids[1]) is None
        assert _count(engine, Event, Event.user_id == user) == 0 and _count(engine, User, User.id == user) == 0
        # and the known item alone is accepted
        resp = client.post("/events", json={"user_id": user, "item_id": ids[0], "type": "view"})
        assert resp.get_json() == {"accepted": 1, "duplicates": 0, "items_created": 0}
    finally:
        engine.dispose()


def test_an_event_colliding_on_another_unique_index_counts_as_a_duplicate(own, ids, new_user_ids):
    client, engine = own
    # given the events table has a second unique rule besides client_event_id (as a rule for imported events may)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE UNIQUE INDEX ux_events_test_once ON events (user_id, item_id, type, ts)")
    try:
        event = {"user_id": new_user_ids(1)[0], "item_id": ids[0], "type": "view", "ts": time.time()}
        # when the same event is posted twice, without an event_id
        first, again = (client.post("/events", json=event) for _ in range(2))
        # then the second is skipped and counted as a duplicate, not an error
        assert first.get_json() == {"accepted": 1, "duplicates": 0, "items_created": 1}
        assert again.status_code == 202 and again.get_json() == {"accepted": 0, "duplicates": 1, "items_created": 0}
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP INDEX ux_events_test_once")


def test_a_put_under_a_narrower_declaration_keeps_attributes_it_does_not_declare(settings, catalogue_url, ids, admin):
    # given an item written with two declared attributes
    wide = _app(settings, catalogue_url, item_attributes=("quality", "photos"))
    body = {"categories": [1], "price": 5.0, "attributes": {"quality": 0.5, "photos": 3}}
    assert wide.test_client().put(f"/items/{ids[0]}", json=body, headers=admin).status_code == 201
    # when an API process that declares only one of them replaces the item
    narrow = _app(settings, catalogue_url, item_attributes=("quality",))
    body = {"categories": [2], "price": 6.0, "attributes": {"quality": 0.9}}
    assert narrow.test_client().put(f"/items/{ids[0]}", json=body, headers=admin).status_code == 200
    # then what it declares is replaced and the value it cannot see is kept, not erased
    engine = services(narrow).engine
    assert _stored(engine, ids[0])["attributes"] == {"quality": 0.9, "photos": 3.0}
    for app in (wide, narrow):
        services(app).engine.dispose()
