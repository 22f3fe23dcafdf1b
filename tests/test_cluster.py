"""Feeds on Redis Cluster: a local three-master cluster (``cli/cluster.py``) holds feeds and item states, the RQ queue
stays on the suite's single server, and the API and workers run unchanged on that split."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from redis.cluster import RedisCluster

from cli.cluster import LocalCluster
from jobs.queues import enqueue_batches, make_queue
from precompute.feeds.client import redis_client
from precompute.feeds.codec import encode
from precompute.feeds.item_states import ItemStates
from precompute.feeds.keys import Keys
from precompute.feeds.store import FeedStore
from tests.conftest import manage, with_key

#: One test process runs this module (``make test``'s ``--dist loadgroup``), so it starts one cluster.
pytestmark = pytest.mark.xdist_group("cluster")


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster() as c:
        yield c


@pytest.fixture
def on_cluster(settings, cluster):
    """The test's settings with feeds and item states on the cluster (the queue stays on ``REDIS_URL``)."""
    return dataclasses.replace(settings, feed_redis_url=cluster.url)


@pytest.fixture
def rc(on_cluster):
    client = redis_client(on_cluster.feed_url)
    assert isinstance(client, RedisCluster)
    yield client
    client.close()


def _app(settings):
    from api import create_app

    return create_app(settings, {"TESTING": True})


def test_a_users_keys_share_one_slot_and_feeds_spread_over_every_master(on_cluster, rc):
    keys = Keys(on_cluster.key_prefix)
    # given feeds of 300 users written through the store (one pipeline per node)
    users = list(range(1, 301))
    store = FeedStore(rc, on_cluster)
    feeds = [(u, encode(np.array([u, u + 1], dtype=np.int64), np.ones(2, np.float32), 5, 0.0, 1), 5) for u in users]
    assert all(store.write_many(feeds))
    # then each user's feed and seen keys hash to one slot, and every master holds some of the feeds
    assert all(rc.keyslot(keys.feed(u)) == rc.keyslot(keys.seen_recent(u)) for u in users)
    per_master = {node.name: 0 for node in rc.get_primaries()}
    for u in users:
        per_master[rc.get_node_from_key(keys.feed(u)).name] += 1
    assert len(per_master) == 3 and min(per_master.values()) > 50
    for node in rc.get_primaries():
        assert rc.get_redis_connection(node).dbsize() >= per_master[node.name]
    # and the version guard holds on the cluster: an older feed never replaces a newer one
    older = [(u, encode(np.array([9], dtype=np.int64), np.ones(1, np.float32), 4, 0.0, 1), 4) for u in users[:20]]
    assert not any(store.write_many(older))
    assert all(store.read(u).items.tolist() == [u, u + 1] for u in users[:20])


def test_workers_and_the_api_run_unchanged_with_feeds_on_the_cluster(on_cluster, rc, r, own_users, admin):
    # given users whose feeds workers compute from the queue on the single server, writing to the cluster
    users = own_users(12)
    enqueue_batches(make_queue(on_cluster, r), users, 5, on_cluster)
    done = manage(on_cluster, "worker", "--burst")
    assert done.returncode == 0, done.stderr
    store = FeedStore(rc, on_cluster)
    assert all(store.read(u) is not None for u in users)
    assert not list(r.scan_iter(match=f"{on_cluster.key_prefix}{{u:*", count=1000))      # none on the queue server
    client = with_key(_app(on_cluster).test_client())
    user = users[0]
    # when the API serves a feed, boosts an item of it and deactivates another
    first = client.get(f"/feed/{user}?limit=10").get_json()
    assert first["source"] == "precomputed" and len(first["items"]) == 10
    ids = [x["item_id"] for x in first["items"]]
    lifted, sold = ids[6], ids[0]
    assert client.put(f"/boosts/{lifted}", json={"weight": 5.0}, headers=admin).status_code == 200
    assert client.patch(f"/items/{sold}", json={"active": False}, headers=admin).status_code == 200
    try:
        page = client.get(f"/feed/{user}?limit=10").get_json()
        # then the boosted item is lifted and the sold one gone
        served = [x["item_id"] for x in page["items"]]
        assert sold not in served
        assert served.index(lifted) < 6 and next(x for x in page["items"] if x["item_id"] == lifted)["boosted"]
        # and an event makes the item seen at once, and schedules a recompute on the queue Redis
        seen = served[1]
        assert client.post("/events", json={"user_id": user, "item_id": seen, "type": "click"}).status_code == 202
        assert seen not in [x["item_id"] for x in client.get(f"/feed/{user}?limit=10").get_json()["items"]]
        assert r.zscore(Keys(on_cluster.key_prefix).dirty, str(user)) is not None
    finally:
        client.patch(f"/items/{sold}", json={"active": True}, headers=admin)


@pytest.mark.parametrize("where", ["single", "cluster"])
def test_a_boost_or_a_deactivation_reaches_every_api_process_within_a_second(where, settings, on_cluster, r, rc):
    # given an API process's app (its own copy of the item states, refreshed every PREFEED_LIVE_REFRESH_MS) and a feed
    s, feeds = (settings, r) if where == "single" else (on_cluster, rc)
    user, ids = 4242, np.arange(1001, 1031, dtype=np.int64)
    FeedStore(feeds, s).write_many([(user, encode(ids, np.linspace(1, 0, 30, dtype=np.float32), 3, 0.0, 1), 3)])
    reader = with_key(_app(s).test_client())

    def served() -> list[int]:
        return [x["item_id"] for x in reader.get(f"/feed/{user}?limit=5").get_json()["items"]]

    assert served() == ids[:5].tolist()
    other = ItemStates(feeds, Keys(s.key_prefix))          # what another API process writes
    for change, visible in ((lambda: other.boost(1020, 3.0, time.time() + 60), lambda got: 1020 in got),
                            (lambda: other.set_active({1001: False}), lambda got: 1001 not in got),
                            (lambda: other.unboost(1020), lambda got: 1020 not in got),
                            (lambda: other.set_active({1001: True}), lambda got: 1001 in got)):
        # when another process makes the change
        change()
        start = time.monotonic()
        # then this one serves it within the bound (PREFEED_LIVE_REFRESH_MS plus a round trip), well under 1 s
        while not visible(served()):
            assert time.monotonic() - start < 1.0, "the change was not served within a second"
            time.sleep(0.005)


def test_similar_items_are_written_per_node_and_served_with_the_users_seen_items_dropped(on_cluster, rc, world,
                                                                                           user_id):
    from precompute.feeds.similar import SimilarStore, decode

    keys = Keys(on_cluster.key_prefix)
    # given the lists of 300 items written to the cluster (one pipeline per node), and a user who saw item 1005
    items = np.arange(1000, 1300)
    SimilarStore(rc, on_cluster).publish(7, np.repeat(items, 3), np.repeat(items, 3) + np.tile([5, 6, 7], 300),
                                         items)
    rc.zadd(keys.seen_recent(user_id), {"1005": 1})
    # then they spread over every master, each read back from its own slot
    assert len({rc.get_node_from_key(keys.similar(int(i))).name for i in items}) == 3
    assert decode(rc.get(keys.similar(1100))).tolist() == [1105, 1106, 1107]
    # and the route reads an item's list and the user's seen set (two slots) in one pipelined read
    client = _app(on_cluster).test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {world.key}"
    got = client.get(f"/items/1000/similar?user_id={user_id}").get_json()
    assert got["source"] == "neighbours" and [x["item_id"] for x in got["items"]] == [1006, 1007]
