"""shapes: the synthetic marketplace reshaped into the logs docs/replay.md measures beyond the three logs, so that
each of its numbers can be rebuilt. ``python -m benchmarks shapes NAME`` loads one into the environment's database
(``PREFEED_VAR_DIR`` / ``DATABASE_URL``, created if needed, refused if it holds a marketplace already):

- ``baskets``: every event a purchase, its time cut to the day, so that a step is a day's basket and the order
  within it is gone (2,000 users, 20,000 items, 300,000 events, seed 5);
- ``year``: baskets at a grocery's size, times stretched twelvefold to a year and moved a year back, so that no event
  lies ahead of the clock (2,500 users, 68,000 items, 1,200,000 events, seed 7);
- ``promotions``: ``baskets`` with half of its purchases moved to items on promotion that day, whatever the buyer's
  taste (what sold yesterday is the best guess by far);
- ``category-promotions``: the same, but a purchase moves only to a promotion of its own item's category (a shopper
  takes the offers of what they buy anyway): both the day's offers and each shopper's taste say what sells next.

Promotions: ``PER_DAY`` (20) start each day, each of an item listed by then, and run ``DAYS`` (3); each has a
strength drawn from a Zipf law (exponent 1.6, capped at 50) that halves on each later day; a purchase moved goes to a
promotion running that day with a probability in proportion to its strength (among those of its category, for
``category-promotions``; it stays where it was when none runs).
"""

from __future__ import annotations

import dataclasses
import time

import click
import numpy as np

from precompute.data import bulk, engine as db, synthetic
from precompute.errors import PrefeedError
from precompute.settings import Settings

DAY = 86400.0
PER_DAY = 20
DAYS = 3
ZIPF, CAP = 1.6, 50.0
#: Each shape's generator sizes and seed: (users, items, events, seed).
SIZES = {"baskets": (2000, 20_000, 300_000, 5), "year": (2500, 68_000, 1_200_000, 7),
         "promotions": (2000, 20_000, 300_000, 5), "category-promotions": (2000, 20_000, 300_000, 5)}
PROMOTION_SEED = 13
PROMOTION_SHARE = 0.5


def baskets(m: synthetic.Marketplace, purchase: int) -> synthetic.Marketplace:
    """Every event of type ``purchase`` (its code), at the start of its day (UTC)."""
    return dataclasses.replace(m, event_ts=np.floor(m.event_ts / DAY) * DAY,
                               event_type=np.full_like(m.event_type, purchase))


def stretched(m: synthetic.Marketplace, factor: float, back: float) -> synthetic.Marketplace:
    """Event times ``factor`` times as far from the first event, then ``back`` seconds earlier; the items' creation
    times move back the same."""
    start = float(m.event_ts.min()) if len(m.event_ts) else 0.0
    return dataclasses.replace(m, event_ts=start + (m.event_ts - start) * factor - back,
                               item_created_at=m.item_created_at - back)


def promoted(m: synthetic.Marketplace, share: float, seed: int, by_category: bool = False) -> synthetic.Marketplace:
    """``share`` of the events, each day's drawn alike, moved to an item on promotion that day (module docstring)."""
    rng = np.random.default_rng(seed)
    day = np.floor(m.event_ts / DAY).astype(np.int64)
    first, last = int(day.min()), int(day.max())
    n_days = last - first + 1
    # Promotions by the day they start: items, strengths; running on day d are those started on d - DAYS + 1 .. d.
    # A promotion is of an item listed by its first day (an offer cannot sell an item before it exists).
    created_day = np.floor(np.nan_to_num(m.item_created_at, nan=-np.inf) / DAY)
    p_item = np.stack([rng.choice(np.flatnonzero(created_day <= first + d), PER_DAY) for d in range(n_days)])
    p_strength = np.minimum(rng.zipf(ZIPF, (n_days, PER_DAY)).astype(np.float64), CAP)
    category = np.asarray(m.item_category)
    row_of = _rows(m)
    item = m.event_item.copy()
    moved = rng.random(len(item)) < share
    for d in range(n_days):
        picks = np.flatnonzero(moved & (day == first + d))
        started = np.arange(max(0, d - DAYS + 1), d + 1)
        items = p_item[started].ravel()
        weights = (p_strength[started] / 2.0 ** (d - started)[:, None]).ravel()
        if not by_category:
            item[picks] = m.item_id[rng.choice(items, len(picks), p=weights / weights.sum())]
            continue
        own = category[row_of[item[picks]]]
        for c in np.unique(own):
            here = picks[own == c]
            offer = category[items] == c
            if offer.any():
                w = weights[offer]
                item[here] = m.item_id[rng.choice(items[offer], len(here), p=w / w.sum())]
    return dataclasses.replace(m, event_item=item)


def listed_by_first_event(m: synthetic.Marketplace) -> synthetic.Marketplace:
    """Each item's creation time no later than its first event. The generator draws listing times apart from the
    events (a tenth of them would fall on items not listed yet), and ``evaluate`` keeps an item created after its cut
    out of the replay while a running worker serves it as soon as it sells: on a log with such items the two would
    differ by the generator's inconsistency, not by what the product does."""
    first = np.full(len(m.item_id), np.inf)
    np.minimum.at(first, _rows(m)[m.event_item], m.event_ts)
    return dataclasses.replace(m, item_created_at=np.fmin(m.item_created_at, first))


def _rows(m: synthetic.Marketplace) -> np.ndarray:
    """Item id → its row in the marketplace's item arrays."""
    row_of = np.full(int(m.item_id.max()) + 1, -1, dtype=np.int64)
    row_of[m.item_id] = np.arange(len(m.item_id))
    return row_of


def build(name: str, now: float, users: int | None = None, items: int | None = None,
          events: int | None = None) -> synthetic.Marketplace:
    """The marketplace of shape ``name`` (sizes default to ``SIZES``), its clock ``now``."""
    n_users, n_items, n_events, seed = SIZES[name]
    m = synthetic.generate(users or n_users, items or n_items, events or n_events, seed=seed, now=now)
    purchase = 4                                   # the synthetic marketplace's types: view, click, contact, purchase
    if name == "year":
        m = stretched(m, 12.0, 365 * DAY)
    m = baskets(m, purchase)
    if name.endswith("promotions"):
        m = promoted(m, PROMOTION_SHARE, PROMOTION_SEED, by_category=name == "category-promotions")
    return listed_by_first_event(m)


@click.command()
@click.argument("name", type=click.Choice(list(SIZES)))
@click.option("--users", type=click.IntRange(10), help="Instead of the shape's size.")
@click.option("--items", type=click.IntRange(50), help="Instead of the shape's size.")
@click.option("--events", type=click.IntRange(100), help="Instead of the shape's size.")
def main(name: str, users: int | None, items: int | None, events: int | None) -> None:
    """Load the shape NAME into the environment's database."""
    try:
        settings = Settings.from_env()
        engine = db.make_engine(settings.database_url, settings)
    except PrefeedError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        db.init_db(engine, settings)
        if bulk.has_data(engine):
            raise click.ClickException(f"{settings.database_url} already holds a marketplace")
        m = build(name, time.time(), users, items, events)
        bulk.load(engine, m, settings)
    finally:
        engine.dispose()
    click.echo(f"loaded {name}: {len(m.item_id)} items, {len(m.user_id)} users, {len(m.event_ts)} events "
               f"into {settings.database_url}")


if __name__ == "__main__":
    main()
