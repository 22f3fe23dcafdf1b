"""Model commands: train, and the bundle lifecycle (``models list``, ``models promote``, ``models rollback``).

Bundles are immutable and versioned (``precompute.ranking.bundle``); ``train`` writes one every time and makes it
current only if it beats the best baseline on its validation users (or with ``--force``).

The bundle module and training are imported by the commands that use them: they bring SciPy and pandas, which were
over a third of the CPU time every other ``manage.py`` command took to start (tests/test_settings.py keeps them out).
"""

from __future__ import annotations

import json
import time

import click

from precompute.errors import BundleError, InvalidInput, NotPromoted
from precompute.ranking.layout import for_settings

from .group import cli, command, echo_table
from .data import ready_engine
from .progress import Reporter

NONE = "—"          # a value an older bundle did not record


@command()
@click.option("--iterations", type=click.IntRange(10, 10_000), default=None,
              help="CatBoost trees  [default: PREFEED_TRAIN_ITERATIONS, 1000]")
@click.option("--depth", type=click.IntRange(2, 10), default=None, help="Tree depth  [default: PREFEED_TRAIN_DEPTH, 6]")
@click.option("--users", type=click.IntRange(20, 1_000_000), default=None,
              help="Users sampled for training and validation  [default: PREFEED_TRAIN_USERS, 3000]")
@click.option("--seed", "seed_", type=int, default=0, show_default=True)
@click.option("--force", is_flag=True, help="Promote the new bundle even if it does not beat the best baseline.")
@click.option("--no-promote", is_flag=True, help="Write the bundle and leave the current one current: an "
              "experiment's arm (`experiments create --arm NAME=model:VERSION`).")
@click.option("--without-shown", is_flag=True, help="Learn nothing from the shown columns (PREFEED_RANK_SHOWN, which "
              "must be on): the control arm of the experiment that turns them on.")
@click.pass_obj
def train(obj, iterations: int | None, depth: int | None, users: int | None, seed_: int, force: bool,
          no_promote: bool, without_shown: bool) -> None:
    """Train the ranker on a time split, write a bundle, and promote it if it beats the best baseline.

    A bundle that does not is kept (``models list``) but not made current: one line on stderr, exit 5."""
    from precompute.learning import train as training
    from precompute.ranking import bundle, shown

    settings = obj.settings
    if without_shown and not settings.rank_shown:
        raise InvalidInput("--without-shown needs PREFEED_RANK_SHOWN=true: without it the bundle has no shown "
                           "columns to leave out")
    engine = ready_engine(settings)
    t0 = time.perf_counter()
    with Reporter() as progress:
        result = training.train(engine, settings, iterations=iterations, depth=depth, users=users, seed=seed_,
                                progress=progress, ignore=shown.COLUMNS if without_shown else ())
    m = result.metrics
    interval = m.get("ratio_interval")
    spread = f"; ratio 95% interval {interval[0]:.2f}×–{interval[1]:.2f}×" if interval else ""
    judged = f"{m['valid_steps']} steps of {m['valid_users']} users replayed" if "valid_steps" in m else \
        f"{m['valid_users']} users judged"
    click.echo(f"validation NDCG@10: model {m['ndcg10']:.4f}, best baseline ({m['baseline']}) "
               f"{m['baseline_ndcg10']:.4f} ({judged} after the validation cut, {m.get('protocol', 'static')} "
               f"protocol{spread})")
    if m.get("protocol") == "replay":
        click.echo(f"static protocol beside it: model {m['static_ndcg10']:.4f}, best baseline "
                   f"({m['static_baseline']}) {m['static_baseline_ndcg10']:.4f}")
    version = bundle.write(settings.model_dir, result.model, result.pairs, {"metrics": m}, result.cascade)
    seconds = time.perf_counter() - t0
    if no_promote:
        click.echo(f"bundle {version} written, not promoted (--no-promote); trained in {seconds:.1f}s")
        return
    how = "train"
    if not bundle.beats_baseline(m):
        if bundle.current_version(settings.model_dir) is None:
            # Nothing is current: workers could not start and every feed would be the fallback. The first model
            # is promoted (from then on a new one has to beat the best baseline), and the operator is told.
            click.echo(f"bundle {version} does not beat the best baseline, but no bundle is current: promoting it")
            how = "train (first bundle)"
        elif force:
            click.echo(f"bundle {version} does not beat the best baseline; promoting it anyway (--force)")
            how = "train --force"
        else:
            raise NotPromoted(f"bundle {version} not promoted: validation NDCG@10 {m['ndcg10']:.4f} does not beat "
                              f"the best baseline ({m['baseline']}) {m['baseline_ndcg10']:.4f}; promote it with "
                              f"`models promote {version}` or retrain with --force")
    bundle.promote(settings.model_dir, version, for_settings(settings), how=how)
    click.echo(f"bundle {version} is current ({settings.model_dir}); trained in {seconds:.1f}s")


