"""Experiments: users are placed by two documented hashes, the same in every process, uniformly, in at most one
running experiment; ``experiments create|list|stop`` take disjoint slots, free them, promote a model winner, and
refuse every bad input with one line, exit 2 and nothing written."""

import dataclasses
import hashlib
import json
import shutil
import subprocess
import uuid
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from sqlalchemy import inspect, select, text

from precompute.data import engine as db
from precompute.data.tables import StoredExperiment
from precompute.errors import InvalidInput
from precompute.experiments import Arm, Experiment, assign, assign_one, registry
from precompute.settings import Settings
from tests.conftest import ROOT, delete_own_keys, manage, own_database

#: Two running experiments, as a program of its own defines them (run here and in child processes).
RUNNING = """
from precompute.experiments import Arm, Experiment
RUNNING = [Experiment(4, "ranker-vs-recent", (Arm("ranker", "model:20260101000000", 0.5),
                                             Arm("recent", "recent:1d", 0.3), Arm("popular", "popular", 0.2)),
                      0.3, (0.0, 0.3), "running", 0.0, None, None),
           Experiment(9, "a-a", (Arm("a", "latent", 0.5), Arm("b", "latent", 0.5)), 0.5, (0.3, 0.8), "running", 0.0,
                      None, None)]
"""
IDS = "np.arange(-2_000, 8_000, dtype=np.int64) * 7919"


def running_experiments() -> list[Experiment]:
    scope: dict = {}
    exec(RUNNING, scope)
    return scope["RUNNING"]


def reference_hash(data: bytes) -> float:
    """The documented hash, written out plainly: BLAKE2b with an 8-byte digest, little-endian, top 53 bits."""
    return (int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> 11) / 2**53


@pytest.fixture
def own(tmp_path_factory, redis_url):
    """Settings and an engine on a database of this test's own, tables created, no model bundle; the test server's
    Redis under a prefix and queue of its own (the commands queue the rebuild of an experiment's users there)."""
    yield from _own(tmp_path_factory, redis_url)


@pytest.fixture(scope="module")
def shared(tmp_path_factory, redis_url):
    """Like ``own``, for the tests of refusals (which must leave it as it was): a running experiment ``taken``
    holding half the users and a stopped one ``old``."""
    for settings, engine in _own(tmp_path_factory, redis_url):
        registry.create(engine, "taken", [("a", "popular"), ("b", "recent:1d")], None, 0.5, settings.model_dir)
        registry.create(engine, "old", [("a", "popular"), ("b", "covisit")], None, 0.1, settings.model_dir)
        registry.stop(engine, "old", None)
        yield settings, engine


def _own(tmp_path_factory, redis_url: str):
    for url in own_database(tmp_path_factory, "experiments"):
        tag = uuid.uuid4().hex[:10]
        settings = Settings(database_url=url, model_dir=tmp_path_factory.mktemp("models"),
                            var_dir=tmp_path_factory.mktemp("var"), redis_url=redis_url,
                            key_prefix=f"pftest:{tag}:", queue_name=f"pftest-{tag}")
        engine = db.make_engine(url)
        db.init_db(engine, settings)
        yield settings, engine
        engine.dispose()
        delete_own_keys(settings)


def table(engine) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(select(StoredExperiment.__table__).order_by(StoredExperiment.id))]


def one_line_error(done, code: int, fragment: str) -> None:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert fragment in done.stderr, done.stderr


def test_users_are_placed_by_the_documented_hashes_and_rule():
    # given two running experiments and ids consecutive, sparse, negative and past 2**53
    running = running_experiments()
    ids = np.array([0, 1, 2, 7, -1, -(2**63), 2**63 - 1, 2**53 + 1, *range(1_000, 3_000)], dtype=np.int64)
    which, arm = assign(running, ids)
    for k, uid in enumerate(ids.tolist()):
        # then the slot hash is BLAKE2b of b"prefeed-experiments:" and the decimal id, and the experiment is the
        # one whose [start, end) holds it
        h0 = reference_hash(b"prefeed-experiments:" + str(uid).encode())
        expected = next((i for i, e in enumerate(running) if e.slot[0] <= h0 < e.slot[1]), -1)
        assert which[k] == expected, uid
        # and the arm is the first whose cumulative share exceeds the arm hash of "<name>:<id>:<user id>"
        if expected >= 0:
            e = running[expected]
            h1 = reference_hash(f"{e.name}:{e.id}:{uid}".encode())
            bounds = np.cumsum([a.share for a in e.arms])
            assert arm[k] == min(int(np.sum(bounds <= h1)), len(e.arms) - 1), uid
        else:
            assert arm[k] == -1
        # and the one-user path (the API's) and each experiment's own ``arm_of`` say the same
        assert assign_one(running, uid) == (which[k], arm[k])
        for i, e in enumerate(running):
            assert e.arm_of(np.array([uid]))[0] == (arm[k] if which[k] == i else -1)


