"""The servers a ``netns.Lab``'s server namespace runs for the multi-host benchmark: a private PostgreSQL, the queue
Redis and the feed store, all listening on the server address only, all throw-away (no fsync, no persistence).

``start_feed_store`` is the one place that decides where feeds live: a three-master Redis Cluster of their own
(``FEED_REDIS_URL=redis+cluster://…``), apart from the queue Redis, as production grows feeds past one Redis.
``FeedCounter`` reads each node directly, so counting and clearing feeds works the same on one server or on every
master of a cluster.
"""

from __future__ import annotations

import dataclasses
import glob
import pwd
import shutil
from pathlib import Path

from .netns import SERVER, SUBNET, Lab, wait_until

PG_PORT, QUEUE_PORT, FEED_PORT = 5432, 6379, 6380
PG_USER = PG_DB = "prefeed"
_SENTINEL = 918_273_645     # a user id no test world has: its decimal digits become the SCAN wildcard


def database_url() -> str:
    return f"postgresql://{PG_USER}@{SERVER}:{PG_PORT}/{PG_DB}"


def queue_url() -> str:
    return f"redis://{SERVER}:{QUEUE_PORT}/0"


def start_postgres(lab: Lab, tmp: Path) -> None:
    """initdb into ``tmp`` as an unprivileged user (it refuses root), trust for the lab's addresses, no fsync."""
    import psycopg

    bin_dir = Path(pg_bin_dir())
    user = "postgres" if _user_exists("postgres") else "nobody"
    data = tmp / "pg"
    data.mkdir(mode=0o700)
    shutil.chown(data, user, pwd.getpwnam(user).pw_gid)
    lab.run(lab.server, [str(bin_dir / "initdb"), "-D", str(data), "-U", PG_USER, "--auth=trust", "--no-sync",
                         "-E", "UTF8", "--locale=C"], user=user, cwd=data)
    with open(data / "pg_hba.conf", "a") as f:
        f.write(f"host all all {SUBNET}.0.0/16 trust\n")
    proc = lab.spawn(lab.server, [str(bin_dir / "postgres"), "-D", str(data), "-c", f"listen_addresses={SERVER}",
                                  "-c", f"port={PG_PORT}", "-c", "unix_socket_directories=", "-c", "fsync=off",
                                  "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
                     log=tmp / "postgres.log", user=user, cwd=data)
    url = f"host={SERVER} port={PG_PORT} user={PG_USER} dbname=postgres connect_timeout=2"
    wait_until(lambda: psycopg.connect(url).close() or True, 60, "PostgreSQL starting", proc=proc)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {PG_DB}")


def start_redis(lab: Lab, tmp: Path, name: str, port: int, *extra: str) -> None:
    """A redis-server on the server address, without persistence."""
    import redis

    proc = lab.spawn(lab.server, ["redis-server", "--bind", SERVER, "--port", str(port), "--save", "",
                                  "--appendonly", "no", "--protected-mode", "no", "--dir", str(tmp), *extra],
                     log=tmp / f"redis-{name}.log")
    wait_until(lambda: redis.Redis(host=SERVER, port=port, socket_connect_timeout=1).ping(), 30,
               f"redis-server ({name}) starting", proc=proc)


@dataclasses.dataclass
class FeedStore:
    url: str | None         # FEED_REDIS_URL for every process; None: feeds go where REDIS_URL points
    nodes: list[str]        # every server holding feeds, to count and clear them on
    describe: str


def start_feed_store(lab: Lab, tmp: Path) -> FeedStore:
    """The feed store: a Redis Cluster of three masters in the server namespace (``cli/cluster.py``), on ports
    FEED_PORT..FEED_PORT+2 (cluster bus +10000), as production grows feeds past one Redis."""
    from cli.cluster import LocalCluster

    ports = [FEED_PORT + k for k in range(3)]
    cluster = LocalCluster(host=SERVER, ports=ports, binary=shutil.which("redis-server"),
                           wrap=lab.argv(lab.server, []), workdir=tmp)
    cluster.start(timeout=30)
    lab.adopt(cluster.procs)
    return FeedStore(cluster.url, [f"redis://{SERVER}:{p}/0" for p in ports],
                     "feeds on a three-master Redis Cluster (FEED_REDIS_URL=redis+cluster://…)")


def configure(settings, store: FeedStore):
    """``settings`` pointing every process at ``store``."""
    return dataclasses.replace(settings, feed_redis_url=store.url) if store.url else settings


class FeedCounter:
    """Counts and deletes the feeds under a key prefix on every node of a feed store, one node at a time."""

    def __init__(self, store: FeedStore, key_prefix: str) -> None:
        from precompute.feeds.client import redis_client
        from precompute.feeds.keys import Keys

        self.clients = [redis_client(url) for url in store.nodes]
        # Whatever layout the key has (hash tags included), the id's place in it is the wildcard.
        self.pattern = Keys(key_prefix).feed(_SENTINEL).replace(str(_SENTINEL), "*")

    def count_feeds(self) -> int:
        return sum(sum(1 for _ in c.scan_iter(match=self.pattern, count=1000)) for c in self.clients)

    def delete_feeds(self) -> None:
        for c in self.clients:
            pipe = c.pipeline(transaction=False)
            for key in c.scan_iter(match=self.pattern, count=1000):
                pipe.unlink(key)        # one key per command: also valid on a cluster node
            pipe.execute()

    def close(self) -> None:
        for c in self.clients:
            c.close()


def pg_bin_dir() -> str | None:
    """The newest PostgreSQL's server programs (Debian's layout), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return str(Path(found[-1]).parent) if found else None


def missing_programs() -> str | None:
    if not shutil.which("redis-server"):
        return "needs redis-server (apt install redis-server)"
    if not pg_bin_dir():
        return "needs PostgreSQL's server programs under /usr/lib/postgresql/*/bin (apt install postgresql)"
    if not shutil.which("setpriv"):
        return "needs setpriv (util-linux) to run PostgreSQL as an unprivileged user"
    return None


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False
