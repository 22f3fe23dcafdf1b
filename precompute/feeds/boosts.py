"""The boost rule: lifting paid listings within a user's ranked feed, as one plain function over arrays.

A boosted item already in the user's ranked feed (at most ``lookahead`` places below the requested page) is lifted
into the earliest free boost slot. Boost slots are constrained by density: any prefix of the feed of length n holds
at most ``n // every + 1`` boosted items (one in four with the default), so a page is never all ads. Among waiting
boosted items the higher weight goes first, then the better organic rank. Boosts never add items the model did not
rank for this user. The rule is applied to the feed from its top, so pages are consistent: an item lifted onto
page 1 does not appear again on page 2. (``Settings.boost_every``, ``Settings.boost_lookahead``.)
"""

from __future__ import annotations

import heapq

import numpy as np


def lift_boosts(ids: np.ndarray, scores: np.ndarray, weights: np.ndarray, need: int, every: int,
                lookahead: int) -> list[tuple]:
    """Apply the boost rule to a filtered ranked list; returns the first ``need`` (id, score, boosted)."""
    boosted = weights > 0
    if not boosted.any():
        return [(int(i), float(s), False) for i, s in zip(ids[:need], scores[:need])]
    waiting: list[tuple[float, int]] = []     # (-weight, position)
    b_positions = np.flatnonzero(boosted)
    horizon = need + lookahead
    for p in b_positions[b_positions < horizon]:
        heapq.heappush(waiting, (-float(weights[p]), int(p)))
    out: list[tuple] = []
    n_boosted = 0
    organic = 0
    n = len(ids)
    while len(out) < need and (organic < n or waiting):
        slot = len(out)
        if waiting and n_boosted < slot // every + 1:
            _, p = heapq.heappop(waiting)
            out.append((int(ids[p]), float(scores[p]), True))
            n_boosted += 1
            continue
        while organic < n and boosted[organic] and organic < horizon:
            organic += 1                          # already queued as a boost
        if organic >= n:
            if not waiting:
                break
            _, p = heapq.heappop(waiting)         # nothing organic left: boosted items fill the tail
            out.append((int(ids[p]), float(scores[p]), True))
            n_boosted += 1
            continue
        if boosted[organic]:                      # beyond the lookahead: waits for a boost slot like the rest
            heapq.heappush(waiting, (-float(weights[organic]), organic))
            organic += 1
            continue
        out.append((int(ids[organic]), float(scores[organic]), False))
        organic += 1
    return out


# One round trip per page: read the head of the feed and, server-side, look up for each of its items whether it is
# inactive and its boost, plus the user's interactions newer than the feed's history version. Returns
# four strings, so the client parses four values rather than one per boost or seen item: {blob, inactive flags as
# '0'/'1' per item, "index=weight,..." for boosted items, "id,id,..." seen since the feed was computed}.
