"""Ranking on the general data model: items in several categories with sparse 64-bit category ids, declared
attributes as named feature columns, declared event types whose weights order popularity, and items without a
price or creation time. Small worlds built in a database of each test's own."""

import dataclasses
import time

import numpy as np
import pytest
from sqlalchemy import insert, update

from api import create_app
from api.services import services
from precompute.data import bulk, catalog, engine as db, synthetic
from precompute.data.history import histories_from_arrays
from precompute.data.tables import Event, Item, ItemAttribute, ItemCategory, User
from precompute.learning.fit import fit_ranker
from precompute.ranking import bundle, candidates, features, scoring
from precompute.ranking.source_index import for_items
from precompute.ranking.item_loader import load_item_table
from precompute.pipeline.pipeline import Pipeline
from tests.conftest import own_database, with_key

BIG = 2**62 + 5                     # a category id near 2**62
NOW = 1.8e9
NO_PAIRS = {k: np.empty(0, dtype=np.int64 if k != "weight" else np.float64) for k in ("src", "dst", "weight")}


@pytest.fixture
def own_url(tmp_path_factory):
    yield from own_database(tmp_path_factory, "catalogue")


def small_world(settings, url, items, events, attributes=()):
    """A database holding ``items`` ``(id, categories, price, created_at)``, ``attributes`` ``(id, name, value)``
    and ``events`` ``(user, item, type code, ts)``; returns its engine."""
    engine = db.make_engine(url)
    db.init_db(engine, settings)
    with engine.begin() as conn:
        conn.execute(insert(Item), [dict(id=i, price=p, created_at=c, active=True) for i, _, p, c in items])
        pairs = [dict(item_id=i, category=c) for i, cats, _, _ in items for c in cats]
        if pairs:
            conn.execute(insert(ItemCategory), pairs)
        if attributes:
            conn.execute(insert(ItemAttribute), [dict(item_id=i, name=n, value=v) for i, n, v in attributes])
        conn.execute(insert(User), [dict(id=u, history_version=1) for u in sorted({e[0] for e in events})])
        conn.execute(insert(Event), [dict(user_id=u, item_id=i, type=t, ts=ts) for u, i, t, ts in events])
    return engine


def batch(items, settings, events, users):
    """Histories and candidates of ``users`` from an in-memory log (no co-visitation pairs)."""
    ev = [np.array(col) for col in zip(*events)]
    hist = histories_from_arrays(np.array(users), ev[0], ev[1], ev[2], ev[3].astype(float), items, settings,
                                 clock=NOW)
    return hist, candidates.for_batch(items, for_items(items, NO_PAIRS), hist, settings)


def test_an_item_in_two_categories_is_on_both_lists_and_a_candidate_through_either(settings, own_url):
    # given item 1 listed in categories 10 and BIG, items 2-3 in 10 only, 4-5 in BIG only, and item 6 in none,
    # globally the most popular; item 1 is the most popular of either category
    s = dataclasses.replace(settings, database_url=own_url, global_popular=1, category_popular=2,
                            recent_popular_1h=0, recent_popular_1d=0)
    items = [(1, [10, BIG], 5.0, NOW), (2, [10], 5.0, NOW), (3, [10], 5.0, NOW), (4, [BIG], 5.0, NOW),
             (5, [BIG], 5.0, NOW), (6, [], 5.0, NOW)]
    crowd = [(900, 6, 1, NOW - 10)] * 9 + [(900, 1, 1, NOW - 10)] * 5 + [(900, i, 1, NOW - 10) for i in (2, 3, 4, 5)]
    # and user 1 whose only interest is category 10 (item 3), user 2 whose only one is BIG (item 5), user 3 with both
    events = crowd + [(1, 3, 1, NOW - 5), (2, 5, 1, NOW - 5), (3, 3, 1, NOW - 5), (3, 5, 1, NOW - 5)]
    engine = small_world(s, own_url, items, events)
    table = load_item_table(engine, s)
    # then item 1 heads both categories' popular lists, which use the real ids only as names
    lists = {int(c): table.ids[rows].tolist() for c, rows in zip(table.category_ids, table.category_popular)}
    assert lists == {10: [1, 3], BIG: [1, 5]}, lists
    assert table.n_categories == 2
    # and it is a category candidate of each user, once each
    hist, cand = batch(table, s, events, [1, 2, 3])
    for k in range(3):
        got = dict(zip(table.ids[cand.rows[cand.offsets[k]:cand.offsets[k + 1]]].tolist(),
                       cand.flags[cand.offsets[k]:cand.offsets[k + 1]].tolist()))
        assert len(got) == cand.offsets[k + 1] - cand.offsets[k]
        assert got[1] == candidates.FROM_CATEGORY, k
        assert got[6] == candidates.FROM_GLOBAL
    # and its user x category features describe its strongest category for each user: rank 0 for both
    X = features.build(table, hist, cand, NOW)
    rank = X[:, table.layout.index("ux_category_rank")]
    assert rank[cand.rows == table.rows(np.array([1]))[0]].tolist() == [0, 0, 0]
    # while item 6, without categories, has no category features at all
    assert np.isnan(rank[cand.rows == table.rows(np.array([6]))[0]]).all()
    engine.dispose()


