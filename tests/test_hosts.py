"""The multi-host rebuild (``python -m benchmarks hosts --quick``): worker hosts as network namespaces sharing one
database, one queue Redis and one feed store. It needs root and ``ip netns``; elsewhere the test is skipped with
the reason, and the benchmark says that reason in one line."""

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from benchmarks.netns import unavailable
from benchmarks.servers import missing_programs
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
    hosts = ["-m", "benchmarks", "hosts", "--quick"]
    # when an unprivileged user runs it: this one, or `nobody` when the suite runs as root
    if os.geteuid() != 0:
        done = subprocess.run([sys.executable, *hosts], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=60)
    else:
        with _as_nobody() as (argv, code):
            done = subprocess.run([*argv, *hosts], cwd=code, env=env, capture_output=True, text=True, timeout=60)
    # then it refuses in one line, saying why and what to do
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == ["Error: hosts: needs root (network namespaces): run it as root, "
                                                "e.g. sudo .venv/bin/python -m benchmarks hosts"]


@contextlib.contextmanager
def _as_nobody():
    """From root: the argv prefix running this Python as ``nobody``, and a directory holding a copy of the
    project's packages for it to run from. The checkout itself may be private to root (a clone inside a mode-700
    ``mktemp -d``), so the copy is in a directory anyone can read; the interpreter is this virtualenv's, reached
    through any symlink to it (a ``.venv`` linked to a shared one). Skips when ``nobody`` still cannot run it (a
    virtualenv inside a private checkout)."""
    if not shutil.which("setpriv"):
        pytest.skip("needs setpriv (util-linux) to run it as the unprivileged user nobody")
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("needs the user nobody to run it unprivileged")
    python = sys.executable
    if sys.prefix != sys.base_prefix:           # a virtualenv: its own interpreter, under its real path
        python = os.path.join(os.path.realpath(sys.prefix), "bin", os.path.basename(sys.executable))
    argv = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups", "--", python]
    code = Path(tempfile.mkdtemp(prefix="prefeed-as-nobody-"))
    try:
        code.chmod(0o755)
        for package in sorted(p for p in ROOT.iterdir() if (p / "__init__.py").is_file() and p.name != "tests"):
            shutil.copytree(package, code / package.name, ignore=shutil.ignore_patterns("__pycache__", "results"))
        probe = subprocess.run([*argv, "-c", "import click"], cwd=code, capture_output=True, text=True, timeout=60)
        if probe.returncode:
            why = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]
            pytest.skip(f"as root, nobody cannot run {python} with its packages ({why})")
        yield argv, code
    finally:
        shutil.rmtree(code)
