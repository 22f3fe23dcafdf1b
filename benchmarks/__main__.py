"""``python -m benchmarks NAME [--quick]`` or ``python -m benchmarks all [--quick]``; the import benchmark also
takes ``--rows N`` and ``--postgres URL``. ``python -m benchmarks report`` renders the generated pages (``all`` ends
with it). The lab's two tools are reached the same way: ``python -m benchmarks shapes NAME`` (a reshaped log) and
``python -m benchmarks sameness build|snapshot|compare`` (a fingerprint of one saved world)."""

from __future__ import annotations

import importlib
import logging

import click

from .lab import sameness, shapes
from .lab.world import Skipped

#: Benchmark name → module (``import`` is a Python keyword, so its module is ``import_``).
NAMES = {"precompute": "precompute", "fork": "fork", "serve": "serve", "freshness": "freshness", "memory": "memory",
         "scaling": "scaling", "soak": "soak", "import": "import_", "quality": "quality", "hosts": "hosts",
         "protocols": "protocols", "ablation": "ablation", "served": "served", "experiment": "experiment",
         "closed_loop": "closed_loop", "new_items": "new_items",
         "abuse": "abuse", "hot_user": "hot_user", "report": "pages.report"}
HELP = {"all": "Run every benchmark, then report. One this machine cannot run is skipped, saying why.",
        "report": "Render docs/quality.md and docs/performance.md. Each figure is one a results file holds."}


class _InOrder(click.Group):
    """Commands listed as declared: the benchmarks in their order, then the tools."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


@click.group(cls=_InOrder)
def main() -> None:
    """Run a benchmark, all of them, or report; or use a tool of the lab (shapes, sameness)."""


def _benchmark(name: str) -> click.Command:
    """``name`` (or ``all``) as a command. Each takes every option, so that ``--rows`` elsewhere than on import is
    refused saying so."""

    @click.command(name, help=HELP.get(name, f"Run the {name} benchmark: a table, and its results file."))
    @click.option("--quick", is_flag=True, help="Small sizes, for the test suite.")
    @click.option("--rows", type=click.IntRange(min=1000), help="import: rating rows to generate (default "
                  "25,000,000).")
    @click.option("--postgres", metavar="URL", help="import: also measure on this PostgreSQL database (default: "
                  "DATABASE_URL, if set); abuse: run the flood again with the product's database there.")
    def command(quick: bool, rows: int | None, postgres: str | None) -> None:
        _run_each(name, quick, rows, postgres)

    return command


def _run_each(name: str, quick: bool, rows: int | None, postgres: str | None) -> None:
    """The benchmark ``name``, or every one for ``all``."""
    logging.basicConfig(level=logging.WARNING)
    if rows and name != "import":
        raise click.UsageError("--rows applies to the import benchmark only")
    if postgres and name not in ("import", "abuse"):
        raise click.UsageError("--postgres applies to the import and abuse benchmarks only")
    for n in NAMES if name == "all" else [name]:
        try:
            module = importlib.import_module(f"benchmarks.{NAMES[n]}")
        except ModuleNotFoundError:
            click.echo(f"({n}: not written yet)")
            continue
        click.echo(f"=== {n}")
        try:
            extra = {"rows": rows, "postgres": postgres} if n == "import" else {}
            module.run(quick=quick, **({"postgres": postgres} if n == "abuse" else extra))
        except Skipped as exc:
            if name != "all":
                raise click.ClickException(f"{n}: {exc}") from None
            click.echo(f"({n}: skipped: {exc})")
        click.echo()


for _name in [*NAMES, "all"]:
    main.add_command(_benchmark(_name))
main.add_command(shapes.main, "shapes")
main.add_command(sameness.main, "sameness")


if __name__ == "__main__":
    main()
