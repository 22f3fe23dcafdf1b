"""POST /events: store interaction events and schedule recomputes of the affected users' feeds.

Events are stored only when Redis answers (checked first), so an accepted event always has its recompute
scheduled; if Redis fails between the database commit and the scheduling, the client gets a 503 and retries:
events carrying an ``event_id`` are stored once however often they are posted, and the retry schedules the
recompute. (Without ``event_id`` a retry stores the event again; ``manage.py precompute --stale`` finds users whose
feed fell behind.)
"""

from __future__ import annotations

import time

from flask import Blueprint, current_app

from jobs.queues import notify_changed
from precompute import defaults
from precompute.errors import InvalidInput
from precompute.events import NewEvent, record
from precompute.models import EventType
from precompute.services import ping_redis

from .errors import json_response
from .parse import body_object, field_id, field_number, json_body

bp = Blueprint("events", __name__)
_TYPES = {t.name: int(t) for t in EventType}
# Accept events up to a year old and a minute in the future (clock skew); ts defaults to now.
_PAST, _FUTURE = 365 * 86400, 60


@bp.post("/events")
def post_events():
    body = json_body()
    batch = body if isinstance(body, list) else [body]
    if not batch:
        raise InvalidInput("no events in the request")
    if len(batch) > defaults.EVENTS_BATCH_MAX:
        raise InvalidInput(f"at most {defaults.EVENTS_BATCH_MAX} events per request")
    now = time.time()
    events = [_parse(body_object(e), now, k if isinstance(body, list) else None) for k, e in enumerate(batch)]
    ctx = current_app.extensions["prefeed"]
    ping_redis(ctx["redis"])
    result = record(ctx["engine"], events)
    if result.versions:
        pipe = ctx["redis"].pipeline(transaction=False)
        for uid, iid, version in result.seen:
            pipe.zadd(ctx["keys"].seen(uid), {str(iid): version})
        for uid in result.versions:
            key = ctx["keys"].seen(uid)
            pipe.zremrangebyrank(key, 0, -defaults.SEEN_RECENT_MAX - 1)
            pipe.expire(key, ctx["settings"].feed_ttl)
        pipe.execute()
    # Every user of the request, not only those with newly stored events: a client retrying after a 503 that
    # came after the commit gets "duplicates" back, and its users must still be recomputed.
    notify_changed(ctx["settings"], ctx["redis"], {e.user_id for e in events})
    return json_response({"accepted": result.accepted, "duplicates": result.duplicates}, 202)


def _parse(obj: dict, now: float, index: int | None) -> NewEvent:
    try:
        kind = obj.get("type")
        if kind not in _TYPES:
            raise InvalidInput(f"type must be one of {', '.join(_TYPES)}")
        event_id = obj.get("event_id")
        if event_id is not None and (not isinstance(event_id, str) or not 1 <= len(event_id) <= 64):
            raise InvalidInput("event_id must be a string of 1 to 64 characters")
        unknown = set(obj) - {"user_id", "item_id", "type", "ts", "event_id"}
        if unknown:
            raise InvalidInput(f"unknown field(s): {', '.join(sorted(map(str, unknown)))[:200]}")
        return NewEvent(user_id=field_id(obj, "user_id"), item_id=field_id(obj, "item_id"), type=_TYPES[kind],
                        ts=field_number(obj, "ts", now - _PAST, now + _FUTURE, default=now),
                        client_event_id=event_id)
    except InvalidInput as exc:
        if index is None:
            raise
        raise InvalidInput(f"event {index}: {exc}") from None
