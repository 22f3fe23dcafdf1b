"""The performance page's sections: for each benchmark, what it measures and how its results file's figures are
shown (``performance_page.py`` puts them together)."""

from __future__ import annotations

import math

from .figures import figure, interval, percent, table, times
from .abuse_sections import abuse, hot_user
from .precompute_section import precompute
from .quality_sections import ablation, closed_loop, experiment, new_items, protocols, served


def _fork(res: dict) -> list[str]:
    cfg, r = res["config"], res["jobs_per_s"]
    return [*table(["variant", "jobs", "jobs/s", "users/s"], [
        ["(a) stock `rq.Worker`, nothing initialised before fork: every job loads the bundle and matrices",
         figure(cfg["jobs_a"]), figure(r["a"]), figure(r["a"])],
        ["(b) prefeed worker, initialised once before fork", figure(cfg["jobs"]), figure(r["b"]), figure(r["b"])],
        ["(c) stock `rq worker`, no-op jobs (the floor of queue and fork)", figure(cfg["jobs"]), figure(r["c"]), "–"],
        [f"(d) prefeed worker, {cfg['batch']} users per job", figure(math.ceil(cfg["jobs"] / cfg["batch"])),
         figure(r["d_jobs"]), figure(r["d_users"])]]),
            "",
            f"b/a = **{times(res['ratio_b_over_a'])}** (init before fork against init in every job), "
            f"b/c = {figure(res['ratio_b_over_c'], 2)} (a precompute job against a no-op job), "
            f"d/b = {times(res['ratio_d_users_over_b'])} in users/s."]


#: The serve benchmark's runs and ratios as the page names them (others shown by their key).
SERVE_RUNS = {"feed": "`GET /feed/<user>?limit=20`, boosts on 2% of items, a `feed:read` key, impressions on, "
                      "every user in an A/A experiment", "floor":
              "`GET /floor/<user>?limit=20`: the page's bytes as the same JSON, no live rules",
              "feed_sync_workers": "`GET /feed` under sync workers",
              "feed_turns_unbounded": "`GET /feed` with a turn per thread (`PREFEED_API_CONCURRENCY` = threads)",
              "bare": "`GET /livez` (the framework floor)",
              "realtime": "ranking the user's candidates per request (real time)",
              "events": "`POST /events`, one event per request"}
SERVE_RATIOS = {"ratio_feed_over_floor": "feed / floor", "ratio_feed_over_bare": "feed / `livez`",
                "ratio_feed_over_realtime": "feed / real time", "ratio_threaded_over_sync": "threaded / sync workers",
                "ratio_turns_over_unbounded": "turns (4) / a turn per thread"}


def _serve(res: dict) -> list[str]:
    cfg, runs = res.get("config", {}), res.get("runs", {})
    rows = []
    for key, x in runs.items():
        label = SERVE_RUNS.get(key, key)
        if len(x.get("all_rps") or []) > 1:
            label += f" (median of {len(x['all_rps'])} runs)"
        rows.append([label, figure(x.get("rps"), 0), figure(x.get("p50_ms")), figure(x.get("p99_ms")), figure(x.get("errors"))])
    ratios = [f"{SERVE_RATIOS.get(k, k.removeprefix('ratio_'))} = **{figure(v, 2)}**" for k, v in res.items()
              if k.startswith("ratio_") and k != "ratio_impressions_on_over_off" and isinstance(v, (int, float))]
    inner = dict(res.get("in_process_us", {}))
    on, off, send = (inner.pop(k, None) for k in ("feed_impressions_on_us", "feed_impressions_off_us",
                                                  "impressions_send_per_page_us"))
    out = [f"{cfg.get('connections', '?')} connections, {cfg.get('seconds', '?')} s per run, gunicorn × "
           f"{cfg.get('http_workers', '?')}, load by {res.get('generator', '?')}.", "",
           *table(["endpoint", "requests/s", "p50 ms", "p99 ms", "errors"], rows), ""]
    if ratios:
        out += ["; ".join(ratios) + ".", ""]
    if inner:
        out += table(["in process (Flask's test client, no HTTP server)", "median"],
                      [[k.removesuffix("_us").replace("_", " "), f"{figure(v)} µs" if k.endswith("_us") else times(v)]
                       for k, v in inner.items()])
    if on is not None:
        out += ["", f"Recording every page as an impression (`PREFEED_IMPRESSIONS`), the same first pages from two "
                f"apps alternating in process: {figure(on)} µs per page on, {figure(off)} µs off (medians), on / off = "
                f"**{times(res['ratio_impressions_on_over_off'])}** (the median of the rounds' ratios); the thread's "
                f"send to Redis of the {figure(res.get('impressions_per_send'))} pages of one flush interval: "
                f"{figure(send)} µs per page."]
    return out


