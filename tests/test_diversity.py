"""The diversity rule on every page: ``spread`` against a plain statement of the rule, then pages of 1, 7, 20 and
100 and whole scrolls put together by the page's rules (``rules.apply``), boosts included."""

from hypothesis import given, settings as hsettings, strategies as st

from precompute.feeds.boosts import BoostRule, lift_boosts
from precompute.feeds.cursor import Scroll
from precompute.feeds.diversity import DEPTH, NONE, Diversity, categories_after, spread
from precompute.feeds.rules import Ask, Listed, apply


def reference(cats, boosted, need, rule, recent=()):
    """The rule as the module states it, slot by slot, counting each window from scratch: the places taken, and
    whether each slot was relaxed (no item of the next DEPTH fitted)."""
    left, out, relaxed, served = list(range(len(cats))), [], [], list(recent)
    while len(out) < need and left:
        before = served[max(0, len(served) - (rule.window - 1)):]

        def fits(j):
            c = cats[left[j]]
            return (c == NONE or before.count(c) < rule.most) and (j == 0 or not boosted[left[j]])

        found = [j for j in range(min(DEPTH, len(left))) if fits(j)]
        j = found[0] if found else 0
        relaxed.append(not found)
        out.append(left.pop(j))
        served.append(cats[out[-1]])
    return out, relaxed


def windows_hold(cats_served, relaxed, rule, recent=()):
    """Every window of W slots ending at a slot the rule placed without relaxing holds at most K of each
    category."""
    full = [*recent, *cats_served]
    for s, c in enumerate(cats_served):
        if relaxed[s] or c == NONE:
            continue
        end = len(recent) + s
        if full[max(0, end - rule.window + 1):end + 1].count(c) > rule.most:
            return False
    return True


rules = st.sampled_from([Diversity(1, 2), Diversity(1, 5), Diversity(2, 10), Diversity(3, 10), Diversity(2, 3),
                         Diversity(1, 50)])
lists = st.integers(0, 160).flatmap(lambda n: st.tuples(
    st.lists(st.sampled_from([NONE, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]), min_size=n, max_size=n),
    st.lists(st.booleans(), min_size=n, max_size=n),
    st.lists(st.integers(1, 4), max_size=49),               # the categories of the slots before
))


