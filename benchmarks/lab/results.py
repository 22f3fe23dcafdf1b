"""What a benchmark run leaves: its table on the console, and its results file under ``benchmarks/results/`` (or
``PREFEED_BENCH_RESULTS``) with the date, the machine and the command that wrote it."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path

from .world import ROOT

RESULTS = Path(os.environ.get("PREFEED_BENCH_RESULTS") or ROOT / "benchmarks" / "results")


def median(xs) -> float:
    return float(statistics.median(xs)) if len(xs) else float("nan")


def table(title: str, header: list[str], rows: list[list]) -> str:
    cells = [header] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(str(r[i])) for r in cells) for i in range(len(header))]
    lines = [title, "  ".join(str(h).ljust(w) for h, w in zip(header, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in cells[1:]]
    return "\n".join(lines)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.0f}"
    return str(v)


#: A results file's suffix for a run without the cascade's first stage (``PREFEED_CASCADE_KEEP=0``), and for one with
#: the "shown" columns (``PREFEED_RANK_SHOWN=1``): the pages set each beside the defaults' run of the same log.
FULL_MODEL, SHOWN = "full-model", "shown"


def variant(cascade_keep, rank_shown) -> str:
    """Which comparison a run with these settings is (its results file's suffix): ``FULL_MODEL``, ``SHOWN`` or ""
    for the defaults. Takes the settings' values or a results file's (absent: the default)."""
    if cascade_keep == 0:
        return FULL_MODEL
    return SHOWN if rank_shown else ""


def write_result(name: str, data: dict, quick: bool) -> Path:
    """Write ``results/<name>.json`` (``<name>-quick.json`` with ``quick``): ``data`` with the benchmark's name, the
    date, the machine and the command that wrote it (``python -m benchmarks protocols`` for ``protocols-<log>``)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{name}{'-quick' if quick else ''}.json"
    payload = {"benchmark": name, "quick": quick, "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
               "machine": machine(),
               "command": " ".join(["python -m benchmarks", name.partition("-")[0]] + (["--quick"] if quick else [])),
               **data}
    out.write_text(json.dumps(payload, indent=2))
    return out


def machine() -> dict:
    """What a figure was measured on: cores, CPU model, memory (GiB), Python, OS, and the load average (1, 5 and 15
    minutes) as the run ended, since other work on a shared machine moves every timing."""
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        pass
    try:
        memory = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30), 1)
    except (ValueError, OSError):
        memory = None
    return {"cpus": os.cpu_count(), "cpu": cpu, "memory_gib": memory, "python": platform.python_version(),
            "platform": platform.platform(), "load_average": [round(x, 2) for x in os.getloadavg()]}