def test_declared_attributes_are_named_columns_with_nan_for_missing_values(settings, own_url):
    # given two declared attributes, item 1 with both, item 2 with one, item 3 with none (and an undeclared one)
    s = dataclasses.replace(settings, database_url=own_url, item_attributes=("size", "rating"))
    items = [(i, [1], 5.0, NOW) for i in (1, 2, 3)]
    attributes = [(1, "size", 3.5), (1, "rating", 4.0), (2, "rating", 2.0), (3, "colour", 9.0)]
    events = [(7, i, 1, NOW - 10) for i in (1, 2, 3)]
    engine = small_world(s, own_url, items, events, attributes)
    table = load_item_table(engine, s)
    # then the layout has one column per declared name, in the declared order, and none for the generator's
    names = table.layout.names
    assert [n for n in names if n.startswith("item_attr_")] == ["item_attr_size", "item_attr_rating"]
    # and each item's values land in them by name, NaN where it has none
    hist, cand = batch(table, s, [(8, 999, 1, NOW - 5)], [8])      # (an item the catalogue lacks)
    X = features.build(table, hist, cand, NOW)
    by_id = dict(zip(table.ids[cand.rows].tolist(), range(len(cand.rows))))
    size = X[:, names.index("item_attr_size")]
    rating = X[:, names.index("item_attr_rating")]
    assert size[by_id[1]] == 3.5 and rating[by_id[1]] == 4.0
    assert np.isnan(size[by_id[2]]) and rating[by_id[2]] == 2.0
    assert np.isnan(size[by_id[3]]) and np.isnan(rating[by_id[3]])
    engine.dispose()


@pytest.mark.parametrize("weights,order", [((1.0, 5.0, 20.0), [3, 1, 2]), ((1.0, 7.0, 1.0), [2, 1, 3])])
def test_declared_event_types_order_popularity_by_their_weights(settings, own_url, weights, order):
    # given three declared types and item 1 played 12 times, item 2 liked twice, item 3 shared once
    s = dataclasses.replace(settings, database_url=own_url,
                            event_types=tuple(zip(("play", "like", "share"), weights)))
    items = [(i, [1], 5.0, NOW) for i in (1, 2, 3)]
    events = [(7, 1, 1, NOW - 10)] * 12 + [(7, 2, 2, NOW - 10)] * 2 + [(7, 3, 3, NOW - 10)]
    engine = small_world(s, own_url, items, events)
    table = load_item_table(engine, s)
    # then popularity (rows, the popular lists) follows the weights: 20 > 12 > 10, or 14 > 12 > 1
    assert table.ids.tolist() == order
    assert table.ids[table.global_popular].tolist() == order
    # and the per-type columns are named after the declared types
    assert {"item_log_play", "item_like_rate", "item_share_rate", "user_log_share"} <= set(table.layout.names)
    assert not {"item_log_views", "item_click_rate"} & set(table.layout.names)
    engine.dispose()


@pytest.fixture(scope="module")
def sparse_world(tmp_path_factory, world, redis_url):
    """A trained marketplace whose item ids and category ids lie near 2**62, a tenth of its items without price
    and another tenth without creation time."""
    url_gen = own_database(tmp_path_factory, "sparse")
    url = next(url_gen)
    from tests.conftest import delete_own_keys

    var = tmp_path_factory.mktemp("sparse")
    s = dataclasses.replace(world.settings, database_url=url, redis_url=redis_url, model_dir=var / "models",
                            key_prefix=f"pftest:sparse{time.time_ns()}:")
    m = synthetic.generate(200, 600, 20_000, seed=5, now=time.time())
    second = np.where(m.item_second_category >= 0, 2**62 + 7 * m.item_second_category, -1)
    m = dataclasses.replace(m, item_id=2**61 + 3 * m.item_id, event_item=2**61 + 3 * m.event_item,
                            item_category=2**62 + 7 * m.item_category, item_second_category=second)
    no_price, no_created = m.item_id[::10].tolist(), m.item_id[5::10].tolist()
    engine = db.make_engine(url)
    db.init_db(engine, s)
    bulk.load(engine, m, s)
    with engine.begin() as conn:
        conn.execute(update(Item).where(Item.id.in_(no_price)).values(price=None))
        conn.execute(update(Item).where(Item.id.in_(no_created)).values(created_at=None))
    result = fit_ranker(engine, s, iterations=10, users=200)
    bundle.promote(s.model_dir, bundle.write(s.model_dir, result.model, result.pairs, {"metrics": result.metrics}))
    yield s, engine, m, no_price, no_created
    engine.dispose()
    delete_own_keys(s)
    next(url_gen, None)


