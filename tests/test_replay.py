"""The replay protocol ranks a step as a worker serves it: the same candidates, features, popularity and model for the
same history and clock, item by item. Small worlds in a database of each test's own, ranked with the session's
model."""

import dataclasses

import numpy as np
import pytest

from precompute.data.recording import NewEvent, record
from precompute.data.log import EventLog, load_events
from precompute.learning import replay
from precompute.learning.activity import Activity
from precompute.ranking import candidates
from precompute.ranking.item_loader import load_item_table
from precompute.pipeline.pipeline import Pipeline
from precompute.learning.steps import ByUser, Steps, find
from precompute.units import DAY, HOUR
from tests.conftest import own_database
from tests.test_catalogue_model import NOW, small_world


@pytest.fixture
def own_url(tmp_path_factory):
    yield from own_database(tmp_path_factory, "replay")


def replayed(items, index, events, step: Steps, model, settings, n: int) -> list[int]:
    """The ids a replay ranks for one step, through the evaluation's own code (``replay.rank``), at its feed
    clock."""
    hist = ByUser(events).histories(step, items, settings)
    live = Activity(items, events.ts, events.item, events.type).live(
        step.feed_clock, candidates.recent_lengths(settings), step.feed_known)
    cand, top, offsets = replay.rank(items, index, hist, step.feed_clock, live, model, settings, n)
    return items.ids[cand.rows[top]].tolist()


def test_a_replayed_step_ranks_what_a_worker_stores_for_the_same_history_and_clock(pipeline, world, user_id):
    # given a worker's pipeline at the log's clock and the same log in memory
    events = load_events(world.engine)
    items, s = pipeline.items, pipeline.settings
    clock = float(events.ts[-1])
    assert items.as_of == clock
    # when a step of the user right after the log is replayed with the worker's model, table and co-visitation
    step = Steps(user=np.array([user_id]), ts=np.array([clock + 1.0]), clock=np.array([clock]),
                 known=np.array([len(events)]), offsets=np.array([0, 1]), rows=np.array([0]),
                 rel=np.array([1.0]))
    got = replayed(items, pipeline.index, events, step, pipeline.bundle.ranker, s, s.feed_length)
    # then its list is, item by item, the feed the worker computes and stores for that user
    pipeline.recompute([user_id])
    assert got == pipeline.store.read(user_id).items.tolist() and len(got) > 100


