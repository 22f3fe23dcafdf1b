"""Every tunable default in one place, with its unit. ``config.Settings`` reads overrides from the environment."""

#: Where SQLite, model bundles and the embedded server's files live when nothing else is configured.
VAR_DIR = "var"
#: Prefix for every Redis key prefeed writes, so it can share a server with other applications.
KEY_PREFIX = "prefeed:"
#: RQ queue name.
QUEUE_NAME = "prefeed"

#: Candidates kept per user after union and filtering.
MAX_CANDIDATES = 3000
#: Ranked items stored per user in the feed value (8 bytes each).
FEED_LENGTH = 1000
#: Feed value time-to-live, seconds (7 days).
FEED_TTL_SECONDS = 7 * 24 * 3600
#: Users per RQ job (one history query, one feed write pipeline). Each job starts in a fresh work horse, whose first
#: batch pays ~40 ms of cold start (a new database connection, first-touch page faults) plus ~20 ms of RQ
#: bookkeeping and fork: at 500 users (~1.5 s of work) that is ~4% of a rebuild, at 200 it was ~9% (measured).
BATCH_SIZE = 500
#: Users ranked together inside a job (one feature matrix, one CatBoost predict call, ~15 MB).
RANK_CHUNK_USERS = 25
#: Most recent events per user read for candidates and features.
HISTORY_LIMIT = 200

#: Candidate generation.
COVISIT_RECENT_ITEMS = 20       # distinct most-recent items whose neighbours are pulled
COVISIT_NEIGHBOURS = 50         # neighbours kept per item in the co-visitation index
COVISIT_WINDOW = 5              # events apart within a session that count as co-visited
SESSION_GAP_SECONDS = 30 * 60   # a gap longer than this starts a new session
CATEGORY_POPULAR = 1200         # popular items taken from each of the user's top categories
USER_TOP_CATEGORIES = 3
GLOBAL_POPULAR = 1000

#: Serving.
PAGE_LIMIT_DEFAULT = 20
PAGE_LIMIT_MAX = 100
BOOST_EVERY = 4                 # at most one boosted item per this many feed slots
BOOST_LOOKAHEAD = 100           # boosted items this far below the page may be lifted into it
SEEN_RECENT_MAX = 500           # recent interactions kept per user for the live seen filter
EVENTS_BATCH_MAX = 500          # events accepted in one POST /events
REQUEST_BODY_MAX_BYTES = 1 << 20

#: Dirty-user draining (event-driven recompute).
DIRTY_LEASE_SECONDS = 60        # a claimed user becomes claimable again after this long
DRAIN_FLAG_TTL_SECONDS = 30

#: Jobs.
JOB_TIMEOUT_SECONDS = 600
JOB_RETRY_INTERVALS = (5, 30, 120)   # RQ Retry backoff, seconds
ITEM_TABLE_MAX_AGE_SECONDS = 300     # workers reload item matrices between jobs after this long

#: Training.
TRAIN_ITERATIONS = 1000
TRAIN_DEPTH = 6
TRAIN_LEARNING_RATE = 0.05
TRAIN_USERS = 3000
TRAIN_NEGATIVES = 100
TRAIN_CUT_QUANTILE = 0.85
