"""The performance page's sections of the benchmarks that judge quality through the product (``protocols``,
``ablation``, ``served``, ``experiment``, ``closed_loop``, ``new_items``): how their results files' figures are
shown."""

from __future__ import annotations

from .figures import figure, interval, percent, table, times


def protocols(results: list[dict]) -> list[str]:
    # Which logs have run is quality.md's to say: this page does not change when one more does.
    return ["Its figures are on [quality.md](quality.md), every log with its command, date and machine."]


def ablation(res: dict) -> list[str]:
    rows = [[r["variant"], figure(r["static_ndcg"], 4), times(r["static_ratio"]), figure(r["replay_ndcg"], 4),
             times(r["replay_ratio"]), figure(r["candidate_recall"], 3)] for r in res["runs"]]
    return [f"Cut {res['cut']:g}; the ratios are the ranker's to the best baseline of the same run. One training "
            "seed per variant: a difference no larger than the spread between training seeds (the quality "
            "benchmark's runs, [quality.md](quality.md)) is noise.", "",
            *table(["variant", "static NDCG@10", "static ratio", "replay NDCG@10", "replay ratio",
                     "replay candidate recall"], rows),
            "", "Every method under both protocols, per log and cut: [quality.md](quality.md)."]


def served(res: dict) -> list[str]:
    s, e = res["served"], res["evaluated"]
    best = res["best_baseline"]
    shown = " The ranker with the columns of what each user was shown (`PREFEED_RANK_SHOWN=1`)." \
        if res.get("rank_shown") else ""
    repeated = [figure(x.get("repeat_share"), 3) for x in (s, e, res.get("methods", {}).get(best, {}))]
    return [f"Cut {res['cut_quantile']:g}: {res['steps']:,} steps of {res['users']:,} users, the log after the cut "
            f"posted through HTTP in {figure(res['replay_seconds'], 0)} s"
            + (f", {res['events_per_request']:,} events per request." if "events_per_request" in res else ".")
            + shown, "",
            *table(["feed", "NDCG@10", f"ratio to {best}", "95% interval", "repeated"], [
                ["served: `GET /feed` once caught up", figure(s["ndcg"], 4), f"**{times(s['ratio'])}**",
                 interval(s["interval"]), repeated[0]],
                ["evaluated: the replay protocol in process", figure(e["ndcg"], 4), times(e["ratio"]),
                 interval(e["interval"]), repeated[1]],
                [f"best baseline ({best})", figure(res["baseline_ndcg"], 4), times(1.0), "", repeated[2]]]),
            "",
            f"Served / evaluated: {interval(res['served_vs_evaluated'])} (95% interval); steps scoring the same: "
            f"{percent(res['same_score_share'])}; reads still behind the user's events after the catch-up deadline: "
            f"{res['late_reads']}."]


def experiment(res: dict) -> list[str]:
    rows = []
    for name, got in res["reports"].items():
        for arm in got["arms"]:
            click = arm["events"]["click"]
            mine = res["simulated"].get(f"{name}/{arm['name']}", {})
            rows.append([name, arm["name"], arm["spec"].split(":")[0] if arm["spec"].startswith("model:")
                         else arm["spec"], f"{arm['users']:,}", f"{arm['pages']:,}", f"{click['attributed']:,}",
                         f"{mine.get('clicks', 0):,}", figure(click["per_user"] or 0.0, 3),
                         f"**{times(arm['ratio'])}**" if arm["ratio"] is not None else "-",
                         interval(arm["ratio_interval"]) if arm["ratio_interval"] else ""])
    aa = res["aa"]
    return [f"Cut {res['cut_quantile']:g}: {res['steps']:,} steps of {res['users']:,} users replayed through HTTP in "
            f"{figure(res['replay_seconds'], 0)} s; each experiment holds half of the users.", "",
            *table(["experiment", "arm", "spec", "exposed users", "pages", "clicks (report)", "clicks (simulation)",
                    "clicks per user", "ratio to control", "95% interval"], rows),
            "", f"The report's counts equal the simulation's: **{'yes' if res['exact'] else 'NO'}**. Verdict: "
            f"{res['verdict'] or 'none'}; A/A verdict: {res['aa_verdict'] or 'none'}. The A/A users split again "
            f"under {aa['seeds']} other hashes: {aa['false_verdicts']} false verdicts, {aa['sample_ratio_flagged']} "
            "sample-ratio flags."]


