"""The category each item counts in for the diversity rule, held in memory by every API process that applies it.

A page reads only its own user's keys in one round trip (``page.py``), so the items' categories cannot be read per
page. Each API process holds them as two sorted arrays: the ids of the items that have a category and the category
each counts in (its lowest category id, ``diversity.py`` says why), 16 bytes per item: ~160 MB for a catalogue of
10 million items, ~1.6 MB for 100,000. An item looked up is also kept in a dict beside the copy (``Held.looked``,
at most ``LOOKED_MAX`` items, ~6 MB, emptied when full): a page's ~70 items, most of them among the catalogue's
popular ones, are then one ``dict.get`` each in C (~2 us), and only those not looked up since the copy was loaded
take the binary search (~7 us of numpy calls for a page's worth).

Loaded from the database the first time a page applies the rule (a deployment with the rule off and no request
asking for it never holds them), then reloaded whole in a background thread every ``PREFEED_DIVERSITY_REFRESH``;
pages read whichever copy is current (one attribute, replaced whole). So a new item, or an item whose categories
changed, is counted in its category within that interval; until then a new item counts in none (it always fits,
as an item without a category does) and a changed one in its old category. A failed reload keeps the copy it had.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from .diversity import NONE

#: How the copy is read: every item with a category and the category it counts in, ascending by item id.
Reader = Callable[[], tuple[np.ndarray, np.ndarray]]


#: The most items a copy keeps looked up in its dict (``Held.looked``); past it the dict starts again empty.
LOOKED_MAX = 1 << 16


class Held(NamedTuple):
    """One copy: the items with a category, ascending, then the largest int64 (so a search never runs off the end),
    and the category each counts in, then ``NONE``; and the items looked up in it so far, with their category."""

    known: np.ndarray
    cats: np.ndarray
    looked: dict[int, int]

    @classmethod
    def of(cls, known: np.ndarray, cats: np.ndarray) -> Held:
        return cls(np.append(np.asarray(known, dtype=np.int64), np.iinfo(np.int64).max),
                   np.append(np.asarray(cats, dtype=np.int64), NONE), {})

    def search(self, ids: Sequence[int]) -> list[int]:
        """The counted category of each of ``ids`` by binary search (``NONE`` for an item without one)."""
        q = np.array(ids, dtype=np.int64)
        at = self.known.searchsorted(q)
        found = self.cats[at]
        found[self.known[at] != q] = NONE
        return found.tolist()


class ItemCategories:
    """One process's copy of every item's counted category (see the module doc)."""

    def __init__(self, read: Reader, refresh_s: float) -> None:
        self._read = read
        self.refresh_s = refresh_s
        self._held: Held | None = None
        self._lock = threading.Lock()
        self.loaded_at = float("-inf")           # monotonic s of the copy held

    def of(self, ids: Sequence[int]) -> list[int]:
        """The counted category of each of ``ids`` (``NONE`` for an item without one, or not known yet)."""
        held = self._held
        if held is None:
            held = self._first_load()
        looked = held.looked
        got = list(map(looked.get, ids))
        if None not in got:
            return got
        missing = [i for i, c in zip(ids, got) if c is None]
        found = held.search(missing)
        if len(looked) + len(missing) > LOOKED_MAX:
            looked.clear()
        if len(missing) <= LOOKED_MAX:
            looked.update(zip(missing, found))
        rest = iter(found)
        return [next(rest) if c is None else c for c in got]

    @property
    def held(self) -> Held | None:
        """The copy pages read now (None before the first page that applies the rule)."""
        return self._held

    def reload(self) -> None:
        """Read the copy again from the database and replace the one held, with nothing looked up in it yet (what
        the background thread does every ``refresh_s``)."""
        self._held = Held.of(*self._read())
        self.loaded_at = time.monotonic()

    def _first_load(self) -> Held:
        with self._lock:
            if self._held is None:
                self.reload()
                threading.Thread(target=self._follow, name="prefeed-categories", daemon=True).start()
        return self._held

    def _follow(self) -> None:
        """Reload the copy every ``refresh_s``, for the life of the process."""
        while True:
            time.sleep(self.refresh_s)
            try:
                self.reload()
            except Exception:                    # noqa: BLE001 - a database away: keep serving the copy held
                continue
