"""Fitting the CatBoost ranker on a time-ordered split of the event log (``fit_ranker``).

Cuts at quantiles of event time (``PREFEED_TRAIN_CUT_QUANTILE`` < ``PREFEED_TRAIN_VALID_QUANTILE``, ``periods.py``):
training examples are built at the first (features from the log up to it, labels from the events between the two
cuts), validation examples at the second (features, item table and co-visitation from the log up to it, labels
after it), so the model learns from one period and is stopped early on the next, as in production.
``PREFEED_TRAIN_PERIODS`` > 1 adds earlier training cuts, each with its own item table and co-visitation and labelled
by all events after it up to the validation cut (``periods.training_cuts``): on a log where most users are active
briefly, one cut sees few users with history before it and labels after it, and a label window as long as the
known future matches what a feed is judged on (everything the user does next, not only the next few days).
CatBoost stops adding trees once NDCG@10 on the validation examples has not improved for
``PREFEED_TRAIN_EARLY_STOPPING`` trees and keeps the best count (``train_iterations`` is the maximum; 0 keeps every
tree: a model of a known size, as the precompute benchmark needs).

Labels: a candidate is relevant if the user interacted with it in the period after its cut, graded by the weight of
the strongest interaction (``PREFEED_EVENT_TYPES``: view 1 … purchase 6 by default). Judging the trained model
against the baselines is ``train.py``'s (what ``manage.py train`` runs): one protocol for ``train``, ``models list``
and ``evaluate``. Scoring with the fitted model is ``ranking/scoring.py``'s, the one part a worker needs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import numpy as np
from sqlalchemy import Engine

from ..data.log import EventLog, load_events
from ..errors import InvalidInput
from ..ranking import arrays, candidates, features, scoring
from ..settings import Settings
from . import ahead, derived, first_stage, objective, periods
from . import steps as replayed
from .activity import Activity
from .periods import Period

@dataclasses.dataclass
class Fitted:
    model: object
    pairs: dict[str, np.ndarray]
    metrics: dict
    #: The users whose validation examples chose the tree count, or whose lists chose the objective: the promotion
    #: check judges others.
    stopping_users: np.ndarray = dataclasses.field(default_factory=lambda: np.empty(0, dtype=np.int64))
    #: The validation cut's period (item table and co-visitation as of it), for the promotion check to reuse.
    validation: Period | None = None
    #: The first stage (``first_stage.py``), None with ``PREFEED_CASCADE_KEEP=0``.
    cascade: scoring.Cascade | None = None

    @property
    def ranker(self) -> scoring.Ranker:
        """What serves: the model with its first stage."""
        return scoring.Ranker(self.model, self.cascade)


def fit_ranker(engine: Engine, settings: Settings, *, iterations: int | None = None, depth: int | None = None,
          users: int | None = None, seed: int = 0, progress: Callable[[str], None] = lambda msg: None,
          events: EventLog | None = None, ignore: tuple[str, ...] = ()) -> Fitted:
    """Train on a time-ordered split of the whole event log. ``iterations`` (the most trees early stopping may
    keep), ``depth`` and ``users`` default to the ``train_*`` settings; everything else (negatives, learning rate,
    the cuts, candidates) comes from ``settings``. ``events``: the log (``data/log.py``), when the caller has read it already (evaluation trains on the part before its cut);
    default: the database's, up to ``settings.as_of``. The objective: ``objective.py``."""
    if settings.train_cut_quantile >= settings.train_valid_quantile:
        raise InvalidInput("PREFEED_TRAIN_CUT_QUANTILE must be below PREFEED_TRAIN_VALID_QUANTILE (training learns "
                           "from the period before the one it is judged on)")
    iterations = iterations or settings.train_iterations
    depth = depth or settings.train_depth
    users = users or settings.train_users
    events = events if events is not None else load_events(engine, settings.as_of or float("inf"))
    ev_user, ev_ts = events.user, events.ts
    if len(ev_user) < 100:
        raise InvalidInput(f"only {len(ev_user)} events in the database; seed or collect more before training")
    bounds = periods.training_cuts(ev_ts, settings)
    cut, valid_cut = bounds[-2], bounds[-1]
    if not cut < valid_cut:
        raise InvalidInput("the log's events are too close in time to split into training and validation "
                           "periods; collect a longer log")
    everyone = np.unique(ev_user)
    progress(f"{len(bounds) - 1} training period(s): features at {', '.join(f'{c:.0f}' for c in bounds[:-1])}, "
             f"each labelled up to the validation cut; validation: features at {valid_cut:.0f}, labels after")
    rng = np.random.default_rng(seed)
    by_steps = settings.train_labels == "steps"
    by_user = replayed.ByUser(events) if by_steps else None
    # The pages the product served, where the database stores them: what the "shown" columns learn from.
    stored = derived.StoredPages.of(engine, settings.impressions_keep) if by_steps and settings.rank_shown else None
    # The validation period, then each training period (the next one fitted in a child meanwhile: ``periods.each``).
    fitted = periods.each(engine, settings, events, [(valid_cut, float("inf"))] + [(c, valid_cut) for c in bounds[:-1]],
                          everyone, settings.replay_steps if by_steps else None)
    try:
        judge, valid_steps = next(fitted)
        # Early stopping takes at most half of the users eligible at the validation cut: the promotion check judges
        # the others (``train.validate``), whose period then is still unseen by the model's selection.
        eligible = valid_steps.users() if by_steps else judge.eligible()
        n_valid = max(5, min(users // 5, len(eligible) // 2))
        valid_users = _sample(eligible, n_valid, rng, "validation")
        # The objective is chosen on as many others (their own generator: training's sample stays the same), not on
        # the users the early stopping of both fits has looked at.
        rest = np.setdiff1d(eligible, valid_users)
        choice_users = np.sort(np.random.default_rng([seed, 1]).permutation(rest)[:min(n_valid, len(rest) // 2)])
        X_train, y_train, g_train, n_train = _periods(fitted, settings, events, bounds, everyone, users - n_valid,
                                                      rng, progress, by_user, stored)
    finally:
        fitted.close()                  # a child still fitting a period is stopped on an error
    if not (y_train > 0).any():
        raise InvalidInput("no training user has a relevant candidate; the log has too little structure to learn")
    # The serving index (the whole log's pairs) is fitted in a child meanwhile.
    with ahead.Ahead(lambda: periods.pairs(events, slice(None), settings), engine) as whole:
        if by_steps:
            X_eval, y_eval, g_eval = _step_examples(judge, events, by_user, valid_steps, valid_users, settings, rng,
                                                    stored)
        else:
            X_eval, y_eval, g_eval = _examples(judge, valid_users, settings, rng)
        names = list(judge.items.layout.names)
        fits = objective.losses(settings, len(choice_users))
        if settings.train_loss == "auto" and len(fits) == 1:
            progress(f"{len(choice_users)} validation users are too few to choose the objective on: {fits[0]}")
        progress(f"training CatBoost {' and '.join(fits)} on {len(y_train)} rows x {X_train.shape[1]} features, at "
                 f"most {iterations} trees" + (f", stopping early on {len(y_eval)} validation rows"
                                               if settings.train_early_stopping > 0 else ", no early stopping"))
        models = {loss: objective.fit(loss, (X_train, y_train, g_train), (X_eval, y_eval, g_eval), names, settings,
                                      iterations=iterations, depth=depth, seed=seed, ignore=ignore)
                  for loss in fits}
        del X_train, X_eval
        loss, choice = fits[0], {}
        if len(models) > 1:
            progress(f"choosing the objective on the validation lists of {len(choice_users)} users")
            loss, choice = objective.choose(models, _whole_lists(judge, events, by_user, valid_steps, choice_users,
                                                                 settings, rng, stored), seed=seed)
            progress(f"kept {loss}: NDCG@10 of the validation lists " +
                     ", ".join(f"{name} {v:.4f}" for name, v in choice.items()))
        model = models[loss]
        cascade, staged = None, {}
        if settings.cascade_keep > 0:
            progress(f"fitting the first stage: the model's {first_stage.COLUMNS} most important columns, its best "
                     f"{settings.cascade_keep} candidates per list for the full model")
            lists = _whole_lists(judge, events, by_user, valid_steps, eligible, settings, rng, stored)
            cascade, staged = first_stage.fit(model, lists, names, settings.cascade_keep, seed)
            progress(f"the first stage keeps {staged['cascade_top10_kept']:.2%} of the full model's top 10 in its "
                     f"best {settings.cascade_keep} ({staged['cascade_lists']} held-out lists)")
        all_pairs = whole.result()
    # ``data_clock``: the newest event the model saw; ``trees``: the count early stopping chose.
    metrics = dict(loss=loss, data_clock=float(ev_ts[-1]), train_users=n_train, train_rows=int(len(y_train)),
                   iterations=iterations, trees=int(model.tree_count_), depth=depth, cut=cut, valid_cut=valid_cut,
                   events=int(len(ev_user)), **{f"choice_ndcg10_{name}": v for name, v in choice.items()},
                   **({"shown_stored_steps": stored.steps_shown} if stored is not None else {}),
                   **staged)
    return Fitted(model=model, pairs=all_pairs, metrics=metrics,
                       stopping_users=np.union1d(valid_users, choice_users) if choice else valid_users,
                       validation=judge, cascade=cascade)


def _periods(fitted: Iterator[tuple[Period, replayed.Steps | None]], settings: Settings, events: EventLog,
             bounds: list[float], everyone: np.ndarray, n: int, rng: np.random.Generator,
             progress: Callable[[str], None], by_user: replayed.ByUser | None = None,
             stored: derived.StoredPages | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Training examples of every training period (``fitted``, with their steps given ``by_user``): period ``p``
    knows the log up to ``bounds[p]`` (its own item table and co-visitation) and is labelled by all events after it
    up to the validation cut ``bounds[-1]``; up to ``n / periods`` of its eligible users each. Group ids are
    distinct per (user, period).
    Returns the rows, grades, group ids and the number of (user, period) groups sampled."""
    n_periods = len(bounds) - 1
    Xs, ys, gs, sampled = [], [], [], 0
    for p, (learn, found) in enumerate(fitted):
        eligible = found.users() if found is not None else learn.eligible()
        if len(eligible) < 5 and p < n_periods - 1:
            continue            # an early period with too few users to learn from: the later ones still count
        train_users = _sample(eligible, -(-n // n_periods), rng, "training")
        progress(f"building features for {len(train_users)} training users at {bounds[p]:.0f}")
        if found is not None:
            X, y, g = _step_examples(learn, events, by_user, found, train_users, settings, rng, stored)
        else:
            X, y, g = _examples(learn, train_users, settings, rng)
            g = np.searchsorted(everyone, g)
        Xs.append(X), ys.append(y), gs.append(g * n_periods + p)
        sampled += len(train_users)
        del learn
    return np.concatenate(Xs), np.concatenate(ys), np.concatenate(gs), sampled


def _step_examples(at: Period, events: EventLog, by_user: replayed.ByUser, found: replayed.Steps,
                   user_ids: np.ndarray, settings: Settings, rng: np.random.Generator,
                   stored: derived.StoredPages | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Feature rows, grades and group ids (one group per step) of ``user_ids``' replayed steps after ``at.cut``:
    each step ranked as a worker would before it (``_step_batches``) and labelled by its new items, with
    ``train_negatives // 3`` random negatives per step that has a positive candidate. What the replay protocol
    judges, so the model learns that question."""
    negatives = max(settings.train_negatives // 3, 1)
    Xs, ys, gs = [], [], []
    for start, part, hist, cand, live, rel, shown in _step_batches(at, events, by_user, found, user_ids, settings,
                                                                   stored):
        owner = cand.owner
        keep = (rel > 0) | group_smallest(owner, cand.offsets, rng.random(len(rel)), negatives)
        has_pos = np.bincount(owner[rel > 0], minlength=len(part)) > 0
        keep &= has_pos[owner]
        # Features of the sampled examples only (~1 % of the candidates), the rows the whole set would give them.
        Xs.append(features.build(at.items, hist, cand.take(keep), part.feed_clock, live, shown))
        ys.append(rel[keep]), gs.append(start + owner[keep])
    if not Xs:
        return (np.empty((0, len(at.items.layout)), dtype=np.float32), np.empty(0), np.empty(0, dtype=np.int64))
    return np.concatenate(Xs), np.concatenate(ys), np.concatenate(gs)


def _step_batches(at: Period, events: EventLog, by_user: replayed.ByUser, found: replayed.Steps,
                  user_ids: np.ndarray, settings: Settings, stored: derived.StoredPages | None = None
                  ) -> Iterator[tuple]:
    """``user_ids``' replayed steps after ``at.cut`` in batches, each step's candidates as a worker computes them
    before it (history up to it, popularity at its feed clock; the item table and source index of the cut) with
    their grades, and what each step was shown before it: ``(start, steps, histories, candidates, live popularity,
    grades, shown)``, candidates owned by step. With the "shown" columns, the pages before each step are those
    the product's stored pages where they cover the step (``stored``), else those ``derived.stand_in_pages`` ranks
    at the user's earlier steps (None without the columns)."""
    mine = found.take(np.flatnonzero(np.isin(found.user, user_ids)))
    act = Activity(at.items, events.ts, events.item, events.type)
    lengths = candidates.recent_lengths(settings)
    span = len(at.items) + 1
    shown_on = at.items.layout.has("shown")
    pages = derived.DerivedPages()
    daily = stored.daily(mine.feed_clock, at.items.rows) if shown_on and stored is not None else None
    for start in range(0, len(mine), 200):
        index = np.arange(start, min(start + 200, len(mine)))
        part = mine.take(index)
        hist = by_user.histories(part, at.items, settings)
        live = act.live(part.feed_clock, lengths, part.feed_known)
        cand = candidates.for_batch(at.items, at.index, hist, settings, live)
        rel = arrays.lookup(part.owner * span + part.rows, part.rel, cand.owner * span + cand.rows)
        shown = None
        if shown_on:
            # Steps are in log order: a user's earlier steps are in this batch or an earlier one.
            pages.add(part.user, index, part.clock, derived.stand_in_pages(cand, at.index))
            shown = derived.training_shown(pages, stored, part.user, index, part.feed_clock, at.items.rows, span,
                                           daily)
        yield start, part, hist, cand, live, rel, shown


def _whole_lists(at: Period, events: EventLog, by_user: replayed.ByUser | None, found: replayed.Steps | None,
                 user_ids: np.ndarray, settings: Settings, rng: np.random.Generator,
                 stored: derived.StoredPages | None = None) -> Iterator[tuple]:
    """What ``objective.choose`` ranks: whole candidate lists of up to ``objective.CHOICE_LISTS`` validation steps
    (of a seeded sample of ``user_ids``) or, labelled by period, of as many users at the cut; batches of (feature
    rows, grades, list offsets, each list's user)."""
    user_ids = rng.permutation(user_ids)
    if found is None:
        for start in range(0, min(len(user_ids), objective.CHOICE_LISTS), 200):
            hist, cand, rel = at.candidates(np.sort(user_ids[start:start + 200]), settings)
            yield features.build(at.items, hist, cand, now=at.cut), rel, cand.offsets, hist.user_ids
        return
    users, counts = np.unique(found.user, return_counts=True)
    n_steps = arrays.lookup(users, counts, user_ids)
    kept = user_ids[np.cumsum(n_steps) <= objective.CHOICE_LISTS]
    for _, part, hist, cand, live, rel, shown in _step_batches(at, events, by_user, found, kept, settings, stored):
        yield features.build(at.items, hist, cand, part.feed_clock, live, shown), rel, cand.offsets, part.user


def _sample(eligible: np.ndarray, n: int, rng: np.random.Generator, what: str) -> np.ndarray:
    if len(eligible) < 5:
        raise InvalidInput(f"too few users with history on both sides of the {what} cut to train "
                           f"({len(eligible)}); collect a longer log")
    return np.sort(rng.permutation(eligible)[:max(n, 5)])


def _examples(at: Period, user_ids: np.ndarray, settings: Settings,
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Feature rows, grades and group ids (user ids) of ``user_ids``' candidates at ``at``: all positives and
    ``train_negatives`` random negatives per user with a positive, which keeps the example set small. Random, not
    hard: negatives picked from the top of a cheap score (co-visitation, recent popularity) bias the sample against
    exactly the signals the model needs to rank the full candidate set (on MovieLens they cut the ranker's
    NDCG@10 by 15-55 %), and the model ranks every candidate in serving, not only the hard ones."""
    Xs, ys, gs = [], [], []
    for start in range(0, len(user_ids), 200):
        hist, cand, rel = at.candidates(user_ids[start:start + 200], settings)
        owner = cand.owner
        noise = rng.random(len(rel))
        keep = (rel > 0) | group_smallest(owner, cand.offsets, noise, settings.train_negatives)
        has_pos = np.bincount(owner[rel > 0], minlength=len(hist)) > 0
        keep &= has_pos[owner]
        Xs.append(features.build(at.items, hist, cand.take(keep), now=at.cut))
        ys.append(rel[keep]), gs.append(hist.user_ids[owner[keep]])
    return np.concatenate(Xs), np.concatenate(ys), np.concatenate(gs)


def group_smallest(owner: np.ndarray, offsets: np.ndarray, key: np.ndarray, k: int) -> np.ndarray:
    """Whether each row's ``key`` is among the ``k`` smallest of its group (all of a group of at most ``k``); rows
    are grouped by ``owner`` (ascending, contiguous, group ``g`` at ``offsets[g]:offsets[g+1]``); keys distinct
    within a group (random draws), or ties at the k-th smallest are all in.

    The groups are laid out as the rows of one matrix padded with +inf, and one partition along them finds each
    group's k-th smallest key: linear, where ranking every row (a lexsort of the batch) was a fifth of training."""
    sizes = np.diff(offsets)
    if k < 1 or len(key) == 0:
        return np.zeros(len(key), dtype=bool)
    width = int(sizes.max())
    if k >= width:
        return np.ones(len(key), dtype=bool)
    padded = arrays.padded_groups(key, owner, offsets[:-1], width, np.inf)
    return key <= np.partition(padded, k - 1, axis=1)[:, k - 1][owner]
