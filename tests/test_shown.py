"""What a user was shown, as the ranker reads it: the "shown" columns against a plain Python reference, the pages a
replay derives (a step sees only its own user's earlier pages), and a worker reading the pages the collector stored."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings as hyp_settings, strategies as st

from precompute.data import item_days
from precompute.data.history import load_histories
from precompute.data.shown_pages import load_pages
from precompute.learning import derived
from precompute.learning.derived import PAGE, DerivedPages, StoredPages, training_shown
from precompute.ranking import shown
from precompute.ranking.layout import for_declaration
from precompute.units import DAY
from tests.conftest import stored_pages

SPAN = 8        # item rows 0..6, and the table's "unknown" row


#: The categories of item rows 0..6 (row 6 in two), and the one each candidate is described by (its lowest).
CATS = {r: ({r % 3} if r != 6 else {0, 1}) for r in range(SPAN - 1)}
N_CAT = 3


class Categories:
    """The two things of an item table the category columns read."""

    n_categories = N_CAT

    def categories_of(self, rows):
        pairs = [(j, c) for j, r in enumerate(rows.tolist()) for c in sorted(CATS[r])]
        return np.array([j for j, _ in pairs], dtype=np.int64), np.array([c for _, c in pairs], dtype=np.int64)


def _acted(impressions, events, owner, row):
    """Whether ``owner`` acted on ``row`` at or after the last page that showed it (None: never shown)."""
    mine = [ts for o, r, ts, _ in impressions if o == owner and r == row and r >= 0]
    return None if not mine else any(o == owner and r == row and ts >= max(mine) for o, r, ts in events)


def reference(impressions, events, owner, row, now):
    """The columns of candidate ``(owner, row)`` at ``now``, the slow way: impressions are ``(owner, row, ts,
    position)`` tuples, events ``(owner, row, ts)``."""
    cat = min(CATS[row])
    of_cat = [(o, r) for o, r, _, _ in impressions if o == owner and r >= 0 and cat in CATS[r]]
    taken = sum(bool(_acted(impressions, events, owner, r)) for r in {r for _, r in of_cat})
    category = [float(len(of_cat)), float(taken)]
    mine = [(ts, pos) for o, r, ts, pos in impressions if o == owner and r == row and r >= 0]
    unknown_items = [0.0, 0.0, math.nan]           # no item days known (``Shown.daily`` None)
    if not mine:
        return [0.0, math.nan, math.nan, math.nan, 0.0, *category, *unknown_items]
    last = max(ts for ts, _ in mine)
    return [float(len(mine)), (now - last) / DAY, (now - min(ts for ts, _ in mine)) / DAY,
            float(min(pos for _, pos in mine)), float(_acted(impressions, events, owner, row)), *category,
            *unknown_items]


impression = st.tuples(st.integers(0, 2), st.integers(-1, SPAN - 2), st.floats(0, 10 * DAY), st.integers(0, 30))
event = st.tuples(st.integers(0, 2), st.integers(-1, SPAN - 2), st.floats(0, 10 * DAY))


def _imp(impressions):
    """``(owner, row, ts, position)`` tuples as ``shown.Impressions``."""
    return shown.Impressions(*(np.array([x[k] for x in impressions], dtype=dt) if impressions else np.empty(0, dt)
                               for k, dt in enumerate((np.int64, np.int64, np.float64, np.int64))))


def columns_of(impressions, events, cand, now):
    imp = _imp(impressions)
    ev = [np.array([e[k] for e in events], dtype=dt) if events else np.empty(0, dt)
          for k, dt in enumerate((np.int64, np.int64, np.float64))]
    owner = np.array([c[0] for c in cand], dtype=np.int64)      # grouped by owner, as a batch's candidates are
    rows = np.array([c[1] for c in cand], dtype=np.int64)
    cell = owner * N_CAT + np.array([min(CATS[r]) for r in rows.tolist()], dtype=np.int64)
    got = shown.columns(shown.aggregate(imp, SPAN), owner, rows, now, *ev, cell, Categories())
    return np.column_stack([got[name] for name in shown.COLUMNS])


@hyp_settings(max_examples=200, deadline=None)
@given(st.lists(impression, max_size=25), st.lists(event, max_size=10),
       st.lists(st.tuples(st.integers(0, 2), st.integers(0, SPAN - 2)), min_size=1, max_size=12))
def test_columns_equal_a_plain_python_reference(impressions, events, cand):
    cand = sorted(cand, key=lambda c: c[0])
    now = np.array([11 * DAY, 12 * DAY, 13 * DAY])
    got = columns_of(impressions, events, cand, now)
    want = np.array([reference(impressions, events, o, r, now[o]) for o, r in cand])
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)       # the columns are float32, as the matrix


#: Counts of every user's pages: (item row, -1 for an item the table does not know; day; kind; count)
item_day = st.tuples(st.integers(-1, SPAN - 2), st.integers(0, 60), st.sampled_from([item_days.SHOWN, 1, 2]),
                     st.integers(1, 50))


def item_reference(counts, row, day):
    """An item's three columns at ``day``, the slow way: the days ``[day - 28, day)`` summed."""
    inside = [(r, k, n) for r, d, k, n in counts if day - item_days.WINDOW_DAYS <= d < day]
    shown_ = sum(n for r, k, n in inside if r == row and k == item_days.SHOWN)
    acted = sum(n for r, k, n in inside if r == row and k != item_days.SHOWN)
    every_shown = sum(n for _, k, n in inside if k == item_days.SHOWN)
    if not every_shown:
        return [float(shown_), float(acted), math.nan]
    prior = sum(n for _, k, n in inside if k != item_days.SHOWN) / every_shown
    return [float(shown_), float(acted), (acted + item_days.PRIOR_IMPRESSIONS * prior) /
            (shown_ + item_days.PRIOR_IMPRESSIONS)]


