"""The serve benchmark's in-process part: what one request costs the app itself, measured through Flask's test
client with no HTTP server, next to a bare Redis round trip (the part of ``/feed`` no server choice can remove).

Every comparison is interleaved: the requests compared alternate in one loop, each first in turn, so the machine's
noise moves them alike, and each figure is a median of per-request times in microseconds."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from precompute.feeds.client import redis_client

from .floor import create_app
from .results import median

FEED, FLOOR = "/feed/{user}?limit=20", "/floor/{user}?limit=20"
DEEP_PAGE = 20     # the deep page measured, for up to ``deep_users`` users (those whose feed reaches it)
WARM = 50          # calls of each before timing


def per_call(calls: dict[str, Callable[[int], object]], n: int) -> dict[str, float]:
    """The median µs of each call, ``n`` calls of each alternating in one loop (``fn(k)`` at round ``k``)."""
    return {name: median(x) * 1e6 for name, x in timed(calls, n).items()}


def timed(calls: dict[str, Callable[[int], object]], n: int) -> dict[str, list[float]]:
    """Each call's ``n`` times in seconds, in round order (the calls of round ``k`` ran side by side)."""
    for k in range(WARM):
        for fn in calls.values():
            fn(k)
    times: dict[str, list[float]] = {name: [] for name in calls}
    order = list(calls.items())
    for k in range(n):
        for name, fn in order[k % len(order):] + order[:k % len(order)]:     # each call first in turn
            t0 = time.perf_counter()
            fn(k)
            times[name].append(time.perf_counter() - t0)
    return times


#: The diversity rule measured against the rule off (``?diversity=``): the setting ``evaluate`` finds cheapest.
DIVERSITY = "3/10"
#: Items of a page a request leaves out (``?exclude=``) when every rule is on: a carousel above the feed.
EXCLUDED = 5


