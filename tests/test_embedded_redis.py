"""The embedded Valkey server requires a password that no other local user can read: made at its first start, kept
in an owner-only file, never on a command line; the URL the commands hand their children carries it."""

import json
import os
import stat

import pytest
import redis

from cli import embedded
from precompute.settings import Settings


@pytest.fixture
def started(tmp_path):
    before = os.environ.pop("REDIS_URL", None)      # ensure_redis hands its URL to children through it
    try:
        settings = embedded.ensure_redis(Settings(var_dir=tmp_path, redis_url=None, queue_redis_url=None,
                                                  feed_redis_url=None))
        yield settings, tmp_path / "valkey"
    finally:
        embedded.stop()
        os.environ.pop("REDIS_URL", None)
        if before is not None:
            os.environ["REDIS_URL"] = before


def test_the_embedded_server_requires_a_password_kept_private(started):
    settings, folder = started
    url = redis.connection.parse_url(settings.redis_url)
    # then a client without the password is refused, one with the URL's is served
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=url["port"]).ping()
    assert redis.Redis.from_url(settings.redis_url).ping() and url["password"]
    # and the password lives in files only this user may read, never in the server's command line
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in ("valkey.conf", "server.json"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, name
    pid = json.loads((folder / "server.json").read_text())["pid"]
    assert url["password"] not in open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")


def test_a_restarted_embedded_server_keeps_its_password(started, tmp_path):
    settings, _ = started
    embedded.stop()
    again = embedded.ensure_redis(Settings(var_dir=tmp_path, redis_url=None, queue_redis_url=None,
                                           feed_redis_url=None))
    assert redis.Redis.from_url(again.redis_url).ping()
    assert redis.connection.parse_url(again.redis_url)["password"] == \
        redis.connection.parse_url(settings.redis_url)["password"]
