"""The Redis client: built by the caller from ``Settings.redis_url`` and passed in (the database engine is
``data/engine.py``)."""

from __future__ import annotations

import redis

from ..errors import Unavailable, first_line


def redis_client(url: str) -> redis.Redis:
    # Bytes in and out: feeds are binary and RQ expects raw responses.
    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5, health_check_interval=30)


def ping_redis(r: redis.Redis) -> None:
    try:
        r.ping()
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        raise Unavailable("redis", first_line(exc)) from exc
