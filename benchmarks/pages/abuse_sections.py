"""The performance page's sections on abuse: a flood of made-up ids and a storm of keys (``abuse``), one key
reading one user's feed at its full rate (``hot_user``)."""

from __future__ import annotations

from .figures import figure, table, times


def abuse(res: dict) -> list[str]:
    o, f, real, k = res["offered_rate"], res["flood"], res["real"], res["keys"]
    return [f"Offered: {o['flood_requests_per_s']:,} requests/s of {o['events_per_request']} made-up user ids from "
            f"one key for {o['flood_seconds']} s (one core; {figure(f['achieved_per_s'], 0)} requests/s reached), "
            f"{o['real_users']} real users posting {o['real_events_per_s']} events/s and reading as many feeds.", "",
            *table(["", "result", "cap"], [
                ["flood answered 202 / 429", f"{f['accepted']:,} / {f['refused_429']:,}", ""],
                ["user rows added", f"{f['users_added']:,}", f"{f['users_cap']:,}"],
                ["Redis bytes added", f"{f['redis_bytes_added']:,}", f"{f['redis_cap_bytes']:,}"],
                *[[f"real users' event → fresh feed p99, without / with the flood ({db})",
                   f"{figure(r['p99_ms_without'], 0)} / {figure(r['p99_ms_with'], 0)} ms",
                   f"**{times(r['ratio'])}** (target 2×)"]
                  for db, r in (("SQLite", real), ("PostgreSQL", res.get("postgresql", {}).get("real"))) if r]]),
            "", f"Random bearer keys: {k['requests']:,} ({k['distinct_well_formed']:,} distinct well-formed): "
            f"{k['queries_unknown']:,} database queries for the unknown ones, {k['queries_malformed']} for the "
            "malformed ones."]


def hot_user(res: dict) -> list[str]:
    h, real, rd, c = res["hot"], res["real"], res["redis"], res["collector"]
    return [f"One key with the shipped limits read user {h['user']}'s feed for {res['config']['seconds']} s "
            f"honouring 429 and Retry-After ({figure(h['served_per_s'], 0)} pages/s served); "
            f"{real['users']} real users read and clicked beside it.", "",
            *table(["", "result", "bound"], [
                ["hot key answered 200 / 429", f"{h['served']:,} / {h['refused_429']:,}", ""],
                ["its pages stored", f"{h['pages_stored']:,}", f"{h['pages_cap']:,}"],
                ["real clicks / attributed by the report", f"{real['clicks']:,} / {real['attributed']:,}",
                 "equal" if real["exact"] else "**not equal**"],
                ["impressions list, most pages / KiB", f"{rd['list_len_max']:,} / {figure(rd['list_bytes_max'] / 1024, 0)}",
                 ""],
                ["attribution caught up after the run", f"{figure(c['caught_up_s_after_run'])} s"
                 if c["caught_up"] else "**not within 180 s**", ""],
                ["failed collector jobs", f"{c['failed_jobs']}", "0"]])]
