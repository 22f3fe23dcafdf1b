"""Request parsing: every rule a request must satisfy, each failure an ``InvalidInput`` with a readable message."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Collection

import orjson
from flask import request

from precompute.data.parsing import timestamps
from precompute.errors import InvalidInput, UnsupportedMediaType
from precompute.feeds.diversity import OFF, Diversity

MAX_ID = 2**63 - 1             # ids are 64-bit: any positive signed 64-bit integer
_DIGITS = re.compile(r"[0-9]{1,19}")
_SMALL = re.compile(r"[0-9]{1,7}")         # a query's count or offset


def path_id(raw: str, what: str) -> int:
    if not _DIGITS.fullmatch(raw) or not 1 <= int(raw) <= MAX_ID:
        raise InvalidInput(f"{what} must be an integer between 1 and {MAX_ID}")
    return int(raw)


def query_int(name: str, default: int, lo: int, hi: int) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    if not _SMALL.fullmatch(raw) or not lo <= int(raw) <= hi:
        raise InvalidInput(f"{name} must be an integer between {lo} and {hi}")
    return int(raw)


def query_ids(name: str, most: int) -> frozenset[int]:
    """A comma-separated list of at most ``most`` ids (``?exclude=1,2,3``; repeats count once); empty when
    absent."""
    raw = request.args.get(name)
    if not raw:
        return frozenset()
    parts = raw.split(",")
    if len(parts) > most:
        raise InvalidInput(f"{name} holds {len(parts)} ids; at most {most} (PREFEED_EXCLUDE_MAX)")
    if not all(_DIGITS.fullmatch(p) and 1 <= int(p) <= MAX_ID for p in parts):
        raise InvalidInput(f"{name} must be item ids (integers between 1 and {MAX_ID}) separated by commas")
    return frozenset(map(int, parts))


def query_diversity(name: str, window_max: int) -> Diversity | None:
    """``K/W`` (at most K items of one category in any W slots, 1 <= K < W <= ``window_max``) or ``off``; None
    when absent (the deployment's rule)."""
    raw = request.args.get(name)
    if raw is None:
        return None
    if raw == "off":
        return OFF
    most, slash, window = raw.partition("/")
    if not (slash and re.fullmatch(r"[0-9]{1,3}", most) and re.fullmatch(r"[0-9]{1,3}", window)
            and 1 <= int(most) < int(window) <= window_max):
        raise InvalidInput(f"{name} must be K/W (at most K items of one category in any W slots, "
                           f"1 <= K < W <= {window_max}) or off")
    return Diversity(int(most), int(window))


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


def refuse_unknown(obj: dict, known: Collection[str]) -> None:
    """``InvalidInput`` naming the fields of ``obj`` that are not in ``known``."""
    unknown = set(obj) - set(known)
    if unknown:
        raise InvalidInput(f"unknown field(s): {', '.join(sorted(map(str, unknown)))[:200]}")


def field_optional_number(obj: dict, name: str, lo: float = -math.inf) -> float | None:
    """A finite number of at least ``lo``, or None when the field is absent or null."""
    value = obj.get(name)
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or value < lo:
        floor = "" if lo == -math.inf else f" of at least {lo:g}"
        raise InvalidInput(f"{name} must be a finite number{floor} or null")
    return float(value)


def field_time(obj: dict, name: str, max_future: float) -> float | None:
    """Epoch seconds given as a number or an ISO-8601 string (read as the import parsers read times: no zone = UTC),
    within ``MAX_ABS_SECONDS`` of 1970 and at most ``max_future`` seconds after now; None when absent or null."""
    value = obj.get(name)
    if value is None:
        return None
    seconds = math.nan
    if type(value) in (int, float):
        seconds = float(value)
    elif isinstance(value, str) and 0 < len(value) <= 64:
        parsed, failed = timestamps.parse([value])
        seconds = math.nan if failed[0] else float(parsed[0])
    if not math.isfinite(seconds) or abs(seconds) > timestamps.MAX_ABS_SECONDS:
        raise InvalidInput(f"{name} must be epoch seconds or an ISO-8601 time (such as 2024-05-01T12:00:00Z), "
                           f"at most {timestamps.MAX_ABS_SECONDS:g} s from 1970")
    if seconds > time.time() + max_future:
        raise InvalidInput(f"{name} must not lie more than {max_future:g} s after now")
    return seconds


def field_id_set(obj: dict, name: str, lo: int = 0) -> tuple[int, ...]:
    """A list of integers from ``lo`` to ``MAX_ID``, ascending and distinct (repeats collapse); () when absent
    or null."""
    value = obj.get(name)
    if value is None:
        return ()
    if not isinstance(value, list) or any(type(v) is not int or not lo <= v <= MAX_ID for v in value):
        raise InvalidInput(f"{name} must be a list of integers between {lo} and {MAX_ID}")
    return tuple(sorted(set(value)))