@cli.group()
def models() -> None:
    """Model bundles: list them, promote one, roll back to the previous current."""


@command(models, name="list")
@click.option("--json", "as_json", is_flag=True, help="One JSON array instead of the table.")
@click.pass_obj
def list_(obj, as_json: bool) -> None:
    """Every bundle, newest first, with its validation NDCG@10 against the best baseline; * marks the current."""
    from precompute.ranking import bundle

    model_dir = obj.settings.model_dir
    try:
        current = bundle.current_version(model_dir)
    except BundleError as exc:           # still list what there is to promote
        click.echo(f"warning: {exc}; no bundle is marked current", err=True)
        current = None
    rows = [_row(model_dir, v, current) for v in bundle.versions(model_dir)]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo(f"no model bundles in {model_dir}; run `manage.py train`")
        return
    header = ("", "VERSION", "TRAINED AT (UTC)", "DATA CLOCK (UTC)", "ROWS", "EVENTS", "NDCG@10", "BEST BASELINE",
              "TREES")
    echo_table([header] + [_cells(row) for row in rows])


@command(models, name="promote")
@click.argument("version", type=int)
@click.pass_obj
def models_promote(obj, version: int) -> None:
    """Make bundle VERSION current after checking it; running workers switch to it between jobs."""
    _promote(obj.settings, version)


@command(models)
@click.pass_obj
def rollback(obj) -> None:
    """Make the previous current bundle (in MODEL_DIR/HISTORY) current again."""
    from precompute.ranking import bundle

    done = bundle.rollback(obj.settings.model_dir, for_settings(obj.settings))
    click.echo(f"rolled back: bundle {done.version} is current; `manage.py precompute --stale` rebuilds the "
               f"feeds of other bundles")


@command(hidden=True)
@click.argument("version", type=int)
@click.pass_obj
def promote(obj, version: int) -> None:
    """Alias of ``models promote`` (kept for scripts written before the ``models`` group)."""
    _promote(obj.settings, version)


def _promote(settings, version: int) -> None:
    from precompute.ranking import bundle

    bundle.promote(settings.model_dir, version, for_settings(settings))
    click.echo(f"bundle {version} is current; `manage.py precompute --stale` rebuilds the feeds of other bundles")


def _row(model_dir, version: int, current: int | None) -> dict:
    """One bundle as plain values (UTC ISO times); ``broken``: why it fails its checks, else None."""
    from precompute.ranking import bundle

    row = dict(version=version, current=version == current, broken=None, trained_at=None, data_clock=None,
               train_rows=None, events=None, ndcg10=None, baseline=None, baseline_ndcg10=None, trees=None)
    try:
        meta = bundle.checked_meta(model_dir, version)
    except BundleError as exc:
        row["broken"] = str(exc)
        return row
    m = meta.get("metrics") if isinstance(meta.get("metrics"), dict) else {}
    row.update(trained_at=_utc(meta.get("created_at")), data_clock=_utc(m.get("data_clock")),
               train_rows=m.get("train_rows"), events=m.get("events"), ndcg10=m.get("ndcg10"),
               baseline=m.get("baseline"), baseline_ndcg10=m.get("baseline_ndcg10"),
               trees=m.get("trees", m.get("iterations")))
    return row


def _cells(row: dict) -> tuple[str, ...]:
    mark = "*" if row["current"] else ""
    if row["broken"]:
        return mark, str(row["version"]), f"broken: {row['broken']}"
    ndcg = NONE if row["ndcg10"] is None else f"{row['ndcg10']:.4f}"
    base = NONE if row["baseline_ndcg10"] is None else f"{row['baseline_ndcg10']:.4f} ({row['baseline'] or '?'})"
    return (mark, str(row["version"]), _text(row["trained_at"]), _text(row["data_clock"]), _text(row["train_rows"]),
            _text(row["events"]), ndcg, base, _text(row["trees"]))


def _text(value) -> str:
    return NONE if value is None else str(value).replace("T", " ").rstrip("Z")


def _utc(ts) -> str | None:
    """Epoch seconds as ISO 8601 UTC, or None when missing."""
    if not isinstance(ts, (int, float)):
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
