"""SQLAlchemy 2 typed mappings: items, users and their interaction events, API keys, experiments.

Times are epoch seconds (float) so they load straight into numpy arrays.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Float, ForeignKey, Index, Integer, LargeBinary, SmallInteger, String, Text, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Ids are 64-bit. SQLite's INTEGER is already 64-bit, and only "INTEGER PRIMARY KEY" is its rowid (auto-increment,
# the fast lookup path); PostgreSQL gets BIGINT.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    pass


class Item(Base):
    """A listing. Everything but the id is optional: an event may create an item bare (``items.py``)."""

    __tablename__ = "items"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=False)
    price: Mapped[float | None] = mapped_column(Float, default=None)
    created_at: Mapped[float | None] = mapped_column(Float, default=None)    # epoch s; NULL = not known
    active: Mapped[bool] = mapped_column(default=True)


class ItemCategory(Base):
    """An item belongs to zero or more categories; category ids are any non-negative 64-bit integers."""

    __tablename__ = "item_categories"
    __table_args__ = (Index("ix_item_categories_category", "category"),)

    item_id: Mapped[int] = mapped_column(BigId, ForeignKey("items.id"), primary_key=True)
    category: Mapped[int] = mapped_column(BigInteger, primary_key=True)


class ItemAttribute(Base):
    """A numeric attribute of an item (``Settings.item_attributes`` names the ones used as features); an absent
    row is a missing value."""

    __tablename__ = "item_attributes"

    item_id: Mapped[int] = mapped_column(BigId, ForeignKey("items.id"), primary_key=True)
    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    value: Mapped[float] = mapped_column(Float)


class StoredEventType(Base):
    """The event types events were stored with: code (``events.type``) → name, written by init-db from
    ``Settings.event_types`` and checked against it (``event_types.py``), so a reordered declaration cannot
    silently give stored events another meaning."""

    __tablename__ = "event_types"

    code: Mapped[int] = mapped_column(SmallInteger, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(32), unique=True)


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=False)
    created_at: Mapped[float] = mapped_column(Float, default=0.0)
    #: Bumped in the same transaction as every batch of this user's events; feeds are stamped with it and a feed
    #: is never replaced by one computed from a lower version.
    history_version: Mapped[int] = mapped_column(BigInteger, default=0)
    #: The newest events, packed (``precompute/data/history.py``), rewritten with every version bump; NULL = not kept.
    recent: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)
    #: Distinct items interacted with and when last (``precompute/data/seen.py``), rewritten with every version
    #: bump: what a feed leaves out. NULL = not kept.
    seen: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)


class Event(Base):
    __tablename__ = "events"
    # Covering index for history reads: a user's newest events come from the index alone, no table lookups.
    # ``ix_events_ts``: the log's clock (newest event time) is one index lookup.
    # ``uq_events_user_event_id``: an event id is the user's own idempotency key; partial, so that the events that
    # carry none (most imported logs) cost the index nothing.
    __table_args__ = (Index("ix_events_user_ts", "user_id", "ts", "id", "item_id", "type"),
                      Index("ix_events_item_type", "item_id", "type"),
                      Index("ix_events_ts", "ts"),
                      Index("uq_events_user_event_id", "user_id", "client_event_id", unique=True,
                            sqlite_where=text("client_event_id IS NOT NULL"),
                            postgresql_where=text("client_event_id IS NOT NULL")))

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("users.id"))
    item_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("items.id"))
    type: Mapped[int] = mapped_column(SmallInteger)       # code: position in ``Settings.event_types``, from 1
    ts: Mapped[float] = mapped_column(Float)
    #: Optional number the event carries (a rating, a watch time); NULL = none.
    value: Mapped[float | None] = mapped_column(Float, default=None)
    #: Optional client-supplied idempotency key, unique per user: an event posted twice for a user with the same key
    #: is stored once; another user's event with the same key is a different event.
    client_event_id: Mapped[str | None] = mapped_column(String(64), default=None)


class ApiKey(Base):
    """A client's API key (``api_keys.py``): only its SHA-256 is kept; the key itself is shown once, at creation."""

    __tablename__ = "api_keys"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)     # hex SHA-256 of the key
    scopes: Mapped[str] = mapped_column(String(200))                   # comma-separated, ``api_keys.SCOPES``
    created_at: Mapped[float] = mapped_column(Float)
    last_used_at: Mapped[float | None] = mapped_column(Float, default=None)
    revoked_at: Mapped[float | None] = mapped_column(Float, default=None)
    #: Requests per second and burst of this key's token bucket; NULL: the settings' defaults.
    rate: Mapped[float | None] = mapped_column(Float, default=None)
    burst: Mapped[int | None] = mapped_column(Integer, default=None)
    #: User ids new to the database this key's events may bring in per minute; NULL: the settings' default.
    new_users: Mapped[int | None] = mapped_column(Integer, default=None)