def test_assignment_is_the_same_in_two_separate_processes():
    # given two child processes with different string-hash seeds, each placing 10k ids
    code = f"import json, sys\nimport numpy as np\nfrom precompute.experiments import assign\n{RUNNING}\n" \
           f"which, arm = assign(RUNNING, {IDS})\nprint(json.dumps([which.tolist(), arm.tolist()]))\n"
    answers = []
    for seed in ("1", "2"):
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                              env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"})
        assert done.returncode == 0, done.stderr
        answers.append(json.loads(done.stdout))
    # then both place every user alike, as this process does
    which, arm = assign(running_experiments(), eval(IDS))
    assert len(which) == 10_000 and (which >= 0).sum() > 5_000
    assert answers[0] == answers[1] == [which.tolist(), arm.tolist()]


def test_slots_and_arms_are_uniform_over_100k_users():
    from scipy.stats import chisquare

    # given an experiment of 30% of the users, arms of 0.5/0.3/0.2, and 100k consecutive ids
    e = running_experiments()[0]
    ids = np.arange(100_000, dtype=np.int64)
    arms = e.arm_of(ids)
    inside = arms >= 0
    # then 30% of the users are in it
    assert chisquare([inside.sum(), (~inside).sum()], [30_000, 70_000]).pvalue > 0.001
    # and its users split 0.5/0.3/0.2 between the arms, independently of the slot that took them in
    counts = np.bincount(arms[inside], minlength=3)
    assert chisquare(counts, inside.sum() * np.array([0.5, 0.3, 0.2])).pvalue > 0.001
    # and the slot hash itself is uniform over ten equal slots
    deciles = np.bincount([int(10 * reference_hash(b"prefeed-experiments:" + str(u).encode()))
                           for u in range(0, 100_000, 10)], minlength=10)
    assert chisquare(deciles).pvalue > 0.001


def test_a_user_is_in_at_most_one_running_experiment(own):
    # given experiments created until the users are all taken, the last fitting only up to float rounding
    settings, engine = own
    for name, users in (("first", 0.2), ("second", 0.4), ("third", 0.4)):
        registry.create(engine, name, [("a", "popular"), ("b", "latent")], None, users, settings.model_dir)
    running = registry.running(engine)
    assert [e.name for e in running] == ["first", "second", "third"]
    ids = np.arange(10_000, dtype=np.int64)
    # then every user is in exactly one of them, the one ``assign`` names
    member = np.stack([e.arm_of(ids) >= 0 for e in running])
    assert (member.sum(axis=0) == 1).all()
    which, _ = assign(running, ids)
    assert (which == member.argmax(axis=0)).all()
    # and one more experiment finds no room, however small
    with pytest.raises(InvalidInput, match="no free slot"):
        registry.create(engine, "fourth", [("a", "popular"), ("b", "latent")], None, 0.01, settings.model_dir)