def _freshness(res: dict) -> list[str]:
    cfg = res["config"]
    return [f"{cfg['rate']} events/s for {cfg['seconds']} s on {cfg['users']:,} users, 2 workers.", "",
            *table(["events", "achieved events/s", "p50 ms", "p99 ms", "max ms",
                     f"not fresh after {cfg['deadline']:g} s", "failed jobs"],
                    [[figure(res["events"]), figure(res["achieved_rate"]), figure(res["p50_ms"]), figure(res["p99_ms"]),
                      figure(res["max_ms"]), figure(res["timed_out"]), figure(res.get("failed_jobs"))]])]


def _memory(res: dict) -> list[str]:
    roles = {"pool": "pool parent (holds the pipeline)", "worker": "worker process (forked from it)",
             "horse": "work horse (forked per job)"}
    return [f"Peak per process during a {res['config']['rebuild_users']:,}-user rebuild through `manage.py worker "
            "--workers 2`.", "",
            *table(["process", "count", "RSS MiB, median", "RSS MiB, max", "PSS MiB, median", "PSS MiB, max",
                     "USS MiB, max"],
                    [[roles.get(role, role), p["count"], figure(p["rss_mib_median"], 0), figure(p["rss_mib_max"], 0),
                      figure(p["pss_mib_median"], 0), figure(p["pss_mib_max"], 0), figure(p["uss_mib_max"], 0)]
                     for role, p in res["processes"].items()]),
            "",
            f"One user's feed ({res['feed_length']:,} items at most): {figure(res['feed_value_bytes_mean'], 0)} bytes of "
            f"value, {figure(res['feed_redis_bytes_mean'], 0)} bytes in Redis with its key and overhead (`MEMORY "
            f"USAGE`), means over the first 500 users."]


def _scaling(res: dict) -> list[str]:
    fixed = res["config"]["fixed_users"]
    return [*table(["users", "rebuild s", "ms per user"],
                    [[figure(x["users"]), figure(x["seconds"]), figure(x["ms_per_user"])] for x in res["by_users"]]),
            "",
            *table([f"candidates cap ({fixed} users)", "candidates per user", "ms per user", "model share"],
                    [[figure(x["max_candidates"]), figure(x["candidates_per_user"], 0), figure(x["ms_per_user"]),
                      percent(x["model_share"])] for x in res["by_candidates"]]),
            "",
            *table([f"trees ({fixed} users)", "ms per user", "model share"],
                    [[figure(x["trees"]), figure(x["ms_per_user"]), percent(x["model_share"])] for x in res["by_trees"]]),
            "",
            "The model share is CatBoost's part of the rebuild time. Trees are the trained model cut to its first N; "
            "where early stopping kept fewer, the larger steps repeat the whole model."]


def _soak(res: dict) -> list[str]:
    cfg, api, wk = res["config"], res["api_rss_mib"], res["worker_rss_mib"]
    return [f"{res['seconds']} s at about {cfg['rate']} requests/s ({percent(cfg['event_share'])} events), gunicorn × 2 "
            f"and 2 RQ workers, {cfg['users']:,} users.", "",
            *table(["requests", "events", "errors", "API RSS MiB, after warm-up → end",
                     "workers' RSS MiB, after warm-up → end"],
                    [[figure(res["requests"]), figure(res["events"]), figure(res["errors"]),
                      f"{figure(api['after_warmup'], 0)} → {figure(api['end'], 0)} ({api['growth']:+.1%})",
                      f"{figure(wk['after_warmup'], 0)} → {figure(wk['end'], 0)} ({wk['growth']:+.1%})"]])]


