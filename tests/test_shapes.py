"""The reshaped logs docs/replay.md measures on (``benchmarks/lab/shapes.py``) are the shapes it describes."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from benchmarks.lab import shapes
from precompute.data import synthetic
from precompute.units import DAY


@pytest.fixture(scope="module")
def market() -> synthetic.Marketplace:
    return synthetic.generate(200, 1500, 20_000, seed=3, now=1.8e9)


def _of(m: synthetic.Marketplace, values: np.ndarray, item_ids: np.ndarray) -> np.ndarray:
    """``values`` (one per item of ``m``) of each item id."""
    row = {int(i): k for k, i in enumerate(m.item_id)}
    return np.asarray(values)[[row[int(i)] for i in item_ids]]


def test_baskets_are_purchases_at_the_start_of_their_day(market):
    b = shapes.baskets(market, purchase=4)
    assert (b.event_type == 4).all()
    assert (b.event_ts % DAY == 0).all()
    assert (np.floor(market.event_ts / DAY) * DAY == b.event_ts).all()     # no event changes its day
    assert (np.diff(b.event_ts) >= 0).all()                                # still in log order


def test_a_stretched_log_spans_factor_times_as_long_and_ends_back_in_time(market):
    s = shapes.stretched(market, 12.0, 365 * DAY)
    span = market.event_ts.max() - market.event_ts.min()
    assert s.event_ts.max() - s.event_ts.min() == pytest.approx(12 * span)
    assert s.event_ts.min() == pytest.approx(market.event_ts.min() - 365 * DAY)
    assert (s.item_created_at == market.item_created_at - 365 * DAY).all()


def test_promotions_move_the_share_asked_to_a_few_items_a_day(market):
    b = shapes.baskets(market, purchase=4)
    p = shapes.promoted(b, share=0.5, seed=1)
    moved = p.event_item != b.event_item
    assert moved.mean() == pytest.approx(0.5, abs=0.02)     # each purchase moves with probability 0.5
    day = b.event_ts // DAY
    for d in np.unique(day):                            # at most the promotions running that day
        assert len(np.unique(p.event_item[moved & (day == d)])) <= shapes.PER_DAY * shapes.DAYS
    # and no purchase moves to an item listed after its day
    listed = _of(market, market.item_created_at, p.event_item[moved]) // DAY
    assert (listed <= day[moved]).all()


def test_category_promotions_keep_each_purchase_in_its_category(market):
    b = shapes.baskets(market, purchase=4)
    p = shapes.promoted(b, share=0.5, seed=1, by_category=True)
    assert (_of(market, market.item_category, b.event_item) == _of(market, market.item_category, p.event_item)).all()
    assert 0.1 < (p.event_item != b.event_item).mean() < 0.5     # fewer move: not every category has an offer


def test_every_shape_lists_an_item_before_it_sells():
    for name in shapes.SIZES:
        m = shapes.build(name, now=1.8e9, users=100, items=800, events=5000)
        assert (_of(m, m.item_created_at, m.event_item) <= m.event_ts).all(), name


def test_the_command_loads_a_shape_once_and_refuses_a_second(tmp_path):
    import subprocess
    import sys

    from precompute.settings import without_prefeed_config
    from tests.conftest import ROOT

    # given an empty folder, and the command run twice on it
    env = {**without_prefeed_config(), "PREFEED_VAR_DIR": str(tmp_path)}
    args = [sys.executable, "-m", "benchmarks", "shapes", "promotions", "--users", "50", "--items", "300",
            "--events", "2000"]
    first = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    second = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    # then the first loads the log and the second says why it will not, in one line, with nothing added
    assert first.returncode == 0 and "loaded promotions: 300 items, 50 users, 2000 events" in first.stdout
    assert second.returncode != 0 and second.stderr.strip().splitlines() == [
        f"Error: sqlite:///{tmp_path / 'prefeed.db'} already holds a marketplace"]
    with sqlite3.connect(tmp_path / "prefeed.db") as con:
        assert con.execute("SELECT count(*) FROM events").fetchone() == (2000,)
