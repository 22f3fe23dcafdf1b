"""Import commands: import-items, import-events (``precompute.data.importing``).

A progress bar over the file's bytes, a summary at the end, refused rows as ``file:line: reason`` on stderr (the
first ``SHOWN``, then a count). A file that cannot be used, or any bad row with ``--strict``, is one line on stderr
and a non-zero exit with nothing written; without ``--strict`` bad rows are skipped and the exit is 0.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import click

from precompute.data import importing
from precompute.data.parsing import EVENT_FORMATS, ITEM_FORMATS, RatingRule, Report
from precompute.errors import InvalidInput

from .group import command
from .data import ready_engine
from .workers import precompute

SHOWN = 20          # refused rows printed; the rest are counted

_path = click.argument("path", type=click.Path(exists=True, dir_okay=False, readable=True))
_strict = click.option("--strict", is_flag=True, help="Write nothing if any row is bad (the file is read twice).")
_encoding = click.option("--encoding", default=None, help="Text encoding  [default: UTF-8; Latin-1 for u.item]")


def _run(path: str, strict: bool, label: str, work: Callable) -> importing.ImportResult:
    """``work(progress)`` under a progress bar over the file's bytes (twice them with ``--strict``)."""
    size = os.path.getsize(path)
    with click.progressbar(length=max(size * (2 if strict else 1), 1), label=label) as bar:
        done = [0]

        def progress(n: int) -> None:
            bar.update(n - done[0])
            done[0] = n

        return work(progress)


def _report(report: Report) -> None:
    for note in report.notes:
        click.echo(f"note: {note}", err=True)
    for row in report.bad_rows[:SHOWN]:
        click.echo(str(row), err=True)
    if report.refused > SHOWN:
        click.echo(f"... and {report.refused - SHOWN} more refused rows", err=True)


@command(name="import-items")
@_path
@click.option("--format", "format_", type=click.Choice(ITEM_FORMATS), required=True,
              help="movielens (u.item or movies.csv), csv or jsonl")
@_strict
@_encoding
@click.pass_obj
def import_items(obj, path: str, format_: str, strict: bool, encoding: str | None) -> None:
    """Upsert a catalogue file's items (categories, price, created_at, declared attributes)."""
    settings = obj.settings
    engine = ready_engine(settings)
    result = _run(path, strict, "importing items", lambda progress: importing.import_items(
        engine, path, format_, settings, strict=strict, encoding=encoding, progress=progress))
    _report(result.report)
    r = result.report
    click.echo(f"{r.accepted} rows accepted, {r.refused} refused; {result.items_created} items created, "
               f"{result.items_updated} updated")


def _rule(threshold: str | None, strong: str | None, base: str | None, default: RatingRule) -> RatingRule:
    if threshold is None:
        value = default.threshold
    elif threshold.lower() == "none":
        value = None
    else:
        try:
            value = float(threshold)
        except ValueError:
            raise InvalidInput(f"--rating-threshold: {threshold!r} is not a number or 'none'") from None
    return RatingRule(threshold=value, strong=strong or default.strong, base=base or default.base)


@command(name="import-events")
@_path
@click.option("--format", "format_", type=click.Choice(EVENT_FORMATS), required=True,
              help="movielens (u.data or ratings.csv), csv or jsonl")
@_strict
@_encoding
@click.option("--default-type", default=None, help="Type of rows without one  [default: the first declared type]")
@click.option("--rating-threshold", default=None, metavar="NUMBER|none",
              help="MovieLens: ratings from this one on are the strong type; 'none': all the base type  [default: 4]")
@click.option("--strong-type", default=None, help="MovieLens: type of high ratings  [default: the heaviest declared]")
@click.option("--base-type", default=None, help="MovieLens: type of other ratings  [default: the lightest declared]")
@click.option("--precompute", "then_precompute", is_flag=True,
              help="Then rebuild the affected users' feeds, as precompute does (enqueued, or here with --inline).")
@click.option("--inline", is_flag=True, help="With --precompute: compute in this process.")
@click.pass_context
def import_events(ctx: click.Context, path: str, format_: str, strict: bool, encoding: str | None,
                  default_type: str | None, rating_threshold: str | None, strong_type: str | None,
                  base_type: str | None, then_precompute: bool, inline: bool) -> None:
    """Store an event log's events; users (and, per PREFEED_EVENTS_CREATE_ITEMS, items) are created as needed."""
    settings = ctx.obj.settings
    rule = _rule(rating_threshold, strong_type, base_type, importing.default_rating_rule(settings))
    engine = ready_engine(settings)
    result = _run(path, strict, "importing events", lambda progress: importing.import_events(
        engine, path, format_, settings, strict=strict, encoding=encoding, progress=progress, rating_rule=rule,
        default_type=default_type, notify=lambda message: click.echo(f"\n{message}", err=True)))
    _report(result.report)
    r = result.report
    click.echo(f"{r.accepted} rows accepted, {r.refused} refused; {result.events_stored} events stored, "
               f"{result.duplicates} duplicates skipped; {result.users_created} users and {result.items_created} "
               f"items created; {len(result.users_affected)} users affected")
    if not len(result.users_affected):
        return
    if then_precompute:
        ctx.invoke(precompute, user_ids=tuple(result.users_affected.tolist()), inline=inline)
    else:
        click.echo("their feeds are stale until rebuilt: manage.py precompute --stale")
