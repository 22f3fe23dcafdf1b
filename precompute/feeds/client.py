"""Redis clients: built by the caller from the settings and passed in (the database engine is ``data/engine.py``).

Two roles, two URLs (``Settings.queue_url`` / ``feed_url``, both ``REDIS_URL`` unless set): the RQ queue and the
dirty-user set need one Redis (RQ does not run on a cluster), feeds and item states may live on Redis Cluster,
selected by ``redis+cluster://host:port[,host:port...]`` (any node; more are tried in turn at start).

Scripts cannot be pipelined through redis-py's cluster client; ``per_node`` groups keys by the node serving their
slot and gives one ordinary pipeline per node, so a batch of scripted writes costs one round trip per node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from redis.cluster import ClusterNode, RedisCluster

from ..errors import Unavailable, first_line
from ..settings.connections import cluster_nodes

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
_OPTIONS: dict[str, Any] = dict(socket_connect_timeout=2, socket_timeout=5, health_check_interval=30)


def redis_client(url: str) -> redis.Redis | RedisCluster:
    """A client for ``url``; bytes in and out (feeds are binary and RQ expects raw responses)."""
    scheme = url.split("://", 1)[0].lower()
    if scheme in CLUSTER_SCHEMES:
        return cluster_client(url)
    return redis.Redis.from_url(url, **_OPTIONS)


def cluster_client(url: str) -> RedisCluster:
    parts = urlsplit(url)
    nodes = [ClusterNode(host, port) for host, port in cluster_nodes(url)]
    auth = parts.netloc.rpartition("@")[0]
    user, _, password = auth.partition(":") if auth else ("", "", "")
    return RedisCluster(startup_nodes=nodes, username=unquote(user) or None, password=unquote(password) or None,
                        ssl=parts.scheme.lower().startswith("rediss"), **_OPTIONS)


def is_cluster(r) -> bool:
    return isinstance(r, RedisCluster)


def per_node(r, keys: Sequence[str], add: Callable[[Any, int], None]) -> list:
    """Run ``add(pipe, i)`` for every ``i`` of ``keys`` (each call queues one command, on ``keys[i]``'s slot) and
    return the replies in order: one pipeline on a single Redis, one per node on a cluster (scripts included)."""
    if not is_cluster(r):
        pipe = r.pipeline(transaction=False)
        for i in range(len(keys)):
            add(pipe, i)
        return pipe.execute()
    groups: dict[str, list[int]] = {}
    nodes = {}
    for i, key in enumerate(keys):
        node = r.get_node_from_key(key)
        groups.setdefault(node.name, []).append(i)
        nodes[node.name] = node
    out: list = [None] * len(keys)
    for name, idx in groups.items():
        pipe = r.get_redis_connection(nodes[name]).pipeline(transaction=False)
        for i in idx:
            add(pipe, i)
        for i, reply in zip(idx, pipe.execute()):
            out[i] = reply
    return out


def clients(settings) -> tuple:
    """``(queue client, feed client)`` for ``settings`` (one client when both roles share a URL)."""
    queue = redis_client(settings.queue_url)
    return queue, (queue if settings.feed_url == settings.queue_url else redis_client(settings.feed_url))


def ping_redis(r) -> None:
    try:
        r.ping()
    except (redis.ConnectionError, redis.TimeoutError, OSError, redis.RedisError) as exc:
        raise Unavailable("redis", first_line(exc)) from exc
