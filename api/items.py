"""PUT /items/<item_id> (admin): activate or deactivate a listing; served feeds drop inactive items at once."""

from __future__ import annotations

from flask import Blueprint, current_app

from precompute.data import catalog
from precompute.errors import InvalidInput
from precompute.feeds.client import ping_redis

from .auth import admin_required
from .errors import json_response
from .parse import body_object, json_body, path_id

bp = Blueprint("items", __name__)


@bp.put("/items/<item_id>")
@admin_required
def put_item(item_id: str):
    iid = path_id(item_id, "item_id")
    body = body_object(json_body())
    active = body.get("active")
    if type(active) is not bool or set(body) != {"active"}:
        raise InvalidInput('body must be {"active": true|false}')
    ctx = current_app.extensions["prefeed"]
    ping_redis(ctx["redis"])
    catalog.set_active(ctx["engine"], iid, active)
    # The database is the record; the Redis set is what serving reads. PUT is idempotent, so a client that
    # sees a 503 here retries and both agree.
    if active:
        ctx["redis"].srem(ctx["keys"].inactive, str(iid))
    else:
        ctx["redis"].sadd(ctx["keys"].inactive, str(iid))
    return json_response({"item_id": iid, "active": active})
