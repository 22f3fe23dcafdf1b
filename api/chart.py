"""The dashboard's charts as SVG drawn on the server; the template draws what these functions place, in SVG user
units. No JavaScript.

- ``freshness``: feed age, two polylines (p50, p99) over the history points (``precompute.feeds.freshness``), a
  log-free linear y axis in minutes or hours, time on x.
- ``per_arm``: an experiment's metric per exposed user, one point per arm with its 95% interval as an error bar, on a
  linear y axis from 0; a dashed line at the control's value, so an arm's bar crossing it reads "no clear
  difference" (the report's ratio interval is the test: this is the picture)."""

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


def per_arm(arms: list[tuple[str, float | None, list[float] | None]]) -> dict | None:
    """``arms``: (name, value, [low, high] or None) in the report's order, the control first. None when no arm has a
    value (no exposed user yet): nothing to draw."""
    top = max((x for _, v, iv in arms for x in (v, *(iv or ())) if x is not None), default=None)
    if top is None:
        return None
    top = _nice(top) if top > 0 else 1.0
    w, h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = w / len(arms)

    def y(v: float) -> float:
        return round(TOP + h - min(max(v, 0.0), top) / top * h, 1)

    bars = []
    for k, (name, value, iv) in enumerate(arms):
        x = round(LEFT + (k + 0.5) * step, 1)
        bars.append({"name": name, "x": x, "y": None if value is None else y(value),
                     "low": None if iv is None else y(iv[0]), "high": None if iv is None else y(iv[1]),
                     "label": "no users" if value is None else f"{value:.3g}"})
    control = arms[0][1]
    return {"width": WIDTH, "height": HEIGHT, "left": LEFT, "right": WIDTH - RIGHT, "top": TOP, "bottom": TOP + h,
            "ticks": [(TOP + h - k / 4 * h, f"{top * k / 4:g}") for k in range(5)], "bars": bars,
            "control": None if control is None else y(control)}


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
