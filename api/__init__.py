"""Flask app factory. The app serves precomputed feeds and applies the live rules; it never ranks."""

from __future__ import annotations

import logging
import time

from flask import Flask

from precompute.logs import configure as configure_logs
from precompute.data import catalog
from precompute.data.engine import make_engine
from precompute.experiments.directory import Directory
from precompute.experiments.impressions import ImpressionBuffer
from precompute.feeds.client import clients
from precompute.feeds import cursor
from precompute.feeds.categories import ItemCategories
from precompute.feeds.item_states import ItemStates
from precompute.feeds.keys import Keys
from precompute.feeds.limits import Limiter
from precompute.feeds.new_items import NewItems
from precompute.feeds.page import PageReader
from precompute.settings import Settings

from .keyring import Keyring
from .meters import ApiMetrics
from .services import EXTENSION, Services, services
from .turns import Clients, Turns


def create_app(settings: Settings | None = None, test_config: dict | None = None) -> Flask:
    app = Flask(__name__)
    settings = settings or Settings.from_env()
    app.config.update(MAX_CONTENT_LENGTH=settings.request_body_max, PREFEED_SETTINGS=settings)
    if test_config:
        app.config.update(test_config)
    if not (settings.queue_url and settings.feed_url):
        raise RuntimeError("the API needs REDIS_URL (manage.py serve/demo provide an embedded server)")
    keys = Keys(settings.key_prefix)
    queue_redis, r = clients(settings)
    engine = make_engine(settings.database_url, settings)
    pages = PageReader(r, settings, ItemCategories(lambda: catalog.counted_categories(engine),
                                                   settings.diversity_refresh))
    new_items = NewItems(r, keys, pages.new_rule)
    impressions = None
    if settings.impressions:
        from jobs.queues import schedule_collect

        impressions = ImpressionBuffer(queue_redis, keys.impressions, settings.impressions_flush_ms,
                                       settings.impressions_buffer_max,
                                       on_sent=lambda n: schedule_collect(settings, queue_redis),
                                       user_max=settings.impressions_user_max,
                                       on_pages=_counter(new_items, pages) if new_items.rule.on else None)
    from . import (addresses, boosts, dashboard, errors, events, feed, health, items, metrics, observe, openapi,
                   rq_panel, similar)

    app.extensions[EXTENSION] = Services(
        settings=settings,
        engine=engine,
        keyring=Keyring(engine, settings),
        limiter=Limiter(queue_redis),
        cursors=cursor.from_settings(settings, queue_redis, keys.cursor_secret),
        feed_redis=r,
        queue_redis=queue_redis,
        keys=keys,
        pages=pages,
        item_states=ItemStates(r, keys),
        new_items=new_items,
        metrics=ApiMetrics(settings, queue_redis),
        experiments=Directory(engine),
        impressions=impressions,
        openapi=openapi.spec(settings),
    )
    configure_logs(settings)
    if not settings.auth:
        logging.getLogger(__name__).warning("PREFEED_AUTH=off: the feed, events and items routes answer without "
                                            "an API key; only for a trusted network")
    observe.register(app)
    errors.register(app)
    addresses.register(app)
    health.register(app)
    for module in (feed, events, boosts, items, similar, health, openapi, metrics, dashboard):
        app.register_blueprint(module.bp)
    rq_panel.mount(app, settings)
    app.after_request(_nosniff)
    app.wsgi_app = Turns(app.wsgi_app, settings.api_concurrency, settings.request_body_max,
                         Clients(services(app).keyring, addresses.guard(app).trusted))
    return app


def _counter(new_items: NewItems, pages: PageReader):
    """What the impression flush thread calls with the pages it sent: their impressions of the items this
    process's copy holds as waiting, counted on the events' clock."""
    def count(sent: list[list[int]]) -> int:
        waiting = pages.new_items
        return new_items.count(sent, waiting.ids, pages.states.clock or time.time()) if waiting.ids else 0
    return count


def _nosniff(response):
    """Every answer, errors and 404s included, is of the type it declares (JSON, the dashboard's HTML, Prometheus
    text): no browser is to guess another and run what a client wrote into it as a page or a script."""
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response
