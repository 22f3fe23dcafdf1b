"""What the API reads from the headers the shipped nginx sets, through a real nginx (``tests/proxy.py``) in front of
the API under gunicorn, nginx's address (127.0.0.1) in ``PREFEED_TRUSTED_PROXIES``: the RQ panel's origin check
(``Host $http_host``, ``X-Forwarded-Proto``) and the failed keys counted per client address (``X-Forwarded-For``),
as shipped and with a front proxy (a TLS load balancer) listed in its trusted front proxies; and what nginx answers
itself (its Server header, nosniff, ``/healthz`` for internal addresses only). Clients bind other loopback
addresses (Linux routes all of 127.0.0.0/8 there) to be told apart; the front proxy is one of them, naming the
clients behind it in ``X-Forwarded-For`` as a load balancer does."""

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

pytestmark = pytest.mark.xdist_group("behind_nginx")       # one API, and two nginx in front of it, for the module

# Each test's clients have addresses of their own: the API process remembers the addresses it blocked.
GUESSER, NEIGHBOUR = "127.0.0.5", "127.0.0.6"
FRONT = "127.0.0.2"                 # a load balancer in front of nginx, added to its trusted front proxies


@dataclasses.dataclass
class Proxied:
    settings: Settings
    base: str           # nginx's URL: http://127.0.0.1:<port>

    def connect(self, source: str = "127.0.0.1") -> http.client.HTTPConnection:
        """A keep-alive connection to nginx from the loopback address ``source``."""
        url = urlsplit(self.base)
        return http.client.HTTPConnection(url.hostname, url.port, timeout=30, source_address=(source, 0))


@pytest.fixture(scope="module")
def api(world, tmp_path_factory):
    """The API (one worker process) trusting 127.0.0.1 as its proxy, each client address allowed 3 failed keys at
    once and one a minute after; with a key prefix and queue of its own. Yields its settings and base URL."""
    tag = uuid.uuid4().hex[:10]
    s = dataclasses.replace(world.settings, key_prefix=f"pftest:{tag}:", queue_name=f"pftest-{tag}",
                            trusted_proxies="127.0.0.1", auth_failures_per_minute=1, auth_failures_burst=3)
    try:
        with serve(s, tmp_path_factory.mktemp("api") / "api.log", "--workers", "1", "--threads", "4") as base:
            yield s, base
    finally:
        delete_own_keys(s)


@pytest.fixture(scope="module")
def proxied(api, nginx, tmp_path_factory):
    """The API behind the shipped nginx as it is shipped: no front proxy trusted."""
    s, api_base = api
    with behind_nginx(nginx, api_base, tmp_path_factory.mktemp("behind-nginx")) as base:
        yield Proxied(s, base)


@pytest.fixture(scope="module")
def fronted(api, nginx, tmp_path_factory):
    """The API behind the shipped nginx with ``FRONT`` added to its trusted front proxies."""
    s, api_base = api
    with behind_nginx(nginx, api_base, tmp_path_factory.mktemp("fronted"), fronts=[FRONT]) as base:
        yield Proxied(s, base)


def _ask(conn: http.client.HTTPConnection, method: str, path: str, headers: dict) -> tuple[int, dict]:
    """``method path`` on ``conn``: the status and the JSON body (empty when the body is not JSON)."""
    conn.request(method, path, headers=headers)
    resp = conn.getresponse()
    body = resp.read()
    try:
        return resp.status, orjson.loads(body)
    except orjson.JSONDecodeError:
        return resp.status, {}


def _counted(settings: Settings) -> set[str]:
    """The addresses the API holds a failed-key budget for."""
    r = redis_client(settings.redis_url)
    try:
        return {k.decode().rsplit(":", 1)[1] for k in r.scan_iter(f"{settings.key_prefix}rate:address:*")}
    finally:
        r.close()


def _forget(settings: Settings, *addresses: str) -> None:
    """Delete the failed-key budgets of ``addresses``, so that other tests of the module see only theirs."""
    r = redis_client(settings.redis_url)
    try:
        r.delete(*(f"{settings.key_prefix}rate:address:{a}" for a in addresses))
    finally:
        r.close()


def _bad_key() -> dict:
    return {"Authorization": f"Bearer {PREFIX}{secrets.token_urlsafe(32)}"}


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
        answers = [_ask(guesser, "GET", feed, _bad_key()) for _ in range(4)]
        # then past its 3 failures the API (not nginx's own per-address limit) answers it 429
        assert [status for status, _ in answers] == [401, 401, 401, 429]
        assert "failed authentications" in answers[-1][1]["error"]
        # and counted them against its address, not nginx's
        assert _counted(proxied.settings) == {GUESSER}
        # and it stays held with the real key, even naming the other client in an X-Forwarded-For of its own
        assert _ask(guesser, "GET", feed, {"Authorization": f"Bearer {world.key}",
                                           "X-Forwarded-For": NEIGHBOUR})[0] == 429
        # while the other client, behind the same nginx, reads its feed
        assert _ask(neighbour, "GET", feed, {"Authorization": f"Bearer {world.key}"})[0] == 200
    finally:
        guesser.close()
        neighbour.close()


