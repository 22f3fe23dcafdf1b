"""GET /dashboard: the operator's page, behind the admin token (``auth.check_dashboard``). Server-rendered (Jinja,
``templates/dashboard.html``): the status snapshot (``jobs.status``, as ``manage.py status`` prints it), a chart of
feed age over time, the experiments' reports with a chart each (``experiments_panel``), and a user lookup
(``?user=ID``): the page that user is served now, with scores, boosts, what the user's and every user's pages did
with each item, the items the live rules dropped and why, the feed's stamps, and their newest events.
GET /dashboard/status.json: the snapshot as JSON."""

from __future__ import annotations

import time

from flask import Blueprint, current_app, render_template, request

from jobs.status import age_text, snapshot, utc_text
from precompute.data import item_days, users
from precompute.data.shown_pages import shown_before
from precompute.errors import InvalidInput

from . import chart, experiments_panel
from .auth import dashboard_required
from .errors import json_response
from .fallback import fallback
from .parse import query_int
from .services import Services, services

bp = Blueprint("dashboard", __name__)

RECENT_EVENTS = 20


@bp.after_app_request
def _not_framed_nor_stored(response):
    """The dashboard, ``status.json`` and every answer of the RQ panel (its pages, data, static files and
    refusals) are never shown inside another site's frame (clickjacking), nor kept by a browser or a proxy: they
    show the deployment's state to an admin key."""
    if request.path.startswith("/dashboard"):
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Content-Security-Policy"] = "frame-ancestors 'none'"
        response.headers["Cache-Control"] = "no-store"
    return response


@bp.get("/dashboard")
@dashboard_required
def dashboard():
    svc = services()
    settings = svc.settings
    raw = request.args.get("user", "").strip()
    uid = _user_id(raw) if raw else None
    limit = query_int("limit", settings.page_limit_default, 1, settings.page_limit_max)
    status = snapshot(settings, svc.engine, svc.queue_redis, svc.feed_redis)
    html = render_template("dashboard.html", s=status, chart=chart.freshness(status["freshness"]),
                           experiments=experiments_panel.panel(settings, svc.engine),
                           lookup=None if uid is None else lookup(svc, uid, limit), user=raw, limit=limit,
                           rq_prefix="/dashboard/rq/", when=utc_text, age=age_text)
    return current_app.response_class(html, mimetype="text/html")


@bp.get("/dashboard/status.json")
@dashboard_required
def status_json():
    svc = services()
    return json_response(snapshot(svc.settings, svc.engine, svc.queue_redis, svc.feed_redis))


def lookup(svc: Services, uid: int, limit: int) -> dict:
    """What ``GET /feed/<uid>?limit=<limit>`` serves now, and why: the same live page code (``PageReader.explain``;
    the fallback as the API builds it, without scheduling a recompute)."""
    settings = svc.settings
    pages = svc.pages
    found = pages.explain(uid, limit, 0)
    if found is None:
        page, dropped, ranks = fallback(svc, uid, limit, 0, notify=False), [], []
    else:
        page, dropped, ranks = found
    ids = [i for i, _, _ in page.items]
    weights = pages.states.weights(ids)
    before = shown_before(svc.engine, uid)
    clock = pages.states.clock
    everyone = item_days.exposure(svc.engine, ids, time.time() if clock is None else clock)
    rates = everyone.rate.tolist()
    items = [{"item_id": i, "score": round(s, 6), "boosted": b, "weight": w if b else None,
              "rank": ranks[k] if k < len(ranks) else None, "shown": before.get(i),
              "everyone": (int(everyone.shown[k]), int(everyone.acted[k]), rates[k])}
             for k, ((i, s, b), w) in enumerate(zip(page.items, weights))]
    h = page.header
    version = users.history_version(svc.engine, uid)
    return {
        "user_id": uid,
        "known": version is not None,
        "history_version_db": version,
        "source": page.source,
        "items": items,
        "prior_rate": everyone.prior,
        "dropped": [d.__dict__ for d in dropped],
        "history_version": h.history_version if h else None,
        "model_version": h.model_version if h else None,
        "computed_at": h.computed_at if h else None,
        "feed_length": h.count if h else None,
        "events": users.recent_events(svc.engine, uid, RECENT_EVENTS, settings),
    }


def _user_id(raw: str) -> int:
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= 2**63 - 1:
        raise InvalidInput("user must be an integer from 1 to 2^63 - 1")
    return int(raw)
