"""An experiment as a value, and the rule that places users in experiments and arms.

A user is in the running experiment whose slot [start, end) holds their slot hash (``hashing.py``), and in none when
no running slot does: running experiments hold disjoint slots (``registry.create`` takes a free one), so a user is in
at most one. Within it, the user's arm is the first whose cumulative share exceeds their arm hash: arm k for
``shares[0] + … + shares[k-1] <= h < shares[0] + … + shares[k]`` (the last sum taken as exactly 1). Nothing is
stored per user; a new user is placed by the same two hashes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from . import hashing

RUNNING, STOPPED = "running", "stopped"


@dataclasses.dataclass(frozen=True)
class Arm:
    name: str          # unique within the experiment, [a-z0-9_-]{1,32}
    spec: str          # pinned: "model:<version>", "popular", "recent:<window>", "covisit", "item_knn", "latent"
    share: float       # of the experiment's users; the arms' shares sum to 1


@dataclasses.dataclass(frozen=True)
class Experiment:
    id: int
    name: str
    arms: tuple[Arm, ...]          # arms[0] is the control
    users: float                   # share of all users in the experiment, (0, 1]
    slot: tuple[float, float]      # [start, end) of the slot hash this experiment holds (end - start == users)
    status: str                    # "running" | "stopped"
    created_at: float              # epoch s (wall clock)
    stopped_at: float | None
    winner: str | None             # the arm it was stopped with, or None

    def arm_of(self, user_ids: np.ndarray) -> np.ndarray:
        """int64 arm index of each user id, -1 for users outside this experiment's slot (whatever its status).
        Vectorized; pure."""
        ids = np.asarray(user_ids).ravel()
        out = np.full(len(ids), -1, dtype=np.int64)
        inside = self.holds(hashing.fractions(hashing.SLOT_KEY, ids))
        if inside.any():
            out[inside] = self.arms_at(hashing.fractions(self.arm_key, ids[inside]))
        return out

    @property
    def arm_key(self) -> bytes:
        """The key of this experiment's arm hash."""
        return hashing.arm_key(self.name, self.id)

    def holds(self, slot_hash: np.ndarray) -> np.ndarray:
        """Which slot hashes fall in this experiment's slot."""
        return (slot_hash >= self.slot[0]) & (slot_hash < self.slot[1])

    def arms_at(self, arm_hash: np.ndarray) -> np.ndarray:
        """The arm index (int64) of each arm hash."""
        bounds = np.cumsum([a.share for a in self.arms])
        bounds[-1] = 1.0                    # a sum rounded below 1 must not leave the top users armless
        return np.minimum(np.searchsorted(bounds, arm_hash, side="right"), len(self.arms) - 1).astype(np.int64)

    def arm_at(self, arm_hash: float) -> int:
        """``arms_at`` for one hash, without numpy."""
        total = 0.0
        for k, arm in enumerate(self.arms[:-1]):
            total += arm.share
            if arm_hash < total:
                return k
        return len(self.arms) - 1


def assign(running: Sequence[Experiment], user_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index into ``running`` or -1, arm index or -1) per user id, both int64. At most one running experiment per
    user: the first in ``running`` whose slot holds them (slots of running experiments do not overlap)."""
    ids = np.asarray(user_ids).ravel()
    which = np.full(len(ids), -1, dtype=np.int64)
    arm = np.full(len(ids), -1, dtype=np.int64)
    if not running or not len(ids):
        return which, arm
    if len(ids) == 1:                       # the API's case: one user per page
        which[0], arm[0] = assign_one(running, int(ids[0]))
        return which, arm
    slot_hash = hashing.fractions(hashing.SLOT_KEY, ids)
    for i, experiment in enumerate(running):
        inside = np.flatnonzero(experiment.holds(slot_hash) & (which < 0))
        if len(inside):
            which[inside] = i
            arm[inside] = experiment.arms_at(hashing.fractions(experiment.arm_key, ids[inside]))
    return which, arm


def assign_one(running: Sequence[Experiment], user_id: int) -> tuple[int, int]:
    """``assign`` for one user id, as two ints and without numpy: (index into ``running`` or -1, arm or -1)."""
    slot_hash = hashing.fraction(hashing.SLOT_KEY, user_id)
    for i, experiment in enumerate(running):
        if experiment.slot[0] <= slot_hash < experiment.slot[1]:
            return i, experiment.arm_at(hashing.fraction(experiment.arm_key, user_id))
    return -1, -1
