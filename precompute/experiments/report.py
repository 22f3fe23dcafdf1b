"""An experiment's report: per arm, its exposed users, pages, impressions and attributed events, each arm's ratio to
the control on one metric with a bootstrap interval, a verdict and a sample-ratio check.

- **Exposed users**: users served at least one page of the arm since the experiment began (``exposures``).
- **Per event type**: the events attributed to the arm's pages (``collect.py``), per exposed user and per impression
  (CTR), with a 95% percentile bootstrap interval of the per-user mean over the arm's users.
- **Ratio**: an arm's metric (``--metric``, an event type: attributed events of that type per exposed user) over
  the control's (the first arm). The arms have different users, so the bootstrap is not paired: each resample draws
  each arm's users from that arm, independently.
- **Verdict**: an arm whose ratio's interval lies above 1 wins (the highest such ratio); the control wins where every
  other arm's interval lies below 1; otherwise null. One interval per arm, no correction for many arms or for looking
  every day: docs/experiments.md says what it does not promise.
- **Sample ratio**: exposed users per arm against the arms' shares, a chi-square test; ``p < 0.001`` means the split
  is not what it should be (an arm whose pages fail, a bug in assignment): no ratio should be trusted, and the
  verdict is null.

A per-user count takes few distinct values, so a resample is drawn as multinomial counts of those values: exact, and
as fast for a million users as for a hundred.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.stats import chisquare
from sqlalchemy import Engine, func, select

from ..data.tables import Attribution, Exposure
from .experiment import Experiment

RESAMPLES = 2000
LEVEL = 0.95
#: The sample-ratio check flags a split this unlikely under the arms' shares.
SAMPLE_RATIO_ALPHA = 0.001


def default_metric(event_types: tuple[tuple[str, float], ...]) -> str:
    """The metric a report is on when none is asked: ``click`` when it is a declared event type, else the type of
    greatest weight (``PREFEED_EVENT_TYPES``)."""
    names = [n for n, _ in event_types]
    return "click" if "click" in names else max(event_types, key=lambda t: t[1])[0]


@dataclasses.dataclass
class ArmUsers:
    """One arm's exposed users and what each was served and did: arrays aligned by user."""

    user_ids: np.ndarray
    pages: np.ndarray
    impressions: np.ndarray
    events: dict[int, np.ndarray]       # event type code -> attributed events per user


def read(engine: Engine, experiment: Experiment, type_codes: list[int]) -> list[ArmUsers]:
    """Every arm's exposed users with their pages, impressions and attributed events per type."""
    with engine.connect() as conn:
        exposed = conn.execute(select(Exposure.arm, Exposure.user_id, Exposure.pages, Exposure.impressions)
                               .where(Exposure.experiment == experiment.id)
                               .order_by(Exposure.arm, Exposure.user_id)).all()
        counted = conn.execute(select(Attribution.arm, Attribution.user_id, Attribution.type, func.count())
                               .where(Attribution.experiment == experiment.id)
                               .group_by(Attribution.arm, Attribution.user_id, Attribution.type)).all()
    arm = np.array([r.arm for r in exposed], dtype=np.int64)
    user = np.array([r.user_id for r in exposed], dtype=np.int64)
    pages = np.array([r.pages for r in exposed], dtype=np.int64)
    impressions = np.array([r.impressions for r in exposed], dtype=np.int64)
    c_arm, c_user, c_type, c_n = (np.array(col, dtype=np.int64).reshape(-1) for col in zip(*counted)) \
        if counted else (np.zeros(0, dtype=np.int64),) * 4
    arms = []
    for index in range(len(experiment.arms)):
        mine = arm == index                             # rows come sorted by (arm, user)
        users = user[mine]
        events = {}
        for code in type_codes:
            take = (c_arm == index) & (c_type == code)
            at = np.searchsorted(users, c_user[take])
            ok = at < len(users)
            ok[ok] = users[at[ok]] == c_user[take][ok]
            events[code] = np.bincount(at[ok], weights=c_n[take][ok], minlength=len(users)).astype(np.int64)
        arms.append(ArmUsers(users, pages[mine], impressions[mine], events))
    return arms


