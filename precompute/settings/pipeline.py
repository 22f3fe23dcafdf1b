"""What the pipeline reads and how it precomputes feeds: the interaction types and item attributes of the data,
then batches, histories, candidates per user, the feeds kept and how often they are recomputed."""

from __future__ import annotations

import dataclasses

from ..units import DAY
from .environment import setting


@dataclasses.dataclass(frozen=True)
class PipelineSettings:
    # -- data model ----------------------------------------------------------------------------------------
    event_types: tuple[tuple[str, float], ...] = setting(
        (("view", 1.0), ("click", 2.0), ("contact", 4.0), ("purchase", 6.0)), "PREFEED_EVENT_TYPES",
        "the interaction types events may carry, weakest first, each with its weight in item popularity, a user's "
        "category preference, co-visitation strength and training labels; a type's position is its code in the "
        "events table, so append new types at the end (init-db refuses a list that renames or reorders stored "
        "ones)", minimum=0.0, kind="weights")
    item_attributes: tuple[str, ...] = setting(
        (), "PREFEED_ITEM_ATTRIBUTES", "numeric item attributes (comma-separated names) stored with items and used "
        "as model features, missing = NaN; the synthetic marketplace declares `quality,photos,seller_rating`",
        kind="names", shown="none")
    events_create_items: bool = setting(True, "PREFEED_EVENTS_CREATE_ITEMS", "an event naming an item the "
                                        "catalogue does not have creates it bare (no categories, price or "
                                        "attributes); `false`: such events are refused")
    items_batch_max: int = setting(500, "PREFEED_ITEMS_BATCH_MAX", "items accepted in one `POST /items`",
                                   unit="items")

    # -- precompute ----------------------------------------------------------------------------------------
    batch_size: int = setting(500, "PREFEED_BATCH_SIZE", "users per job (one history query, one feed write "
                              "pipeline); a job's fixed cost (fork, RQ bookkeeping, a fresh horse's cold start, "
                              "~60 ms) is ~4% of 500 users' work, ~9% of 200's", unit="users")
    rank_chunk_users: int = setting(25, "PREFEED_RANK_CHUNK_USERS", "users ranked together inside a job: one "
                                    "feature matrix (~15 MB) and one CatBoost call", unit="users")
    history_limit: int = setting(200, "PREFEED_HISTORY_LIMIT", "newest events per user kept on the user row and "
                                 "read for features and the co-visitation and category sources (seen items are "
                                 "kept apart)", unit="events")
    as_of: float = setting(0.0, "PREFEED_AS_OF", "the clock features, time windows and popularity are computed at, in "
                           "training and precompute; 0: the log's clock, its newest event time (set it to replay a "
                           "log as of an earlier instant)", unit="epoch s", minimum=0)
    seen_window: int = setting(3650 * DAY, "PREFEED_SEEN_WINDOW", "items a user interacted with this long before "
                               "the log's clock (its newest event time) stay out of their precomputed feed (10 "
                               "years: every item kept for the user, as a feed of things new to them wants); "
                               "shorter lets older items come back", unit="s")
    seen_max_items: int = setting(5000, "PREFEED_SEEN_MAX_ITEMS", "distinct items kept per user for that rule (the "
                                  "most recent; 16 bytes each on the user row)", unit="items")
    max_candidates: int = setting(3000, "PREFEED_MAX_CANDIDATES", "candidates scored per user", unit="items")
    feed_length: int = setting(1000, "PREFEED_FEED_LENGTH", "ranked items stored per user (12 bytes each)",
                               unit="items")
    feed_ttl: int = setting(7 * DAY, "PREFEED_FEED_TTL", "feed time-to-live", unit="s")
    feed_refresh: int = setting(DAY, "PREFEED_FEED_REFRESH", "a user's feed is recomputed once the log's clock is this "
                                "far past the clock it was computed at, up to PREFEED_FEED_TTL after the user's "
                                "newest event (fresh popularity for users who come back without acting); 0: only "
                                "on their events", unit="s", minimum=0)
    live_refresh_ms: int = setting(250, "PREFEED_LIVE_REFRESH_MS", "how often an API process checks for new boosts "
                                   "and deactivations (one small read), and for a cursor secret put back or replaced "
                                   "after a Redis loss; a change is served by every process within this plus one "
                                   "round trip", unit="ms", maximum=1000)
    recompute_interval_ms: int = setting(1000, "PREFEED_RECOMPUTE_INTERVAL_MS", "a user's feed is recomputed at most "
                                         "once per this interval, however many events arrive (later events wait "
                                         "for its end; all are stored); 0: no cap", unit="ms", minimum=0)
    item_table_max_age: int = setting(300, "PREFEED_ITEM_TABLE_MAX_AGE", "workers reload item matrices between "
                                      "jobs once they are older than this, in wall time or the log's: the "
                                      "all-time counts carried forward, the events since and the last 30 days "
                                      "read", unit="s")
    item_table_full_reload: int = setting(3600, "PREFEED_ITEM_TABLE_FULL_RELOAD", "workers re-read the whole "
                                          "log's item statistics this often (an event stored late, dated before "
                                          "the last reload, joins the all-time counts then)", unit="s")
