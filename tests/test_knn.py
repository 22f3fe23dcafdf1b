"""Item-kNN neighbours (``ranking/knn.py``) on a matrix small enough to work out by hand."""

import math

import numpy as np
import pytest

from precompute.ranking import knn

A, B, C, D = 10, 20, 30, 40


def test_neighbours_are_the_most_similar_items_by_cosine_over_who_interacted():
    # given user 1 with items A and B, user 2 with A, B and C (B twice), user 3 with C and D, and an event of no
    # weight (user 4, item D) that does not count
    user = np.array([1, 1, 2, 2, 2, 2, 3, 3, 4])
    item = np.array([A, B, A, B, B, C, C, D, D])
    positive = np.array([True] * 8 + [False])
    # when the two nearest neighbours of every item are built
    pairs = knn.build_pairs(user, item, positive, top_k=2)
    # then each is its cosine: A and B share both their users (1), A and C one of two each (1/2), C and D one user
    # of C's two and D's one (1/sqrt 2); ties by id, no item is its own neighbour, no zero similarity is listed
    def check(item, want):
        got = [(int(d), float(w)) for d, w in zip(pairs["knn_dst"][pairs["knn_src"] == item],
                                                   pairs["knn_weight"][pairs["knn_src"] == item])]
        assert [d for d, _ in got] == [d for d, _ in want], item
        assert [w for _, w in got] == pytest.approx([w for _, w in want], rel=1e-6), item

    check(A, [(B, 1.0), (C, 0.5)])
    check(B, [(A, 1.0), (C, 0.5)])
    check(C, [(D, 1 / math.sqrt(2)), (A, 0.5)])
    check(D, [(C, 1 / math.sqrt(2))])


def test_a_log_without_positive_events_has_no_neighbours():
    pairs = knn.build_pairs(np.array([1, 2]), np.array([A, B]), np.array([False, False]), top_k=5)
    assert all(len(pairs[k]) == 0 for k in knn.KEYS)



def test_every_block_of_source_items_is_listed_as_a_dense_cosine_over_the_whole_matrix_would_list_it():
    # given a log of more items than one block of source items (the blocks are computed on several threads)
    rng = np.random.default_rng(3)
    n_users, n_items = 60, 2 * knn.BLOCK + 37
    user = rng.integers(0, n_users, 3000)
    item = rng.integers(0, n_items, 3000) * 3 + 7          # ids that are not row numbers
    # when the 4 nearest neighbours of every item are built
    pairs = knn.build_pairs(user, item, np.ones(len(user), dtype=bool), top_k=4)
    # then they are the dense cosine matrix's 4 best of every item, in every block: same items, same similarities
    ids = np.unique(item)
    x = np.zeros((n_users, len(ids)))
    x[user, np.searchsorted(ids, item)] = 1.0
    x /= np.linalg.norm(x, axis=0)
    sim = x.T @ x
    np.fill_diagonal(sim, 0.0)
    for s in range(len(ids)):
        got = pairs["knn_weight"][pairs["knn_src"] == ids[s]]
        assert got == pytest.approx(np.sort(sim[s])[::-1][:4], rel=1e-5), s
        dst = np.searchsorted(ids, pairs["knn_dst"][pairs["knn_src"] == ids[s]])
        assert sim[s, dst] == pytest.approx(got, rel=1e-5), s