def new_items(res: dict) -> list[str]:
    rows = [["off" if not r["every"] else f"one slot in {r['every']}", percent(r["reached_share"]),
             percent(r["any_share"]), figure(r["impressions_median"], 0), figure(r["ndcg"], 4),
             times(r["ndcg_ratio"]) if r["every"] else "", interval(r["ndcg_interval"]) if r["ndcg_interval"] else "",
             f"{r['past_threshold_max']}" if r["every"] else "",
             percent(r["repeated"]) if "repeated" in r else "-"] for r in res["runs"]]
    return [f"The synthetic marketplace, cut {res['cut_quantile']:g}: {res['new_items']} items created after the cut "
            f"through `PUT /items`, as the log after it is lived through the product (a page of {res['limit']} read "
            f"at each session's start: {res['pages']:,} pages). A new item waits for "
            f"{res['impressions']} impressions (`PREFEED_NEW_ITEM_IMPRESSIONS` of this run: this log's traffic is "
            "a few hundred pages a day). NDCG@10 judges each page's first 10 items against the session that "
            "follows; the ratio is to the run without the rule, the same pages read at the same times.", "",
            *table(["`PREFEED_NEW_ITEM_EVERY`", f"new items with {res['impressions']} impressions within a day",
                    "with any", "impressions within a day (median)", "NDCG@10", "ratio to off", "95% interval",
                    "most impressions past the threshold", "repeated"], rows),
            "", "\"Repeated\": the share of a page's items on the same user's previous page (as `evaluate --protocol "
                "replay` reports it)."]



def closed_loop(res: dict) -> list[str]:
    rows = []
    for arm in res["report"]["arms"]:
        click = arm["events"]["click"]
        mine = res["simulated"].get(f"shown/{arm['name']}", {})
        judged = res["judged"].get(arm["name"], {})
        rows.append([f"`{arm['name']}`", f"{arm['users']:,}", f"{arm['pages']:,}", f"{click['attributed']:,}",
                     f"{mine.get('clicks', 0):,}", figure(click["per_user"] or 0.0, 3),
                     f"**{times(arm['ratio'])}**" if arm["ratio"] is not None else "-",
                     interval(arm["ratio_interval"]) if arm["ratio_interval"] else "",
                     figure(judged.get("ndcg", 0.0), 4),
                     percent(judged["repeated"]) if judged.get("repeated") is not None else "-"])
    trained = res["trained"]
    return [f"Cut {res['cut_quantile']:g}, {res['users']:,} users: the first {res['first_steps']:,} steps after the "
            f"cut lived through the product by a model without the shown columns ({res['stored_pages']:,} pages "
            f"stored); then both bundles trained on the product's database, the served period their last training "
            f"period (`without`: {trained['without']['trees']} trees; `with`: {trained['with']['trees']} trees, "
            f"the shown columns {percent(res['shown_importance'])} of its importance); then the next "
            f"{res['second_steps']:,} steps in an experiment over every user, `without` the control. NDCG@10 "
            "judges each page read against the step that followed it; \"repeated\" is the share of a page's items "
            "on the same user's previous page.", "",
            *table(["arm", "exposed users", "pages", "clicks (report)", "clicks (simulation)", "clicks per user",
                    "ratio to control", "95% interval", "NDCG@10 of the pages", "repeated"], rows),
            "", f"The report's counts equal the simulation's: **{'yes' if res['exact'] else 'NO'}**. Verdict: "
            f"**{res['verdict'] or 'none'}** (no interval excludes 1 when none)."]
