"""Flask app factory. The app serves precomputed feeds and applies the live rules; it never ranks."""

from __future__ import annotations

from flask import Flask

from precompute import defaults
from precompute.config import Settings
from precompute.db import make_engine
from precompute.serve import LiveFeeds
from precompute.services import redis_client
from precompute.store import Keys


def create_app(settings: Settings | None = None, test_config: dict | None = None) -> Flask:
    app = Flask(__name__)
    settings = settings or Settings.from_env()
    app.config.update(MAX_CONTENT_LENGTH=defaults.REQUEST_BODY_MAX_BYTES, PREFEED_SETTINGS=settings)
    if test_config:
        app.config.update(test_config)
    if not settings.redis_url:
        raise RuntimeError("the API needs REDIS_URL (manage.py serve/demo provide an embedded server)")
    keys = Keys(settings.key_prefix)
    r = redis_client(settings.redis_url)
    app.extensions["prefeed"] = {
        "settings": settings,
        "engine": make_engine(settings.database_url),
        "redis": r,
        "keys": keys,
        "live": LiveFeeds(r, keys),
    }

    from . import boosts, errors, events, feed, health, items, openapi

    errors.register(app)
    for module in (feed, events, boosts, items, health, openapi):
        app.register_blueprint(module.bp)
    return app
