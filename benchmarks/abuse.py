"""abuse: what a flood of made-up user ids and a storm of made-up keys cost the running product and its real users.

A prefeed of its own (``lab/product.py``: the log's catalogue and events, a trained model, its worker and API
processes) serves 200 real users of the log, who post events and read their feeds at a modest rate
(``lab/real_users.py``: the time from posting an event to the user's feed in Redis carrying it).

Phase 1, flood: the same real traffic runs twice side by side, for the same time: first alone, then while a key of
its own with the default limits floods ``POST /events`` with batches of user ids never seen before, at a stated
offered rate, from a process pinned to one core (``lab/flood.py``). Reported: the flood's answers (202 / 429), the
user rows and Redis memory it added against its caps (``PREFEED_KEY_NEW_USERS_PER_MINUTE`` a minute, as many at
once; the Redis bound is that many users at the largest footprint a sampled flood user has), and the real users'
event → fresh-feed p50/p99 in both runs (the flood's must stay within 2x).

Phase 2, keys: random bearer keys from addresses spread over 127.0.0.0/8 against two apps in this process
(``lab/key_storm.py``), every database query counted: at most one per distinct well-formed key and process, none
for a malformed one; real keys' feed pages timed in rounds without and with the storm (p99 within 1.5x).
"""

from __future__ import annotations

import time

from sqlalchemy import text

from precompute.data import api_keys
from precompute.data.log import load_events
from precompute.feeds.client import redis_client
from precompute.feeds.dirty import DirtyUsers
from precompute.feeds.keys import Keys
from precompute.learning.split import cut_time
from precompute.settings import Settings

from .lab import flood
from .lab.key_storm import storm
from .lab.logs import open_log
from .lab.product import Product
from .lab.real_users import RealUsers
from .lab.results import machine, table, write_result

#: The per-key cap on new user ids as shipped: ``Product`` lifts the setting for its replays, so the flood's key
#: carries it as its own (``keys create --new-users``).
NEW_USERS = Settings().key_new_users_per_minute
FULL = dict(seconds=60, offered=200, per_request=100, real_users=200, real_rate=10, keys=100_000, pages=5000,
            warm=10, cut=0.8, workers=2, iterations=200)
QUICK = dict(seconds=12, offered=200, per_request=100, real_users=200, real_rate=10, keys=2000, pages=400,
             warm=4, cut=0.8, workers=2, iterations=30)
#: Flood user ids count up from here: above every id of the logs the benchmarks use.
FIRST_FLOOD_USER = 1_000_000_000
#: Longest wait for the dirty set to empty after a run (the flood's accepted users recomputed) before memory is read.
SETTLE = 120.0


def run(quick: bool = False, postgres: str | None = None) -> dict:
    """``postgres``: the flood's phase again, with the product's database on that PostgreSQL server (its own
    schema), reported beside the SQLite run (``postgresql``)."""
    cfg = QUICK if quick else FULL
    on_postgres = None
    with open_log(quick) as (source, source_settings, name):
        events = load_events(source)
        cut = cut_time(events.ts, cfg["cut"])
        with Product(source, source_settings, events, cut, cfg) as product:
            users, items, real = _real_users(product, cfg)
            flooded = _phase_flood(product, real, items, cfg)
            s = product.settings
            storm_redis = redis_client(s.queue_url)
            before = _used_memory(storm_redis)
            keys = storm(s, product.auth["Authorization"].split()[1], users, cfg["keys"], cfg["pages"])
            keys["redis_bytes_added"] = _used_memory(storm_redis) - before
        if postgres:
            with Product(source, source_settings, events, cut, {**cfg, "postgres": postgres}) as product:
                _, pg_items, pg_real = _real_users(product, cfg)
                on_postgres = _phase_flood(product, pg_real, pg_items, cfg)
    out = dict(log=name, database="sqlite", config=cfg, offered_rate=dict(
        flood_requests_per_s=cfg["offered"], events_per_request=cfg["per_request"],
        flood_events_per_s=cfg["offered"] * cfg["per_request"], flood_seconds=cfg["seconds"],
        real_events_per_s=cfg["real_rate"], real_feed_reads_per_s=cfg["real_rate"], real_users=len(users),
        storm_keys=cfg["keys"], storm_keys_per_s=keys["rate_per_s"]), **flooded, keys=keys, machine=machine())
    if on_postgres is not None:
        out["postgresql"] = on_postgres
    _print(out)
    print(f"wrote {write_result('abuse', out, quick)}")
    return out


