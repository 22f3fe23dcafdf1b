"""The dashboard in a real browser: the API under gunicorn (``manage.py serve``) on a loopback port, Chromium headless
logging in with basic auth (the admin token as password in the URL), the DOM it renders and a screenshot.

Skipped when Chromium is not installed (``apt-get install chromium``)."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

from cli.net import free_port
from tests.conftest import ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")


def chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage",
                           f"--user-data-dir={tmp_path / 'chromium'}", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def api_url(settings):
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "serve", "--port", str(port), "--workers", "1"],
                            env=settings.child_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(base + "/livez", timeout=2)
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"the API did not start: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)
    yield base
    proc.terminate()           # gunicorn's master (manage.py serve execs it): stops its workers
    proc.wait(timeout=30)


def test_a_browser_logs_in_and_looks_a_user_up(api_url, pipeline, user_id, tmp_path):
    # given a user with a precomputed feed, and the page the API serves them
    pipeline.recompute([user_id])
    served = json.loads(urllib.request.urlopen(f"{api_url}/feed/{user_id}?limit=20").read())
    assert served["source"] == "precomputed"
    url = (f"http://admin:test-admin-token-0123456789abcdef@{api_url.removeprefix('http://')}"
           f"/dashboard?user={user_id}&limit=20")
    # when Chromium opens the dashboard with the token as basic-auth password
    dom = chromium(tmp_path, "--dump-dom", url)
    shot = tmp_path / "dashboard.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,1600", "--hide-scrollbars", url)
    # then the page rendered: the status cards and the lookup of that user
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    for section in ('id="queue"', 'id="workers"', 'id="model"', 'id="feeds"', 'id="dirty"', 'id="freshness"'):
        assert section in html, section
    assert f'data-user="{user_id}"' in html
    # and the lookup lists exactly the items /feed serves, in order
    table = re.search(r'<table id="feed-items">(.*?)</table>', html, re.S).group(1)
    assert [int(i) for i in re.findall(r'data-item="(\d+)"', table)] == [it["item_id"] for it in served["items"]]
    # and a screenshot was written (docs/dashboard.png is one taken this way)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    if os.environ.get("PREFEED_DASHBOARD_SHOT"):
        shutil.copy(shot, os.environ["PREFEED_DASHBOARD_SHOT"])


def test_a_browser_without_the_token_is_refused(api_url, tmp_path):
    # given no credentials: the 401's basic-auth challenge would make a browser prompt; headless, the load fails
    dom = chromium(tmp_path, "--dump-dom", f"{api_url}/dashboard")
    assert 'id="queue"' not in dom.stdout and "ERR_INVALID_AUTH_CREDENTIALS" in dom.stderr
    # given a wrong password: the 403's refusal is what renders
    dom = chromium(tmp_path, "--dump-dom", f"http://admin:wrong@{api_url.removeprefix('http://')}/dashboard")
    assert "invalid admin token" in dom.stdout and 'id="queue"' not in dom.stdout
