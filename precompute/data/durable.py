"""What the database keeps so that a Redis which lost its data can be rebuilt without a hand
(``feeds/recovery.py`` says how a loss is noticed, ``jobs/recovery.py`` what is rebuilt):

- the boosts (paid listings), which serving reads from Redis only: ``PUT``/``DELETE /boosts`` write here first, in
  the same request, so a boost answered 200 survives Redis;
- the token the Redis markers of a key prefix hold, so that a marker never written (a new deployment, a new prefix)
  is told from a marker lost;
- the users whose feeds are worth rebuilding: those with an event within ``PREFEED_FEED_TTL`` of the log's clock (an
  older feed would have expired anyway), most recently active first.

Events need nothing here: they are stored in the database before their recompute is scheduled
(``api/events.py``).
"""

from __future__ import annotations

import secrets
import time

from sqlalchemy import Engine, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from ..settings import Settings
from . import clock
from .tables import Boost, Event, RedisEpoch, User


# -- boosts -------------------------------------------------------------------------------------------------------

def put_boost(engine: Engine, item_id: int, weight: float, expires_at: float, now: float | None = None) -> None:
    """Record ``item_id``'s boost (replacing any), and prune the boosts expired at ``now``."""
    now = time.time() if now is None else now
    with engine.begin() as conn:
        conn.execute(delete(Boost).where((Boost.item_id == item_id) | (Boost.expires_at <= now)))
        conn.execute(insert(Boost).values(item_id=item_id, weight=weight, expires_at=expires_at))


def delete_boost(engine: Engine, item_id: int) -> bool:
    """Forget ``item_id``'s boost; True if there was one."""
    with engine.begin() as conn:
        return conn.execute(delete(Boost).where(Boost.item_id == item_id)).rowcount > 0


def boosts_in_force(engine: Engine, now: float | None = None) -> dict[int, tuple[float, float]]:
    """Item id -> (weight, expires_at) of every boost not expired at ``now``."""
    now = time.time() if now is None else now
    with engine.connect() as conn:
        rows = conn.execute(select(Boost.item_id, Boost.weight, Boost.expires_at).where(Boost.expires_at > now))
        return {int(i): (float(w), float(e)) for i, w, e in rows}


# -- the markers' token ---------------------------------------------------------------------------------------------

def new_token() -> str:
    return secrets.token_hex(8)


def epoch_token(engine: Engine, key_prefix: str) -> str | None:
    """The token last written for ``key_prefix``'s markers; None if none ever was."""
    with engine.connect() as conn:
        return conn.execute(select(RedisEpoch.token).where(RedisEpoch.key_prefix == key_prefix)).scalar()


def adopt_token(engine: Engine, key_prefix: str, token: str) -> str:
    """Record ``token`` for ``key_prefix`` unless one is recorded already; returns the recorded one (two workers
    first seeing a Redis together agree on one)."""
    try:
        with engine.begin() as conn:
            conn.execute(insert(RedisEpoch).values(key_prefix=key_prefix, token=token, written_at=time.time()))
        return token
    except IntegrityError:
        return epoch_token(engine, key_prefix) or token


def replace_token(engine: Engine, key_prefix: str, token: str) -> None:
    with engine.begin() as conn:
        if not conn.execute(update(RedisEpoch).where(RedisEpoch.key_prefix == key_prefix)
                            .values(token=token, written_at=time.time())).rowcount:
            conn.execute(insert(RedisEpoch).values(key_prefix=key_prefix, token=token, written_at=time.time()))


# -- the users to rebuild -----------------------------------------------------------------------------------------

def active_users(engine: Engine, settings: Settings) -> list[int]:
    """Users with an event within ``PREFEED_FEED_TTL`` of the log's clock, the most recently active first (ties by
    id). One range scan of ``ix_events_ts`` over that window, grouped by user."""
    with engine.connect() as conn:
        since = clock.log_clock(conn, settings) - settings.feed_ttl
        last = func.max(Event.ts).label("last")
        rows = conn.execute(select(Event.user_id, last).where(Event.ts >= since).group_by(Event.user_id)
                            .order_by(last.desc(), Event.user_id))
        return [int(u) for u, _ in rows]


def history_versions(engine: Engine, user_ids: list[int]) -> list[tuple[int, int]]:
    """``(user_id, history_version)`` of those of ``user_ids`` the database knows, in the order given."""
    with engine.connect() as conn:
        found = dict(conn.execute(select(User.id, User.history_version).where(User.id.in_(user_ids))).all())
    return [(u, int(found[u])) for u in user_ids if u in found]
