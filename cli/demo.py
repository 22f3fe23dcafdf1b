"""``manage.py demo``: the newcomer's path, every part real: embedded Valkey + SQLite, a seeded marketplace, a
trained bundle, every feed precomputed by real RQ workers, the API under gunicorn.

Ctrl-C stops it all and prints one line. Each process the demo starts runs in a session of its own, out of the
terminal's foreground process group, so the terminal's SIGINT reaches the demo alone; the demo then stops the
others with SIGTERM, and the embedded server (``cli/embedded.py``, a session of its own too) after them. A process
that took the terminal's SIGINT itself would quit at once, each in its own way: the server first, then workers
printing tracebacks because it went away, the API server warning about its workers."""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request

import click

from precompute.data import api_keys, bulk, engine as db, synthetic

from . import embedded
from .group import command, fail
from .embedded import ensure_redis
from .net import free_port, stop_all, wait_for_http

_STOPPING = {signal.SIGINT, signal.SIGTERM}


@command()
@click.option("--users", type=click.IntRange(10, 1_000_000), default=2000, show_default=True)
@click.option("--items", type=click.IntRange(50, 1_000_000), default=3000, show_default=True)
@click.option("--events", type=click.IntRange(100, 10_000_000), default=100_000, show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="API port (0: any free port).")
@click.option("--once", is_flag=True, help="Print the sample feed and exit instead of serving until Ctrl-C.")
@click.pass_obj
def demo(obj, users: int, items: int, events: int, port: int, once: bool) -> None:
    """Seed, train, precompute through real workers, serve, print a sample feed."""
    # SIGTERM interrupts like Ctrl-C: either one ends in the cleanup below (then `aborted`, exit 130, while it
    # sets up; one line and exit 0 once it serves), never with the processes started here left running.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    settings = ensure_redis(obj.settings)
    token = settings.admin_token or secrets.token_urlsafe(32)
    env = dict(os.environ, PREFEED_ADMIN_TOKEN=token)
    if settings.redis_url:                  # else QUEUE_REDIS_URL and FEED_REDIS_URL, in the environment already
        env["REDIS_URL"] = settings.redis_url
    # The synthetic marketplace's own attributes are model features unless the caller declared others.
    env.setdefault("PREFEED_ITEM_ATTRIBUTES", ",".join(synthetic.ATTRIBUTES))
    settings = dataclasses.replace(settings, item_attributes=tuple(env["PREFEED_ITEM_ATTRIBUTES"].split(",")))
    engine = db.make_engine(settings.database_url, settings)
    db.init_db(engine, settings)

    with _Children([sys.executable, os.path.abspath(sys.argv[0])], env) as children:
        children.step("seed", "--users", str(users), "--items", str(items), "--events", str(events), "--reset")
        children.step("train", "--iterations", "150", "--users", str(max(20, min(users, 1500))))   # at least 20
        children.step("precompute", "--all")
        click.echo("draining the queue with 2 forking RQ workers ...")
        t0 = time.perf_counter()
        children.step("worker", "--workers", "2", "--burst")
        click.echo(f"all {users} feeds precomputed in {time.perf_counter() - t0:.1f}s")

        # A client's key: reads feeds and writes events (the admin token does the rest).
        key = api_keys.create(engine, f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}",
                              frozenset({"feed:read", "events:write"}))
        auth = {"Authorization": f"Bearer {key}"}
        port = port or free_port()
        children.start("worker", "--workers", "1")
        children.start("serve", "--port", str(port))
        base = f"http://127.0.0.1:{port}"
        try:
            wait_for_http(base + "/healthz")
        except TimeoutError as exc:
            raise click.ClickException(str(exc)) from None
        user = int(bulk.event_count(engine) and 1)
        try:
            sample = json.loads(urllib.request.urlopen(urllib.request.Request(f"{base}/feed/{user}?limit=5",
                                                                              headers=auth), timeout=10).read())
        except OSError as exc:
            raise click.ClickException(f"the API at {base} did not serve a feed: {exc}") from None
        click.echo("\nsample feed:\n" + json.dumps(sample, indent=2))
        click.echo(f"""
try it:
  curl '{base}/feed/{user}?limit=10' -H 'Authorization: Bearer {key}'
  curl -X POST {base}/events -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' \\
       -d '{{"user_id": {user}, "item_id": {sample['items'][0]['item_id'] if sample['items'] else 1}, "type": "click"}}'
  curl -X PUT {base}/boosts/42 -H 'Authorization: Bearer {token}' -H 'Content-Type: application/json' \\
       -d '{{"weight": 2.0, "ttl_seconds": 3600}}'
  curl -X PATCH {base}/items/42 -H 'Authorization: Bearer {token}' -H 'Content-Type: application/json' \\
       -d '{{"active": false}}'
  curl {base}/healthz
client key (feed:read, events:write): {key}
admin token: {token}
""")
        if once:
            return
        # Blocked before the prompt, so a Ctrl-C from then on is taken here (not raised as KeyboardInterrupt at
        # whatever line runs). The children were started before this, with the signals unblocked.
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOPPING)
        click.echo("serving; Ctrl-C to stop")
        signal.sigwait(_STOPPING)
    click.echo(f"stopped: {children.stopped}")


class _Children:
    """The processes the demo starts, each in a session of its own; leaving the block stops them (SIGTERM, at
    once, then a wait), then the embedded server if this process started one."""

    def __init__(self, manage: list[str], env: dict[str, str]) -> None:
        self.manage, self.env = manage, env
        self.procs: list[subprocess.Popen] = []
        self.stopped = ""           # what leaving the block stopped, for the demo's last line

    def start(self, *args: str) -> subprocess.Popen:
        """``manage.py ARGS`` in the background."""
        self.procs.append(subprocess.Popen(self.manage + list(args), env=self.env, start_new_session=True))
        return self.procs[-1]

    def step(self, *args: str) -> None:
        """``manage.py ARGS`` to its end. The step prints its own one-line error; the demo adds which step stopped
        it, and exits with its code."""
        proc = self.start(*args)
        code = proc.wait()
        self.procs.remove(proc)
        if code != 0:
            fail(f"demo stopped: `manage.py {args[0]}` failed (exit {code})", code)

    def __enter__(self) -> _Children:
        return self

    def __exit__(self, *exc) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOPPING)     # a second Ctrl-C does not cut the stopping short
        self.stopped = "workers, API and embedded Valkey" if embedded.started() else "workers and API"
        stop_all(self.procs, timeout=10)
        embedded.stop()
