"""What a flood of made-up user ids costs the service, and what it may not cost real users: a refusal is answered
from the process's memory once Redis said it, a key over its new-user budget is refused before its batch is
parsed, new users are ranked in batches small enough that a known user is claimed soon, and on SQLite a known
user's events are written before batches that bring new users (``api/events.py``, ``precompute/feeds/limits.py``,
``precompute/feeds/dirty.py``, ``precompute/data/recording.py``)."""

import dataclasses
import threading
import time

import numpy as np
from hypothesis import given, settings as hyp_settings, strategies as st

from precompute.data import api_keys, seen
from precompute.data.recording import _Turns
from precompute.feeds.dirty import DirtyUsers, NewUserPace
from precompute.feeds.limits import Bucket, Limiter
from tests.faults import wait_until


class _Counted:
    """The limiter's script, counting the round trips made through it."""

    def __init__(self, script) -> None:
        self.script, self.calls = script, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.script(*args, **kwargs)


def test_a_refusal_is_answered_from_memory_for_as_long_as_redis_would_refuse(r, settings):
    limiter = Limiter(r)
    limiter._script = counted = _Counted(limiter._script)
    bucket = Bucket(f"{settings.key_prefix}test-memo-{time.monotonic_ns()}", rate=20.0, burst=10, cost=10)
    # given a bucket of 10 tokens at 20/s, emptied, then refused by Redis (10 tokens need 0.5 s)
    assert limiter.take_each([bucket]) == []
    waits = limiter.take_each([bucket])
    assert 0.4 < waits[0] <= 0.5 and counted.calls == 2
    # when the same cost is asked again, many times, within that wait
    again = [limiter.take_each([bucket]) for _ in range(50)]
    # then each is refused with what is left of it, and no request reached Redis
    assert counted.calls == 2 and all(0 < w[0] <= waits[0] for w in again)
    # and a smaller cost is known refused only until it could fit (1 token: 0.05 s after the first is back)
    assert 0 < limiter.known_wait(dataclasses.replace(bucket, cost=1)) <= waits[0] - 9 / 20
    # and once the wait is over, Redis is asked again and lets it through: never refused longer than it would be
    time.sleep(waits[0])
    assert limiter.take_each([bucket]) == [] and counted.calls == 3


def test_a_key_over_its_new_user_budget_is_refused_before_its_batch_is_parsed(client, world, own_users,
                                                                              new_user_ids):
    key = api_keys.create(world.engine, f"flood-{time.monotonic_ns()}", frozenset({"events:write"}), new_users=10)
    auth = {"Authorization": f"Bearer {key}"}
    fresh = new_user_ids(30)
    # given a key that used its 10 new user ids, then had a batch of 10 more refused
    assert client.post("/events", json=_events(fresh[:10]), headers=auth).status_code == 202
    assert client.post("/events", json=_events(fresh[10:20]), headers=auth).status_code == 429
    # when it posts new user ids in a batch whose events are not even well-formed
    bad = [{"user_id": u, "item_id": 3, "type": "no-such-type"} for u in fresh[20:]]
    resp = client.post("/events", json=bad, headers=auth)
    # then it is refused for its budget, with a wait, before its events were read (a parse would have said 400)
    assert resp.status_code == 429 and float(resp.headers["Retry-After"]) > 0
    assert "new user ids" in resp.get_json()["error"]
    # and the same key's events of users the database has still go through
    known = own_users(3)
    assert client.post("/events", json=_events(known), headers=auth).status_code == 202
    # and a malformed batch of the known users is still told what is wrong
    assert client.post("/events", json=[{"user_id": known[0], "item_id": 3, "type": "nope"}],
                       headers=auth).status_code == 400


def test_new_users_are_ranked_by_one_drain_at_a_time_and_known_users_by_any(settings, r):
    dirty = DirtyUsers(r, dataclasses.replace(settings, recompute_interval_ms=0))
    # given 20 new users due and two known ones
    dirty.mark_new(list(range(3_000_000, 3_000_020)))
    time.sleep(0.002)
    dirty.mark([31, 32])
    # when one drain claims, new users included
    known, fresh, _ = dirty.claim_tiers(50, 5, ranker="drain-a")
    assert sorted(known) == [31, 32] and len(fresh) == 5 and dirty.ranked_until() is not None
    # then another drain gets no new user while the first ranks them, but every known user marked since
    dirty.mark([33])
    known, fresh, _ = dirty.claim_tiers(50, 5, ranker="drain-b")
    assert known == [33] and fresh == []
    # and the first goes on taking them
    assert len(dirty.claim_tiers(50, 5, ranker="drain-a")[1]) == 5
    # and once the first stops ranking (its drain ended), the other takes them at once
    dirty.stop_ranking("drain-a")
    assert dirty.ranked_until() is None
    assert len(dirty.claim_tiers(50, 5, ranker="drain-b")[1]) == 5
    # and a drain that is not the ranker cannot end the other's turn
    dirty.stop_ranking("drain-a")
    assert dirty.ranked_until() is not None


