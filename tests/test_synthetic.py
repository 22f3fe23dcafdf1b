"""The synthetic marketplace knows what it drew its events from: ``Latent.expected_events`` must be the
distribution the generator really samples, or the quality benchmark's ceiling would be a made-up number."""

from __future__ import annotations

import time

import numpy as np

from precompute.data import synthetic


def _world():
    m = synthetic.generate(300, 900, 300_000, seed=1, now=time.time())
    return m, m.event_user - 1, m.event_item - 1


def test_expected_events_are_each_users_distribution_over_items():
    m, _, _ = _world()
    shares = m.latent.expected_events(np.arange(300), None)
    assert shares.shape == (300, 900) and (shares >= 0).all()
    np.testing.assert_allclose(shares.sum(axis=1), 1.0, rtol=1e-9)
    # and the expected gain weighs an event by its grades' probabilities: never below a view's, at most a purchase's
    gain = m.latent.expected_events(np.arange(300))
    assert (gain >= shares * (2 ** 1 - 1) - 1e-15).all() and (gain <= shares * (2 ** 6 - 1) + 1e-15).all()


def test_expected_events_match_the_events_the_generator_drew():
    m, user, item = _world()
    n = np.bincount(user, minlength=300)
    shares = m.latent.expected_events(np.arange(300), None)
    # the whole log's item frequencies (users weighted by their event counts): sampling noise alone is ~0.04 here;
    # a model with flat appeal is at 1.0, one with other users' favourite clusters at 0.12
    expected = (n[:, None] * shares).sum(axis=0) / n.sum()
    observed = np.bincount(item, minlength=900) / len(item)
    assert np.abs(expected - observed).sum() < 0.07
    # and each heavy user's split over categories: ~0.11 here; uniform interest weights give 0.60, other users'
    # favourite clusters 0.51
    cat = m.latent.item_category
    n_cat = cat.max() + 1
    seen = np.zeros((300, n_cat))
    np.add.at(seen, (user, cat[item]), 1)
    seen /= np.maximum(n, 1)[:, None]
    predicted = np.stack([shares[:, cat == c].sum(axis=1) for c in range(n_cat)], axis=1)
    heavy = n >= 500
    assert heavy.sum() > 100
    assert np.abs(seen - predicted)[heavy].sum(axis=1).mean() < 0.2
