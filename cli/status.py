"""``manage.py status``: queues, workers (with their RSS when on this host), failed and scheduled jobs, the current
model, the bundles every worker holds (promoted and experiment arms', size on disk), feed coverage and age, the dirty
set, as a readable block or JSON (``jobs.status.snapshot``, which the dashboard shows too). No secret is
printed: URLs have their passwords masked and the admin token is never read."""

from __future__ import annotations

import json

import click

from precompute.data import engine as db
from precompute.feeds.client import clients, ping_redis

from .group import command
from .embedded import ensure_redis


@command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of the text block.")
@click.option("--sample", type=click.IntRange(1, 10_000_000), default=None,
              help="Users whose feed headers are read  [default: PREFEED_STATUS_SAMPLE, 10000]")
@click.pass_obj
def status(obj, as_json: bool, sample: int | None) -> None:
    """The state of queues, workers, model and feeds."""
    from jobs.status import snapshot

    settings = ensure_redis(obj.settings)
    engine = db.make_engine(settings.database_url, settings)
    queue_redis, feed_redis = clients(settings)
    ping_redis(queue_redis)
    ping_redis(feed_redis)
    snap = snapshot(settings, engine, queue_redis, feed_redis, sample=sample)
    click.echo(json.dumps(snap, indent=2) if as_json else "\n".join(text_lines(snap)))


def text_lines(s: dict) -> list[str]:
    """The snapshot as a block of aligned lines."""
    from jobs.status import age_text, utc_text

    f, m, d = s["feeds"], s["model"], s["dirty"]
    lines = [f"prefeed status at {utc_text(s['at'])}",
             f"  redis          queue {s['redis']['queue']}  feeds {s['redis']['feeds']}",
             f"  database       {s['database']}"]
    for q in s["queues"]:
        lines.append(f"  queue {q['name']!r:<8} {q['queued']} queued, {q['started']} started, {q['scheduled']} "
                     f"scheduled, {q['deferred']} deferred, {q['failed']} failed, {q['finished']} finished")
    alive = s["workers"]
    lines.append(f"  workers        {len(alive)} alive" + (": " if alive else ""))
    for w in alive:
        job = f", job {w['current_job']}" if w["current_job"] else ""
        rss = "" if w.get("rss_mib") is None else f", RSS {w['rss_mib']:.0f} MiB"
        lines.append(f"    {w['name']}  {w['state']}{job}, heartbeat {age_text(w['last_heartbeat_age_s'])} ago, "
                     f"{w['successful_jobs']} done, {w['failed_jobs']} failed{rss}")
    if m.get("error"):
        lines.append(f"  model          {m['error']}")
    else:
        lines.append(f"  model          {m['version']}, trained {utc_text(m['trained_at'])}, validation NDCG@10 "
                     f"{_num(m['ndcg10'])} vs best baseline ({m['baseline'] or '?'}) {_num(m['baseline_ndcg10'])}"
                     + ("" if m["beats_baseline"] is None else (" (beats it)" if m["beats_baseline"]
                                                                 else " (does not beat it)")))
    lines += bundle_lines(s["bundles"])
    how = "all" if f["sampled_all"] else f"a random sample of {f['sampled']}"
    cov = "—" if f["coverage"] is None else f"{f['coverage']:.1%}"
    lines += [f"  feeds          {f['users_with_history']} users with history; {how} read: {f['current']} with a "
              f"current feed ({cov}), {f['missing']} missing, {f['behind_history']} behind their history, "
              f"{f['other_model']} from another bundle",
              f"  feed age       p50 {age_text(f['age_p50_s'])}, p99 {age_text(f['age_p99_s'])}, "
              f"max {age_text(f['age_max_s'])}",
              f"  dirty users    {d['users']} ({d['due']} due, {d['leased_or_waiting']} leased or waiting); "
              f"oldest due {age_text(d['oldest_due_age_s'])}"]
    if s.get("recovery"):
        rb = s["recovery"]
        lines.append(f"  redis rebuild  began {utc_text(rb['began'])}: {rb['looked_at']} of "
                     f"{'?' if rb['total'] is None else rb['total']} active users looked at, {rb['marked']} marked "
                     f"for a recompute, {rb['sampled_written_since']} sampled feeds written since; "
                     + (f"finished {utc_text(rb['finished_at'])}" if rb["finished_at"] else "running"))
    return lines


def bundle_lines(b: dict) -> list[str]:
    """The bundles every worker loads before fork and holds: each with what uses it and its size on disk."""
    if not b["loaded"]:
        return []
    lines = [f"  bundles        {len(b['loaded'])} loaded by every worker before fork "
             f"({b['extra']} extra for experiments, {b['extra_disk_mib']:.1f} MiB on disk); size on disk is "
             f"its models and sources"]
    for x in b["loaded"]:
        use = ", ".join((["promoted"] if x["promoted"] else []) + [f"arm {a}" for a in x["arms"]])
        size = "missing" if x["disk_mib"] is None else f"{x['disk_mib']:.1f} MiB on disk"
        lines.append(f"    {x['version']}  {use}; {size}")
    return lines


def _num(x) -> str:
    return "—" if x is None else f"{x:.4f}"
