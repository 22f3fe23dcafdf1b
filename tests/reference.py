"""The pipeline's candidate and feature stages stated the slow, obvious way: Python loops, sets and dicts over one
user's history, the item table and the settings, with none of the scratch arrays, sorted runs or fancy indexing
of ``precompute/ranking``. Tests compare the vectorized stages against these, user by user."""

from __future__ import annotations

import math

import numpy as np

from precompute.ranking import candidates, features, latent, popularity as live
from precompute.units import DAY

NAN = float("nan")


def categories(items, r) -> list[int]:
    """The (dense) categories of item row ``r``, from the table's CSR."""
    return [int(c) for c in items.cat_of[items.cat_indptr[r]:items.cat_indptr[r + 1]]]


def weight_of(items, t) -> float:
    """The declared weight of type code ``t``; 0 past the declaration."""
    return float(items.type_weights[t]) if 0 <= t < len(items.type_weights) else 0.0


def _neighbours(lists, r: int) -> list[tuple[int, float]]:
    """Row ``r``'s neighbours (rows) and weights as its lists hold them, strongest first; a neighbour the item table
    does not know (a code without a row) left out."""
    out = []
    for j in range(int(lists.start[r]), int(lists.end[r])):
        n = int(lists.nbr[j]) if lists.row_of_code is None else int(lists.row_of_code[lists.nbr[j]])
        if n >= 0:
            out.append((n, float(lists.weight[j])))
    return out


def candidates_of(settings, items, index, rows, types, seen: set[int]) -> dict[int, tuple[float, int, int]]:
    """``{item row: (co-visitation score, count, score from the newest item, source bits, kNN score, latent
    score)}`` of one user,
    uncapped; ``seen``:
    the rows of the items they interacted with inside the seen window, which are left out."""
    known = [int(r) for r in rows if r >= 0]
    recent = []
    for r in reversed(known):
        if r not in recent:
            recent.append(r)
    score, count, last, flags = {}, {}, {}, {}
    cov, knn = index.covisit, index.knn
    for i, r in enumerate(recent[: settings.covisit_recent_items]):
        for n, w in _neighbours(cov, r):
            n = int(n)
            score[n] = score.get(n, 0.0) + w * settings.recency_decay ** i
            count[n] = count.get(n, 0) + 1
            if i == 0:
                last[n] = last.get(n, 0.0) + w
            flags[n] = flags.get(n, 0) | candidates.FROM_COVISIT
    # item-kNN: summed similarity to every distinct item of the history (newest first); the strongest active, unseen,
    # not co-visited ones are candidates of their own, ties by row
    near = {}
    for r in recent:
        for n, w in _neighbours(knn, r):
            near[int(n)] = near.get(int(n), 0.0) + w
    close = sorted((n for n in near if items.active[n] and n not in seen and n not in score),
                   key=lambda n: (-near[n], n))[: settings.knn_candidates]
    for n in close:
        flags[n] = flags.get(n, 0) | candidates.FROM_KNN
    # the latent model: the history's distinct items' factors summed, dotted with each item's; the best active,
    # unseen ones with a positive score are candidates, ties by row
    factor = {}
    if index.latent is not None:
        v = index.latent.factors_of(np.arange(len(items)))
        vector = [sum(float(v[r, d]) for r in recent) for d in range(v.shape[1])]
        factor = {n: sum(a * float(b) for a, b in zip(vector, v[n])) for n in range(len(items))}
        # (compared at latent.DECIMALS: items with the same users tie, and go by row)
        near9 = {n: round(v, latent.DECIMALS) for n, v in factor.items()}
        best = sorted((n for n in factor if items.active[n] and n not in seen and near9[n] > 0),
                      key=lambda n: (-near9[n], n))[: settings.latent_candidates]
        for n in best:
            flags[n] = flags.get(n, 0) | candidates.FROM_LATENT
    # the items with the most type-weighted interactions in the last hour and day, positive only, ties by row
    names = [w for w, _ in live.WINDOWS]
    for (window, bit), k in zip(live.SOURCES, candidates.recent_lengths(settings)):
        col = names.index(window)
        hot = sorted((r for r in range(len(items)) if items.active[r] and items.windowed[r, col] > 0),
                     key=lambda r: (-items.windowed[r, col], r))[:k]
        for n in hot:
            flags[n] = flags.get(n, 0) | bit
    for c in top_categories(settings, items, rows, types):
        for n in items.category_popular[c]:
            flags[int(n)] = flags.get(int(n), 0) | candidates.FROM_CATEGORY
    for n in items.global_popular:
        flags[int(n)] = flags.get(int(n), 0) | candidates.FROM_GLOBAL
    return {n: (score.get(n, 0.0), count.get(n, 0), last.get(n, 0.0), f, near.get(n, 0.0), factor.get(n, 0.0))
            for n, f in flags.items() if n not in seen and items.active[n]}