def _import(res: dict) -> list[str]:
    from ..import_ import sizes

    users, films = sizes(res["rows"])
    databases = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}
    return [f"{res['rows']:,} ratings ({users:,} users, {films:,} films), files generated in "
            f"{figure(res['generate_s'])} s.", "",
            *table(["database", "import s", "rows/s", "import peak RSS MiB", "train s", "train peak RSS MiB",
                    "its largest child's peak RSS MiB"],
                   [[databases.get(r["database"], r["database"]), figure(r["import_s"]),
                     figure(r["import_rows_per_s"], 0), figure(r["import_rss_mib"], 0), figure(r["train_s"]),
                     figure(r["train_rss_mib"], 0),
                     figure(r["train_child_rss_mib"], 0) if "train_child_rss_mib" in r else "–"]
                    for r in res["runs"]]),
            "", "Training fits each next period in a forked child (docs/evaluation.md): pages the child shares with "
            "the training process (the event log) count in both peaks."]


def _quality(res: dict) -> list[str]:
    cfg, oracle = res["config"], res["oracle"]
    rows = [[f"**{name}**" if name == "ranker" else name, figure(m["ndcg"], 4), figure(m["recall"], 4),
             figure(m["recall100"], 4), figure(m["coverage"], 3), figure(m.get("candidate_recall"), 3)]
            for name, m in res["methods"].items()]
    rows.append(["ceiling: the generator's own probabilities", figure(oracle["ndcg"], 4), figure(oracle["recall"], 4),
                 figure(oracle["recall100"], 4), figure(oracle.get("coverage"), 3), "–"])
    per_seed = ", ".join(f"{times(r['ratio'])} ({interval(r['ratio_interval'])})" for r in res["runs"])
    return [f"The static protocol at cut 0.8 on {cfg['users']:,} users, {cfg['items']:,} items and "
            f"{cfg['events']:,} events, {res['users_judged']:,} users judged; mean over training seeds "
            f"{', '.join(map(str, cfg['seeds']))}.", "",
            *table(["method", "NDCG@10", "Recall@10", "Recall@100", "coverage", "candidate recall"], rows),
            "",
            f"Ranker / best baseline ({res['best_baseline']}): **{times(res['ratio'])}** on the mean NDCG@10; per seed, "
            f"with its 95% interval: {per_seed}. Both protocols, per log and cut: [quality.md](quality.md)."]


def _hosts(res: dict) -> list[str]:
    cfg, probe = res["config"], res["worker_startup"]
    load = res.get("load_average", [])
    return [f"A full rebuild of {cfg['users']:,} users ({cfg['batch']} per job); {res['feed_store']}; "
            f"medians of {cfg['rounds']} rounds; {res['cores']} cores shared by the servers and every host"
            + (f" (load average {load[0]:.1f} before the rounds, {load[1]:.1f} after)" if len(load) == 2 else "")
            + ".", "",
            *table(["worker processes", "hosts", "per host", "start-up s", "rebuild s", "users/s", "speed-up vs 1",
                     "users done per host"],
                    [[r["workers"], r["hosts"], r["per_host"].replace("+", " + "), figure(r["startup_s"]),
                      figure(r["rebuild_s"]), figure(r["users_per_s"], 0), times(r["speedup"]),
                      " + ".join(f"{n:,}" for n in r["users_by_host"].values())] for r in res["runs"]]),
            "",
            f"A worker process alone on the first host is ready {figure(probe['process_s'])} s after launch: imports "
            f"{figure(probe['import_s'])} s, then the model ({probe['trees']:,} trees) and item matrices "
            f"({probe['items']:,} items) {figure(probe['init_s'])} s."]


