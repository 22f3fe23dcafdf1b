"""After a chunk's events are stored: each affected user's history version grows by their new events, and their
kept values (``users.recent``, ``history.py``; ``users.seen``, ``seen.py``) take the new events in, in the same
transaction, exactly as ``recording.py`` does for the API's events (same packing functions, same rules: a NULL
value stays NULL, a malformed one or one kept under a smaller limit becomes NULL and is read from the events table).

Imported events may be older than stored ones (a historical log loaded after the API recorded live events):
``history.append`` merges by (ts, id), so the kept value is still the newest ``history_limit`` events of the
table, and ``seen.merge`` keeps each item's latest time.
"""

from __future__ import annotations

import numpy as np
from sqlalchemy import Connection, text

from .. import history, seen
from ..items import IN_BATCH, literal_ids
from .stage import postgres

_UPDATE = text("UPDATE users SET history_version = history_version + :n, recent = :recent, seen = :seen "
               "WHERE id = :id")


def apply(conn: Connection, stored: np.ndarray, history_limit: int, seen_cap: int) -> np.ndarray:
    """Bump versions and rewrite kept values for the users of ``stored`` (``events.STORED`` rows); returns their
    ids, ascending."""
    if not len(stored):
        return np.empty(0, dtype=np.int64)
    stored = stored[np.lexsort((stored["id"], stored["user"]))]       # by user, then the log's id order
    users, starts = np.unique(stored["user"], return_index=True)
    ends = np.r_[starts[1:], len(stored)]
    current = {}
    # FOR NO KEY UPDATE (what an UPDATE of non-key columns takes): it does not conflict with the KEY SHARE locks
    # the foreign-key checks of concurrent event inserts take. SQLite: BEGIN IMMEDIATE holds the lock.
    lock = " ORDER BY id FOR NO KEY UPDATE" if postgres(conn) else ""
    for k in range(0, len(users), IN_BATCH):
        part = users[k:k + IN_BATCH]
        for uid, recent, seen_value in conn.exec_driver_sql(
                f"SELECT id, recent, seen FROM users WHERE id IN ({literal_ids(part)}){lock}"):
            current[uid] = (recent, seen_value)
    params = []
    for uid, a, b in zip(users.tolist(), starts.tolist(), ends.tolist()):
        new = stored[a:b]
        recent, seen_value = current[uid]
        if recent is not None:
            recent = history.append(recent, new["item"], new["type"], new["ts"], history_limit) \
                if history.covers(recent, history_limit) else None
        if seen_value is not None:
            seen_value = seen.merge(seen_value, new["item"], new["ts"], seen_cap) \
                if seen.covers(seen_value, seen_cap) else None
        params.append({"id": uid, "n": b - a, "recent": recent, "seen": seen_value})
    conn.execute(_UPDATE, params)
    return users
