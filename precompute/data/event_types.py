"""The declared event types (``Settings.event_types``): names, codes and weights, and the guard that keeps stored
codes meaning what they meant.

A type's code is its position in the declaration, from 1; events store the code. The ``event_types`` table records
the names codes were stored under; ``register`` (init-db) adds newly declared types and refuses a declaration that
renames, reorders or drops a stored one: the events already stored would silently change type. ``check`` refuses
the same when the item matrices are loaded (workers, training), so a process started with such a declaration
stops with one line instead of ranking with misread types.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from sqlalchemy import Connection, select

from ..errors import ConfigError
from ..settings import Settings
from .tables import Event, StoredEventType


@dataclasses.dataclass(frozen=True)
class EventTypes:
    names: tuple[str, ...]           # by code - 1
    weights: tuple[float, ...]

    @classmethod
    def of(cls, settings: Settings) -> EventTypes:
        return cls(names=tuple(n for n, _ in settings.event_types), weights=tuple(w for _, w in settings.event_types))

    @property
    def codes(self) -> dict[str, int]:
        """name → code."""
        return {name: k for k, name in enumerate(self.names, start=1)}

    def code(self, name: str) -> int:
        try:
            return self.names.index(name) + 1
        except ValueError:
            raise ConfigError(f"event type {name!r} is not declared (PREFEED_EVENT_TYPES: "
                              f"{', '.join(self.names)})") from None

    def weight_by_code(self) -> np.ndarray:
        """float64 array indexed by code (index 0, and codes past the declaration: weight 0)."""
        return np.r_[0.0, np.asarray(self.weights, dtype=np.float64)]

    def __len__(self) -> int:
        return len(self.names)


def by_code(table: np.ndarray, codes) -> np.ndarray:
    """``table[codes]`` for a table indexed by type code (``weight_by_code`` or one derived from it); 0 for a code
    outside it, a type no longer declared, so that every reader weighs such events alike."""
    codes = np.asarray(codes, dtype=np.int64)
    return np.where((codes >= 0) & (codes < len(table)), table[np.clip(codes, 0, len(table) - 1)], 0.0)


#: The types every version before declared types stored events with, codes 1 to 4.
LEGACY = ("view", "click", "contact", "purchase")


def stored_types(conn: Connection) -> dict[int, str]:
    """code → name of the types events are stored with: the ``event_types`` table, or, for a database an earlier
    version wrote (events but no recorded types), the four types that version had."""
    stored = dict(conn.execute(select(StoredEventType.code, StoredEventType.name)).all())
    if not stored and conn.execute(select(Event.id).limit(1)).first() is not None:
        return dict(enumerate(LEGACY, start=1))
    return stored


def check(conn: Connection, settings: Settings) -> EventTypes:
    """``ConfigError`` if a stored code now names another type or is no longer declared (reads only: what every
    reader of type codes runs before it interprets them; ``register`` also records new types)."""
    types = EventTypes.of(settings)
    for code, name in sorted(stored_types(conn).items()):
        if code > len(types) or types.names[code - 1] != name:
            now = f"{types.names[code - 1]!r}" if code <= len(types) else "not declared"
            raise ConfigError(f"PREFEED_EVENT_TYPES: events are stored with type {name!r} as code {code}, which is "
                              f"{now} in today's declaration ({', '.join(types.names)}); keep the stored types in "
                              "their order and declare new ones after them")
    return types


def register(conn: Connection, settings: Settings) -> EventTypes:
    """Record the declared types in the ``event_types`` table, after ``check``."""
    types = check(conn, settings)
    stored = set(conn.execute(select(StoredEventType.code)).scalars())      # (empty for a legacy database)
    missing = [{"code": code, "name": name} for code, name in enumerate(types.names, start=1) if code not in stored]
    if missing:
        conn.execute(StoredEventType.__table__.insert(), missing)
    return types
