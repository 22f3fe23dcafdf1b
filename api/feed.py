"""GET /feed/<user_id>: the precomputed feed with live rules applied, or a fallback for users without one.

A first page (no ``offset``) answers a ``next_cursor``; ``?cursor=`` continues that scroll with no item served twice
and none skipped while the feed changes (``precompute/feeds/cursor.py``). An expired cursor starts over from the top
(``"restarted": true``). ``offset`` pages are cut from the feed as it is at each read, for clients that do not
scroll."""

from __future__ import annotations

import numpy as np
from flask import Blueprint, request

from jobs.queues import notify_changed
from precompute.data import catalog, event_types
from precompute.errors import InvalidInput
from precompute.feeds import cursor

from .auth import require
from .errors import json_response
from .parse import path_id, query_int
from .services import Services, services

bp = Blueprint("feed", __name__)


@bp.get("/feed/<user_id>")
@require("feed:read")
def get_feed(user_id: str):
    uid = path_id(user_id, "user_id")
    svc = services()
    settings = svc.settings
    limit = query_int("limit", settings.page_limit_default, 1, settings.page_limit_max)
    offset = query_int("offset", 0, 0, settings.feed_length)
    given = request.args.get("cursor")
    if given is not None and "offset" in request.args:
        raise InvalidInput("give cursor or offset, not both")
    scroll, restarted = None, False
    if given is not None:
        scroll = svc.cursors.decode(given, uid)
        restarted = scroll is None
    if scroll is None and offset == 0:
        scroll = cursor.start(uid)                # a first page is the start of a scroll
    page = svc.pages.page(uid, limit, offset, scroll)
    if page is None:
        page = fallback(svc, uid, limit, offset, scroll=scroll)
    header = page.header
    n_boosted = sum(1 for _, _, b in page.items if b)
    next_cursor = None
    if scroll is not None and len(page.items) == limit:     # a short page is the feed's end: nothing to continue
        next_cursor = svc.cursors.next(scroll, [i for i, _, _ in page.items], n_boosted)
    items = [{"item_id": i, "score": round(s, 6), "boosted": b} for i, s, b in page.items]
    svc.metrics.feed(page.source, n_boosted, header.computed_at if header else None)
    return json_response({
        "user_id": uid,
        "items": items,
        "source": page.source,
        "model_version": header.model_version if header else None,
        "computed_at": header.computed_at if header else None,
        "history_version": header.history_version if header else None,
        "next_cursor": next_cursor,
        **({"restarted": True} if restarted else {}),
    })


def fallback(svc: Services, uid: int, limit: int, offset: int, notify: bool = True,
             scroll: cursor.Scroll | None = None):
    """Popular in the user's recent categories, else global popular; and ask for the real feed (unless ``notify``
    is False: the dashboard shows the fallback without acting).

    The user's categories are ranked as precompute ranks them: each recent event adds its type's weight
    (``PREFEED_EVENT_TYPES``) to every category of its item; ties by category id."""
    settings = svc.settings
    recent = catalog.latest_interactions(svc.engine, uid, settings.seen_recent_max)
    seen = np.union1d(catalog.seen_items(svc.engine, uid, settings),
                      np.array([r[0] for r in recent], dtype=np.int64))
    if scroll is not None:                        # a scroll's next page: what it has not served, from the top
        seen = np.union1d(seen, np.array(scroll.served, dtype=np.int64))
        offset = 0
    by_type = event_types.EventTypes.of(settings).weight_by_code()
    type_weight = event_types.by_code(by_type, [r[1] for r in recent]).tolist()
    weights: dict[int, float] = {}
    for (_, _, cats), w in zip(recent, type_weight):
        for c in cats:
            weights[c] = weights.get(c, 0.0) + w
    top = sorted((c for c in weights if weights[c] > 0), key=lambda c: (-weights[c], c))
    if notify and len(recent):
        notify_changed(settings, svc.queue_redis, [uid])
    return svc.pages.fallback(top[: settings.user_top_categories], limit, offset, seen,
                              lambda n: catalog.newest_active(svc.engine, n))
