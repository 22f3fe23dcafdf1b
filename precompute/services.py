"""Connections built from settings: one SQLAlchemy engine, one Redis client. Created by the caller, passed in."""

from __future__ import annotations

import redis

from .errors import Unavailable


def redis_client(url: str) -> redis.Redis:
    # Bytes in and out: feeds are binary and RQ expects raw responses.
    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5, health_check_interval=30)


def ping_redis(r: redis.Redis) -> None:
    try:
        r.ping()
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        raise Unavailable("redis", str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__) from exc