def test_three_replayed_steps_are_the_feeds_a_worker_serves_before_each(world, settings, own_url, r):
    # given a catalogue of 40 items in 4 categories, a crowd whose taste moves from items 1-10 to items 11-20 over the
    # last day, and a user with history in category 0 before the cut
    s = dataclasses.replace(settings, database_url=own_url, item_table_max_age=60)
    items = [(i, [i % 4], float(i), NOW - 90 * DAY) for i in range(1, 41)]
    cut = NOW - 2 * DAY
    before = [(100 + k, 1 + k % 10, 1 + k % 4, cut - 5 * DAY + HOUR * k) for k in range(60)] \
        + [(7, i, 2, cut - DAY + i) for i in (4, 8, 12)]
    after = [(200 + k, 11 + k % 10, 4, cut + 600 * k) for k in range(200)]
    # and three steps of the user after the cut: a basket of two items, one click, a purchase
    user_steps = [[(7, 16, 4, cut + 3000.0), (7, 20, 4, cut + 3000.0)], [(7, 24, 2, cut + 50_000.0)],
                  [(7, 28, 4, cut + 90_000.0)]]
    engine = small_world(s, own_url, items, before)
    log = sorted(before + after + [e for step in user_steps for e in step], key=lambda e: e[3])
    events = EventLog(*(np.array(col, dtype=dt) for col, dt in zip(zip(*log), ("<i8", "<i8", "<i8", "<f8"))), None)
    pipeline = Pipeline(s, engine, r)
    model = None
    # when the log after the cut is posted in order, and a worker computes the user's feed when it is first asked
    # for (before the first step, with everything posted so far) and again right after each of the user's steps; its
    # item table reloads as the log's clock moves on, when the first event of a new moment is posted, and the feed
    # is read before each step
    served, posted = [], len(before)
    steps = find(events, load_item_table(engine, s, as_of=cut), cut, float("inf"), 10, users=np.array([7]))
    assert len(steps) == 3 and steps.clock.tolist() == sorted(steps.clock.tolist())
    ts = np.array([e[3] for e in log])
    computed_at = [int(steps.posted[0])] + [int(np.searchsorted(ts, t, side="right")) for t in steps.ts[:2]]
    # (the first step's basket shares its second with a crowd event that comes before it in the log, and is posted
    # before the feed is read)
    assert steps.posted[0] == steps.known[0] + 1
    assert steps.feed_known[1] < computed_at[1] and (steps.feed_known <= computed_at).all()

    def post(lo, hi):
        if hi > lo:
            record(engine, [NewEvent(*e) for e in log[lo:hi]], s)
    for k in range(3):
        post(posted, int(steps.feed_known[k]))
        pipeline.load()
        model = pipeline.bundle.ranker
        assert pipeline.items.as_of == steps.feed_clock[k] == ts[computed_at[k] - 1]
        table = load_item_table(engine, s, as_of=float(steps.feed_clock[k]))      # the replay's, of the same moment
        post(int(steps.feed_known[k]), computed_at[k])
        pipeline.recompute([7])
        post(computed_at[k], int(steps.posted[k]))
        posted = int(steps.posted[k])
        served.append(pipeline.store.read(7).items[:10].tolist())
        # then the replay of that step, through the evaluation's code with the table of its feed clock, lists the
        # same ten items in the same order
        index = pipeline.index
        assert replayed(table, index, events, steps.take(np.array([k])), model, s, 10) == served[k]
        # (while the crowd kept moving: the next steps' clocks are hours after their feed's)
        assert k == 0 or steps.clock[k] - steps.feed_clock[k] > HOUR
    # and what the user did moves the feed: an item of a step is never served after it
    assert 16 not in served[1] + served[2] and 24 not in served[2]
    engine.dispose()


def test_the_repeated_share_is_how_much_of_a_page_its_users_previous_page_held():
    # given steps in log order: user 1 three times, user 2 twice (the second time an empty page)
    users = np.array([1, 1, 2, 1, 2])
    pages = [np.array([1, 2]), np.array([2, 3]), np.array([5]), np.array([3, 4, 9, 2]), np.array([], dtype=np.int64)]
    # then user 1's second page repeats half of the first, the third half of the second; nothing else counts
    assert replay.repeat_share(users, pages) == pytest.approx(0.5)
    assert replay.repeat_share(np.array([1, 2]), [np.array([1]), np.array([1])]) == 0.0


def test_replay_reports_for_each_method_the_share_of_its_pages_repeated(world, pipeline):
    # given the world's log cut at 0.8 and the promoted model
    from precompute.ranking import source_index
    from precompute.learning.split import cut_time

    events = load_events(world.engine)
    cut = cut_time(events.ts, 0.8)
    items = load_item_table(world.engine, world.settings, as_of=cut)
    index = source_index.for_items(items, pipeline.bundle.sources.pairs())
    detail: dict = {}
    # when the replay protocol judges 60 users' next steps
    result = replay.judge_replay(items, index, events, cut, pipeline.bundle.ranker, world.settings, users=60, k=10,
                                 detail=detail)
    steps = detail["steps"]
    # then every method's repeated share is the mean, over steps after a user's first, of the share of the page
    # that user's page before it held (counted here pair by pair)
    by_user: dict[int, list[int]] = {}
    for s, u in enumerate(steps.user.tolist()):
        by_user.setdefault(u, []).append(s)
    assert any(len(v) > 1 for v in by_user.values())
    for method, m in result.methods.items():
        pages = detail["pages"][method]
        shares = [len(set(pages[b].tolist()) & set(pages[a].tolist())) / len(pages[b])
                  for ss in by_user.values() for a, b in zip(ss, ss[1:]) if len(pages[b])]
        assert all(len(p) <= 10 for p in pages)
        assert m["repeat_share"] == pytest.approx(np.mean(shares) if shares else 0.0), method