@hyp_settings(max_examples=200, deadline=None)
@given(st.lists(item_day, max_size=30), st.lists(st.tuples(st.integers(0, 2), st.integers(0, SPAN - 2)),
                                                 min_size=1, max_size=12), st.integers(0, 70))
def test_item_columns_equal_a_plain_python_reference_of_every_users_days(counts, cand, day):
    cand = sorted(cand, key=lambda c: c[0])
    cols = [np.array([c[k] for c in counts], dtype=np.int64) if counts else np.empty(0, np.int64) for k in range(4)]
    # given every user's counts of days 0..60, read for a window before day 70 (the reader's widest span)
    daily = item_days.of_rows(*cols, first=-item_days.WINDOW_DAYS, last=70)
    owner = np.array([o for o, _ in cand], dtype=np.int64)
    rows = np.array([r for _, r in cand], dtype=np.int64)
    now = np.array([day * DAY + 0.5 * DAY] * 3)
    got = shown.columns(shown.aggregate(_imp([]), SPAN, daily=daily), owner, rows, now, *(np.empty(0),) * 3)
    got = np.column_stack([got[name] for name in shown.COLUMNS[-3:]])
    want = np.array([item_reference(counts, r, day) for _, r in cand])
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)


def test_an_item_no_page_showed_has_every_items_rate():
    # given one item shown 200 times with 20 events attributed, the day before
    counts = [np.array(x, dtype=np.int64) for x in ([0, 0], [9, 9], [item_days.SHOWN, 1], [200, 20])]
    daily = item_days.of_rows(*counts, first=0, last=10)
    got = shown.columns(shown.aggregate(_imp([]), SPAN, daily=daily), np.array([0, 0]), np.array([0, 1]),
                        np.array([10 * DAY]), *(np.empty(0),) * 3)
    # then an item never shown has 0 impressions and the prior's rate, 10 %
    assert got["item_shown_28d"][1] == 0 and got["item_shown_rate_28d"][1] == pytest.approx(0.1)
    assert got["item_shown_rate_28d"][0] == pytest.approx((20 + 100 * 0.1) / (200 + 100))


