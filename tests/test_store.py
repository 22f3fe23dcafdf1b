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
