"""The multi-host rebuild (``python -m benchmarks hosts --quick``): worker hosts as network namespaces sharing one
database, one queue Redis and one feed store. It needs root and ``ip netns``; elsewhere the test is skipped with
the reason, and the benchmark says that reason in one line."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from benchmarks.lab.netns import unavailable
from benchmarks.lab.servers import missing_programs
from precompute.settings import without_prefeed_config
from tests.conftest import ROOT


@pytest.mark.timeout(240)
def test_a_full_rebuild_is_split_across_hosts(tmp_path):
    reason = unavailable() or missing_programs()
    if reason:
        pytest.skip(reason)
    env = {**without_prefeed_config(), "PREFEED_BENCH_RESULTS": str(tmp_path)}

    # when the quick benchmark rebuilds every feed with one worker on h1, then with one worker on each host
    done = subprocess.run([sys.executable, "-m", "benchmarks", "hosts", "--quick"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=220)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "hosts-quick.json").read_text())
    one, two = result["runs"]

    # then each rebuild wrote every user's feed into the feed store, and no job failed
    for run in (one, two):
        assert run["feeds_written"] == run["users"] > 0 and run["failed_jobs"] == 0, run
        assert sum(run["users_by_host"].values()) == run["users"], run
    # and which host ran a job is the address the queue Redis saw its worker connect from: one worker, on h1 ...
    assert one["users_by_host"] == {"h1": one["users"], "h2": 0}
    assert {a.split(":")[0] for a in one["worker_addresses"].values()} == {"10.213.1.2"}
    # ... then one on each host, and both did part of the rebuild
    assert {a.split(":")[0] for a in two["worker_addresses"].values()} == {"10.213.1.2", "10.213.2.2"}
    assert two["users_by_host"]["h1"] > 0 and two["users_by_host"]["h2"] > 0, two["users_by_host"]
    assert two["hosts"] == 2 and result["speedup"]["2"] > 0
    # and the namespaces it made are gone
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [ns for ns in result["namespaces"] if ns in left], left


def test_without_root_it_says_why_in_one_line():
    env = {**without_prefeed_config(), "PREFEED_BENCH_RESULTS": "/nonexistent"}
    # when an unprivileged user runs it: this one, or, when the suite runs as root, root inside a user namespace
    # of its own (euid 65534 there, no capability outside it; files still reached as their owner, so the checkout
    # and this virtualenv's interpreter stay readable wherever they are)
    argv = [sys.executable, "-m", "benchmarks", "hosts", "--quick"]
    if os.geteuid() == 0:
        argv = [*_unprivileged(), *argv]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    # then it refuses in one line, saying why and what to do
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == ["Error: hosts: needs root (network namespaces): run it as root, "
                                                "e.g. sudo .venv/bin/python -m benchmarks hosts"]


def _unprivileged() -> list[str]:
    """From root: the argv prefix that runs a command unprivileged, in a new user namespace; skips when this
    machine does not allow one."""
    if not shutil.which("unshare"):
        pytest.skip("needs unshare (util-linux) to run it unprivileged")
    probe = subprocess.run(["unshare", "--user", sys.executable, "-c", "import os; print(os.geteuid())"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode or probe.stdout.strip() == "0":
        why = (probe.stderr.strip().splitlines() or [f"euid {probe.stdout.strip()}"])[-1]
        pytest.skip(f"as root, cannot run unprivileged in a user namespace ({why})")
    return ["unshare", "--user"]
