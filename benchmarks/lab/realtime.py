"""The architecture prefeed replaces, for the serve benchmark: an endpoint that reads the user's history and ranks
their candidates with CatBoost at request time (same pipeline code, same model, same server config)."""

from __future__ import annotations

import time

import orjson
from flask import Flask, Response

from precompute.settings import Settings
from precompute.data.engine import make_engine
from precompute.data.history import load_histories
from precompute.pipeline.pipeline import STAGES, Pipeline
from precompute.feeds.client import redis_client


def create_app() -> Flask:
    settings = Settings.from_env()
    pipeline = Pipeline(settings, make_engine(settings.database_url, settings), redis_client(settings.redis_url))
    pipeline.load()
    app = Flask(__name__)

    @app.get("/feed/<int:user_id>")
    def feed(user_id: int):
        hist = load_histories(pipeline.engine, [user_id], pipeline.items, settings)
        cand, scores = pipeline.rank(hist, dict.fromkeys(STAGES, 0.0))
        top = scores.argsort()[::-1][:20]
        items = [{"item_id": int(pipeline.items.ids[cand.rows[i]]), "score": float(scores[i]), "boosted": False}
                 for i in top]
        return Response(orjson.dumps({"user_id": user_id, "items": items, "source": "realtime"}),
                        mimetype="application/json")

    return app
