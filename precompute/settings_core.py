"""Where things live, the data model, precompute, serving and jobs (``Settings`` inherits them; see ``settings.py``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .env_values import setting

DAY = 86400


@dataclasses.dataclass(frozen=True)
class CoreSettings:
    # -- where things live ---------------------------------------------------------------------------------
    database_url: str = setting("", "DATABASE_URL", "SQLAlchemy URL; `postgresql://…` uses psycopg 3",
                                shown="`sqlite:///<PREFEED_VAR_DIR>/prefeed.db`")
    db_pool_size: int = setting(2, "PREFEED_DB_POOL_SIZE", "PostgreSQL connections each process keeps open for "
                                "reuse, opened as it needs them (SQLAlchemy `pool_size`); a prefeed process uses "
                                "one at a time (see \"Database connections\")", unit="connections")
    db_max_overflow: int = setting(2, "PREFEED_DB_MAX_OVERFLOW", "connections a process may open beyond those, "
                                   "closed as they are returned: a process never holds more than the two together",
                                   unit="connections", minimum=0)
    db_pool_timeout: int = setting(10, "PREFEED_DB_POOL_TIMEOUT", "a process holding the most it may waits this "
                                   "long for one to be returned, then fails as database unavailable (below "
                                   "gunicorn's 30 s worker timeout: the API answers 503)", unit="s")
    db_prepared_statements: bool = setting(False, "PREFEED_DB_PREPARED_STATEMENTS", "`true`: psycopg prepares a "
                                           "statement on the server after its fifth execution on a connection; "
                                           "only for a direct connection, or PgBouncer 1.21+ with "
                                           "`max_prepared_statements` set (older PgBouncer in transaction mode "
                                           "runs the next transaction on a server connection that lacks it)")
    redis_url: str | None = setting(None, "REDIS_URL", "feeds, live state and the RQ queue; unset: the CLI starts "
                                    "the embedded Valkey under `var/valkey`")
    queue_redis_url: str | None = setting(None, "QUEUE_REDIS_URL", "the RQ queue, the dirty-user set and the drain "
                                          "flags: one Redis (RQ does not run on a cluster); unset: `REDIS_URL`")
    feed_redis_url: str | None = setting(None, "FEED_REDIS_URL", "feeds, seen items, boosts, deactivations and the "
                                         "fallback's popular lists; `redis+cluster://host:port[,host:port…]` selects "
                                         "Redis Cluster; unset: `REDIS_URL`")
    model_dir: Path = setting(Path(""), "MODEL_DIR", "model bundles and the `CURRENT` pointer",
                              shown="`<PREFEED_VAR_DIR>/models`")
    admin_token: str | None = setting(None, "PREFEED_ADMIN_TOKEN", "a key with the `admin` scope (every route), for "
                                      "deployments from before `manage.py keys`; unset: none", secret=True)
    var_dir: Path = setting(Path("var"), "PREFEED_VAR_DIR", "SQLite, model bundles and the embedded server's files "
                            "when nothing else is configured")
    key_prefix: str = setting("prefeed:", "PREFEED_KEY_PREFIX", "prefix of every Redis key prefeed writes")
    queue_name: str = setting("prefeed", "PREFEED_QUEUE", "RQ queue name")

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
                                   "and deactivations (one small read); a change is served by every process "
                                   "within this plus one round trip", unit="ms", maximum=1000)
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

    # -- serving -------------------------------------------------------------------------------------------
    page_limit_default: int = setting(20, "PREFEED_PAGE_LIMIT_DEFAULT", "items per page when `limit` is not given",
                                      unit="items")
    page_limit_max: int = setting(100, "PREFEED_PAGE_LIMIT_MAX", "largest `limit` a feed request may ask for",
                                  unit="items")
    boost_every: int = setting(4, "PREFEED_BOOST_EVERY", "at most one boosted item per this many feed slots",
                               unit="slots")
    boost_lookahead: int = setting(100, "PREFEED_BOOST_LOOKAHEAD", "boosted items this far below the page may be "
                                   "lifted into it", unit="items", minimum=0)
    boost_max_weight: float = setting(1000.0, "PREFEED_BOOST_MAX_WEIGHT", "largest weight `PUT /boosts` accepts",
                                      minimum=1e-6)
    boost_default_ttl: int = setting(DAY, "PREFEED_BOOST_DEFAULT_TTL", "a boost's lifetime when `ttl_seconds` is "
                                     "not given", unit="s")
    boost_max_ttl: int = setting(90 * DAY, "PREFEED_BOOST_MAX_TTL", "longest `ttl_seconds` a boost may ask for",
                                 unit="s")
    seen_recent_max: int = setting(500, "PREFEED_SEEN_RECENT_MAX", "recent interactions kept per user for the live "
                                   "seen filter and the fallback", unit="items")
    events_batch_max: int = setting(500, "PREFEED_EVENTS_BATCH_MAX", "events accepted in one `POST /events`",
                                    unit="events")
    event_max_age: int = setting(365 * DAY, "PREFEED_EVENT_MAX_AGE", "oldest `ts` an event may carry, before now",
                                 unit="s")
    event_max_future: int = setting(60, "PREFEED_EVENT_MAX_FUTURE", "newest `ts` an event may carry, after now "
                                    "(clock skew)", unit="s", minimum=0)
    request_body_max: int = setting(1 << 20, "PREFEED_REQUEST_BODY_MAX", "largest request body", unit="bytes")
    auth: bool = setting(True, "PREFEED_AUTH", "`off`: the data routes (feed, events, items) answer without a key, "
                         "for a trusted network (a warning at start); admin and metrics routes still need one")
    rate_limit: float = setting(500.0, "PREFEED_RATE_LIMIT", "requests per second a key may make, shared by every API "
                                "process (a key's own `--rate` overrides)", unit="1/s")
    rate_burst: int = setting(1000, "PREFEED_RATE_BURST", "requests a key may make at once after a pause (a key's "
                              "own `--burst` overrides)", unit="requests")
    cursor_ttl: int = setting(3600, "PREFEED_CURSOR_TTL", "a feed's `next_cursor` is honoured this long; an older one "
                              "starts the scroll over, flagged `restarted`", unit="s")
    cursor_secret: str | None = setting(None, "PREFEED_CURSOR_SECRET", "key that signs cursors; unset: a random one "
                                        "kept in the queue Redis, shared by every API process", secret=True)
    user_events_per_minute: int = setting(600, "PREFEED_USER_EVENTS_PER_MINUTE", "events accepted per user id per "
                                          "minute; more are refused with 429", unit="events", minimum=1)

    # -- jobs ----------------------------------------------------------------------------------------------
    job_timeout: int = setting(60, "PREFEED_JOB_TIMEOUT", "time a job may run per `PREFEED_BATCH_SIZE` users it "
                               "carries (a drain job: per batch it may process), then it is stopped and retried; a "
                               "500-user batch takes ~1.5 s", unit="s")
    worker_interval: int = setting(10, "PREFEED_WORKER_INTERVAL", "each worker's beat: it marks its running job alive "
                                   "this often (RQ `job_monitoring_interval`) and, between jobs, runs RQ's maintenance "
                                   "this often (`maintenance_interval`, RQ's default 600): retaking the scheduler "
                                   "lock, retrying jobs of dead workers", unit="s")
    job_max_deaths: int = setting(10, "PREFEED_JOB_MAX_DEATHS", "times a job's process may be killed under it "
                                  "(OOM, SIGKILL, a lost host) and the job still be retried past its retries; then it "
                                  "fails like a job that raised (a batch that always runs out of memory)")
    retry_intervals: tuple[int, ...] = setting((5, 30, 120), "PREFEED_RETRY_INTERVALS", "seconds before each retry "
                                               "of a failed job (their count = retries; RQ `Retry`)", unit="s",
                                               minimum=0)
    dirty_lease: int = setting(60, "PREFEED_DIRTY_LEASE", "a user claimed by a drain job becomes claimable again "
                               "after this long", unit="s")
    drain_flag_ttl: int = setting(30, "PREFEED_DRAIN_FLAG_TTL", "lifetime of the flag that keeps one drain job "
                                  "waiting at a time", unit="s")
    drain_max_batches: int = setting(20, "PREFEED_DRAIN_MAX_BATCHES", "batches one drain job processes before "
                                     "handing the rest to a fresh job", unit="batches")
    worker_metrics_port: int = setting(0, "PREFEED_WORKER_METRICS_PORT", "`manage.py worker` serves Prometheus "
                                       "metrics on this port, all interfaces (`--workers N`: the pool's parent, for "
                                       "every worker process); 0: off", unit="port", minimum=0, maximum=65535)
    log_level: str = setting("INFO", "PREFEED_LOG_LEVEL", "level of prefeed's JSON log lines (`DEBUG`, `INFO`, "
                             "`WARNING`, `ERROR`): one per request and one per job at `INFO`")

    status_sample: int = setting(10_000, "PREFEED_STATUS_SAMPLE", "users whose feed headers `status` and the "
                                 "dashboard read for coverage and feed age (all when fewer)", unit="users")
    freshness_points: int = setting(1440, "PREFEED_FRESHNESS_POINTS", "feed-age samples kept for the dashboard's "
                                    "chart, at most one a minute (1440: a day)", unit="samples")
