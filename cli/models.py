"""Model commands: train, promote."""

from __future__ import annotations

import time

import click

from precompute.ranking import bundle, ranker
from precompute.ranking.layout import for_settings

from . import command
from .data import ready_engine


@command()
@click.option("--iterations", type=click.IntRange(10, 10_000), default=None,
              help="CatBoost trees  [default: PREFEED_TRAIN_ITERATIONS, 1000]")
@click.option("--depth", type=click.IntRange(2, 10), default=None, help="Tree depth  [default: PREFEED_TRAIN_DEPTH, 6]")
@click.option("--users", type=click.IntRange(20, 1_000_000), default=None,
              help="Users sampled for training and validation  [default: PREFEED_TRAIN_USERS, 3000]")
@click.option("--seed", "seed_", type=int, default=0, show_default=True)
@click.pass_obj
def train(obj, iterations: int | None, depth: int | None, users: int | None, seed_: int) -> None:
    """Train the ranker on a time split, report NDCG@10 vs popularity, write and promote a bundle."""
    settings = obj.settings
    engine = ready_engine(settings)
    t0 = time.perf_counter()
    result = ranker.train(engine, settings, iterations=iterations, depth=depth, users=users, seed=seed_,
                          progress=lambda m: click.echo(f"  {m}"))
    m = result.metrics
    click.echo(f"validation NDCG@10: model {m['ndcg10']:.4f}, best baseline ({m['baseline']}) {m['baseline_ndcg10']:.4f} "
               f"({m['valid_users']} held-out users)")
    version = bundle.write(settings.model_dir, result.model, result.pairs, {"metrics": m})
    bundle.promote(settings.model_dir, version)
    click.echo(f"bundle {version} is current ({settings.model_dir}); trained in {time.perf_counter() - t0:.1f}s")


@command()
@click.argument("version", type=int)
@click.pass_obj
def promote(obj, version: int) -> None:
    """Make bundle VERSION current after checking it; running workers switch to it between jobs."""
    bundle.promote(obj.settings.model_dir, version, for_settings(obj.settings))
    click.echo(f"bundle {version} is current")
