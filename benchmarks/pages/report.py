"""report: renders the pages whose numbers come from benchmark runs, so that a number on a page is a number a run
produced. ``docs/quality.md``: every method under both protocols, per log and cut, with candidate recall per source,
from ``benchmarks/results/protocols-<log>.json``. ``docs/performance.md``: the latest full run of every benchmark,
each with what it measures, its command, date and machine and a table of its figures, from the other results files
(``<name>.json``, or ``<name>-<log>.json`` for those run on a log); a benchmark with no results file is listed as not
run yet. ``python -m benchmarks report`` rewrites both pages; ``tests/test_benchmarks.py`` fails when a page and the
results disagree.

The results files of full runs are committed with the pages (quick runs' are not): they are what the docs' figures
rest on. Earlier figures are in git's history of those files, not on the pages.
"""

from __future__ import annotations

from ..lab.world import ROOT
from .performance_page import PERFORMANCE_PAGE, load_latest, render_performance
from .quality_page import PAGE, load, render

__all__ = ["PAGE", "PERFORMANCE_PAGE", "load", "load_latest", "render", "render_performance", "run"]


def run(quick: bool = False) -> dict:
    results = load()
    if results:
        PAGE.write_text(render(results))
        print(f"wrote {PAGE.relative_to(ROOT)} from {len(results)} result file(s)")
    else:
        print("no results/protocols-*.json: run `python -m benchmarks protocols` on a log first")
    latest = load_latest()
    PERFORMANCE_PAGE.write_text(render_performance(latest))
    missing = [name for name, found in latest.items() if not found]
    print(f"wrote {PERFORMANCE_PAGE.relative_to(ROOT)} from {sum(map(len, latest.values()))} result file(s)"
          + (f"; not run yet: {', '.join(missing)}" if missing else ""))
    return {"page": str(PAGE), "logs": [r["log"] for r in results], "performance_page": str(PERFORMANCE_PAGE),
            "not_run": missing}
