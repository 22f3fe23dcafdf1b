"""The reshaped logs docs/replay.md measures on (``benchmarks/shapes.py``) are the shapes it describes."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import shapes
from precompute.data import synthetic

DAY = 86400.0


@pytest.fixture(scope="module")
def market() -> synthetic.Marketplace:
    return synthetic.generate(200, 1500, 20_000, seed=3, now=1.8e9)


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
    row = {int(i): k for k, i in enumerate(market.item_id)}
    listed = market.item_created_at[[row[int(i)] for i in p.event_item[moved]]] // DAY
    assert (listed <= day[moved]).all()


def test_category_promotions_keep_each_purchase_in_its_category(market):
    b = shapes.baskets(market, purchase=4)
    p = shapes.promoted(b, share=0.5, seed=1, by_category=True)
    row = {int(i): k for k, i in enumerate(market.item_id)}
    category = np.asarray(market.item_category)
    before = category[[row[int(i)] for i in b.event_item]]
    after = category[[row[int(i)] for i in p.event_item]]
    assert (before == after).all()
    assert 0.1 < (p.event_item != b.event_item).mean() < 0.5     # fewer move: not every category has an offer


def test_every_shape_lists_an_item_before_it_sells():
    for name in shapes.SIZES:
        m = shapes.build(name, now=1.8e9, users=100, items=800, events=5000)
        row = {int(i): k for k, i in enumerate(m.item_id)}
        created = m.item_created_at[[row[int(i)] for i in m.event_item]]
        assert (created <= m.event_ts).all(), name
