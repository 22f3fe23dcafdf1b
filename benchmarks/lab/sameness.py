"""Behaviour fingerprint of one saved world, to show that a change of structure changed no result.

``python -m benchmarks sameness build DIR`` seeds a synthetic marketplace (fixed seed and clock) into ``DIR`` and
trains and promotes a bundle there, once. ``python -m benchmarks sameness snapshot DIR OUT.json`` then records what
that world gives: the table ``manage.py evaluate --protocol both`` prints (every method, both protocols) and every
user's precomputed feed, record for record (item ids and scores, the header's history and model versions; the
header's ``computed_at`` is a wall-clock time and is left out). ``compare A.json B.json`` says whether two snapshots
are the same and, if not, where they first differ. Take a snapshot before a refactoring and one after, on the same
``DIR``: equal snapshots mean the same numbers and the same feeds.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import click
import numpy as np

#: The world: big enough that every source, column and protocol takes part, small enough to snapshot in minutes.
USERS, ITEMS, EVENTS, SEED, NOW = 600, 500, 40_000, 7, 1.75e9


def _settings(root: Path, redis_url: str | None = None):
    from precompute.data import synthetic
    from precompute.settings import Settings

    return Settings(database_url=f"sqlite:///{root / 'world.db'}", redis_url=redis_url, model_dir=root / "models",
                    var_dir=root, key_prefix="pfsame:", queue_name="pfsame", admin_token="sameness",
                    item_attributes=synthetic.ATTRIBUTES, train_periods=2)


@click.group()
def main() -> None:
    """Fingerprint a saved world's evaluation and feeds."""


@main.command()
@click.argument("root", type=click.Path(file_okay=False, path_type=Path))
def build(root: Path) -> None:
    """Seed and train the world in ROOT (once; it must not exist yet)."""
    from precompute.data import bulk, engine as db, synthetic
    from precompute.ranking import bundle
    from precompute.learning.fit import fit_ranker

    if root.exists():
        raise click.ClickException(f"{root} exists; a world is built once")
    root.mkdir(parents=True)
    settings = _settings(root)
    engine = db.make_engine(settings.database_url, settings)
    db.init_db(engine, settings)
    bulk.load(engine, synthetic.generate(USERS, ITEMS, EVENTS, seed=SEED, now=NOW), settings)
    result = fit_ranker(engine, settings, iterations=60, depth=4, users=USERS)
    bundle.promote(settings.model_dir, bundle.write(settings.model_dir, result.model, result.pairs,
                                                    {"metrics": result.metrics}, result.cascade))
    click.echo(f"built {root}: {USERS} users, {ITEMS} items, {EVENTS} events, bundle promoted")


@main.command()
@click.argument("root", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
def snapshot(root: Path, out: Path) -> None:
    """Evaluate ROOT's world and precompute every feed; write the fingerprint to OUT."""
    from cli.net import start_valkey
    from precompute.data import engine as db
    from precompute.data.history import load_histories
    from precompute.learning import report
    from precompute.learning.evaluate import evaluate
    from precompute.feeds.client import redis_client
    from precompute.feeds.codec import decode
    from precompute.pipeline.pipeline import STAGES, Pipeline

    server = start_valkey()
    try:
        settings = _settings(root, server.connection_url)
        engine = db.make_engine(settings.database_url, settings)
        table = report.table(evaluate(engine, settings, cut_quantile=0.8, k=10, protocol="both", steps=5,
                                      iterations=40))
        pipeline = Pipeline(settings, engine, redis_client(settings.feed_url))
        pipeline.load()
        feeds = {}
        for start in range(1, USERS + 1, settings.batch_size):
            ids = list(range(start, min(start + settings.batch_size, USERS + 1)))
            hist = load_histories(engine, ids, pipeline.items, settings)
            values, _ = pipeline.build_feeds(hist, dict.fromkeys(STAGES, 0.0))
            for uid, blob, _version in values:
                feed = decode(blob)
                feeds[str(uid)] = {"history_version": feed.header.history_version,
                                   "model_version": feed.header.model_version,
                                   "items": feed.items.tolist(),
                                   "scores": np.asarray(feed.scores, dtype=np.float32).tobytes().hex()}
        engine.dispose()
    finally:
        server.stop()
    body = {"evaluate": table, "feeds": feeds}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    out.write_text(json.dumps({"sha256": digest, **body}, sort_keys=True))
    click.echo(table)
    click.echo(f"{len(feeds)} feeds; fingerprint {digest[:16]} -> {out}")


@main.command()
@click.argument("a", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("b", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def compare(a: Path, b: Path) -> None:
    """Exit 0 if the snapshots A and B are the same, 1 (saying where) if not."""
    x, y = json.loads(a.read_text()), json.loads(b.read_text())
    if x["evaluate"] != y["evaluate"]:
        click.echo("evaluate differs:\n" + x["evaluate"] + "\n---\n" + y["evaluate"])
        sys.exit(1)
    if x["feeds"].keys() != y["feeds"].keys():
        click.echo(f"different users: {len(x['feeds'])} against {len(y['feeds'])}")
        sys.exit(1)
    differ = [u for u in x["feeds"] if x["feeds"][u] != y["feeds"][u]]
    if differ:
        click.echo(f"{len(differ)} feeds differ, first user {differ[0]}")
        sys.exit(1)
    click.echo(f"same: the evaluate table and {len(x['feeds'])} feeds record for record ({x['sha256'][:16]})")


if __name__ == "__main__":
    main()
