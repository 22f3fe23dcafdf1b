"""Experiments: ``experiments create NAME --arm NAME=SPEC …``, ``experiments list``, ``experiments report NAME``,
``experiments stop NAME``.

The rules (specs, shares, slots, the user hashes) are ``precompute/experiments``'s; these commands parse the
arguments and print. docs/experiments.md says how to run an experiment.
"""

from __future__ import annotations

import json
import time

import click

from precompute.errors import InvalidInput
from precompute.experiments import Experiment, registry
from precompute.ranking.layout import for_settings

from .group import cli, command, echo_table
from .data import ready_engine
from .embedded import ensure_redis


@cli.group()
def experiments() -> None:
    """Experiments: arms that rank a share of the users each (create, list, report, stop)."""


@command(experiments, name="create")
@click.argument("name")
@click.option("--arm", "arms", multiple=True, metavar="NAME=SPEC",
              help="An arm (at least two; the first is the control). SPEC: model:VERSION, model:current (pinned "
                   "to the current version now), popular, recent:WINDOW (1h, 1d, 3d, 7d, 30d), covisit, item_knn, "
                   "latent.")
@click.option("--share", "shares", multiple=True, metavar="NAME=SHARE",
              help="An arm's share of the experiment's users, for every arm or none; they sum to 1  "
                   "[default: equal shares]")
@click.option("--users", type=float, default=1.0, show_default=True,
              help="The share of all users in the experiment, above 0 and at most 1; the others keep the current "
                   "bundle.")
@click.pass_obj
def create(obj, name: str, arms: tuple[str, ...], shares: tuple[str, ...], users: float) -> None:
    """Start the experiment NAME on a free slot of the users; refused when no free slot is that wide."""
    pairs = [_pair(a, "--arm", "NAME=SPEC") for a in arms]
    split = {arm: _share(value) for arm, value in (_pair(s, "--share", "NAME=SHARE") for s in shares)}
    if len(split) != len(shares):
        raise InvalidInput("--share names an arm twice")
    settings = obj.settings
    made = registry.create(ready_engine(settings), name, pairs, split or None, users, settings.model_dir,
                           for_settings(settings))
    click.echo(f"experiment {made.name!r} (id {made.id}) running on {made.users:g} of the users "
               f"(slot hash [{made.slot[0]:g}, {made.slot[1]:g})): {_arms(made)}")
    _rebuild(settings, made)


@command(experiments, name="list")
@click.option("--json", "as_json", is_flag=True, help="One JSON array instead of the table.")
@click.pass_obj
def list_(obj, as_json: bool) -> None:
    """Every experiment, oldest first: status, share of users, arms (spec and share), created and stopped."""
    found = registry.all_experiments(ready_engine(obj.settings))
    if as_json:
        click.echo(json.dumps([dict(id=e.id, name=e.name, status=e.status, users=e.users, slot=list(e.slot),
                                    arms=[dict(name=a.name, spec=a.spec, share=a.share) for a in e.arms],
                                    created_at=e.created_at, stopped_at=e.stopped_at, winner=e.winner)
                               for e in found], indent=2))
        return
    if not found:
        click.echo("no experiments; start one with `manage.py experiments create NAME --arm a=SPEC --arm b=SPEC`")
        return
    echo_table([("NAME", "STATUS", "USERS", "ARMS (SPEC SHARE)", "CREATED (UTC)", "STOPPED (UTC)", "WINNER")]
               + [(e.name, e.status, f"{e.users:g}", _arms(e), _when(e.created_at), _when(e.stopped_at),
                   e.winner or "—") for e in found])


@command(experiments, name="report")
@click.argument("name")
@click.option("--metric", default=None, metavar="TYPE",
              help="The event type the ratios and the verdict are on: its attributed events per exposed user  "
                   "[default: click when declared, else the type of greatest weight]")
