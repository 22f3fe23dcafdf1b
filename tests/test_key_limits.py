"""What one ``events:write`` key may cost: its bucket charged per event, its new user ids capped per minute, batches
that could never fit refused as such (400, not 429), and a flood of new user ids never holding back the recomputes
of users who had a history (``api/events.py``, ``precompute/feeds/dirty.py``)."""

import dataclasses
import json
import math
import time

import pytest
from sqlalchemy import func, select

from api import create_app
from api.services import services
from precompute.data import api_keys
from precompute.data.tables import Event, User
from precompute.feeds.dirty import DirtyUsers
from tests.conftest import manage


def key(world, name, **limits) -> str:
    return api_keys.create(world.engine, f"{name}-{time.monotonic_ns()}", frozenset({"events:write", "feed:read"}),
                           **limits)


def bearer(k: str) -> dict:
    return {"Authorization": f"Bearer {k}"}


def events(users, item=3) -> list[dict]:
    return [{"user_id": u, "item_id": item, "type": "view"} for u in users]


def stored(world, users) -> tuple[int, int]:
    """(events, user rows) the database has for ``users``."""
    with world.engine.connect() as conn:
        return (conn.execute(select(func.count()).select_from(Event).where(Event.user_id.in_(users))).scalar(),
                conn.execute(select(func.count()).select_from(User).where(User.id.in_(users))).scalar())


@pytest.fixture
def limited_app(settings):
    """``limited_app(**changes)``: an API process whose settings differ by ``changes``; its engine closed after."""
    made = []

    def make(**changes):
        app = create_app(dataclasses.replace(settings, **changes), {"TESTING": True})
        made.append(app)
        return app.test_client()

    yield make
    for app in made:
        services(app).engine.dispose()


def test_a_keys_bucket_is_charged_one_token_per_event_with_an_honest_retry_after(client, world, own_users):
    # given a key of 4 tokens/s with a burst of 20, and users the database has
    k = key(world, "per-event", rate=4.0, burst=20)
    users = own_users(2)
    # when it posts 16 events in one request: accepted, and 4 tokens are left
    started = time.monotonic()
    assert client.post("/events", json=events([users[0]] * 16), headers=bearer(k)).status_code == 202
    before = stored(world, users)
    # then a batch of 10 events is refused: it costs 10 tokens, not one request's one
    refused = client.post("/events", json=events([users[1]] * 10), headers=bearer(k))
    elapsed = time.monotonic() - started
    assert refused.status_code == 429 and "per event" in refused.get_json()["error"]
    wait = int(refused.headers["Retry-After"])
    # 3 tokens left after its first: 6 more at 4/s, and the retry's first, 1.75 s, less what refilled meanwhile
    assert max(1, math.ceil(1.75 - elapsed)) <= wait <= 2
    assert stored(world, users) == before      # nothing written
    # and the same batch retried after Retry-After fits
    time.sleep(wait)
    assert client.post("/events", json=events([users[1]] * 10), headers=bearer(k)).status_code == 202


def test_a_batch_larger_than_the_keys_burst_is_a_400_naming_the_burst(client, world, own_users):
    # given a key with a burst of 5 tokens: a batch of 6 events could never fit, however long the client waits
    k = key(world, "small-burst", rate=1000.0, burst=5)
    users = own_users(1)
    before = stored(world, users)
    resp = client.post("/events", json=events(users * 6), headers=bearer(k))
    # then it is refused as input (no Retry-After to retry it forever), naming the limit, and nothing is written
    assert resp.status_code == 400 and "burst of 5" in resp.get_json()["error"]
    assert "Retry-After" not in resp.headers and stored(world, users) == before
    # while a batch of 5 fits
    assert client.post("/events", json=events(users * 5), headers=bearer(k)).status_code == 202


def test_more_events_for_one_user_id_than_its_per_minute_limit_is_a_400_not_a_429_forever(limited_app, world,
                                                                                          own_users):
    client = limited_app(user_events_per_minute=3)
    uid, other = own_users(2)
    before = stored(world, [uid, other])
    # given PREFEED_USER_EVENTS_PER_MINUTE=3, when a batch carries 4 events for one user id
    resp = client.post("/events", json=events([uid] * 4 + [other]), headers=bearer(world.key))
    # then it can never fit: a 400 naming the setting, never a 429 the client would retry every minute
    assert resp.status_code == 400 and "PREFEED_USER_EVENTS_PER_MINUTE" in resp.get_json()["error"]
    assert "Retry-After" not in resp.headers and stored(world, [uid, other]) == before
    # and 3 of them fit
    assert client.post("/events", json=events([uid] * 3), headers=bearer(world.key)).status_code == 202


