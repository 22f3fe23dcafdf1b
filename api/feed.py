"""GET /feed/<user_id>: the precomputed feed with live rules applied, or a fallback for users without one."""

from __future__ import annotations

import numpy as np
from flask import Blueprint, current_app
from sqlalchemy import select

from jobs.queues import notify_changed
from precompute import defaults
from precompute.models import Event, Item

from .errors import json_response
from .parse import path_id, query_int

bp = Blueprint("feed", __name__)


@bp.get("/feed/<user_id>")
def get_feed(user_id: str):
    uid = path_id(user_id, "user_id")
    limit = query_int("limit", defaults.PAGE_LIMIT_DEFAULT, 1, defaults.PAGE_LIMIT_MAX)
    ctx = current_app.extensions["prefeed"]
    offset = query_int("offset", 0, 0, ctx["settings"].feed_length)
    page = ctx["live"].page(uid, limit, offset)
    if page is None:
        page = _fallback(ctx, uid, limit, offset)
    return json_response({
        "user_id": uid,
        "items": [{"item_id": i, "score": round(s, 6), "boosted": b} for i, s, b in page.items],
        "source": page.source,
        "model_version": page.header.model_version if page.header else None,
        "computed_at": page.header.computed_at if page.header else None,
        "history_version": page.header.history_version if page.header else None,
    })


def _fallback(ctx, uid: int, limit: int, offset: int):
    """Popular in the user's recent categories, else global popular; and ask for the real feed."""
    with ctx["engine"].connect() as conn:
        recent = conn.execute(
            select(Event.item_id, Item.category).join(Item, Item.id == Event.item_id)
            .where(Event.user_id == uid).order_by(Event.ts.desc()).limit(defaults.SEEN_RECENT_MAX)
        ).all()
    seen = np.array([r[0] for r in recent], dtype=np.int64)
    cats, counts = np.unique(np.array([r[1] for r in recent], dtype=np.int64), return_counts=True)
    top = cats[np.argsort(-counts, kind="stable")][: defaults.USER_TOP_CATEGORIES].tolist()
    if len(recent):
        notify_changed(ctx["settings"], ctx["redis"], [uid])
    return ctx["live"].fallback(top, limit, offset, seen, lambda n: _newest(ctx, n))


def _newest(ctx, n: int) -> list[int]:
    with ctx["engine"].connect() as conn:
        return list(conn.execute(select(Item.id).where(Item.active).order_by(Item.created_at.desc(), Item.id.desc())
                                 .limit(n)).scalars())