def measure(world, n_users: int, n: int, deep_users: int) -> dict:
    """Floor against feed, the key check, the cursor, recording impressions and the turns; ``n`` requests per
    endpoint and loop."""
    settings = world.settings
    client = create_app(settings).test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = world.auth["Authorization"]
    r = redis_client(settings.feed_url)
    paths = {name: path.replace("{user}", "{}") for name, path in (("floor_us", FLOOR), ("feed_us", FEED))}

    out = per_call(dict(redis_ping_us=lambda k: r.ping(), livez_us=lambda k: client.get("/livez")), n)
    out.update(per_call({name: lambda k, p=p: client.get(p.format(k % n_users + 1)) for name, p in paths.items()}, n))
    # What the key check (with its rate) and the cursor cost a page, each pair alternating in a loop of its own (in
    # one loop of all six, the request after the open app's paid to warm the keyed app again, ~5 % of a page): the same
    # first page without a key (PREFEED_AUTH=off, no rate); pages 2 and DEEP_PAGE by cursor and by offset, with the key
    # and no cookie jar (the API sets none; the test client's jar reads every URL back twice, ~2 us per 100 characters).
    open_client = create_app(dataclasses.replace(settings, auth=False)).test_client()
    plain = client.application.test_client(use_cookies=False)
    plain.environ_base.update(client.environ_base)
    feed = paths["feed_us"]
    first = [feed.format(u + 1) for u in range(n_users)]
    second = [client.get(path).get_json()["next_cursor"] for path in first]
    spread = [f"{path}&diversity={DIVERSITY}" for path in first]      # also loads the categories' copy
    spread_second = [client.get(path).get_json()["next_cursor"] for path in spread]
    deep, deep_at = [(feed.format(u), c) for u in range(1, min(n_users, deep_users) + 1)
                     if (c := _scroll(client, feed.format(u), DEEP_PAGE))], 20 * (DEEP_PAGE - 1)
    for pair in ({"feed_keyed_us": lambda k: client.get(first[k % n_users]),
                  "feed_open_us": lambda k: open_client.get(first[k % n_users])},
                 {"feed_cursor_us": lambda k: plain.get(f"{first[k % n_users]}&cursor={second[k % n_users]}"),
                  "feed_offset_us": lambda k: plain.get(f"{first[k % n_users]}&offset=20")},
                 {"feed_cursor_deep_us": lambda k: plain.get("{}&cursor={}".format(*deep[k % len(deep)])),
                  "feed_offset_deep_us": lambda k: plain.get("{}&offset={}".format(deep[k % len(deep)][0], deep_at))},
                 # the diversity rule (off by default) asked for per request, on a first page and on page 2 by cursor
                 {"feed_diversity_us": lambda k: plain.get(spread[k % n_users]),
                  "feed_diversity_off_us": lambda k: plain.get(first[k % n_users])},
                 {"feed_diversity_cursor_us": lambda k: plain.get(f"{spread[k % n_users]}&cursor="
                                                                  f"{spread_second[k % n_users]}"),
                  "feed_diversity_off_cursor_us": lambda k: plain.get(f"{first[k % n_users]}&cursor="
                                                                      f"{second[k % n_users]}")}):
        out.update(per_call(pair, n))
    out.update(impressions(world, first, n))
    out.update(new_items(world, first, n))
    # What the turns cost a page when nothing waits (``api/turns.py``: a lock, the answer listed): the same app's
    # pages with and without its Turns middleware.
    bare = create_app(settings)
    bare.wsgi_app = bare.wsgi_app.wsgi_app
    bare_client = bare.test_client(use_cookies=False)
    bare_client.environ_base.update(client.environ_base)
    out.update(per_call({"feed_turns_us": lambda k: plain.get(first[k % n_users]),
                         "feed_no_turns_us": lambda k: bare_client.get(first[k % n_users])}, n))
    return {**out, "floor_over_feed": out["floor_us"] / out["feed_us"],
            "turns_over_none": out["feed_turns_us"] / out["feed_no_turns_us"],
            "keyed_over_open": out["feed_keyed_us"] / out["feed_open_us"],
            "cursor_over_offset": out["feed_cursor_us"] / out["feed_offset_us"],
            "cursor_over_offset_deep": out["feed_cursor_deep_us"] / out["feed_offset_deep_us"],
            "diversity_over_off": out["feed_diversity_us"] / out["feed_diversity_off_us"],
            "diversity_over_off_cursor": out["feed_diversity_cursor_us"] / out["feed_diversity_off_cursor_us"],
            "new_items_over_off": out["feed_new_items_us"] / out["feed_new_items_off_us"],
            "every_rule_over_none": out["feed_every_rule_us"] / out["feed_no_new_rule_us"],
            "cursor_chars": {"page_2": int(np.median([len(c) for c in second])),
                             f"page_{DEEP_PAGE}": int(np.median([len(c) for _, c in deep]))}}


def impressions(world, first: list[str], n: int, sends: int = 5) -> dict:
    """What recording a page as an impression costs it: the same first pages (with the key, no cookie jar) from two
    apps, ``PREFEED_IMPRESSIONS`` on and off, alternating in one loop; the median of each, and of the ``n`` rounds'
    on/off ratios (``impressions_on_over_off``: paired, so a slow spell of this shared machine that spans a round
    moves both of its pages and not the ratio). The on app's thread sends to Redis every
    ``PREFEED_IMPRESSIONS_FLUSH_MS`` as in production; a send runs beside whichever request is running, so its cost
    is measured apart: the median of ``sends`` sends of the pages one flush interval holds at the page rate just
    measured, per page (``impressions_send_per_page_us``)."""
    clients = {}
    for name, on in (("feed_impressions_on_us", True), ("feed_impressions_off_us", False)):
        clients[name] = create_app(dataclasses.replace(world.settings, impressions=on)).test_client(use_cookies=False)
        clients[name].environ_base["HTTP_AUTHORIZATION"] = world.auth["Authorization"]
    times = timed({name: lambda k, c=c: c.get(first[k % len(first)]) for name, c in clients.items()}, n)
    out = {name: median(x) * 1e6 for name, x in times.items()}
    out["impressions_on_over_off"] = median([a / b for a, b in zip(*times.values())])
    from api.services import services

    buffer = services(clients["feed_impressions_on_us"].application).impressions
    buffer.stopped.set()            # its thread ends: the sends below are the only ones
    buffer.flush()
    per_send = max(1, int(buffer.flush_s / (out["feed_impressions_on_us"] * 1e-6)))
    items = list(range(1, 21))
    took = []
    for _ in range(sends):
        for k in range(per_send):
            buffer.record(k + 1, 0, 0, time.time(), 0, items, "0123456789abcdef0123456789abcdef")
        t0 = time.perf_counter()
        buffer.flush()
        took.append((time.perf_counter() - t0) / per_send)
    return {**out, "impressions_send_per_page_us": median(took) * 1e6, "impressions_per_send": per_send}


