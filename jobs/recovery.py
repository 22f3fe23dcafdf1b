"""Redis lost, back without a hand: a worker notices between jobs and starts the rebuild.

What is lost with Redis, and where it comes back from:

- feeds: rebuilt for every user active within ``PREFEED_FEED_TTL`` whose feed is missing or behind their history, a
  step at a time (``jobs.tasks.rebuild_lost``: ``PREFEED_RECOVERY_BATCH`` users every ``PREFEED_RECOVERY_INTERVAL``),
  most recently active first; users who read meanwhile get the fallback and a recompute, as always;
- the dirty users (when the queue Redis lost them): the same walk finds them, as users whose history is newer than
  their feed (``precompute --stale``'s rule), and the events themselves are in the database;
- boosts, from the database (``data/durable.py``); the inactive items and the fallback's popular lists, from the
  database and this worker's item table; the events' clock, from the newest stored event;
- queued jobs (when the queue Redis lost them): what they would have done is found by the walk.

How it is noticed (``feeds/recovery.py``): markers whose token the database records. The check runs in the worker
process, not in a job: when the queue Redis is the one that lost its data, no job is left to run it. It costs one
GET per Redis at most every ``PREFEED_REDIS_CHECK_INTERVAL`` s; only a marker that differs from the token this
process last saw consults the database, under a lock, so one worker of many starts the rebuild.
"""

from __future__ import annotations

import logging
import secrets
import time
import uuid

from precompute.data import catalog, clock, durable
from precompute.feeds import recovery
from precompute.feeds.item_states import ItemStates
from precompute.feeds.keys import Keys

from . import queues

log = logging.getLogger(__name__)

#: A worker killed while starting a rebuild holds the others back this long at most (a start takes well under 1 s).
LOCK_TTL = 30.0

INTACT, ADOPTED, REBUILDING, BUSY = "intact", "adopted", "rebuilding", "busy"


def check(pipeline, queue_r, known: str | None) -> tuple[str, str | None]:
    """Compare the markers with ``known``, the token this process last saw (None: none yet). Returns what was found
    and the token to remember: ``intact``; ``adopted`` (no token was ever recorded for this key prefix: one is, and
    written; nothing is rebuilt); ``rebuilding`` (a marker was lost: this call started the rebuild); ``busy``
    (another worker holds the lock: ask again at the next check)."""
    settings, engine, feed_r = pipeline.settings, pipeline.engine, pipeline.store.r
    keys = Keys(settings.key_prefix)
    markers = recovery.Markers(queue_r, feed_r, keys)
    if known is not None and all(t == known for t in markers.read()):
        return INTACT, known
    owner = uuid.uuid4().hex
    if not recovery.try_lock(queue_r, keys, owner, LOCK_TTL):
        return BUSY, known
    try:
        found = markers.read()
        recorded = durable.epoch_token(engine, settings.key_prefix)
        if recorded is None:
            token = durable.adopt_token(engine, settings.key_prefix,
                                        next((t for t in found if t), None) or durable.new_token())
            markers.write(token)
            return ADOPTED, token
        if all(t == recorded for t in found):
            return INTACT, recorded
        token = durable.new_token()
        log.warning("Redis lost its data (markers %s, recorded %s): rebuilding under %s", found, recorded, token)
        start(pipeline, queue_r, token)
        durable.replace_token(engine, settings.key_prefix, token)
        markers.write(token)      # last: a worker killed before this point leaves the loss to be found again
        return REBUILDING, token
    finally:
        recovery.unlock(queue_r, keys, owner)


def start(pipeline, queue_r, token: str) -> None:
    """Put back what serving reads and the database (or this worker's item table) holds, then start the walk."""
    settings, engine, store = pipeline.settings, pipeline.engine, pipeline.store
    keys = Keys(settings.key_prefix)
    recovery.begin(queue_r, keys, token)
    items = pipeline.items
    store.publish_popular(items.ids[items.global_popular],
                          {int(c): items.ids[rows] for c, rows in zip(items.category_ids, items.category_popular)})
    store.replace_inactive(lambda: catalog.inactive_ids(engine))
    # A new epoch: every API process reloads its copy of the item states whole, whatever counters it held.
    n = recovery.restore_boosts(store.r, keys, lambda: durable.boosts_in_force(engine), secrets.randbits(48))
    with engine.connect() as conn:
        newest = clock.newest_event(conn)
    if newest is not None:
        ItemStates(store.r, keys).advance_clock(newest)
    queues.enqueue_recovery(settings, queue_r, token, 0)
    log.info("rebuild %s started at %.0f: %d boosts restored", token, time.time(), n)
