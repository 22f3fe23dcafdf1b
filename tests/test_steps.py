"""Replayed steps and popularity at a step's clock, on small hand-made logs whose answers are worked out by hand in
the comments. Each test builds a database of its own (items, and the events the item table counts)."""

import numpy as np
import pytest

from precompute.learning import steps as replay
from precompute.ranking.item_loader import load_item_table
from precompute.data.log import EventLog, load_events
from precompute.learning.activity import Activity
from precompute.ranking.layout import WINDOWS
from precompute.ranking.popularity import block, top_lists
from precompute.settings import Settings
from precompute.units import DAY, HOUR
from tests.conftest import own_database
from tests.test_catalogue_model import NOW, small_world

#: The default types (view 1, click 2, contact 4, purchase 6) and a weightless "hide", code 5.
TYPES = (("view", 1.0), ("click", 2.0), ("contact", 4.0), ("purchase", 6.0), ("hide", 0.0))

#: user 1 and 2 have history up to the cut (t=100, inclusive), user 3 only after it; item 99 is not in the
#: catalogue, type 9 is not declared. Events 1-19, in time order.
CUT, END = 100.0, 1000.0
LOG = [(1, 11, 1, 10), (2, 12, 1, 20), (1, 13, 1, 50), (2, 15, 1, 100),
       (2, 13, 2, 110),                                          # u2, step 1: 13 is new
       (1, 11, 4, 120), (3, 14, 4, 120),                         # u1, step 1: 11 only, seen before the cut
       (1, 14, 1, 130), (1, 14, 4, 130), (1, 15, 5, 130), (1, 99, 4, 130), (1, 18, 9, 130), (1, 12, 2, 130),
       (2, 14, 1, 130), (2, 15, 2, 130),                         # u1 step 2 and u2 step 2 at the same time
       (1, 12, 4, 140), (1, 16, 1, 140), (1, 15, 1, 140),        # u1, step 3
       (1, 17, 1, 150),                                          # u1, step 4: past n_steps=3
       (2, 16, 1, 2000)]                                         # after the end


@pytest.fixture
def own_url(tmp_path_factory):
    yield from own_database(tmp_path_factory, "steps")


@pytest.fixture
def s(own_url, tmp_path):
    """Settings of a test's own database: the declared types above, a history of 3 events."""
    return Settings(database_url=own_url, var_dir=tmp_path, event_types=TYPES, history_limit=3)


def arrays(events):
    """The log of events listed in time order."""
    user, item, type_, ts = (np.array(c) for c in zip(*events))
    assert (np.diff(ts) >= 0).all()
    return EventLog(user.astype(np.int64), item.astype(np.int64), type_.astype(np.int16), ts.astype(np.float64), None)


def catalogue(s, own_url, events=()):
    """An item table of items 11-18 (as of the cut) and the engine of its database."""
    engine = small_world(s, own_url, [(i, [1], 5.0, None) for i in range(11, 19)], list(events))
    return load_item_table(engine, s, as_of=CUT), engine


def truth(found, table, k):
    """Step ``k``'s truth as {item id: grade}."""
    lo, hi = found.offsets[k], found.offsets[k + 1]
    assert (np.diff(found.rows[lo:hi]) > 0).all()          # rows ascending, once each
    return dict(zip(table.ids[found.rows[lo:hi]].tolist(), found.rel[lo:hi].tolist()))


