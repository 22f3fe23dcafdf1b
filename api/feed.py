"""GET /feed/<user_id>: the precomputed feed with live rules applied, or a fallback for users without one.

A first page (no ``offset``) answers a ``next_cursor``; ``?cursor=`` continues that scroll with no item served twice
and none skipped while the feed changes (``precompute/feeds/cursor.py``). ``?exclude=`` leaves items out of this page:
the client repeats the ids on each page it wants them left out of (the cursor carries what was served, not what was
excluded, so it does not grow with them); an id left out of one page and not the next is served on the next if it
ranks above the deepest item served, as an item dropped by no rule would be. An expired cursor, or one signed with a
secret this API no longer holds, starts over from the top (``"restarted": true``). ``?diversity=K/W`` (or ``off``)
replaces the deployment's diversity rule for this page (``precompute/feeds/diversity.py``); a scroll's next page
knows the categories of its last slots from the cursor. ``offset`` pages are cut from the feed as it is at each read, for clients that do not
scroll."""

from __future__ import annotations

import time

from flask import Blueprint, g, request

from precompute.errors import InvalidInput
from precompute.feeds import cursor
from precompute.feeds.diversity import WINDOW_MAX

from .auth import require
from .errors import json_response
from .fallback import fallback
from .parse import path_id, query_diversity, query_ids, query_int
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
    exclude = query_ids("exclude", settings.exclude_max)
    diversity = query_diversity("diversity", WINDOW_MAX)
    given = request.args.get("cursor")
    if given is not None and "offset" in request.args:
        raise InvalidInput("give cursor or offset, not both")
    scroll, restarted = None, False
    if given is not None:
        scroll = svc.cursors.decode(given, uid)
        restarted = scroll is None
    if scroll is None and offset == 0:
        scroll = cursor.start(uid)                # a first page is the start of a scroll
    page = svc.pages.page(uid, limit, offset, scroll, exclude, diversity)
    if page is None:
        page = fallback(svc, uid, limit, offset, scroll=scroll, exclude=exclude, diversity=diversity)
    header = page.header
    ids = [i for i, _, _ in page.items]
    n_boosted = sum(1 for _, _, b in page.items if b)
    next_cursor = None
    if scroll is not None and len(ids) == limit:     # a short page is the feed's end: nothing to continue
        next_cursor = svc.cursors.next(scroll, ids, n_boosted, page.recent)
    items = [{"item_id": i, "score": round(s, 6), "boosted": b} for i, s, b in page.items]
    served_at = served_clock(svc)
    if page.known:
        experiment_id, arm_index, experiment, arm = svc.experiments.place(
            uid, header.experiment if header else None, header.arm if header else None)
        if svc.impressions is not None and not svc.impressions.record(
                uid, experiment_id, arm_index, served_at, scroll.slots if scroll else offset, ids,
                g.get("request_id") or ""):
            svc.metrics.capped()
    else:               # an id the database holds no event of: in no arm, not recorded (a made-up id skews nothing)
        experiment = arm = None
    svc.metrics.served(page.source, n_boosted, header.computed_at if header else None, experiment, arm, len(ids))
    return json_response({
        "user_id": uid,
        "items": items,
        "source": page.source,
        "model_version": header.model_version if header else None,
        "computed_at": header.computed_at if header else None,
        "history_version": header.history_version if header else None,
        "experiment": experiment,
        "arm": arm,
        "served_at": served_at,
        "next_cursor": next_cursor,
        **({"restarted": True} if restarted else {}),
    })



def served_clock(svc: Services) -> float:
    """The time a page is served at, on the events' clock (the newest accepted event time: a log replayed with its
    own times is attributed as live traffic is), as this process read it with the item states. Unset (a Redis that
    lost it, a log only imported): the database's newest event time, written back so that one read restores it.
    Never after the wall clock (``ItemStates.advance_clock``)."""
    clock = svc.pages.states.clock
    if clock is None:
        from precompute.data.clock import newest_event

        with svc.engine.connect() as conn:
            clock = newest_event(conn)
        clock = time.time() if clock is None else min(clock, time.time())
        svc.item_states.advance_clock(clock)
        svc.pages.states.clock = clock
    return clock
