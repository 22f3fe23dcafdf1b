"""The dashboard's experiments panel: the report (``precompute.experiments.report``, as ``manage.py experiments
report NAME`` prints it) of every running experiment and of the most recently stopped one, laid out for the
template, with a chart per experiment (``chart.per_arm``).

It reads what the database holds. Pages the API processes served wait in a Redis buffer until the collector's next
run (``PREFEED_IMPRESSIONS_COLLECT_INTERVAL`` after the first one waiting); the CLI's report takes them in first, which
waits for the processes' buffers to settle (seconds), too long for a page load. The panel says so in its caption.

A database error while reading the experiments is shown in the panel (as the model card shows a bundle it cannot
read), not as a failed page: the rest of the dashboard still answers. The driver's message stays in the log.
"""

from __future__ import annotations

import logging

from precompute.errors import database_errors
from precompute.experiments import registry
from precompute.experiments import report as reports
from precompute.experiments.experiment import RUNNING
from precompute.settings import Settings

from . import chart

log = logging.getLogger(__name__)

#: Stopped experiments shown after the running ones, most recently stopped first.
STOPPED_SHOWN = 1


def panel(settings: Settings, engine) -> dict:
    """``{"experiments": [...], "metric", "collect_interval", "error"}``: each shown experiment's report with its
    table rows as text and its chart (None: nothing to draw); ``error`` a line for people, or None."""
    metric = reports.default_metric(settings.event_types)
    out = {"experiments": [], "metric": metric, "collect_interval": settings.impressions_collect_interval,
           "error": None}
    try:
        found = registry.all_experiments(engine)
        running = [e for e in found if e.status == RUNNING]
        stopped = sorted((e for e in found if e.status != RUNNING), key=lambda e: e.stopped_at or 0, reverse=True)
        names = tuple(n for n, _ in settings.event_types)
        for e in running + stopped[:STOPPED_SHOWN]:
            out["experiments"].append(_laid_out(e, reports.build(engine, e, names, metric)))
    except database_errors() as exc:
        log.warning("dashboard: experiments not read: %s: %s", type(exc).__name__, exc)
        out["error"] = f"the experiments could not be read: the database answered {type(exc).__name__}"
    return out


def _laid_out(experiment, report: dict) -> dict:
    """The report with each arm's row as text, and the chart of the metric per exposed user."""
    metric = report["metric"]
    rows = []
    for a in report["arms"]:
        e = a["events"][metric]
        rows.append({"name": a["name"], "spec": a["spec"], "share": f"{a['share']:g}", "users": a["users"],
                     "pages": a["pages"], "impressions": a["impressions"], "attributed": e["attributed"],
                     "per_user": _num(e["per_user"]), "per_user_interval": _interval(e["interval"]),
                     "per_impression": _num(e["per_impression"]), "ratio": _num(a["ratio"]),
                     "ratio_interval": _interval(a["ratio_interval"])})
    p = report["sample_ratio_p"]
    return {**report, "stopped_at": experiment.stopped_at, "winner": experiment.winner, "rows": rows,
            "p": _num(p), "chart": chart.per_arm([(a["name"], a["events"][metric]["per_user"],
                                                   a["events"][metric]["interval"]) for a in report["arms"]])}


def _num(x) -> str:
    return "—" if x is None else f"{x:.4g}"


def _interval(iv) -> str:
    return "" if iv is None else f"[{iv[0]:.3g}, {iv[1]:.3g}]"