def test_steps_are_each_users_first_timestamps_after_the_cut_judged_on_the_items_new_to_them(s, own_url):
    # given the log above and items 11-18
    table, engine = catalogue(s, own_url, [e for e in LOG if e[3] <= CUT])
    # when its first three steps per user after the cut are found
    found = replay.find(arrays(LOG), table, CUT, END, n_steps=3)
    # then user 3 (no history before the cut) has none, user 1's step at 120 (only item 11, seen before the cut)
    # counts but is not returned, so its step at 150 is past the third; user 2's event after the end is no step;
    # the steps come by clock (then user): the newest event time before each, and how many events precede it
    assert found.user.tolist() == [2, 1, 2, 1]
    assert found.ts.tolist() == [110, 130, 130, 140]
    assert found.clock.tolist() == [100, 120, 120, 130]
    assert found.known.tolist() == [4, 7, 7, 15]
    # and how many events come before each in log order: user 1's events at 130 come before user 2's
    assert found.posted.tolist() == [4, 7, 13, 15]
    # and each step's feed was computed at the user's previous event after the cut, a step without truth included
    # (user 1's at 120); a user's first step reads the feed computed when asked for, at the log's clock then
    assert found.feed_clock.tolist() == [100, 120, 110, 130]
    # with popularity up to the first event of that moment (when a worker's item table reloads): user 1's feed
    # before 140 knows the first event of 130, not the rest of that second
    assert found.feed_known.tolist() == [4, 6, 5, 8]
    # and each step's truth is its new items graded by their strongest type: at 130 user 1 viewed and bought 14
    # (6) and clicked 12 (2), while 15 (hidden: weight 0), 99 (not in the catalogue) and 18 (undeclared type)
    # are no truth; at 140, 12 (clicked at 130) and 15 (hidden at 130) are no longer new; user 2's 15 was seen at
    # the cut itself
    assert [truth(found, table, k) for k in range(4)] == [{13: 2.0}, {12: 2.0, 14: 6.0}, {14: 1.0}, {16: 1.0}]
    # and only the users asked for are replayed; a single step per user leaves user 1 with nothing to judge
    assert replay.find(arrays(LOG), table, CUT, END, 3, users=np.array([2])).user.tolist() == [2, 2]
    one = replay.find(arrays(LOG), table, CUT, END, n_steps=1)
    assert one.user.tolist() == [2] and truth(one, table, 0) == {13: 2.0}
    # and an infinite end lets user 2's late event be its third step
    late = replay.find(arrays(LOG), table, CUT, float("inf"), 3)
    assert late.ts.tolist()[-1] == 2000 and late.clock.tolist()[-1] == 150 and late.known.tolist()[-1] == 19
    assert late.feed_clock.tolist()[-1] == 130
    # and with feeds refreshed every 5 s of log time, user 2's feed of 110 was refreshed at 115, 120 and 130 before
    # its step at 130: user 1's events of that second come first in the log, and once they are posted the clock is
    # at 130 (on a log stamped by the day, a day's first baskets bring its refreshes before the others' are read);
    # the one read at 2000 at 150, the newest event before it; refreshes stop once the user's
    # newest event (130) is past a horizon of 7 s: the refresh at 135 records the feed again, the one at 140 does not
    refreshed = replay.find(arrays(LOG), table, CUT, float("inf"), 3, refresh=5.0)
    assert refreshed.feed_clock.tolist() == [100, 120, 130, 130, 150]
    assert refreshed.feed_known.tolist() == [4, 6, 8, 8, 19]
    assert replay.find(arrays(LOG), table, CUT, float("inf"), 3, refresh=5.0, horizon=7.0).feed_clock[-1] == 140
    engine.dispose()


def test_a_replay_with_no_events_to_judge_has_no_steps(s, own_url):
    # given the log above and items 11-18
    table, engine = catalogue(s, own_url, [e for e in LOG if e[3] <= CUT])
    engine.dispose()
    # when the period after the cut is empty, or only a user without history before it is asked for
    # then there are no steps (not an error)
    assert len(replay.find(arrays(LOG), table, CUT, CUT, 3)) == 0
    assert len(replay.find(arrays(LOG), table, CUT, END, 3, users=np.array([3]))) == 0