def resampled_means(values: np.ndarray, rng: np.random.Generator, resamples: int = RESAMPLES) -> np.ndarray:
    """``resamples`` bootstrap means of ``values`` (users drawn with replacement, as many as there are)."""
    n = len(values)
    if n == 0:
        return np.full(resamples, np.nan)
    distinct, counts = np.unique(values, return_counts=True)
    draws = rng.multinomial(n, counts / n, size=resamples)
    return draws @ distinct.astype(np.float64) / n


def interval(samples: np.ndarray) -> list[float] | None:
    if len(samples) == 0 or not np.all(np.isfinite(samples)):
        return None
    lo, hi = np.quantile(samples, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return [float(lo), float(hi)]


@dataclasses.dataclass
class Judgement:
    ratios: list[float | None]                      # each arm's metric over the control's (the control: 1)
    intervals: list[list[float] | None]             # their bootstrap intervals (the control: None)
    verdict: int | None                             # index of the winning arm, or None
    sample_ratio_p: float | None


def judge(per_user: list[np.ndarray], shares: list[float], seed: int = 0) -> Judgement:
    """The ratios to the control (``per_user[0]``), their intervals, the verdict and the sample-ratio check, from
    each arm's per-user metric values (see the module doc)."""
    rng = np.random.default_rng(seed)
    control = per_user[0]
    base = float(control.mean()) if len(control) else 0.0
    base_draws = resampled_means(control, rng)
    ratios, intervals = [1.0 if base > 0 else None], [None]
    for values in per_user[1:]:
        draws = resampled_means(values, rng)
        if base <= 0 or not len(values) or np.any(base_draws <= 0):
            ratios.append(None if base <= 0 or not len(values) else float(values.mean()) / base)
            intervals.append(None)
            continue
        ratios.append(float(values.mean()) / base)
        intervals.append(interval(draws / base_draws))
    above = [k for k in range(1, len(per_user)) if intervals[k] is not None and intervals[k][0] > 1]
    below = [k for k in range(1, len(per_user)) if intervals[k] is not None and intervals[k][1] < 1]
    if above:
        verdict = max(above, key=lambda k: ratios[k])
    elif len(per_user) > 1 and len(below) == len(per_user) - 1:
        verdict = 0
    else:
        verdict = None
    counts = np.array([len(v) for v in per_user], dtype=np.float64)
    p = None
    if counts.sum() > 0:
        expected = np.asarray(shares, dtype=np.float64) * counts.sum()
        p = float(chisquare(counts, expected).pvalue)
    return Judgement(ratios, intervals, verdict, p)


def build(engine: Engine, experiment: Experiment, type_names: tuple[str, ...], metric: str,
          seed: int = 0) -> dict:
    """The report of ``experiment`` as a JSON-able dict (``experiments report --json``). ``metric``: the event type
    whose attributed events per exposed user the ratios and the verdict are on."""
    codes = list(range(1, len(type_names) + 1))
    arms = read(engine, experiment, codes)
    metric_code = type_names.index(metric) + 1
    verdict = judge([a.events[metric_code] for a in arms], [a.share for a in experiment.arms], seed)
    rng = np.random.default_rng(seed + 1)
    out = []
    for k, (arm, got) in enumerate(zip(experiment.arms, arms)):
        users, impressions = len(got.user_ids), int(got.impressions.sum())
        events = {}
        for code, name in zip(codes, type_names):
            n = int(got.events[code].sum())
            events[name] = {"attributed": n, "per_user": n / users if users else None,
                            "per_impression": n / impressions if impressions else None,
                            "interval": interval(resampled_means(got.events[code], rng)) if users else None}
        out.append({"name": arm.name, "spec": arm.spec, "share": arm.share, "users": users,
                    "pages": int(got.pages.sum()), "impressions": impressions, "events": events,
                    "ratio": verdict.ratios[k], "ratio_interval": verdict.intervals[k]})
    p = verdict.sample_ratio_p
    flagged = p is not None and p < SAMPLE_RATIO_ALPHA
    return {"name": experiment.name, "status": experiment.status, "metric": metric,
            "metric_means": f"attributed {metric} events per exposed user", "arms": out,
            # a split that is not what the shares say makes every ratio suspect: no verdict then
            "verdict": None if verdict.verdict is None or flagged else experiment.arms[verdict.verdict].name,
            "sample_ratio_p": p, "sample_ratio_flagged": flagged}
