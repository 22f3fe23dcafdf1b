"""The HTTP contract: feed shape, live rules (boosts, deactivation, seen since precompute), fallback (for users
without a feed or with an unreadable one), and every bad-input case answered with a 4xx JSON error and nothing
written."""

import dataclasses
import time

import numpy as np
import orjson
import pytest
from sqlalchemy import func, select, text

from api import create_app
from api.services import services
from precompute.data.tables import Event, User
from precompute.feeds.item_states import ItemStates
from precompute.feeds.keys import Keys


def _json(resp):
    assert resp.mimetype == "application/json"
    return orjson.loads(resp.data)


def _feed(client, uid, **params):
    resp = client.get(f"/feed/{uid}", query_string=params)
    assert resp.status_code == 200, resp.data
    return _json(resp)


def _ids(body):
    return [x["item_id"] for x in body["items"]]


def test_precomputed_feed_contract_and_paging(client, pipeline, user_id):
    pipeline.recompute([user_id])
    body = _feed(client, user_id, limit=10)
    assert body["source"] == "precomputed" and body["user_id"] == user_id
    assert body["model_version"] == pipeline.bundle.version and body["computed_at"] > 0
    assert len(body["items"]) == 10
    assert set(body["items"][0]) == {"item_id", "score", "boosted"}
    stored = pipeline.store.read(user_id)
    assert _ids(body) == stored.items[:10].tolist()
    page2 = _feed(client, user_id, limit=10, offset=10)
    assert _ids(page2) == stored.items[10:20].tolist()


def test_boosted_items_are_lifted_with_capped_density(client, pipeline, user_id, admin):
    pipeline.recompute([user_id])
    organic = pipeline.store.read(user_id).items.tolist()
    # given six items from further down the user's ranked list are boosted
    boosted = organic[30:36]
    for k, item in enumerate(boosted):
        resp = client.put(f"/boosts/{item}", json={"weight": 1.0 + k, "ttl_seconds": 600}, headers=admin)
        assert resp.status_code == 200, resp.data
    body = _feed(client, user_id, limit=20)
    flags = [x["boosted"] for x in body["items"]]
    # then the heaviest boost takes the first slot and no prefix holds more than n//4 + 1 boosted items
    assert body["items"][0] == {**body["items"][0], "item_id": boosted[-1], "boosted": True}
    for n in range(1, 21):
        assert sum(flags[:n]) <= (n - 1) // 4 + 1
    assert sum(flags) == 5 and {x["item_id"] for x in body["items"] if x["boosted"]} <= set(boosted)
    # page 2 continues without repeating a lifted item
    page2 = _feed(client, user_id, limit=20, offset=20)
    assert not set(_ids(body)) & set(_ids(page2))
    # when a boost is deleted, its item falls back to its organic place
    assert client.delete(f"/boosts/{boosted[-1]}", headers=admin).status_code == 200
    assert _feed(client, user_id, limit=20)["items"][0]["item_id"] != boosted[-1]


def test_expired_boosts_are_ignored(client, pipeline, user_id, admin):
    # given a one-second boost on an item ranked 26th in the user's feed
    pipeline.recompute([user_id])
    item = int(pipeline.store.read(user_id).items[25])
    assert client.put(f"/boosts/{item}", json={"weight": 5.0, "ttl_seconds": 1}, headers=admin).status_code == 200
    # then it is lifted to the first slot while it lasts
    assert _feed(client, user_id, limit=30)["items"][0] == {**_feed(client, user_id, limit=30)["items"][0],
                                                            "item_id": item, "boosted": True}
    # and once it has expired nothing is boosted and the item is back in its organic place, with no new write
    time.sleep(1.05)
    items = _feed(client, user_id, limit=30)["items"]
    assert not any(x["boosted"] for x in items) and items[25]["item_id"] == item


