"""The world a benchmark runs in: the checkout it runs from, and an isolated prefeed (embedded Valkey unless
REDIS_URL, SQLite in a temp dir unless DATABASE_URL) holding a seeded marketplace and a trained bundle."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from cli.net import start_valkey
from precompute.data import api_keys, bulk, engine as db, synthetic
from precompute.learning.fit import fit_ranker
from precompute.ranking import bundle
from precompute.settings import Settings

#: The checkout: ``manage.py``, ``docs/`` and ``benchmarks/results/`` are found from it.
ROOT = Path(__file__).resolve().parents[2]


#: Training periods of a quick run's model (``PREFEED_TRAIN_PERIODS``, five by default). A quick run shows that the
#: benchmark runs, and the five periods were most of the quick runs: a quick world's training took 15 s with five,
#: 4 s with one, the quick ``evaluate`` 34 s and 19 s. Training on several periods is the tests' to check.
QUICK_TRAIN_PERIODS = 1


class Skipped(Exception):
    """A benchmark this machine cannot run (its message says why, in one line): ``all`` goes on without it."""


@dataclasses.dataclass
class World:
    settings: Settings
    engine: object
    tmp: Path
    server: object | None
    #: An API key with every scope and no practical rate (the rate check itself still runs on every request).
    key: str = ""

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def env(self, **extra) -> dict[str, str]:
        return {**self.settings.child_env(), **extra}

    def manage(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], env=self.env(), cwd=ROOT,
                              check=True, capture_output=True, text=True, **kw)

    def pipeline(self):
        """A loaded precompute pipeline on this world's database and Redis."""
        from precompute.pipeline.pipeline import Pipeline
        from precompute.feeds.client import redis_client

        pipeline = Pipeline(self.settings, self.engine, redis_client(self.settings.feed_url))
        pipeline.load()
        return pipeline

    def precompute_all(self, pipeline, n_users: int) -> None:
        """Compute and store the feeds of users 1..n_users in this process."""
        size = self.settings.batch_size
        for i in range(1, n_users + 1, size):
            pipeline.recompute(list(range(i, min(i + size, n_users + 1))))

    def close(self) -> None:
        self.engine.dispose()
        if self.server is not None:
            self.server.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def make_world(users: int, items: int, events: int, iterations: int, *, seed_: int = 1,
               train_users: int = 600, depth: int = 6, every_tree: bool = False, quick: bool = False) -> World:
    """A fresh prefeed on a synthetic log, its model trained and promoted. ``every_tree``: no early stopping, so the
    model has exactly ``iterations`` trees (a benchmark of what scoring costs needs a model of a known size).
    ``quick``: trained on ``QUICK_TRAIN_PERIODS`` periods (the benchmarks on a world measure serving and precompute,
    with whatever model it holds)."""
    tmp = Path(tempfile.mkdtemp(prefix="prefeed-bench-"))
    server = None
    redis_url = os.environ.get("REDIS_URL")
    if not redis_url:
        server = start_valkey()
        redis_url = server.connection_url
    tag = uuid.uuid4().hex[:8]
    settings = Settings(database_url=os.environ.get("DATABASE_URL") or f"sqlite:///{tmp / 'bench.db'}",
                        redis_url=redis_url, model_dir=tmp / "models", var_dir=tmp,
                        key_prefix=f"pfbench:{tag}:", queue_name=f"pfbench-{tag}",
                        admin_token="bench-admin-token-0123456789abcdef",
                        item_attributes=synthetic.ATTRIBUTES,
                        **({"train_early_stopping": 0} if every_tree else {}),
                        **({"train_periods": QUICK_TRAIN_PERIODS} if quick else {}))
    engine = db.make_engine(settings.database_url, settings)
    db.init_db(engine, settings)
    bulk.load(engine, synthetic.generate(users, items, events, seed=seed_, now=time.time()), settings)
    result = fit_ranker(engine, settings, iterations=iterations, depth=depth, users=min(train_users, users))
    bundle.promote(settings.model_dir, bundle.write(settings.model_dir, result.model, result.pairs,
                                                    {"metrics": result.metrics}, result.cascade))
    key = api_keys.create(engine, "bench", frozenset(api_keys.SCOPES), rate=1e9, burst=10 ** 9)
    return World(settings, engine, tmp, server, key)
