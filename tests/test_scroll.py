"""Scrolling with cursors (``precompute/feeds/cursor.py``, ``GET /feed?cursor=``): pages that stay consistent while
the user acts, operators boost and deactivate, and the feed is recomputed."""

import base64
import dataclasses
import itertools
import random
import time

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from api import create_app
from api.services import services
from precompute.errors import InvalidInput
from precompute.feeds import cursor
from precompute.feeds.item_states import ItemStates
from precompute.feeds.keys import Keys
from precompute.feeds.store import FeedStore
from tests.conftest import with_key

LIMIT = 10


@pytest.fixture
def scroll_app(settings, world):
    app = create_app(dataclasses.replace(settings, live_refresh_ms=0, cursor_ttl=2), {"TESTING": True})
    yield app, with_key(app.test_client(), world.key)
    services(app).engine.dispose()


def test_unchanged_feed_scrolls_like_offsets(scroll_app, pipeline, user_id):
    _, client = scroll_app
    uid = user_id
    pipeline.recompute([uid])
    first = client.get(f"/feed/{uid}?limit={LIMIT}").get_json()
    pages, body = [first], first
    for _ in range(3):
        body = client.get(f"/feed/{uid}?limit={LIMIT}&cursor={body['next_cursor']}").get_json()
        pages.append(body)
    by_offset = [client.get(f"/feed/{uid}?limit={LIMIT}&offset={k * LIMIT}").get_json() for k in range(4)]
    assert [p["items"] for p in pages] == [p["items"] for p in by_offset]
    # an offset page past the first is not the start of a scroll: it has no cursor
    assert by_offset[1]["next_cursor"] is None and all(p["next_cursor"] for p in pages)


def test_a_tampered_foreign_or_expired_cursor(scroll_app, pipeline, own_users):
    _, client = scroll_app
    uid, other = own_users(2)
    pipeline.recompute([uid, other])
    first = client.get(f"/feed/{uid}?limit={LIMIT}").get_json()
    cursor = first["next_cursor"]
    # a cursor altered anywhere, or one of another user's scroll, is a 400; cursor and offset together too
    for bad in (cursor[:-2] + ("AA" if not cursor.endswith("AA") else "BB"), "x" + cursor, "not-a-cursor", "é"):
        resp = client.get(f"/feed/{uid}?cursor={bad}")
        assert resp.status_code == 400 and resp.get_json()["error"], bad
    assert client.get(f"/feed/{other}?cursor={cursor}").status_code == 400
    assert client.get(f"/feed/{uid}?cursor={cursor}&offset=10").status_code == 400
    # an expired one (the app's TTL here is 2 s) starts over from the top, and says so
    time.sleep(3.1)
    again = client.get(f"/feed/{uid}?limit={LIMIT}&cursor={cursor}").get_json()
    assert again["restarted"] is True and again["items"] == first["items"]


def test_the_cursor_stays_small(scroll_app, pipeline, user_id):
    _, client = scroll_app
    uid = user_id
    pipeline.recompute([uid])
    body = client.get(f"/feed/{uid}?limit=20").get_json()
    for _ in range(19):
        body = client.get(f"/feed/{uid}?limit=20&cursor={body['next_cursor']}").get_json()
    # 400 ids served: a few bytes each once delta-coded and compressed
    assert len(body["next_cursor"]) < 2000, len(body["next_cursor"])


@pytest.mark.parametrize("n, span", [(1, 10), (20, 2_000), (40, 20_000), (400, 20_000), (cursor.MAX_SERVED - 1, 20_000),
                                     (50, 2**63 - 1)])