def test_a_drain_claims_new_users_as_few_at_a_time_as_its_pace_allows_and_known_users_whole(settings, r):
    dirty = DirtyUsers(r, dataclasses.replace(settings, recompute_interval_ms=0))
    # given 100 new users due, then 3 known users
    dirty.mark_new(list(range(2_000_000, 2_000_100)))
    time.sleep(0.002)
    dirty.mark([11, 12, 13])
    # when a drain claims up to 50 users, at most 5 of them new
    first, _ = dirty.claim(50, 5)
    second, _ = dirty.claim(50, 5)
    # then the known users come first, and new ones only as many as allowed, oldest first
    assert first == [11, 12, 13, 2_000_000, 2_000_001, 2_000_002, 2_000_003, 2_000_004]
    assert second == list(range(2_000_005, 2_000_010))
    # and without a cap on new users, the batch is filled with them
    assert len(dirty.claim(50)[0]) == 50


def test_the_pace_of_new_users_settles_on_the_batch_that_fits_its_budget():
    # given batches that cost 30 ms plus 3 ms per user, and a budget of 100 ms
    def cost(n: int) -> float:
        return 0.030 + 0.003 * n

    pace = NewUserPace(0.100, most=500)
    # when a drain sizes each batch by the one before
    sizes = []
    for _ in range(12):
        sizes.append(pace.size)
        pace.observe(pace.size, cost(pace.size))
    # then it settles within a user of (100 - 30) / 3 = 23 users, whatever it started at
    assert abs(sizes[-1] - 23) <= 1 and all(cost(n) <= 0.100 + 0.003 for n in sizes[-4:])
    # and a batch whose fixed cost alone is over the budget is one user; one that is cheap is capped at ``most``
    slow = NewUserPace(0.100, most=500)
    slow.observe(slow.size, 0.5)
    assert slow.size == 1
    cheap = NewUserPace(0.100, most=500)
    cheap.observe(100, 0.001)
    assert cheap.size == 500


def test_new_users_wait_out_their_share_of_a_drains_time_and_known_users_do_not(settings, r):
    dirty = DirtyUsers(r, dataclasses.replace(settings, recompute_interval_ms=0))
    pace = NewUserPace(0.100, most=500, share=0.25)
    dirty.mark_new(list(range(3_000_000, 3_000_050)))
    # given a drain that just spent 90 ms on a batch of 9 users, 6 of them new, with new users at most a quarter of
    # its time
    pace.observe(9, 0.090, new=6)
    now = time.monotonic()
    # then for the next 60 ms x 3 = 180 ms it claims no new user, though 50 are due
    assert pace.allowed(now) == 0 and 0.17 < pace.resume_at - now <= 0.18
    assert dirty.claim_tiers(50, pace.allowed(now))[:2] == ([], [])
    # and a known user marked meanwhile is claimed at once, apart from the new ones
    dirty.mark([77])
    assert dirty.claim_tiers(50, pace.allowed(time.monotonic()))[:2] == ([77], [])
    # and once the pause is over, new users are claimed again, as many as the pace allows
    time.sleep(0.19)
    known, fresh, _ = dirty.claim_tiers(50, pace.allowed(time.monotonic()))
    assert known == [] and fresh == list(range(3_000_000, 3_000_000 + pace.size))
    # and with a share of 1 there is no pause
    whole = NewUserPace(0.100, most=500, share=1.0)
    whole.observe(9, 0.090, new=9)
    assert whole.allowed(time.monotonic()) == whole.size


def test_a_known_users_write_goes_before_writes_that_bring_new_users():
    turns = _Turns()
    order, held = [], threading.Event()
    release = threading.Event()

    def write(name: str, first: bool, hold: threading.Event | None = None) -> None:
        with turns.turn(first):
            order.append(name)
            if hold is not None:
                held.set()
                hold.wait(5)

    # given a batch of new users writing, and eight more waiting for their turn
    holder = threading.Thread(target=write, args=("flood-0", False, release))
    holder.start()
    held.wait(5)
    later = [threading.Thread(target=write, args=(f"flood-{k}", False)) for k in range(1, 9)]
    for t in later:
        t.start()
    time.sleep(0.05)
    # when a batch of known users asks for a turn after it
    known = threading.Thread(target=write, args=("known", True))
    known.start()
    time.sleep(0.05)
    release.set()
    for t in (holder, *later, known):
        t.join(5)
    # then the known users' batch writes next, before every new users' batch that was waiting before it
    assert order[:2] == ["flood-0", "known"] and len(order) == 10


