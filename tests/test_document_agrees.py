"""The OpenAPI document and the parser agree. A route's parameters are parsed in ``api/parse.py`` and described in
``api/openapi.py`` (README, "Dependencies": no library declares them once within the page's cost), so a test holds
the two together: for every GET route's query and path parameter the document bounds, a value at each bound is
accepted and a value one past it is refused with a 400 and a JSON ``error``.

Accepted means "not a 400": the route may still answer 404 or 200 as the value leads it."""

import pytest

from api import openapi
from tests.conftest import with_key

#: A value for each path parameter while another parameter is probed: a user and an item of the test world.
PATH_VALUES = {"user_id": "1", "item_id": "1"}


def _bounded(settings) -> list[tuple[str, dict, list]]:
    """(path, parameter, other parameters of the route) for every bounded GET parameter of the document."""
    found = []
    for path, ops in openapi.spec(settings)["paths"].items():
        params = ops.get("get", {}).get("parameters", [])
        for p in params:
            schema = p["schema"]
            if schema.get("type") in ("integer", "array"):
                found.append((path, p, [q for q in params if q is not p]))
    return found


def _cases(param: dict) -> list[tuple[str, bool]]:
    """(raw value, accepted by the document) at and past each of the parameter's bounds."""
    schema = param["schema"]
    if schema["type"] == "integer":
        lo, hi = schema.get("minimum"), schema.get("maximum", 10**6)   # no maximum: a large value is valid
        cases = [(str(hi), True), (str(hi + 1), "maximum" not in schema)]
        if lo is not None:
            cases += [(str(lo), True), (str(lo - 1), False)]
        return cases
    # an array of ids, comma-separated: up to maxItems valid ids; one more, or an id out of range, refused
    most, item = schema["maxItems"], schema["items"]
    return [(",".join(str(i) for i in range(1, most + 1)), True),
            (",".join(str(i) for i in range(1, most + 2)), False),
            (str(item["maximum"]), True), (str(item["maximum"] + 1), False), (str(item["minimum"] - 1), False)]


def _url(path: str, param: dict, others: list, raw: str) -> str:
    values = {q["name"]: PATH_VALUES[q["name"]] for q in others if q["in"] == "path"}
    if param["in"] == "path":
        values[param["name"]] = raw
    url = path.format(**values)
    return url if param["in"] == "path" else f"{url}?{param['name']}={raw}"


def test_every_bounded_parameter_is_parsed_as_the_document_bounds_it(client, settings):
    # given an admin key (every route's scope) and every GET parameter the document bounds
    with_key(client)
    probed = _bounded(settings)
    assert {p["name"] for _, p, _ in probed} >= {"user_id", "limit", "offset", "exclude"}
    disagreements = []
    for path, param, others in probed:
        for raw, valid in _cases(param):
            # when a request carries the value at or one past its bound
            response = client.get(_url(path, param, others, raw))
            # then the app accepts what the document allows and refuses what it does not, with a JSON error
            refused = response.status_code == 400
            if refused == valid or (refused and "error" not in response.json):
                disagreements.append(f"{path} {param['name']}={raw[:40]}: {response.status_code}")
    assert not disagreements, disagreements


@pytest.mark.parametrize("raw", ["0", "-1", "x"])
def test_a_value_the_document_refuses_is_a_400(client, settings, raw):
    # given the feed's limit, bounded below by 1 in the document; when a request carries a value it refuses
    response = with_key(client).get(f"/feed/1?limit={raw}")
    # then the parser refuses it too
    assert response.status_code == 400 and "limit" in response.json["error"]
