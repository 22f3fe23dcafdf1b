"""The API as it is deployed, for tests: under gunicorn as ``manage.py serve`` runs it, and the shipped nginx in front.

nginx runs ``deploy/nginx/prefeed.conf`` as it is, with only its upstream address and its listen address replaced
(and, where a test asks, addresses added to its trusted front proxies), inside the few lines of ``nginx.conf`` a
process of its own needs (a pid file, logs and temporary folders in the test's folder, no daemon). Tests take the
nginx binary from the ``nginx`` fixture (tests/conftest.py), which skips them without one, or fails them where
``PREFEED_TEST_REQUIRE_NGINX=1`` (CI)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

from cli.net import free_port, wait_for_http
from precompute.settings import Settings
from tests.conftest import ROOT

SITE = ROOT / "deploy/nginx/prefeed.conf"
UPSTREAM, LISTEN = "server api:8000;", "listen 8000;"
#: The line that closes the site's list of trusted front proxies: a test's own go just before it.
FRONTS_END = "# ==== end of trusted front proxies"


@contextlib.contextmanager
def serve(settings: Settings, log_path: Path, *args: str) -> Iterator[str]:
    """``manage.py serve`` configured like ``settings``, on a free port with ``args``; yields its base URL once
    ``/healthz`` answers, and stops it at the end. Its stderr (gunicorn's log) goes to ``log_path``."""
    port = free_port()
    with log_path.open("w") as log:
        api = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "serve", "--port", str(port), *args],
                               env=settings.child_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
        try:
            wait_for_http(f"http://127.0.0.1:{port}/healthz", timeout=60)
            yield f"http://127.0.0.1:{port}"
        finally:
            api.terminate()
            api.wait(timeout=30)


def shipped_site(api_base: str, port: int, fronts: Sequence[str] = ()) -> str:
    """The shipped site, its upstream ``api_base`` (``http://host:port``), listening on 127.0.0.1:``port``, and
    trusting the front proxies at ``fronts`` (addresses or CIDRs) besides those it lists itself."""
    site = SITE.read_text()
    for line in (UPSTREAM, LISTEN, FRONTS_END):
        assert site.count(line) == 1, f"{SITE} no longer has one {line!r}: update tests/proxy.py"
    trusted = "".join(f"set_real_ip_from {front};\n    " for front in fronts)
    return site.replace(UPSTREAM, f"server {api_base.removeprefix('http://')};") \
               .replace(LISTEN, f"listen 127.0.0.1:{port};") \
               .replace(FRONTS_END, trusted + FRONTS_END)


@contextlib.contextmanager
def behind_nginx(nginx: str, api_base: str, folder: Path, timeout: float = 30.0,
                 fronts: Sequence[str] = ()) -> Iterator[str]:
    """Run ``nginx`` (the binary's path) with the shipped site in front of ``api_base``, its files in ``folder``,
    trusting the front proxies at ``fronts`` too; yields its base URL once ``/healthz`` answers through it, and
    stops it at the end (SIGTERM, nginx's fast shutdown: the master stops its workers and removes its pid file)."""
    port = free_port()
    temp = {name: folder / f"nginx-{name}" for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi")}
    conf, errors = folder / "nginx.conf", folder / "nginx-error.log"
    # run by root (CI), nginx's workers would be nobody, who cannot write a request body over 16 kB into the folder
    user = "user root;" if os.geteuid() == 0 else ""
    conf.write_text(f"""
daemon off;
{user}
worker_processes 1;
pid {folder}/nginx.pid;
error_log {errors};
events {{ worker_connections 512; }}
http {{
    access_log off;
    client_body_temp_path {temp['body']}; proxy_temp_path {temp['proxy']}; fastcgi_temp_path {temp['fastcgi']};
    uwsgi_temp_path {temp['uwsgi']}; scgi_temp_path {temp['scgi']};
    {shipped_site(api_base, port, fronts)}
}}""")
    proxy = subprocess.Popen([nginx, "-c", str(conf), "-p", str(folder), "-e", str(errors)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_until_it_answers(proxy, base + "/healthz", errors, timeout)
        yield base
    finally:
        proxy.terminate()
        try:
            proxy.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait()


def _wait_until_it_answers(proxy: subprocess.Popen, url: str, errors: Path, timeout: float) -> None:
    """Return once ``url`` answers 200; an nginx that exited (a configuration it refused) fails at once, with its
    error log."""
    deadline = time.monotonic() + timeout
    while True:
        if proxy.poll() is not None:
            log = errors.read_text() if errors.exists() else ""
            raise RuntimeError(f"nginx exited with status {proxy.returncode}:\n{log}")
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:                 # refused, reset, or an HTTP error status
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing answered at {url} within {timeout:.0f} s")
        time.sleep(0.1)
