"""PUT/DELETE /boosts/<item_id> (admin): lift a paid listing in the feeds that already rank it."""

from __future__ import annotations

import time

from flask import Blueprint, current_app
from sqlalchemy import select

from precompute.errors import InvalidInput, NotFound
from precompute.models import Item

from .auth import admin_required
from .errors import json_response
from .parse import body_object, field_id, field_number, json_body, path_id

bp = Blueprint("boosts", __name__)
MAX_WEIGHT = 1000.0
MAX_TTL = 90 * 86400


@bp.put("/boosts/<item_id>")
@admin_required
def put_boost(item_id: str):
    iid = path_id(item_id, "item_id")
    body = body_object(json_body())
    weight = field_number(body, "weight", 1e-6, MAX_WEIGHT)
    ttl = field_id(body, "ttl_seconds") if "ttl_seconds" in body else 86400
    if ttl > MAX_TTL:
        raise InvalidInput(f"ttl_seconds must be at most {MAX_TTL}")
    ctx = current_app.extensions["prefeed"]
    _require_item(ctx, iid)
    expires = time.time() + ttl
    ctx["redis"].set(ctx["keys"].boost(iid), repr(weight), ex=ttl)
    return json_response({"item_id": iid, "weight": weight, "expires_at": expires})


@bp.delete("/boosts/<item_id>")
@admin_required
def delete_boost(item_id: str):
    iid = path_id(item_id, "item_id")
    ctx = current_app.extensions["prefeed"]
    removed = ctx["redis"].delete(ctx["keys"].boost(iid))
    return json_response({"item_id": iid, "removed": bool(removed)})


def _require_item(ctx, iid: int) -> None:
    with ctx["engine"].connect() as conn:
        if conn.execute(select(Item.id).where(Item.id == iid)).scalar() is None:
            raise NotFound(f"item {iid} does not exist")
