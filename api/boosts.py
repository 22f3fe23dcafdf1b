"""PUT/DELETE /boosts/<item_id> (admin): lift a paid listing in the feeds that already rank it.

The database is the record (``precompute/data/durable.py``), written first: a boost answered 200 comes back after
Redis lost its data (``jobs/recovery.py``). Redis, which serving reads, follows in the same request."""

from __future__ import annotations

import time

from flask import Blueprint

from precompute.data import catalog, durable
from precompute.errors import InvalidInput

from .auth import require
from .errors import json_response
from .parse import body_object, field_id, field_number, json_body, path_id
from .services import services

bp = Blueprint("boosts", __name__)


@bp.put("/boosts/<item_id>")
@require("admin")
def put_boost(item_id: str):
    iid = path_id(item_id, "item_id")
    body = body_object(json_body())
    svc = services()
    settings = svc.settings
    weight = field_number(body, "weight", 1e-6, settings.boost_max_weight)
    ttl = field_id(body, "ttl_seconds") if "ttl_seconds" in body else settings.boost_default_ttl
    if ttl > settings.boost_max_ttl:
        raise InvalidInput(f"ttl_seconds must be at most {settings.boost_max_ttl}")
    catalog.require_item(svc.engine, iid)
    now = time.time()
    expires = now + ttl
    durable.put_boost(svc.engine, iid, weight, expires, now)
    svc.item_states.boost(iid, weight, expires)
    svc.pages.states.refresh(force=True)        # this process serves it at once; the others within the bound
    return json_response({"item_id": iid, "weight": weight, "expires_at": expires})


@bp.delete("/boosts/<item_id>")
@require("admin")
def delete_boost(item_id: str):
    iid = path_id(item_id, "item_id")
    svc = services()
    removed = durable.delete_boost(svc.engine, iid)
    removed = svc.item_states.unboost(iid) or removed
    svc.pages.states.refresh(force=True)
    return json_response({"item_id": iid, "removed": bool(removed)})
