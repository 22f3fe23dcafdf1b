"""GET /feed/<user_id>: the precomputed feed with live rules applied, or a fallback for users without one."""

from __future__ import annotations

import numpy as np
from flask import Blueprint, current_app

from jobs.queues import notify_changed
from precompute.data import catalog, event_types

from .errors import json_response
from .parse import path_id, query_int

bp = Blueprint("feed", __name__)


@bp.get("/feed/<user_id>")
def get_feed(user_id: str):
    uid = path_id(user_id, "user_id")
    ctx = current_app.extensions["prefeed"]
    settings = ctx["settings"]
    limit = query_int("limit", settings.page_limit_default, 1, settings.page_limit_max)
    offset = query_int("offset", 0, 0, settings.feed_length)
    page = ctx["live"].page(uid, limit, offset)
    if page is None:
        page = fallback(ctx, uid, limit, offset)
    header = page.header
    items = [{"item_id": i, "score": round(s, 6), "boosted": b} for i, s, b in page.items]
    ctx["metrics"].feed(page.source, sum(1 for _, _, b in page.items if b), header.computed_at if header else None)
    return json_response({
        "user_id": uid,
        "items": items,
        "source": page.source,
        "model_version": header.model_version if header else None,
        "computed_at": header.computed_at if header else None,
        "history_version": header.history_version if header else None,
    })


def fallback(ctx, uid: int, limit: int, offset: int, notify: bool = True):
    """Popular in the user's recent categories, else global popular; and ask for the real feed (unless ``notify``
    is False: the dashboard shows the fallback without acting).

    The user's categories are ranked as precompute ranks them: each recent event adds its type's weight
    (``PREFEED_EVENT_TYPES``) to every category of its item; ties by category id."""
    settings = ctx["settings"]
    recent = catalog.latest_interactions(ctx["engine"], uid, settings.seen_recent_max)
    seen = np.union1d(catalog.seen_items(ctx["engine"], uid, settings),
                      np.array([r[0] for r in recent], dtype=np.int64))
    by_type = event_types.EventTypes.of(settings).weight_by_code()
    type_weight = event_types.by_code(by_type, [r[1] for r in recent]).tolist()
    weights: dict[int, float] = {}
    for (_, _, cats), w in zip(recent, type_weight):
        for c in cats:
            weights[c] = weights.get(c, 0.0) + w
    top = sorted((c for c in weights if weights[c] > 0), key=lambda c: (-weights[c], c))
    if notify and len(recent):
        notify_changed(settings, ctx["queue_redis"], [uid])
    return ctx["live"].fallback(top[: settings.user_top_categories], limit, offset, seen,
                                lambda n: catalog.newest_active(ctx["engine"], n))
