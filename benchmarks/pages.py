"""What the generated pages share: the logs' order and names, the command that writes a results file again, and
how figures are rounded and tabled."""

from __future__ import annotations

import math

#: Logs in the order the pages show them (others after, by name).
ORDER = ("synthetic", "pf-ml-1m", "pf-ml-100k")
NAMES = {"synthetic": "Synthetic marketplace (the demo's world: 2,000 users, 3,000 items, 100,000 events)",
         "pf-ml-1m": "MovieLens-1M", "pf-ml-100k": "MovieLens-100K",
         "ml1m": "MovieLens-1M, films numbered by sorted title (another import of the same ratings)"}


def by_log(results: list[dict]) -> list[dict]:
    rank = {name: k for k, name in enumerate(ORDER)}
    return sorted(results, key=lambda r: (rank.get(r.get("log"), len(ORDER)), r.get("log", "")))


def command(res: dict) -> str:
    """What to type to write ``res`` again, with what its name alone does not say: the log's folder
    (``PREFEED_VAR_DIR``), the protocols' training seeds, the ablation's cut, the import's row count and PostgreSQL
    run."""
    name = res["benchmark"].partition("-")[0]
    env = f"PREFEED_VAR_DIR=<{res['log']}> " if res.get("log", "synthetic") != "synthetic" else ""
    seeds = res.get("seeds", [0]) if name == "protocols" else [0]
    env += f"PREFEED_BENCH_SEEDS={','.join(map(str, seeds))} " if seeds != [0] else ""
    env += f"PREFEED_BENCH_CUT={res['cut']:g} " if name == "ablation" and res.get("cut", 0.8) != 0.8 else ""
    options = ""
    if name == "import":
        from .import_ import FULL_ROWS

        options += f" --rows {res['rows']}" if res.get("rows", FULL_ROWS) != FULL_ROWS else ""
        options += " --postgres URL" if any(r.get("database") == "postgresql" for r in res.get("runs", [])) else ""
    return f"{env}python -m benchmarks {name}{options}"


# Formatting: figures rounded to what this machine's noise leaves meaningful; units in the headers.


def figure(v, digits: int | None = None) -> str:
    """A figure: thousands separated; floats to 3 significant digits (at least the units) unless ``digits``."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, int) or digits == 0:
        return f"{v:,.0f}"
    if digits is not None:
        return f"{v:,.{digits}f}"
    a = abs(v)      # by what the figure rounds to: 99.99 is "100", not "100.0"
    return f"{v:,.0f}" if a >= 99.95 else f"{v:.1f}" if a >= 9.995 else f"{v:.2f}" if a >= 0.9995 else f"{v:.3f}"


def times(v) -> str:
    return "–" if v is None else f"{v:.1f}×" if abs(v) >= 10 else f"{v:.2f}×"


def percent(v) -> str:
    return "–" if v is None else f"{100 * v:.1f}%" if abs(v) < 0.1 else f"{100 * v:.0f}%"


def interval(iv) -> str:
    return "–" if not iv else f"{iv[0]:.2f}–{iv[1]:.2f}"


def table(header: list[str], rows: list[list]) -> list[str]:
    """A markdown table: the first column left, the others (figures) right."""
    return ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1),
            *("| " + " | ".join(str(c) for c in row) + " |" for row in rows)]
