"""new_items: do items created after the cut get seen, and what does it cost the feed? (``feeds/new_items.py``)

The synthetic marketplace at the demo's size, with ``NEW_SHARE`` of its items created after the cut instead (each at
a time drawn between the cut and a day before the log ends; their events before that time are dropped). A fresh
prefeed holds the catalogue without them and the log before the cut, trained as ``evaluate`` trains. The log after
the cut is then lived through the product in time order:

- an item is created with ``PUT /items/<id>`` (its categories, price, ``created_at``) at its creation time;
- a user who starts a session (their first event after the cut, or one ``PREFEED_SESSION_GAP`` after their
  previous) first reads their feed, ``GET /feed/<user>?limit=LIMIT``, then their session's events are posted.

Once with the rule off (``PREFEED_NEW_ITEM_EVERY=0``) and once at each setting of ``EVERY``, the same log, model
seed and reads. For each run: the share of the new items that had ``IMPRESSIONS`` impressions (on the pages this
client read) within a day of their creation, and that had any; NDCG@10 of each page's first 10 items against the
distinct items of the session that follows it, with its ratio to the run without the rule (a 95 % bootstrap
interval over users: the runs read the same users at the same times); and the share of a page's items on the same
user's previous page ("repeated", ``replay.repeat_share``). "Past the threshold": impressions a new item
had in a rule's slot after this client had seen it reach the threshold, which the live count allows for one flush
and one refresh interval (set here to 100 ms each, since the log plays a day in seconds).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from sqlalchemy import select

from precompute.data import bulk, engine as db, synthetic
from precompute.data.log import load_events
from precompute.data.tables import Item, ItemAttribute, ItemCategory
from precompute.learning import bootstrap
from precompute.learning.replay import repeat_share
from precompute.learning.split import cut_time
from precompute.settings import Settings
from precompute.units import DAY

from .lab.product import Product
from .lab.results import table, write_result
from .lab.world import QUICK_TRAIN_PERIODS

#: Items created after the cut instead, of the catalogue.
NEW_SHARE = 0.02
#: The rule's settings measured, after the run without it; and the threshold of a run (this log's pages are few: a
#: user reads one page a session, ~400 pages a day for ~12 new items a day).
EVERY = (20, 10)
IMPRESSIONS = 20
LIMIT = 20
FULL = dict(users=2000, items=3000, events=100_000, cut=0.8, workers=2, iterations=None, every=EVERY)
QUICK = dict(users=300, items=1500, events=30_000, cut=0.8, workers=1, iterations=30, every=(10,))
K = 10


def run(quick: bool = False) -> dict:
    cfg = QUICK if quick else FULL
    tmp = Path(tempfile.mkdtemp(prefix="prefeed-new-items-"))
    try:
        source, settings, new, created = _log(tmp, cfg, quick)
        events = load_events(source)
        cut = cut_time(events.ts, cfg["cut"])
        runs = [_live(source, settings, events, cut, cfg, new, created, every) for every in (0, *cfg["every"])]
        source.dispose()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    off = runs[0]
    for r in runs:
        r["ndcg_ratio"] = r["ndcg"] / off["ndcg"] if off["ndcg"] > 0 else None
        r["ndcg_interval"] = bootstrap.ratio_interval(r.pop("per_user"), off["per_user"]) if r is not off else None
    off.pop("per_user")
    out = dict(log="synthetic", cut_quantile=cfg["cut"], new_items=int(len(new)), impressions=IMPRESSIONS,
               limit=LIMIT, pages=runs[0]["pages"], runs=runs)
    print(table(f"new items on the synthetic marketplace: {len(new)} created after the cut, {out['pages']:,} pages "
                f"of {LIMIT} read; threshold {IMPRESSIONS} impressions",
                ["PREFEED_NEW_ITEM_EVERY", f"seen {IMPRESSIONS}x within a day", "seen at all within a day",
                 "NDCG@10", "/ off", "95% interval", "past the threshold (max)", "repeated"],
                [[r["every"] or "off", f"{r['reached_share']:.0%}", f"{r['any_share']:.0%}", r["ndcg"],
                  "-" if r["ndcg_ratio"] is None else f"{r['ndcg_ratio']:.3f}x",
                  "-" if r["ndcg_interval"] is None else f"{r['ndcg_interval'][0]:.3f}-{r['ndcg_interval'][1]:.3f}",
                  r["past_threshold_max"], f"{r['repeated']:.3f}"] for r in runs]))
    print(f"wrote {write_result('new_items', out, quick)}")
    return out


def _log(tmp: Path, cfg: dict, quick: bool):
    """The synthetic marketplace with ``NEW_SHARE`` of its items created after the cut (their earlier events
    dropped), in a SQLite database in ``tmp``: ``(engine, settings, new item ids, their created_at)``."""
    settings = Settings(database_url=f"sqlite:///{tmp / 'log.db'}", var_dir=tmp, model_dir=tmp / "models",
                        item_attributes=synthetic.ATTRIBUTES,
                        **({"train_periods": QUICK_TRAIN_PERIODS} if quick else {}))
    # a day back: a session drawn near its end runs on past it, and its events must not lie ahead of the wall clock
    market = synthetic.generate(cfg["users"], cfg["items"], cfg["events"], seed=0, now=time.time() - DAY)
    cut = float(np.quantile(market.event_ts, cfg["cut"]))
    rng = np.random.default_rng(1)
    new = np.sort(rng.choice(market.item_id, int(len(market.item_id) * NEW_SHARE), replace=False))
    created = np.round(rng.uniform(cut, market.event_ts.max() - DAY, len(new)), 3)
    when = np.full(len(market.item_id) + 1, -np.inf)
    when[new] = created
    market.item_created_at[new - 1] = created
    market.item_active[new - 1] = True
    keep = market.event_ts >= when[market.event_item]
    market = dataclasses.replace(
        market, event_user=market.event_user[keep], event_item=market.event_item[keep],
        event_type=market.event_type[keep], event_ts=market.event_ts[keep],
        user_history_version=np.bincount(market.event_user[keep] - 1, minlength=len(market.user_id)))
    engine = db.make_engine(settings.database_url, settings)
    db.init_db(engine, settings)
    bulk.load(engine, market, settings)
    return engine, settings, new, created


def _live(source, source_settings, events, cut: float, cfg: dict, new: np.ndarray, created: np.ndarray,
          every: int) -> dict:
    """One run of the log after the cut through a fresh product with the rule at ``every`` (0: off)."""
    changes = dict(new_item_every=every, new_item_impressions=IMPRESSIONS, impressions_flush_ms=100,
                   live_refresh_ms=100)
    product_cfg = dict(cfg, settings=changes, held_items=new.tolist())
    bodies = _bodies(source, new)
    gap = source_settings.session_gap
    pages: list[tuple[int, float, list[int]]] = []      # (user, time, item ids) of each page read
    with Product(source, source_settings, events, cut, product_cfg) as product:
        names = [name for name, _ in product.settings.event_types]
        user, ts = events.user, events.ts
        order = np.argsort(created, kind="stable")
        c = 0
        last: dict[int, float] = {}
        for k in range(product.n_posted, len(ts)):
            t, u = float(ts[k]), int(user[k])
            while c < len(order) and created[order[c]] <= t:
                product.post_until(names, k)            # the clock at the item's creation
                item = int(new[order[c]])
                status, _ = product.request(product.http, "PUT", f"/items/{item}", json.dumps(bodies[item]),
                                            {"Content-Type": "application/json"})
                if status != 201:
                    raise RuntimeError(f"PUT /items/{item} answered {status}")
                c += 1
            if t - last.get(u, -np.inf) > gap:         # a session starts: the user opens their feed first
                product.post_until(names, k)
                status, body = product.get(f"/feed/{u}?limit={LIMIT}")
                if status != 200:
                    raise RuntimeError(f"GET /feed/{u} answered {status}")
                pages.append((u, t, [x["item_id"] for x in body["items"]]))
            last[u] = t
        product.post_until(names, len(ts))
    return dict(every=every, pages=len(pages), **_judge(pages, events, cut, gap, new, created, every))


def _bodies(source, new: np.ndarray) -> dict[int, dict]:
    """The ``PUT /items`` body of each new item, as the source catalogue holds it."""
    ids = new.tolist()
    with source.connect() as conn:
        rows = {r.id: dict(price=r.price, created_at=r.created_at, categories=[], attributes={})
                for r in conn.execute(select(Item.id, Item.price, Item.created_at).where(Item.id.in_(ids)))}
        for item, cat in conn.execute(select(ItemCategory.item_id, ItemCategory.category)
                                      .where(ItemCategory.item_id.in_(ids))):
            rows[item]["categories"].append(cat)
        for item, name, value in conn.execute(select(ItemAttribute.item_id, ItemAttribute.name,
                                                     ItemAttribute.value).where(ItemAttribute.item_id.in_(ids))):
            rows[item]["attributes"][name] = value
    return rows


def _judge(pages, events, cut: float, gap: float, new: np.ndarray, created: np.ndarray, every: int) -> dict:
    """NDCG@10 of each page against its session's items, per user; and the new items' impressions."""
    after = events.ts > cut
    user, item, ts = events.user[after], events.item[after], events.ts[after]
    by_user: dict[int, list[int]] = {}
    for k, u in enumerate(user.tolist()):
        by_user.setdefault(u, []).append(k)
    discount = 1.0 / np.log2(np.arange(2, K + 2))
    gains, owners = [], []
    for u, t, ids in pages:
        rows = by_user[u]
        first = rows[int(np.searchsorted(ts[rows], t))]
        session = {int(item[first])}
        prev = float(ts[first])
        for r in rows[rows.index(first) + 1:]:
            if ts[r] - prev > gap:
                break
            session.add(int(item[r]))
            prev = float(ts[r])
        hits = np.array([i in session for i in ids[:K]], dtype=float)
        ideal = discount[:min(len(session), K)].sum()
        gains.append(float((hits * discount[:len(hits)]).sum() / ideal))
        owners.append(u)
    gains_a, owners_a = np.array(gains), np.array(owners)
    users, pos = np.unique(owners_a, return_inverse=True)
    per_user = np.bincount(pos.ravel(), weights=gains_a, minlength=len(users))
    born = dict(zip(new.tolist(), created.tolist()))
    seen: dict[int, list[float]] = {i: [] for i in born}
    past = dict.fromkeys(born, 0)
    for _, t, ids in pages:
        for k, i in enumerate(ids):
            if i in born and born[i] <= t < born[i] + DAY:
                if every and len(seen[i]) >= IMPRESSIONS and (k + 1) % every == 0:
                    past[i] += 1
                seen[i].append(t)
    reached = [len(v) >= IMPRESSIONS for v in seen.values()]
    repeated = repeat_share(np.array([u for u, _, _ in pages]), [np.array(ids, dtype=np.int64) for _, _, ids in pages])
    return dict(ndcg=float(gains_a.mean()) if len(gains) else 0.0, per_user=per_user, repeated=repeated,
                reached_share=float(np.mean(reached)), any_share=float(np.mean([bool(v) for v in seen.values()])),
                impressions_median=float(np.median([len(v) for v in seen.values()])),
                past_threshold_max=int(max(past.values(), default=0)))
