"""A refused request leaves the client's keep-alive connection usable. A body up to the limit is read off the
connection before the request waits for its turn (``api/turns.py``), so the connection is ready for the next request;
one over the limit is refused unread, and the API answers ``Connection: close`` (and gunicorn closes after the answer)
instead of leaving the unread body on the connection, so the client's next request goes on a fresh connection and is
answered, not dropped (``api/errors.py``).
Behind the shipped nginx (``tests/proxy.py``) the client's connection holds too: nginx answers a body over its 1 MB
itself, and reads every other body whole before passing the request on. There the API's ``Connection: close`` keeps
nginx from reusing its own connection to gunicorn, which gunicorn closes after draining at most 64 kB of a body the
app left unread: without it, the next POST nginx sent on that connection (a POST it does not retry elsewhere) was
answered 502 about half the time."""

from __future__ import annotations

import dataclasses
import http.client
import secrets
import time
import uuid

import orjson
import pytest

from precompute.data import api_keys
from tests.conftest import delete_own_keys
from tests.proxy import behind_nginx, serve

pytestmark = pytest.mark.xdist_group("refusals")       # one API server for the module


@pytest.fixture(scope="module")
def api(world, tmp_path_factory):
    """The API under gunicorn as ``manage.py serve`` runs it (one worker process of 4 threads), with a key prefix and
    queue of its own; its base URL."""
    tag = uuid.uuid4().hex[:10]
    s = dataclasses.replace(world.settings, key_prefix=f"pftest:{tag}:", queue_name=f"pftest-{tag}")
    try:
        with serve(s, tmp_path_factory.mktemp("refusals") / "api.log", "--workers", "1", "--threads", "4") as base:
            yield base
    finally:
        delete_own_keys(s)


def _post(conn: http.client.HTTPConnection, path: str, body: bytes, key: str) -> http.client.HTTPResponse:
    """POST ``body`` on ``conn`` and read the answer. A server that answers before reading the whole body may stop
    reading; like urllib3 (requests' pool), the answer is then read after the failed send."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    try:
        conn.request("POST", path, body=body, headers=headers)
    except (BrokenPipeError, ConnectionResetError):
        pass
    resp = conn.getresponse()
    resp.read()
    return resp


def _feed(conn: http.client.HTTPConnection, user: int, key: str) -> int:
    """GET the user's feed on ``conn`` (reopened only if the previous answer said ``Connection: close``)."""
    conn.request("GET", f"/feed/{user}", headers={"Authorization": f"Bearer {key}"})
    resp = conn.getresponse()
    resp.read()
    return resp.status


def _events(n: int, user: int) -> bytes:
    """A JSON batch of ``n`` view events (about 50 bytes each)."""
    return orjson.dumps([{"user_id": user, "item_id": 1 + k % 50, "type": "view"} for k in range(n)])


def _each_refusal_then_answered(conn: http.client.HTTPConnection, refusals: list, user: int,
                                key: str) -> list[http.client.HTTPResponse]:
    """Post each of ``refusals`` (what, body, key, expected status) on ``conn``, and after each post one event of
    ``user`` and read their feed on it with ``key``: each refusal is answered as expected, the event 202 and the feed
    200. The POST first: a proxy may retry a GET on another connection of its own, never a POST. The refusals'
    answers, in order."""
    assert _feed(conn, user, key) == 200
    answers = []
    for what, body, refused_key, status in refusals:
        # when a request is refused
        resp = _post(conn, "/events", body, refused_key)
        assert resp.status == status, what
        answers.append(resp)
        # then the next requests on the same client connection are answered
        try:
            answered = [_post(conn, "/events", _events(1, user), key).status, _feed(conn, user, key)]
        except (http.client.HTTPException, ConnectionError) as exc:
            raise AssertionError(f"after {what} → {status} (Connection: {resp.getheader('Connection')}), the next "
                                 f"request on the connection failed: {exc!r}") from None
        assert answered == [202, 200], what
    return answers


def test_each_refusal_before_the_body_is_read_leaves_the_keep_alive_connection_usable(api, world, user_id):
    feed_only = api_keys.create(world.engine, f"feed-only-{time.monotonic_ns()}", frozenset({"feed:read"}))
    unknown = api_keys.PREFIX + secrets.token_urlsafe(32)
    # given the API under gunicorn as `manage.py serve` runs it, and one client connection kept alive
    conn = http.client.HTTPConnection(api.removeprefix("http://"), timeout=30)
    try:
        # when each request is refused before its body is read, then the next ones on the connection are answered
        _each_refusal_then_answered(conn, [
            ("a 3 MB body, over the limit", _events(60_000, user_id), world.key, 413),
            ("a 100 kB body with an unknown key", _events(2_000, user_id), unknown, 401),
            ("a 100 kB body with a malformed key", _events(2_000, user_id), "not-a-key", 401),
            ("a 100 kB body with a key lacking events:write", _events(2_000, user_id), feed_only, 403),
            ("a 3 MB body with an unknown key", _events(60_000, user_id), unknown, 401),
        ], user_id, world.key)
    finally:
        conn.close()


def test_behind_the_shipped_nginx_each_refusal_leaves_the_keep_alive_connection_usable(api, nginx, world, user_id,
                                                                                       tmp_path):
    feed_only = api_keys.create(world.engine, f"feed-only-{time.monotonic_ns()}", frozenset({"feed:read"}))
    unknown = api_keys.PREFIX + secrets.token_urlsafe(32)
    # given the API behind the shipped nginx, and one client connection to nginx kept alive
    with behind_nginx(nginx, api, tmp_path) as base:
        conn = http.client.HTTPConnection(base.removeprefix("http://"), timeout=30)
        try:
            # when each kind of request is refused (the first by nginx, the others by the API), then the next
            # requests on the connection are answered. The API's five times over: were it to keep its connection
            # to nginx open over a body left unread, nginx would reuse it before gunicorn closed it about half the time
            answers = _each_refusal_then_answered(conn, [
                ("a 3 MB body, over nginx's client_max_body_size", _events(60_000, user_id), world.key, 413),
                *[("a 100 kB body with an unknown key", _events(2_000, user_id), unknown, 401),
                  ("a 100 kB body with a malformed key", _events(2_000, user_id), "not-a-key", 401),
                  ("a 100 kB body with a key lacking events:write", _events(2_000, user_id), feed_only, 403)] * 5,
            ], user_id, world.key)
        finally:
            conn.close()
    # and the body over nginx's limit was refused by nginx itself (its page, not the API's JSON)
    assert answers[0].getheader("Content-Type") == "text/html", answers[0].getheaders()
