"""Shared set-up for benchmarks: an isolated world (embedded Valkey unless REDIS_URL, SQLite in a temp dir unless
DATABASE_URL), a seeded marketplace and a trained bundle; plus table printing and JSON results."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from cli.net import start_valkey
from precompute.data import api_keys, bulk, engine as db, synthetic
from precompute.ranking import bundle, ranker
from precompute.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(os.environ.get("PREFEED_BENCH_RESULTS") or ROOT / "benchmarks" / "results")


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
        from precompute.ranking.pipeline import Pipeline
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
                        key_prefix=f"pfbench:{tag}:", queue_name=f"pfbench-{tag}", admin_token="bench",
                        item_attributes=synthetic.ATTRIBUTES,
                        **({"train_early_stopping": 0} if every_tree else {}),
                        **({"train_periods": QUICK_TRAIN_PERIODS} if quick else {}))
    engine = db.make_engine(settings.database_url, settings)
    db.init_db(engine, settings)
    bulk.load(engine, synthetic.generate(users, items, events, seed=seed_, now=time.time()), settings)
    result = ranker.train(engine, settings, iterations=iterations, depth=depth, users=min(train_users, users))
    bundle.promote(settings.model_dir, bundle.write(settings.model_dir, result.model, result.pairs,
                                                    {"metrics": result.metrics}))
    key = api_keys.create(engine, "bench", frozenset(api_keys.SCOPES), rate=1e9, burst=10 ** 9)
    return World(settings, engine, tmp, server, key)


def median(xs) -> float:
    return float(statistics.median(xs)) if len(xs) else float("nan")


def table(title: str, header: list[str], rows: list[list]) -> str:
    cells = [header] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(str(r[i])) for r in cells) for i in range(len(header))]
    lines = [title, "  ".join(str(h).ljust(w) for h, w in zip(header, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in cells[1:]]
    return "\n".join(lines)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.0f}"
    return str(v)


def write_result(name: str, data: dict, quick: bool) -> Path:
    """Write ``results/<name>.json`` (``<name>-quick.json`` with ``quick``): ``data`` with the benchmark's name, the
    date, the machine and the command that wrote it (``python -m benchmarks protocols`` for ``protocols-<log>``)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{name}{'-quick' if quick else ''}.json"
    payload = {"benchmark": name, "quick": quick, "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
               "machine": machine(),
               "command": " ".join(["python -m benchmarks", name.partition("-")[0]] + (["--quick"] if quick else [])),
               **data}
    out.write_text(json.dumps(payload, indent=2))
    return out


def machine() -> dict:
    """What a figure was measured on: cores, CPU model, memory (GiB), Python, OS, and the load average (1, 5 and 15
    minutes) as the run ended, since other work on a shared machine moves every timing."""
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        pass
    try:
        memory = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30), 1)
    except (ValueError, OSError):
        memory = None
    return {"cpus": os.cpu_count(), "cpu": cpu, "memory_gib": memory, "python": platform.python_version(),
            "platform": platform.platform(), "load_average": [round(x, 2) for x in os.getloadavg()]}
