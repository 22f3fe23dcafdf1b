"""Scoring candidates with the bundle's CatBoost ranker: the one call a worker makes into the model."""

from __future__ import annotations

import numpy as np


def score(model, X: np.ndarray, thread_count: int = 1) -> np.ndarray:
    """Raw ranking scores, higher is better. One thread: workers scale by process, not by thread."""
    return np.asarray(model.predict(X, prediction_type="RawFormulaVal", thread_count=thread_count),
                      dtype=np.float32)
