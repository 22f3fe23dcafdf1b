"""``python -m benchmarks NAME [--quick]`` or ``python -m benchmarks all [--quick]``; the import benchmark also
takes ``--rows N`` and ``--postgres URL``."""

from __future__ import annotations

import importlib
import logging

import click

from .lab.world import Skipped

#: Benchmark name → module (``import`` is a Python keyword, so its module is ``import_``).
NAMES = {"precompute": "precompute", "fork": "fork", "serve": "serve", "freshness": "freshness", "memory": "memory",
         "scaling": "scaling", "soak": "soak", "import": "import_", "quality": "quality", "hosts": "hosts",
         "protocols": "protocols", "ablation": "ablation", "served": "served", "report": "pages.report"}


@click.command()
@click.argument("name", type=click.Choice([*NAMES, "all"]))
@click.option("--quick", is_flag=True, help="Small sizes, for the test suite.")
@click.option("--rows", type=click.IntRange(min=1000), help="import: rating rows to generate (default 25,000,000).")
@click.option("--postgres", metavar="URL", help="import: also measure on this PostgreSQL database (default: "
              "DATABASE_URL, if set).")
def main(name: str, quick: bool, rows: int | None, postgres: str | None) -> None:
    logging.basicConfig(level=logging.WARNING)
    if (rows or postgres) and name != "import":
        raise click.UsageError("--rows and --postgres apply to the import benchmark only")
    for n in NAMES if name == "all" else [name]:
        try:
            module = importlib.import_module(f"benchmarks.{NAMES[n]}")
        except ModuleNotFoundError:
            click.echo(f"({n}: not written yet)")
            continue
        click.echo(f"=== {n}")
        try:
            module.run(quick=quick, **({"rows": rows, "postgres": postgres} if n == "import" else {}))
        except Skipped as exc:
            if name != "all":
                raise click.ClickException(f"{n}: {exc}") from None
            click.echo(f"({n}: skipped: {exc})")
        click.echo()


if __name__ == "__main__":
    main()
