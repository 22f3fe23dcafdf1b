"""API keys: ``keys create NAME --scopes …`` (prints the key once), ``keys list``, ``keys revoke NAME``.

The database keeps a key's SHA-256 only (``precompute/data/api_keys.py``); a lost key cannot be shown again:
revoke it and create another.
"""

from __future__ import annotations

import json
import time

import click

from precompute.data import api_keys

from .group import cli, command, echo_table
from .data import ready_engine


@cli.group()
def keys() -> None:
    """API keys: create one (shown once), list them, revoke one."""


@command(keys, name="create")
@click.argument("name")
@click.option("--scopes", required=True, metavar="SCOPE[,SCOPE…]",
              help=f"What the key may do: {', '.join(api_keys.SCOPES)} (admin: everything).")
@click.option("--rate", type=float, default=None,
              help="Tokens per second: one per feed page, one per event posted  [default: PREFEED_RATE_LIMIT]")
@click.option("--burst", type=int, default=None,
              help="Tokens at once after a pause; the most events per request  [default: PREFEED_RATE_BURST]")
@click.option("--new-users", type=int, default=None,
              help="User ids new to the database per minute  [default: PREFEED_KEY_NEW_USERS_PER_MINUTE]")
@click.pass_obj
def create(obj, name: str, scopes: str, rate: float | None, burst: int | None, new_users: int | None) -> None:
    """Create the key NAME and print it: the only time it is shown."""
    api_keys.check_name(name)                       # a bad name or scope is refused before the database is touched
    wanted = api_keys.parse_scopes(scopes)
    key = api_keys.create(ready_engine(obj.settings), name, wanted, rate=rate, burst=burst,
                          new_users=new_users)
    click.echo(key)
    click.echo(f"key {name!r} created with {scopes}; it is not stored and cannot be shown again", err=True)


@command(keys, name="list")
@click.option("--json", "as_json", is_flag=True, help="One JSON array instead of the table.")
@click.pass_obj
def list_(obj, as_json: bool) -> None:
    """Every key: name, scopes, limits, created, last used (to the minute), revoked. Never the key."""
    rows = api_keys.listing(ready_engine(obj.settings))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no API keys; create one with `manage.py keys create NAME --scopes feed:read,events:write`")
        return
    echo_table([("NAME", "SCOPES", "RATE/S", "BURST", "NEW USERS/MIN", "CREATED (UTC)", "LAST USED (UTC)",
                 "REVOKED (UTC)")]
               + [(r["name"], r["scopes"], _or(r["rate"]), _or(r["burst"]), _or(r["new_users"]),
                   _when(r["created_at"]), _when(r["last_used_at"]), _when(r["revoked_at"])) for r in rows])


@command(keys, name="revoke")
@click.argument("name")
@click.pass_obj
def revoke(obj, name: str) -> None:
    """Revoke the key NAME: every API process refuses it within a second."""
    api_keys.revoke(ready_engine(obj.settings), name)
    click.echo(f"key {name!r} revoked")


def _when(ts: float | None) -> str:
    return "—" if ts is None else time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts))


def _or(value) -> str:
    return "default" if value is None else f"{value:g}"
