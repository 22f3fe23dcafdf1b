"""Data and model commands: init-db, seed, train."""

from __future__ import annotations

import time

import click

from precompute import bundle, db, defaults, history, ranker, seed as seeding, synth
from precompute.errors import InvalidInput

from . import command


def _engine(settings):
    engine = db.make_engine(settings.database_url)
    db.init_db(engine)
    return engine


@command(name="init-db")
@click.pass_obj
def init_db(obj) -> None:
    """Create the tables, or bring an existing database up to date (idempotent)."""
    filled = history.fill_missing(_engine(obj.settings))
    if filled:
        click.echo(f"kept recent events for {filled} existing users")
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
    engine = _engine(obj.settings)
    if seeding.has_data(engine):
        if not reset:
            raise InvalidInput("the database already holds a marketplace; pass --reset to replace it")
        seeding.clear(engine)
    t0 = time.perf_counter()
    market = synth.generate(users, items, events, seed=seed_, now=time.time())
    with click.progressbar(length=users + items + events, label="loading") as bar:
        seeding.load(engine, market, progress=bar.update)
    click.echo(f"seeded {items} items, {users} users, {events} events in {time.perf_counter() - t0:.1f}s")


@command()
@click.option("--iterations", type=click.IntRange(10, 10_000), default=defaults.TRAIN_ITERATIONS, show_default=True)
@click.option("--depth", type=click.IntRange(2, 10), default=defaults.TRAIN_DEPTH, show_default=True)
@click.option("--users", type=click.IntRange(20, 1_000_000), default=defaults.TRAIN_USERS, show_default=True,
              help="Users sampled for training and validation.")
@click.option("--seed", "seed_", type=int, default=0, show_default=True)
@click.pass_obj
def train(obj, iterations: int, depth: int, users: int, seed_: int) -> None:
    """Train the ranker on a time split, report NDCG@10 vs popularity, write and promote a bundle."""
    engine = _engine(obj.settings)
    t0 = time.perf_counter()
    result = ranker.train(engine, iterations=iterations, depth=depth, users=users, seed=seed_,
                          max_candidates=obj.settings.max_candidates, progress=lambda m: click.echo(f"  {m}"))
    m = result.metrics
    click.echo(f"validation NDCG@10: model {m['ndcg10']:.4f}, popularity baseline {m['ndcg10_popular']:.4f} "
               f"({m['valid_users']} held-out users)")
    version = bundle.write(obj.settings.model_dir, result.model, result.pairs, {"metrics": m})
    bundle.promote(obj.settings.model_dir, version)
    click.echo(f"bundle {version} is current ({obj.settings.model_dir}); trained in "
               f"{time.perf_counter() - t0:.1f}s")


@command()
@click.argument("version", type=int)
@click.pass_obj
def promote(obj, version: int) -> None:
    """Make bundle VERSION current after checking it; running workers switch to it between jobs."""
    bundle.promote(obj.settings.model_dir, version)
    click.echo(f"bundle {version} is current")
