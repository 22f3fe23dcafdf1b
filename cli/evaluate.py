"""Offline evaluation: evaluate."""

from __future__ import annotations

import click

from .group import command
from .data import ready_engine
from .progress import Reporter


@command()
@click.option("--cut", type=float, default=0.8, show_default=True,
              help="Time split: the quantile of event time before which the log is known (0 < cut < 1).")
@click.option("--k", type=click.IntRange(1, 1000), default=10, show_default=True, help="List length of @k metrics.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the result as JSON.")
@click.option("--chart", type=click.Path(dir_okay=False), default=None, help="Write a PNG bar chart of NDCG@k.")
@click.option("--recent-days", type=click.FloatRange(0, min_open=True), default=7.0, show_default=True,
              help="Window of the recent-popularity baseline, days before the cut.")
@click.option("--users", type=click.IntRange(1), default=None, help="Judge a random sample of this many users "
              "[default: all].")
@click.option("--iterations", type=click.IntRange(10, 10_000), default=None,
              help="The ranker's CatBoost trees  [default: PREFEED_TRAIN_ITERATIONS]")
@click.option("--protocol", type=click.Choice(["static", "replay", "both"]), default="both", show_default=True,
              help="static: histories frozen at the cut, each user judged once on everything after it; replay: "
              "the feed before each of a user's first steps after the cut, at that step's clock.")
@click.option("--steps", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="Replay: each user's first steps judged (a step: their events at one timestamp).")
@click.option("--seed", "seed_", type=int, default=0, show_default=True)
@click.pass_obj
def evaluate(obj, cut: float, k: int, json_path: str | None, chart: str | None, recent_days: float,
             users: int | None, iterations: int | None, protocol: str, steps: int, seed_: int) -> None:
    """Judge baselines and the ranker (trained on the past) on the log after a time cut."""
    from precompute.learning import report     # the learning stack, for this command only (cli/models.py)
    from precompute.learning.evaluate import evaluate as run_evaluation

    for path in (json_path, chart):
        report.check_writable(path)
    with Reporter() as progress:
        ev = run_evaluation(ready_engine(obj.settings), obj.settings, cut_quantile=cut, k=k, recent_days=recent_days,
                            users=users, seed=seed_, iterations=iterations, protocol=protocol, steps=steps,
                            progress=progress)
    click.echo(report.table(ev))
    if json_path:
        report.write_json(ev, json_path)
    if chart:
        report.write_chart(ev, chart)
    click.echo(f"{ev.users} users judged in {ev.seconds:.1f}s")
