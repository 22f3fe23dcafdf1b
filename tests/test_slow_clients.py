"""Slow clients do not stop the API: ``manage.py serve`` runs threaded gunicorn workers, so a connection that sends
its request a line at a time holds one thread, not a worker process; and behind the production shape's buffering
proxy (``deploy/nginx/prefeed.conf``, run by ``tests/proxy.py``) they never reach gunicorn at all."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request

from tests.proxy import behind_nginx, serve

SLOW_CLIENTS = 50


def _healthz_seconds(base: str, timeout: float = 5.0) -> float:
    """How long ``/healthz`` took to answer 200 (``timeout`` when it did not answer in time)."""
    start = time.monotonic()
    try:
        with urllib.request.urlopen(base + "/healthz", timeout=timeout) as resp:
            assert resp.status == 200
    except (TimeoutError, urllib.error.URLError):
        return timeout
    return time.monotonic() - start


def _worst_healthz_while_clients_trickle(port: int, base: str, rounds: int = 6, n: int = SLOW_CLIENTS,
                                         probe_timeout: float = 5.0) -> tuple[float, int]:
    """Open ``n`` connections to ``port`` that each send a request line, then one more header line every second,
    never finishing; meanwhile ask ``base``'s ``/healthz`` once a second. Returns the slowest answer, in seconds
    (``probe_timeout`` for one that did not come), and how many slow clients were answered or closed meanwhile."""
    clients = []
    try:
        for _ in range(n):
            conn = socket.create_connection(("127.0.0.1", port), timeout=5)
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: slow\r\n")
            clients.append(conn)
        worst = 0.0
        for k in range(rounds):
            for conn in clients:
                conn.sendall(f"X-Slow-{k}: 1\r\n".encode())
            worst = max(worst, _healthz_seconds(base, probe_timeout))
            time.sleep(1.0)
        disturbed = 0
        for conn in clients:
            conn.setblocking(False)
            try:
                conn.recv(1)
            except BlockingIOError:
                continue                    # nothing to read: still waiting, as it should be
            disturbed += 1
        return worst, disturbed
    finally:
        for conn in clients:
            conn.close()


def test_the_api_answers_healthz_within_a_second_while_fifty_clients_trickle_their_headers(settings, tmp_path):
    # given the API as `manage.py serve` runs it, with two worker processes
    with serve(settings, tmp_path / "api.log", "--workers", "2") as base:
        # when 50 connections send their request a header line per second, never finishing
        worst, disturbed = _worst_healthz_while_clients_trickle(int(base.rsplit(":", 1)[1]), base)
    # then /healthz still answers, within a second, every time it is asked meanwhile
    assert worst < 1.0, f"/healthz took {worst:.1f} s with {SLOW_CLIENTS} slow clients connected"
    # and the slow clients are still connected, waiting (nothing answered or closed them)
    assert disturbed == 0


def test_behind_the_proxy_slow_clients_never_reach_an_api_of_one_thread(settings, nginx, tmp_path):
    # given the API with one worker process of one thread, behind the shipped nginx
    with serve(settings, tmp_path / "api.log", "--workers", "1", "--threads", "1") as api, \
            behind_nginx(nginx, api, tmp_path) as base:
        # when 50 connections trickle their headers to the proxy
        worst, disturbed = _worst_healthz_while_clients_trickle(int(base.rsplit(":", 1)[1]), base)
        # and, for comparison, 2 trickle straight to the one-thread API
        direct, _ = _worst_healthz_while_clients_trickle(int(api.rsplit(":", 1)[1]), api, rounds=2, n=2,
                                                         probe_timeout=2.0)
    # then through the proxy /healthz answers within a second every time, while the bare API stalls
    assert worst < 1.0, f"/healthz through the proxy took {worst:.1f} s with {SLOW_CLIENTS} slow clients"
    assert disturbed == 0
    assert direct >= 1.0, "the one-thread API was expected to stall under slow clients of its own"
