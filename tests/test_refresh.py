"""Feeds are recomputed once the log's clock has moved PREFEED_FEED_REFRESH past the clock they were computed at,
up to PREFEED_FEED_TTL after the user's newest event: by the drain jobs that events start, on a real Redis and
database."""

import dataclasses
import time

import numpy as np

from jobs import context, tasks
from precompute.feeds.dirty import DirtyUsers
from precompute.feeds.refresh import FeedClocks
from precompute.feeds.store import FeedStore
from precompute.units import DAY, HOUR


def test_clocks_hand_out_each_due_feed_once_and_forget_users_past_the_horizon(settings, r):
    clocks = FeedClocks(r, dataclasses.replace(settings, feed_refresh=int(DAY), feed_ttl=int(7 * DAY)))
    # given feeds computed at 0 (users 1, 2) and at half a day (user 3), and one for user 4, whose newest event is
    # 8 days before its feed's clock
    clocks.record(np.array([1, 2]), np.array([0.0, -DAY]), 0.0)
    clocks.record(np.array([3, 4]), np.array([0.0, -8 * DAY]), DAY / 2)
    # then user 4 is not kept for a refresh
    assert clocks.pending() == 3
    # and at a day less a second nothing is due; at a day users 1 and 2, one call at a time, each once
    assert clocks.due(DAY - 1, 10) == []
    assert sorted(clocks.due(DAY, 1) + clocks.due(DAY, 10)) == [1, 2]
    assert clocks.due(DAY, 10) == [] and clocks.pending() == 1
    # and with refreshes off nothing is recorded
    off = FeedClocks(r, dataclasses.replace(settings, feed_refresh=0))
    off.record(np.array([5]), np.array([0.0]), 0.0)
    assert off.due(10 * DAY, 10) == [] and clocks.pending() == 1


def test_a_drain_recomputes_the_feeds_the_log_clock_moved_a_refresh_past(settings, r, pipeline, own_users,
                                                                         monkeypatch):
    s = dataclasses.replace(settings, feed_refresh=int(DAY), feed_ttl=int(10_000 * DAY))
    monkeypatch.setattr(pipeline, "settings", s)
    monkeypatch.setattr(context, "_pipeline", pipeline)
    monkeypatch.setattr(context, "_queue_redis", r)
    clocks, store = FeedClocks(r, s), FeedStore(r, s)
    stale, fresh = own_users(2)
    now = pipeline.items.as_of
    # given two users with feeds of their latest history, recorded as if one's was computed a day and a second
    # before the log's clock and the other's an hour before
    pipeline.recompute([stale, fresh])
    before = {u: store.read(u).header.computed_at for u in (stale, fresh)}
    clocks.record(np.array([stale]), np.array([now - 2 * DAY]), now - DAY - 1)
    clocks.record(np.array([fresh]), np.array([now - 2 * DAY]), now - HOUR)
    time.sleep(0.01)
    # when a drain job runs with no user dirty from events
    done = tasks.drain_dirty()
    # then it recomputed the stale one only (its feed replaced, though its history version is the same), and
    # recorded it at the log's clock
    assert done["users"] == 1 and store.read(stale).header.computed_at > before[stale]
    assert store.read(fresh).header.computed_at == before[fresh]
    assert r.zscore(clocks.key, str(stale)) == now and r.zscore(clocks.key, str(fresh)) == now - HOUR
    # and the next drain finds nothing due
    assert tasks.drain_dirty()["users"] == 0 and DirtyUsers(r, s).pending() == 0
