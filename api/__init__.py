"""Flask app factory. The app serves precomputed feeds and applies the live rules; it never ranks."""

from __future__ import annotations

from flask import Flask

from precompute.data.engine import make_engine
from precompute.feeds.client import redis_client
from precompute.feeds.keys import Keys
from precompute.feeds.page import LiveFeeds
from precompute.settings import Settings


def create_app(settings: Settings | None = None, test_config: dict | None = None) -> Flask:
    app = Flask(__name__)
    settings = settings or Settings.from_env()
    app.config.update(MAX_CONTENT_LENGTH=settings.request_body_max, PREFEED_SETTINGS=settings)
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
        "live": LiveFeeds(r, settings),
    }

    from . import boosts, errors, events, feed, health, items, openapi

    app.extensions["prefeed"]["openapi"] = openapi.spec(settings)     # built once: it depends on settings only
    errors.register(app)
    for module in (feed, events, boosts, items, health, openapi):
        app.register_blueprint(module.bp)
    return app