def test_an_item_never_shown_has_no_pages_and_no_times():
    # Given pages that showed items 1 and 2 to user 0
    got = columns_of([(0, 1, DAY, 0), (0, 2, DAY, 1)], [], [(0, 3), (1, 1)], np.array([2 * DAY, 2 * DAY]))
    # Then item 3, and item 1 for another user, were never shown: 0 pages, the times and place missing
    assert (got[:, 0] == 0).all() and np.isnan(got[:, 1:4]).all() and (got[:, 4] == 0).all()


@hyp_settings(max_examples=100, deadline=None)
@given(st.lists(impression, max_size=25), st.lists(impression.filter(lambda x: x[0] != 0), max_size=25))
def test_one_users_impressions_never_change_another_users_columns(mine, others):
    cand = [(0, r) for r in range(SPAN - 1)]
    now = np.array([11 * DAY] * 3)
    alone = columns_of([x for x in mine if x[0] == 0], [], cand, now)
    np.testing.assert_array_equal(columns_of([x for x in mine if x[0] == 0] + others, [], cand, now), alone)


def _fields(agg):
    return [agg.code.tolist(), agg.pages.tolist(), agg.first.tolist(), agg.last.tolist(), agg.best.tolist()]


@hyp_settings(max_examples=100, deadline=None)
@given(st.lists(impression, max_size=25), st.integers(0, 3), st.integers(0, 3),
       st.sets(st.integers(0, 2)))
def test_a_chunk_of_a_batch_sees_what_its_own_users_were_shown(impressions, a, b, positions):
    # Given what a batch of three users was shown, read once for the batch
    whole = shown.aggregate(_imp(impressions), SPAN)
    a, b = min(a, b), max(a, b)
    # Then users a:b of it, renumbered from 0, hold what aggregating their own impressions gives (Histories.slice)
    mine = [(o - a, r, ts, p) for o, r, ts, p in impressions if a <= o < b]
    assert _fields(whole.slice(a, b)) == _fields(shown.aggregate(_imp(mine), SPAN))
    # And so do the users at some positions, as a batch of their own (Histories.take: an experiment's arm)
    at = sorted(positions)
    mine = [(at.index(o), r, ts, p) for o, r, ts, p in impressions if o in at]
    assert _fields(whole.take(np.array(at, dtype=np.int64))) == _fields(shown.aggregate(_imp(mine), SPAN))


def test_a_replayed_step_sees_only_its_users_earlier_pages():
    pages = DerivedPages()
    # Given user 7's pages before steps 0 and 2, and user 8's before step 1
    pages.add(np.array([7, 8, 7]), np.array([0, 1, 2]), np.array([10.0, 20.0, 30.0]),
              [np.array([1, 2]), np.array([3]), np.array([2, 4, *range(10, 20)])])
    imp = pages.impressions(np.array([7, 7, 8]), np.array([2, 3, 1]))
    # Then user 7's step 2 sees its step 0's page only, step 3 both pages (cut to a page), user 8's step 1 nothing
    assert imp.owner.tolist() == [0, 0, 1, 1, *[1] * PAGE]
    assert imp.rows.tolist() == [1, 2, 1, 2, 2, 4, *range(10, 18)]
    assert imp.position.tolist() == [0, 1, 0, 1, *range(PAGE)]


def test_layout_has_the_shown_columns_only_when_asked():
    assert "ux_shown_pages" not in for_declaration((), ("view", "buy")).names
    with_shown = for_declaration((), ("view", "buy"), shown=True)
    assert with_shown.names[-len(shown.COLUMNS):] == shown.COLUMNS
    assert with_shown.has("shown") and not for_declaration((), ("view", "buy")).has("shown")


