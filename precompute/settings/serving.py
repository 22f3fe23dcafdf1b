"""What the API accepts and answers: page sizes, the boost rule's limits, the live seen filter and the fallback,
limits on batches, bodies and event times, authentication, keys' rates and cursors, how long a health check is
reused."""

from __future__ import annotations

import dataclasses

from ..units import DAY
from .environment import setting


@dataclasses.dataclass(frozen=True)
class ServingSettings:
    # -- serving -------------------------------------------------------------------------------------------
    page_limit_default: int = setting(20, "PREFEED_PAGE_LIMIT_DEFAULT", "items per page when `limit` is not given",
                                      unit="items")
    page_limit_max: int = setting(100, "PREFEED_PAGE_LIMIT_MAX", "largest `limit` a feed request may ask for",
                                  unit="items")
    similar_limit_default: int = setting(10, "PREFEED_SIMILAR_LIMIT_DEFAULT", "similar items per answer when "
                                         "`limit` is not given (at most `PREFEED_SIMILAR_LENGTH`)", unit="items",
                                         minimum=1)
    exclude_max: int = setting(100, "PREFEED_EXCLUDE_MAX", "most item ids a feed request may leave out "
                               "(`?exclude=`); more is a 400", unit="items", minimum=0)
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
    diversity_max: int = setting(0, "PREFEED_DIVERSITY_MAX", "at most this many items of one category in any "
                                 "`PREFEED_DIVERSITY_WINDOW` consecutive slots of a feed, boosts and scrolls included "
                                 "(an item counts in its lowest category id; `precompute/feeds/diversity.py`); 0: "
                                 "off. Off by default: its NDCG@10 cost on the measured logs is outside the noise "
                                 "(docs/evaluation.md). A request may override it (`?diversity=K/W` or `off`)",
                                 unit="items", minimum=0)
    diversity_window: int = setting(10, "PREFEED_DIVERSITY_WINDOW", "the slots `PREFEED_DIVERSITY_MAX` counts in; "
                                    "a scroll's cursor carries the categories of the last this-minus-one slots "
                                    "served", unit="slots", minimum=2, maximum=50)
    diversity_refresh: int = setting(300, "PREFEED_DIVERSITY_REFRESH", "an API process that applies the diversity "
                                     "rule reloads every item's category from the database this often: a new item, "
                                     "or a category change, counts within this long (before: a new item counts in no "
                                     "category)", unit="s", minimum=1)
    new_item_every: int = setting(10, "PREFEED_NEW_ITEM_EVERY", "one slot in this many of a precomputed feed (the "
                                  "last of each run) holds an item created through the API within "
                                  "`PREFEED_NEW_ITEM_WINDOW` that has had fewer than `PREFEED_NEW_ITEM_IMPRESSIONS` "
                                  "impressions, for a user whose feed shares its category "
                                  "(`precompute/feeds/new_items.py`); 0: off. Measured in docs/quality.md", unit="slots",
                                  minimum=0)
    new_item_window: int = setting(DAY, "PREFEED_NEW_ITEM_WINDOW", "an item is new this long after its `created_at` "
                                   "(on the events' clock)", unit="s", minimum=1)
    new_item_impressions: int = setting(50, "PREFEED_NEW_ITEM_IMPRESSIONS", "impressions a new item is given slots "
                                        "for; then it competes on its columns like every item (counted from the "
                                        "pages recorded: `PREFEED_IMPRESSIONS`)", unit="impressions", minimum=1)
    new_item_max: int = setting(10_000, "PREFEED_NEW_ITEM_MAX", "new items tracked at once; past it the oldest "
                                "leave first (every API process holds the waiting ones: ~150 bytes each)",
                                unit="items", minimum=1)
    seen_recent_max: int = setting(500, "PREFEED_SEEN_RECENT_MAX", "a user's recent seen items kept in Redis (the "
                                   "newest interactions, each with its history version): a page drops those seen "
                                   "since its feed was computed, similar items those of the user", unit="items")
    fallback_events: int = setting(500, "PREFEED_FALLBACK_EVENTS", "a user's newest events the fallback reads from "
                                   "the database: their items' categories make the user's top categories",
                                   unit="events")
    events_batch_max: int = setting(500, "PREFEED_EVENTS_BATCH_MAX", "events accepted in one `POST /events`",
                                    unit="events")
    event_max_age: int = setting(365 * DAY, "PREFEED_EVENT_MAX_AGE", "oldest `ts` an event may carry, before now",
                                 unit="s")
    event_max_future: int = setting(60, "PREFEED_EVENT_MAX_FUTURE", "newest time a write may carry, after now "
                                    "(clock skew): an event's `ts` and an item's `created_at`, by the API and by "
                                    "imports", unit="s", minimum=0)
    api_concurrency: int = setting(4, "PREFEED_API_CONCURRENCY", "requests one API process runs at once; the others "
                                   "wait their turn, their bodies read first, a queue per client (its key if this "
                                   "process knows it, else its address) served in rounds so one client cannot fill "
                                   "the queue (`api/turns.py`): under overload a "
                                   "request waits once instead of at every step for Python's interpreter lock. "
                                   "`/livez`, `/healthz` and `/metrics` never wait",
                                   unit="requests")
    healthz_ttl: float = setting(1.0, "PREFEED_HEALTHZ_TTL", "an API process checks the database and Redis for "
                                 "`/healthz` at most once in this long and answers the probes meanwhile from that "
                                 "check (one probe checks, those arriving during it wait for its answer), so a flood "
                                 "of probes holds no database connection; 0: every probe checks", unit="s",
                                 minimum=0.0, maximum=60.0)
    request_body_max: int = setting(1 << 20, "PREFEED_REQUEST_BODY_MAX", "largest request body", unit="bytes")
    auth: bool = setting(True, "PREFEED_AUTH", "`off`: the data routes (feed, events, items) answer without a key, "
                         "for a trusted network (a warning at start); admin and metrics routes still need one")
    rate_limit: float = setting(500.0, "PREFEED_RATE_LIMIT", "tokens per second a key earns, shared by every API "
                                "process: a feed page costs one, a `POST /events` one per event (a key's own `--rate` "
                                "overrides)", unit="1/s")
    rate_burst: int = setting(1000, "PREFEED_RATE_BURST", "tokens a key may spend at once after a pause, and so the "
                              "most events one `POST /events` of the key may carry (a key's own `--burst` overrides)",
                              unit="tokens")
    key_new_users_per_minute: int = setting(
        3000, "PREFEED_KEY_NEW_USERS_PER_MINUTE", "user ids the database does not have yet that one key's events may "
        "bring in per minute (the burst is the same number); over it: 429, a batch with more than it: 400 (a key's own "
        "`--new-users` overrides). Sized for a busy shop: 1 million new visitors a day (anonymous ids included), "
        "three times the day's mean minute at peak, is ~2,100 a minute. At the cap a key's made-up ids cost at most "
        "3,000 recomputes a minute (~1/6 of a worker core) and ~36 MB of feeds a minute, each kept "
        "`PREFEED_FEED_TTL`", unit="users")
    cursor_ttl: int = setting(3600, "PREFEED_CURSOR_TTL", "a feed's `next_cursor` is honoured this long; an older one "
                              "starts the scroll over, flagged `restarted`", unit="s")
    cursor_secret: str | None = setting(None, "PREFEED_CURSOR_SECRET", "key that signs cursors; unset: a random one "
                                        "kept in the queue Redis, shared by every API process", secret=True)
    user_events_per_minute: int = setting(600, "PREFEED_USER_EVENTS_PER_MINUTE", "events accepted per user id per "
                                          "minute (the burst is the same number); more are refused with 429, a batch "
                                          "with more for one user id with 400", unit="events", minimum=1)