def test_each_steps_history_is_the_users_events_before_it_and_seen_items_the_window_before_its_clock(s, own_url):
    # given the steps of the log above (clocks 100, 120, 120, 130) and a history of the newest 3 events
    table, engine = catalogue(s, own_url, [e for e in LOG if e[3] <= CUT])
    log = arrays(LOG)
    found = replay.find(log, table, CUT, END, n_steps=3)
    # when their histories are cut out of the log with a 70 s seen window
    hist = replay.ByUser(log).histories(found, table, s, seen_window=70.0)
    # then each row is one step: the user's events strictly before it, newest 3, oldest first; user 1's step at
    # 140 keeps its last three events at 130 (the unknown item 99 as row -1), not the step's own events
    assert hist.user_ids.tolist() == [0, 1, 2, 3] and hist.clock == 130

    def events(k):
        lo, hi = hist.offsets[k], hist.offsets[k + 1]
        ids = [int(table.ids[r]) if r >= 0 else -1 for r in hist.item_rows[lo:hi]]
        return list(zip(ids, hist.types[lo:hi].tolist(), hist.ts[lo:hi].tolist()))

    assert [events(k) for k in range(4)] == [
        [(12, 1, 20), (15, 1, 100)],
        [(11, 1, 10), (13, 1, 50), (11, 4, 120)],
        [(12, 1, 20), (15, 1, 100), (13, 2, 110)],
        [(-1, 4, 130), (18, 9, 130), (12, 2, 130)]]

    # and the seen items are those interacted with at or after clock - 70 (all of them with an infinite window),
    # the history limit aside, known items only
    def seen(h):
        return [sorted(table.ids[h.seen(k)].tolist()) for k in range(len(h))]

    assert seen(hist) == [[15], [11, 13], [13, 15], [11, 12, 14, 15, 18]]
    everything = replay.ByUser(log).histories(found, table, s, seen_window=float("inf"))
    assert seen(everything) == [[12, 15], [11, 13], [12, 13, 15], [11, 12, 13, 14, 15, 18]]
    engine.dispose()


#: Events around the clock C = NOW: on each window's boundary (inside), just outside, weightless, at the clock
#: itself and after it.
C = NOW
AROUND = [(1, 11, 1, C - 40 * DAY), (1, 11, 4, C - 30 * DAY), (2, 12, 3, C - 3 * DAY - 1),
          (2, 12, 2, C - 7 * DAY), (3, 13, 1, C - DAY), (3, 13, 2, C - HOUR), (3, 14, 4, C - HOUR + 1),
          (1, 14, 5, C - 10), (2, 15, 1, C), (2, 15, 4, C + 1), (3, 11, 2, C + 2 * HOUR), (1, 16, 4, C + 2 * HOUR),
          (2, 13, 9, C - 5)]


def test_popularity_replayed_from_the_log_is_the_item_tables_at_the_same_clock(s, own_url):
    # given the events above in a database, and the log as arrays
    _, engine = catalogue(s, own_url, sorted(AROUND, key=lambda e: e[3]))
    at_cut = load_item_table(engine, s, as_of=C - 50 * DAY)
    log = load_events(engine)
    user, item, type_, ts = log.user, log.item, log.type, log.ts
    ids = np.arange(11, 19)
    activity = Activity(at_cut, ts, item, type_)
    for clock in (C, C + 2 * HOUR):
        # when popularity is replayed at a clock and an item table is loaded as of it
        windowed, ever = activity.at(clock)
        table = load_item_table(engine, s, as_of=clock)
        mine, theirs = at_cut.rows(ids), table.rows(ids)
        # then both count the same type-weighted interactions per item in every window and of all time
        np.testing.assert_array_equal(windowed[mine], table.windowed[theirs])
        np.testing.assert_array_equal(ever[mine], table.weighted_counts[theirs])
        # and make the same feature block
        np.testing.assert_allclose(block(windowed, ever)[mine], table.live(1, (0, 0)).blocks[0][theirs],
                                   rtol=1e-6, atol=1e-6)
    # and by hand at C: item 13's view a day before and click an hour before (boundaries inside) make 1h 2, 1d 3;
    # item 12's contact just past 3 days counts from 7 days on; 14's hide counts nowhere; 15's view at C counts
    got = dict(zip(ids.tolist(), Activity(at_cut, ts, item, type_).at(C)[0][at_cut.rows(ids)].tolist()))
    assert got[13] == [2, 3, 3, 3, 3] and got[12] == [0, 0, 0, 6, 6] and got[14] == [6, 6, 6, 6, 6]
    assert got[15] == [1] * 5 and got[11] == [0, 0, 0, 0, 6]
    # and a clock earlier than the last asked (a step's feed clock can be) counts what a fresh replay counts there
    for again, fresh in zip(activity.at(C - HOUR), Activity(at_cut, ts, item, type_).at(C - HOUR)):
        np.testing.assert_array_equal(again, fresh)
    assert activity.at(C - HOUR)[1][at_cut.rows(np.array([15]))].tolist() == [0.0]
    # and a worker that read the log only up to before item 15's view at C (the same second as the clock) counts
    # everything else at C, and not that view
    n = int(np.flatnonzero((ts == C) & (item == 15))[0])
    partial, full = activity.at(C, known=n), Activity(at_cut, ts, item, type_).at(C)
    fifteen, others = at_cut.rows(np.array([15])), at_cut.rows(np.array([11, 12, 13, 14]))
    assert partial[1][fifteen].tolist() == [0.0] and full[1][fifteen].tolist() == [1.0]
    np.testing.assert_array_equal(partial[0][others], full[0][others])
    engine.dispose()


