"""The serving floor, for the serve benchmark: the API app plus one route, ``GET /floor/<user>``, that does the least
any feed endpoint must (one ``GETRANGE`` of the page's bytes, decoded and returned as the same JSON as
``/feed/<user>``) with no live rules: no seen or inactive drop, no boosts, no fallback. Same app, same server
config, so feed/floor is the cost of the live rules and nothing else."""

from __future__ import annotations

from flask import Flask

from api import create_app as create_api
from api.errors import json_response
from api.parse import path_id, query_int
from api.services import services
from precompute.feeds.codec import HEADER_SIZE, RECORD_SIZE, decode


def create_app(settings=None) -> Flask:
    app = create_api(settings)

    @app.get("/floor/<user_id>")
    def floor(user_id: str):
        uid = path_id(user_id, "user_id")
        svc = services()
        limit = query_int("limit", 20, 1, svc.settings.page_limit_max)
        blob = svc.feed_redis.getrange(svc.keys.feed(uid), 0, HEADER_SIZE + limit * RECORD_SIZE - 1)
        feed = decode(blob)
        h = feed.header
        return json_response({
            "user_id": uid,
            "items": [{"item_id": i, "score": round(s, 6), "boosted": False}
                      for i, s in zip(feed.items.tolist(), feed.scores.tolist())],
            "source": "precomputed", "model_version": h.model_version, "computed_at": h.computed_at,
            "history_version": h.history_version,
        })

    return app
