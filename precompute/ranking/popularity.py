"""Item popularity at a clock: type-weighted interactions per item over short and long windows, the feature columns
they make (``layout`` group "item_live") and the recent-popularity candidate lists.

Popularity moves fastest of everything a ranker knows: on a purchase log "what sold in the last day" beats most
personal signals, and only when it is as fresh as the feed. ``BatchPopularity`` holds it for a batch of users:

- in serving (``ItemTable.live``): one block for every user, from the item table's windows at its ``as_of``; workers
  reload the table once the log's clock has moved ``PREFEED_ITEM_TABLE_MAX_AGE`` past it (``pipeline.refresh``);
- in replay evaluation and training (``learning/activity.py``): one block per distinct clock of the batch, from the in-memory log
  up to that clock, so each replayed step sees popularity as it was then.

Both go through ``block``: a step replayed at a clock ranks with exactly the columns a worker would compute from a
table loaded at that clock.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import sources
from .layout import WINDOWS

#: The recent-popularity candidate sources (``sources.py``): (window name, candidate flag bit), each list's length
#: from the settings.
FROM_RECENT_1H, FROM_RECENT_1D = sources.bit("recent_1h"), sources.bit("recent_1d")
SOURCES = sources.RECENT


def block(windowed: np.ndarray, ever: np.ndarray) -> np.ndarray:
    """The "item_live" columns of every item (float32, column-major) from its type-weighted interactions in each of
    ``WINDOWS`` (``(n, len(WINDOWS))``) and of all time (``(n,)``), as of one clock.

    Counts say how much an item sells; shares (log of the item's smoothed share of the window's interactions) say
    the same free of the log's pace, which differs between a training period and the time a feed is served. Trend:
    the share of the last week over the share of all time (> 0: rising)."""
    return np.asfortranarray(Counts(windowed, ever)[slice(None)])


_WEEK = [w for w, _ in WINDOWS].index("7d")


class Counts:
    """``block(windowed, ever)`` computed only for the rows asked (``counts[rows]``, the same numbers): replay and
    training rank a few thousand candidates per clock, not the catalogue, and the logs of every item at every
    replayed step's clock were a fifth of training's time."""

    def __init__(self, windowed: np.ndarray, ever: np.ndarray) -> None:
        n = max(len(ever), 1)
        self.windowed, self.ever = windowed, ever
        self.shape = (len(ever), 2 * len(WINDOWS) + 2)
        # Column by column: a sum along axis 0 of the (n, k) C-ordered counts is ~20x slower (200 µs at 12k items,
        # once per replayed clock: 5 s of a training at 1M events).
        self._totals = np.array([windowed[:, k].sum() for k in range(windowed.shape[1])]) + n
        self._week_total = windowed[:, _WEEK].sum() + n
        self._ever_total = ever.sum() + n

    def __getitem__(self, rows) -> np.ndarray:
        """``(len(rows), k)`` float32: the "item_live" columns of item ``rows``."""
        windowed, ever = self.windowed[rows], self.ever[rows]
        share = np.log((windowed + 1.0) / self._totals)
        trend = np.log((windowed[:, _WEEK] + 1.0) / self._week_total) - np.log((ever + 1.0) / self._ever_total)
        return np.column_stack([np.log1p(windowed), np.log1p(ever), share, trend]).astype(np.float32)


def top_lists(windowed: np.ndarray, active: np.ndarray, lengths: tuple[int, ...]) -> list[np.ndarray]:
    """For each source of ``SOURCES``: the rows of the ``lengths[k]`` active items with the most interactions in its
    window (positive only), most first, ties by row (the more popular item of all time)."""
    out = []
    for (window, _), k in zip(SOURCES, lengths):
        score = np.where(active, windowed[:, [w for w, _ in WINDOWS].index(window)], 0.0)
        rows = np.flatnonzero(score > 0)
        if len(rows) > 4 * k:             # only the top k and their ties at the k-th place need the sort
            rows = rows[score[rows] >= -np.partition(-score[rows], k - 1)[k - 1]] if k > 0 else rows[:0]
        out.append(rows[np.lexsort((rows, -score[rows]))][:max(k, 0)])
    return out


@dataclasses.dataclass
class BatchPopularity:
    """Popularity blocks of a batch of users: user ``k`` is at clock ``clocks[which[k]]`` and sees ``blocks[which[k]]``
    (``(n_items, len(layout.live_names()))``) and the recent-popularity lists ``lists[which[k]]`` (one per ``SOURCES``)."""

    blocks: list[np.ndarray | Counts]
    lists: list[list[np.ndarray]]
    which: np.ndarray

    def gather(self, rows: np.ndarray, offsets: np.ndarray, out: np.ndarray, start: int) -> None:
        """``out[:, start:start+k]`` = each candidate's row of its user's block (user ``j``'s candidates at
        ``offsets[j]:offsets[j+1]``)."""
        k = self.blocks[0].shape[1]
        if len(self.blocks) == 1 and isinstance(self.blocks[0], np.ndarray):
            for j in range(k):
                np.take(self.blocks[0][:, j], rows, out=out[:, start + j], mode="clip")
            return
        at = np.repeat(self.which, np.diff(offsets))
        for b, blk in enumerate(self.blocks):
            mine = np.flatnonzero(at == b)
            if len(mine):
                out[mine, start:start + k] = blk[rows[mine]]
