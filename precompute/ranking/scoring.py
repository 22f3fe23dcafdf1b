"""Scoring candidates with the bundle's CatBoost ranker: the one call a worker makes into the model.

**The cascade.** Most of a candidate's cost in the model is not its trees but turning its ~70 columns into the bins
the trees split on, and a user reads the first few dozen of ~2,000 candidates. So a bundle may hold a first stage
(``Cascade``): a small CatBoost model on the handful of columns the full model leans on most, trained at ``train``
to reproduce the full model's scores on whole candidate lists (``learning/first_stage.py``). It scores every
candidate; the full model scores each user's best ``keep`` of them; the list is the full model's order of those,
then the first stage's order of the rest, below them. A bundle without one (written before the cascade, or trained
with ``PREFEED_CASCADE_KEEP=0``) ranks every candidate with the full model.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from ..errors import BundleError
from .arrays import top_desc_grouped


@dataclasses.dataclass(frozen=True)
class Cascade:
    model: object               # catboost.CatBoost on ``columns`` only
    columns: np.ndarray         # the layout's column indices it reads, in its own order
    keep: int                   # candidates per user the full model scores


@dataclasses.dataclass(frozen=True)
class Ranker:
    """A full model and, when it has one, its first stage: what ``rank_scores`` ranks by."""

    model: object
    cascade: Cascade | None = None


def load_cascade(path: Path, staged: dict, names: list[str], what: str) -> Cascade:
    """The first stage saved at ``path`` that a bundle's meta.json records as ``staged`` (its columns by name
    among the bundle's ``names``, and ``keep``); ``BundleError`` naming ``what`` when it does not load or match."""
    from catboost import CatBoost, CatBoostError

    try:
        columns = np.array([names.index(c) for c in staged["columns"]], dtype=np.int64)
        keep = int(staged["keep"])
    except (KeyError, TypeError, ValueError):
        raise BundleError(f"{what}: meta.json records a first stage it cannot read; retrain") from None
    small = CatBoost()
    try:
        small.load_model(str(path))
    except CatBoostError as exc:
        raise BundleError(f"{what}: {path.name} does not load ({str(exc)[:120]})") from None
    if list(small.feature_names_ or []) != list(staged["columns"]) or keep < 1:
        raise BundleError(f"{what}: its first stage reads other columns than meta.json records; retrain")
    return Cascade(model=small, columns=columns, keep=keep)


def score(model, X: np.ndarray, thread_count: int = 1) -> np.ndarray:
    """Raw ranking scores, higher is better. One thread: workers scale by process, not by thread."""
    return np.asarray(model.predict(X, prediction_type="RawFormulaVal", thread_count=thread_count),
                      dtype=np.float32)


def rank_scores(ranker, X: np.ndarray, offsets: np.ndarray, thread_count: int = 1) -> np.ndarray:
    """Scores of candidates grouped by user (user ``k``'s at ``offsets[k]:offsets[k+1]``) that order each user's
    list as the ranker serves it: the full model's scores of the first stage's best ``keep``, and below the lowest of
    them the rest in the first stage's order. ``ranker``: a ``Ranker``, or a bare CatBoost model (no cascade)."""
    model, cascade = (ranker.model, ranker.cascade) if isinstance(ranker, Ranker) else (ranker, None)
    if not len(X):
        return np.empty(0, dtype=np.float32)
    if cascade is None or int(np.diff(offsets).max()) <= cascade.keep:
        return score(model, X, thread_count)
    first = score(cascade.model, np.asfortranarray(X[:, cascade.columns]), thread_count)
    top, _ = top_desc_grouped(first, offsets, cascade.keep)
    survivor = np.zeros(len(X), dtype=bool)
    survivor[top] = True
    full = score(model, np.asfortranarray(X[top]), thread_count)
    # Per user: the rest shifted to end just below the lowest full score of the user's survivors.
    owner = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    n = len(offsets) - 1
    low = np.full(n, np.inf, dtype=np.float32)
    np.minimum.at(low, owner[top], full)
    rest = ~survivor
    high = np.full(n, -np.inf, dtype=np.float32)
    np.maximum.at(high, owner[rest], first[rest])
    out = np.empty(len(X), dtype=np.float32)
    out[top] = full
    shift = (low - high - np.float32(1.0))[owner[rest]]
    out[rest] = first[rest] + shift
    return out
