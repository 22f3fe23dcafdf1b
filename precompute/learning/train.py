"""``train``: what ``manage.py train`` runs. The ranker is fitted on the whole log (``fit.fit_ranker``), then
judged against every simple method at training's own validation cut under the protocols ``evaluate`` uses
(``validate``): the numbers ``train`` and ``models list`` show mean what ``evaluate`` shows, and a bundle that does
not beat the best simple method there is not promoted (``cli/models.py``)."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Engine

from ..data.log import EventLog, load_events
from ..errors import InvalidInput
from ..progress import indented
from ..settings import Settings
from . import replay
from .evaluate import judge_static, scene
from .fit import Fitted, fit_ranker


def train(engine: Engine, settings: Settings, *, iterations: int | None = None, depth: int | None = None,
          users: int | None = None, seed: int = 0,
          progress: Callable[[str], None] = lambda msg: None, ignore: tuple[str, ...] = ()) -> Fitted:
    """``manage.py train``'s model and its promotion check: the ranker trained on the whole log (up to
    ``settings.as_of``), then judged with ``validate``; the check's numbers join the training metrics. ``ignore``:
    columns the model learns nothing from (they stay in its layout)."""
    events = load_events(engine, settings.as_of or float("inf"))
    result = fit_ranker(engine, settings, iterations=iterations, depth=depth, users=users, seed=seed,
                        progress=progress, events=events, ignore=ignore)
    progress("judging the model against the baselines at the validation cut")
    result.metrics.update(validate(engine, settings, events, result, users=users or settings.train_users,
                                   seed=seed, progress=indented(progress)))
    return result


def validate(engine: Engine, settings: Settings, events: EventLog, result: Fitted, *,
             users: int | None, seed: int = 0, progress: Callable[[str], None] = lambda msg: None) -> dict:
    """The promotion check of a freshly trained model: the evaluation protocol at training's validation cut
    (``valid_cut``: the model learned from the log before it), every baseline on the same users and truth. Users
    whose validation examples chose the tree count are not judged (their period is no longer unseen), unless
    nobody else could be. Returns the training metrics' keys that ``models list`` and promotion read: ``ndcg10``,
    ``baseline``, ``baseline_ndcg10``, ``ratio_interval`` (``judge_static``'s, or None), ``baselines``, ``candidate_recall``,
    ``valid_users``: under the replay protocol when training labels replayed steps (``PREFEED_TRAIN_LABELS``), with
    the static protocol's beside them (``static_*``), else the static protocol's."""
    cut = result.metrics["valid_cut"]
    try:
        at = scene(engine, settings, events, cut, users=users, seed=seed, exclude=result.stopping_users,
                   known=result.validation, progress=progress)
    except InvalidInput:                 # a log so small that every judged user also chose the tree count
        at = scene(engine, settings, events, cut, users=users, seed=seed, known=result.validation,
                   progress=progress)
    summary, best, interval = judge_static(at, settings, result.ranker, k=10, seed=seed, progress=progress)
    static = dict(static_ndcg10=summary["ranker"]["ndcg"], static_baseline=best,
                  static_baseline_ndcg10=summary[best]["ndcg"],
                  static_ratio_interval=None if interval is None else list(interval))
    if settings.train_labels != "steps":
        return dict(ndcg10=summary["ranker"]["ndcg"], baseline=best, baseline_ndcg10=summary[best]["ndcg"],
                    ratio_interval=None if interval is None else list(interval), protocol="static",
                    baselines={name: m["ndcg"] for name, m in summary.items() if name != "ranker"},
                    candidate_recall=summary["ranker"]["candidate_recall"], valid_users=len(at.split.users),
                    **static)
    # The model learned to rank steps as they are lived: promotion asks whether it beats every baseline there.
    rp = replay.judge_replay(at.items, at.index, events, cut, result.ranker, settings, n_steps=settings.replay_steps,
                             users=users, exclude=result.stopping_users, seed=seed, progress=progress)
    if rp.steps == 0:
        rp = replay.judge_replay(at.items, at.index, events, cut, result.ranker, settings,
                                 n_steps=settings.replay_steps, users=users, seed=seed, progress=progress)
    best = rp.best_baseline
    return dict(ndcg10=rp.methods["ranker"]["ndcg"], baseline=best, baseline_ndcg10=rp.methods[best]["ndcg"],
                ratio_interval=None if rp.ratio_interval is None else list(rp.ratio_interval), protocol="replay",
                baselines={name: m["ndcg"] for name, m in rp.methods.items() if name != "ranker"},
                candidate_recall=rp.methods["ranker"]["candidate_recall"], valid_users=rp.users,
                valid_steps=rp.steps, **static)
