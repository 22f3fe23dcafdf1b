"""``python -m benchmarks NAME [--quick]`` or ``python -m benchmarks all [--quick]``."""

from __future__ import annotations

import importlib
import logging

import click

NAMES = ["precompute", "fork", "serve", "freshness", "memory", "scaling", "soak"]


@click.command()
@click.argument("name", type=click.Choice(NAMES + ["all"]))
@click.option("--quick", is_flag=True, help="Small sizes, for the test suite.")
def main(name: str, quick: bool) -> None:
    logging.basicConfig(level=logging.WARNING)
    for n in NAMES if name == "all" else [name]:
        try:
            module = importlib.import_module(f"benchmarks.{n}")
        except ModuleNotFoundError:
            click.echo(f"({n}: not written yet)")
            continue
        click.echo(f"=== {n}")
        module.run(quick=quick)
        click.echo()


if __name__ == "__main__":
    main()
