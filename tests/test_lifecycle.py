"""The model lifecycle: immutable bundles listed, promoted and rolled back (HISTORY next to CURRENT), `train`
refusing a model that does not beat the best baseline unless forced, and `precompute --stale` rebuilding the feeds
of a bundle that is no longer current. Every test works on a model directory of its own."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import time

import numpy as np
import pytest
from catboost import CatBoost

from precompute.data import bulk, engine as db
from precompute.data.synthetic import Marketplace
from precompute.ranking import bundle, shown
from precompute.pipeline.pipeline import Pipeline
from precompute.units import DAY

from tests.conftest import every_user_with_history, manage


@pytest.fixture
def own(settings, world, tmp_path):
    """``settings`` with a model directory of its own holding two bundles, A (the session's) and B (a byte copy
    under a later version), and no CURRENT."""
    model_dir = tmp_path / "models"
    model_dir.mkdir()
    a, b = world.version, world.version + 1
    for v in (a, b):
        shutil.copytree(world.settings.model_dir / str(a), model_dir / str(v))
    return dataclasses.replace(settings, model_dir=model_dir), a, b


def _history(model_dir) -> list[tuple[int, str]]:
    return [(p.version, p.how) for p in bundle.history(model_dir)]


def _one_line_error(done, code: int, fragment: str) -> str:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], done.stderr
    return lines[0]


def test_promote_then_rollback_returns_to_the_previous_current(own):
    s, a, b = own
    # given A promoted, then B
    assert manage(s, "models", "promote", str(a)).returncode == 0
    done = manage(s, "models", "promote", str(b))
    assert done.returncode == 0, done.stderr
    assert bundle.current_version(s.model_dir) == b
    # when rolled back
    done = manage(s, "models", "rollback")
    # then A is current again and HISTORY records the three steps, ending with the current one
    assert done.returncode == 0, done.stderr
    assert f"bundle {a} is current" in done.stdout
    assert bundle.current_version(s.model_dir) == a
    assert _history(s.model_dir) == [(a, "promote"), (b, "promote"), (a, "rollback")]
    # and a second rollback has nothing earlier than A: one line, non-zero exit, nothing changed
    _one_line_error(manage(s, "models", "rollback"), 3, "no earlier current bundle to roll back to")
    assert bundle.current_version(s.model_dir) == a
    assert len(_history(s.model_dir)) == 3


def test_promoting_a_missing_or_broken_bundle_changes_nothing(own):
    s, a, b = own
    bundle.promote(s.model_dir, a)
    broken = s.model_dir / str(b) / "model.cbm"
    broken.write_bytes(broken.read_bytes()[:100])
    # when a version that does not exist, or one whose model is truncated, is promoted (old alias too)
    _one_line_error(manage(s, "models", "promote", "42"), 3, "model bundle 42 not found")
    _one_line_error(manage(s, "promote", str(b)), 3, "truncated")
    # then CURRENT and HISTORY are as they were
    assert bundle.current_version(s.model_dir) == a
    assert _history(s.model_dir) == [(a, "promote")]


def test_an_unreadable_history_never_leaves_current_changed_without_its_line(own):
    s, a, b = own
    bundle.promote(s.model_dir, a)
    # given a HISTORY holding bytes that are not UTF-8
    history = s.model_dir / "HISTORY"
    history.write_bytes(history.read_bytes() + b"\xff junk\n")
    # when B is promoted, then it is current and its line follows the ones that parse
    assert manage(s, "models", "promote", str(b)).returncode == 0
    assert bundle.current_version(s.model_dir) == b and _history(s.model_dir) == [(a, "promote"), (b, "promote")]
    # and given a HISTORY that cannot be read at all, promotion and rollback are one line each, CURRENT unchanged
    history.unlink()
    history.mkdir()
    _one_line_error(manage(s, "models", "promote", str(a)), 3, "HISTORY")
    _one_line_error(manage(s, "models", "rollback"), 3, "HISTORY")
    assert bundle.current_version(s.model_dir) == b


def test_rollback_skips_bundles_that_no_longer_load_and_walks_back_like_a_stack(own, world):
    s, a, b = own
    c = b + 1
    shutil.copytree(s.model_dir / str(a), s.model_dir / str(c))
    # given A, B, C promoted in turn, and B's files damaged since
    for v in (a, b, c):
        bundle.promote(s.model_dir, v)
    (s.model_dir / str(b) / "sources" / "covisit_weight.npy").unlink()
    # when rolled back, B is skipped and A becomes current
    assert bundle.rollback(s.model_dir).version == a
    # and given C promoted again after a crash wrote CURRENT but not its HISTORY line
    (s.model_dir / "CURRENT").write_text(f"{c}\n")
    # then a rollback still treats C as the newest promotion and returns to A
    assert bundle.rollback(s.model_dir).version == a
    assert _history(s.model_dir)[-1] == (a, "rollback")


def test_concurrent_promotions_keep_every_history_line(own):
    import threading

    s, a, b = own
    # given eight threads promoting A and B at the same time, five times each
    errors = []

    def promote_many(k: int) -> None:
        try:
            for i in range(5):
                bundle.promote(s.model_dir, (a, b)[(k + i) % 2], how=f"promote t{k}")
        except Exception as exc:            # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=promote_many, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # then HISTORY holds all forty promotions and ends with the version CURRENT names
    assert not errors
    hist = bundle.history(s.model_dir)
    assert len(hist) == 40
    assert sorted(p.how for p in hist) == sorted(f"promote t{k}" for k in range(8) for _ in range(5))
    assert hist[-1].version == bundle.current_version(s.model_dir)


def test_models_list_shows_every_bundle_newest_first_with_metrics_or_dashes(own):
    s, a, b = own
    old, broken = b + 1, b + 2
    # given A with metrics, an older-style bundle without them (B's copy), a broken one, and B current
    shutil.copytree(s.model_dir / str(a), s.model_dir / str(old))
    meta_path = s.model_dir / str(old) / "meta.json"
    meta_path.write_text(json.dumps({k: v for k, v in json.loads(meta_path.read_text()).items() if k != "metrics"}))
    shutil.copytree(s.model_dir / str(a), s.model_dir / str(broken))
    (s.model_dir / str(broken) / "model.cbm").unlink()
    bundle.promote(s.model_dir, b)
    # when listed as JSON
    done = manage(s, "models", "list", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    # then one row per bundle, newest first, the current one marked, metrics where recorded, broken named
    assert [r["version"] for r in rows] == [broken, old, b, a]
    assert [r["current"] for r in rows] == [False, False, True, False]
    meta = json.loads((s.model_dir / str(a) / "meta.json").read_text())["metrics"]
    by_version = {r["version"]: r for r in rows}
    assert by_version[a]["ndcg10"] == meta["ndcg10"] and by_version[a]["baseline_ndcg10"] == meta["baseline_ndcg10"]
    assert by_version[a]["baseline"] == meta["baseline"] and by_version[a]["train_rows"] == meta["train_rows"]
    assert by_version[a]["data_clock"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(meta["data_clock"]))
    assert by_version[old]["ndcg10"] is None and by_version[old]["broken"] is None
    assert "model.cbm is missing" in by_version[broken]["broken"]
    # and as a table: the marker on B's row only, dashes for what the old bundle lacks, the broken one named
    done = manage(s, "models", "list")
    assert done.returncode == 0, done.stderr
    lines = {int(m.group(2)): m.group(1) for line in done.stdout.splitlines()
             if (m := re.match(r"^(\*?)\s*(\d{8,})\s", line))}
    assert lines == {broken: "", old: "", b: "*", a: ""}
    text = {v: next(ln for ln in done.stdout.splitlines() if str(v) in ln.split()) for v in (a, old, broken)}
    assert f"{meta['ndcg10']:.4f}" in text[a] and f"{meta['baseline_ndcg10']:.4f} ({meta['baseline']})" in text[a]
    assert "—" in text[old] and "broken: " in text[broken]


def test_the_promotion_rule_is_strictly_better_than_the_best_baseline():
    assert bundle.beats_baseline(dict(ndcg10=0.2, baseline_ndcg10=0.1))
    assert not bundle.beats_baseline(dict(ndcg10=0.1, baseline_ndcg10=0.1))
    assert not bundle.beats_baseline(dict(ndcg10=0.05, baseline_ndcg10=0.1))
    assert not bundle.beats_baseline(dict(ndcg10=0.2))


def _popularity_is_the_future(now: float) -> Marketplace:
    """A log where the future is exactly the most popular item, in both of training's periods: 60 users view P1
    (and fewer each P2..P5) first; then 30 users with three items of their own view P1 (the training period's
    labels), and after that 50 other users with items of their own view P1 (the validation period). Popularity
    ranks P1 first for every validation user (NDCG@10 = 1), so no model can do strictly better. The first two
    phases each share one time stamp, so training's cuts (quantiles 0.7 and 0.85 of event time, which the test sets:
    440 of 520 events in the first phase, 30 in the second) fall exactly on them."""
    n_items, fillers, learners, judged = 60, 60, 30, 50
    f = np.arange(fillers)
    filler_items = [(u, p) for p, n in zip(range(1, 6), (60, 50, 40, 30, 20)) for u in f[:n]]
    own = fillers + np.arange(learners + judged)
    own_items = [(u, 6 + (3 * u + k) % (n_items - 5)) for u in own for k in range(3)]
    learned = [(u, 1) for u in own[:learners]]
    future = [(u, 1) for u in own[learners:]]
    ev = np.array(filler_items + own_items + learned + future) + [1, 0]
    n_first = len(filler_items) + len(own_items)
    ts = np.r_[np.full(n_first, now - 10 * DAY), np.full(len(learned), now - 5 * DAY),
               now - DAY + np.arange(len(future), dtype=float)]
    users = np.arange(1, fillers + learners + judged + 1)
    items = np.arange(1, n_items + 1)
    return Marketplace(
        item_id=items, item_category=items % 4, item_price=np.full(n_items, 20.0),
        item_created_at=np.full(n_items, now - 100 * DAY), item_active=np.ones(n_items, dtype=bool),
        item_quality=np.full(n_items, 0.5), item_photos=np.full(n_items, 3),
        item_seller_rating=np.full(n_items, 4.0), user_id=users,
        user_created_at=np.full(len(users), now - 200 * DAY),
        user_history_version=np.bincount(ev[:, 0], minlength=len(users) + 1)[1:],
        event_user=ev[:, 0], event_item=ev[:, 1], event_type=np.ones(len(ev), dtype=np.int64), event_ts=ts)


def test_train_refuses_a_model_that_does_not_beat_the_baseline_unless_forced(own, tmp_path):
    s, _, _ = own
    # (one training cut at 0.7 and the validation cut at 0.85, which the log's phases are built around)
    s = dataclasses.replace(s, database_url=f"sqlite:///{tmp_path / 'popular.db'}", model_dir=tmp_path / "models",
                            train_periods=1, train_cut_quantile=0.7, train_valid_quantile=0.85)
    engine = db.make_engine(s.database_url)
    db.init_db(engine, s)
    bulk.load(engine, _popularity_is_the_future(time.time()), s)
    engine.dispose()
    # given a log whose future is exactly its most popular item, and no bundle yet: the first one trained on it is
    # promoted although it cannot beat popularity (else nothing could serve), saying so
    done = manage(s, "train", "--iterations", "10", "--users", "50")
    assert done.returncode == 0, done.stderr
    a = bundle.current_version(s.model_dir)
    assert "no bundle is current: promoting it" in done.stdout and _history(s.model_dir) == [(a, "train (first bundle)")]
    before = bundle.versions(s.model_dir)
    # when trained again on it
    done = manage(s, "train", "--iterations", "10", "--users", "50")
    # then the new bundle is written but not promoted: one line naming both numbers and the version, exit 5
    line = _one_line_error(done, 5, "not promoted")
    new = [v for v in bundle.versions(s.model_dir) if v not in before]
    assert len(new) == 1
    model, baseline = re.search(r"model (\d\.\d{4}), best baseline \(\w+\) (\d\.\d{4})", done.stdout).groups()
    assert baseline == "1.0000"
    assert f"bundle {new[0]} not promoted" in line and f"NDCG@10 {model} " in line and f" {baseline};" in line
    assert bundle.current_version(s.model_dir) == a
    # and with --force the next one is promoted, saying so
    done = manage(s, "train", "--iterations", "10", "--users", "50", "--force")
    assert done.returncode == 0, done.stderr
    forced = [v for v in bundle.versions(s.model_dir) if v not in before and v not in new]
    assert "promoting it anyway (--force)" in done.stdout and f"bundle {forced[0]} is current" in done.stdout
    assert bundle.current_version(s.model_dir) == forced[0]
    assert _history(s.model_dir)[-1] == (forced[0], "train --force")


def test_train_writes_an_experiments_control_without_the_shown_columns_and_promotes_nothing(own):
    s, a, _ = own
    bundle.promote(s.model_dir, a)
    # given the shown columns off, a control without them is refused: it would have nothing to leave out
    _one_line_error(manage(s, "train", "--without-shown"), 2, "PREFEED_RANK_SHOWN")
    # when the control is trained with them on, not to be promoted
    on = {"PREFEED_RANK_SHOWN": "true"}
    done = manage(s, "train", "--iterations", "20", "--users", "100", "--without-shown", "--no-promote", extra_env=on)
    assert done.returncode == 0, done.stderr
    version = int(re.search(r"bundle (\d+) written, not promoted", done.stdout).group(1))
    # then the bundle is written, the current one stays current, and the model learned nothing from the columns
    assert bundle.current_version(s.model_dir) == a
    model = CatBoost().load_model(str(s.model_dir / str(version) / "model.cbm"))
    importance = dict(zip(model.feature_names_, model.get_feature_importance(type="PredictionValuesChange")))
    assert all(importance[c] == 0 for c in shown.COLUMNS) and sum(importance.values()) > 0, importance


def test_precompute_stale_rebuilds_the_feeds_of_a_bundle_no_longer_current(own, world, r):
    s, a, b = own
    # given every user's feed built by bundle A
    bundle.promote(s.model_dir, a)
    pipeline = Pipeline(s, world.engine, r)
    pipeline.load()
    users = every_user_with_history(world)
    pipeline.recompute(users)
    # and then B promoted, and half of the users' feeds rebuilt by it (a worker that switched)
    bundle.promote(s.model_dir, b)
    assert pipeline.refresh() and pipeline.bundle.version == b
    rebuilt, old = users[::2], users[1::2]
    pipeline.recompute(rebuilt)
    kept = {u: r.get(f"{s.key_prefix}{{u:{u}}}:feed") for u in rebuilt}
    # then the other half still read, built by A, until rebuilt
    assert {pipeline.store.read(u).header.model_version for u in old} == {a}
    # when `precompute --stale --inline` runs
    done = manage(s, "precompute", "--stale", "--inline")
    # then exactly A's feeds are rebuilt, by B, and B's are left as they were
    assert done.returncode == 0, done.stderr
    assert f"{len(old)} feeds written" in done.stdout
    assert {pipeline.store.read(u).header.model_version for u in users} == {b}
    assert {u: r.get(f"{s.key_prefix}{{u:{u}}}:feed") for u in rebuilt} == kept