#: New items waiting for impressions while the new-item rule's cost is measured, spread over the catalogue's
#: categories: a marketplace listing a thousand items an hour that each wait ~10 minutes for their impressions.
WAITING = 200


def new_items(world, first: list[str], n: int) -> dict:
    """What the new-item rule (``feeds/new_items.py``) costs a first page while ``WAITING`` items wait: the same
    pages from two apps, the rule on (one slot in ``PREFEED_NEW_ITEM_EVERY``) and off, alternating in one loop; and
    then the page with every rule on (items left out, diversity, new items) against the page with none of them. The
    items are registered last (every other figure is of a deployment with none waiting) and forgotten after."""
    from sqlalchemy import select

    from precompute.data.tables import ItemCategory
    from precompute.feeds.keys import Keys
    from precompute.feeds.new_items import NewItemRule, NewItems

    settings = world.settings
    with world.engine.connect() as conn:
        rows = conn.execute(select(ItemCategory.item_id, ItemCategory.category)
                            .order_by(ItemCategory.item_id.desc()).limit(WAITING)).all()
    keys, r = Keys(settings.key_prefix), redis_client(settings.feed_url)
    writer = NewItems(r, keys, NewItemRule.of(settings))
    now = time.time()
    writer.add([(i, now, (c,)) for i, c in rows], now)
    try:
        clients = {}
        for name, every in (("feed_new_items_us", max(1, settings.new_item_every)), ("feed_new_items_off_us", 0)):
            clients[name] = create_app(dataclasses.replace(settings, new_item_every=every)).test_client(
                use_cookies=False)
            clients[name].environ_base["HTTP_AUTHORIZATION"] = world.auth["Authorization"]
        placed = sum(any(x["item_id"] in {i for i, _ in rows} for x in
                         clients["feed_new_items_us"].get(path).get_json()["items"]) for path in first)
        out = per_call({name: lambda k, c=c: c.get(first[k % len(first)]) for name, c in clients.items()}, n)
        # Every rule of the page at once against none of the new ones (boosts and the seen filter, which pages had
        # before them, in both): EXCLUDED of the page's items left out, the diversity rule, the new items waiting.
        on, off = clients["feed_new_items_us"], clients["feed_new_items_off_us"]
        every = [f"{path}&diversity={DIVERSITY}&exclude="
                 + ",".join(str(x["item_id"]) for x in off.get(path).get_json()["items"][:EXCLUDED]) for path in first]
        out.update(per_call({"feed_every_rule_us": lambda k: on.get(every[k % len(every)]),
                             "feed_no_new_rule_us": lambda k: off.get(first[k % len(first)])}, n))
    finally:
        r.delete(keys.live_new, keys.live_new_shown, keys.live_new_at, keys.live_new_seq)
    return {**out, "new_items_waiting": len(rows), "new_items_pages_placed": placed / max(1, len(first))}


def _scroll(client, path: str, page: int) -> str | None:
    """The cursor of page ``page`` of a scroll from the top; None when the feed ends before."""
    cursor = client.get(path).get_json()["next_cursor"]
    for _ in range(page - 2):
        cursor = cursor and client.get(f"{path}&cursor={cursor}").get_json()["next_cursor"]
    return cursor
