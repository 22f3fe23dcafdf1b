"""GET /healthz under a flood of probes: one check of the dependencies per process and ``PREFEED_HEALTHZ_TTL``
(``api/health.py``), so probes hold no database connection each, and a dependency that goes down is still
reported within about that second."""

import dataclasses
import threading
import time

from sqlalchemy import event

from cli.net import start_valkey

N_PROBES = 16


class _DatabaseUse:
    """What requests take of a real engine: connections checked out of its pool, statements run."""

    def __init__(self, engine) -> None:
        self.checkouts, self.statements = 0, 0
        event.listen(engine, "checkout", self._checkout)
        event.listen(engine, "before_cursor_execute", self._statement)

    def _checkout(self, *args) -> None:
        self.checkouts += 1

    def _statement(self, *args) -> None:
        self.statements += 1


def test_concurrent_probes_make_one_check(settings):
    from api import create_app
    from api.services import services

    # given an API process (its checks reused for 5 s here, so that the probes surely fall within them)
    app = create_app(dataclasses.replace(settings, healthz_ttl=5.0), {"TESTING": True})
    use = _DatabaseUse(services(app).engine)
    start, answers = threading.Barrier(N_PROBES), []

    def probe() -> None:
        client = app.test_client()
        start.wait(10)
        resp = client.get("/healthz")
        answers.append((resp.status_code, resp.json))

    # when 16 probes arrive at once
    threads = [threading.Thread(target=probe) for _ in range(N_PROBES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    # then each is answered what the dependencies are, from one check: one connection, one statement
    assert answers == [(200, {"status": "ok", "redis": "ok", "database": "ok"})] * N_PROBES
    assert (use.checkouts, use.statements) == (1, 1)
    services(app).engine.dispose()


def test_a_dependency_that_goes_down_is_reported_within_a_second(settings):
    from api import create_app
    from api.services import services

    # given an API process on a Redis-protocol server of its own, with the default reuse of a check (1 s), healthy
    server = start_valkey()
    try:
        s = dataclasses.replace(settings, redis_url=server.connection_url)
        assert s.healthz_ttl == 1.0
        app = create_app(s, {"TESTING": True})
        client = app.test_client()
        assert client.get("/healthz").status_code == 200
        use = _DatabaseUse(services(app).engine)
        # when the server stops, while a probe comes every 10 ms for 2.5 s
        server.stop()
        stopped, answers = time.monotonic(), []
        while time.monotonic() - stopped < 2.5:
            resp = client.get("/healthz")
            answers.append((time.monotonic() - stopped, resp.status_code, resp.json))
            time.sleep(0.01)
    finally:
        if server.is_running():
            server.stop()
    # then the outage is reported within about a second, and from then on
    first = next(k for k, (_, status, _) in enumerate(answers) if status == 503)
    assert answers[first][0] <= 1.5, f"first reported after {answers[first][0]:.2f} s"
    assert all(status == 503 and body == {"status": "degraded", "redis": "unavailable", "database": "ok"}
               for _, status, body in answers[first:])
    # and the probes, many more than seconds, checked the database about once a second
    assert len(answers) >= 50 and 1 <= use.statements <= 4 and use.checkouts == use.statements
    services(app).engine.dispose()
