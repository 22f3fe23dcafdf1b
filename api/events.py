"""POST /events: store interaction events and schedule recomputes of the affected users' feeds.

Events are stored only when Redis answers (checked first), so an accepted event always has its recompute
scheduled; if Redis fails between the database commit and the scheduling, the client gets a 503 and retries:
events carrying an ``event_id`` are stored once however often they are posted, and the retry schedules the
recompute. An ``event_id`` is the user's own key: the same id posted for another user is another event. (Without ``event_id`` a retry stores the event again; ``manage.py precompute --stale`` finds users whose
feed fell behind.) An event naming an item the catalogue does not have creates it bare, in the same transaction
(``items_created`` in the answer) when the key has the ``items:write`` scope; without it, or with
``PREFEED_EVENTS_CREATE_ITEMS=false``, the whole batch is refused (404 naming the ids).

Limits, all charged in one round trip and all or none, before anything is written: the key's token bucket one token
per event (the first taken on arrival, ``auth.py``); each user id at most ``PREFEED_USER_EVENTS_PER_MINUTE`` events a
minute; each key at most ``PREFEED_KEY_NEW_USERS_PER_MINUTE`` user ids the database does not have yet (or its own
``--new-users``), counted with one query before recording. Over one: 429 with ``Retry-After`` (when a retry fits,
absent other traffic), nothing written. A batch that could never fit (more events than the key's burst, more for one
user id than its per-minute limit, more new user ids than the key's) is a 400 naming the limit: retrying it as it is
would only be refused again. New user ids are marked dirty in the new tier (``precompute/feeds/dirty.py``), so a
flood of made-up ids never holds back the recompute of a user who had a history.
"""

from __future__ import annotations

import time

from flask import Blueprint, g

from jobs.queues import notify_changed, schedule_collect
from precompute.data import users
from precompute.data.event_types import EventTypes
from precompute.data.recording import NewEvent, record
from precompute.errors import InvalidInput, TooManyRequests
from precompute.feeds.client import ping_redis
from precompute.feeds.dirty import DirtyUsers
from precompute.feeds.limits import Bucket

from .auth import OPEN, key_bucket, new_users_bucket, new_users_per_minute, rate_refusal, require
from .errors import json_response
from .parse import body_object, field_id, field_number, field_optional_number, json_body, refuse_unknown
from .services import Services, services

bp = Blueprint("events", __name__)


@bp.post("/events")
@require("events:write", charged_in_view=True)
def post_events():
    body = json_body()
    batch = body if isinstance(body, list) else [body]
    if not batch:
        raise InvalidInput("no events in the request")
    svc = services()
    settings = svc.settings
    if len(batch) > settings.events_batch_max:
        raise InvalidInput(f"at most {settings.events_batch_max} events per request")
    known = _refuse_early(svc, batch) if g.key is not OPEN else None
    # ts may lie up to event_max_age in the past and event_max_future ahead (clock skew); it defaults to now.
    now = time.time()
    window = (now - settings.event_max_age, now + settings.event_max_future)
    types = EventTypes.of(settings).codes
    events = [_parse(body_object(e), types, now, window, k if isinstance(body, list) else None)
              for k, e in enumerate(batch)]
    batch_users = sorted({e.user_id for e in events})
    new_users = sorted(set(batch_users) - (users.existing(svc.engine, batch_users) if known is None else known))
    _charge(svc, events, new_users)          # a batch over a limit this process saw refused costs no round trip
    ping_redis(svc.feed_redis)
    ping_redis(svc.queue_redis)
    result = record(svc.engine, events, settings, create_items=settings.events_create_items and
                    g.key.allows("items:write"), new_users=bool(new_users))
    if result.versions:
        pipe = svc.feed_redis.pipeline(transaction=False)
        for uid, iid, version in result.seen:
            pipe.zadd(svc.keys.seen_recent(uid), {str(iid): version})
        for uid in result.versions:
            key = svc.keys.seen_recent(uid)
            pipe.zremrangebyrank(key, 0, -settings.seen_recent_max - 1)
            pipe.expire(key, settings.feed_ttl)
        pipe.execute()
        # the clock pages are timed on; a call of its own: a cluster pipeline refuses scripts
        svc.item_states.advance_clock(max(e.ts for e in events))
    # Every user of the request, not only those with newly stored events: a client retrying after a 503 that
    # came after the commit gets "duplicates" back, and its users must still be recomputed. New users are marked
    # in the new tier, claimed after every known user due (``dirty.py``).
    DirtyUsers(svc.queue_redis, settings).mark_new(new_users)
    notify_changed(settings, svc.queue_redis, sorted(set(batch_users) - set(new_users)))
    if svc.impressions is not None and result.accepted:
        schedule_collect(settings, svc.queue_redis)           # the new events are attributed to served pages
    return json_response({"accepted": result.accepted, "duplicates": result.duplicates,
                          "items_created": result.items_created}, 202)


