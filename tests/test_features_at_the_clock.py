"""Features that describe the log at its clock: an item's last-week standing and its time on the platform. Small
worlds in a database of each test's own."""

import dataclasses

import numpy as np
import pytest

from precompute.ranking import features
from precompute.ranking.item_loader import load_item_table
from precompute.units import DAY, HOUR
from tests.conftest import own_database
from tests.test_catalogue_model import NOW, batch, small_world


@pytest.fixture
def own_url(tmp_path_factory):
    yield from own_database(tmp_path_factory, "clock")


def column(table, X, cand, name):
    """``{item id: value}`` of one feature column (one user's candidates)."""
    return dict(zip(table.ids[cand.rows].tolist(), X[:, table.layout.index(name)].tolist()))


def test_last_weeks_standing_and_time_since_first_event_follow_the_clock(settings, own_url):
    # given items without a creation time: item 1 popular a month ago only, item 2 rising over the last week,
    # item 3 seen for the first time two days ago, item 4 interacted with by the user only, 60 days ago (outside a
    # 30-day seen window, so it is one of their candidates)
    s = dataclasses.replace(settings, database_url=own_url, seen_window=30 * DAY)
    items = [(i, [1], 5.0, None) for i in (1, 2, 3, 4)]
    crowd = [(900, 1, 1, NOW - 30 * DAY)] * 20 + [(900, 2, 1, NOW - 40 * DAY)] \
        + [(900, 2, 1, NOW - 2 * DAY)] * 6 + [(900, 3, 1, NOW - 2 * DAY)] * 2
    engine = small_world(s, own_url, items, crowd + [(8, 4, 1, NOW - 60 * DAY)])
    table = load_item_table(engine, s, as_of=NOW)
    # when a user's candidates are described at the clock
    hist, cand = batch(table, s, [(8, 4, 1, NOW - 60 * DAY)], [8])
    X = features.build(table, hist, cand, NOW)
    # then the week's shares order the items by the week's interactions (smoothed: 6 + 1 of 8 + 4 for item 2), the
    # weekless ones share the floor
    share = column(table, X, cand, "item_log_share_7d")
    assert share[2] == pytest.approx(np.log(7 / 12)) and share[2] > share[3] > share[1] == share[4]
    assert column(table, X, cand, "item_log_share_1d")[2] == pytest.approx(np.log(1 / 4))
    # and the trend is its share of the week over its share of all time: up for 2 and 3, down for 1
    trend = column(table, X, cand, "item_recent_trend")
    assert trend[2] > 0 and trend[3] > 0 and trend[1] < 0
    assert column(table, X, cand, "item_log_weighted_7d")[2] == pytest.approx(np.log1p(6.0))
    # and the time on the platform comes from the first event (days), as the creation time is unknown
    first = column(table, X, cand, "item_days_since_first_event")
    assert first[1] == pytest.approx(30, abs=1e-2) and first[2] == pytest.approx(40, abs=1e-2)
    assert first[3] == pytest.approx(2, abs=1e-2)
    assert np.isnan(column(table, X, cand, "item_age_days")[1])
    # and a statistic taken at an earlier clock knows nothing of the events after it
    before = load_item_table(engine, s, as_of=NOW - 35 * DAY)
    assert np.isnan(before.first_seen[before.rows(np.array([2, 1]))]).tolist() == [False, True]
    engine.dispose()


def test_the_users_last_events_and_usual_popularity_describe_each_candidate(settings, own_url):
    # given items 1-6 in category 1 and 7-14 in category 2; a crowd making item 14 the most popular by far
    s = dataclasses.replace(settings, database_url=own_url)
    items = [(i, [1 if i <= 6 else 2], 5.0, NOW) for i in range(1, 15)]
    crowd = [(900, 14, 1, NOW - 40 * DAY)] * 30
    # and a user whose two oldest events are in category 1 and whose last ten are 3 in category 1, 7 in category 2
    order = (1, 2, 3, 7, 8, 4, 9, 10, 5, 11, 12, 13)
    mine = [(8, i, 1, NOW - (len(order) - k) * HOUR) for k, i in enumerate(order)]
    engine = small_world(s, own_url, items, crowd + mine)
    table = load_item_table(engine, s, as_of=NOW)
    # when its candidates (items 6 and 14, the others seen) are described
    hist, cand = batch(table, s, crowd + mine, [8])
    X = features.build(table, hist, cand, NOW)
    # then the recent share speaks of the last ten events only, the whole-history share of all twelve
    recent = column(table, X, cand, "ux_category_share_recent")
    assert recent == {6: pytest.approx(0.3), 14: pytest.approx(0.7)}
    assert column(table, X, cand, "ux_category_share") == {6: pytest.approx(5 / 12), 14: pytest.approx(7 / 12)}
    # and the crowd's favourite is more popular than what the user usually takes (a lower rank), item 6 less
    vs_user = column(table, X, cand, "ux_popularity_vs_user")
    assert vs_user[14] < 0 < vs_user[6]
    engine.dispose()