def category_weights(items, rows, types) -> dict[int, float]:
    """A user's events per category, each adding its type's weight to every category of its item."""
    weight: dict[int, float] = {}
    for r, t in zip(rows, types):
        if r >= 0:
            for c in categories(items, r):
                weight[c] = weight.get(c, 0.0) + weight_of(items, int(t))
    return weight


def top_categories(settings, items, rows, types) -> list[int]:
    weight = category_weights(items, rows, types)
    return sorted((c for c in weight if weight[c] > 0), key=lambda c: (-weight[c], c))[: settings.user_top_categories]


def popularity(items) -> list[float]:
    """Each row's interactions weighted by their type, plus a tenth of its weighted interactions of the last week."""
    return [sum(weight_of(items, t) * items.counts[r, t] for t in range(1, items.counts.shape[1]))
            + 0.1 * items.windowed[r, 3] for r in range(len(items))]


def rate_prior(code: int) -> float:
    """Smoothing of the k-th type after the first (code k + 1): 1/k."""
    return 1.0 / (code - 1)


def item_features(items, now: float) -> list[dict[str, float]]:
    """The item groups ("item_static", "item_clock") of every item row, from the table's raw columns."""
    n = len(items)
    pop = popularity(items)
    ranked = sorted(range(n), key=lambda r: (-pop[r], items.ids[r]))
    pop_rank = {r: k for k, r in enumerate(ranked)}
    cat_rank, members = {}, {}
    for r in ranked:
        for c in categories(items, r):
            cat_rank[(r, c)] = len(members.setdefault(c, []))
            members[c].append(r)
    total = sum(pop)
    # popularity at the table's clock: type-weighted interactions per window (1h 1d 3d 7d 30d) and of all time,
    # as log counts and log shares of the window's total; last week's share against all time's
    windows = [w for w, _ in live.WINDOWS]
    win = [[float(items.windowed[r, k]) for k in range(len(windows))] for r in range(n)]
    win_total = [sum(win[r][k] for r in range(n)) for k in range(len(windows))]
    ever = [sum(weight_of(items, t) * items.counts[r, t] for t in range(1, items.counts.shape[1])) for r in range(n)]
    ever_total = sum(ever)

    def mean_log_price(c):
        prices = [math.log1p(items.price[m]) for m in members[c] if not math.isnan(items.price[m])]
        return sum(prices) / len(prices) if prices else NAN

    types = items.type_names
    out = []
    for r in range(n):
        cats = categories(items, r)
        log_price = math.log1p(items.price[r])           # NaN for an item without price
        counts = {t: items.counts[r, t] for t in range(1, len(types) + 1)}
        row = {
            "item_log_price": log_price,
            # an item in several categories: against the mean of its categories' means, its best rank, its largest
            # category and the largest share; NaN without categories
            # (over the categories with priced members: a category without one leaves the others' mean)
            "item_price_vs_category": _price_vs(log_price, [m for m in map(mean_log_price, cats) if not math.isnan(m)]),
            **{f"item_attr_{a}": items.attributes[r, k] for k, a in enumerate(items.attribute_names)},
            **{f"item_log_{name}": math.log1p(counts[t]) for t, name in enumerate(types, start=1)},
            **{f"item_{name}_rate": (counts[t] + rate_prior(t)) / (counts[1] + 10)
               for t, name in enumerate(types, start=1) if t > 1},
            **{f"item_log_weighted_{w}": math.log1p(win[r][k]) for k, w in enumerate(windows)},
            "item_log_weighted_all": math.log1p(ever[r]),
            **{f"item_log_share_{w}": math.log((win[r][k] + 1) / (win_total[k] + n)) for k, w in enumerate(windows)},
            "item_recent_trend": math.log((win[r][3] + 1) / (win_total[3] + n))
            - math.log((ever[r] + 1) / (ever_total + n)),
            "item_log_pop_rank": math.log1p(pop_rank[r]),
            "item_log_category_rank": math.log1p(min(cat_rank[(r, c)] for c in cats)) if cats else NAN,
            "item_log_category_size": math.log1p(max(len(members[c]) for c in cats)) if cats else NAN,
            "item_category_global_share": max(sum(pop[m] for m in members[c]) / total for c in cats)
            if cats else NAN,
            "item_age_days": (now - items.created_at[r]) / DAY,   # NaN without created_at
            "item_days_since_first_event": (now - items.first_seen[r]) / DAY,   # NaN without events
        }
        out.append(row)
    return out


