"""Helpers for fault tests: worker processes to kill, jobs that die or fail on purpose, a TCP proxy that can cut a
connection to a real server."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from tests.conftest import ROOT


def die_first(key: str, times: int) -> int:
    """A job whose horse SIGKILLs itself in its first ``times`` runs (counted at Redis ``key``)."""
    from rq import get_current_job

    run = get_current_job().connection.incr(key)
    if run <= times:
        os.kill(os.getpid(), signal.SIGKILL)
    return run


def fail_first(key: str, times: int) -> int:
    """A job that raises in its first ``times`` runs (counted at Redis ``key``)."""
    from rq import get_current_job

    run = get_current_job().connection.incr(key)
    if run <= times:
        raise RuntimeError(f"failing on purpose, run {run}")
    return run


def spawn_worker(settings, *args: str, log=None) -> subprocess.Popen:
    """``manage.py worker`` in a child process; its stderr (logged warnings and errors) goes to ``log``, a file,
    or to an anonymous temporary file that ``stop_worker`` shows if the worker does not stop."""
    log = log or tempfile.TemporaryFile("w+")
    proc = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "worker", *args], env=settings.child_env(),
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
    proc.log = log
    return proc


def stop_worker(proc: subprocess.Popen, timeout: float = 60) -> None:
    """SIGTERM (RQ's warm shutdown: the running job finishes first), then wait. A worker still running after
    ``timeout`` has its threads' stacks dumped (SIGUSR1, ``manage.py worker`` registers faulthandler on it), is
    killed, and the test fails with the end of its log."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
        return
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1)
        proc.kill()
        proc.wait()
    log = getattr(proc, "log", None)
    text = open(f"/proc/self/fd/{log.fileno()}").read() if log and not log.closed else "(no log)"
    raise AssertionError(f"the worker did not stop within {timeout} s of SIGTERM; its log ends:\n{text[-6000:]}")


class Supervised:
    """``manage.py worker ARGS`` run as a supervisor runs it: started again at once whenever it is killed. Every
    process of its tree ever seen is remembered, so ``stop`` can end the orphans the kills leave (a horse whose
    worker was killed finishes its job first)."""

    def __init__(self, settings, *args: str) -> None:
        self.settings, self.args = settings, args
        self.seen: set[psutil.Process] = set()
        self.proc = spawn_worker(settings, *args)

    def tree(self) -> tuple[list[psutil.Process], list[psutil.Process]]:
        """The parent's children (a pool's worker processes) and grandchildren (horses, schedulers)."""
        try:
            children = psutil.Process(self.proc.pid).children()
        except psutil.NoSuchProcess:
            return [], []
        below = []
        for child in children:
            try:
                below += child.children()
            except psutil.NoSuchProcess:
                pass
        self.seen.update(children + below)
        return children, below

    def kill_parent(self) -> None:
        """SIGKILL the parent alone (its children are told by the kernel, see ``children_die_with_parent``), then
        start a new one."""
        self.tree()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = spawn_worker(self.settings, *self.args)

    def kill_all(self) -> None:
        """SIGKILL the parent and every process below it at the same instant (as a container or cgroup is
        killed): all are stopped first, so none runs a line of code in between. Then start a new one."""
        group: set[psutil.Process] = set()
        while True:                     # until no process forked another in the meantime
            children, below = self.tree()
            new = {psutil.Process(self.proc.pid), *children, *below} - group
            if not new:
                break
            _signal(new, signal.SIGSTOP)
            group |= new
        _signal(group, signal.SIGKILL)
        self.proc.wait()
        self.proc = spawn_worker(self.settings, *self.args)

    def stop(self) -> None:
        self.tree()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        _signal([p for p in self.seen if p.is_running()], signal.SIGKILL)


def _signal(processes, sig: int) -> None:
    for p in processes:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


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
