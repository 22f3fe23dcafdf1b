"""A request refused before its body is read leaves the client's keep-alive connection usable: the API answers
``Connection: close`` (and gunicorn closes after the answer) instead of leaving the unread body on the connection,
so the client's next request goes on a fresh connection and is answered, not dropped (``api/errors.py``).
Behind the shipped nginx is not tested here (nginx reads the whole body before passing a request on)."""

from __future__ import annotations

import http.client
import secrets
import time

import orjson

from precompute.data import api_keys
from tests.test_slow_clients import _serve


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


def test_each_refusal_before_the_body_is_read_leaves_the_keep_alive_connection_usable(settings, world, user_id,
                                                                                        tmp_path):
    feed_only = api_keys.create(world.engine, f"feed-only-{time.monotonic_ns()}", frozenset({"feed:read"}))
    unknown = api_keys.PREFIX + secrets.token_urlsafe(32)
    # given the API under gunicorn as `manage.py serve` runs it, and one client connection kept alive
    with _serve(settings, tmp_path / "api.log", "--workers", "1", "--threads", "4") as base:
        conn = http.client.HTTPConnection(base.removeprefix("http://"), timeout=30)
        try:
            assert _feed(conn, user_id, world.key) == 200
            refusals = [
                ("a 3 MB body, over the limit", _events(60_000, user_id), world.key, 413),
                ("a 100 kB body with an unknown key", _events(2_000, user_id), unknown, 401),
                ("a 100 kB body with a malformed key", _events(2_000, user_id), "not-a-key", 401),
                ("a 100 kB body with a key lacking events:write", _events(2_000, user_id), feed_only, 403),
                ("a 3 MB body with an unknown key", _events(60_000, user_id), unknown, 401),
            ]
            for what, body, key, status in refusals:
                # when a request is refused before its body is read
                resp = _post(conn, "/events", body, key)
                assert resp.status == status, what
                # then the next request on the same client connection is answered
                try:
                    answered = _feed(conn, user_id, world.key)
                except (http.client.HTTPException, ConnectionError) as exc:
                    raise AssertionError(f"after {what} → {status} "
                                         f"(Connection: {resp.getheader('Connection')}), the next request on the "
                                         f"connection failed: {exc!r}") from None
                assert answered == 200, what
        finally:
            conn.close()
