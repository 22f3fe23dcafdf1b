"""The fallback as the API serves it (``GET /feed/<user_id>``, the dashboard's lookup): the user's newest events and
seen items read from the database, the page made by the core (``precompute/feeds/fallback.py``)."""

from __future__ import annotations

from jobs.queues import notify_changed
from precompute.data import catalog, event_types
from precompute.feeds.cursor import Scroll
from precompute.feeds.diversity import Diversity
from precompute.feeds.fallback import fallback_page
from precompute.feeds.page import Page

from .services import Services


def fallback(svc: Services, uid: int, limit: int, offset: int, notify: bool = True,
             scroll: Scroll | None = None, exclude: frozenset[int] = frozenset(),
             diversity: Diversity | None = None) -> Page:
    """The fallback page of ``uid`` without the items of ``exclude``, under the request's ``diversity`` rule
    (default: the deployment's); and ask for their real feed when they have
    events (unless ``notify`` is False: the dashboard shows the fallback without acting)."""
    settings = svc.settings
    recent = catalog.latest_interactions(svc.engine, uid, settings.fallback_events)
    seen = catalog.seen_items(svc.engine, uid, settings)
    weights = event_types.by_code(event_types.EventTypes.of(settings).weight_by_code(), [r[1] for r in recent])
    if notify and len(recent):
        notify_changed(settings, svc.queue_redis, [uid])
    return fallback_page(svc.pages, recent, weights, seen, settings.user_top_categories, limit, offset,
                         lambda n: catalog.newest_active(svc.engine, n), scroll, exclude, diversity)