def test_new_user_ids_per_key_are_capped_per_minute_with_an_honest_retry_after(client, world, own_users,
                                                                              new_user_ids):
    # given a key that may bring in 60 new user ids a minute (its own --new-users), and another key
    k = key(world, "new-users", new_users=60)
    other = key(world, "other-shop")
    known = own_users(1)
    first, late = new_user_ids(60), new_user_ids(2)
    # when it posts 60 events for 60 user ids the database does not have (and one it has): accepted
    assert client.post("/events", json=events(first + known), headers=bearer(k)).status_code == 202
    # then 2 more new ids are refused with when to come back (1 a second), and nothing of theirs is written
    refused = client.post("/events", json=events(late), headers=bearer(k))
    assert refused.status_code == 429 and "new user ids per minute" in refused.get_json()["error"]
    assert int(refused.headers["Retry-After"]) == 2
    assert stored(world, late) == (0, 0)
    # while users the database has are not capped: the 60 it just brought in and a seeded one
    assert client.post("/events", json=events(first + known, item=4), headers=bearer(k)).status_code == 202
    # and another key's budget is its own
    spare = new_user_ids(2)
    assert client.post("/events", json=events(spare), headers=bearer(other)).status_code == 202
    # and the refused batch fits once Retry-After has passed
    time.sleep(2)
    assert client.post("/events", json=events(late), headers=bearer(k)).status_code == 202
    assert stored(world, late) == (2, 2)


def test_a_batch_with_more_new_user_ids_than_the_cap_is_a_400(limited_app, world, new_user_ids):
    # given the setting's cap of 10 new user ids a minute for a key without an override of its own
    client = limited_app(key_new_users_per_minute=10)
    k = key(world, "default-cap")
    ids = new_user_ids(11)
    # when one batch brings in 11: it can never fit, a 400 naming the cap, nothing written
    resp = client.post("/events", json=events(ids), headers=bearer(k))
    assert resp.status_code == 400 and "10 new user ids per minute" in resp.get_json()["error"]
    assert "Retry-After" not in resp.headers and stored(world, ids) == (0, 0)
    # and 10 fit, the 11th then waits its turn (429, not 400)
    assert client.post("/events", json=events(ids[:10]), headers=bearer(k)).status_code == 202
    assert client.post("/events", json=events(ids[10:]), headers=bearer(k)).status_code == 429


def test_a_known_users_recompute_is_claimed_before_thousands_of_new_users_marked_earlier(settings, r):
    # given 20,000 user ids new to the database marked dirty (a flood of made-up ids), then a known user
    dirty = DirtyUsers(r, dataclasses.replace(settings, recompute_interval_ms=0))
    flood = list(range(1_000_000, 1_020_000))
    for i in range(0, len(flood), 5000):
        dirty.mark_new(flood[i:i + 5000])
    time.sleep(0.002)
    dirty.mark([42])
    # when a drain claims its first batch
    t0 = time.perf_counter()
    claimed, stamp = dirty.claim(25)
    took = time.perf_counter() - t0
    # then the known user is in it, first, however many new users were due before it (oldest due first would put it
    # 20,001st: 801 batches of 25 later), and the claim stays one cheap call
    assert claimed[0] == 42 and len(claimed) == 25 and took < 0.05
    # and new users are still claimed, oldest first, whenever no known user is due
    assert claimed[1:] == flood[:24]
    dirty.complete(claimed, stamp)
    assert dirty.claim(25)[0] == flood[24:49]
    assert dirty.pending() == len(flood) - 24 and dirty.next_due() is not None


def test_a_new_user_keeps_its_place_in_the_new_tier_until_its_recompute(settings, r):
    dirty = DirtyUsers(r, dataclasses.replace(settings, recompute_interval_ms=0))
    # given new users waiting, one of them posting again (its events now make it "known" to the database)
    dirty.mark_new([7, 8])
    dirty.mark([8])
    time.sleep(0.002)
    dirty.mark([9])
    # then it does not jump the queue: the known user goes first, then the new ones
    claimed, stamp = dirty.claim(10)
    assert claimed == [9, 7, 8]
    # and a new user marked again while its recompute runs stays dirty, now as a known user
    time.sleep(0.002)
    dirty.mark_new([7])
    assert dirty.complete(claimed, stamp) == 2
    dirty.mark_new([10])
    assert dirty.claim(10)[0] == [7, 10]


def test_new_user_ids_posted_through_the_api_wait_behind_a_known_user(client, settings, r, own_users, new_user_ids):
    # given a client posting 2,000 made-up user ids in batches of 500, then an event of a user with a history
    flood = new_user_ids(2000)
    for i in range(0, len(flood), 500):
        assert client.post("/events", json=events(flood[i:i + 500])).status_code == 202
    time.sleep(0.002)
    known = own_users(1)[0]
    assert client.post("/events", json=events([known])).status_code == 202
    # then the drain's first batch starts with the known user
    claimed, _ = DirtyUsers(r, settings).claim(settings.batch_size)
    assert claimed[0] == known and set(claimed[1:]) <= set(flood)


def test_keys_create_takes_new_users(settings):
    done = manage(settings, "keys", "create", f"cli-new-users-{time.monotonic_ns()}", "--scopes", "events:write",
                  "--new-users", "7")
    assert done.returncode == 0, done.stderr
    rows = json.loads(manage(settings, "keys", "list", "--json").stdout)
    assert any(row["new_users"] == 7 for row in rows)
    bad = manage(settings, "keys", "create", "cli-no-users", "--scopes", "events:write", "--new-users", "0")
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1
