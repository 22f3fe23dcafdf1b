"""SQLAlchemy 2 typed mappings: items, users and their interaction events.

Times are epoch seconds (float) so they load straight into numpy arrays.
"""

from __future__ import annotations

import enum

from sqlalchemy import BigInteger, Float, ForeignKey, Index, Integer, LargeBinary, SmallInteger, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Ids are 64-bit. SQLite's INTEGER is already 64-bit, and only "INTEGER PRIMARY KEY" is its rowid (auto-increment,
# the fast lookup path); PostgreSQL gets BIGINT.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class EventType(enum.IntEnum):
    """Interaction strength grows with the value; it doubles as the graded relevance label."""

    view = 1
    click = 2
    contact = 3
    purchase = 4


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "items"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=False)
    category: Mapped[int] = mapped_column(SmallInteger, index=True)
    price: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    active: Mapped[bool] = mapped_column(default=True)
    quality: Mapped[float] = mapped_column(Float, default=0.5)        # listing quality score, 0..1
    photos: Mapped[int] = mapped_column(SmallInteger, default=1)
    seller_rating: Mapped[float] = mapped_column(Float, default=4.0)  # 1..5


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
    __table_args__ = (Index("ix_events_user_ts", "user_id", "ts", "id", "item_id", "type"),
                      Index("ix_events_item_type", "item_id", "type"),
                      Index("ix_events_ts", "ts"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("users.id"))
    item_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("items.id"))
    type: Mapped[int] = mapped_column(SmallInteger)
    ts: Mapped[float] = mapped_column(Float)
    #: Optional client-supplied idempotency key: an event posted twice with the same key is stored once.
    client_event_id: Mapped[str | None] = mapped_column(String(64), unique=True, default=None)
