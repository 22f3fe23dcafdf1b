"""What the API reads from the headers the shipped nginx sets, through a real nginx (``tests/proxy.py``) in front of
the API under gunicorn, nginx's address (127.0.0.1) in ``PREFEED_TRUSTED_PROXIES``: the RQ panel's origin check
(``Host $http_host``, ``X-Forwarded-Proto $scheme``) and the failed keys counted per client address
(``X-Forwarded-For $remote_addr``). Clients bind other loopback addresses (Linux routes all of 127.0.0.0/8 there)
to be told apart."""

from __future__ import annotations

import dataclasses
import http.client
import secrets
import uuid
from urllib.parse import urlsplit

import orjson
import pytest

from jobs.queues import make_queue
from precompute.data.api_keys import PREFIX
from precompute.feeds.client import redis_client
from precompute.settings import Settings
from tests.conftest import delete_own_keys
from tests.proxy import behind_nginx, serve
from tests.test_dashboard import TOKEN, basic

pytestmark = pytest.mark.xdist_group("behind_nginx")       # one API and one nginx for the module

GUESSER, NEIGHBOUR = "127.0.0.5", "127.0.0.6"


@dataclasses.dataclass
class Proxied:
    settings: Settings
    base: str           # nginx's URL: http://127.0.0.1:<port>

    def connect(self, source: str = "127.0.0.1") -> http.client.HTTPConnection:
        """A keep-alive connection to nginx from the loopback address ``source``."""
        url = urlsplit(self.base)
        return http.client.HTTPConnection(url.hostname, url.port, timeout=30, source_address=(source, 0))


@pytest.fixture(scope="module")
def proxied(world, nginx, tmp_path_factory):
    """The API (one worker process) trusting 127.0.0.1 as its proxy, each client address allowed 3 failed keys at
    once and one a minute after, behind the shipped nginx; with a key prefix and queue of its own."""
    tag = uuid.uuid4().hex[:10]
    s = dataclasses.replace(world.settings, key_prefix=f"pftest:{tag}:", queue_name=f"pftest-{tag}",
                            trusted_proxies="127.0.0.1", auth_failures_per_minute=1, auth_failures_burst=3)
    folder = tmp_path_factory.mktemp("behind-nginx")
    try:
        with serve(s, folder / "api.log", "--workers", "1", "--threads", "4") as api, \
                behind_nginx(nginx, api, folder) as base:
            yield Proxied(s, base)
    finally:
        delete_own_keys(s)


def _ask(conn: http.client.HTTPConnection, method: str, path: str, headers: dict) -> tuple[int, dict]:
    """``method path`` on ``conn``: the status and the JSON body (empty when the body is not JSON)."""
    conn.request(method, path, headers=headers)
    resp = conn.getresponse()
    body = resp.read()
    try:
        return resp.status, orjson.loads(body)
    except orjson.JSONDecodeError:
        return resp.status, {}


def test_rq_panel_actions_work_behind_the_shipped_nginx_and_refuse_a_foreign_origin(proxied):
    # given a failed job and a queued one on the API's queue
    r = redis_client(proxied.settings.redis_url)
    queue = make_queue(proxied.settings, r)
    failed = queue.enqueue("jobs.tasks.drain_dirty")
    queue.remove(failed)
    queue.failed_job_registry.add(failed, ttl=600, exc_string="boom")
    queued = queue.enqueue("jobs.tasks.drain_dirty")
    actions = [f"/dashboard/rq/job/{failed.id}/requeue", f"/dashboard/rq/job/{queued.id}/delete"]
    browser = proxied.connect()
    try:
        # when pages of other origins post the panel's actions through nginx (another site; the dashboard's host on
        # another port; on another scheme), then each is refused and nothing changes
        port = urlsplit(proxied.base).port
        for origin in ("http://evil.example", "http://127.0.0.1", f"https://127.0.0.1:{port}"):
            for path in actions:
                status, body = _ask(browser, "POST", path, {**basic("a", TOKEN), "Origin": origin})
                assert status == 403 and "own pages" in body["error"], (origin, path)
        assert queue.failed_job_registry.get_job_ids() == [failed.id] and r.exists(queued.key)
        # when the dashboard's own page, as the browser reached it through nginx, posts them
        statuses = [_ask(browser, "POST", path, {**basic("a", TOKEN), "Origin": proxied.base}) for path in actions]
        # then both go through: the failed job is queued again, the other one is gone
        assert statuses == [(200, {"status": "OK"})] * 2
        assert queue.failed_job_registry.get_job_ids() == [] and failed.id in queue.job_ids
        assert not r.exists(queued.key)
    finally:
        browser.close()
        r.close()


def test_behind_the_shipped_nginx_failed_keys_are_counted_against_the_clients_address(proxied, world, user_id):
    # given two clients of the same nginx, at 127.0.0.5 and 127.0.0.6
    guesser, neighbour = proxied.connect(GUESSER), proxied.connect(NEIGHBOUR)
    feed = f"/feed/{user_id}"
    try:
        # when the first presents made-up keys
        answers = [_ask(guesser, "GET", feed, {"Authorization": f"Bearer {PREFIX}{secrets.token_urlsafe(32)}"})
                   for _ in range(4)]
        # then past its 3 failures the API (not nginx's own per-address limit) answers it 429
        assert [status for status, _ in answers] == [401, 401, 401, 429]
        assert "failed authentications" in answers[-1][1]["error"]
        # and counted them against its address, not nginx's
        r = redis_client(proxied.settings.redis_url)
        counted = {k.decode().rsplit(":", 1)[1] for k in r.scan_iter(f"{proxied.settings.key_prefix}rate:address:*")}
        r.close()
        assert counted == {GUESSER}
        # and it stays held with the real key, even naming the other client in an X-Forwarded-For of its own
        assert _ask(guesser, "GET", feed, {"Authorization": f"Bearer {world.key}",
                                           "X-Forwarded-For": NEIGHBOUR})[0] == 429
        # while the other client, behind the same nginx, reads its feed
        assert _ask(neighbour, "GET", feed, {"Authorization": f"Bearer {world.key}"})[0] == 200
    finally:
        guesser.close()
        neighbour.close()