def test_deactivated_items_disappear_from_served_feeds_at_once(client, pipeline, user_id, admin, world):
    pipeline.recompute([user_id])
    first = _ids(_feed(client, user_id, limit=5))
    resp = client.patch(f"/items/{first[0]}", json={"active": False}, headers=admin)
    assert resp.status_code == 200
    try:
        after = _ids(_feed(client, user_id, limit=5))
        assert first[0] not in after and after[:4] == first[1:]
    finally:
        assert client.patch(f"/items/{first[0]}", json={"active": True}, headers=admin).status_code == 200
    assert _ids(_feed(client, user_id, limit=5)) == first


def test_deactivated_items_stay_out_after_redis_loses_data(client, pipeline, own_users, admin, world, r, settings):
    # given feeds computed while their top items were active, then those items deactivated through the API
    users = own_users(2)
    pipeline.recompute(users)
    firsts = {u: _ids(_feed(client, u, limit=5)) for u in users}
    sold = sorted({ids[0] for ids in firsts.values()})
    for item in sold:
        assert client.patch(f"/items/{item}", json={"active": False}, headers=admin).status_code == 200
    try:
        # when Redis comes back from an older snapshot: the feeds are there, every other key of prefeed is lost
        feeds = {u: r.get(f"{settings.key_prefix}{{u:{u}}}:feed") for u in users}
        r.delete(*r.scan_iter(match=f"{settings.key_prefix}*", count=1000))
        for u, value in feeds.items():
            r.set(f"{settings.key_prefix}{{u:{u}}}:feed", value)
        time.sleep(settings.live_refresh_ms / 1000 + 0.05)           # the API's copy of the item states follows
        assert all(firsts[u][0] in _ids(_feed(client, u, limit=5)) for u in users)      # served again
        # and a worker reloads its item matrices
        pipeline.load()
        time.sleep(settings.live_refresh_ms / 1000 + 0.05)
        # then the deactivated items are out of every served feed again, and nothing else is
        for u in users:
            page = _feed(client, u, limit=5)
            assert page["source"] == "precomputed" and not set(sold) & set(_ids(page))
        assert set(r.zrange(f"{settings.key_prefix}{{live}}:inactive", 0, -1)) >= {str(i).encode() for i in sold}
    finally:
        for item in sold:
            assert client.patch(f"/items/{item}", json={"active": True}, headers=admin).status_code == 200


def test_a_rebuild_of_the_inactive_set_never_undoes_a_newer_deactivation(pipeline, r, settings):
    from precompute.data import catalog

    # given a rebuild that read the database before an item was deactivated, whose Redis write lands in between
    item = int(pipeline.items.ids[pipeline.items.active][0])
    key = f"{settings.key_prefix}{{live}}:inactive"

    reads = []

    def read_then_admin_writes():
        ids = catalog.inactive_ids(pipeline.engine)            # the first snapshot: the item is still active
        if not reads:                                          # PUT /items commits and writes the set now
            catalog.set_active(pipeline.engine, item, False)
            ItemStates(r, Keys(settings.key_prefix)).set_active({item: False})
        reads.append(ids)
        return ids

    try:
        pipeline.store.replace_inactive(read_then_admin_writes)
        # then the rebuild was taken again from a fresh read, and the deactivation stands
        assert len(reads) == 2 and item not in reads[0] and item in reads[1]
        assert r.zscore(key, str(item)) is not None
    finally:
        catalog.set_active(pipeline.engine, item, True)


def test_items_interacted_with_since_precompute_are_dropped(client, pipeline, user_id):
    pipeline.recompute([user_id])
    first = _ids(_feed(client, user_id, limit=5))
    resp = client.post("/events", json={"user_id": user_id, "item_id": first[1], "type": "click"})
    assert resp.status_code == 202 and _json(resp) == {"accepted": 1, "duplicates": 0, "items_created": 0}
    assert first[1] not in _ids(_feed(client, user_id, limit=5))


def test_user_without_feed_gets_fallback_and_a_recompute_is_scheduled(client, settings, r, user_id):
    body = _feed(client, user_id, limit=10)
    assert body["source"] == "fallback" and len(body["items"]) == 10
    assert body["model_version"] is None
    assert r.zscore(f"{settings.key_prefix}dirty", str(user_id)) is not None