@hyp_settings(max_examples=300, deadline=None)
@given(cap=st.integers(1, 6), steps=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 10)), max_size=10))
def test_merging_one_interaction_gives_the_bytes_of_a_full_repack(cap, steps):
    value = seen.empty(cap)
    for item, ts in steps:
        old = seen.unpack(value)
        whole = seen.pack(np.r_[old["item"], [item]], np.r_[old["ts"], [float(ts)]], cap)
        value = seen.merge(value, [item], [float(ts)], cap)
        assert value == whole


def _events(users) -> list[dict]:
    return [{"user_id": u, "item_id": 3, "type": "view"} for u in users]


def test_an_api_process_runs_a_few_requests_at_once_and_the_rest_wait():
    from api.turns import Turns

    running, most, order = [0], [0], []
    lock, gate = threading.Lock(), threading.Event()

    def app(environ, start_response):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            order.append(environ["PATH_INFO"])
        if environ["PATH_INFO"] != "/healthz":
            gate.wait(5)
        with lock:
            running[0] -= 1
        start_response("200 OK", [])
        return [environ["wsgi.input"].read()]

    turns = Turns(app, concurrency=2, body_max=100)
    answers = {}

    def request(path: str, body: bytes = b"") -> None:
        environ = {"PATH_INFO": path, "CONTENT_LENGTH": str(len(body)) if body else "",
                   "wsgi.input": _Trickle(body)}
        answers[path] = b"".join(turns(environ, lambda *a: None))

    # given 8 requests at a process that runs 2 at a time, the 2 running held
    threads = []
    for k in range(8):
        threads.append(threading.Thread(target=request, args=(f"/r{k}", b"x" * k)))
        threads[-1].start()
        wait_until(lambda: len(order) + turns.waiting() == k + 1, 5, "the request", 0.001)   # running or waiting
    # then 2 run and the others wait
    assert sorted(order) == ["/r0", "/r1"] and turns.waiting() == 6
    # and a health probe arriving last is answered at once, while they still wait
    probe = threading.Thread(target=request, args=("/healthz",))
    probe.start()
    probe.join(5)
    assert list(answers) == ["/healthz"] and answers["/healthz"] == b""
    gate.set()
    for t in threads:
        t.join(5)
    # and then every one ran, never more than 2 at once (besides the probe), each with its whole body
    assert most[0] <= 3 and sorted(order) == sorted([f"/r{k}" for k in range(8)] + ["/healthz"])
    assert all(answers[f"/r{k}"] == b"x" * k for k in range(8))


def test_turns_go_round_the_clients_so_one_key_cannot_fill_the_queue():
    from api.turns import Turns

    order, gate = [], threading.Event()

    def app(environ, start_response):
        order.append(environ["PATH_INFO"])
        gate.wait(5)
        start_response("200 OK", [])
        return [b""]

    turns = Turns(app, concurrency=1, body_max=100, client=lambda environ: environ["HTTP_AUTHORIZATION"])

    def request(path: str, key: str) -> None:
        environ = {"PATH_INFO": path, "CONTENT_LENGTH": "", "wsgi.input": _Trickle(b""),
                   "HTTP_AUTHORIZATION": f"Bearer {key}", "REMOTE_ADDR": "10.0.0.1"}
        b"".join(turns(environ, lambda *a: None))

    # given one key with a request under way and 5 waiting, in a process that runs one at a time
    threads = []
    for path, key in [(f"/flood{k}", "flood") for k in range(6)] + [("/real", "real"), ("/other", "other")]:
        threads.append(threading.Thread(target=request, args=(path, key)))
        threads[-1].start()
        wait_until(lambda: len(order) + turns.waiting() == len(threads), 5, "the request", 0.001)
    # (and two other keys that sent one request each after them)
    gate.set()
    for t in threads:
        t.join(5)
    # then each of the others waits for the request under way and one of the flood's at most, not for all of its
    # queue; the flood's run in the order they came
    assert order[:5] == ["/flood0", "/flood1", "/real", "/other", "/flood2"]
    assert [p for p in order if p.startswith("/flood")] == [f"/flood{k}" for k in range(6)]


