"""Every Redis key prefeed uses, named in one place under one prefix (``Settings.key_prefix``).

Keys are laid out for Redis Cluster, and the same layout serves a single Redis:

- a user's keys share the hash tag ``{u:<id>}`` (one slot), so a page reads the feed and the recent seen items
  in one call on one node;
- the item states (boosts, deactivations, their counters) share ``{live}`` and the fallback's popular lists share
  ``{popular}``: each group changes in one atomic step on one node (``item_states.py``, ``store.publish_popular``);
- the dirty-user set, the drain flags and the rate limits' budgets belong with the RQ queue (``QUEUE_REDIS_URL``),
  never on a cluster.

Versions before the cluster layout named feeds ``<prefix>feed:<id>``: after an upgrade those are not read, users are
served the fallback until ``manage.py precompute --stale`` (or ``--all``) has rebuilt their feeds.
"""

from __future__ import annotations


class Keys:
    """Every key prefeed uses, under one prefix."""

    def __init__(self, prefix: str) -> None:
        if "{" in prefix or "}" in prefix:
            raise ValueError("the key prefix must not contain braces: they would become the keys' hash tag")
        self.prefix = prefix
        live = f"{prefix}{{live}}:"
        self.live_seq = f"{live}seq"                   # counter: one increment per change
        self.live_epoch = f"{live}epoch"               # counter: one increment per whole replacement
        self.live_inactive = f"{live}inactive"         # zset item id -> seq of its deactivation
        self.live_reactivated = f"{live}reactivated"   # zset item id -> seq of its reactivation
        self.live_boosts = f"{live}boosts"             # hash item id -> "weight expires_at"
        self.live_clock = f"{live}clock"               # the events' clock: the newest accepted event time
        self.live_new = f"{live}new"                   # hash item id -> "created_at cats": new items waiting
        self.live_new_shown = f"{live}new_shown"       # hash item id -> impressions counted while waiting
        self.live_new_at = f"{live}new_at"             # zset item id -> created_at: every new item registered
        self.live_new_seq = f"{live}new_seq"           # counter: one increment per change to new
        self.dirty = f"{prefix}dirty"                  # zset user_id -> time it may next be claimed (queue Redis)
        self.dirty_known = f"{prefix}dirty:known"      # zset: the users of dirty who had a history, same times
        self.recomputed = f"{prefix}recomputed"        # zset user_id -> time of its last claim (queue Redis)
        self.feed_clock = f"{prefix}feed_clock"        # zset user_id -> log clock its feed was computed at (queue Redis)
        self.new_ranker = f"{prefix}dirty:new:ranker"  # the drain ranking new users now: one at a time (queue Redis)
        self.drain_flag = f"{prefix}drain:pending"
        self.drain_scheduled_flag = f"{prefix}drain:scheduled"
        self.impressions = f"{prefix}impressions"      # list of served pages' records (queue Redis)
        self.impressions_lock = f"{prefix}impressions:lock"             # one collector at a time
        self.impressions_rejected = f"{prefix}impressions:rejected"     # records the database refused (bounded)
        self.impressions_scheduled = f"{prefix}impressions:scheduled"   # a collector job is scheduled
        self.cursor_secret = f"{prefix}cursor:secret"   # signs cursors, unless PREFEED_CURSOR_SECRET (queue Redis)
        # Lost-data detection and the rebuild that follows (``recovery.py``): a marker per Redis (per cluster node:
        # ``marker``), and on the queue Redis the rebuild's progress, its users in order, and its lock.
        self.redis_marker = f"{prefix}redis:marker"
        self.recovery = f"{prefix}recovery"            # hash: began, token, total, looked_at, marked, finished_at
        self.recovery_users = f"{prefix}recovery:users"   # int64 user ids, most recently active first
        self.recovery_lock = f"{prefix}recovery:lock"
        # Popular lists hold 64-bit ids, all in one slot so they are replaced in one transaction.
        self.popular_global = f"{prefix}{{popular}}:global"
        # Similar items (``similar.py``): one value per item, each key its own slot; the bundle version written.
        self.similar_version = f"{prefix}similar:version"

    def feed(self, user_id: int) -> str:
        return f"{self.prefix}{{u:{user_id}}}:feed"

    def seen_recent(self, user_id: int) -> str:
        # zset item_id -> history version of the interaction: the user's newest ``PREFEED_SEEN_RECENT_MAX`` seen
        # items, in which a page finds those seen since its feed (stored as ":seen": existing keys stay readable)
        return f"{self.prefix}{{u:{user_id}}}:seen"

    def marker(self, tag: int) -> str:
        return f"{self.prefix}{{marker:{tag}}}"      # a cluster node's marker: a tag whose slot that node serves

    def rate_key(self, name: str) -> str:
        return f"{self.prefix}rate:key:{name}"          # an API key's request budget (queue Redis)

    def rate_new_users(self, name: str) -> str:
        return f"{self.prefix}rate:new_users:{name}"    # an API key's budget of new user ids (queue Redis)

    def rate_user(self, user_id: int) -> str:
        return f"{self.prefix}rate:user:{user_id}"      # a user id's event budget (queue Redis)

    def similar(self, item_id: int) -> str:
        return f"{self.prefix}similar:{item_id}"          # an item's similar items (binary, ``similar.py``)

    def popular_category(self, category: int) -> str:
        return f"{self.prefix}{{popular}}:cat:{category}"