def _real_users(product, cfg: dict) -> tuple[list[int], list[int], RealUsers]:
    """The real users (the first ids of the log), the active items, and their driver, every feed computed once."""
    with product.engine.connect() as db:
        users = db.execute(text("SELECT id FROM users ORDER BY id LIMIT :n"), {"n": cfg["real_users"]}).scalars().all()
        items = db.execute(text("SELECT id FROM items WHERE active")).scalars().all()
    real = RealUsers(product, users, items, cfg["real_rate"])
    real.run(cfg["warm"])                            # every real user's feed computed once, not timed
    return users, items, real


def _phase_flood(product, real: RealUsers, items: list[int], cfg: dict) -> dict:
    """The real traffic alone, then beside the flood; what each added to the database and Redis."""
    s = product.settings
    r = redis_client(s.feed_url)
    dirty = DirtyUsers(redis_client(s.queue_url), s)
    flood_key = api_keys.create(product.engine, "flood", frozenset({"events:write"}), new_users=NEW_USERS)
    per_minute = NEW_USERS
    users0, mem0 = _users(product), _settled(r, dirty)
    without = real.run(cfg["seconds"])
    users1, mem1 = _users(product), _settled(r, dirty)
    proc, report = flood.start(product.port, flood_key, items, s.event_types[0][0], cfg["offered"],
                               cfg["per_request"], cfg["seconds"], FIRST_FLOOD_USER)
    with_flood = real.run(cfg["seconds"])
    answers = report.get(timeout=cfg["seconds"] + 120)
    proc.join(timeout=30)
    users2, mem2 = _users(product), _settled(r, dirty)
    users_cap = int(per_minute + per_minute / 60 * answers["seconds"])
    per_user = _largest_footprint(product, r)
    added = users2 - users1
    redis_added = (mem2 - mem1) - (mem1 - mem0)      # beyond what the same real traffic added alone
    return dict(
        flood=dict(sent=answers["sent"], offered=answers["slots"], achieved_per_s=answers["sent"] / answers["seconds"],
                   accepted=answers["statuses"].get("202", 0), refused_429=answers["statuses"].get("429", 0),
                   statuses=answers["statuses"], generator_cpu_seconds=answers["cpu_seconds"],
                   generator_seconds=answers["seconds"], generator_core=answers["core"],
                   new_users_per_minute=per_minute, users_added=added, users_cap=users_cap,
                   users_within_cap=added <= users_cap, redis_bytes_added=redis_added,
                   redis_bytes_per_user_max=per_user, redis_cap_bytes=users_cap * per_user,
                   redis_within_cap=redis_added <= users_cap * per_user),
        baseline=dict(users_added=users1 - users0, redis_bytes_added_without_flood=mem1 - mem0,
                      redis_bytes_added_with_flood=mem2 - mem1),
        real=dict(without_flood=without, with_flood=with_flood,
                  p50_ms_without=without["p50_ms"], p99_ms_without=without["p99_ms"],
                  p50_ms_with=with_flood["p50_ms"], p99_ms_with=with_flood["p99_ms"],
                  p99_ms_settled_without=without["p99_ms_settled"], p99_ms_settled_with=with_flood["p99_ms_settled"],
                  ratio=with_flood["p99_ms"] / without["p99_ms"],
                  within_2x=with_flood["p99_ms"] <= 2 * without["p99_ms"]))


def _users(product) -> int:
    with product.engine.connect() as db:
        return int(db.execute(text("SELECT count(*) FROM users")).scalar())


