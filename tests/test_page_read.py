"""A page's read (``PageReader._read``): the feed's bytes and the user's seen tail sent together on one pooled
connection, never leaving an answer behind for the next page that takes the connection."""

import redis
import pytest

from precompute.feeds.keys import Keys
from precompute.feeds.page import PageReader

from .test_boosts import USER, _store


def test_a_read_that_fails_part_way_leaves_no_answer_behind(r, settings):
    keys = Keys(settings.key_prefix)
    pages = PageReader(r, settings)
    _store(r, keys, list(range(1, 41)), {}, set(), {7})
    want = [i for i, _, _ in pages.page(USER, 10, 0).items]
    # given a feed key of the wrong type: the first of the read's two answers is an error
    r.delete(keys.feed(USER))
    r.rpush(keys.feed(USER), "not a feed")
    with pytest.raises(redis.ResponseError):
        pages.page(USER, 10, 0)
    # when the feed is written again and read on the same pool
    _store(r, keys, list(range(1, 41)), {}, set(), {7})
    # then the page is the feed's, not the seen tail left unread by the failed read
    assert [i for i, _, _ in pages.page(USER, 10, 0).items] == want == [i for i in range(1, 12) if i != 7][:10]
