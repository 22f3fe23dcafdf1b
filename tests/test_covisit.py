"""Co-visitation pairs in bounded memory: the same result, bit for bit, as building every pair of the log at once
(the reference below is the earlier whole-log implementation), and pair strengths weighted by event type."""

import math

import numpy as np
import pytest

from precompute.ranking import covisit
from precompute.settings import Settings


def reference_build_pairs(ev_user, ev_item, ev_ts, window, gap, top_k):
    """The whole-log implementation: every pair of every lag concatenated, then one ``np.unique``."""
    order = np.lexsort((ev_ts, ev_user))
    u, ts = ev_user[order], ev_ts[order]
    item_ids, it = np.unique(ev_item[order].astype(np.int64), return_inverse=True)
    same_session = np.r_[False, (u[1:] == u[:-1]) & (np.diff(ts) < gap)]
    session = np.cumsum(~same_session)
    src, dst, w = [], [], []
    for lag in range(1, window + 1):
        ok = (session[lag:] == session[:-lag]) & (it[lag:] != it[:-lag])
        a, b = it[:-lag][ok], it[lag:][ok]
        src += [a, b]
        dst += [b, a]
        w.append(np.full(2 * len(a), 1.0 / lag))
    src_a, dst_a, w_a = np.concatenate(src), np.concatenate(dst), np.concatenate(w)
    span = len(item_ids)
    codes, inverse = np.unique(src_a * span + dst_a, return_inverse=True)
    weight = np.bincount(inverse, weights=w_a)
    s, d = item_ids[codes // span], item_ids[codes % span]
    keep_order = np.lexsort((d, -weight, s))
    s, d, weight = s[keep_order], d[keep_order], weight[keep_order]
    first = np.searchsorted(s, s, side="left")
    rank = np.arange(len(s)) - first
    keep = rank < top_k
    return {"src": s[keep], "dst": d[keep], "weight": weight[keep]}


def random_log(seed: int, n: int, users: int, items: int):
    rng = np.random.default_rng(seed)
    ev_user = rng.integers(1, users + 1, n).astype(np.int64) * 7919
    # few distinct items and whole-second timestamps with repeats: many equal weights (ties) and equal times
    ev_item = rng.integers(0, items, n).astype(np.int64) * 3 + 2 ** 62
    ev_ts = np.sort(rng.integers(0, n * 40, n)).astype(np.float64)
    return ev_user, ev_item, ev_ts


def assert_same(got, want):
    for key in ("src", "dst", "weight"):
        assert got[key].dtype == want[key].dtype, key
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("pairs_per_pass", [1, 37, 1000, covisit.PAIRS_PER_PASS])
def test_equals_the_whole_log_reference_on_random_logs(seed, pairs_per_pass):
    # given a random log with many ties, swept by source-item ranges of several sizes
    ev_user, ev_item, ev_ts = random_log(seed, n=3000, users=40, items=25 + 10 * seed)
    window, gap, top_k = 1 + seed % 5, 60.0 * (1 + seed), 3 + seed
    # then the neighbours, their order and their weights are exactly those of the whole-log reference
    got = covisit.build_pairs(ev_user, ev_item, ev_ts, window, gap, top_k, pairs_per_pass=pairs_per_pass)
    want = reference_build_pairs(ev_user, ev_item, ev_ts, window, gap, top_k)
    same_src = want["src"][1:] == want["src"][:-1]
    assert len(want["src"]) >= 75 and (same_src & (want["weight"][1:] == want["weight"][:-1])).any()   # ties
    assert_same(got, want)


def test_weights_ties_are_kept_and_broken_by_id():
    # given one session where b and c are each one place from a: equal weights
    ev_user = np.array([1, 1, 1, 2, 2], dtype=np.int64)
    ev_item = np.array([30, 10, 20, 10, 30], dtype=np.int64)
    ev_ts = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    got = covisit.build_pairs(ev_user, ev_item, ev_ts, 2, 100.0, 5, pairs_per_pass=1)
    assert_same(got, reference_build_pairs(ev_user, ev_item, ev_ts, 2, 100.0, 5))
    # then item 10's neighbours are 30 (1 + 1) before 20 (1); 30's are 10 (2) then 20 (1/2)
    pairs = list(zip(got["src"].tolist(), got["dst"].tolist(), got["weight"].tolist()))
    assert pairs == [(10, 30, 2.0), (10, 20, 1.0), (20, 10, 1.0), (20, 30, 0.5), (30, 10, 2.0), (30, 20, 0.5)]


def test_an_empty_log_has_no_pairs():
    empty = np.empty(0, dtype=np.int64)
    got = covisit.build_pairs(empty, empty, np.empty(0), 5, 1800.0, 50)
    assert all(len(got[k]) == 0 for k in ("src", "dst", "weight"))


def test_event_type_weights_scale_pair_strength():
    settings = Settings(event_types=(("view", 1.0), ("click", 2.0), ("contact", 4.0), ("purchase", 6.0)))
    # given a session: a view of 1, a purchase of 2, a click of 3
    ev_user = np.array([5, 5, 5], dtype=np.int64)
    ev_item = np.array([1, 2, 3], dtype=np.int64)
    ev_ts = np.array([10.0, 20.0, 30.0])
    ev_type = np.array([1, 4, 2], dtype=np.int16)
    got = covisit.build_pairs(ev_user, ev_item, ev_ts, 5, 1800.0, 10, covisit.event_factors(ev_type, settings))
    weight = {(s, d): w for s, d, w in zip(got["src"].tolist(), got["dst"].tolist(), got["weight"].tolist())}
    # then each pair counts 1/distance times the geometric mean of its two types' weights over a view's
    assert weight[(1, 2)] == pytest.approx(math.sqrt(1 * 6))
    assert weight[(2, 3)] == pytest.approx(math.sqrt(6 * 2))
    assert weight[(1, 3)] == pytest.approx(math.sqrt(1 * 2) / 2)
    assert weight[(2, 1)] == weight[(1, 2)]
    # and the strongest neighbour of 3 is the purchased item
    assert got["dst"][got["src"] == 3][0] == 2


def test_an_event_type_no_longer_declared_weighs_nothing():
    # given events of code 5 while only two types are declared
    settings = Settings(event_types=(("view", 1.0), ("buy", 4.0)))
    # then their factor is 0, as every other reader of type codes weighs them, instead of an IndexError
    assert covisit.event_factors(np.array([1, 2, 5], dtype=np.int16), settings).tolist() == [1.0, 2.0, 0.0]


@pytest.mark.parametrize("seed", range(3))
def test_an_all_views_log_weighs_as_unweighted_and_ranges_do_not_change_weights(seed):
    settings = Settings()
    ev_user, ev_item, ev_ts = random_log(seed, n=2000, users=30, items=40)
    views = covisit.event_factors(np.ones(len(ev_user), dtype=np.int16), settings)
    # given only views: exactly today's unweighted numbers
    assert_same(covisit.build_pairs(ev_user, ev_item, ev_ts, 5, 300.0, 8, views),
                reference_build_pairs(ev_user, ev_item, ev_ts, 5, 300.0, 8))
    # given mixed types: the same pairs and weights however the source items are split into ranges
    mixed = covisit.event_factors(np.random.default_rng(seed).integers(1, 5, len(ev_user)), settings)
    whole = covisit.build_pairs(ev_user, ev_item, ev_ts, 5, 300.0, 8, mixed)
    assert_same(covisit.build_pairs(ev_user, ev_item, ev_ts, 5, 300.0, 8, mixed, pairs_per_pass=50), whole)
    assert not np.array_equal(whole["weight"], reference_build_pairs(ev_user, ev_item, ev_ts, 5, 300.0, 8)["weight"])
