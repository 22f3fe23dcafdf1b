"""An evaluation as a table (stdout), JSON and a bar chart of NDCG@k per method (PNG)."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import InvalidInput
from . import diversity_cost
from .evaluate import Evaluation

COLUMNS = (("ndcg", "NDCG@{k}"), ("recall", "Recall@{k}"), ("recall100", "Recall@100"), ("map", "MAP@{k}"),
           ("coverage", "coverage"), ("non_empty", "non-empty"), ("candidate_recall", "cand. recall"))


def check_writable(path: str | Path | None) -> None:
    """Refuse, before any work, a path whose folder does not exist or that is a folder."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir() or not p.parent.is_dir():
        raise InvalidInput(f"cannot write {p}: " + ("it is a directory" if p.is_dir() else
                                                     f"no directory {p.parent}"))


def table(ev: Evaluation) -> str:
    """The protocols' tables: static (one row per method, the ranker last, and the ratio line), then replay."""
    parts = []
    if ev.methods:
        parts.append(("static protocol (history frozen at the cut):\n" if ev.replay else "") + static_table(ev))
        if ev.diversity:
            parts.append(diversity_cost.table(ev.diversity, ev.k, f"{ev.users} judged users"))
    if ev.replay is not None:
        parts.append(replay_table(ev.replay))
        if ev.replay.diversity:
            parts.append("replay: " + diversity_cost.table(ev.replay.diversity, ev.replay.k, f"{ev.replay.users} users"))
    if ev.item_to_item is not None:
        parts.append(item_to_item_table(ev.item_to_item))
    return "\n\n".join(parts)


def item_to_item_table(check) -> str:
    """The item-to-item check: per method, the share of steps whose list of the step's first item holds one of its
    others (HitRate@k) and the share of them it holds (Recall@k)."""
    lines = [f"item-to-item check ({check.steps} steps; the similar items of each step's first item, the user's "
             "seen items dropped):",
             "method".ljust(10) + f"{'HitRate@' + str(check.k):>12}  {'Recall@' + str(check.k):>12}"]
    for name, m in check.methods.items():
        lines.append(name.ljust(10) + f"{m['hit_rate']:12.4f}  {m['recall']:12.4f}")
    lines.append("served: what GET /items/<id>/similar answers (co-visitation, then item-kNN; the category's "
                 "popular items when that leaves none)")
    return "\n".join(lines)


def replay_table(rp) -> str:
    """The replay protocol's table: NDCG@k, HitRate@k and the share of a page its user's previous page held, per
    method; candidate recall per source; the ratio."""
    lines = [f"replay protocol ({rp.steps} steps of {rp.users} users; the ranker at each step's feed clock, the "
             "baselines live):"]
    width = max(len(name) for name in rp.methods) + 2
    lines.append("method".ljust(width) + f"{'NDCG@' + str(rp.k):>12}  {'HitRate@' + str(rp.k):>12}  "
                 f"{'repeated':>12}  {'cand. recall':>12}")
    for name, m in rp.methods.items():
        recall = f"{m['candidate_recall']:12.4f}" if "candidate_recall" in m else " " * 12
        lines.append(name.ljust(width) + f"{m['ndcg']:12.4f}  {m['hit_rate']:12.4f}  "
                     f"{m.get('repeat_share', float('nan')):12.4f}  {recall}")
    lines.append("repeated: the share of a step's page its user's previous page held")
    lines.append("candidate recall by source: " + ", ".join(f"{s} {v:.3f}" for s, v in rp.sources.items()))
    ratio = _ratio(rp.ratio, rp.ratio_interval, f"{rp.users} users")
    lines.append(f"ranker / best baseline ({rp.best_baseline}, its window chosen on the truth) = {ratio}")
    return "\n".join(lines)


def static_table(ev: Evaluation) -> str:
    """One row per method (the ranker last) and the ratio line."""
    heads = [h.format(k=ev.k) for _, h in COLUMNS]
    width = max(len(name) for name in ev.methods) + 2
    lines = ["method".ljust(width) + "  ".join(f"{h:>12}" for h in heads)]
    for name, m in ev.methods.items():
        lines.append(name.ljust(width) + "  ".join(f"{m[key]:12.4f}" for key, _ in COLUMNS))
    lines.append(f"ranker / best baseline ({ev.best_baseline}) = "
                 f"{_ratio(ev.ratio, ev.ratio_interval, f'{ev.users} judged users')}")
    return "\n".join(lines)


def _ratio(ratio: float | None, interval: tuple[float, float] | None, over: str) -> str:
    """``1.23× (95% interval over the <over>: 1.15×–1.31×)``, or why there is no ratio."""
    if ratio is None:
        return "n/a (the best baseline scores 0)"
    text = f"{ratio:.2f}×"
    if interval is not None:
        text += f" (95% interval over the {over}: {interval[0]:.2f}×–{interval[1]:.2f}×)"
    return text


def write_json(ev: Evaluation, path: str | Path) -> None:
    try:
        Path(path).write_text(json.dumps(ev.as_dict(), indent=2) + "\n")
    except OSError as exc:
        raise InvalidInput(f"cannot write {path}: {exc.strerror}") from None


def write_chart(ev: Evaluation, path: str | Path) -> None:
    """A bar chart of NDCG@k per method, the ranker highlighted; matplotlib's Agg backend (no display)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    methods = ev.methods or ev.replay.methods
    names = list(methods)
    values = [methods[name]["ndcg"] for name in names]
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=120)
    bars = ax.bar(names, values, color=["#1f77b4" if name == "ranker" else "#9aa5b1" for name in names])
    ax.bar_label(bars, fmt="%.3f", fontsize=8)
    ax.set_ylabel(f"NDCG@{ev.k}")
    ax.set_title(f"NDCG@{ev.k} per method: {ev.users} users judged after the {ev.cut_quantile:g} time cut")
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path, format="png")
    except OSError as exc:
        raise InvalidInput(f"cannot write {path}: {exc.strerror}") from None
    finally:
        plt.close(fig)
