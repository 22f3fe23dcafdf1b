"""Database commands: init-db, seed."""

from __future__ import annotations

import time

import click

from precompute.data import bulk, engine as db, synthetic, upgrade
from precompute.errors import InvalidInput

from .group import command


def ready_engine(settings):
    """The database engine, with tables created or brought up to date."""
    engine = db.make_engine(settings.database_url, settings)
    db.init_db(engine, settings)
    return engine


@command(name="init-db")
@click.pass_obj
def init_db(obj) -> None:
    """Create the tables, or bring an existing database up to date (idempotent)."""
    filled = upgrade.fill_missing(ready_engine(obj.settings), obj.settings)
    if filled:
        click.echo(f"kept recent events and seen items for {filled} existing users")
    click.echo("database ready")


@command()
@click.option("--users", type=click.IntRange(1, 10_000_000), default=5000, show_default=True)
@click.option("--items", type=click.IntRange(10, 10_000_000), default=5000, show_default=True)
@click.option("--events", type=click.IntRange(1, 100_000_000), default=200_000, show_default=True)
@click.option("--seed", "seed_", type=int, default=0, show_default=True, help="Random seed.")
@click.option("--reset", is_flag=True, help="Delete existing items, users and events first.")
@click.pass_obj
def seed(obj, users: int, items: int, events: int, seed_: int, reset: bool) -> None:
    """Generate a synthetic marketplace and bulk-load it."""
    engine = ready_engine(obj.settings)
    if bulk.has_data(engine):
        if not reset:
            raise InvalidInput("the database already holds a marketplace; pass --reset to replace it")
        bulk.clear(engine)
    t0 = time.perf_counter()
    market = synthetic.generate(users, items, events, seed=seed_, now=time.time())
    with click.progressbar(length=users + items + events, label="loading") as bar:
        bulk.load(engine, market, obj.settings, progress=bar.update)
    click.echo(f"seeded {items} items, {users} users, {events} events in {time.perf_counter() - t0:.1f}s")
