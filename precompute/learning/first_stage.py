"""The cascade's first stage, fitted in ``train`` once the full model is (``ranking/scoring.py`` says how it ranks).

It is the full model distilled: a small CatBoost model (``TREES`` trees at most, RMSE) on the full model's ``COLUMNS``
most important columns, fitted to the full model's own scores of whole candidate lists at the validation cut. No
labels are involved, so it learns what the full model puts on top, where the candidates it must not drop are, and
any list of the period will do. Half the lists fit it; the other half measure how many of the full model's top 10
it keeps in its best ``keep`` (recorded in the bundle's metrics as ``cascade_top10_kept``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..ranking.arrays import top_desc_grouped
from ..ranking.scoring import Cascade, score

#: Trees of the first stage at most: a tenth of training's most; and at most a third of the full model's, so that a
#: small full model is not given a larger first stage.
TREES = 100
#: Columns it reads: the full model's most important (CatBoost's importance); measured on the synthetic log, 8 kept
#: 93 % of the full top 10 in the best 100, 16 kept all of it.
COLUMNS = 16
#: Whole candidate lists distilled on (half fit, half measure).
LISTS = 400


def fit(model, lists: Iterable[tuple], names: list[str], keep: int, seed: int = 0) -> tuple[Cascade, dict]:
    """The first stage of ``model`` from ``lists`` (batches of feature rows, grades, list offsets, owners:
    ``fit._whole_lists``), and its measured metrics."""
    from catboost import CatBoost, Pool

    Xs, offsets, n = [], [0], 0
    for X, _, off, _ in lists:
        take = min(len(off) - 1, LISTS - n)
        Xs.append(X[:off[take]])
        offsets += (offsets[-1] + off[1:take + 1]).tolist()
        n += take
        if n >= LISTS:
            break
    X = np.concatenate(Xs) if Xs else np.empty((0, len(names)), dtype=np.float32)
    offsets = np.asarray(offsets, dtype=np.int64)
    # How much each column moves the prediction: defined for every objective (the default for a groupwise one,
    # YetiRank, needs a data set).
    importance = model.get_feature_importance(type="PredictionValuesChange")
    columns = np.sort(np.argsort(-np.asarray(importance), kind="stable")[:COLUMNS])
    target = score(model, X, thread_count=-1)
    half = n // 2
    fit_rows = slice(0, int(offsets[half]))
    trees = min(TREES, max(10, int(model.tree_count_) // 3))
    small = CatBoost(dict(loss_function="RMSE", iterations=trees, depth=6, random_seed=seed, verbose=False,
                          thread_count=-1, allow_writing_files=False))
    small.fit(Pool(np.asfortranarray(X[fit_rows][:, columns]), target[fit_rows],
                   feature_names=[names[c] for c in columns]))
    cascade = Cascade(model=small, columns=columns, keep=keep)
    # The held-out lists: the share of the full model's top 10 inside the first stage's best ``keep``.
    held = offsets[half:] - offsets[half]
    rows = slice(int(offsets[half]), int(offsets[-1]))
    first = score(small, np.asfortranarray(X[rows][:, columns]), thread_count=-1)
    kept_top, kept_off = top_desc_grouped(first, held, keep)
    full_top, full_off = top_desc_grouped(target[rows], held, 10)
    shares = [np.isin(full_top[full_off[j]:full_off[j + 1]], kept_top[kept_off[j]:kept_off[j + 1]]).mean()
              for j in range(len(held) - 1) if full_off[j + 1] > full_off[j]]
    return cascade, dict(cascade_keep=keep, cascade_columns=len(columns), cascade_trees=trees,
                         cascade_lists=int(n - half),
                         cascade_top10_kept=float(np.mean(shares)) if shares else 1.0)
