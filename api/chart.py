"""The dashboard's feed-age chart as SVG drawn on the server: two polylines (p50, p99) over the history points
(``precompute.feeds.freshness``), a log-free linear y axis in minutes or hours, time on x. No JavaScript."""

from __future__ import annotations

import time

WIDTH, HEIGHT = 560, 180
LEFT, RIGHT, TOP, BOTTOM = 52, 10, 10, 26


def freshness(points: list[dict]) -> dict | None:
    """Everything the template draws, in SVG user units; None with fewer than two points."""
    pts = [p for p in points if isinstance(p.get("p50"), (int, float)) and isinstance(p.get("p99"), (int, float))]
    if len(pts) < 2:
        return None
    t0, t1 = pts[0]["t"], pts[-1]["t"]
    top = max(p["p99"] for p in pts) or 1.0
    unit, div = (("h", 3600.0) if top >= 3 * 3600 else ("min", 60.0) if top >= 180 else ("s", 1.0))
    top = _nice(top / div) * div
    w, h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def xy(p, key):
        x = LEFT + (p["t"] - t0) / ((t1 - t0) or 1.0) * w
        y = TOP + h - min(p[key], top) / top * h
        return f"{x:.1f},{y:.1f}"

    ticks = [(TOP + h - k / 4 * h, f"{top / div * k / 4:g} {unit}") for k in range(5)]
    return {"width": WIDTH, "height": HEIGHT, "left": LEFT, "right": WIDTH - RIGHT, "top": TOP, "bottom": TOP + h,
            "p50": " ".join(xy(p, "p50") for p in pts), "p99": " ".join(xy(p, "p99") for p in pts),
            "ticks": ticks, "from": _hm(t0), "to": _hm(t1), "n": len(pts)}


def _nice(x: float) -> float:
    """The smallest of 1, 2, 2.5, 5 × 10^k at or above ``x``."""
    k = 1.0
    while k * 10 < x:
        k *= 10
    while k > x * 10:
        k /= 10
    for m in (1, 2, 2.5, 5, 10):
        if m * k >= x:
            return m * k
    return 10 * k


def _hm(ts: float) -> str:
    return time.strftime("%d %b %H:%M UTC", time.gmtime(ts))
