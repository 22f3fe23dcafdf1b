"""The performance page's section of the precompute benchmark: the rebuild stage by stage, the cascade, the shown
columns, the arms of an experiment and a worker's memory per bundle (``performance_sections.py`` lists it)."""

from __future__ import annotations

from .figures import figure, percent, table, times


def precompute(res: dict) -> list[str]:
    w, stages = res["workers"], res["per_user_ms"]
    predict = res["catboost_predict_rows_per_s_per_core"]
    predict_2 = w["catboost_predict_rows_per_s_per_core_2_processes"]
    out = [f"{res['users']:,} users × {res['candidates_per_user']:,.0f} candidates, {res['features']} features, "
            f"{res['trees']:,} trees; medians of {res['config']['repeats']} passes.", "",
            *table(["per user, ms", *stages, "total"], [
                ["in one process, one thread", *(figure(v) for v in stages.values()), figure(res["per_user_ms_total"])],
                [f"in RQ jobs, 2 workers ({w['users_per_job']} users per job)",
                 *(figure(w["per_user_ms_in_jobs"][k]) for k in stages), figure(sum(w["per_user_ms_in_jobs"].values()))]]),
            "",
            *table(["item-scores per second per core", "rate", "vs CatBoost alone, 1 process",
                     "vs CatBoost alone, 2 processes"], [
                ["CatBoost predict alone on the same matrices, 1 process", figure(predict, 0), times(1.0), "–"],
                ["CatBoost predict alone, 2 processes at once", figure(predict_2, 0), times(predict_2 / predict), times(1.0)],
                ["prefeed pipeline, one process", figure(res["pipeline_item_scores_per_s_per_core"], 0),
                 f"**{times(res['ratio_pipeline_to_catboost'])}**", "–"],
                ["prefeed through 2 RQ workers, per busy worker-second", figure(w["item_scores_per_s_per_core"], 0),
                 times(w["ratio_to_catboost"]), f"**{times(w['ratio_to_catboost_2_processes'])}**"],
                ["the same, per second of the whole rebuild", figure(w["item_scores_per_s_per_core_over_span"], 0),
                 times(w["item_scores_per_s_per_core_over_span"] / predict),
                 times(w["ratio_to_catboost_2_processes_over_span"])]]),
            "",
            f"Through the workers: {w['jobs']} jobs, rebuild {figure(w['rebuild_s'])} s (+{figure(w['startup_s'])} s worker "
            f"start-up), queue and fork overhead {percent(w['queue_overhead_share'])} of busy worker time, "
            f"{w['failed']} failed jobs. The 1-process ratio is the median of the passes' ratios "
            f"({', '.join(times(r) for r in res['ratios_per_repeat'])})."]
    cascade = res.get("cascade")
    if cascade:
        rate = cascade["users_per_s_per_core"]
        out += ["", f"**The cascade** (`PREFEED_CASCADE_KEEP` = {cascade['keep']}): the bundle as trained, its first "
                "stage scoring every candidate and the full model the best of them, beside the same bundle with the "
                "full model scoring every candidate; the same users rebuilt in one process, the two alternating "
                "round by round; medians, ms per user.", "",
                *table(["ranked by", *cascade["per_user_ms"]["full model"], "total", "users/s per core",
                        "vs the full model"],
                       [[label, *(figure(v) for v in ms.values()), figure(sum(ms.values())), figure(rate[label], 0),
                         f"**{times(rate[label] / rate['full model'])}**"]
                        for label, ms in cascade["per_user_ms"].items()])]
    shown = res.get("shown")
    if shown:
        out += ["", f"**The shown columns** (`PREFEED_RANK_SHOWN`): with {shown['pages_per_user']} pages of "
                f"{shown['page_items']} items stored per user, the worker's read of them (once per batch) and the "
                "columns built chunk by chunk as the worker ranks, timed in the same rounds as the same candidates' "
                "columns without them; medians, ms per user. The model's cost does not change with them (an "
                "oblivious tree costs its depth)."
                + (f" Every item counted on each day of the item columns' window: read once per worker and day "
                   f"(before the work horses fork) in {shown['daily_read_ms']:.0f} ms."
                   if "daily_read_ms" in shown else ""), "",
                *table(["pages read", "columns with them", "columns without", "added", "rebuild without",
                        "with / without"],
                       [[figure(shown["read_ms"]), figure(shown["features_on_ms"]), figure(shown["features_off_ms"]),
                         figure(shown["added_ms"]), figure(shown["rebuild_ms"]), f"**{times(shown['ratio'])}**"]])]
    arms, memory = res.get("by_arm"), res.get("bundle_memory")
    if arms:
        none = arms["none_per_user_ms_by_stage"]
        out += ["", f"In an experiment's arms: the {arms['users']:,} users split by an experiment over all of them "
                f"(a model arm of a second bundle of {arms['second_bundle']['trees']:,} trees, `recent:1d`, "
                f"`popular`), each arm's users rebuilt in one process with no experiment and in their arm, in turn; "
                f"medians of {arms['rounds']} interleaved rounds, ms per user. The ratio is to no experiment on the "
                "same users.", "",
                *table(["per user, ms", "users", "total", "ratio", *none], [
                    ["no experiment (the promoted bundle)", figure(arms["users"]),
                     figure(arms["per_user_ms_by_arm"]["none"]), times(1.0), *(figure(v) for v in none.values())],
                    *([f"`{label}`", figure(a["users"]), figure(a["per_user_ms"]),
                       f"**{times(arms['ratio_by_arm'][label])}**", *(figure(v) for v in a["per_user_ms_by_stage"].values())]
                      for label, a in arms["arms"].items())])]
    if memory:
        # A run from before format 2 measured the one format there was, after the init only.
        formats, kinds = memory.get("by_format") or {"1": dict(memory, touched=None)}, ("rss", "pss", "uss")
        names = {"1": "format 1 (id pairs in `covisit.npz`, in memory)", "2": "format 2 (`.npy` sources, mapped)"}
        out += ["", f"A worker parent's memory (`/proc/<pid>/smaps_rollup`) after its pre-fork init "
                f"(`jobs.context.init`, in a fresh process) with 0, 1 and 2 extra model-arm bundles running, each a "
                f"copy of the promoted one ({memory['trees']:,} trees), by the format the copies are written in "
                f"(`train` writes format 2), measured in the same rounds; medians of {memory['rounds']} rounds, MiB. "
                "*Touched*: the same process after reading every page of its bundles' mapped arrays (the most it can "
                "hold of them). Per extra bundle: the slope over every sample.", "",
                *table(["extra bundles", "on disk", "RSS", "PSS", "USS", "RSS touched", "PSS touched", "USS touched"],
                       [[f"{names[f]}: {n}", figure(x["bundle_disk_mib"]), *(figure(b[f"{k}_mib"], 0) for k in kinds),
                         *(figure(x["touched"][n][f"{k}_mib"], 0) if x["touched"] else "–" for k in kinds)]
                        for f, x in formats.items() for n, b in x["by_extra_bundles"].items()] +
                       [[f"**{names[f]}: per extra bundle**", f"**{figure(x['bundle_disk_mib'])}**",
                         *(f"**{figure(x[f'{k}_mib_per_extra_bundle'])}**" for k in kinds),
                         *(f"**{figure(x['touched'][f'{k}_mib_per_extra_bundle'])}**" if x["touched"] else "–"
                           for k in kinds)] for f, x in formats.items()])]
    return out
