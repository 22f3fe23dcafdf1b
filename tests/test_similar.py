"""Similar items: the lists stacked from a bundle's sources, their round trip through Redis, ``GET /items/<id>/similar`` with its
live rules (inactive and seen items dropped, the categories' popular items for an item whose list leaves nothing,
scope, 404 and 400), and evaluate's item-to-item check on a hand-made log worked out in the comments."""

from __future__ import annotations

import time

import numpy as np
import pytest

from api.services import services
from precompute.data import api_keys
from precompute.data.log import EventLog
from precompute.feeds import similar as stored
from precompute.feeds.keys import Keys
from precompute.learning import item_to_item
from precompute.ranking import bundle, similar
from precompute.ranking.item_loader import load_item_table
from precompute.ranking.source_index import for_items
from precompute.settings import Settings
from tests.conftest import own_database
from tests.test_catalogue_model import small_world


def lists_of(world) -> dict[int, list[int]]:
    """The world bundle's similar lists, item id → neighbour ids in order, stacked from its fitted id pairs."""
    pairs = similar.build(bundle.load(world.settings.model_dir, world.version).sources.pairs(),
                          world.settings.similar_length)
    out: dict[int, list[int]] = {}
    for s, d in zip(pairs["similar_src"].tolist(), pairs["similar_dst"].tolist()):
        out.setdefault(s, []).append(d)
    return out


# -- the lists ---------------------------------------------------------------------------------------------------

def test_a_list_is_co_visitation_then_item_knn_neighbours_not_yet_listed():
    # given co-visitation neighbours of item 1 (5, 3) and item-kNN neighbours (3, 1, 7, 9), item 2 only in kNN
    pairs = {"src": np.array([1, 1]), "dst": np.array([5, 3]), "weight": np.array([2.0, 1.0]),
             "knn_src": np.array([1, 1, 1, 1, 2]), "knn_dst": np.array([3, 1, 7, 9, 5]),
             "knn_weight": np.array([0.9, 0.8, 0.7, 0.6, 0.5])}
    # when lists of 4 are built
    built = similar.build(pairs, 4)
    # then item 1's is co-visitation's in its order, then kNN's not yet listed, never itself, cut at 4
    assert built["similar_src"].tolist() == [1, 1, 1, 1, 2]
    assert built["similar_dst"].tolist() == [5, 3, 7, 9, 5]


def test_a_worker_writes_the_bundles_lists_to_redis_once_per_bundle(pipeline, world, r, settings):
    # given the world's bundle loaded by a worker (the pipeline fixture)
    keys = Keys(settings.key_prefix)
    lists = lists_of(world)
    assert lists, "the synthetic world's bundle has similar lists"
    # then every item's value in Redis is its stored list, and an item of the catalogue without one has an empty one
    some = sorted(lists)[:50]
    for item in some:
        assert stored.decode(r.get(keys.similar(item))).tolist() == lists[item]
    bare = np.setdiff1d(pipeline.items.ids, list(lists))
    if len(bare):
        assert stored.decode(r.get(keys.similar(int(bare[0])))).tolist() == []
    assert int(r.get(keys.similar_version)) == world.version
    # when the worker reloads, the lists are not written again
    r.set(keys.similar(some[0]), stored.encode(np.array([1, 2, 3])))
    assert not pipeline.publish_similar(pipeline.bundle, pipeline.items)
    assert stored.decode(r.get(keys.similar(some[0]))).tolist() == [1, 2, 3]
    # but after Redis lost the version (its data), they are
    r.delete(keys.similar_version)
    assert pipeline.publish_similar(pipeline.bundle, pipeline.items)
    assert stored.decode(r.get(keys.similar(some[0]))).tolist() == lists[some[0]]


def test_a_value_is_4_bytes_and_8_per_neighbour_and_a_bad_one_reads_as_none():
    assert len(stored.encode(np.arange(20))) == 4 + 8 * 20
    assert stored.decode(stored.encode(np.array([7, 2**62]))).tolist() == [7, 2**62]
    assert stored.decode(None) is None
    assert stored.decode(b"PS\x01\x02" + b"\x00" * 8) is None          # says 2, holds 1
    assert stored.decode(b"PF\x01\x00") is None


# -- the route ---------------------------------------------------------------------------------------------------

@pytest.fixture
def listed(pipeline, world):
    """An item with a list of at least 5 neighbours, and the list (written to Redis by the pipeline)."""
    lists = lists_of(world)
    item = next(i for i in sorted(lists) if len(lists[i]) >= 5)
    return item, lists[item]