@hsettings(max_examples=200, deadline=None)
@given(lists, rules, st.sampled_from([1, 7, 20, 100]), st.integers(1, 4))
def test_spread_is_the_rule_on_every_page_size(given_list, rule, need, skew):
    # given a list (categories skewed towards the first ones), its boosted items and the categories served before
    cats, boosted, recent = given_list
    cats = [c if c == NONE else (c - 1) // skew + 1 for c in cats]
    # when the rule places `need` slots
    got = spread(cats, boosted, need, rule, recent)
    want, relaxed = reference(cats, boosted, need, rule, recent)
    # then it places them as the plain statement does, never fewer than the list offers, and the windows hold
    assert got == want
    assert len(got) == min(need, len(cats))
    assert windows_hold([cats[p] for p in got], relaxed, rule, recent)
    # and a boosted item is never placed above an item before it in the list
    assert all(not boosted[p] or all(q in got[:s] for q in range(p)) for s, p in enumerate(got))


few_categories = st.integers(0, 250).flatmap(lambda n: st.tuples(
    st.lists(st.sampled_from([1] * 12 + [2] * 3 + [3, NONE]), min_size=n, max_size=n),
    st.lists(st.sampled_from([False] * 4 + [True]), min_size=n, max_size=n),
    st.lists(st.sampled_from([1, 2, 3, NONE]), max_size=49),
))


@hsettings(max_examples=300, deadline=None)
@given(few_categories, rules, st.integers(1, 200))
def test_spread_is_the_rule_when_one_category_crowds_the_list(given_list, rule, need):
    # given a list mostly of one category (so most slots pass items over, and many look the whole DEPTH down before
    # relaxing), with boosted items among them, and the categories served before
    cats, boosted, recent = given_list
    # then the rule places every slot as the plain statement does
    assert spread(cats, boosted, need, rule, recent) == reference(cats, boosted, need, rule, recent)[0]


def test_an_item_fits_only_within_depth_of_the_first_left():
    # given one item of category 2 after a run of category 1, and at most 1 of a category in 2 slots
    for gap in (DEPTH - 1, DEPTH):
        cats = [1] * (gap + 1) + [2]
        got = spread(cats, [False] * len(cats), 2, Diversity(1, 2))
        # then slot 2 takes it when it is among the first DEPTH items left (DEPTH - 1 below the first), else the
        # rule relaxes to the list's order
        assert got == ([0, gap + 1] if gap < DEPTH else [0, 1]), gap


def test_items_taken_ahead_do_not_count_in_the_depth():
    # given at most 1 of a category in 2 slots, a run of category 1 with ten items of category 2 inside it, and one
    # more item of category 2 far below: once the ten are taken ahead of the run, the first item left is 11, and the
    # last item of 2 is 59 places below it but only 49 items left below it (the ten were taken)
    for far, taken in ((70, True), (71, False)):
        cats = [1] * 20 + [2] * 10 + [1] * (far - 30) + [2]
        got = spread(cats, [False] * len(cats), 23, Diversity(1, 2))
        # then slot 21 takes it when it is among the first DEPTH items left, else relaxes to the first item left
        assert got[20] == 10 and got[21] == (far if taken else 11), (far, got)
        assert got == reference(cats, [False] * len(cats), 23, Diversity(1, 2))[0]


def test_a_boosted_item_of_a_full_category_lets_the_one_category_left_pass():
    # given at most 1 of a category in 2 slots, and after the first item a boosted item of the same category, then
    # items of one other category only
    cats, boosted = [1, 1, 2, 2], [False, True, False, False]
    # then the boosted item waits a slot for the other category's first item (the items left are not taken in
    # their order just because one category is left besides the boosted item)
    assert spread(cats, boosted, 4, Diversity(1, 2)) == [0, 2, 1, 3]
    assert reference(cats, boosted, 4, Diversity(1, 2))[0] == [0, 2, 1, 3]


def test_a_page_whose_own_order_breaks_the_rule_is_spread_from_that_slot():
    # given lists that keep the rule in their own order up to one slot: the last of the page, or the first (the
    # categories the scroll served before fill its window), and another category below
    rule = Diversity(3, 10)
    for cats, recent, need, want in (([1, 1, 1, 1, 2], (), 4, [0, 1, 2, 4]),
                                     ([1, 2, 1, 1], (1, 1, 1), 3, [1, 0, 2]),
                                     ([1, 1, 1, 1, 1], (2,) * 9, 5, [0, 1, 2, 3, 4])):
        # then the rule takes the list's order while it fits and spreads from the first slot it does not
        assert spread(cats, [False] * len(cats), need, rule, recent) == want, (cats, recent)
        assert want == reference(cats, [False] * len(cats), need, rule, recent)[0]


def test_one_category_relaxes_to_the_list_order():
    # given a catalogue of one category, the rule at most 1 in 5
    cats = [7] * 30
    # then the page is the list as it was: full, not empty, not stalled
    assert spread(cats, [False] * 30, 20, Diversity(1, 5)) == list(range(20))


def test_an_item_passed_over_waits_at_most_w_minus_one_slots():
    # given ten items of category 1 ahead of ten of category 2, and at most 1 of a category in 2 slots
    cats = [1] * 10 + [2] * 10
    got = spread(cats, [False] * 20, 20, Diversity(1, 2))
    # then the categories alternate while both last, and the first item of 1 comes first
    assert [cats[p] for p in got[:6]] == [1, 2, 1, 2, 1, 2]
    assert got[0] == 0


def test_off_is_the_list_order():
    assert spread([1, 1, 1], [False] * 3, 2, Diversity(0, 10)) == [0, 1]


class _Categories:
    """The items' counted categories as ``ItemCategories.of`` answers them, from a dict."""

    def __init__(self, cats):
        self.cats = cats

    def of(self, ids):
        return [self.cats[i] for i in ids]


def _page(ids, cats, weights, served, need, every, lookahead, scroll, recent, rule):
    """One page of a scroll as every page is made (``rules.apply``): the feed less the items served, the boost rule,
    then the diversity rule over the first ``need + DEPTH - 1`` items of its list."""
    ask = Ask.of(need, 0, Scroll(1, tuple(sorted(served)), scroll[0], scroll[1], recent), frozenset(), rule)
    listed = Listed(list(ids), [0.0] * len(ids), [False] * len(ids), [False] * len(ids), True)
    return apply(listed, ask, weights, BoostRule(every, lookahead), _Categories(cats)).items


feeds = st.integers(0, 260).flatmap(lambda n: st.tuples(
    st.permutations(list(range(1, n + 1))),
    st.dictionaries(st.integers(1, max(n, 1)), st.sampled_from([0.5, 1.0, 2.0, 10.0]), max_size=n // 3),
    st.lists(st.sampled_from([NONE, 1, 1, 1, 1, 2, 2, 3, 4, 5]), min_size=n, max_size=n),
    st.lists(st.sampled_from([1, 7, 20, 100]), min_size=1, max_size=6),       # page sizes of the scroll
    st.sampled_from([2, 4]),                                                  # boost_every
    st.sampled_from([0, 10, 100]),                                            # boost_lookahead
))


@hsettings(max_examples=100, deadline=None)
@given(feeds, rules)
def test_a_scroll_keeps_the_rule_and_the_boost_cap_across_pages(feed, rule):
    # given a feed with boosted items and categories, scrolled with pages of 1, 7, 20 and 100
    ids, weights, cat_list, sizes, every, lookahead = feed
    cats = dict(zip(ids, cat_list))
    served, slots, boosted_n, recent, scroll = set(), 0, 0, (), []
    relaxed = []
    for need in sizes:
        # when each page is assembled from the feed less what the scroll served, knowing the last W-1 categories
        page = _page(ids, cats, weights, served, need, every, lookahead, (slots, boosted_n), recent, rule)
        kept = [i for i in ids if i not in served]
        lifted = lift_boosts(kept, [0.0] * len(kept), weights, need + DEPTH - 1, every, lookahead, start=slots,
                             boosted_before=boosted_n)
        relaxed += reference([cats[i] for i, _, _ in lifted], [b for _, _, b in lifted], need, rule, recent)[1]
        scroll += page
        served |= {i for i, _, _ in page}
        slots += len(page)
        boosted_n += sum(b for _, _, b in page)
        recent = categories_after(recent, [cats[i] for i, _, _ in page], rule)
        assert len(recent) <= max(rule.window - 1, 0)            # the cursor's load stays bounded
        if len(page) < need:
            break
    # then no item comes twice, the windows hold across the pages, and the boost cap holds from the top
    got = [i for i, _, _ in scroll]
    assert len(got) == len(set(got))
    assert windows_hold([cats[i] for i in got], relaxed, rule)
    flags = [b for _, _, b in scroll]
    assert all(sum(flags[:n]) <= (n - 1) // every + 1 for n in range(1, len(flags) + 1))
    # and the scroll ends only when the feed's boost rule has nothing more to give
    if len(scroll) < sum(sizes):
        kept = [i for i in ids if i not in served]
        assert not lift_boosts(kept, [0.0] * len(kept), weights, 1, every, lookahead, start=slots,
                               boosted_before=boosted_n)


# -- the served path: GET /feed with ?diversity=, on a page and across a scroll, against real servers --------------

import dataclasses  # noqa: E402

import pytest  # noqa: E402

import random  # noqa: E402

import numpy as np  # noqa: E402

from api import create_app  # noqa: E402
from precompute.feeds import categories  # noqa: E402
from precompute.feeds.categories import ItemCategories  # noqa: E402
from precompute.feeds.codec import encode  # noqa: E402
from precompute.feeds.keys import Keys  # noqa: E402
from api.services import services  # noqa: E402
from precompute.data import catalog  # noqa: E402
from tests.conftest import with_key  # noqa: E402


@pytest.fixture
def diverse_app(settings, world):
    app = create_app(dataclasses.replace(settings, live_refresh_ms=0), {"TESTING": True})
    yield app, with_key(app.test_client(), world.key)
    services(app).engine.dispose()


def test_a_scroll_served_with_diversity_keeps_every_window(diverse_app, r, settings, own_users):
    # given a user's stored feed of 300 items, one category in its top items far more often than 2 in 10 (but not
    # more than the feed can spread), and the API's copy of the categories
    app, client = diverse_app
    uid = own_users(1)[0]
    ids = list(range(10**12, 10**12 + 300))
    rng = random.Random(5)
    cat = {i: rng.choice([1, 1, 2, 3, 4, 5, 6, 7, 8, 9, NONE]) if k >= 30 else 1 for k, i in enumerate(ids)}
    r.set(Keys(settings.key_prefix).feed(uid), encode(np.array(ids, dtype=np.int64),
                                                      np.linspace(1, 0, len(ids), dtype=np.float32), 1, 0.0, 1))
    known = sorted(i for i in ids if cat[i] != NONE)
    services(app).pages.categories = ItemCategories(
        lambda: (np.array(known, dtype=np.int64), np.array([cat[i] for i in known], dtype=np.int64)), 60)
    # when it is scrolled in pages of 7 with at most 2 of a category in any 10 slots
    body = client.get(f"/feed/{uid}?limit=7&diversity=2/10").get_json()
    served = list(body["items"])
    for _ in range(11):
        body = client.get(f"/feed/{uid}?limit=7&diversity=2/10&cursor={body['next_cursor']}").get_json()
        served += body["items"]
    # then every window of 10 slots, across the pages, holds at most 2 of each category, and nothing comes twice
    got = [i["item_id"] for i in served]
    cats = [cat[i] for i in got]
    assert len(got) == 84 and len(set(got)) == 84
    for end in range(len(cats)):
        window = cats[max(0, end - 9):end + 1]
        assert cats[end] == NONE or window.count(cats[end]) <= 2, (end, window)
    # and the scroll is the rule applied to the whole feed at once (a page of 84)
    whole = client.get(f"/feed/{uid}?limit=84&diversity=2/10").get_json()["items"]
    assert [i["item_id"] for i in whole] == got
    # and `off` serves the feed's own order
    assert [i["item_id"] for i in client.get(f"/feed/{uid}?limit=84&diversity=off").get_json()["items"]] == ids[:84]


def test_a_copy_of_the_categories_answers_each_item_and_none_for_others():
    # given a copy of five items' categories, the last of them the largest id but one
    copy = ItemCategories(lambda: (np.array([3, 5, 8, 13, 2**63 - 2], dtype=np.int64),
                                   np.array([7, 1, 7, 4, 9], dtype=np.int64)), 3600)
    # then each known item has its category, and an item not in the copy (below, between, above them all, the
    # largest id) has none, in the order asked
    assert (copy.of([13, 1, 5, 6, 2**63 - 2, 2**63 - 1, 3, 100, 8])
            == [4, NONE, 1, NONE, 9, NONE, 7, NONE, 7])
    assert copy.of([]) == []


def test_items_looked_up_again_answer_the_copy_they_were_looked_up_in():
    # given a copy of two items' categories, each looked up once (so kept beside the copy)
    rows = {"known": [3, 5], "cats": [7, 1]}
    copy = ItemCategories(lambda: (np.array(rows["known"], dtype=np.int64), np.array(rows["cats"], dtype=np.int64)),
                          3600)
    assert copy.of([3, 5, 4]) == [7, 1, NONE]
    # when the database says item 3 is now of category 2 and item 4 of 9, and the copy is reloaded
    rows.update(known=[3, 4, 5], cats=[2, 9, 1])
    copy.reload()
    # then the items looked up before answer the new copy, looked up again or not
    assert copy.of([4, 3, 5]) == [9, 2, 1]
    assert copy.of([3, 4]) == [2, 9]


def test_items_looked_up_past_the_bound_start_the_kept_ones_again(monkeypatch):
    # given at most 4 items kept looked up
    monkeypatch.setattr(categories, "LOOKED_MAX", 4)
    copy = ItemCategories(lambda: (np.arange(1, 11, dtype=np.int64), np.arange(101, 111, dtype=np.int64)), 3600)
    # when more are looked up than that, in several pages
    for ids in ([1, 2, 3], [4, 5], [6, 7, 8, 9, 10], [2, 9]):
        # then each answer is the copy's, and the items kept never pass the bound
        assert copy.of(ids) == [100 + i for i in ids]
        assert len(copy.held.looked) <= 4


def test_the_counted_category_is_the_lowest(world):
    # given the catalogue's memberships, then each item counts in its lowest category id
    known, counted = catalog.counted_categories(world.engine)
    with world.engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT item_id, category FROM item_categories").all()
    lowest = {}
    for item, c in rows:
        lowest[item] = min(c, lowest.get(item, c))
    assert dict(zip(known.tolist(), counted.tolist())) == lowest
    assert list(known) == sorted(lowest)


@pytest.mark.parametrize("bad", ["", "2", "2/", "/10", "0/10", "10/10", "11/10", "2/51", "a/b", "2/10/3", "-1/5",
                                 "on", "2 /10"])
def test_a_bad_diversity_is_a_400(diverse_app, bad):
    _, client = diverse_app
    resp = client.get(f"/feed/1?diversity={bad}")
    assert resp.status_code == 400 and "diversity" in resp.get_json()["error"]


def test_evaluate_counts_the_category_the_page_counts(world, settings):
    # given the item table evaluate ranks with, and the serving copy's source
    from precompute.learning.diversity_cost import counted_categories
    from precompute.ranking.item_loader import load_item_table

    items = load_item_table(world.engine, settings)
    known, counted = catalog.counted_categories(world.engine)
    serving = dict(zip(known.tolist(), counted.tolist()))
    # then each item's counted category is the same in both (none where the item has none)
    assert dict(zip(items.ids.tolist(), counted_categories(items).tolist())) == \
        {i: serving.get(i, NONE) for i in items.ids.tolist()}
