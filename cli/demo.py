"""``manage.py demo``: the newcomer's path, every part real: embedded Valkey + SQLite, a seeded marketplace, a
trained bundle, every feed precomputed by real RQ workers, the API under gunicorn."""

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

from . import command, fail
from .embedded import ensure_redis
from .net import free_port, stop_all, wait_for_http


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
    settings = ensure_redis(obj.settings)
    token = settings.admin_token or secrets.token_urlsafe(18)
    env = dict(os.environ, PREFEED_ADMIN_TOKEN=token)
    if settings.redis_url:                  # else QUEUE_REDIS_URL and FEED_REDIS_URL, in the environment already
        env["REDIS_URL"] = settings.redis_url
    # The synthetic marketplace's own attributes are model features unless the caller declared others.
    env.setdefault("PREFEED_ITEM_ATTRIBUTES", ",".join(synthetic.ATTRIBUTES))
    settings = dataclasses.replace(settings, item_attributes=tuple(env["PREFEED_ITEM_ATTRIBUTES"].split(",")))
    manage = [sys.executable, os.path.abspath(sys.argv[0])]
    engine = db.make_engine(settings.database_url, settings)
    db.init_db(engine, settings)

    def step(*args: str) -> None:
        # The step prints its own one-line error; the demo adds which step stopped it, and exits with its code.
        done = subprocess.run(manage + list(args), env=env)
        if done.returncode != 0:
            fail(f"demo stopped: `manage.py {args[0]}` failed (exit {done.returncode})", done.returncode)

    step("seed", "--users", str(users), "--items", str(items), "--events", str(events), "--reset")
    step("train", "--iterations", "150", "--users", str(max(20, min(users, 1500))))   # train samples at least 20
    step("precompute", "--all")
    click.echo("draining the queue with 2 forking RQ workers ...")
    t0 = time.perf_counter()
    step("worker", "--workers", "2", "--burst")
    click.echo(f"all {users} feeds precomputed in {time.perf_counter() - t0:.1f}s")

    # A client's key: reads feeds and writes events (the admin token does the rest).
    key = api_keys.create(engine, f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}",
                          frozenset({"feed:read", "events:write"}))
    auth = {"Authorization": f"Bearer {key}"}
    port = port or free_port()
    children = [
        subprocess.Popen(manage + ["worker", "--workers", "1"], env=env),
        subprocess.Popen(manage + ["serve", "--port", str(port)], env=env),
    ]
    try:
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
        if not once:
            click.echo("serving; Ctrl-C to stop")
            # Blocked first, so either signal is taken here (not by its default action, which would skip the
            # cleanup below and leave workers, API and the embedded server running). The children were started
            # before this, with the signals unblocked.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        stop_all(children, timeout=10)