#: The page's sections in order: a benchmark's name, what it measures (from its module's docstring) and how its
#: figures are shown.
SECTIONS = {
    "precompute": ("A full feed rebuild, stage by stage (history, candidates, features, model, store), in one "
                   "process and through 2 forking RQ workers, next to CatBoost's own predict on the identical "
                   "feature matrices: how close the whole pipeline comes to the model's own speed (with the cascade "
                   "the pipeline passes it: the full model scores each user's best candidates only); then the "
                   "cascade beside the full model on every candidate, the arms of an experiment, and a worker's "
                   "memory per extra bundle.", precompute),
    "fork": ("Single-user precompute jobs on 2 forking RQ workers, four ways: what initialising once before fork "
             "saves, what a job costs over a no-op job, and what batching users buys.", _fork),
    "serve": ("Requests per second and latency at fixed concurrency on loopback, for the precomputed feed, its "
              "serving floor (one read of the page's bytes), the framework floor, a real-time ranker and event "
              "ingestion. Profiled in process, the page pays what the floor pays (the framework, the turns, the "
              "request log, one round trip: reading past the page and the user's seen items costs no more than the "
              "floor's read) and then a row of small parts, none a large share of the rest: the boost rule, the "
              "next cursor, the impression record, the page's metrics, the experiment's placement, the new-item "
              "rule, the key's look-up and its rate; each costs a few times inside a request what it costs in a "
              "loop of its own. The profile part by part, before and after the last changes to it: the "
              "[results log](results-log.md#the-page-beyond-its-floor-part-by-part).", _serve),
    "freshness": ("A steady stream of events while 2 workers run: for each, the time from its being accepted "
                  "(as `POST /events` does) until the user's feed in Redis carries its history version.", _freshness),
    "memory": ("RSS, PSS and USS of the worker processes during a full rebuild (the model and item matrices "
               "shared copy-on-write show as PSS well below RSS), and the bytes one user's feed takes in Redis.",
               _memory),
    "scaling": ("How a rebuild's time grows with users, candidates per user and model size (trees), in one process "
                "on one core.", _scaling),
    "soak": ("Mixed feed reads and event posts against the API under gunicorn, with 2 RQ workers recomputing, for "
             "a bounded time: memory should stay flat after warm-up and errors at zero.", _soak),
    "import": ("A generated catalogue and rating log of MovieLens-25M's shape imported, then trained on, each in "
               "a child process: import rows/s, wall time and peak RSS.", _import),
    "quality": ("Offline evaluation (`manage.py evaluate`) on the synthetic marketplace at the demo's size over "
                "several training seeds, against a ceiling that ranks by the generator's own probabilities.",
                _quality),
    "hosts": ("A full rebuild split across worker hosts (Linux network namespaces, run as root) sharing one queue "
              "Redis, one feed store and one database, over TCP as between machines.", _hosts),
    "protocols": ("`manage.py evaluate --protocol both` at three cuts: every method under the static and replay "
                  "protocols, per log.", protocols),
    "ablation": ("What each candidate source and each column group adds, under both protocols: `evaluate` once "
                 "with everything and once without each part.", ablation),
    "served": ("The replay protocol through the running product (events posted over HTTP, feeds read with "
               "`GET /feed`) against what `evaluate --protocol replay` reports for the same model, users and "
               "steps.", served),
    "experiment": ("An experiment run live: the log after a cut replayed through the API and workers, the simulated "
                   "users clicking what they chose on the pages they read; the ranker against `recent:1d`, and an "
                   "A/A. The report's counts are checked against the simulation's own.", experiment),
    "closed_loop": ("The ranker with and without the shown columns, judged by an experiment on pages the product "
                    "served: half the log after a cut lived through the product and its pages stored, two bundles "
                    "trained on them, the other half an experiment between them (also on [quality.md](quality.md)).",
                    closed_loop),
    "new_items": ("Items created after the cut, as the log after it is lived through the product: how many are "
                  "seen within a day of their creation with the new-item rule off and on, and what it costs the "
                  "feed's NDCG@10 (also on [quality.md](quality.md)).", new_items),
    "abuse": ("One key floods `POST /events` with made-up user ids while real users post events and read feeds; "
              "then a storm of random bearer keys: what the limits let through, and what real users feel.", abuse),
    "hot_user": ("One key reads one user's feed at its full rate while real users read and click: every click "
                 "attributed, the user's pages recorded within their cap, the collector never stuck.", hot_user),
}