def _used_memory(r) -> int:
    return int(r.info("memory")["used_memory"])


def _settled(r, dirty: DirtyUsers) -> int:
    """Redis's ``used_memory`` once every dirty user is recomputed (up to ``SETTLE`` s): what a run's users left."""
    end = time.monotonic() + SETTLE
    while dirty.pending() and time.monotonic() < end:
        time.sleep(0.5)
    return _used_memory(r)


def _largest_footprint(product, r, sample: int = 200) -> int:
    """The most Redis bytes one flood user holds (its feed, its seen set, its events' rate bucket), over a sample of
    those the database took in."""
    keys = Keys(product.settings.key_prefix)
    with product.engine.connect() as db:
        ids = db.execute(text("SELECT id FROM users WHERE id >= :f ORDER BY id LIMIT :n"),
                         {"f": FIRST_FLOOD_USER, "n": sample}).scalars().all()
    most = 0
    for uid in ids:
        most = max(most, sum(r.memory_usage(k) or 0 for k in (keys.feed(uid), keys.seen_recent(uid), keys.rate_user(uid))))
    return most


def _print(out: dict) -> None:
    o, f, real, k = out["offered_rate"], out["flood"], out["real"], out["keys"]
    m = out["machine"]
    print(f"machine: {m['cpus']} cores ({m['cpu']}), {m['memory_gib']} GiB, load {m['load_average']}")
    print(f"offered: flood {o['flood_requests_per_s']} requests/s x {o['events_per_request']} events "
          f"({o['flood_events_per_s']:,} events/s of new user ids) for {o['flood_seconds']} s from one core; real "
          f"users {o['real_users']}, {o['real_events_per_s']} events/s + as many feed reads; key storm "
          f"{o['storm_keys']:,} keys at {o['storm_keys_per_s']:,.0f}/s")
    _print_flood("phase 1, flood: one key, default limits (SQLite)", f, real)
    if "postgresql" in out:
        pg = out["postgresql"]
        _print_flood("phase 1 again, the product's database on PostgreSQL", pg["flood"], pg["real"])
    print(table(f"phase 2, keys: {k['requests']:,} storm requests over two API apps in process",
                ["well-formed", "distinct", "queries", "most per key+process", "malformed", "queries",
                 "Redis MiB added"],
                [[k["well_formed_requests"], k["distinct_well_formed"], k["queries_unknown"],
                  k["most_queries_one_key_one_process"], k["malformed_requests"], k["queries_malformed"],
                  k["redis_bytes_added"] / 2 ** 20]]))
    kr = k["real"]
    print(f"real keys' feed page: p50 {kr['p50_ms_without']:.2f} / {kr['p50_ms_with']:.2f} ms, p99 "
          f"{kr['p99_ms_without']:.2f} / {kr['p99_ms_with']:.2f} ms without / with the storm "
          f"({kr['ratio_p99']:.2f}x, limit 1.5x); answers {k['statuses']}")


def _print_flood(title: str, f: dict, real: dict) -> None:
    print(table(title, ["sent", "reached /s", "202", "429", "users added", "users cap", "Redis MiB added",
                        "Redis cap MiB"],
                [[f["sent"], f["achieved_per_s"], f["accepted"], f["refused_429"], f["users_added"], f["users_cap"],
                  f["redis_bytes_added"] / 2 ** 20, f["redis_cap_bytes"] / 2 ** 20]]))
    rows = [[name, run["events"], run["fresh"], run["not_fresh"], run["p50_ms"], run["p99_ms"], run["p99_ms_settled"],
             run["post_p99_ms"], run["feed_read_p99_ms"]]
            for name, run in (("without flood", real["without_flood"]), ("with flood", real["with_flood"]))]
    print(table(f"real users' event -> fresh feed (p99 with/without {real['ratio']:.2f}x, limit 2x)",
                ["run", "events", "fresh", "not fresh", "p50 ms", "p99 ms",
                 f"p99 ms after {real['with_flood']['settled_after_s']:g} s", "POST p99 ms", "feed read p99 ms"],
                rows))

