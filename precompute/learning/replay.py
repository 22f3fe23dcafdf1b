"""The replay protocol: every method judged on the feed it would serve before each of a user's first steps after the
cut (``steps.py``), with the user's history as of the step and everything fitted frozen at the cut. What the
product does: the feed is recomputed on each event, and read before the next.

Methods, each ranking every step from the same information:

- ``popular`` (all time) and ``recent_<w>`` for w in 1 hour, 1, 3, 7, 14, 30 days: type-weighted interactions at
  the step's clock (live); the best window is reported with the others and is optimistic (chosen on the truth);
- ``covisit``: co-visitation neighbours of the user's most recent items (live history), as candidate generation
  gathers them;
- ``item_knn``: cosine item-kNN over the binary pre-cut user × item matrix, the user's vector from their live history;
- ``latent``: the latent model fitted at the cut (``ranking/latent.py``), the user's vector from their live history;
- ``ranker``: the pipeline's own candidates, features and model at the step's feed clock (when a worker computed the
  feed read before the step: the user's previous event after the cut or its latest refresh since), with the
  serving seen window (what a worker stores). The live baselines rank at the step's own clock, fresher than a
  precomputed feed can be; they leave out every item of the user's history (a stronger list on "new to the user"
  truth than the ranker's).

Metrics per step: NDCG@k (gain 2^grade − 1) and HitRate@k over the step's truth; means over steps; the ratio's 95 %
interval by resampling users (each with all their steps).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from ..data.history import ranges
from ..data.log import EventLog
from ..progress import Count
from ..ranking import candidates, features, scoring, sources
from ..ranking.arrays import top_desc_grouped
from ..ranking.item_table import ItemTable
from ..ranking.popularity import BatchPopularity
from ..ranking.shown import Shown
from ..ranking.source_index import SourceIndex
from ..settings import Settings
from ..units import DAY, HOUR
from ..feeds.diversity import DEPTH, Diversity
from . import bootstrap, diversity_cost, history_baselines
from .activity import Activity
from .derived import DerivedPages
from .steps import ByUser, Steps, find

#: The live popularity baselines' windows; "popular" is all time.
BASELINE_WINDOWS = (("1h", HOUR), ("1d", DAY), ("3d", 3 * DAY), ("7d", 7 * DAY), ("14d", 14 * DAY),
                    ("30d", 30 * DAY))
#: Steps ranked together: the dense methods hold a (batch, items) float32 matrix.
BATCH = 128
#: Source bits reported in the candidate-recall table, in its order (``ranking/sources.py``).
SOURCES = {name: sources.bit(name) for name in sources.REPORT_ORDER}


@dataclasses.dataclass
class ReplayResult:
    cut: float
    k: int
    steps: int                              # judged steps
    users: int                              # judged users
    methods: dict[str, dict[str, float]]    # ndcg, hit_rate (and the ranker's candidate_recall) by method
    sources: dict[str, float]               # share of truth items each candidate source holds
    best_baseline: str
    ratio: float | None
    ratio_interval: tuple[float, float] | None
    seconds: float
    #: The diversity rule's cost on the ranker's pages, by setting (``diversity_cost.py``); None when not measured
    diversity: dict | None = None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def baseline_names() -> tuple[str, ...]:
    return ("popular", *(f"recent_{w}" for w, _ in BASELINE_WINDOWS), "covisit", "item_knn", "latent")


def judge_replay(items: ItemTable, index: SourceIndex, events: EventLog, cut: float, model, settings: Settings, *,
                 n_steps: int = 10, end: float = float("inf"), users: int | None = None,
                 exclude: np.ndarray | None = None, k: int = 10, seed: int = 0,
                 progress: Callable[[str], None] = lambda msg: None, only: np.ndarray | None = None,
                 detail: dict | None = None, diversity: tuple[Diversity, ...] = ()) -> ReplayResult:
    """Replay the first ``n_steps`` steps after ``cut`` of every user with pre-cut history (a seeded sample of
    ``users`` of them, or ``only`` these; never ``exclude``), ranking each with every method; ``items`` and ``index``
    as of the cut. ``detail``, when given, receives the judged ``steps``, each method's per-step ``ndcg`` and its
    ``pages`` (each step's top k). ``diversity``: the rule's settings whose cost on the ranker's pages is measured
    (each step's list reordered by ``feeds/diversity.spread``)."""
    t0 = time.perf_counter()
    ev_item, ev_type, ev_ts = events.item, events.type, events.ts
    steps = find(events, items, cut, end, n_steps, refresh=settings.feed_refresh, horizon=settings.feed_ttl)
    who = steps.users()
    if exclude is not None and len(exclude):
        who = np.setdiff1d(who, exclude)
    if users is not None and users < len(who):
        who = np.sort(np.random.default_rng(seed).choice(who, size=users, replace=False))
    if only is not None:
        who = np.intersect1d(who, only)
    steps = steps.take(np.flatnonzero(np.isin(steps.user, who)))
    progress(f"replaying {len(steps)} steps of {len(np.unique(steps.user))} users after the cut")
    names = (*baseline_names(), "ranker")
    ndcg = {m: np.zeros(len(steps)) for m in names}
    hit = {m: np.zeros(len(steps)) for m in names}
    pages: dict[str, list] = {m: [None] * len(steps) for m in names}     # each step's top k, for repeat_share
    held = np.zeros(len(steps.rows), dtype=np.int64)            # source bits of each truth entry's candidate
    in_cand = np.zeros(len(steps.rows), dtype=bool)
    by_user = ByUser(events)
    n_pre = int(np.searchsorted(ev_ts, cut, side="right"))
    act = Activity(items, ev_ts, ev_item, ev_type)
    feed_act = Activity(items, ev_ts, ev_item, ev_type)      # the ranker's: at each step's feed clock
    knn = history_baselines.Knn(items, events.head(n_pre))
    base_cols = {f"recent_{w}": col for col, (w, _) in enumerate(BASELINE_WINDOWS)}
    everything = float("inf")
    for a in range(0, len(steps), BATCH):
        part = steps.take(np.arange(a, min(a + BATCH, len(steps))))
        hist_all = by_user.histories(part, items, settings, seen_window=everything)
        hist = by_user.histories(part, items, settings)
        distinct, which = np.unique(part.clock, return_inverse=True)
        scores = {m: [] for m in ("popular", *base_cols)}
        for c in distinct.tolist():
            windowed, ever = act.at(c, BASELINE_WINDOWS)
            scores["popular"].append(ever)
            for m, col in base_cols.items():
                scores[m].append(windowed[:, col])
        which = which.ravel()
        dense = np.empty((len(part), len(items)), dtype=np.float32)
        for m, per_clock in scores.items():
            dense[:] = np.asarray(per_clock, dtype=np.float32)[which]
            _score_dense(m, dense, part, hist_all, items.active, k, a, ndcg, hit, pages)
        dense[:] = history_baselines.covisit_scores(hist, index, settings, len(items))
        _score_dense("covisit", dense, part, hist_all, items.active, k, a, ndcg, hit, pages)
        dense[:] = knn.scores(hist_all)
        _score_dense("item_knn", dense, part, hist_all, items.active, k, a, ndcg, hit, pages)
        dense[:] = history_baselines.latent_scores(hist_all, index)
        _score_dense("latent", dense, part, hist_all, items.active, k, a, ndcg, hit, pages)
        progress(Count(min(a + BATCH, len(steps)), len(steps), "baseline steps"))
    spread_ndcg = {diversity_cost.name(rule): np.zeros(len(steps)) for rule in diversity}
    spread_distinct = {key: np.zeros(len(steps)) for key in (*spread_ndcg, "off")}
    _replay_ranker(items, index, steps, by_user, feed_act, model, settings, k, ndcg, hit, pages, in_cand, held,
                   progress, diversity, spread_ndcg, spread_distinct)
    # Means over steps; the interval resamples users with their steps (sums per user).
    user_pos = np.unique(steps.user, return_inverse=True)[1].ravel()
    n_users = int(user_pos.max()) + 1 if len(user_pos) else 0
    if detail is not None:
        detail.update(steps=steps, ndcg=ndcg, pages=pages)
    summary = {m: dict(ndcg=float(ndcg[m].mean()) if len(steps) else 0.0,
                       hit_rate=float(hit[m].mean()) if len(steps) else 0.0) for m in names}
    for m in names:
        summary[m]["repeat_share"] = repeat_share(steps.user, pages[m])
    summary["ranker"]["candidate_recall"] = float(in_cand.mean()) if len(in_cand) else 0.0
    sources = {name: float(((held & bit) > 0).mean()) if len(held) else 0.0 for name, bit in SOURCES.items()}
    best = max(baseline_names(), key=lambda m: summary[m]["ndcg"])
    base = summary[best]["ndcg"]
    interval = None
    if n_users:
        per_user = {m: np.bincount(user_pos, weights=ndcg[m], minlength=n_users) for m in ("ranker", best)}
        interval = bootstrap.ratio_interval(per_user["ranker"], per_user[best], seed=seed)
    cost = None
    if diversity and n_users:
        per = lambda values: np.bincount(user_pos, weights=values, minlength=n_users)     # noqa: E731
        # Per user: sums over their steps (the interval resamples users); reported as means over steps.
        cost = diversity_cost.summarize(per(ndcg["ranker"]), {m: per(v) for m, v in spread_ndcg.items()},
                                        per(spread_distinct["off"]),
                                        {m: per(spread_distinct[m]) for m in spread_ndcg}, seed=seed)
        steps_per_user = len(steps) / n_users
        for m in cost.values():
            m["ndcg"] /= steps_per_user
            m["distinct"] /= steps_per_user
    return ReplayResult(cut=cut, k=k, steps=len(steps), users=n_users, methods=summary, sources=sources,
                        best_baseline=best, ratio=summary["ranker"]["ndcg"] / base if base > 0 else None,
                        ratio_interval=interval, seconds=time.perf_counter() - t0, diversity=cost)


def _replay_ranker(items: ItemTable, index: SourceIndex, steps: Steps, by_user: ByUser, feed_act: Activity, model,
                   settings: Settings, k: int, ndcg: dict, hit: dict, pages: dict, in_cand: np.ndarray,
                   held: np.ndarray, progress: Callable[[str], None], diversity: tuple[Diversity, ...] = (),
                   spread_ndcg: dict | None = None, spread_distinct: dict | None = None) -> None:
    """The ranker on every step, as a worker computes it for the step's history at its feed clock, and which truth
    entries its candidates held (``in_cand``, through which sources: ``held``). Steps are ranked round by round
    (every user's first step, then every user's second, ...), so that with the "shown" columns each step knows the
    pages the ranker itself served before the user's earlier steps (``derived.py``). With ``diversity``, each
    step's list is also reordered by each rule and judged into ``spread_ndcg`` and ``spread_distinct`` (the pages
    the "shown" columns know stay those of the rule off)."""
    cats = diversity_cost.counted_categories(items) if diversity else None
    depth = k + DEPTH - 1 if diversity else k
    unused_hits = {diversity_cost.name(rule): np.zeros(len(steps)) for rule in diversity}
    shown_on = items.layout.has("shown")
    derived = DerivedPages()
    lengths = candidates.recent_lengths(settings)
    span = len(items) + 1
    rounds = occurrence(steps.user)
    done = 0
    for r in range(int(rounds.max(initial=-1)) + 1):
        in_round = np.flatnonzero(rounds == r)
        for start in range(0, len(in_round), settings.rank_chunk_users):
            at = in_round[start:start + settings.rank_chunk_users]
            sub = steps.take(at)
            h = by_user.histories(sub, items, settings)
            live = feed_act.live(sub.feed_clock, lengths, sub.feed_known)
            shown = derived.shown(sub.user, at, span) if shown_on else None
            cand, top, offsets = rank(items, index, h, sub.feed_clock, live, model, settings, depth, shown)
            longer = [cand.rows[top[offsets[j]:offsets[j + 1]]] for j in range(len(sub))]
            lists_ = [rows[:k] for rows in longer]
            score_lists("ranker", lists_, sub, 0, k, ndcg, hit, pages, at=at)
            if diversity:
                spread_distinct["off"][at] = [diversity_cost.distinct(rows, cats, k) for rows in lists_]
                for rule in diversity:
                    key = diversity_cost.name(rule)
                    reordered = [diversity_cost.reorder(rows, cats, k, rule) for rows in longer]
                    score_lists(key, reordered, sub, 0, k, spread_ndcg, unused_hits, at=at)
                    spread_distinct[key][at] = [diversity_cost.distinct(rows, cats, k) for rows in reordered]
            derived.add(sub.user, at, sub.clock, lists_)
            # Which truth entries the candidates held, and through which sources.
            code = cand.owner * span + cand.rows
            t_code = sub.owner * span + sub.rows
            order = np.argsort(code)
            found_at = np.minimum(np.searchsorted(code[order], t_code), max(len(code) - 1, 0))
            found = (code[order][found_at] == t_code) if len(code) else np.zeros(len(t_code), dtype=bool)
            truth = ranges(steps.offsets[at], steps.offsets[at + 1])
            in_cand[truth] = found
            held[truth] = np.where(found, cand.flags[order][found_at] if len(code) else 0, 0)
            done += len(at)
            progress(Count(done, len(steps), "ranker steps"))


def occurrence(users: np.ndarray) -> np.ndarray:
    """Each entry's count of earlier entries of the same user: 0 for a user's first step, 1 for their second ..."""
    order = np.argsort(users, kind="stable")
    sorted_users = users[order]
    out = np.empty(len(users), dtype=np.int64)
    out[order] = np.arange(len(users)) - np.searchsorted(sorted_users, sorted_users, side="left")
    return out


def repeat_share(users: np.ndarray, pages: list) -> float:
    """The mean share of a step's page (its top k) that the same user's previous step's page held: how much of what
    a user is shown, coming back, they were shown last time. Steps are in log order, so a user's previous step is
    their last one before; a user's first step, and an empty page, count for nothing. 0 when no user has two."""
    last: dict[int, np.ndarray] = {}
    shares = []
    for user, page in zip(users.tolist(), pages):
        before = last.get(user)
        if before is not None and page is not None and len(page):
            shares.append(float(np.isin(page, before).mean()))
        if page is not None:
            last[user] = page
    return float(np.mean(shares)) if shares else 0.0


def rank(items: ItemTable, index: SourceIndex, hist, clocks: np.ndarray, live: BatchPopularity, model,
         settings: Settings, n: int, shown: Shown | None = None) -> tuple[candidates.Candidates, np.ndarray, np.ndarray]:
    """What a worker computes for these histories at these clocks (``Pipeline.build_feeds``): candidates, features,
    scores, and each row's top ``n`` (``top[offsets[j]:offsets[j+1]]`` indexes ``cand.rows``, best first).
    ``shown``: what each row was shown."""
    cand = candidates.for_batch(items, index, hist, settings, live)
    X = features.build(items, hist, cand, clocks, live, shown)
    scores = scoring.rank_scores(model, X, cand.offsets)
    top, offsets = top_desc_grouped(scores, cand.offsets, n)
    return cand, top, offsets


def _score_dense(name: str, scores: np.ndarray, part: Steps, hist_all, active: np.ndarray, k: int, a: int,
                 ndcg: dict, hit: dict, pages: dict) -> None:
    """Top ``k`` of each step's row of ``scores`` (positive, active, not in the user's history), judged."""
    scores[:, ~active] = -np.inf
    owner = np.repeat(np.arange(len(part)), np.diff(hist_all.seen_offsets))
    scores[owner, hist_all.seen_rows] = -np.inf
    kk = min(k, scores.shape[1])
    top = np.argpartition(-scores, kk - 1, axis=1)[:, :kk]
    val = np.take_along_axis(scores, top, axis=1)
    lists = []
    for j in range(len(part)):
        o = np.lexsort((top[j], -val[j]))
        o = o[val[j][o] > 0]
        lists.append(top[j][o])
    score_lists(name, lists, part, a, k, ndcg, hit, pages)


def score_lists(name: str, lists: list[np.ndarray], part: Steps, a: int, k: int, ndcg: dict, hit: dict,
                pages: dict | None = None, at: np.ndarray | None = None) -> None:
    """NDCG@k and HitRate@k of each step's list against its truth, stored at the steps' places ``a + j`` (or
    ``at[j]``), and the list's top ``k`` itself in ``pages``, when given."""
    disc = 1.0 / np.log2(np.arange(k) + 2)
    places = (a + np.arange(len(lists))) if at is None else at
    for j, rows in enumerate(lists):
        t_rows = part.rows[part.offsets[j]:part.offsets[j + 1]]
        t_rel = part.rel[part.offsets[j]:part.offsets[j + 1]]
        rows = rows[:k]
        place = int(places[j])
        if pages is not None:
            pages[name][place] = rows
        at = np.minimum(np.searchsorted(t_rows, rows), len(t_rows) - 1)
        rel = np.where(t_rows[at] == rows, t_rel[at], 0.0)
        ideal = np.sort(t_rel)[::-1][:k]
        idcg = float(((2.0 ** ideal - 1) * disc[:len(ideal)]).sum())
        ndcg[name][place] = float(((2.0 ** rel - 1) * disc[:len(rel)]).sum()) / idcg if idcg > 0 else 0.0
        hit[name][place] = float((rel > 0).any())