def test_behind_a_trusted_front_proxy_each_client_it_names_has_its_own_failed_key_budget(fronted, world, user_id):
    # given two clients behind one load balancer at FRONT, which nginx trusts: the balancer names each client at the
    # right of X-Forwarded-For (after whatever the client wrote there itself)
    first, second, forged = "203.0.113.7", "203.0.113.8", "198.51.100.9"
    front = fronted.connect(FRONT)
    feed = f"/feed/{user_id}"
    try:
        # when the first presents made-up keys
        answers = [_ask(front, "GET", feed, {**_bad_key(), "X-Forwarded-For": f"{forged}, {first}"})
                   for _ in range(4)]
        # then past its 3 failures the API holds it
        assert [status for status, _ in answers] == [401, 401, 401, 429]
        assert "failed authentications" in answers[-1][1]["error"]
        # while the second, through the same balancer, still reads its feed, and its own wrong key is a 401
        good = {"Authorization": f"Bearer {world.key}", "X-Forwarded-For": second}
        assert _ask(front, "GET", feed, good)[0] == 200
        assert _ask(front, "GET", feed, {**_bad_key(), "X-Forwarded-For": second})[0] == 401
        # and the failures were counted against each client's address: not the balancer's, nor what a client wrote
        counted = _counted(fronted.settings)
        assert {first, second} <= counted and not counted & {FRONT, forged, "127.0.0.1"}
    finally:
        front.close()
        _forget(fronted.settings, first, second)


def test_from_an_address_nginx_does_not_trust_a_forged_x_forwarded_for_is_ignored(fronted, user_id):
    # given a client at an address not among nginx's trusted front proxies
    address = "127.0.0.7"
    stranger = fronted.connect(address)
    named = [f"203.0.113.{20 + i}" for i in range(4)]
    try:
        # when it presents made-up keys, naming another client address in X-Forwarded-For each time
        statuses = [_ask(stranger, "GET", f"/feed/{user_id}", {**_bad_key(), "X-Forwarded-For": other})[0]
                    for other in named]
        # then they all count against its own address: held past its 3 failures, none of the named ones charged
        assert statuses == [401, 401, 401, 429]
        counted = _counted(fronted.settings)
        assert address in counted and not counted & set(named)
    finally:
        stranger.close()
        _forget(fronted.settings, address, *named)


def test_x_forwarded_proto_is_believed_only_from_a_trusted_front_proxy(fronted):
    # given a queued job, and the RQ panel's delete action posted from an https page of the dashboard's host and
    # port, as a browser does behind a load balancer that ends TLS
    r = redis_client(fronted.settings.redis_url)
    queue = make_queue(fronted.settings, r)
    job = queue.enqueue("jobs.tasks.drain_dirty")
    port = urlsplit(fronted.base).port
    action = f"/dashboard/rq/job/{job.id}/delete"
    https_page = {**basic("a", TOKEN), "Origin": f"https://127.0.0.1:{port}", "X-Forwarded-Proto": "https"}
    stranger, front = fronted.connect("127.0.0.8"), fronted.connect(FRONT)
    try:
        # when a client that reaches nginx directly claims https itself, then it is refused: nginx passes on the
        # scheme it saw (http), and the origin is not the page's
        status, body = _ask(stranger, "POST", action, {**https_page, "X-Forwarded-For": "203.0.113.30"})
        assert status == 403 and "own pages" in body["error"]
        assert r.exists(job.key)
        # when the trusted front says the client used https, then the action goes through
        assert _ask(front, "POST", action, {**https_page, "X-Forwarded-For": "203.0.113.30"}) == \
            (200, {"status": "OK"})
        assert not r.exists(job.key)
    finally:
        stranger.close()
        front.close()
        r.close()


def test_nginx_names_no_version_and_every_answer_says_nosniff(proxied):
    # given a client of the shipped nginx
    conn = proxied.connect()
    try:
        # when it reads an answer of the API's, and an answer of nginx's own (a body over its 1 MB)
        conn.request("GET", "/livez")
        api_answer = conn.getresponse()
        api_answer.read()
        conn.request("POST", "/events", body=b"x" * (2 << 20), headers={"Content-Type": "application/json"})
        nginx_answer = conn.getresponse()
        nginx_answer.read()
        # then neither names nginx's version, and each says nosniff once
        assert (api_answer.status, nginx_answer.status) == (200, 413)
        for answer in (api_answer, nginx_answer):
            assert answer.getheader("Server") == "nginx"
            assert answer.headers.get_all("X-Content-Type-Options") == ["nosniff"]
    finally:
        conn.close()


def test_healthz_answers_internal_addresses_only(fronted):
    # given clients reaching nginx through the trusted front, one from a public address, one from a private one
    front, local = fronted.connect(FRONT), fronted.connect()
    try:
        # when each asks for /healthz, then nginx refuses the public address itself, and answers the others
        status, _ = _ask(front, "GET", "/healthz", {"X-Forwarded-For": "203.0.113.40"})
        assert status == 403
        assert _ask(front, "GET", "/healthz", {"X-Forwarded-For": "10.1.2.3"})[0] == 200
        # and loopback (the orchestrator on the host, the container's own check) too
        assert _ask(local, "GET", "/healthz", {})[0] == 200
        # while /livez, which reads nothing, stays public
        assert _ask(front, "GET", "/livez", {"X-Forwarded-For": "203.0.113.40"})[0] == 200
    finally:
        front.close()
        local.close()
