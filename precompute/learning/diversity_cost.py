"""What the diversity rule costs the ranker: its ordered lists reordered by the rule the page applies
(``feeds/diversity.spread``, the same function), at a few settings, judged beside the lists as ranked.

Per setting: NDCG@k of the reordered top k, the mean distinct categories per top-k page (an item's counted category:
its lowest category id; an item without one is not counted), and the ratio of its NDCG@k to the rule off with a 95 %
bootstrap interval over users (``bootstrap.ratio_interval``). The rule's cost is within the noise of a log when that
interval holds 1.
"""

from __future__ import annotations

import numpy as np

from ..feeds.diversity import DEPTH, NONE, Diversity, spread
from ..ranking.item_table import ItemTable
from . import bootstrap

#: The settings measured (K items of one category at most in W slots), beside the rule off.
MEASURED = (Diversity(3, 10), Diversity(2, 10), Diversity(1, 5))


def settings_measured(configured: Diversity) -> tuple[Diversity, ...]:
    """``MEASURED``, and the deployment's own setting when it is on and not among them."""
    return MEASURED + ((configured,) if configured.on and configured not in MEASURED else ())


def name(rule: Diversity) -> str:
    return f"{rule.most}/{rule.window}"


def counted_categories(items: ItemTable) -> np.ndarray:
    """Each item row's counted category (its lowest category id, as the page counts it), ``NONE`` without one.
    The CSR categories of a row are in ascending dense index, which follows the ids."""
    first = items.cat_indptr[:-1]
    has = items.n_cats > 0
    out = np.full(len(items.n_cats), NONE, dtype=np.int64)
    out[has] = items.category_ids[items.cat_of[first[has]]]
    return out


def reorder(rows: np.ndarray, cats: np.ndarray, k: int, rule: Diversity) -> np.ndarray:
    """The first ``k`` rows of one ranked list (best first, at least ``k + DEPTH - 1`` long or whole) as the page
    serves them under ``rule`` (a first page: no slots before it; no boosts)."""
    head = rows[: k + DEPTH - 1]
    c = cats[head].tolist()
    return head[spread(c, [False] * len(c), k, rule)]


def distinct(rows: np.ndarray, cats: np.ndarray, k: int) -> int:
    c = cats[rows[:k]]
    return len(np.unique(c[c != NONE]))


def summarize(off: np.ndarray, on: dict[str, np.ndarray], distinct_off: np.ndarray, distinct_on: dict[str, np.ndarray],
              seed: int = 0) -> dict[str, dict]:
    """Per setting (and "off"): mean NDCG@k, mean distinct categories per page, and the on/off NDCG ratio with its
    interval, from per-user values (``off``, ``on[setting]``: each user's NDCG@k or sum over their steps)."""
    base = float(off.mean()) if len(off) else 0.0
    out = {"off": {"ndcg": base, "distinct": float(distinct_off.mean()) if len(distinct_off) else 0.0}}
    for key, values in on.items():
        mean = float(values.mean()) if len(values) else 0.0
        interval = bootstrap.ratio_interval(values, off, seed=seed) if len(off) else None
        out[key] = {"ndcg": mean, "distinct": float(distinct_on[key].mean()) if len(distinct_on[key]) else 0.0,
                    "ratio": mean / base if base > 0 else None, "ratio_interval": interval}
    return out


def table(cost: dict[str, dict], k: int, over: str) -> str:
    """The cost table: one row per setting."""
    lines = [f"diversity rule on the ranker's lists (K/W: at most K of one category in W slots; ratio to off, 95% "
             f"interval over the {over}):",
             f"{'rule':<8}{'NDCG@' + str(k):>12}  {'categories@' + str(k):>14}  {'ratio':>8}  interval"]
    for key, m in cost.items():
        ratio = "" if m.get("ratio") is None else f"{m['ratio']:.3f}"
        iv = m.get("ratio_interval")
        lines.append(f"{key:<8}{m['ndcg']:12.4f}  {m['distinct']:14.2f}  {ratio:>8}  "
                     + ("" if iv is None else f"{iv[0]:.3f}–{iv[1]:.3f}"))
    return "\n".join(lines)


def static_cost(truth, ranked, items: ItemTable, rules: tuple[Diversity, ...], k: int, seed: int = 0
                ) -> dict[str, dict]:
    """The rule's cost on the static protocol: each judged user's ranked list (``lists.Ranked``) reordered."""
    from .lists import Ranked
    from .metrics import ndcg_per_user

    cats = counted_categories(items)
    lists = [ranked.rows[ranked.offsets[u]:ranked.offsets[u + 1]] for u in range(len(ranked.offsets) - 1)]
    off = ndcg_per_user(truth, ranked, k)
    on, dist_on = {}, {}
    for rule in rules:
        pages = [reorder(rows, cats, k, rule) for rows in lists]
        sizes = np.array([len(p) for p in pages], dtype=np.int64)
        flat = np.concatenate(pages) if pages else np.empty(0, np.int64)
        on[name(rule)] = ndcg_per_user(truth, Ranked(np.r_[0, np.cumsum(sizes)].astype(np.int64), flat,
                                                     ranked.candidate_hit), k)
        dist_on[name(rule)] = np.array([distinct(p, cats, k) for p in pages], dtype=np.float64)
    dist_off = np.array([distinct(rows, cats, k) for rows in lists], dtype=np.float64)
    return summarize(off, on, dist_off, dist_on, seed=seed)
