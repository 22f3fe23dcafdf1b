"""The pipeline's candidate and feature stages stated the slow, obvious way: Python loops, sets and dicts over one
user's history, the item table and the settings, with none of the scratch arrays, sorted runs or fancy indexing
of ``precompute/ranking``. Tests compare the vectorized stages against these, user by user."""

from __future__ import annotations

import math

from precompute.ranking import candidates

DAY = 86400.0
VIEW, CLICK, CONTACT, PURCHASE = 1, 2, 3, 4


def candidates_of(settings, items, cov, rows, types, seen: set[int]) -> dict[int, tuple[float, int, int]]:
    """``{item row: (co-visitation score, co-visitation count, source bits)}`` of one user, uncapped; ``seen``:
    the rows of the items they interacted with inside the seen window, which are left out."""
    known = [int(r) for r in rows if r >= 0]
    recent = []
    for r in reversed(known):
        if r not in recent:
            recent.append(r)
    score, count, flags = {}, {}, {}
    for i, r in enumerate(recent[: settings.covisit_recent_items]):
        for j in range(cov.indptr[r], cov.indptr[r + 1]):
            n = int(cov.nbr[j])
            score[n] = score.get(n, 0.0) + cov.weight[j] * settings.recency_decay ** i
            count[n] = count.get(n, 0) + 1
            flags[n] = flags.get(n, 0) | candidates.FROM_COVISIT
    weight = category_weights(settings, items, rows, types)
    top = sorted((c for c in weight if weight[c] > 0), key=lambda c: (-weight[c], c))
    for c in top[: settings.user_top_categories]:
        for n in items.category_popular[c]:
            flags[int(n)] = flags.get(int(n), 0) | candidates.FROM_CATEGORY
    for n in items.global_popular:
        flags[int(n)] = flags.get(int(n), 0) | candidates.FROM_GLOBAL
    return {n: (score.get(n, 0.0), count.get(n, 0), f) for n, f in flags.items()
            if n not in seen and items.active[n]}


def category_weights(settings, items, rows, types) -> dict[int, float]:
    """A user's events per category, each weighted by its type (``Settings.category_weights``)."""
    weight: dict[int, float] = {}
    for r, t in zip(rows, types):
        if r >= 0:
            c = int(items.category[r])
            weight[c] = weight.get(c, 0.0) + settings.category_weights[t - 1]
    return weight


def item_features(items, now: float) -> list[dict[str, float]]:
    """The item groups ("item_static", "item_clock") of every item row, from the table's raw columns."""
    n = len(items)
    popularity = [sum(w * items.counts[r, t] for t, w in enumerate(items.popularity_weights, start=1))
                  + 0.1 * items.recent_views[r] for r in range(n)]
    ranked = sorted(range(n), key=lambda r: (-popularity[r], items.ids[r]))
    pop_rank = {r: k for k, r in enumerate(ranked)}
    cat_rank, members = {}, {}
    for r in ranked:
        c = int(items.category[r])
        cat_rank[r] = len(members.setdefault(c, []))
        members[c].append(r)
    total = sum(popularity)
    out = []
    for r in range(n):
        c = int(items.category[r])
        log_price = math.log1p(items.price[r])
        views, clicks, contacts, purchases = (items.counts[r, t] for t in (VIEW, CLICK, CONTACT, PURCHASE))
        out.append({
            "item_log_price": log_price,
            "item_price_vs_category": log_price - sum(math.log1p(items.price[m]) for m in members[c]) / len(members[c]),
            "item_quality": items.quality[r], "item_photos": items.photos[r],
            "item_seller_rating": items.seller_rating[r],
            "item_log_views": math.log1p(views), "item_log_clicks": math.log1p(clicks),
            "item_log_contacts": math.log1p(contacts), "item_log_purchases": math.log1p(purchases),
            "item_click_rate": (clicks + 1) / (views + 10), "item_contact_rate": (contacts + 0.5) / (views + 10),
            "item_purchase_rate": (purchases + 0.2) / (views + 10),
            "item_log_recent_views": math.log1p(items.recent_views[r]),
            "item_log_pop_rank": math.log1p(pop_rank[r]), "item_log_category_rank": math.log1p(cat_rank[r]),
            "item_log_category_size": math.log1p(len(members[c])),
            "item_category_global_share": sum(popularity[m] for m in members[c]) / total,
            "item_age_days": (now - items.created_at[r]) / DAY,
        })
    return out


