"""Helpers for fault tests: worker processes to kill, a TCP proxy that can cut a connection to a real server."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import psutil

from tests.conftest import ROOT


def spawn_worker(settings, *args: str, log=None) -> subprocess.Popen:
    """``manage.py worker`` in a child process; its stderr (logged warnings and errors) goes to ``log``, a file."""
    return subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "worker", *args], env=settings.child_env(),
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log or subprocess.DEVNULL)


def horses_of(proc: subprocess.Popen) -> list[psutil.Process]:
    try:
        return psutil.Process(proc.pid).children()
    except psutil.NoSuchProcess:
        return []


def wait_until(predicate, timeout: float, what: str, interval: float = 0.1) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


class Proxy:
    """A loopback TCP proxy. ``cut()`` drops every connection and refuses new ones; ``restore()`` lets them in."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.up = True
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.up:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        self.up = False
        with self.lock:
            for s in self.conns:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
                except OSError:
                    pass
            self.conns.clear()

    def restore(self) -> None:
        self.up = True

    def close(self) -> None:
        self.cut()
        self.listener.close()