def feature_rows(settings, items, index, rows, types, ts, now: float, per_item,
                 seen: set[int]) -> dict[int, dict[str, float]]:
    """``{candidate row: {feature name: value}}`` of one user whose history (oldest first) is ``rows`` (item rows,
    -1 unknown), ``types`` and ``ts``; ``per_item`` is ``item_features(items, now)``."""
    known = [(int(r), int(t), float(s)) for r, t, s in zip(rows, types, ts) if r >= 0]
    n_events = len(rows)
    names = items.type_names
    by_type = {t: sum(1 for x in types if x == t) for t in range(1, len(names) + 1)}
    prices = [math.log1p(items.price[r]) for r, _, _ in known if not math.isnan(items.price[r])]
    mean = sum(prices) / len(prices) if prices else NAN
    std = math.sqrt(max(sum(p * p for p in prices) / len(prices) - mean ** 2, 0.0)) if prices else NAN
    user = {
        "user_log_events": math.log1p(n_events),
        **{f"user_log_{name}": math.log1p(by_type[t]) for t, name in enumerate(names, start=1)},
        "user_log_distinct_items": math.log1p(len({r for r, _, _ in known})),
        "user_distinct_categories": len({c for r, _, _ in known for c in categories(items, r)}),
        "user_days_since_last": (now - max(ts)) / DAY if n_events else 365.0,
        "user_days_since_first": (now - min(ts)) / DAY if n_events else 0.0,
        "user_events_24h": sum(1 for s in ts if s >= now - DAY),
        "user_events_7d": sum(1 for s in ts if s >= now - 7 * DAY),
        **{f"user_{name}_rate": (by_type[t] + rate_prior(t)) / (by_type[1] + 10)
           for t, name in enumerate(names, start=1) if t > 1},
        "user_mean_log_price": mean, "user_std_log_price": std,
        # the share of events (on known items) whose item the user had had before
        "user_repeat_rate": 1 - len({r for r, _, _ in known}) / len(known) if known else 0.0,
    }
    weight = category_weights(items, rows, types)
    # every category in the user's order: weight descending, then category (those without weight last)
    order = sorted(range(items.n_categories), key=lambda c: (-weight.get(c, 0.0), c))
    strongest = [c for c in order if weight.get(c, 0.0) > 0]
    total = sum(weight.values())
    last = list(rows)[-features.LAST_EVENTS:]            # the user's last events, any item
    # the mean all-time popularity rank (log) of the items of the user's events; NaN without
    pop = [per_item[r]["item_log_pop_rank"] for r, _, _ in known]
    pop_mean = sum(pop) / len(pop) if pop else NAN
    history = {r for r, _, _ in known}
    cand = candidates_of(settings, items, index, rows, types, seen)
    best = max((c[0] for c in cand.values()), default=0.0)
    out = {}
    for r, (score, count, last_score, flags, near, factor) in cand.items():
        cats = categories(items, r)
        diff = math.log1p(items.price[r]) - mean
        row = {
            **per_item[r], **user,
            "ux_price_diff": diff, "ux_price_z": abs(diff) / (std + 0.1), "ux_price_ratio": math.exp(diff),
            "ux_covisit_score": score, "ux_log_covisit_score": math.log1p(score), "ux_covisit_count": count,
            "ux_covisit_norm": score / max(best, 1e-9), "ux_covisit_last": last_score,
            "ux_knn_score": near, "ux_knn_norm": near / max(len(history), 1),
            "ux_latent_score": factor,
            "ux_popularity_vs_user": per_item[r]["item_log_pop_rank"] - pop_mean,
            "ux_seen_before": r in history,
            "ux_from_covisit": bool(flags & candidates.FROM_COVISIT),
            "ux_from_category": bool(flags & candidates.FROM_CATEGORY),
            "ux_from_global": bool(flags & candidates.FROM_GLOBAL),
            "ux_from_recent_1h": bool(flags & live.FROM_RECENT_1H),
            "ux_from_recent_1d": bool(flags & live.FROM_RECENT_1D),
            "ux_from_knn": bool(flags & candidates.FROM_KNN), "ux_from_latent": bool(flags & candidates.FROM_LATENT),
            "ux_n_sources": bin(flags).count("1"),
        }
        if cats:
            # the item's strongest category for this user: first of its categories in the user's order
            c = min(cats, key=order.index)
            in_c = [(t, s) for k, t, s in known if c in categories(items, k)]
            row.update({
                "ux_category_share": weight.get(c, 0.0) / max(total, 1e-9),
                "ux_category_rank": strongest.index(c) if c in strongest else items.n_categories,
                "ux_days_since_category": (now - max(s for _, s in in_c)) / DAY if in_c else 365.0,
                "ux_log_category_weight": math.log1p(weight.get(c, 0.0)),
                "ux_category_events_7d": sum(1 for _, s in in_c if s >= now - 7 * DAY),
                "ux_category_share_recent": sum(1 for k in last if k >= 0 and c in categories(items, k))
                / max(len(last), 1),
            })
        else:
            row.update(dict.fromkeys(("ux_category_share", "ux_category_rank", "ux_days_since_category",
                                      "ux_log_category_weight", "ux_category_events_7d",
                                      "ux_category_share_recent"), NAN))
        out[r] = row
    return out


def _price_vs(log_price: float, means: list[float]) -> float:
    """An item's log price against the mean of its categories' mean log prices; NaN when none has one."""
    return log_price - sum(means) / len(means) if means else NAN