def test_experiments_take_disjoint_slots_refuse_one_that_does_not_fit_and_stop_frees_its_slot(own):
    settings, engine = own
    create = ("experiments", "create")
    # given two experiments created side by side
    done = manage(settings, *create, "first", "--arm", "ranker=popular", "--arm", "recent=recent:1d", "--users", "0.5")
    assert done.returncode == 0, done.stderr
    done = manage(settings, *create, "second", "--arm", "a=covisit", "--arm", "b=item_knn", "--share", "a=0.25",
                  "--share", "b=0.75", "--users", "0.4")
    assert done.returncode == 0, done.stderr
    # then they hold disjoint slots, the lowest free ones, with their arms and shares
    first, second = registry.running(engine)
    assert first.slot == (0.0, 0.5) and second.slot == (0.5, 0.9)
    assert first.arms == (Arm("ranker", "popular", 0.5), Arm("recent", "recent:1d", 0.5))
    assert second.arms == (Arm("a", "covisit", 0.25), Arm("b", "item_knn", 0.75))
    # and a third that does not fit is refused, with nothing written
    before = table(engine)
    one_line_error(manage(settings, *create, "third", "--arm", "a=popular", "--arm", "b=latent", "--users", "0.2"),
                   2, "no free slot for 0.2")
    assert table(engine) == before
    # and the list shows one line per experiment: name, status, share of users, arms with spec and share
    listed = manage(settings, "experiments", "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 3 and lines[1].split()[:3] == ["first", "running", "0.5"]
    assert "ranker popular 0.5, recent recent:1d 0.5" in lines[1] and "a covisit 0.25, b item_knn 0.75" in lines[2]
    # when the first stops, then its slot is free again and the third takes its lowest part
    done = manage(settings, "experiments", "stop", "first")
    assert done.returncode == 0, done.stderr
    done = manage(settings, *create, "third", "--arm", "a=popular", "--arm", "b=latent", "--users", "0.2")
    assert done.returncode == 0, done.stderr
    assert [(e.name, e.slot) for e in registry.running(engine)] == [("second", (0.5, 0.9)), ("third", (0.0, 0.2))]
    stopped = registry.all_experiments(engine)[0]
    assert (stopped.name, stopped.status, stopped.winner) == ("first", "stopped", None)
    assert stopped.stopped_at >= stopped.created_at


def test_experiments_created_at_once_take_disjoint_slots(own, monkeypatch):
    # given four threads creating an experiment of 30% of the users each at the same moment, each one slow to pick
    # its slot (so that, unless creations are serialized, all would pick it from the same running experiments)
    settings, engine = own
    pick = registry.free_slot

    def slow_pick(taken, users):
        time.sleep(0.3)
        return pick(taken, users)

    monkeypatch.setattr(registry, "free_slot", slow_pick)

    def create(k: int) -> str:
        try:
            registry.create(engine, f"at-once-{k}", [("a", "popular"), ("b", "latent")], None, 0.3, settings.model_dir)
            return "created"
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"

    with ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(create, range(4)))
    # then three take disjoint slots and the fourth is refused: there is no room left for it
    refused = [o for o in outcomes if o != "created"]
    assert len(refused) == 1 and refused[0].startswith("InvalidInput: no free slot"), outcomes
    slots = sorted(e.slot for e in registry.running(engine))
    assert len(slots) == 3 and all(a[1] <= b[0] for a, b in zip(slots, slots[1:])), slots


CREATE = ("experiments", "create", "new")


@pytest.mark.parametrize("args,fragment", [
    ((*CREATE, "--arm", "a=model:12345", "--arm", "b=popular"), "no model bundle 12345"),
    ((*CREATE, "--arm", "a=model:current", "--arm", "b=popular"), "no model bundle is current"),
    ((*CREATE, "--arm", "a=model:latest", "--arm", "b=popular"), "model:<version>"),
    ((*CREATE, "--arm", "a=trending", "--arm", "b=popular"), "unknown method 'trending'"),
    ((*CREATE, "--arm", "a=recent:2d", "--arm", "b=popular"), "unknown window '2d'"),
    ((*CREATE, "--arm", "a=popular:1d", "--arm", "b=latent"), "popular takes no argument"),
    ((*CREATE, "--arm", "a=popular", "--arm", "b=latent", "--share", "a=0.5", "--share", "b=0.4"), "sum to 0.9"),
    ((*CREATE, "--arm", "a=popular", "--arm", "b=latent", "--share", "a=0", "--share", "b=1"), "above 0"),
    ((*CREATE, "--arm", "a=popular", "--arm", "b=latent", "--share", "a=-0.5", "--share", "b=1.5"), "above 0"),
    ((*CREATE, "--arm", "a=popular", "--arm", "b=latent", "--share", "a=1"), "but not b"),
    ((*CREATE, "--arm", "a=popular", "--arm", "b=latent", "--share", "c=1"), "no arm of that name"),
    ((*CREATE, "--arm", "a=popular", "--arm", "b=latent", "--share", "a=half"), "a share is a number"),
    ((*CREATE, "--arm", "a=popular"), "at least 2 arms"),
    ((*CREATE, "--arm", "a=popular", "--arm", "a=latent"), "'a' is used twice"),
    ((*CREATE, "--arm", "A=popular", "--arm", "b=latent"), "arm name 'A'"),
    ((*CREATE, "--arm", "popular", "--arm", "b=latent"), "expected NAME=SPEC"),
    (("experiments", "create", "taken", "--arm", "a=popular", "--arm", "b=latent", "--users", "0.1"),
     "named 'taken' exists already"),
    (("experiments", "create", "old", "--arm", "a=popular", "--arm", "b=latent", "--users", "0.1"),
     "named 'old' exists already"),
    ((*CREATE, "--arm", "a=popular", "--arm", "b=latent", "--users", "0"), "--users 0"),
    ((*CREATE, "--arm", "a=popular", "--arm", "b=latent", "--users", "1.5"), "--users 1.5"),
    ((*CREATE, "--arm", "a=popular", "--arm", "b=latent", "--users", "0.6"), "no free slot"),
    (("experiments", "stop", "nothing"), "no experiment named 'nothing'"),
    (("experiments", "stop", "old"), "stopped already"),
    (("experiments", "stop", "taken", "--winner", "c"), "not an arm of 'taken'"),
    (("experiments", "stop", "taken", "--winner", "b"), "a simple method cannot become the default ranker"),
])
def test_every_bad_input_is_one_line_exit_2_and_nothing_written(shared, args, fragment):
    # given the experiments table as it is
    settings, engine = shared
    before = table(engine)
    # when a command is given a bad input, then it says so in one line and exits 2, and the table is unchanged
    one_line_error(manage(settings, *args), 2, fragment)
    assert table(engine) == before and len(before) == 2


