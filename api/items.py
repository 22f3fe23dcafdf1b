"""The catalogue through the API (admin): ``PUT /items/<item_id>`` replaces a whole item (creating it if new),
``PATCH /items/<item_id>`` changes the given fields of an existing one (``{"active": false}``: a listing sold),
``POST /items`` upserts a batch, all or nothing. Served feeds drop inactive items at once.

The database is the record; Redis's inactive set is what serving reads. Each write commits to the database first,
then brings the set in line with the active flags it wrote; every verb is idempotent, so a client that gets a 503
between the two retries and both agree.
"""

from __future__ import annotations

import dataclasses
import time

from flask import Blueprint

from precompute.data import items
from precompute.data.items import NewItem, Upserted
from precompute.errors import InvalidInput
from precompute.feeds.client import ping_redis

from .auth import require
from .errors import json_response
from .parse import (body_object, field_id, field_id_set, field_optional_number, field_time, json_body, path_id,
                    refuse_unknown)
from .services import services

bp = Blueprint("items", __name__)

#: The fields of an item body (``POST /items`` adds ``item_id``); an absent one is none, ``active`` defaults true.
FIELDS = ("categories", "price", "created_at", "attributes", "active")


@bp.put("/items/<item_id>")
@require("items:write")
def put_item(item_id: str):
    item, _ = _parse(body_object(json_body()), path_id(item_id, "item_id"))
    done = _upsert([item])
    return json_response({"item_id": item.item_id, "created": bool(done.created)}, 201 if done.created else 200)


@bp.patch("/items/<item_id>")
@require("items:write")
def patch_item(item_id: str):
    item, given = _parse(body_object(json_body()), path_id(item_id, "item_id"))
    svc = services()
    ping_redis(svc.feed_redis)
    with svc.engine.begin() as conn:
        items.patch(conn, item, given)
    if "active" in given:
        _follow_active({item.item_id: item.active})
    changed = {name: value for name, value in dataclasses.asdict(item).items() if name in given}
    return json_response({"item_id": item.item_id, **changed})


@bp.post("/items")
@require("items:write")
def post_items():
    body = body_object(json_body())
    refuse_unknown(body, ("items",))
    batch = body.get("items")
    limit = services().settings.items_batch_max
    if not isinstance(batch, list) or not 1 <= len(batch) <= limit:
        raise InvalidInput(f"items must be a list of 1 to {limit} items")
    new = []
    for k, obj in enumerate(batch):
        try:
            obj = body_object(obj)
            new.append(_parse({f: v for f, v in obj.items() if f != "item_id"}, field_id(obj, "item_id"))[0])
        except InvalidInput as exc:
            raise InvalidInput(f"item {k}: {exc}") from None
    done = _upsert(new)
    return json_response({"created": done.created, "updated": done.updated})


def _parse(obj: dict, item_id: int) -> tuple[NewItem, set[str]]:
    """The item ``obj`` states, and the fields it gives."""
    refuse_unknown(obj, FIELDS)
    active = obj.get("active", True)
    if type(active) is not bool:
        raise InvalidInput("active must be true or false")
    # created_at as an event's ts: up to PREFEED_EVENT_MAX_FUTURE ahead (clock skew), never pinned at the top of
    # the newest items for good
    created_at = field_time(obj, "created_at", services().settings.event_max_future)
    return NewItem(item_id=item_id, categories=field_id_set(obj, "categories"),
                   price=field_optional_number(obj, "price", lo=0.0), created_at=created_at,
                   attributes=_attributes(obj), active=active), set(obj)


def _attributes(obj: dict) -> dict[str, float | None]:
    """``{name: number or None}``, names among the declared ``PREFEED_ITEM_ATTRIBUTES``; absent or null: every
    declared name None (none, and for PATCH: every attribute removed)."""
    given = obj.get("attributes")
    declared = services().settings.item_attributes
    if given is None:
        return dict.fromkeys(declared)
    if not isinstance(given, dict):
        raise InvalidInput("attributes must be an object of {name: number or null}")
    undeclared = sorted(set(given) - set(declared))
    if undeclared:
        raise InvalidInput(f"undeclared attribute(s) {', '.join(undeclared)[:100]}: PREFEED_ITEM_ATTRIBUTES declares "
                           + (", ".join(declared) or "none"))
    return {name: field_optional_number(given, name) for name in given}


def _upsert(new: list[NewItem]) -> Upserted:
    """Replace or create the items of ``new`` (the same id twice: the last wins) in one transaction."""
    svc = services()
    attributes = svc.settings.item_attributes
    chunk, active = items.chunk_of(new, attributes)
    ping_redis(svc.feed_redis)
    with svc.engine.begin() as conn:
        done = items.upsert(conn, chunk, attributes, active=active)
    _follow_active({item.item_id: item.active for item in new})
    _register_new(new, done.new_ids)
    return done


def _register_new(new: list[NewItem], created: tuple[int, ...]) -> None:
    """Register the active items this request created as new (``precompute/feeds/new_items.py``): their
    ``created_at``, or the events' clock when they give none, must lie within ``PREFEED_NEW_ITEM_WINDOW`` of it."""
    svc = services()
    if not created or not svc.new_items.rule.on:
        return
    now = svc.pages.states.clock or time.time()     # read just now, by ``_follow_active``'s refresh
    last = {item.item_id: item for item in new}          # the same id twice: the last wins, as in the database
    svc.new_items.add([(i, now if last[i].created_at is None else last[i].created_at, last[i].categories)
                       for i in created if last[i].active], now)


def _follow_active(flags: dict[int, bool]) -> None:
    """Bring the item states' inactive set in line with the active ``flags`` just committed (item id → active)."""
    svc = services()
    svc.item_states.set_active(flags)
    svc.pages.states.refresh(force=True)        # this process serves it at once; the others within the bound