def test_an_item_answers_its_neighbours_in_order(client, listed):
    item, nbrs = listed
    resp = client.get(f"/items/{item}/similar?limit=5")
    assert resp.status_code == 200, resp.json
    assert resp.json["source"] == "neighbours"
    assert [x["item_id"] for x in resp.json["items"]] == nbrs[:5]


def test_inactive_items_are_dropped_at_once(client, app, listed):
    # given the item's second neighbour deactivated (the item states this API process reads)
    item, nbrs = listed
    svc = services(app)
    svc.item_states.set_active({nbrs[1]: False})
    svc.pages.states.refresh(force=True)
    # then it is left out, and the list closes up
    got = [x["item_id"] for x in client.get(f"/items/{item}/similar?limit=4").json["items"]]
    assert got == [nbrs[0], *nbrs[2:5]]


def test_with_user_id_the_users_seen_items_are_dropped(client, app, listed, r, settings, user_id):
    # given a user who interacted with the item's first and third neighbours (the live seen set)
    item, nbrs = listed
    r.zadd(Keys(settings.key_prefix).seen_recent(user_id), {str(nbrs[0]): 1, str(nbrs[2]): 1})
    # then their answer leaves both out; another's, or one without user_id, does not
    got = [x["item_id"] for x in client.get(f"/items/{item}/similar?limit=3&user_id={user_id}").json["items"]]
    assert got == [nbrs[1], nbrs[3], nbrs[4]]
    assert [x["item_id"] for x in client.get(f"/items/{item}/similar?limit=3").json["items"]] == nbrs[:3]


def test_an_item_whose_list_leaves_nothing_gets_its_categories_popular_items(client, app, pipeline, world, r,
                                                                              settings):
    # given an item whose every neighbour is inactive, and an item stored with no neighbours
    lists = lists_of(world)
    item = sorted(lists)[0]
    svc = services(app)
    svc.item_states.set_active({n: False for n in lists[item]})
    svc.pages.states.refresh(force=True)
    keys = Keys(settings.key_prefix)
    bare = int(pipeline.items.ids[-1])
    r.set(keys.similar(bare), stored.encode(np.empty(0, np.int64)))
    for which in (item, bare):
        # then each gets popular items of its categories, none of them inactive nor itself, and says so
        resp = client.get(f"/items/{which}/similar?limit=5")
        assert resp.status_code == 200, resp.json
        assert resp.json["source"] == "category_popular"
        got = [x["item_id"] for x in resp.json["items"]]
        assert len(got) == 5 and which not in got and not set(got) & set(lists[item])
        table = pipeline.items
        row = table.rows(np.array([which]))[0]
        cats = table.cat_of[table.cat_indptr[row]:table.cat_indptr[row + 1]]
        if len(cats):
            first = int(table.ids[table.category_popular[cats[0]][0]])
            assert got[0] == first or first == which or first in lists[item]


def test_an_unknown_item_is_a_404_and_a_bad_limit_or_user_a_400(client):
    resp = client.get("/items/9000000000000000/similar")
    assert resp.status_code == 404 and "does not exist" in resp.json["error"]
    for query in ("limit=0", "limit=21", "limit=x", "user_id=0", "user_id=abc"):
        resp = client.get(f"/items/1/similar?{query}")
        assert resp.status_code == 400 and resp.json["error"], query


def test_the_route_needs_the_feed_read_scope(app, world, listed):
    # given a key with events:write only
    key = api_keys.create(world.engine, f"similar-{time.monotonic_ns()}", frozenset({"events:write"}), rate=1e6,
                          burst=10 ** 6)
    c = app.test_client()
    c.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    # then it is refused, and no key at all is refused too
    assert c.get(f"/items/{listed[0]}/similar").status_code == 403
    assert app.test_client().get(f"/items/{listed[0]}/similar").status_code == 401


# -- evaluate's item-to-item check --------------------------------------------------------------------------------

CUT = 100.0
#: Items 11-18, all of category 1. Before the cut: user 1 saw 11, user 2 saw 12 twice, user 3 saw 18 and 12 (12 is
#: the most popular, then 11 and 18 by id). After it:
#: - user 1, one step at 110: 13 then 14 → query 13, truth {14};
#: - user 2, steps at 120 (15) and 130 (16): the first has no other item, so it takes the next step, within the
#:   session gap → query 15, truth {16}; the step at 130 has no other and no next: not judged;
#: - user 3, one step at 140: 17 then 11 → query 17, truth {11}.
LOG = [(1, 11, 1, 10), (2, 12, 1, 20), (2, 12, 1, 25), (3, 18, 1, 30), (3, 12, 1, 35),
       (1, 13, 1, 110), (1, 14, 1, 110), (2, 15, 1, 120), (2, 16, 1, 130), (3, 17, 1, 140), (3, 11, 1, 140)]
