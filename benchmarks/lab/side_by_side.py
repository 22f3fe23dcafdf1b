"""The precompute benchmark's side-by-side measurements (``benchmarks/precompute.py``): the cascade beside the full
model, and what the shown columns add to a rebuild, each on the same users in the same run."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
from sqlalchemy import delete, insert

from precompute.data import item_days
from precompute.data.history import load_histories
from precompute.data.tables import ItemDay, ServedPage
from precompute.pipeline.pipeline import STAGES
from precompute.ranking import features
from precompute.ranking.layout import for_declaration

from .results import median


def cascade_side_by_side(pipeline, batches: list[list[int]], repeats: int) -> dict:
    """Per-user stage times (ms, medians over ``repeats``) of rebuilding ``batches`` in this process by the bundle
    as trained (with its first stage) and by the same bundle without one, the two alternating round by round."""
    staged = pipeline.bundle
    if staged.cascade is None:
        raise RuntimeError("the benchmark's bundle has no first stage (PREFEED_CASCADE_KEEP=0?)")
    bundles = {"full model": dataclasses.replace(staged, cascade=None), "cascade": staged}
    runs: dict[str, list[dict]] = {label: [] for label in bundles}
    n = sum(len(b) for b in batches)
    try:
        for _ in range(repeats):
            for label, b in bundles.items():
                pipeline.bundle = b
                seconds = dict.fromkeys(STAGES, 0.0)
                for batch in batches:
                    res = pipeline.recompute(batch)
                    for k in STAGES:
                        seconds[k] += res.seconds[k]
                runs[label].append(seconds)
    finally:
        pipeline.bundle = staged
    per_user = {label: {k: 1000 * median([t[k] for t in r]) / n for k in STAGES} for label, r in runs.items()}
    return dict(keep=staged.cascade.keep, per_user_ms=per_user,
                users_per_s_per_core={label: 1000 / sum(ms.values()) for label, ms in per_user.items()})


def per_user_ms_of(seconds: dict[str, float], users: list[int]) -> dict[str, float]:
    return {k: 1000 * v / len(users) for k, v in seconds.items()}


#: Pages stored per user for the shown columns' cost: a user who read a page a day for the last
#: ``PREFEED_IMPRESSIONS_KEEP`` and scrolled, or a heavy reader.
SHOWN_PAGES, SHOWN_PAGE_ITEMS = 20, 20


def shown_cost(pipeline, batches: list[list[int]], repeats: int, rebuild_ms: float) -> dict:
    """What ranking with the shown columns adds to a user's rebuild, with ``SHOWN_PAGES`` pages stored per user and
    every item counted on each day of the item columns' window: the worker's read of the pages (``Pipeline.shown``:
    one query per batch, then the aggregate, cut per chunk; the items' days read once, as a worker does per day) and
    the columns, timed against building the same candidates' columns without them, chunk by chunk of
    ``PREFEED_RANK_CHUNK_USERS`` users as ``Pipeline.build_feeds`` ranks them, in alternating order. (Built for a
    whole batch at once, the matrix is ~0.5 GB and the time is that of faulting its pages in, which varied 2x
    between two identical builds.) The model's cost is left out: an oblivious tree costs its depth whatever the
    number of columns. ``rebuild_ms``: the rebuild without."""
    engine, items_off = pipeline.engine, pipeline.items
    s = pipeline.settings
    layout = for_declaration(tuple(s.item_attributes), tuple(n for n, _ in s.event_types), shown=True)
    items_on = dataclasses.replace(items_off, layout=layout)
    users = [u for b in batches for u in b]
    rng = np.random.default_rng(0)
    writer = 990_000_001
    clock = float(load_histories(engine, users[:1], items_off, s).clock)
    rows = [dict(writer=writer, seq=k, user_id=u, experiment=0, arm=0, served_at=clock - (p + 1) * 3600.0,
                 position=0, items=rng.choice(items_off.ids, SHOWN_PAGE_ITEMS).astype("<i8").tobytes(),
                 request_id="bench") for k, (u, p) in enumerate((u, p) for u in users for p in range(SHOWN_PAGES))]
    # Every item's counts on every user's pages, each day of the window before the clock's (the item columns' worst
    # case: none is missing), as the collector keeps them.
    today = item_days.day_of(clock)
    days = [dict(item_id=int(i), day=today - d, kind=kind, count=int(n))
            for i in items_off.ids.tolist() for d in range(1, item_days.WINDOW_DAYS + 1)
            for kind, n in ((item_days.SHOWN, rng.integers(1, 200)), (1, rng.integers(0, 20)))]
    with engine.begin() as conn:
        conn.execute(insert(ServedPage), rows)
        conn.execute(delete(ItemDay))
        conn.execute(insert(ItemDay), days)
    read, on, off = [], [], []
    chunk, k = s.rank_chunk_users, 0
    # The items' days are read once per day and item table, by a worker's parent before it forks (``Pipeline``):
    # timed apart, then held for the rounds, as the work horses find them.
    daily_s = timed(lambda: item_days.window_sums(engine, items_on.rows, today))
    pipeline.items = items_on
    pipeline.shown(load_histories(engine, batches[0][:1], items_off, s))
    pipeline.items = items_off
    try:
        for _ in range(repeats):
            t_read = t_on = t_off = 0.0
            for batch in batches:
                hist = load_histories(engine, batch, items_off, s)
                pipeline.items = items_on
                t0 = time.perf_counter()
                batch_seen = pipeline.shown(hist)
                t_read += time.perf_counter() - t0
                pipeline.items = items_off
                for start in range(0, len(hist), chunk):
                    part = hist.slice(start, min(start + chunk, len(hist)))
                    cand = pipeline.candidates(part)
                    t0 = time.perf_counter()
                    seen = batch_seen.slice(start, start + len(part))
                    t_read += time.perf_counter() - t0
                    # Which build goes first alternates: the first after the candidates reads them from memory,
                    # the second from cache.
                    k += 1
                    for with_shown in (True, False) if k % 2 == 0 else (False, True):
                        if with_shown:
                            t_on += timed(lambda: features.build(items_on, part, cand, part.clock, shown=seen))
                        else:
                            t_off += timed(lambda: features.build(items_off, part, cand, part.clock))
            read.append(t_read), on.append(t_on), off.append(t_off)
    finally:
        pipeline.items = items_off
        with engine.begin() as conn:
            conn.execute(delete(ServedPage).where(ServedPage.writer == writer))
            conn.execute(delete(ItemDay))
    ms = {k: 1000 * median(v) / len(users) for k, v in (("read", read), ("on", on), ("off", off))}
    added = ms["read"] + ms["on"] - ms["off"]
    return dict(pages_per_user=SHOWN_PAGES, page_items=SHOWN_PAGE_ITEMS, read_ms=ms["read"],
                daily_read_ms=1000 * daily_s, features_on_ms=ms["on"],
                features_off_ms=ms["off"], added_ms=added, rebuild_ms=rebuild_ms,
                ratio=(rebuild_ms + added) / rebuild_ms)


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
