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
