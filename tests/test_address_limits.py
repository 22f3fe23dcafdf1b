"""Failed authentications counted per client address (``api/addresses.py``): past the budget an address is answered
429 with ``Retry-After`` before its key is looked up; behind trusted proxies the address is X-Forwarded-For's."""

import base64
import dataclasses
import ipaddress
import secrets
import time

import pytest
from sqlalchemy import event

from api import create_app
from api.addresses import client_address, trusted_networks
from api.services import services
from precompute.data.api_keys import PREFIX
from precompute.errors import ConfigError

GUESSER, NEIGHBOUR, PROXY = "198.51.100.7", "198.51.100.8", "10.1.2.3"


def made_up() -> str:
    """A key of a real key's shape that no one made: looking it up costs a database read."""
    return PREFIX + secrets.token_urlsafe(32)


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def limited(settings):
    """Apps (API processes) sharing one Redis, each address allowed 3 failures at once and one a second after."""
    apps = []

    def make(**overrides):
        apps.append(create_app(dataclasses.replace(settings, auth_failures_per_minute=60, auth_failures_burst=3,
                                                   **overrides), {"TESTING": True}))
        return apps[-1]

    yield make
    for app in apps:
        services(app).engine.dispose()


class Queries:
    """Counts the statements an engine sends to the database while it is in a ``with`` block."""

    def __init__(self, engine):
        self.engine, self.n = engine, 0

    def _count(self, *_):
        self.n += 1

    def __enter__(self):
        event.listen(self.engine, "before_cursor_execute", self._count)
        return self

    def __exit__(self, *_):
        event.remove(self.engine, "before_cursor_execute", self._count)


def test_repeated_failures_from_one_address_get_an_early_429(limited, world, user_id):
    # given an API whose addresses may fail 3 times at once
    app = limited()
    guesser = app.test_client()
    guesser.environ_base["REMOTE_ADDR"] = GUESSER
    # when one address presents 3 made-up keys, then each is a plain 401
    assert [guesser.get(f"/feed/{user_id}", headers=bearer(made_up())).status_code for _ in range(3)] == [401] * 3
    # and the 4th is a 429 that says when to come back
    refused = guesser.get(f"/feed/{user_id}", headers=bearer(made_up()))
    assert refused.status_code == 429 and 1 <= int(refused.headers["Retry-After"]) <= 2
    assert "failed authentications" in refused.get_json()["error"]
    # then while the block lasts, a new made-up key costs no database read, and even the real key is refused: an
    # answer that differed would tell a guesser which guess was right
    with Queries(services(app).engine) as q:
        assert guesser.get(f"/feed/{user_id}", headers=bearer(made_up())).status_code == 429
        assert guesser.get(f"/feed/{user_id}", headers=bearer(world.key)).status_code == 429
    assert q.n == 0
    # and another address is not held by it
    neighbour = app.test_client()
    neighbour.environ_base["REMOTE_ADDR"] = NEIGHBOUR
    assert neighbour.get(f"/feed/{user_id}", headers=bearer(made_up())).status_code == 401
    assert neighbour.get(f"/feed/{user_id}", headers=bearer(world.key)).status_code == 200
    # when the Retry-After has passed, then the address is served again, and one more failure fits
    time.sleep(int(refused.headers["Retry-After"]) + 0.1)
    assert guesser.get(f"/feed/{user_id}", headers=bearer(world.key)).status_code == 200
    assert guesser.get(f"/feed/{user_id}", headers=bearer(made_up())).status_code == 401


def test_the_failures_are_shared_by_every_api_process(limited, world, user_id):
    # given two API processes on one Redis
    first, second = limited().test_client(), limited().test_client()
    for c in (first, second):
        c.environ_base["REMOTE_ADDR"] = GUESSER
    # when an address fails 3 times on the first
    for _ in range(3):
        assert first.get(f"/feed/{user_id}", headers=bearer(made_up())).status_code == 401
    # then its next failure on the second is refused with 429, and the second holds it blocked from then on
    assert second.get(f"/feed/{user_id}", headers=bearer(made_up())).status_code == 429
    assert second.get(f"/feed/{user_id}", headers=bearer(world.key)).status_code == 429


def test_good_requests_are_not_counted(limited, world, user_id, r, settings):
    # given an address that makes many good requests and the odd scope refusal of a real key
    client = limited().test_client()
    client.environ_base["REMOTE_ADDR"] = GUESSER
    for _ in range(20):
        assert client.get(f"/feed/{user_id}", headers=bearer(world.key)).status_code == 200
        assert client.get("/metrics", headers=bearer(world.key)).status_code == 403
    # then it has no failure budget in Redis at all: a good request neither charges nor reads one
    assert list(r.scan_iter(f"{settings.key_prefix}rate:address:*")) == []
    # and requests without a key are 401 without being counted (nothing was looked up)
    for _ in range(5):
        assert client.get(f"/feed/{user_id}").status_code == 401
    assert client.get(f"/feed/{user_id}", headers=bearer(world.key)).status_code == 200