def test_unknown_user_gets_global_popular_fallback(client, pipeline, new_user_ids):
    body = _feed(client, new_user_ids(1)[0], limit=5)
    assert body["source"] == "fallback"
    assert _ids(body) == pipeline.items.ids[pipeline.items.global_popular[:5]].tolist()


def test_event_batches_and_idempotency(client, world, pipeline, user_id):
    item = int(pipeline.items.ids[0])
    batch = [{"user_id": user_id, "item_id": item, "type": t, "event_id": f"e-{user_id}-{t}"}
             for t in ("view", "click", "contact")]
    assert _json(client.post("/events", json=batch)) == {"accepted": 3, "duplicates": 0, "items_created": 0}
    assert _json(client.post("/events", json=batch)) == {"accepted": 0, "duplicates": 3, "items_created": 0}
    with world.engine.connect() as conn:
        n = conn.execute(select(func.count()).select_from(Event)
                         .where(Event.client_event_id.like(f"e-{user_id}-%"))).scalar()
    assert n == 3


def test_an_event_id_is_the_users_own_and_another_user_may_use_it_too(client, world, pipeline, new_user_ids):
    # given a client that posts "order-2026-0001" for one user first
    item = int(pipeline.items.ids[0])
    one, another = new_user_ids(2)
    first = {"user_id": one, "item_id": item, "type": "purchase", "event_id": "order-2026-0001"}
    assert _json(client.post("/events", json=first)) == {"accepted": 1, "duplicates": 0, "items_created": 0}
    # when the real user's event carries the same id
    mine = dict(first, user_id=another)
    resp = client.post("/events", json=mine)
    # then it is stored, not a silent duplicate; posting it again is one
    assert _json(resp) == {"accepted": 1, "duplicates": 0, "items_created": 0}
    assert _json(client.post("/events", json=mine)) == {"accepted": 0, "duplicates": 1, "items_created": 0}
    with world.engine.connect() as conn:
        assert sorted(conn.execute(select(Event.user_id).where(Event.client_event_id == "order-2026-0001"))
                      .scalars().all()) == [one, another]


def test_new_user_is_created_by_their_first_event(client, world, pipeline, new_user_ids):
    uid = new_user_ids(1)[0]
    resp = client.post("/events", json={"user_id": uid, "item_id": int(pipeline.items.ids[0]), "type": "view"})
    assert resp.status_code == 202
    with world.engine.connect() as conn:
        assert conn.execute(select(User.history_version).where(User.id == uid)).scalar() == 1


BAD_FEED_REQUESTS = [
    ("/feed/abc", 400), ("/feed/-1", 400), ("/feed/0", 400), ("/feed/1.5", 400), ("/feed/9223372036854775808", 400),
    ("/feed/99999999999999999999", 400),
    ("/feed/1?limit=0", 400), ("/feed/1?limit=101", 400), ("/feed/1?limit=x", 400), ("/feed/1?offset=-1", 400),
    ("/feed/1?offset=100000", 400), ("/nope", 404),
]


@pytest.mark.parametrize("url,status", BAD_FEED_REQUESTS)
def test_bad_feed_requests_get_json_errors(client, url, status):
    resp = client.get(url)
    assert resp.status_code == status
    assert isinstance(_json(resp)["error"], str)


def _event_count(world):
    with world.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(Event)).scalar()


@pytest.mark.parametrize("body,status", [
    (b"{not json", 400),
    (b"[]", 400),
    (b'"a string"', 400),
    (b'{"user_id": 1, "item_id": 1, "type": "like"}', 400),
    (b'{"user_id": -1, "item_id": 1, "type": "view"}', 400),
    (b'{"user_id": "1", "item_id": 1, "type": "view"}', 400),
    (b'{"user_id": true, "item_id": 1, "type": "view"}', 400),
    (b'{"user_id": 1, "item_id": 99999999999999999999, "type": "view"}', 400),
    (b'{"user_id": 1, "item_id": 1, "type": "view", "ts": "yesterday"}', 400),
    (b'{"user_id": 1, "item_id": 1, "type": "view", "ts": 1e300}', 400),
    (b'{"user_id": 1, "item_id": 1, "type": "view", "extra": 1}', 400),
    (b'{"user_id": 1, "item_id": 1, "type": "view", "event_id": 5}', 400),
    (b'{"user_id": 1, "item_id": 1999999999, "type": "view"}', 404),
    # one bad event rejects the whole batch: the good first event is not stored either
    (b'[{"user_id": 1, "item_id": 1, "type": "view"}, {"user_id": 1, "item_id": 1, "type": "bad"}]', 400),
    (b'[{"user_id": 1, "item_id": 1, "type": "view"}, {"user_id": 1, "item_id": 1999999999, "type": "view"}]',
     404),
])
def test_bad_events_are_rejected_whole(refusing_client, world, body, status):
    before = _event_count(world)
    resp = refusing_client.post("/events", data=body, content_type="application/json")
    assert resp.status_code == status, resp.data
    assert _json(resp)["error"]
    assert _event_count(world) == before