def test_made_up_keys_wait_in_their_address_queue_and_a_known_key_in_its_own(settings, world, user_id):
    from api import create_app
    from api.services import services

    # given an API process that runs one request at a time behind a trusted proxy, which knows the data key
    # (one request of it served), and whose app holds each request until told
    app = create_app(dataclasses.replace(settings, api_concurrency=1, trusted_proxies="10.0.0.1"),
                     {"TESTING": True})
    assert _get(app, f"/feed/{user_id}", f"Bearer {world.key}", "198.51.100.7").status_code == 200
    order, gate = [], threading.Event()
    turns, inner = app.wsgi_app, app.wsgi_app.wsgi_app

    def held(environ, start_response):
        order.append(environ["QUERY_STRING"])
        gate.wait(5)
        return inner(environ, start_response)

    turns.wsgi_app = held
    codes = {}

    def request(tag: str, authorization: str | None, address: str) -> None:
        codes[tag] = _get(app, f"/feed/{user_id}?{tag}", authorization, address).status_code

    # when one address sends a made-up key per request (of a key's shape or not), one under way and 5 waiting,
    # then the data key from that same address and a request without a key from another address
    sent = [("held", f"Bearer pf_{'h' * 43}", "203.0.113.9")]
    sent += [(f"flood{k}", f"Bearer pf_{str(k) * 43}" if k % 2 else f"Bearer made-up-{k}", "203.0.113.9")
             for k in range(5)]
    sent += [("real", f"Bearer {world.key}", "203.0.113.9"), ("other", None, "198.51.100.7")]
    threads = []
    try:
        for tag, authorization, address in sent:
            threads.append(threading.Thread(target=request, args=(tag, authorization, address)))
            threads[-1].start()
            wait_until(lambda: len(order) + turns.waiting() == len(threads), 5, "the request", 0.001)
    finally:
        gate.set()
        for t in threads:
            t.join(5)
    # then the made-up keys share their address's queue: the data key waits for one of them, the other address for
    # one of them and the data key, not for a queue per made-up key
    assert order == ["held", "flood0", "real", "other", "flood1", "flood2", "flood3", "flood4"]
    # and each was still answered as its key deserves
    assert codes["real"] == 200 and codes["other"] == 401
    assert all(codes[f"flood{k}"] == 401 for k in range(5))
    services(app).engine.dispose()


def _get(app, path: str, authorization: str | None, address: str):
    """``GET path`` through the whole app, turns included, as a trusted proxy (10.0.0.1) sends it for ``address``."""
    headers = {"X-Forwarded-For": address, **({"Authorization": authorization} if authorization else {})}
    return app.test_client().get(path, headers=headers, environ_base={"REMOTE_ADDR": "10.0.0.1"})


def test_a_slow_body_holds_a_thread_not_a_turn():
    from api.turns import Turns

    streams = []

    def app(environ, start_response):
        streams.append(environ["wsgi.input"])
        start_response("200 OK", [])
        return [environ["wsgi.input"].read()]

    turns = Turns(app, concurrency=1, body_max=100)
    slow = _Trickle(b"abcd", delay=0.5)
    # given a client sending its 4-byte body over 2 s, and the process running one request at a time
    sender = threading.Thread(target=lambda: b"".join(turns({"PATH_INFO": "/events", "CONTENT_LENGTH": "4",
                                                             "wsgi.input": slow}, lambda *a: None)))
    sender.start()
    time.sleep(0.1)
    # when another request comes meanwhile, it is answered without waiting for that body
    t0 = time.monotonic()
    got = b"".join(turns({"PATH_INFO": "/feed/1", "CONTENT_LENGTH": "", "wsgi.input": _Trickle(b"")},
                         lambda *a: None))
    assert got == b"" and time.monotonic() - t0 < 0.3
    sender.join(5)
    # and a body over the limit is left unread, for the app to refuse
    big = _Trickle(b"y" * 200)
    b"".join(turns({"PATH_INFO": "/events", "CONTENT_LENGTH": "200", "wsgi.input": big}, lambda *a: None))
    assert streams[-1] is big and big.reads == 1


def test_an_answer_is_closed_once_its_turn_has_made_it():
    from api.turns import Turns

    # given an app whose answer must be closed (a response's close hooks, an open file)
    class Answer(list):
        closed = False

        def close(self):
            Answer.closed = True

    turns = Turns(lambda environ, start_response: Answer([b"ok"]), concurrency=1, body_max=100)
    # when a request is answered through the turns, which hand the server a list
    got = turns({"PATH_INFO": "/feed/1", "CONTENT_LENGTH": ""}, lambda *a: None)
    # then the app's own iterable was closed, as the server would have closed it
    assert got == [b"ok"] and Answer.closed


class _Trickle:
    """A request body that arrives ``delay`` seconds per byte."""

    def __init__(self, data: bytes, delay: float = 0.0) -> None:
        self.data, self.delay, self.reads = data, delay, 0

    def read(self, n: int = -1) -> bytes:
        self.reads += 1
        out, self.data = (self.data, b"") if n < 0 else (self.data[:n], self.data[n:])
        time.sleep(self.delay * len(out))
        return out
