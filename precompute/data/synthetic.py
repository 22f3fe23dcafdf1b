"""A synthetic marketplace with real structure, so that ranking has signal to learn.

- categories with power-law popularity and their own price level;
- items in small clusters of related listings inside a category, with power-law appeal; one in ten listed in a
  second category too;
- users with 1-3 interest categories, a favourite cluster in each, and a personal price level;
- sessions that stay inside a cluster most of the time, which is what produces co-visitation;
- clicks, contacts and purchases more likely when the price fits the user and the listing is good.

Everything is generated with numpy in whole arrays; ``seed`` makes it reproducible.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..units import DAY

# The generator's rules, named once: ``generate`` draws with them and ``Latent.expected_events`` computes from them.
SLOT_SHARES = (0.6, 0.3, 0.1)   # a session's interest slot (clipped to the user's last interest)
EXPLORE = 0.1                    # a session explores a category drawn by popularity instead of using a slot
FAVOURITE = 0.5                  # a slot's session stays in the slot's favourite cluster (else draws a cluster)
STAY = 0.75                      # an event stays in its session's cluster (else draws from the category)
#: An event's type is at least click / contact / purchase with these probabilities × its strength.
TYPE_THRESHOLDS = (0.22, 0.08, 0.025)
#: The item attributes the generator writes (``Settings.item_attributes`` declares them to use them as features).
ATTRIBUTES = ("quality", "photos", "seller_rating")


@dataclasses.dataclass
class Marketplace:
    item_id: np.ndarray
    item_category: np.ndarray
    item_price: np.ndarray
    item_created_at: np.ndarray
    item_active: np.ndarray
    item_quality: np.ndarray
    item_photos: np.ndarray
    item_seller_rating: np.ndarray
    user_id: np.ndarray
    user_created_at: np.ndarray
    user_history_version: np.ndarray
    event_user: np.ndarray      # sorted by ts
    event_item: np.ndarray
    event_type: np.ndarray
    event_ts: np.ndarray
    #: A second category for about one item in ten (-1: none), as real catalogues list items in several.
    item_second_category: np.ndarray | None = None
    #: What the generator drew its events from (``Latent``): the ceiling a recommender could reach.
    latent: Latent | None = None

    def categories(self) -> tuple[np.ndarray, np.ndarray]:
        """Every (item id, category) pair of the catalogue."""
        second = self.item_second_category
        if second is None:
            return self.item_id, self.item_category
        extra = second >= 0
        return np.r_[self.item_id, self.item_id[extra]], np.r_[self.item_category, second[extra]]


@dataclasses.dataclass
class Latent:
    """The hidden state the events were drawn from, which no method sees: each user's interests (category per
    slot, slot weights), favourite cluster per slot and price level; each item's cluster, appeal and purchase
    propensity. ``expected_events`` turns it into the ranking an all-knowing recommender would make."""

    item_category: np.ndarray      # primary category (the one sessions draw from)
    item_cluster: np.ndarray
    appeal: np.ndarray
    quality: np.ndarray
    log_price: np.ndarray
    category_popularity: np.ndarray   # the probability an exploring session picks each category
    category_log_price: np.ndarray
    interests: np.ndarray          # (users, 3) category per slot
    slot_weight: np.ndarray        # (users, 3) probability a session uses each slot (0.6/0.3/0.1 folded into
                                   # the user's last slot when they have fewer than three interests)
    favourite_cluster: np.ndarray  # (users, 3)
    price_offset: np.ndarray

    def expected_events(self, users: np.ndarray, type_weights: tuple[float, ...] | None = (1, 2, 4, 6)
                        ) -> np.ndarray:
        """``(len(users), items)``: the share of a user's next events that go to each item (rows sum to 1),
        times the expected gain ``2^weight − 1`` of such an event given the weights of the four types the
        generator writes (view, click, contact, purchase; ``None``: the shares alone), by the generator's own
        rules; ``users`` and items are 0-based indexes. Ranking by it is the best any method can do in
        expectation."""
        cat, clu, appeal = self.item_category, self.item_cluster, self.appeal
        in_category = appeal / np.bincount(cat, weights=appeal)[cat]
        _, cluster_index = np.unique(clu, return_inverse=True)
        in_cluster = appeal / np.bincount(cluster_index, weights=appeal)[cluster_index]
        by_cluster = FAVOURITE * STAY                  # 0.375
        by_category = 1 - by_cluster                   # a drawn cluster averages to the category: 0.625
        if type_weights is not None:
            gain = np.exp2(np.asarray(type_weights, dtype=np.float64)) - 1
        out = np.empty((len(users), len(cat)))
        for row, u in enumerate(users):
            # A session explores (0.1: a category by popularity) or takes one of the user's slots; in a slot,
            # half the sessions stay in the favourite cluster and half draw one (which averages to the
            # category); an event stays in the session's cluster 3 times in 4, else draws from its category.
            p = EXPLORE * self.category_popularity[cat] * in_category
            for slot in range(3):
                w = (1 - EXPLORE) * self.slot_weight[u, slot]
                if w:
                    p += w * (by_category * in_category * (cat == self.interests[u, slot])
                              + by_cluster * in_cluster * (clu == self.favourite_cluster[u, slot]))
            if type_weights is not None:
                strength = _strength(self.log_price, self.category_log_price[cat], self.price_offset[u],
                                     self.quality)
                at_least = [np.minimum(1, t * strength) for t in TYPE_THRESHOLDS]
                purchase = at_least[2]
                contact = at_least[1] - purchase
                click = at_least[0] - purchase - contact
                p *= (gain[0] * (1 - purchase - contact - click) + gain[1] * click + gain[2] * contact
                      + gain[3] * purchase)
            out[row] = p
        return out


def _strength(log_price, category_log_price, price_offset, quality):
    """How likely an event on an item becomes a click, contact or purchase: the price fits the user and the
    listing is good."""
    fit = np.exp(-((log_price - category_log_price - price_offset) ** 2) / 0.5)
    return fit * (0.3 + quality)


class _Sampler:
    """Draw items proportionally to ``weight`` within groups, vectorized: one searchsorted for all draws."""

    def __init__(self, group: np.ndarray, weight: np.ndarray) -> None:
        order = np.lexsort((np.arange(len(group)), group))
        g, w = group[order], weight[order]
        starts = np.r_[0, np.flatnonzero(np.diff(g)) + 1]
        csum = np.cumsum(w)
        base = np.repeat(np.r_[0.0, csum[starts[1:] - 1]], np.diff(np.r_[starts, len(g)]))
        total = np.repeat(csum[np.r_[starts[1:] - 1, len(g) - 1]] - np.r_[0.0, csum[starts[1:] - 1]],
                          np.diff(np.r_[starts, len(g)]))
        # Position of each item on a line where group k occupies [k, k+1).
        self._line = g.astype(np.float64) + (csum - base) / total
        self._order = order
        self.groups = np.unique(g)

    def draw(self, group: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        target = group.astype(np.float64) + rng.random(len(group)) * (1 - 1e-12)
        idx = np.searchsorted(self._line, target, side="right")
        return self._order[np.minimum(idx, len(self._order) - 1)]


def generate(n_users: int, n_items: int, n_events: int, seed: int = 0, now: float = 1.7e9) -> Marketplace:
    rng = np.random.default_rng(seed)
    n_cat = int(np.clip(n_items // 150, 4, 40))
    cat_pop = 1.0 / np.arange(1, n_cat + 1) ** 1.1
    cat_pop /= cat_pop.sum()
    cat_log_price = rng.uniform(2.5, 7.5, n_cat)

    # Items: every category gets at least one, the rest follow category popularity.
    item_cat = np.r_[np.arange(min(n_cat, n_items)), rng.choice(n_cat, max(0, n_items - n_cat), p=cat_pop)]
    item_cat = item_cat[:n_items].astype(np.int64)
    quality = rng.beta(2.0, 2.0, n_items)
    log_price = cat_log_price[item_cat] + rng.normal(0, 0.6, n_items)
    appeal = (rng.pareto(1.3, n_items) + 1.0) * (0.4 + quality)
    per_cat = np.bincount(item_cat, minlength=n_cat)
    n_clusters = np.maximum(1, per_cat // 25)
    cluster = item_cat * 10_000 + (rng.random(n_items) * n_clusters[item_cat]).astype(np.int64)
    by_cat = _Sampler(item_cat, appeal)
    by_cluster = _Sampler(cluster, appeal)

    # Users: interests (weights 0.6/0.3/0.1 over up to three categories), a favourite cluster in each, price level.
    n_interest = rng.integers(1, 4, n_users)
    interests = rng.choice(n_cat, (n_users, 3), p=cat_pop)
    fav_cluster = cluster[by_cat.draw(interests.ravel(), rng)].reshape(n_users, 3)
    price_offset = rng.normal(0, 0.45, n_users)
    activity = rng.lognormal(0, 1.0, n_users)

    # Sessions, then events inside them.
    lengths = rng.geometric(1 / 8, size=max(1, n_events // 4))
    ends = np.cumsum(lengths)
    n_sessions = int(np.searchsorted(ends, n_events) + 1)
    lengths = lengths[:n_sessions].copy()
    lengths[-1] -= ends[n_sessions - 1] - n_events
    s_user = rng.choice(n_users, n_sessions, p=activity / activity.sum())
    slot_w = np.array(SLOT_SHARES)
    u = rng.random(n_sessions)
    slot = np.where(u < slot_w[0], 0, np.where(u < slot_w[:2].sum(), 1, 2))
    slot = np.minimum(slot, n_interest[s_user] - 1)
    explore = rng.random(n_sessions) < EXPLORE
    s_cat = np.where(explore, rng.choice(n_cat, n_sessions, p=cat_pop), interests[s_user, slot])
    s_cluster = np.where(
        (~explore) & (rng.random(n_sessions) < FAVOURITE),
        fav_cluster[s_user, slot],
        cluster[by_cat.draw(s_cat, rng)],
    )
    s_start = now - rng.uniform(0, 30 * DAY, n_sessions)

    sess = np.repeat(np.arange(n_sessions), lengths)
    stay = rng.random(n_events) < STAY
    ev_item = np.empty(n_events, dtype=np.int64)
    ev_item[stay] = by_cluster.draw(s_cluster[sess[stay]], rng)
    ev_item[~stay] = by_cat.draw(s_cat[sess[~stay]], rng)
    ev_user = s_user[sess]

    strength = _strength(log_price[ev_item], cat_log_price[item_cat[ev_item]], price_offset[ev_user],
                         quality[ev_item])
    r = rng.random(n_events)
    ev_type = np.ones(n_events, dtype=np.int64)
    for code, threshold in enumerate(TYPE_THRESHOLDS, start=2):
        ev_type[r < threshold * strength] = code

    gaps = rng.exponential(45.0, n_events)
    first = np.r_[0, np.cumsum(lengths)[:-1]]
    csum = np.cumsum(gaps)
    ev_ts = s_start[sess] + csum - np.repeat(csum[first], lengths)
    order = np.argsort(ev_ts, kind="stable")

    user_hist = np.bincount(ev_user, minlength=n_users)
    # Drawn from a stream of their own, so the rest of the world stays what it was for a given seed.
    extra = np.random.default_rng([seed, 2])
    second = (item_cat + extra.integers(1, n_cat, n_items)) % n_cat
    second[extra.random(n_items) >= 0.1] = -1
    return Marketplace(
        item_id=np.arange(1, n_items + 1),
        item_category=item_cat,
        item_price=np.round(np.exp(log_price), 2),
        item_created_at=now - rng.uniform(0, 120 * DAY, n_items),
        item_active=rng.random(n_items) > 0.03,
        item_quality=np.round(quality, 4),
        item_photos=rng.integers(1, 11, n_items),
        item_seller_rating=np.round(np.clip(rng.normal(4.2, 0.5, n_items), 1, 5), 2),
        user_id=np.arange(1, n_users + 1),
        user_created_at=now - rng.uniform(30 * DAY, 400 * DAY, n_users),
        user_history_version=user_hist,
        event_user=ev_user[order] + 1,
        event_item=ev_item[order] + 1,
        event_type=ev_type[order],
        event_ts=np.round(ev_ts[order], 3),
        item_second_category=second,
        latent=Latent(item_category=item_cat, item_cluster=cluster, appeal=appeal, quality=quality,
                      log_price=log_price, category_popularity=cat_pop, category_log_price=cat_log_price,
                      interests=interests, slot_weight=_slot_weights(n_interest), favourite_cluster=fav_cluster,
                      price_offset=price_offset),
    )


def _slot_weights(n_interest: np.ndarray) -> np.ndarray:
    """A session's slot is drawn 0.6/0.3/0.1 and clipped to the user's last interest (``generate``)."""
    w = np.zeros((len(n_interest), 3))
    for slot, share in enumerate(SLOT_SHARES):
        np.add.at(w, (np.arange(len(n_interest)), np.minimum(slot, n_interest - 1)), share)
    return w