def test_event_batch_cap_and_content_type(client, world):
    too_many = [{"user_id": 1, "item_id": 1, "type": "view"}] * 501
    resp = client.post("/events", json=too_many)
    assert resp.status_code == 400 and "at most 500" in _json(resp)["error"]
    resp = client.post("/events", data=b'{"user_id": 1, "item_id": 1, "type": "view"}', content_type="text/plain")
    assert resp.status_code == 415 and _json(resp)["error"]
    resp = client.post("/events", data=b"[" + b"0," * 600_000 + b"0]", content_type="application/json")
    assert resp.status_code == 413 and _json(resp)["error"]


@pytest.mark.parametrize("method,url,body", [
    ("put", "/boosts/1", {"weight": 1.0, "ttl_seconds": 60}),
    ("delete", "/boosts/1", None),
])
@pytest.mark.parametrize("headers", [{"Authorization": "Bearer wrong"}, {"Authorization": "test-admin-token"}])
def test_admin_endpoints_require_the_token(app, method, url, body, headers, r, settings):
    resp = getattr(app.test_client(), method)(url, json=body, headers=headers)
    assert resp.status_code == 401 and _json(resp)["error"]
    assert not list(r.scan_iter(f"{settings.key_prefix}boost:*")) and not r.exists(f"{settings.key_prefix}inactive")


@pytest.mark.parametrize("body", [{"weight": 0, "ttl_seconds": 60}, {"weight": -1}, {"weight": "x"},
                                  {"weight": 1.0, "ttl_seconds": 0}, {"weight": 1.0, "ttl_seconds": 10**9},
                                  {"weight": float("inf")}, {}])
def test_bad_boosts_are_rejected(client, admin, body, r, settings):
    resp = client.put("/boosts/1", data=orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)
                      if body.get("weight") != float("inf") else b'{"weight": 1e999}',
                      content_type="application/json", headers=admin)
    assert resp.status_code == 400 and _json(resp)["error"]
    assert not list(r.scan_iter(f"{settings.key_prefix}boost:*"))


def test_boost_and_item_updates_on_unknown_items_are_404(client, admin):
    assert client.put("/boosts/1999999999", json={"weight": 1.0}, headers=admin).status_code == 404
    assert client.patch("/items/1999999999", json={"active": False}, headers=admin).status_code == 404
    assert client.patch("/items/1", json={"active": "no"}, headers=admin).status_code == 400


def test_healthz_reports_each_dependency(client):
    body = _json(client.get("/healthz"))
    assert body == {"status": "ok", "redis": "ok", "database": "ok"}