class StoredExperiment(Base):
    """An experiment as ``precompute/experiments/registry.py`` stores it (read back as an ``Experiment``). Rows are
    never deleted: a stopped experiment keeps its name, arms and slot, so its id and arms keep their meaning."""

    __tablename__ = "experiments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    #: JSON: ``[{"name": ..., "spec": ..., "share": ...}, ...]``, the control first.
    arms: Mapped[str] = mapped_column(Text)
    users: Mapped[float] = mapped_column(Float)                 # share of all users, (0, 1]
    slot_start: Mapped[float] = mapped_column(Float)            # [slot_start, slot_end) of the slot hash
    slot_end: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))             # "running" | "stopped"
    created_at: Mapped[float] = mapped_column(Float)            # epoch s
    stopped_at: Mapped[float | None] = mapped_column(Float, default=None)
    winner: Mapped[str | None] = mapped_column(String(32), default=None)


class ServedPage(Base):
    """A page ``GET /feed`` served (``precompute/experiments/impressions.py``): kept ``PREFEED_IMPRESSIONS_KEEP`` on
    the events' clock, as long as an event may be attributed to it. ``(writer, seq)`` names it: the API process
    that served it and its sequence number there, so a batch moved twice is stored once."""

    __tablename__ = "served_pages"
    __table_args__ = (Index("ix_served_pages_user", "user_id", "served_at"),
                      Index("ix_served_pages_served_at", "served_at"))

    writer: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    user_id: Mapped[int] = mapped_column(BigInteger)
    experiment: Mapped[int] = mapped_column(Integer)          # 0: outside any experiment
    arm: Mapped[int] = mapped_column(SmallInteger)            # index in the experiment's arms; 0 outside
    served_at: Mapped[float] = mapped_column(Float)           # the events' clock when it was served
    position: Mapped[int] = mapped_column(Integer)            # 0-based place of its first item in the user's scroll
    items: Mapped[bytes] = mapped_column(LargeBinary)         # item ids, int64 little-endian, in page order
    request_id: Mapped[str] = mapped_column(String(128))     # ``impressions.REQUEST_ID_MAX``: X-Request-ID's longest


class Exposure(Base):
    """What the report counts of one user in one arm: pages and items served, kept for good (one row per user and
    arm, however many pages)."""

    __tablename__ = "exposures"

    experiment: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    arm: Mapped[int] = mapped_column(SmallInteger, primary_key=True, autoincrement=False)
    user_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    pages: Mapped[int] = mapped_column(BigInteger)
    impressions: Mapped[int] = mapped_column(BigInteger)
    first_served_at: Mapped[float] = mapped_column(Float)


class ItemDay(Base):
    """What the pages did for one item on one day of the events' clock (``item_days.py``): ``kind``
    ``item_days.SHOWN`` counts the item's impressions on the pages served that day (every user's), an event type's
    code counts that day's events of that type attributed to a page. Kept ``item_days.KEEP_DAYS`` days."""

    __tablename__ = "item_days"

    item_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    day: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)     # served_at // 86400
    kind: Mapped[int] = mapped_column(SmallInteger, primary_key=True, autoincrement=False)
    count: Mapped[int] = mapped_column(BigInteger)


class Attribution(Base):
    """An event attributed to the newest page that served its item to its user within
    ``PREFEED_ATTRIBUTION_WINDOW`` before it; events without a row are organic."""

    __tablename__ = "attributions"
    __table_args__ = (Index("ix_attributions_experiment", "experiment", "arm", "user_id"),)

    event_id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=False)
    experiment: Mapped[int] = mapped_column(Integer)
    arm: Mapped[int] = mapped_column(SmallInteger)
    user_id: Mapped[int] = mapped_column(BigInteger)
    type: Mapped[int] = mapped_column(SmallInteger)
    position: Mapped[int] = mapped_column(Integer)
    served_at: Mapped[float] = mapped_column(Float)


class ImpressionWriter(Base):
    """Per API process that served pages: the newest sequence number stored and the pages found missing (a gap:
    lost with a Redis that restarted empty, or dropped over ``PREFEED_IMPRESSIONS_BUFFER_MAX``)."""

    __tablename__ = "impression_writers"

    writer: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    last_seq: Mapped[int] = mapped_column(BigInteger)
    lost: Mapped[int] = mapped_column(BigInteger, default=0)


class CollectorMark(Base):
    """The collector's marks (``precompute/experiments/collect.py``): ``attributed`` (events up to this id are
    attributed) and ``settling`` (the newest event id when a collection ran, and when: attributed once the pages
    served before those events have surely reached the database)."""

    __tablename__ = "collector_marks"

    name: Mapped[str] = mapped_column(String(16), primary_key=True)
    event_id: Mapped[int] = mapped_column(BigInteger)
    at: Mapped[float] = mapped_column(Float, default=0.0)


class Boost(Base):
    """A paid listing's boost (``PUT /boosts/<item_id>``): the record the Redis hash serving reads
    (``feeds/item_states.py``) is rebuilt from after Redis lost its data. Written before Redis in the same request;
    expired rows are pruned at the next write."""

    __tablename__ = "boosts"

    item_id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=False)
    weight: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)          # epoch s


class RedisEpoch(Base):
    """The token the Redis markers of one key prefix hold (``feeds/recovery.py``): a marker missing, or holding
    another token, tells a worker that Redis lost its data since the token was written."""

    __tablename__ = "redis_epochs"

    key_prefix: Mapped[str] = mapped_column(String(200), primary_key=True)
    token: Mapped[str] = mapped_column(String(32))
    written_at: Mapped[float] = mapped_column(Float)          # epoch s
