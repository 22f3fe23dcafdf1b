"""The log a quality benchmark runs on (``protocols``, ``ablation``, ``served``): the database of the environment's
settings (``PREFEED_VAR_DIR`` / ``DATABASE_URL``: import a log there first), or the synthetic marketplace at the
demo's size when that database holds no events."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import time
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from precompute.data import bulk, engine as db, synthetic
from precompute.settings import Settings

from .world import QUICK_TRAIN_PERIODS

#: The synthetic marketplace's size: the demo's, and a quick run's.
FULL = dict(users=2000, items=3000, events=100_000)
QUICK = dict(users=300, items=1500, events=30_000)


@contextlib.contextmanager
def open_log(quick: bool):
    """``(engine, settings, name)`` of the environment's database, or of a synthetic marketplace at the demo's size
    (the quick one with ``quick``) in a temporary folder when that database holds nothing (removed after)."""
    cfg = QUICK if quick else FULL
    settings = Settings.from_env()
    engine = db.make_engine(settings.database_url, settings)
    tmp = None
    name = Path(settings.var_dir).resolve().name
    if quick or not _has_data(engine):
        engine.dispose()
        tmp = Path(tempfile.mkdtemp(prefix="prefeed-protocols-"))
        engine, settings, _ = synthetic_log(tmp, cfg, quick)
        name = "synthetic"
    try:
        yield engine, settings, name
    finally:
        engine.dispose()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def synthetic_log(tmp: Path, size: dict, quick: bool):
    """``(engine, settings, market)``: the synthetic marketplace of ``size`` (users, items, events; seed 0) in a
    SQLite database in ``tmp``, with the settings a benchmark ranks it with (``quick``: one training period): the
    environment's (``PREFEED_RANK_SHOWN``, ``PREFEED_CASCADE_KEEP``, ... as on an imported log), but for where the
    log and models are and the marketplace's attributes."""
    settings = dataclasses.replace(Settings.from_env(), database_url=f"sqlite:///{tmp / 'log.db'}", var_dir=tmp,
                                   model_dir=tmp / "models", item_attributes=synthetic.ATTRIBUTES,
                                   **({"train_periods": QUICK_TRAIN_PERIODS} if quick else {}))
    engine = db.make_engine(settings.database_url, settings)
    db.init_db(engine, settings)
    market = synthetic.generate(size["users"], size["items"], size["events"], seed=0, now=time.time())
    bulk.load(engine, market, settings)
    return engine, settings, market


def _has_data(engine) -> bool:
    try:
        return bulk.has_data(engine)
    except SQLAlchemyError:         # no tables: nothing imported there
        return False
