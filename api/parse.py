"""Request parsing: every rule a request must satisfy, each failure an ``InvalidInput`` with a readable message."""

from __future__ import annotations

import math
import re

import orjson
from flask import request

from precompute.errors import InvalidInput, UnsupportedMediaType

MAX_ID = 2**63 - 1             # ids are 64-bit: any positive signed 64-bit integer
_DIGITS = re.compile(r"[0-9]{1,19}")


def path_id(raw: str, what: str) -> int:
    if not _DIGITS.fullmatch(raw) or not 1 <= int(raw) <= MAX_ID:
        raise InvalidInput(f"{what} must be an integer between 1 and {MAX_ID}")
    return int(raw)


def query_int(name: str, default: int, lo: int, hi: int) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    if not re.fullmatch(r"[0-9]{1,7}", raw) or not lo <= int(raw) <= hi:
        raise InvalidInput(f"{name} must be an integer between {lo} and {hi}")
    return int(raw)


def json_body():
    if request.mimetype != "application/json":
        raise UnsupportedMediaType()
    try:
        return orjson.loads(request.get_data(cache=False))
    except orjson.JSONDecodeError:
        raise InvalidInput("request body is not valid JSON") from None


def body_object(body) -> dict:
    if not isinstance(body, dict):
        raise InvalidInput("request body must be a JSON object")
    return body


def field_id(obj: dict, name: str) -> int:
    value = obj.get(name)
    if type(value) is not int or not 1 <= value <= MAX_ID:
        raise InvalidInput(f"{name} must be an integer between 1 and {MAX_ID}")
    return value


def field_number(obj: dict, name: str, lo: float, hi: float, default: float | None = None) -> float:
    value = obj.get(name, default)
    if type(value) not in (int, float) or not math.isfinite(value) or not lo <= value <= hi:
        raise InvalidInput(f"{name} must be a number between {lo:g} and {hi:g}")
    return float(value)
