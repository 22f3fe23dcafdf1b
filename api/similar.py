"""GET /items/<item_id>/similar: the item's similar items ("more like this" on an item page), with the live rules of
``precompute/feeds/similar.py`` (inactive items dropped; with ``?user_id=`` that user's seen items dropped; an item
whose list leaves nothing gets its categories' popular items, ``"source": "category_popular"``)."""

from __future__ import annotations

from flask import Blueprint, request

from precompute.data import catalog
from precompute.errors import NotFound
from precompute.feeds.similar import similar_page

from .auth import require
from .errors import json_response
from .parse import path_id, query_int
from .services import services

bp = Blueprint("similar", __name__)


@bp.get("/items/<item_id>/similar")
@require("feed:read")
def get_similar(item_id: str):
    iid = path_id(item_id, "item_id")
    svc = services()
    settings = svc.settings
    limit = query_int("limit", min(settings.similar_limit_default, settings.similar_length), 1,
                      settings.similar_length)
    raw_user = request.args.get("user_id")
    uid = None if raw_user is None else path_id(raw_user, "user_id")
    page = similar_page(svc.pages, iid, limit, uid, lambda i: catalog.item_categories(svc.engine, i),
                        lambda n: catalog.newest_active(svc.engine, n))
    if page is None:
        raise NotFound(f"item {iid} does not exist")
    return json_response({"item_id": iid, "user_id": uid, "items": [{"item_id": i} for i in page.items],
                          "source": page.source})
