"""``GET /metrics``: the API's Prometheus metrics in the text format (``meters.py`` records them), with the scope
``metrics:read``."""

from __future__ import annotations

from flask import Blueprint, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .auth import require
from .services import services

bp = Blueprint("metrics", __name__)


@bp.get("/metrics")
@require("metrics:read")
def metrics():
    body = generate_latest(services().metrics.registry)
    return Response(body, mimetype=None, content_type=CONTENT_TYPE_LATEST)