def test_a_batch_at_several_clocks_gets_each_clocks_block_and_lists(s, own_url):
    # given the same events, and a batch of three users at C, C and C + 2h
    _, engine = catalogue(s, own_url, sorted(AROUND, key=lambda e: e[3]))
    at_cut = load_item_table(engine, s, as_of=C - 50 * DAY)
    log = load_events(engine)
    item, type_, ts = log.item, log.type, log.ts
    # when its popularity is replayed
    live = Activity(at_cut, ts, item, type_).live(np.array([C, C, C + 2 * HOUR]), (5, 5))
    # then the users share the first clock's block and lists, the third has its own
    assert live.which.tolist() == [0, 0, 1] and len(live.blocks) == 2
    # and the lists are those a table at each clock makes: at C, 14 (bought just inside the hour) then 13 and 15 in the
    # hour; at C + 2h, 11 (clicked) and 16 (bought) then 15, whose contact a second after C is inside the day too
    lists = [[at_cut.ids[rows].tolist() for rows in per_clock] for per_clock in live.lists]
    assert lists == [[[14, 13, 15], [14, 13, 15]], [[16, 11], [15, 14, 16, 11, 13]]]
    for k, clock in enumerate((C, C + 2 * HOUR)):
        table = load_item_table(engine, s, as_of=clock)
        expected = [table.ids[rows].tolist() for rows in table.live(1, (5, 5)).lists[0]]
        assert lists[k] == expected
    engine.dispose()


def test_recent_lists_are_the_most_active_items_of_the_hour_and_the_day_ties_by_row():
    # given eight items' interactions in the hour and the day (other windows empty), row 3 inactive
    hour = [0, 3, 5, 5, 1, 2, 0, 4]
    day = [2, 2, 0, 9, 1, 2, 0, 2]
    windowed = np.zeros((8, len(WINDOWS)))
    windowed[:, 0], windowed[:, 1] = hour, day
    active = np.array([True, True, True, False, True, True, True, True])
    # when lists of several lengths are taken
    def lists(*lengths):
        return [rows.tolist() for rows in top_lists(windowed, active, lengths)]
    # then each holds the active items with a positive count, most first, ties by the lower row; the inactive row 3
    # (the day's most active) and the zero rows never appear, however long the list
    assert lists(3, 2) == [[2, 7, 1], [0, 1]]
    assert lists(100, 100) == [[2, 7, 1, 5, 4], [0, 1, 5, 7, 4]]
    # and a list of one (where only the top and its ties are sorted) keeps the lowest of the tied rows
    assert lists(1, 1) == [[2], [0]]
    # and a list of length 0 is empty
    assert lists(0, 0) == [[], []]