#: The tests of ``sparse_world`` run in one test process (``make test``'s ``--dist loadgroup``): one world, not two.
one_sparse_world = pytest.mark.xdist_group("sparse_world")


@one_sparse_world
def test_sparse_category_ids_work_end_to_end(sparse_world, r, new_user_ids):
    s, engine, m, _, _ = sparse_world
    # given a model trained on the catalogue whose category ids are near 2**62, and a worker that loaded it
    pipeline = Pipeline(s, engine, r)
    pipeline.load()
    items = pipeline.items
    assert items.category_ids.min() >= 2**62 and items.n_categories == len(np.unique(m.item_category))
    # then every category's popular list is published under its real id
    for c, rows in zip(items.category_ids.tolist(), items.category_popular):
        assert r.get(f"{s.key_prefix}{{popular}}:cat:{c}") == items.ids[rows].astype("<i8").tobytes(), c
    users = m.user_id.tolist()[:50]
    assert pipeline.recompute(users).written == len(users)
    # and a user without a feed who viewed items of one category gets that category's list first (fallback)
    app = create_app(s, {"TESTING": True})
    client = with_key(app.test_client())
    single = [c for c, k in zip(items.category_ids.tolist(), items.category_popular) if len(k) > 20][0]
    dense = int(np.searchsorted(items.category_ids, single))
    listed = items.ids[items.category_popular[dense]].tolist()
    newcomer = new_user_ids(1)[0]
    resp = client.post("/events", json=[{"user_id": newcomer, "item_id": listed[-1], "type": "view"}])
    assert resp.status_code == 202
    body = client.get(f"/feed/{newcomer}?limit=10").get_json()
    assert body["source"] == "fallback"
    assert [i["item_id"] for i in body["items"]] == [i for i in listed if i != listed[-1]][:10]
    services(app).engine.dispose()


@one_sparse_world
def test_items_without_price_or_creation_time_get_nan_features_and_still_rank(sparse_world, r):
    s, engine, m, no_price, no_created = sparse_world
    pipeline = Pipeline(s, engine, r)
    pipeline.load()
    items = pipeline.items
    layout = items.layout
    # given every user's candidates and features
    hist = histories_from_arrays(m.user_id, m.event_user, m.event_item, m.event_type, m.event_ts, items, s,
                                 clock=float(m.event_ts.max()))
    cand = pipeline.candidates(hist)
    X = features.build(items, hist, cand, hist.clock)
    ids = items.ids[cand.rows]
    unpriced, undated = np.isin(ids, no_price), np.isin(ids, no_created)
    assert unpriced.any() and undated.any()
    # then an item without price has NaN price features, never a made-up 0
    for name in ("item_log_price", "item_price_vs_category", "ux_price_diff", "ux_price_z", "ux_price_ratio"):
        column = X[:, layout.index(name)]
        assert np.isnan(column[unpriced]).all() and not np.isnan(column[~unpriced & ~np.isnan(
            X[:, layout.index("user_mean_log_price")])]).any(), name
    # and the price level of a user who interacted with it ignores it (the mean of their priced items)
    mean = X[:, layout.index("user_mean_log_price")]
    owners = cand.owner
    touched = np.unique(hist.owner[np.isin(items.ids[hist.item_rows], no_price)])
    assert len(touched) and np.isfinite(mean[np.isin(owners, touched)]).all()
    # and an item without creation time has NaN age
    age = X[:, layout.index("item_age_days")]
    assert np.isnan(age[undated]).all() and np.isfinite(age[~undated]).all()
    # and they are still scored and reach the feeds
    scores = scoring.score(pipeline.bundle.model, X)
    assert np.isfinite(scores).all()
    pipeline.recompute(m.user_id.tolist())
    stored = set()
    for u in m.user_id.tolist():
        stored |= set(pipeline.store.read(u).items.tolist())
    assert stored & set(no_price) and stored & set(no_created)
    # and the newest listings (the fallback before any worker published) put items without creation time last
    newest = catalog.newest_active(engine, len(m.item_id))
    undated_active = set(no_created) & set(newest)
    assert undated_active and set(newest[len(newest) - len(undated_active):]) == undated_active
