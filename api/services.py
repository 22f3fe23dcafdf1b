"""What one app holds for its requests: built once by ``create_app``, read by the routes through ``services()``."""

from __future__ import annotations

import dataclasses

import redis
from flask import Flask, current_app
from sqlalchemy.engine import Engine

from precompute.feeds.cursor import Cursors
from precompute.feeds.item_states import ItemStates
from precompute.feeds.keys import Keys
from precompute.feeds.limits import Limiter
from precompute.feeds.new_items import NewItems
from precompute.feeds.page import PageReader
from precompute.experiments.directory import Directory
from precompute.experiments.impressions import ImpressionBuffer
from precompute.settings import Settings

from .keyring import Keyring
from .meters import ApiMetrics

#: The app's ``extensions`` entry that holds its ``Services``.
EXTENSION = "prefeed"


@dataclasses.dataclass(frozen=True)
class Services:
    settings: Settings          # the one settings object, from the environment unless the app was given one
    engine: Engine              # the database
    keyring: Keyring            # API keys as this process last read them
    limiter: Limiter            # token buckets in the queue Redis, shared by every API process
    cursors: Cursors            # signs and reads scroll cursors
    feed_redis: redis.Redis     # feeds, seen items, item states, popular lists (may be a cluster)
    queue_redis: redis.Redis    # RQ and the dirty-user set
    keys: Keys                  # every Redis key name, under the settings' prefix
    pages: PageReader           # reads a user's page: their feed with the live rules applied
    item_states: ItemStates     # writes inactive items and boosts to Redis
    new_items: NewItems         # registers new items and counts their impressions (``new_items.py``)
    metrics: ApiMetrics         # what /metrics renders
    experiments: Directory      # which experiment and arm a page belongs to (read from the database every 2 s)
    impressions: ImpressionBuffer | None    # records every page served (None: PREFEED_IMPRESSIONS=off)
    openapi: dict               # the OpenAPI document, built once (it depends on settings only)


def services(app: Flask | None = None) -> Services:
    """The services of ``app`` (default: the app handling the current request)."""
    return (app or current_app).extensions[EXTENSION]