def test_a_cursor_carries_its_scroll_exactly(n, span):
    # given a scroll of n served ids drawn from 1..span (dense, scattered, up to the largest id)
    rng = random.Random(n)
    served = tuple(sorted(rng.sample(range(1, span), n)))
    scroll = cursor.Scroll(7, served, n + 3, 2)
    cursors = cursor.Cursors(b"secret", 60)
    # when it is encoded and read back, then it is the same scroll
    token = cursors.encode(scroll)
    assert cursors.decode(token, 7) == scroll
    # and even the longest scroll of ids scattered over a 20,000-item catalogue fits a request line (gunicorn's
    # limit is 4,094 bytes), compressed past a few hundred ids
    if span == 20_000:
        assert len(token) < 2500, len(token)
    # a cursor is read only with the key that signed it: under another secret it names a key that API does not
    # have (the scroll starts over); with a character of its MAC altered it is refused
    assert cursor.Cursors(b"another secret", 60).decode(token, 7) is None
    with pytest.raises(InvalidInput):
        cursors.decode(token[:-4] + ("A" if token[-4] != "A" else "B") + token[-3:], 7)


def test_the_next_cursor_carries_the_scroll_after_the_page():
    # given a scroll and the page it serves next (ids in page order, two of them boosted)
    cursors = cursor.Cursors(b"secret", 60)
    scroll = cursor.Scroll(7, (3, 40, 900), 3, 1)
    page = [77, 5, 10_000, 41]
    # when the page's next cursor is read back, then it is the scroll after that page: ids merged, counts added
    assert cursors.decode(cursors.next(scroll, page, 2), 7) == scroll.after(page, 2) == \
        cursor.Scroll(7, (3, 5, 40, 41, 77, 900, 10_000), 7, 3)


def test_a_cursor_of_another_layout_starts_the_scroll_over():
    # given a cursor signed with this key, by a version that wrote another layout
    cursors = cursor.Cursors(b"secret", 60)
    payload = bytes([cursor._VERSION + 1]) + cursors.key_id.to_bytes(4, "little") + bytes(40)
    token = base64.urlsafe_b64encode(payload + cursors._sign(payload)).rstrip(b"=").decode()
    # then it is read as expired, not as an error: the client's scroll starts over
    assert cursors.decode(token, 7) is None


ACTIONS = st.sampled_from(["click", "boost", "unboost", "deactivate", "reactivate", "recompute", "exclude", "include",
                           "nothing"])


