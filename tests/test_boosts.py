"""The boost rule on every page: the served path (the page read, live drops, re-reads, the rule) against a plain
statement of the rule, for generated feeds, boosts, weights, drops, page sizes and rule settings."""

import dataclasses
import time

import numpy as np
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from precompute.feeds.codec import encode
from precompute.feeds import item_states
from precompute.feeds.item_states import ItemStates, ItemStatesCopy
from precompute.feeds.keys import Keys
from precompute.feeds.page import PageReader

USER = 77
VERSION = 10


def reference(ids, weights, every: int, lookahead: int) -> list[tuple[int, bool]]:
    """The rule as docs/architecture.md states it, slot by slot, with plain lists."""
    organic = [p for p in range(len(ids)) if weights[p] <= 0]
    boosted = [p for p in range(len(ids)) if weights[p] > 0]
    out, n_boosted = [], 0
    while True:
        s = len(out)
        horizon = s + lookahead if organic else len(ids)
        waiting = [p for p in boosted if p <= horizon]
        if waiting and n_boosted < s // every + 1:
            p = min(waiting, key=lambda q: (-weights[q], q))
            boosted.remove(p)
            out.append((int(ids[p]), True))
            n_boosted += 1
        elif organic:
            out.append((int(ids[organic.pop(0)]), False))
        else:
            return out


def _store(r, keys: Keys, ids, boosts: dict[int, float], inactive: set[int], seen: set[int]) -> None:
    r.delete(keys.feed(USER), keys.seen_recent(USER), keys.live_seq, keys.live_epoch, keys.live_inactive,
             keys.live_reactivated, keys.live_boosts)
    scores = np.linspace(1.0, 0.0, len(ids), dtype=np.float32)
    r.set(keys.feed(USER), encode(np.asarray(ids, dtype=np.int64), scores, VERSION, 0.0, 1))
    states = ItemStates(r, keys)
    for item, weight in boosts.items():
        states.boost(item, weight, time.time() + 60)
    states.set_active(dict.fromkeys(inactive, False))
    if seen:
        r.zadd(keys.seen_recent(USER), {str(i): VERSION + 1 for i in seen})
    # items seen before the feed was computed (at its version or earlier) are not dropped: the feed accounted them
    before = {i: VERSION - i % 2 for i in ids if i % 3 == 0 and i not in seen}
    if before:
        r.zadd(keys.seen_recent(USER), {str(i): v for i, v in before.items()})


def _pages(pages: PageReader, size: int, until: int) -> list[tuple[int, bool]]:
    out = []
    for offset in range(0, until, size):
        page = pages.page(USER, size, offset)
        out += [(i, b) for i, _, b in page.items]
        if len(page.items) < size:
            break
    return out