def test_stop_with_a_model_winner_promotes_its_bundle(own, world):
    # given two bundles (copies of the trained one), the first current, and an experiment of the current against
    # the other
    settings, engine = own
    models = settings.model_dir
    for version in ("1001", "1002"):
        shutil.copytree(world.settings.model_dir / str(world.version), models / version)
    (models / "CURRENT").write_text("1001\n")
    settings = dataclasses.replace(world.settings, database_url=settings.database_url, model_dir=models)
    done = manage(settings, "experiments", "create", "next", "--arm", "now=model:current", "--arm", "new=model:1002")
    assert done.returncode == 0, done.stderr
    # then model:current was pinned to the version current at creation
    assert registry.running(engine)[0].arms == (Arm("now", "model:1001", 0.5), Arm("new", "model:1002", 0.5))
    # when it stops with the second as winner
    done = manage(settings, "experiments", "stop", "next", "--winner", "new")
    assert done.returncode == 0, done.stderr
    # then that bundle is current, its promotion recorded, and the experiment stopped with its winner
    assert (models / "CURRENT").read_text().strip() == "1002"
    assert (models / "HISTORY").read_text().splitlines()[-1].endswith("experiment next")
    stopped = registry.all_experiments(engine)[0]
    assert (stopped.status, stopped.winner) == ("stopped", "new") and not registry.running(engine)


def test_a_winner_whose_bundle_fails_its_checks_stops_nothing(own):
    # given an experiment of two bundle versions, the winner's bundle since emptied
    settings, engine = own
    for version in ("1001", "1002"):
        (settings.model_dir / version).mkdir()
    with engine.begin() as conn:            # (as stored when the bundles were whole: creation checks them)
        conn.execute(StoredExperiment.__table__.insert().values(
            name="broken", arms=json.dumps([{"name": "a", "spec": "model:1001", "share": 0.5},
                                            {"name": "b", "spec": "model:1002", "share": 0.5}]),
            users=1.0, slot_start=0.0, slot_end=1.0, status="running", created_at=0.0))
    before = table(engine)
    # when it stops with the broken bundle as winner, then the bundle's error is one line (exit 3) and it runs on
    one_line_error(manage(settings, "experiments", "stop", "broken", "--winner", "b"), 3, "model bundle 1002")
    assert table(engine) == before and not (settings.model_dir / "CURRENT").exists()


def test_init_db_adds_the_experiments_table_to_a_database_of_an_earlier_version(own):
    # given a database of the version before experiments
    settings, engine = own
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE experiments"))
    assert "experiments" not in inspect(engine).get_table_names()
    # when init-db runs, then the table is there and an experiment can be created
    done = manage(settings, "init-db")
    assert done.returncode == 0, done.stderr
    done = manage(settings, "experiments", "create", "later", "--arm", "a=popular", "--arm", "b=latent")
    assert done.returncode == 0, done.stderr
    assert [e.name for e in registry.running(engine)] == ["later"]