def _refuse_early(svc: Services, batch: list) -> set[int] | None:
    """429 before the batch is parsed, when the key's new user ids were refused in this process and the batch's new
    ones still would be (``Limiter.known_wait``): only its user ids are read and looked up. A key flooding made-up
    ids past its budget costs that, not a parse of every event. Returns the user ids the database has when it
    looked them up (None when it did not: no refusal known, or user ids not all well-formed, which the full parse
    then names)."""
    if svc.limiter.known_wait(new_users_bucket(svc, g.key, len(batch))) <= 0:
        return None                         # even were every event a new user's, no refusal is known
    try:
        ids = {field_id(body_object(e), "user_id") for e in batch}
    except InvalidInput:
        return None
    known = users.existing(svc.engine, sorted(ids))
    wait = svc.limiter.known_wait(new_users_bucket(svc, g.key, len(ids) - len(known))) if len(known) < len(ids) \
        else 0.0
    if wait > 0:
        raise TooManyRequests(f"over this key's {new_users_per_minute(g.key, svc.settings)} new user ids per minute",
                              retry_after=wait)
    return known


def _charge(svc: Services, events: list[NewEvent], new_users: list[int]) -> None:
    """Charge the batch to the key (one token per event past the first, its new user ids) and to each user id (its
    events): all or none. ``InvalidInput`` for a batch that could never fit, ``TooManyRequests`` when it does not
    fit now."""
    settings, key = svc.settings, g.key
    per_minute = settings.user_events_per_minute
    counts: dict[int, int] = {}
    for e in events:
        counts[e.user_id] = counts.get(e.user_id, 0) + 1
    if max(counts.values()) > per_minute:
        uid = max(counts, key=counts.__getitem__)
        raise InvalidInput(f"{counts[uid]} events for user id {uid}: more than PREFEED_USER_EVENTS_PER_MINUTE "
                           f"({per_minute}) allows a user id at once; send them in smaller batches")
    limits: list[tuple[Bucket, str]] = [
        (Bucket(svc.keys.rate_user(uid), per_minute / 60.0, per_minute, n),
         f"over {per_minute} events per minute for one user id") for uid, n in sorted(counts.items())]
    if key is not OPEN:                                 # PREFEED_AUTH=off: no key, no key's budgets
        rate = key_bucket(svc, key, len(events) - 1)    # the first token was taken on arrival
        if len(events) > rate.burst:
            raise InvalidInput(f"{len(events)} events in one request: more than this key's burst of {rate.burst} "
                               f"tokens (one per event) allows at once; send at most {rate.burst} per request")
        capped = new_users_per_minute(key, settings)
        if len(new_users) > capped:
            raise InvalidInput(f"{len(new_users)} user ids new to the database in one request: more than this key's "
                               f"{capped} new user ids per minute allows at once")
        if rate.cost:
            limits.append((rate, rate_refusal(key, settings)))
        if new_users:
            limits.append((new_users_bucket(svc, key, len(new_users)),
                           f"over this key's {capped} new user ids per minute"))
    waits = svc.limiter.take_each([bucket for bucket, _ in limits])
    if waits:
        # A retry pays its first token again on arrival: the key's bucket must then hold one more.
        waits = [w + 1.0 / b.rate if w > 0 and b.key == svc.keys.rate_key(key.name) else w
                 for w, (b, _) in zip(waits, limits)]
        worst = max(range(len(waits)), key=waits.__getitem__)
        raise TooManyRequests(limits[worst][1], retry_after=waits[worst])


def _parse(obj: dict, types: dict[str, int], now: float, window: tuple[float, float], index: int | None) -> NewEvent:
    try:
        kind = obj.get("type")
        if not isinstance(kind, str) or kind not in types:      # a list or object is not even hashable
            raise InvalidInput(f"type must be one of {', '.join(types)}")
        event_id = obj.get("event_id")
        if event_id is not None and (not isinstance(event_id, str) or not 1 <= len(event_id) <= 64):
            raise InvalidInput("event_id must be a string of 1 to 64 characters")
        if event_id is not None and "\x00" in event_id:
            raise InvalidInput("event_id must not contain the NUL character")
        refuse_unknown(obj, ("user_id", "item_id", "type", "ts", "event_id", "value"))
        return NewEvent(user_id=field_id(obj, "user_id"), item_id=field_id(obj, "item_id"), type=types[kind],
                        ts=field_number(obj, "ts", *window, default=now),
                        client_event_id=event_id, value=field_optional_number(obj, "value"))
    except InvalidInput as exc:
        if index is None:
            raise
        raise InvalidInput(f"event {index}: {exc}") from None