def test_the_dashboards_wrong_passwords_count_too(limited, user_id):
    # given a browser guessing the dashboard's password (HTTP basic auth)
    browser = limited().test_client()
    browser.environ_base["REMOTE_ADDR"] = GUESSER

    def basic(password: str) -> dict:
        return {"Authorization": "Basic " + base64.b64encode(f"admin:{password}".encode()).decode()}

    statuses = [browser.get("/dashboard", headers=basic(made_up())).status_code for _ in range(4)]
    # then its 4th guess is refused for the address, not judged
    assert statuses == [403, 403, 403, 429]


def test_behind_a_trusted_proxy_the_forwarded_address_is_counted(limited, world, user_id):
    # given an API behind a proxy in 10.0.0.0/8, and two clients behind it
    app = limited(trusted_proxies="10.0.0.0/8")

    def via_proxy(client_addr: str, spoof: str = ""):
        c = app.test_client()
        c.environ_base["REMOTE_ADDR"] = PROXY
        c.environ_base["HTTP_X_FORWARDED_FOR"] = f"{spoof}{client_addr}"
        return c

    guesser, neighbour = via_proxy(GUESSER), via_proxy(NEIGHBOUR)
    # when one of them fails past its budget
    assert [guesser.get(f"/feed/{user_id}", headers=bearer(made_up())).status_code for _ in range(4)] == \
        [401, 401, 401, 429]
    # then it is held, whatever it writes at the left of X-Forwarded-For (the proxy appends the real address)
    assert via_proxy(GUESSER, spoof="203.0.113.9, ").get(f"/feed/{user_id}", headers=bearer(world.key)).status_code \
        == 429
    # and the other client of the same proxy is not
    assert neighbour.get(f"/feed/{user_id}", headers=bearer(world.key)).status_code == 200


def test_without_trusted_proxies_the_header_is_ignored(limited, world, user_id):
    # given an API that trusts no proxy, and a client that writes a new X-Forwarded-For on every request
    app = limited()
    statuses = []
    for i in range(4):
        c = app.test_client()
        c.environ_base["REMOTE_ADDR"] = GUESSER
        c.environ_base["HTTP_X_FORWARDED_FOR"] = f"203.0.113.{i}"
        statuses.append(c.get(f"/feed/{user_id}", headers=bearer(made_up())).status_code)
    # then its failures are counted against its own address all the same
    assert statuses == [401, 401, 401, 429]


@pytest.mark.parametrize("remote, forwarded, expected", [
    ("198.51.100.7", "", "198.51.100.7"),                            # direct
    ("198.51.100.7", "1.2.3.4", "198.51.100.7"),                     # not from a proxy: the header is ignored
    ("10.0.0.1", "1.2.3.4", "1.2.3.4"),                              # one proxy
    ("10.0.0.1", "6.6.6.6, 1.2.3.4", "1.2.3.4"),                     # a client's own entry at the left is ignored
    ("10.0.0.1", "1.2.3.4, 10.0.0.9", "1.2.3.4"),                    # two trusted proxies in a row
    ("10.0.0.1", "10.0.0.8, 10.0.0.9", "10.0.0.8"),                  # all trusted: the leftmost
    ("10.0.0.1", "", "10.0.0.1"),                                    # a trusted proxy that names no one
    ("10.0.0.1", "garbage, 1.2.3.4", "1.2.3.4"),
    ("10.0.0.1", "1.2.3.4, garbage", "10.0.0.1"),                    # unreadable: the last hop that could be read
    ("10.0.0.1", "2001:db8::1", "2001:db8::1"),
])
def test_the_client_address(remote, forwarded, expected):
    trusted = trusted_networks("10.0.0.0/8, 192.168.1.1")
    environ = {"REMOTE_ADDR": remote, "HTTP_X_FORWARDED_FOR": forwarded}
    assert client_address(environ, trusted) == expected
    assert ipaddress.ip_network("192.168.1.1/32") in trusted


def test_a_malformed_trusted_proxy_fails_at_start(settings):
    with pytest.raises(ConfigError, match="PREFEED_TRUSTED_PROXIES"):
        create_app(dataclasses.replace(settings, trusted_proxies="10.0.0.0/8, nginx"), {"TESTING": True})
