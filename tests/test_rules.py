"""The page's rules one at a time, then their sequence (``precompute/feeds/rules.py``): each rule's function on
small lists, and ``apply`` keeping the order the module states (left out before boosts, boosts before diversity,
the page cut last) on generated lists."""

from hypothesis import given, settings as hsettings, strategies as st

from precompute.feeds.boosts import BoostRule, lift_boosts
from precompute.feeds.cursor import Scroll
from precompute.feeds.diversity import NONE, OFF, Diversity
from precompute.feeds.rules import Ask, Listed, apply, diversify, kept, seen_flags


def listed(ids, inactive=(), seen=(), complete=True):
    ids = list(ids)
    off = [i in set(inactive) for i in ids]
    return Listed(ids, [float(-k) for k in range(len(ids))], off, seen_flags(ids, off, set(seen)), complete)


class categories:
    """The items' counted categories as ``ItemCategories.of`` answers them, from a dict (no reload thread)."""

    def __init__(self, cat: dict[int, int]) -> None:
        self.cat = cat

    def of(self, ids) -> list[int]:
        return [self.cat.get(i, NONE) for i in ids]


def test_seen_flags_name_one_reason_per_item():
    # given items 2 and 3 seen, 3 also inactive
    flags = seen_flags([1, 2, 3], [False, False, True], {2, 3})
    # then only 2 is dropped as seen: 3 is dropped as inactive
    assert flags == [False, True, False]
    # and nothing seen flags nothing
    assert seen_flags([1, 2], [False, True], set()) == [False, False]


def test_kept_drops_inactive_seen_and_left_out_items_in_list_order():
    # given a list with an inactive item, a seen one, and two left out (one served by the scroll, one excluded)
    got = kept(listed(range(1, 9), inactive={2}, seen={5}), frozenset({3, 7}))
    # then the rest stay in their order, each with its own score
    assert got == ([1, 4, 6, 8], [0.0, -3.0, -5.0, -7.0])
    # and a list with nothing to drop is the list itself
    whole = listed([4, 5])
    assert kept(whole, frozenset()) == (whole.ids, whole.scores)


def test_ask_leaves_out_what_the_scroll_served_and_the_request_excludes():
    # given a scroll that served 1 and 2 over 2 slots, and a request excluding 9
    ask = Ask.of(5, 40, Scroll(7, (1, 2), 2, 0), frozenset({9}), Diversity(2, 10))
    # then the page leaves out all three, starts at the scroll's next slot (the offset ignored), and reads past the
    # page as far as the diversity rule looks
    assert ask.left_out == {1, 2, 9} and ask.offset == 0 and ask.need == 5
    assert ask.depth == 5 + Diversity(2, 10).past
    assert Ask.of(5, 40).need == 45 and Ask.of(5, 40).depth == 45


def test_diversify_spreads_the_categories_and_says_the_last_ones():
    # given six items, the first four of category 1, at most 1 of a category in 3 slots
    cat = {1: 1, 2: 1, 3: 1, 4: 1, 5: 2, 6: 3}
    items = [(i, 0.0, False) for i in range(1, 7)]
    served = diversify(items, Ask.of(4, diversity=Diversity(1, 3)), categories(cat))
    # then no two of a category share a window of 3, and the page carries its last two categories
    assert [i for i, _, _ in served.items] == [1, 5, 6, 2]
    assert served.recent == (3, 1)
    # and off, the list's first items, carrying nothing
    assert diversify(items, Ask.of(4), categories(cat)) == (items[:4], ())


def test_apply_never_lifts_a_left_out_boosted_item():
    # given a boosted item deep in the list, excluded by the request
    ask = Ask.of(5, exclude=frozenset({30}))
    served = apply(listed(range(1, 41)), ask, {30: 2.0}, BoostRule(4, 100), None)
    # then it is not on the page, and no slot went to a boost
    assert [i for i, _, _ in served.items] == [1, 2, 3, 4, 5]


def test_apply_answers_none_when_the_prefix_cannot_decide_the_page():
    # given a prefix of a list whose boost rule looks past it
    served = apply(listed(range(1, 11), complete=False), Ask.of(5), {}, BoostRule(4, 100), None)
    # then the rules ask for more of the list rather than guess
    assert served is None


lists = st.integers(0, 120).flatmap(lambda n: st.tuples(
    st.permutations(list(range(1, n + 1))),
    st.dictionaries(st.integers(1, max(n, 1)), st.sampled_from([0.5, 1.0, 2.0]), max_size=n // 4),   # boosts
    st.lists(st.sampled_from([NONE, 1, 1, 1, 2, 3]), min_size=n, max_size=n),                       # categories
    st.sets(st.integers(1, max(n, 1)), max_size=n // 4),                                            # inactive
    st.sets(st.integers(1, max(n, 1)), max_size=n // 4),                                            # seen
    st.sets(st.integers(1, max(n, 1)), max_size=n // 4),                                            # excluded
))


@hsettings(max_examples=150, deadline=None)
@given(lists, st.sampled_from([OFF, Diversity(1, 3), Diversity(2, 10)]), st.integers(1, 20), st.integers(0, 30))
def test_apply_is_the_rules_in_their_order_and_offset_pages_are_one_read(given_list, rule, limit, offset):
    ids, boosts, cat_list, inactive, seen, excluded = given_list
    cats = categories(dict(zip(ids, cat_list)))
    rules = BoostRule(3, 10)
    # when a page is asked from an offset
    ask = Ask.of(limit, offset, None, frozenset(excluded), rule)
    got = apply(listed(ids, inactive, seen), ask, boosts, rules, cats)
    # then it is: the list less inactive, seen and excluded items; boosts lifted; the categories spread; cut last
    left = [i for i in ids if i not in inactive and i not in seen and i not in excluded]
    lifted = lift_boosts(left, [0.0] * len(left), boosts, ask.depth, rules.every, rules.lookahead)
    whole = diversify(lifted, ask, cats)
    assert [i for i, _, _ in got.items] == [i for i, _, _ in whole.items][offset:]
    # and the same slots of one bigger page (the rules never read the page asked for)
    bigger = apply(listed(ids, inactive, seen), Ask.of(offset + limit + 7, 0, None, frozenset(excluded), rule),
                   boosts, rules, cats)
    assert got.items == bigger.items[offset:offset + limit]
