"""Every benchmark runs in --quick mode, so the suite cannot rot: it must finish, print its table and write JSON
with its headline figures; the soak and freshness runs must also have had nothing go wrong."""

import json
import subprocess
import sys

import pytest

from precompute.settings import without_prefeed_config
from tests.conftest import ROOT

EXPECTED = {
    "precompute": ["per_user_ms", "cascade", "ratio_pipeline_to_catboost", "workers", "per_user_ms_by_arm", "ratio_by_arm",
                   "worker_mib_per_extra_bundle", "shown"],
    "fork": ["jobs_per_s", "ratio_b_over_a", "ratio_b_over_c"],
    "serve": ["runs", "ratio_feed_over_floor", "ratio_feed_over_bare", "ratio_feed_over_realtime",
              "ratio_threaded_over_sync", "ratio_impressions_on_over_off"],
    "freshness": ["p50_ms", "p99_ms", "timed_out"],
    "memory": ["processes", "feed_value_bytes_mean"],
    "scaling": ["by_users", "by_candidates", "by_trees", "plot"],
    "soak": ["requests", "errors", "api_rss_mib", "worker_rss_mib"],
    "import": ["rows", "import_rows_per_s", "import_rss_mib", "train_s", "train_rss_mib", "runs"],
    "quality": ["methods", "best_baseline", "ratio", "ratios", "runs", "chart", "oracle"],
    "protocols": ["log", "cuts", "runs"],
    "ablation": ["log", "cut", "runs"],
    "served": ["served", "evaluated", "served_vs_evaluated", "same_score_share", "late_reads"],
    "new_items": ["runs", "new_items", "pages"],
    "experiment": ["exact", "reports", "simulated", "verdict", "ratio_interval", "aa", "late_reads"],
    "closed_loop": ["exact", "report", "simulated", "verdict", "judged", "stored_pages", "shown_importance",
                    "late_reads"],
    "abuse": ["offered_rate", "flood", "real", "keys", "machine"],
    "hot_user": ["hot", "real", "redis", "collector", "machine"],
}   # hosts needs root and network namespaces: tests/test_hosts.py runs it, or says why it cannot
#: Counts of things that went wrong, which a quick run must leave at zero: a soak request answered with an error
#: (or not at all), a freshness event whose feed never carried its version within the deadline, a failed job.
ZERO = {"soak": ["errors"], "freshness": ["timed_out", "failed_jobs"], "served": ["late_reads"],
        "experiment": ["late_reads"], "closed_loop": ["late_reads"]}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_benchmark_runs_in_quick_mode(name, tmp_path):
    env = without_prefeed_config()
    env["PREFEED_BENCH_RESULTS"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-m", "benchmarks", name, "--quick"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / f"{name}-quick.json").read_text())
    assert result["quick"] is True and result["benchmark"] == name
    for key in EXPECTED[name]:
        assert key in result, key
    assert "wrote" in done.stdout
    # and nothing went wrong during the run: every request answered, every event's feed fresh in time
    for key in ZERO.get(name, []):
        assert result[key] == 0, (key, result[key])
    if name == "soak":
        assert result["requests"] > 0 and result["events"] > 0
    if name == "quality":       # every method judged on the same users, and the chart drawn
        assert set(result["methods"]) >= {"popular", "covisit", "item_knn", "ranker"} and result["users_judged"] > 0
        assert (tmp_path / result["chart"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        # the generator's own probabilities rank better than any method that only sees the log
        assert all(result["oracle"]["ndcg"] > m["ndcg"] for m in result["methods"].values()), result["oracle"]
    if name in ("protocols", "ablation"):      # both protocols judged the ranker in every run
        assert result["runs"] and all(r["replay"]["steps"] > 0 if name == "protocols" else r["replay_ndcg"] > 0
                                      for r in result["runs"])
    if name == "served":        # the feeds read over HTTP are the lists the replay protocol judged
        assert result["steps"] > 0 and result["same_score_share"] >= 0.8, result
    if name == "experiment":    # the report's counts are the simulation's, arm by arm, and it saw clicks
        assert result["exact"] is True, result["simulated"]
        assert sum(v["clicks"] for v in result["simulated"].values()) > 0 and result["aa"]["sample_ratio_flagged"] == 0
    if name == "closed_loop":   # the pages of the first half stored and trained on, the experiment counted exactly
        assert result["stored_pages"] >= result["first_steps"] > 0 and result["exact"] is True, result["simulated"]
        assert set(result["judged"]) == {"without", "with"}, result["judged"]
        assert result["trained"]["with"]["stored_steps"] > 0, result["trained"]
    if name == "hot_user":      # one key reading one user at its full rate: every real click attributed, its
        # pages recorded within the cap, the collector caught up after the run and never failed
        assert result["real"]["clicks"] > 0 and result["real"]["exact"] is True, result["real"]
        assert result["hot"]["refused_429"] > 0 and result["hot"]["within_cap"] is True, result["hot"]
        assert result["collector"]["caught_up"] is True and result["collector"]["failed_jobs"] == 0, result
    if name == "freshness":
        assert result["events"] > 0 and result["measured"] == result["events"]


def test_the_quality_page_is_the_render_of_the_committed_results():
    # given the protocols benchmark's committed results
    from benchmarks.pages import report

    results = report.load(ROOT / "benchmarks" / "results")
    assert results, "no benchmarks/results/protocols-*.json"
    # then docs/quality.md is exactly what they render to (else: python -m benchmarks report)
    assert report.PAGE.read_text() == report.render(results), "docs/quality.md is stale: python -m benchmarks report"


def test_the_quality_page_sets_a_run_without_the_cascade_beside_the_cascades(tmp_path):
    # given a log's protocols run with the cascade, and the same run with the full model on every candidate
    from benchmarks.pages import report

    committed = ROOT / "benchmarks" / "results"
    (tmp_path / "protocols-pf-ml-100k.json").write_text((committed / "protocols-pf-ml-100k.json").read_text())
    full = json.loads((committed / "protocols-pf-ml-100k-full-model.json").read_text())
    assert full["cascade_keep"] == 0
    for run in full["runs"]:
        run["static"]["methods"]["ranker"]["ndcg"] = 0.5
    (tmp_path / "protocols-pf-ml-100k-full-model.json").write_text(json.dumps(full))
    page = report.render(report.load(tmp_path))
    # then the log is shown once, by the cascade's runs, with the full model's beside them run by run
    assert page.count("## MovieLens-100K") == 1
    beside = [line for line in page.splitlines() if line.startswith("| ") and "0.5000 → " in line]
    assert len(beside) == len(full["runs"]) == 9
    assert "PREFEED_CASCADE_KEEP=0 python -m benchmarks protocols" in page


def test_the_quality_page_sets_a_run_with_the_shown_columns_beside_the_defaults(tmp_path):
    # given a log's protocols run with the defaults, and the same run with the columns of what was shown
    from benchmarks.pages import report

    committed = ROOT / "benchmarks" / "results"
    (tmp_path / "protocols-pf-ml-100k.json").write_text((committed / "protocols-pf-ml-100k.json").read_text())
    shown = json.loads((committed / "protocols-pf-ml-100k.json").read_text())
    shown["rank_shown"] = True
    for run in shown["runs"]:
        run["replay"]["methods"]["ranker"].update(ndcg=0.25, repeat_share=0.125)
    (tmp_path / "protocols-pf-ml-100k-shown.json").write_text(json.dumps(shown))
    page = report.render(report.load(tmp_path))
    # then the log is shown once, by the defaults' runs, with the shown columns' NDCG and repeated share beside
    # them run by run
    assert page.count("## MovieLens-100K") == 1
    beside = [line for line in page.splitlines() if " → 0.2500 |" in line and line.endswith(" → 0.125 |")]
    assert len(beside) == len(shown["runs"]) == 9
    assert "PREFEED_RANK_SHOWN=1 python -m benchmarks protocols" in page


def test_the_performance_page_is_the_render_of_the_committed_results():
    # given the latest full result of every benchmark, as committed
    from benchmarks.pages import report

    latest = report.load_latest(ROOT / "benchmarks" / "results")
    # then docs/performance.md is exactly what they render to
    assert report.PERFORMANCE_PAGE.read_text() == report.render_performance(latest), \
        "docs/performance.md is stale: python -m benchmarks report"


def test_the_performance_page_shows_what_ran_and_lists_what_did_not(tmp_path):
    # given a full freshness run, a quick one beside it, and no other results
    from benchmarks.pages import report
    from benchmarks.__main__ import NAMES

    result = dict(benchmark="freshness", quick=False, date="2026-01-02 03:04:05 UTC",
                  command="python -m benchmarks freshness",
                  machine=dict(cpus=2, python="3.11.7", platform="Linux", load_average=[1.0, 1.5, 2.0]),
                  config=dict(users=2000, rate=100, seconds=20, deadline=10.0), events=2000, achieved_rate=99.99,
                  measured=2000, timed_out=0, p50_ms=21.46, p99_ms=80.51, max_ms=111.2, failed_jobs=0)
    (tmp_path / "freshness.json").write_text(json.dumps(result))
    (tmp_path / "freshness-quick.json").write_text(json.dumps({**result, "quick": True, "p99_ms": 5.0}))
    page = report.render_performance(report.load_latest(tmp_path))
    # then the full run's figures are on the page with its command, date and load, rounded; the quick run's are not
    assert "| 2,000 | 100 | 21.5 | 80.5 | 111 | 0 | 0 |" in page and "5.00" not in page
    assert "`python -m benchmarks freshness`, 2026-01-02 03:04:05 UTC" in page and "1.0 / 1.5 / 2.0" in page
    # and every other benchmark is listed as not run, with its command, rather than given figures
    for name in set(NAMES) - {"report", "freshness"}:
        assert f"**{name}**: not run on this machine yet: `python -m benchmarks {name}`" in page, name
    # and a changed figure changes the page
    result["p99_ms"] = 95.0
    (tmp_path / "freshness.json").write_text(json.dumps(result))
    assert report.render_performance(report.load_latest(tmp_path)) != page


def test_every_benchmark_has_a_section_on_the_performance_page():
    from benchmarks.__main__ import NAMES
    from benchmarks.pages.performance_sections import SECTIONS

    assert list(SECTIONS) == [n for n in NAMES if n != "report"]


def test_a_result_names_the_settings_that_wrote_it():
    from benchmarks.pages.provenance import command

    # an ablation at another cut than 0.8 names the cut; at 0.8 it need not
    assert command(dict(benchmark="ablation-pf-ml-1m-cut0.9", log="pf-ml-1m", cut=0.9)) == \
        "PREFEED_VAR_DIR=<pf-ml-1m> PREFEED_BENCH_CUT=0.9 python -m benchmarks ablation"
    assert command(dict(benchmark="ablation-pf-ml-1m", log="pf-ml-1m", cut=0.8)) == \
        "PREFEED_VAR_DIR=<pf-ml-1m> python -m benchmarks ablation"
