"""How the generated pages show figures: rounded to what this machine's noise leaves meaningful, units in the
headers, in markdown tables."""

from __future__ import annotations

import math


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