@click.option("--json", "as_json", is_flag=True, help="The report as one JSON object.")
@click.pass_obj
def report(obj, name: str, metric: str | None, as_json: bool) -> None:
    """Per arm: exposed users, pages, impressions and attributed events (per user, per impression, 95% intervals);
    each arm's ratio to the control, the verdict and the sample-ratio check. Pages still buffered are taken in
    first, so the counts are exact as of now."""
    from precompute.experiments import report as reports

    settings = obj.settings
    engine = ready_engine(settings)
    found = {e.name: e for e in registry.all_experiments(engine)}.get(name)
    if found is None:
        raise InvalidInput(f"no experiment is called {name!r} (see `manage.py experiments list`)")
    names = tuple(n for n, _ in settings.event_types)
    metric = metric or reports.default_metric(settings.event_types)
    if metric not in names:
        raise InvalidInput(f"--metric {metric!r}: not an event type ({', '.join(names)})")
    _take_in(settings, engine)
    out = reports.build(engine, found, names, metric)
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    rows = [("ARM", "SPEC", "SHARE", "USERS", "PAGES", "IMPRESSIONS", metric.upper(), "PER USER (95%)", "PER IMPR.",
             "RATIO (95%)")]
    for a in out["arms"]:
        e = a["events"][metric]
        rows.append((a["name"], a["spec"], f"{a['share']:g}", str(a["users"]), str(a["pages"]), str(a["impressions"]),
                     str(e["attributed"]), f"{_num(e['per_user'])} {_iv(e['interval'])}", _num(e["per_impression"]),
                     f"{_num(a['ratio'])} {_iv(a['ratio_interval'])}"))
    echo_table(rows)
    p = out["sample_ratio_p"]
    click.echo(f"verdict on {out['metric_means']}: {out['verdict'] or 'none (no interval excludes 1)'}")
    click.echo(f"sample ratio: p = {_num(p)}" + (" — FLAGGED: the split is not the shares; trust no ratio"
                                                 if out["sample_ratio_flagged"] else " (fine)"))


def _take_in(settings, engine) -> None:
    """Move every page still buffered to the database and attribute every event stored before now: wait until the
    API processes have sent the pages served before those events, then collect through them."""
    import redis

    from precompute.experiments.collect import collect, newest_event_id, settle_seconds
    from precompute.feeds.client import clients

    through = newest_event_id(engine)
    settings = ensure_redis(settings)
    try:
        r = clients(settings)[0]
        time.sleep(settle_seconds(settings))
        if collect(engine, r, settings, through=through, lock_wait=120) is None:
            click.echo("warning: a collection held the lock for 2 minutes; the report may miss the newest pages",
                       err=True)
    except redis.RedisError as exc:
        click.echo(f"warning: the pages buffered in Redis could not be taken in ({type(exc).__name__}); the report "
                   "counts what the database holds", err=True)


def _num(x) -> str:
    return "—" if x is None else f"{x:.4g}"


def _iv(iv) -> str:
    return "" if iv is None else f"[{iv[0]:.3g}, {iv[1]:.3g}]"


@command(experiments, name="stop")
@click.argument("name")
@click.option("--winner", default=None, metavar="ARM",
              help="A model arm whose bundle is promoted: everyone gets it. Without it, everyone gets the current "
                   "bundle.")
@click.pass_obj
def stop(obj, name: str, winner: str | None) -> None:
    """Stop the experiment NAME: its users leave it (its slot is free again)."""
    settings = obj.settings
    done = registry.stop(ready_engine(settings), name, winner, settings.model_dir, for_settings(settings))
    if winner is None:
        click.echo(f"experiment {name!r} stopped; its users get the current bundle")
    else:
        spec = next(a.spec for a in done.arms if a.name == winner)
        click.echo(f"experiment {name!r} stopped with winner {winner!r}: bundle {spec.partition(':')[2]} is current")
    _rebuild(settings, done)


def _rebuild(settings, experiment: Experiment) -> None:
    """Have the workers rebuild the feeds of the experiment's users, whose arm just changed (``jobs.tasks
    .mark_reassigned``: a bounded step at a time; their old feeds serve meanwhile)."""
    import redis

    from jobs.queues import enqueue_reassign
    from precompute.feeds.client import clients

    settings = ensure_redis(settings)
    try:
        enqueue_reassign(settings, clients(settings)[0], experiment.id)
    except redis.RedisError as exc:
        click.echo(f"warning: the rebuild of its users' feeds could not be queued ({type(exc).__name__}); their "
                   "feeds change arm as they are recomputed", err=True)
        return
    click.echo(f"its users' feeds are rebuilt by the workers, {settings.reassign_batch} users looked at every "
               f"{settings.reassign_interval:g} s; their current feeds serve until then")


def _pair(text: str, option: str, form: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise InvalidInput(f"{option} {text!r}: expected {form}")
    return name, value


def _share(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise InvalidInput(f"--share {text!r}: a share is a number, such as 0.5") from None


def _arms(e: Experiment) -> str:
    return ", ".join(f"{a.name} {a.spec} {a.share:g}" for a in e.arms)


def _when(ts: float | None) -> str:
    return "—" if ts is None else time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts))