def test_every_answer_tells_browsers_not_to_guess_its_type(app, client, admin, user_id):
    # given answers of every kind: pages, probes, documents, metrics, the dashboard, and refusals and errors
    answers = {
        "feed": (200, client.get(f"/feed/{user_id}")),
        "livez": (200, client.get("/livez")),
        "healthz": (200, client.get("/healthz")),
        "openapi": (200, client.get("/openapi.json")),
        "metrics": (200, client.get("/metrics", headers=admin)),
        "dashboard": (200, client.get("/dashboard", headers=admin)),
        "rq panel file": (200, client.get("/dashboard/rq/static/js/jquery-3.5.1.min.js", headers=admin)),
        "events": (202, client.post("/events", json={"user_id": user_id, "item_id": 5, "type": "view"})),
        "no key": (401, app.test_client().get(f"/feed/{user_id}")),
        "bad input": (400, client.get(f"/feed/{user_id}?limit=0")),
        "no such path": (404, client.get("/no/such/path")),
        "no such item": (404, client.put("/boosts/1999999999", json={"weight": 1.0}, headers=admin)),
        "wrong method": (405, client.delete("/livez")),
        "too large": (413, client.post("/events", data=b"[" + b" " * (1 << 21) + b"]",
                                       content_type="application/json")),
        "not json": (415, client.post("/events", data=b"x", content_type="text/plain")),
    }
    # then each says so, whatever its status
    for what, (status, resp) in answers.items():
        assert resp.status_code == status, what
        assert resp.headers.get("X-Content-Type-Options") == "nosniff", what


def test_scores_in_the_feed_are_finite_numbers(client, pipeline, user_id):
    pipeline.recompute([user_id])
    scores = [x["score"] for x in _feed(client, user_id, limit=100)["items"]]
    assert len(scores) == 100 and np.all(np.isfinite(scores))


def test_fallback_interleaves_the_users_top_categories_then_global_popular(client, settings, world, r, admin,
                                                                          new_user_ids):
    from precompute.pipeline.pipeline import Pipeline

    # given a worker published popular lists shorter than every category's active items and the catalogue's
    small = dataclasses.replace(settings, category_popular=4, global_popular=6)
    worker = Pipeline(small, world.engine, r)
    worker.load()
    items = worker.items
    ranked = sorted((int(i) for i in np.flatnonzero(items.active)), key=lambda row: (-items.popularity[row],
                                                                                    items.ids[row]))
    by_category = {int(items.category_ids[c]): [int(items.ids[row]) for row in ranked
                                                if c in items.cat_of[items.cat_indptr[row]:items.cat_indptr[row + 1]]]
                   for c in range(items.n_categories)}
    only_one = {int(items.ids[row]) for row in ranked if items.n_cats[row] == 1}
    assert min(len(ids) for ids in by_category.values()) > small.category_popular
    assert len(ranked) > small.global_popular
    lists = {c: ids[: small.category_popular] for c, ids in by_category.items()}
    global_list = [int(items.ids[row]) for row in ranked[: small.global_popular]]
    assert r.get(f"{settings.key_prefix}{{popular}}:global") == np.array(global_list, "<i8").tobytes()
    for c, ids in lists.items():
        assert r.get(f"{settings.key_prefix}{{popular}}:cat:{c}") == np.array(ids, "<i8").tobytes()
    # and a user without a feed whose events weigh categories 2 > 0 > 4 (one event per view): they viewed the top
    # item of category 2 three times, and an item off the lists in each of the others
    uid = new_user_ids(1)[0]
    # (items listed in that one category only, so each view weighs that category alone)
    viewed = [next(i for i in lists[2] if i in only_one)] * 3 + [
        i for c, k in ((0, 2), (4, 1)) for i in [next(i for i in reversed(by_category[c]) if i in only_one)] * k]
    resp = client.post("/events", json=[{"user_id": uid, "item_id": i, "type": "view"} for i in viewed])
    assert resp.status_code == 202
    # and an item of category 0's list sold since the lists were published
    sold = lists[0][1]
    assert client.patch(f"/items/{sold}", json={"active": False}, headers=admin).status_code == 200
    try:
        # when the user's feed is asked for
        body = _feed(client, uid, limit=100)
        page = _feed(client, uid, limit=5, offset=3)
    finally:
        assert client.patch(f"/items/{sold}", json={"active": True}, headers=admin).status_code == 200
    # then it is the top categories' lists interleaved in the order of the user's weight, then global popular,
    # each item once, without the items the user interacted with or the sold one
    merged = [ids[k] for k in range(small.category_popular) for ids in (lists[2], lists[0], lists[4])]
    want = []
    for item in merged + global_list:
        if item not in want and item not in viewed and item != sold:
            want.append(item)
    assert body["source"] == "fallback" and body["model_version"] is None
    assert _ids(body) == want
    assert _ids(page) == want[3:8]


