"""The ranker's CatBoost objective, and choosing it by what each one ranks.

``Logloss`` learns how likely a candidate is to be interacted with at all (target 1 for any grade > 0), each
positive weighing its grade (view 1 … purchase 6), each negative 1: scores are comparable across users and periods.
``YetiRank`` learns the grades' order within each group (a user's step, or a user at a cut). Neither wins on every
log (docs/replay.md, "The objective, chosen by validation"): on a log where what sold yesterday says what sells next,
YetiRank orders the day's best sellers better; on a log of steady tastes Logloss is ahead.

``PREFEED_TRAIN_LOSS=auto`` (the default) fits both on the same examples and keeps Logloss unless YetiRank's whole
candidate lists rank the validation period better with confidence (``choose``): NDCG@10 within each list, over
users apart from those whose examples stop the training early (both fits looked at those). The promotion check then
judges the users left, so the choice does not flatter it. The cost is the second fit and one scoring pass over the
chosen users' candidates.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..settings import TRAIN_LOSSES, Settings
from . import bootstrap
from ..ranking.arrays import top_desc_grouped

#: CatBoost's NDCG with the gain evaluation's NDCG uses (2^grade - 1), on the top 10.
EVAL_METRIC = "NDCG:top=10;type=Exp"
#: The choice judges at most this many lists (validation steps, or users at the validation cut).
CHOICE_LISTS = 3000
#: With fewer users to judge on, ``auto`` fits the default objective only: a few dozen users' lists can favour
#: either objective by a wide margin that the next period does not keep (MovieLens-100K, docs/replay.md).
CHOICE_MIN_USERS = 100
#: Bootstrap resamples behind the choice's interval.
CHOICE_RESAMPLES = 1000


def losses(settings: Settings, choice_users: int) -> tuple[str, ...]:
    """The objectives ``train`` fits: every one for ``auto`` given ``CHOICE_MIN_USERS`` to choose on (else the
    first, the default), or the one named."""
    if settings.train_loss != "auto":
        return (settings.train_loss,)
    return TRAIN_LOSSES if choice_users >= CHOICE_MIN_USERS else TRAIN_LOSSES[:1]


def fit(loss: str, train: tuple[np.ndarray, ...], valid: tuple[np.ndarray, ...], names: list[str],
        settings: Settings, *, iterations: int, depth: int, seed: int, ignore: tuple[str, ...] = ()):
    """A CatBoost model of ``loss`` fitted on ``train`` (rows, grades, group ids), stopped early on ``valid``'s
    NDCG@10 when it has a positive and early stopping is on."""
    from catboost import CatBoost

    model = CatBoost(dict(loss_function=loss, iterations=iterations, depth=depth,
                          learning_rate=settings.train_learning_rate, random_seed=seed, verbose=False,
                          thread_count=-1, allow_writing_files=False, eval_metric=EVAL_METRIC,
                          **({"ignored_features": list(ignore)} if ignore else {})))
    X_eval, y_eval, g_eval = valid
    stop = dict(eval_set=pool(loss, X_eval, y_eval, g_eval, names, weighted=False), use_best_model=True,
                early_stopping_rounds=settings.train_early_stopping) \
        if (y_eval > 0).any() and settings.train_early_stopping > 0 else {}
    model.fit(pool(loss, *train, names), **stop)
    return model


def choose(models: dict[str, object], lists: Iterable[tuple[np.ndarray, ...]], k: int = 10,
           seed: int = 0) -> tuple[str, dict[str, float]]:
    """The objective to keep, and each model's mean NDCG@``k`` over ``lists``: batches of (feature rows, grades,
    offsets, owners), each list one step's (or one user's) whole candidate set at offsets ``[j, j+1)`` and owned by
    user ``owners[j]``, ranked by the model's scores, the ideal being the list's own grades sorted. Lists without a
    positive candidate are left out (no model can rank them well).

    The first model (the default objective) is kept unless another ranks better with confidence: the 95 % bootstrap
    interval over users of its mean's lead lies above 0. On a small log the lists of a few dozen users can favour
    either by chance, and a wrong switch costs more than a missed one (measured: docs/replay.md)."""
    disc = 1.0 / np.log2(np.arange(k) + 2)
    per_list, owner_ids = {name: [] for name in models}, []
    for X, rel, offsets, owners in lists:
        sizes = np.diff(offsets)
        owner = np.repeat(np.arange(len(sizes)), sizes)
        has_pos = np.bincount(owner[rel > 0], minlength=len(sizes)) > 0
        if not has_pos.any():
            continue
        # Each list's ideal DCG: its grades sorted, best first.
        ideal, ideal_off = top_desc_grouped(rel.astype(np.float32), offsets, k)
        idcg = _dcg(rel[ideal], ideal_off, disc)
        owner_ids.append(np.asarray(owners)[has_pos])
        for name, model in models.items():
            scores = np.asarray(model.predict(X, prediction_type="RawFormulaVal", thread_count=-1), dtype=np.float32)
            top, top_off = top_desc_grouped(scores, offsets, k)
            per_list[name].append(_dcg(rel[top], top_off, disc)[has_pos] / idcg[has_pos])
    names = list(models)
    if not owner_ids:
        return names[0], dict.fromkeys(names, 0.0)
    ndcg = {name: np.concatenate(v) for name, v in per_list.items()}
    means = {name: float(v.mean()) for name, v in ndcg.items()}
    _, user = np.unique(np.concatenate(owner_ids), return_inverse=True)
    user = user.ravel()
    lists_per_user = np.bincount(user)
    first = names[0]
    # Each user's summed lead over their lists against their list count: the ratio of the two sums is the mean lead
    # per list, resampled by user (a user's lists are not independent).
    confident = [name for name in names[1:]
                 if bootstrap.ratio_interval(np.bincount(user, weights=ndcg[name] - ndcg[first]), lists_per_user,
                                             seed=seed, resamples=CHOICE_RESAMPLES)[0] > 0]
    return max(confident, key=means.get, default=first), means


def _dcg(grades: np.ndarray, offsets: np.ndarray, disc: np.ndarray) -> np.ndarray:
    """DCG of each group of ``grades`` (ranked, best first, at offsets ``[j, j+1)``), gain 2^grade - 1."""
    sizes = np.diff(offsets)
    owner = np.repeat(np.arange(len(sizes)), sizes)
    place = np.arange(len(grades)) - offsets[:-1][owner]
    return np.bincount(owner, weights=(2.0 ** grades - 1.0) * disc[place], minlength=len(sizes))


def pool(loss: str, X: np.ndarray, grade: np.ndarray, group: np.ndarray, names: list[str], weighted: bool = True):
    """A CatBoost pool for ``loss`` (see the module's note). Groups stay under Logloss too, for early stopping's
    NDCG (of the unweighted validation pool)."""
    from catboost import Pool

    if loss == "Logloss":
        weight = np.where(grade > 0, grade, 1.0) if weighted else None
        return Pool(X, (grade > 0).astype(np.float32), weight=weight, group_id=group, feature_names=names)
    return Pool(X, grade, group_id=group, feature_names=names)
