"""The feed codec and the version guard, against a real Redis-protocol server."""

import dataclasses

import numpy as np
import pytest

from precompute.feeds.codec import HEADER_SIZE, RECORD_SIZE, CorruptFeed, decode, encode
from precompute.feeds.keys import Keys
from precompute.feeds.store import FeedStore


def test_encode_decode_roundtrip_and_partial_read():
    ids = np.arange(1, 101, dtype=np.uint32)
    scores = np.linspace(1, 0, 100, dtype=np.float32)
    blob = encode(ids, scores, history_version=7, computed_at=123.5, model_version=2026)
    assert len(blob) == HEADER_SIZE + 100 * RECORD_SIZE
    feed = decode(blob)
    assert feed.header.count == 100 and feed.header.history_version == 7 and feed.header.model_version == 2026
    assert np.array_equal(feed.items, ids) and np.array_equal(feed.scores, scores)
    # A prefix (what GETRANGE returns for one page), even one cut mid-record, decodes to whole records.
    part = decode(blob[: HEADER_SIZE + 10 * RECORD_SIZE + 3])
    assert part.header.count == 100 and list(part.items) == list(range(1, 11))


@pytest.mark.parametrize("blob", [b"", b"PF", b"XX" + bytes(40), b"PF\x09" + bytes(40)])
def test_decode_rejects_garbage(blob):
    with pytest.raises(CorruptFeed):
        decode(blob)


def test_guard_keeps_the_newer_feed_whatever_the_write_order(r, settings):
    store = FeedStore(r, dataclasses.replace(settings, feed_ttl=60))
    newer = encode(np.array([1, 2]), np.array([0.9, 0.8]), 5, 2.0, 1)
    older = encode(np.array([3, 4]), np.array([0.9, 0.8]), 4, 1.0, 1)
    # given the newer feed landed first, when the older one arrives, then it is refused
    assert store.write_many([(42, newer, 5)]) == [True]
    assert store.write_many([(42, older, 4)]) == [False]
    assert list(store.read(42).items) == [1, 2]
    # an equal or higher version replaces it, and the TTL is set
    assert store.write_many([(42, older.replace(b"\x04", b"\x05", 1), 5)]) == [True]
    assert 0 < r.ttl(Keys(settings.key_prefix).feed(42)) <= 60
    # a page read fetches only the requested records
    assert len(store.read(42, n_records=1).items) == 1


def _format_2(ids, scores, history_version: int, computed_at: float, model_version: int) -> bytes:
    """A value as the previous format wrote it: the 32-byte header without experiment, assignment and arm."""
    from precompute.feeds.codec import HEADER_V2, RECORD

    rec = np.empty(len(ids), dtype=RECORD)
    rec["item"], rec["score"] = ids, scores
    return HEADER_V2.pack(b"PF", 2, 0, len(ids), history_version, computed_at, model_version) + rec.tobytes()


def test_a_feed_of_the_previous_format_still_decodes_as_outside_any_experiment():
    # given a value written before the upgrade
    blob = _format_2(np.array([5, 6, 7]), np.array([0.3, 0.2, 0.1], dtype=np.float32), 9, 50.0, 2025)
    # then it reads whole and in part, as ranked outside any experiment
    feed = decode(blob)
    assert feed.items.tolist() == [5, 6, 7] and feed.header.history_version == 9 and feed.header.experiment == 0
    assert decode(blob[:32 + 12 + 5]).items.tolist() == [5]


def test_a_feed_records_its_experiment_arm_and_assignment():
    blob = encode(np.array([1, 2]), np.array([0.5, 0.4]), 3, 1.0, 0, experiment=7, assignment=12, arm=1)
    header = decode(blob).header
    assert (header.experiment, header.assignment, header.arm, header.model_version) == (7, 12, 1, 0)


def test_guard_keeps_the_feed_of_the_newer_assignment_at_the_same_history_version(r, settings):
    store = FeedStore(r, dataclasses.replace(settings, feed_ttl=60))
    newer = encode(np.array([1, 2]), np.array([0.9, 0.8]), 5, 2.0, 1, experiment=3, assignment=8, arm=1)
    older = encode(np.array([3, 4]), np.array([0.9, 0.8]), 5, 1.0, 1, experiment=3, assignment=7, arm=0)
    # given the feed ranked under assignment 8 landed first, when one ranked under 7 arrives, then it is refused
    assert store.write_many([(43, newer, 5)], assignment=8) == [True]
    assert store.write_many([(43, older, 5)], assignment=7) == [False]
    assert store.read(43).header.arm == 1
    # a newer history version replaces it whatever its assignment
    later = encode(np.array([9]), np.array([0.1]), 6, 3.0, 1, assignment=7)
    assert store.write_many([(43, later, 6)], assignment=7) == [True]


def test_a_feed_of_the_previous_format_is_replaced_at_its_history_version_and_kept_over_an_older(r, settings):
    store = FeedStore(r, dataclasses.replace(settings, feed_ttl=60))
    key = Keys(settings.key_prefix).feed(44)
    r.set(key, _format_2(np.array([5]), np.array([0.3], dtype=np.float32), 9, 50.0, 2025))
    assert store.write_many([(44, encode(np.array([6]), np.array([0.2]), 8, 1.0, 1), 8)]) == [False]
    assert store.write_many([(44, encode(np.array([7]), np.array([0.2]), 9, 1.0, 1), 9)]) == [True]
    assert store.read(44).items.tolist() == [7]


def test_a_feed_ranked_in_an_arm_is_not_stale_for_its_bundle(r, settings):
    # given one feed ranked by another bundle outside any experiment, one by a simple-method arm (model 0)
    store = FeedStore(r, dataclasses.replace(settings, feed_ttl=60))
    store.write_many([(45, encode(np.array([1]), np.array([0.1]), 2, 1.0, 7), 2),
                      (46, encode(np.array([1]), np.array([0.1]), 2, 1.0, 0, experiment=3, assignment=1, arm=1), 2)])
    # then only the first is stale against the current bundle 8
    assert store.stale_users([(45, 2), (46, 2)], model_version=8) == [45]