def test_a_retried_batch_of_duplicates_still_schedules_the_recompute(client, settings, r, pipeline, user_id):
    event = {"user_id": user_id, "item_id": int(pipeline.items.ids[1]), "type": "view", "event_id": f"r-{user_id}"}
    assert _json(client.post("/events", json=event)) == {"accepted": 1, "duplicates": 0, "items_created": 0}
    r.delete(f"{settings.key_prefix}dirty")        # as if Redis failed after the commit: nothing scheduled
    assert _json(client.post("/events", json=event)) == {"accepted": 0, "duplicates": 1, "items_created": 0}
    assert r.zscore(f"{settings.key_prefix}dirty", str(user_id)) is not None


#: Values no reader can decode: shorter than a header, an unknown magic, and the right magic with an unknown format
#: whose version field reads far above any history's.
UNREADABLE_FEEDS = [b"garbage", b"XX" + bytes(60), b"PF\x09\x00" + b"\xff" * 60]


def test_an_unreadable_feed_is_served_as_fallback_then_recomputed(client, settings, r, world, own_users):
    from precompute.feeds.store import FeedStore
    from tests.conftest import manage

    # given users with a history whose stored feed values are unreadable
    users = own_users(len(UNREADABLE_FEEDS))
    for uid, value in zip(users, UNREADABLE_FEEDS):
        r.set(f"{settings.key_prefix}{{u:{uid}}}:feed", value)
    # when they ask for their feed, they get a fallback (not an error) and a recompute is scheduled
    for uid in users:
        body = _feed(client, uid, limit=10)
        assert body["source"] == "fallback" and len(body["items"]) == 10
        assert r.zscore(f"{settings.key_prefix}dirty", str(uid)) is not None
    # then a worker's drain replaces each value with a feed of the user's latest history, served from then on
    done = manage(settings, "worker", "--burst")
    assert done.returncode == 0, done.stderr
    with world.engine.connect() as conn:
        versions = dict(conn.execute(select(User.id, User.history_version).where(User.id.in_(users))).all())
    for uid in users:
        assert FeedStore(r, settings).read(uid).header.history_version == versions[uid] > 0
        body = _feed(client, uid, limit=10)
        assert body["source"] == "precomputed" and body["history_version"] == versions[uid]


def test_a_popular_list_this_version_did_not_write_is_left_out(client, settings, r, world, new_user_ids):
    from precompute.data import catalog

    # given no worker has published lists, but the global list's key holds bytes that are not whole 64-bit ids
    r.set(f"{settings.key_prefix}{{popular}}:global", np.array([11, 12, 13], "<u4").tobytes())
    # when a user without a feed asks for one
    body = _feed(client, new_user_ids(1)[0], limit=5)
    # then the fallback stands in with the newest listings instead of misreading the value (or failing)
    assert body["source"] == "fallback"
    assert _ids(body) == catalog.newest_active(world.engine, 5)


def test_an_event_id_with_a_nul_character_is_a_400_and_stores_nothing(client, world):
    with world.engine.connect() as conn:
        before = conn.execute(text("SELECT count(*) FROM events")).scalar()
    resp = client.post("/events", json=[{"user_id": 1, "item_id": 1, "type": "view", "event_id": "a\u0000b"}])
    assert resp.status_code == 400 and "NUL" in _json(resp)["error"]
    with world.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM events")).scalar() == before


def test_a_database_outage_is_a_503_naming_the_dependency_never_its_host_or_port(settings, admin):
    # given an API whose database does not answer (nothing listens on port 9)
    down = dataclasses.replace(settings, database_url="postgresql://prefeed:secret@127.0.0.1:9/prefeed")
    app = create_app(down, {"TESTING": True})
    resp = app.test_client().post("/events", json={"user_id": 1, "item_id": 1, "type": "view"}, headers=admin)
    # then the answer says which dependency, and nothing of where it is or what the driver said
    assert resp.status_code == 503
    assert _json(resp) == {"error": "database is unavailable", "dependency": "database"}
    services(app).engine.dispose()