def feature_rows(settings, items, cov, rows, types, ts, now: float, per_item,
                 seen: set[int]) -> dict[int, dict[str, float]]:
    """``{candidate row: {feature name: value}}`` of one user whose history (oldest first) is ``rows`` (item rows,
    -1 unknown), ``types`` and ``ts``; ``per_item`` is ``item_features(items, now)``."""
    known = [(int(r), int(t), float(s)) for r, t, s in zip(rows, types, ts) if r >= 0]
    n_events = len(rows)
    by_type = {t: sum(1 for x in types if x == t) for t in (VIEW, CLICK, CONTACT, PURCHASE)}
    prices = [math.log1p(items.price[r]) for r, _, _ in known]
    mean = sum(prices) / len(prices) if prices else 0.0
    std = math.sqrt(max(sum(p * p for p in prices) / len(prices) - mean ** 2, 0.0)) if prices else 0.0
    user = {
        "user_log_events": math.log1p(n_events), "user_log_views": math.log1p(by_type[VIEW]),
        "user_log_clicks": math.log1p(by_type[CLICK]), "user_log_contacts": math.log1p(by_type[CONTACT]),
        "user_log_purchases": math.log1p(by_type[PURCHASE]),
        "user_log_distinct_items": math.log1p(len({r for r, _, _ in known})),
        "user_distinct_categories": len({int(items.category[r]) for r, _, _ in known}),
        "user_days_since_last": (now - max(ts)) / DAY if n_events else 365.0,
        "user_days_since_first": (now - min(ts)) / DAY if n_events else 0.0,
        "user_events_24h": sum(1 for s in ts if s >= now - DAY),
        "user_events_7d": sum(1 for s in ts if s >= now - 7 * DAY),
        "user_click_rate": (by_type[CLICK] + 1) / (by_type[VIEW] + 10), "user_mean_log_price": mean,
        "user_std_log_price": std,
    }
    weight = category_weights(settings, items, rows, types)
    strongest = sorted((c for c in weight if weight[c] > 0), key=lambda c: (-weight[c], c))
    total = sum(weight.values())
    cand = candidates_of(settings, items, cov, rows, types, seen)
    best = max((s for s, _, _ in cand.values()), default=0.0)
    out = {}
    for r, (score, count, flags) in cand.items():
        c = int(items.category[r])
        in_c = [(t, s) for k, t, s in known if int(items.category[k]) == c]
        diff = math.log1p(items.price[r]) - mean if n_events else 0.0
        out[r] = {
            **per_item[r], **user,
            "ux_category_share": weight.get(c, 0.0) / max(total, 1e-9),
            "ux_category_rank": strongest.index(c) if c in strongest else items.n_categories,
            "ux_days_since_category": (now - max(s for _, s in in_c)) / DAY if in_c else 365.0,
            "ux_log_category_contacts": math.log1p(sum(1 for t, _ in in_c if t >= CONTACT)),
            "ux_category_events_7d": sum(1 for _, s in in_c if s >= now - 7 * DAY),
            "ux_price_diff": diff, "ux_price_z": abs(diff) / (std + 0.1), "ux_price_ratio": math.exp(diff),
            "ux_covisit_score": score, "ux_log_covisit_score": math.log1p(score), "ux_covisit_count": count,
            "ux_covisit_norm": score / max(best, 1e-9),
            "ux_from_covisit": bool(flags & candidates.FROM_COVISIT),
            "ux_from_category": bool(flags & candidates.FROM_CATEGORY),
            "ux_from_global": bool(flags & candidates.FROM_GLOBAL), "ux_n_sources": bin(flags).count("1"),
        }
    return out