def _check(r, settings, ids, boosts, inactive, seen, size, every, lookahead) -> None:
    rule = dataclasses.replace(settings, boost_every=every, boost_lookahead=lookahead)
    keys = Keys(settings.key_prefix)
    _store(r, keys, ids, boosts, inactive, seen)
    pages = PageReader(r, rule)
    kept = [i for i in ids if i not in inactive and i not in seen]
    want = reference(kept, [boosts.get(i, 0.0) for i in kept], every, lookahead)
    # (b) pages of `size` read one after another are exactly the rule's list, as is one big read
    paged = _pages(pages, size, len(ids) + size)
    assert paged == want
    assert [(i, b) for i, _, b in pages.page(USER, max(len(ids), 1), 0).items] == want
    # (a) every prefix of length n holds at most n // every + 1 boosted items
    flags = np.cumsum([b for _, b in paged])
    assert all(flags[n - 1] <= n // every + 1 for n in range(1, len(paged) + 1))
    # (c) boosted items are items of the feed, shown once, each still boosted
    assert {i for i, b in paged if b} <= set(boosts) & set(kept)
    assert len({i for i, _ in paged}) == len(paged)


feeds = st.integers(0, 70).flatmap(lambda n: st.tuples(
    st.permutations(list(range(1, n + 1))),
    st.dictionaries(st.integers(1, max(n, 1)), st.sampled_from([0.5, 1.0, 1.0, 2.0, 10.0]), max_size=n),
    st.sets(st.integers(1, max(n, 1)), max_size=n),        # inactive
    st.sets(st.integers(1, max(n, 1)), max_size=n // 2),   # seen since the feed was computed
    st.integers(1, 12),                                    # page size
    st.sampled_from([1, 2, 3, 4]),                         # boost_every
    st.sampled_from([0, 1, 3, 10, 100]),                   # boost_lookahead
))


def test_pages_keep_the_boost_rule_for_generated_feeds(r, settings):
    @hsettings(max_examples=1500, deadline=None, database=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(feeds)
    def check(case):
        ids, boosts, inactive, seen, size, every, lookahead = case
        boosts = {i: w for i, w in boosts.items() if i <= len(ids)}
        _check(r, settings, ids, boosts, inactive, seen, size, every, lookahead)

    check()


def test_boosts_at_50_and_130_keep_pages_consistent(r, settings):
    # given the case that broke pages: boosts at organic positions 50 (weight 1) and 130 (weight 10)
    ids = list(range(1, 301))
    _check(r, settings, ids, {ids[50]: 1.0, ids[130]: 10.0}, set(), set(), 20, 4, 100)


def test_the_tail_keeps_the_density_cap(r, settings):
    # given a feed that is mostly boosted items: the organic ones run out first
    ids = list(range(1, 7))
    boosts = {1: 1.0, 4: 1.0, 5: 1.0, 6: 1.0}
    _check(r, settings, ids, boosts, set(), set(), 3, 4, 100)
    page = PageReader(r, settings).page(USER, 6, 0)
    # then the list ends where no organic item is left to keep the next boosted item within one in four
    assert [(i, b) for i, _, b in page.items] == [(1, True), (2, False), (3, False)]


def test_the_served_path_reads_further_when_many_items_were_dropped(r, settings):
    # given a long feed whose first 300 items are all inactive, with a boost below them
    ids = list(range(1, 1001))
    _check(r, settings, ids, {ids[400]: 3.0}, set(ids[:300]), set(ids[300:320]), 10, 4, 100)


def test_boosts_are_in_force_until_they_expire_whichever_way_the_clock_moves(r, settings):
    # given two boosts ending at t0 + 10 s and t0 + 20 s, in a process's copy of the item states
    keys = Keys(settings.key_prefix)
    t0 = time.time()
    state = ItemStates(r, keys)
    state.boost(1, 2.0, t0 + 10)
    state.boost(2, 3.0, t0 + 20)
    view = ItemStatesCopy(r, keys, 250)
    view.refresh(force=True)
    # then at each instant exactly the boosts not yet ended are in force, also when the clock goes back
    for at, expected in [(0, {1: 2.0, 2: 3.0}), (15, {2: 3.0}), (10, {2: 3.0}), (9.9, {1: 2.0, 2: 3.0}),
                         (25, {}), (20, {}), (12, {2: 3.0}), (5, {1: 2.0, 2: 3.0})]:
        assert view.boosts_in_force(t0 + at) == expected, at
        assert view.weights([1, 2, 3], t0 + at) == [expected.get(1, 0.0), expected.get(2, 0.0), 0.0]


def test_a_reader_past_the_set_size_drops_the_same_items(r, settings, monkeypatch):
    # given more inactive items than a reader holds as a set: it looks them up in its sorted array alone
    monkeypatch.setattr(item_states, "SET_MAX", 10)
    ids = list(range(1, 1001))
    # then the pages are the rule's, as with the set
    _check(r, settings, ids, {ids[400]: 3.0}, set(ids[:300]) | set(ids[500:520]), set(ids[300:320]), 10, 4, 100)
