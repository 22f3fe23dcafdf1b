"""Users as operations see them: how many have a history, a sample of them with their versions (feed coverage and
feed age are judged on it), and one user's version and newest events (the dashboard's user lookup)."""

from __future__ import annotations

from sqlalchemy import Engine, bindparam, func, select

from .event_types import EventTypes
from .tables import Event, User
from ..settings import Settings


def with_history(engine: Engine, sample: int) -> tuple[int, list[tuple[int, int]]]:
    """The number of users with at least one event, and ``(user_id, history_version)`` of all of them when there
    are at most ``sample``, else of ``sample`` drawn at random (``ORDER BY random()``: one scan of the users
    table, without reading their packed values)."""
    has_history = User.history_version > 0
    with engine.connect() as conn:
        total = int(conn.execute(select(func.count()).select_from(User).where(has_history)).scalar() or 0)
        query = select(User.id, User.history_version).where(has_history)
        query = query.order_by(User.id) if total <= sample else query.order_by(func.random()).limit(sample)
        return total, [(int(u), int(v)) for u, v in conn.execute(query)]


def ids_after(engine: Engine, after: int, n: int) -> list[int]:
    """Up to ``n`` user ids above ``after``, ascending (a scan of the users table by its key, a step at a time)."""
    with engine.connect() as conn:
        return [int(u) for u in conn.execute(select(User.id).where(User.id > after).order_by(User.id).limit(n))
                .scalars()]


def history_version(engine: Engine, user_id: int) -> int | None:
    """The user's history version, None for a user the database does not know."""
    with engine.connect() as conn:
        return conn.execute(select(User.history_version).where(User.id == user_id)).scalar()


def recent_events(engine: Engine, user_id: int, n: int, settings: Settings) -> list[dict]:
    """The user's newest ``n`` events, newest first, as plain values (type by its declared name)."""
    names = EventTypes.of(settings).names
    with engine.connect() as conn:
        rows = conn.execute(select(Event.ts, Event.item_id, Event.type, Event.value)
                            .where(Event.user_id == user_id)
                            .order_by(Event.ts.desc(), Event.id.desc()).limit(n)).all()
    return [{"ts": float(ts), "item_id": int(item), "value": value,
             "type": names[code - 1] if 1 <= code <= len(names) else str(code)} for ts, item, code, value in rows]


#: One statement for every call (its ids an expanding parameter): building ``in_()`` of a hundred literals per call
#: cost a refused flood batch more than the query itself.
_EXISTING = select(User.id).where(User.id.in_(bindparam("ids", expanding=True)))


def existing(engine: Engine, user_ids: list[int]) -> set[int]:
    """Which of ``user_ids`` the database has a row for (one query; ``POST /events`` counts the others as new)."""
    if not user_ids:
        return set()
    with engine.connect() as conn:
        return {int(u) for u in conn.execute(_EXISTING, {"ids": sorted(set(user_ids))}).scalars()}
