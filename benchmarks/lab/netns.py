"""Hosts on one machine as Linux network namespaces, for the multi-host benchmark.

A ``Lab`` is one server namespace and worker-host namespaces, each host joined to the server by its own veth pair
on its own /30 (server side ``10.213.K.1``, host K ``10.213.K.2``). The server's services listen on one address,
``10.213.0.1`` (on its loopback), that every host routes to over its own link: the same URLs on every host, as on a
real network, while the server still sees each host's own address as the client's. Addresses exist only inside
the namespaces, so nothing on the machine's own network changes and parallel labs (each with its own namespace
names) reuse the same addresses without clashing; servers may use their standard ports for the same reason. The
file system is shared by all of them, as a shared volume is between real hosts.

Processes are started with ``ip netns exec NAME`` (which execs, so the process we hold is the program itself) in
sessions of their own; ``close`` stops them, then deletes the namespaces (the veth pairs go with them). Needs root.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

SUBNET = "10.213"
SERVER = f"{SUBNET}.0.1"        # where the server namespace's services listen, reached by every host
_CLONE_NEWNET = 0x40000000      # linux/sched.h
_NETNS_DIR = Path("/var/run/netns")


def unavailable() -> str | None:
    """Why a lab cannot be built here (one line), or None. Tries a namespace for real: being root is not enough
    in a container without CAP_SYS_ADMIN / CAP_NET_ADMIN."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root (network namespaces): run it as root, e.g. sudo .venv/bin/python -m benchmarks hosts"
    if not shutil.which("ip"):
        return "needs the ip command (iproute2) for network namespaces"
    probe = f"pf-probe-{uuid.uuid4().hex[:6]}"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if done.returncode:
        why = done.stderr.strip().splitlines()
        return f"ip netns add failed: {why[-1] if why else f'exit {done.returncode}'}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class Lab:
    """A server namespace and ``hosts`` worker-host namespaces, named ``pf-srv-TAG``, ``pf-h1-TAG``, ..."""

    def __init__(self, hosts: int = 2, tag: str | None = None) -> None:
        self.tag = tag or uuid.uuid4().hex[:6]
        self.server = f"pf-srv-{self.tag}"
        self.hosts = [f"pf-h{k}-{self.tag}" for k in range(1, hosts + 1)]
        self._made: list[str] = []
        self._procs: list[subprocess.Popen] = []

    # -- addresses -------------------------------------------------------------------------------------------
    server_address = SERVER

    def host_address(self, host: str) -> str:
        """``host``'s own address: its side of its link to the server, the client address the server sees."""
        return f"{SUBNET}.{self.hosts.index(host) + 1}.2"

    def label(self, namespace: str) -> str:
        """``h1`` for ``pf-h1-TAG``: a namespace's name without the lab's tag."""
        return namespace.split("-")[1]

    def host_of(self, address: str) -> str | None:
        """The host namespace a client address (``ip`` or ``ip:port``, as Redis's CLIENT LIST shows it) belongs to."""
        ip = address.split(":")[0]
        return next((h for h in self.hosts if self.host_address(h) == ip), None)

    # -- life cycle ------------------------------------------------------------------------------------------
    def open(self) -> Lab:
        for name in [self.server, *self.hosts]:
            _ip("netns", "add", name)
            self._made.append(name)
            _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", self.server, "addr", "add", f"{SERVER}/32", "dev", "lo")
        for k, host in enumerate(self.hosts, start=1):
            # Created straight inside the namespaces: the interface names never exist on the machine itself.
            _ip("link", "add", f"h{k}", "netns", self.server, "type", "veth", "peer", "name", "srv", "netns", host)
            _ip("-n", self.server, "addr", "add", f"{SUBNET}.{k}.1/30", "dev", f"h{k}")
            _ip("-n", host, "addr", "add", f"{self.host_address(host)}/30", "dev", "srv")
            _ip("-n", self.server, "link", "set", f"h{k}", "up")
            _ip("-n", host, "link", "set", "srv", "up")
            _ip("-n", host, "route", "add", f"{SERVER}/32", "via", f"{SUBNET}.{k}.1", "dev", "srv")
        return self

    def close(self) -> None:
        """Stop every process this lab started (SIGTERM, then SIGKILL after 10 s), then delete its namespaces."""
        for proc in reversed(self._procs):
            stop(proc)
        for name in reversed(self._made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self._made.clear()

    def __enter__(self) -> Lab:
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- processes -------------------------------------------------------------------------------------------
    def argv(self, namespace: str, argv: list[str], user: str | None = None) -> list[str]:
        """``argv`` run in ``namespace`` (as ``user``, if given: some servers refuse to run as root)."""
        as_user = ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--"] if user else []
        return ["ip", "netns", "exec", namespace, *as_user, *argv]

    def spawn(self, namespace: str, argv: list[str], *, log: Path, env: dict | None = None,
              user: str | None = None, cwd: Path | None = None) -> subprocess.Popen:
        """Start a process in ``namespace``, output to ``log``; ``close`` stops it if nobody did before."""
        with open(log, "ab") as out:
            proc = subprocess.Popen(self.argv(namespace, argv, user), stdout=out, stderr=subprocess.STDOUT,
                                    env=env, cwd=cwd, start_new_session=True)
        self._procs.append(proc)
        return proc

    def adopt(self, procs: list[subprocess.Popen]) -> None:
        """Processes started elsewhere that ``close`` must stop too."""
        self._procs.extend(procs)

    def run(self, namespace: str, argv: list[str], *, env: dict | None = None, user: str | None = None,
            cwd: Path | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
        """Run a command in ``namespace`` to its end; a failure raises with its last output lines."""
        done = subprocess.run(self.argv(namespace, argv, user), env=env, cwd=cwd, capture_output=True, text=True,
                              timeout=timeout)
        if done.returncode:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise RuntimeError(f"{' '.join(argv[:3])} … in {namespace} exited {done.returncode}:\n{tail}")
        return done

    @contextlib.contextmanager
    def inside(self, namespace: str):
        """Run this thread's sockets from ``namespace`` (``setns``; per thread, so only the calling thread moves).
        Sockets opened inside stay usable after leaving: a socket belongs to the namespace it was created in."""
        libc = ctypes.CDLL(None, use_errno=True)
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(_NETNS_DIR / namespace, os.O_RDONLY)
        try:
            if libc.setns(target, _CLONE_NEWNET):
                raise OSError(ctypes.get_errno(), f"setns into {namespace}")
            yield
        finally:
            libc.setns(home, _CLONE_NEWNET)
            os.close(target)
            os.close(home)


def stop(proc: subprocess.Popen, grace: float = 10.0) -> int | None:
    """SIGTERM to ``proc``'s session (a worker pool's children, a server's helpers), SIGKILL after ``grace`` s."""
    if proc.poll() is not None:
        return proc.returncode
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait(timeout=grace)


def wait_until(check, timeout: float, what: str, interval: float = 0.1, proc: subprocess.Popen | None = None,
               procs: list[subprocess.Popen] = ()):
    """Poll ``check()`` until it returns something truthy; raise after ``timeout`` s or if ``proc`` (or any of
    ``procs``) exits first."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            value = check()
            if value:
                return value
        for p in [proc] if proc is not None else procs:
            if p.poll() is not None:
                raise RuntimeError(f"{what}: a process exited with {p.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:.0f} s")
        time.sleep(interval)


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
