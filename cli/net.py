"""Loopback helpers for commands that start servers (demo) and for the benchmarks that do the same."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