@pytest.mark.timeout(600)
def test_twenty_pages_while_everything_changes(scroll_app, settings, pipeline, own_users, r):
    app, client = scroll_app
    keys = Keys(settings.key_prefix)
    states = ItemStates(r, keys)
    store = FeedStore(r, settings)
    every = settings.boost_every
    users = itertools.cycle(own_users(6))        # a user per example (a shrinking run's later ones take them again)

    @hsettings(max_examples=6, deadline=None, database=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(actions=st.lists(ACTIONS, min_size=19, max_size=19), picks=st.lists(st.integers(0, 10**6), min_size=19,
                                                                               max_size=19))
    def scroll(actions, picks):
        uid = next(users)
        for key in r.scan_iter(f"{settings.key_prefix}{{live}}*"):
            r.delete(key)
        pipeline.recompute([uid])
        # boosted items within reach of the first pages, so that pages meet the density cap at their edges
        for i in store.read(uid).items.tolist()[5:60:6]:
            states.boost(int(i), 2.0, time.time() + 600)
        served, shown, inactive, clicked, excluded = [], [], set(), set(), set()
        body = None
        for k in range(20):
            url = f"/feed/{uid}?limit={LIMIT}" + (f"&cursor={body['next_cursor']}" if body else "") + \
                (f"&exclude={','.join(map(str, sorted(excluded)))}" if excluded else "")
            body = client.get(url).get_json()
            page = body["items"]
            feed = store.read(uid).items.tolist()
            boosted_now = {int(i) for i in r.hkeys(keys.live_boosts)}
            ids = [x["item_id"] for x in page]
            # no item twice; boosted ones only from the user's feed; nothing inactive or clicked is shown
            assert not set(ids) & set(served) and len(set(ids)) == len(ids), (k, ids)
            assert all(x["item_id"] in feed for x in page if x["boosted"])
            assert not set(ids) & (inactive | clicked | excluded)
            served += ids
            shown += [x["boosted"] for x in page]
            # the boost density holds on the pages put together: the first s + 1 slots hold at most s // every + 1
            running = 0
            for s, b in enumerate(shown):
                running += b
                assert running <= s // every + 1, (k, shown)
            # no eligible item ranked (organically, in the feed as it is now) above this page's deepest organic one
            # was left out: each is served by now (boosted items may wait below their place, by the boost rule)
            organic = [i for i in feed
                       if i not in inactive and i not in clicked and i not in boosted_now and i not in excluded]
            deepest = max((organic.index(x["item_id"]) for x in page
                           if not x["boosted"] and x["item_id"] in organic), default=-1)
            assert set(organic[:deepest + 1]) <= set(served), (k, organic[:deepest + 1], served)
            if len(page) < LIMIT:
                assert body["next_cursor"] is None
                break
            # then, before the next page, something happens
            if k < 19:
                # what happens, happens near what the user is about to see
                candidates = [i for i in feed if i not in inactive and i not in clicked and i not in served][:40]
                pick = candidates[picks[k] % len(candidates)] if candidates else None
                act = actions[k]
                if act == "click" and pick is not None:
                    assert client.post("/events", json={"user_id": uid, "item_id": pick,
                                                        "type": "click"}).status_code == 202
                    clicked.add(pick)
                elif act == "boost" and pick is not None:
                    states.boost(pick, 1.0 + picks[k] % 5, time.time() + 600)
                elif act == "unboost" and boosted_now:
                    states.unboost(sorted(boosted_now)[picks[k] % len(boosted_now)])
                elif act == "deactivate" and pick is not None:
                    states.set_active({pick: False})
                    inactive.add(pick)
                elif act == "reactivate" and inactive:
                    back = sorted(inactive)[picks[k] % len(inactive)]
                    states.set_active({back: True})
                    inactive.discard(back)
                elif act == "recompute":
                    pipeline.recompute([uid])
                elif act == "exclude" and pick is not None:       # the client leaves it out of the next pages
                    excluded.add(pick)
                elif act == "include" and excluded:                # and lets one back in
                    excluded.discard(sorted(excluded)[picks[k] % len(excluded)])
        states.set_active({i: True for i in inactive})

    scroll()


def test_excluded_items_stay_off_the_page_and_too_many_is_a_400(scroll_app, settings, pipeline, own_users):
    _, client = scroll_app
    uid, newcomer = own_users(2)
    pipeline.recompute([uid])
    top = [x["item_id"] for x in client.get(f"/feed/{uid}?limit={LIMIT}").get_json()["items"]]
    # Given the first page's top three left out, the page is the feed without them, from the top
    body = client.get(f"/feed/{uid}?limit={LIMIT}&exclude={top[0]},{top[1]},{top[2]},{top[1]}").get_json()
    assert [x["item_id"] for x in body["items"]][:LIMIT - 3] == top[3:]
    # A user without a feed gets the fallback, without them too
    fallback = client.get(f"/feed/{newcomer}?limit={LIMIT}").get_json()
    assert fallback["source"] == "fallback"
    left_out = [x["item_id"] for x in fallback["items"][:2]]
    again = client.get(f"/feed/{newcomer}?limit={LIMIT}&exclude={left_out[0]},{left_out[1]}").get_json()
    assert not {x["item_id"] for x in again["items"]} & set(left_out)
    # More than the maximum, or anything but ids, is a 400 with a JSON error
    for bad in (",".join(str(i) for i in range(1, settings.exclude_max + 2)), "1,x", "0", "1,,2"):
        reply = client.get(f"/feed/{uid}?limit={LIMIT}&exclude={bad}")
        assert reply.status_code == 400 and "exclude" in reply.get_json()["error"], bad
