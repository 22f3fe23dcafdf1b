"""Structured logs: one JSON line per request carrying its request id, which is accepted from ``X-Request-ID`` when
it is usable, generated otherwise, and returned in the response."""

import dataclasses
import json
import re

import pytest

from api import create_app
from api.services import services

HEX_ID = re.compile(r"[0-9a-f]{32}")


def _lines(err: str) -> list[dict]:
    """The request lines of a captured stderr; every line of it must be one JSON object."""
    lines = [json.loads(x) for x in err.splitlines() if x.strip()]
    return [x for x in lines if x["logger"] == "prefeed.requests"]


@pytest.mark.parametrize("given,kept", [
    ("client-7f3a:retry 2", True),                 # printable ASCII, kept as it is
    ("x" * 128, True),                             # the longest kept
    ("x" * 129, False),                            # too long: replaced
    ("tab\there", False),                          # a control character: replaced
    ("caf\xe9", False),                            # not ASCII: replaced
    ("", False),                                   # empty: replaced
    (None, False),                                 # absent: generated
])
def test_the_request_id_is_kept_or_replaced_and_logged(client, capsys, given, kept):
    capsys.readouterr()
    # when a request carries the given X-Request-ID (or none)
    resp = client.get("/livez", headers={"X-Request-ID": given} if given is not None else {})
    # then the response names the request id: the given one if usable, else a fresh uuid4 in hex
    rid = resp.headers["X-Request-ID"]
    assert rid == given if kept else HEX_ID.fullmatch(rid)
    # and the request is one JSON line carrying that id, the route, the status and the duration
    (line,) = _lines(capsys.readouterr().err)
    assert line["request_id"] == rid
    assert (line["method"], line["route"], line["status"], line["level"]) == ("GET", "/livez", 200, "INFO")
    assert 0 <= line["duration_ms"] < 5000


def test_generated_ids_differ_and_errors_are_logged_too(client, capsys):
    capsys.readouterr()
    # when two requests come without an id, one of them for a user id that is not a number
    first = client.get("/livez").headers["X-Request-ID"]
    bad = client.get("/feed/abc")
    # then each got its own id, and the failed one is logged with its status under its route, not its path
    assert bad.status_code == 400 and bad.headers["X-Request-ID"] != first
    lines = _lines(capsys.readouterr().err)
    assert [(x["route"], x["status"]) for x in lines] == [("/livez", 200), ("/feed/<user_id>", 400)]
    assert lines[1]["request_id"] == bad.headers["X-Request-ID"]


def test_the_log_level_setting_silences_request_lines(settings, capsys):
    # given an app whose PREFEED_LOG_LEVEL is WARNING
    app = create_app(dataclasses.replace(settings, log_level="WARNING"), {"TESTING": True})
    capsys.readouterr()
    # when it answers a request
    resp = app.test_client().get("/livez")
    # then the response still names its request id, and no request line is written
    assert HEX_ID.fullmatch(resp.headers["X-Request-ID"])
    assert _lines(capsys.readouterr().err) == []
    services(app).engine.dispose()