def test_a_worker_reads_the_pages_stored_for_its_users_only(pipeline, world, own_users):
    # Given two pages served to one user and one to another, and one served to the first long ago
    a, b = own_users(2)
    ids = pipeline.items.ids
    hist = load_histories(pipeline.engine, [a, b], pipeline.items, pipeline.settings)
    clock = float(hist.clock)
    rows = [(a, clock - 60, 0, ids[[0, 1]]), (a, clock - 30, 2, ids[[1, 2]]), (b, clock - 10, 0, ids[[5]]),
            (a, clock - 10 * DAY, 0, ids[[9]])]
    with stored_pages(pipeline.engine, 991_000 + a, rows):
        pages = load_pages(pipeline.engine, hist.user_ids, clock - pipeline.settings.impressions_keep)
        # Then the old page is left out, and each item has its place in the user's scroll
        got = sorted(zip(pages.owner.tolist(), pages.item_ids.tolist(), pages.position.tolist()))
        assert got == sorted([(0, ids[0], 0), (0, ids[1], 1), (0, ids[1], 2), (0, ids[2], 3), (1, ids[5], 0)])
        # And with the "shown" layout a worker's columns say so: item 1 shown on two pages, at best place 1
        layout = for_declaration(tuple(pipeline.settings.item_attributes),
                                 tuple(n for n, _ in pipeline.settings.event_types), shown=True)
        pipeline.items = dataclasses.replace(pipeline.items, layout=layout)
        seen = pipeline.shown(hist)
        at = np.searchsorted(seen.code, 0 * seen.span + 1)
        assert seen.code[at] == 1 and seen.pages[at] == 2 and seen.best[at] == 1
        assert (seen.code // seen.span).tolist().count(1) == 1


def test_training_steps_see_the_pages_stored_before_their_feed_else_the_stand_ins(pipeline, own_users):
    # Given pages the product served to users a and b (items as rows), one to a long before the keep window, and
    # 102 to user c; the stored pages begin at time 100
    a, b, c = own_users(3)
    keep = pipeline.settings.impressions_keep
    rows = [(a, 100.0, 0, [1, 2]), (a, 200.0, 2, [3]), (a, 300.0, 3, [4]), (b, 150.0, 0, [5]),
            (a, 100.0 - keep - 1, 0, [6]), *[(c, 1000.0 + k, 0, [10 + k]) for k in range(102)]]
    with stored_pages(pipeline.engine, 992_000 + a, rows):
        stored = StoredPages(pipeline.engine, keep, since=100.0)
        # and the stand-in's page before user a's first step
        stand_in = DerivedPages()
        stand_in.add(np.array([a]), np.array([0]), np.array([10.0]), [np.array([7])])
        # When training's steps are a at feed clocks 250, 300 and 50, b at 100, and c after all of c's pages
        users, index = np.array([a, a, b, a, c]), np.array([1, 2, 3, 4, 5])
        feed = np.array([250.0, 300.0, 100.0, 50.0, 2000.0])
        got = training_shown(stand_in, stored, users, index, feed, lambda ids: ids, 200)
        seen = {(int(code // 200), int(code % 200)): (int(n), int(best))
                for code, n, best in zip(got.code, got.pages, got.best)}
        # Then a covered step sees its user's stored pages served before its feed and within the window, never the
        # page served at its feed's time, nor the stand-in's; b saw nothing before 100; a step before the stored
        # pages sees the stand-in's page; and c's newest 100 pages count, the two oldest not
        want = {(0, 1): (1, 0), (0, 2): (1, 1), (0, 3): (1, 2), (1, 1): (1, 0), (1, 2): (1, 1), (1, 3): (1, 2),
                (3, 7): (1, 0), **{(4, 10 + k): (1, 0) for k in range(2, 102)}}
        assert seen == want
        assert derived.PER_USER == 100


def test_acted_since_shown_counts_an_event_at_the_last_pages_time_not_before():
    # Given item 1 shown to user 0 at 1 day and again at 2 days, item 2 at 2 days
    imp = [(0, 1, DAY, 0), (0, 1, 2 * DAY, 3), (0, 2, 2 * DAY, 1)]
    # When the user acted on item 1 at the last page's time, and on item 2 before its page
    got = columns_of(imp, [(0, 1, 2 * DAY), (0, 2, DAY)], [(0, 1), (0, 2)], np.array([3 * DAY]))
    # Then item 1 was acted on since it was shown, item 2 not
    assert got[:, 4].tolist() == [1.0, 0.0]
    assert got[0, :4].tolist() == [2.0, 1.0, 2.0, 0.0]