#: Co-visitation: 13 → 11 (stronger), 14; item-kNN: 15 → 16. Item 17 has no neighbour anywhere.
PAIRS = {"src": np.array([13, 13]), "dst": np.array([11, 14]), "weight": np.array([2.0, 1.0]),
         "knn_src": np.array([15]), "knn_dst": np.array([16]), "knn_weight": np.array([1.0])}


@pytest.fixture
def own_url(tmp_path_factory):
    yield from own_database(tmp_path_factory, "similar")


def test_the_item_to_item_check_judges_each_methods_top_k_on_a_steps_other_items(own_url, tmp_path):
    s = Settings(database_url=own_url, var_dir=tmp_path)
    engine = small_world(s, own_url, [(i, [1], 5.0, None) for i in range(11, 19)], [e for e in LOG if e[3] <= CUT])
    items = load_item_table(engine, s, as_of=CUT)
    user, item, type_, ts = (np.array(c) for c in zip(*LOG))
    log = EventLog(user.astype(np.int64), item.astype(np.int64), type_.astype(np.int16), ts.astype(np.float64), None)
    # when each method's first item (k=1) is judged
    check = item_to_item.judge(items, for_items(items, PAIRS), log, CUT, s, k=1)
    assert check.steps == 3
    hit = {m: v["hit_rate"] for m, v in check.methods.items()}
    # then co-visitation's 13 → [11 (seen by user 1: dropped), 14] holds 14; it knows nothing of 15 and 17
    assert hit["covisit"] == pytest.approx(1 / 3)
    # item-kNN's 15 → [16] holds 16
    assert hit["knn"] == pytest.approx(1 / 3)
    assert hit["latent"] == 0.0
    # the category's most popular item not the query nor seen: 12 for 13 (miss), 11 for 15 (user 2 saw 12: miss),
    # 11 for 17 (user 3 saw 12 and 18): a hit
    assert hit["category"] == pytest.approx(1 / 3)
    # the served list: co-visitation for 13, item-kNN for 15, and 17 (no list) gets the category's: 11
    assert hit["served"] == 1.0
    assert check.methods["served"]["recall"] == 1.0


def test_a_log_without_steps_to_judge_reports_zeros(own_url, tmp_path):
    # given only the steps of one item each, none followed within the session gap
    s = Settings(database_url=own_url, var_dir=tmp_path, session_gap=5)
    engine = small_world(s, own_url, [(i, [1], 5.0, None) for i in range(11, 19)], [e for e in LOG if e[3] <= CUT])
    items = load_item_table(engine, s, as_of=CUT)
    lone = [e for e in LOG if e[3] <= CUT] + [(2, 15, 1, 120), (2, 16, 1, 130)]
    user, item, type_, ts = (np.array(c) for c in zip(*lone))
    log = EventLog(user.astype(np.int64), item.astype(np.int64), type_.astype(np.int16), ts.astype(np.float64), None)
    # then the check judges none, and says so with zeros
    check = item_to_item.judge(items, for_items(items, PAIRS), log, CUT, s, k=1)
    assert check.steps == 0 and check.methods["served"] == dict(hit_rate=0.0, recall=0.0)


def test_a_worker_holding_a_bundle_no_longer_current_does_not_write_its_lists(settings, world, r, tmp_path):
    import dataclasses
    import shutil

    from precompute.pipeline.pipeline import Pipeline

    # given a worker that loaded the current bundle, in a model directory of this test's own
    models = tmp_path / "models"
    shutil.copytree(world.settings.model_dir, models)
    s = dataclasses.replace(settings, model_dir=models)
    p = Pipeline(s, world.engine, r)
    p.load()
    keys = Keys(s.key_prefix)
    assert int(r.get(keys.similar_version)) == world.version
    # when another bundle becomes current (a promotion or rollback it has not loaded yet) and Redis lost the lists
    (models / "CURRENT").write_text(f"{world.version + 1}\n")
    r.delete(keys.similar_version)
    # then reloading its item table with the old bundle writes nothing: the new bundle's loader will
    assert not p.publish_similar(p.bundle, p.items)
    assert r.get(keys.similar_version) is None

