"""What every request records as it ends: its latency in the metrics (``api/metrics.py``), its log line and request
id (``api/logs.py``). Registered as Flask's ``before_request`` / ``after_request`` hooks; every error becomes a
response first (``api/errors.py``), so failed requests are recorded too."""

from __future__ import annotations

import time

from flask import Flask, Response, g, request

from . import logs
from .services import services

UNMATCHED = "<unmatched>"      # the route label of a path no rule matches (a 404): never the path itself
#: Methods labelled by name; any other (a client may send any token) is "other", so labels stay bounded.
METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"))


def register(app: Flask) -> None:
    metrics = services(app).metrics

    @app.before_request
    def _start() -> None:
        g.started = time.perf_counter()
        g.request_id = logs.request_id(request.headers.get(logs.HEADER))

    @app.after_request
    def _finish(response: Response) -> Response:
        started = g.get("started")
        rid = g.get("request_id") or logs.request_id(None)
        seconds = time.perf_counter() - started if started is not None else 0.0
        rule = request.url_rule
        route = rule.rule if rule is not None else UNMATCHED
        method = request.method if request.method in METHODS else "other"
        metrics.request(route, method, response.status_code, seconds)
        logs.request_line(rid, method, route, response.status_code, seconds)
        response.headers[logs.HEADER] = rid
        return response
