"""Setting values as environment strings: parsing one (range- and name-checked, ``ConfigError`` naming the
variable) and writing one back, for ``settings.py``."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import ConfigError

#: What a declared name (an event type, an item attribute) may look like: it becomes part of a feature's name.
NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple) and value and isinstance(value[0], tuple):
        return ",".join(f"{name}:{format_value(weight)}" for name, weight in value)
    if isinstance(value, tuple):
        return ",".join(format_value(v) for v in value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def parse(f: dataclasses.Field, raw: str) -> Any:
    """``raw`` as the type of ``f``'s default, range-checked; ConfigError naming the variable otherwise."""
    m, default = f.metadata, f.default
    if isinstance(default, Path):
        return Path(raw)
    if m["kind"] == "names":
        names = tuple(x.strip() for x in raw.split(",") if x.strip())
        _check_names(m, names)
        return names
    if m["kind"] == "weights":
        pairs = []
        for part in (x.strip() for x in raw.split(",") if x.strip()):
            name, colon, weight = part.partition(":")
            try:
                pairs.append((name.strip(), float(weight)))
            except ValueError:
                colon = ""
            if not colon:
                raise ConfigError(f"{m['env']} must be comma-separated name:weight pairs, got {part!r}") from None
            _check_range(m, pairs[-1][1])
        _check_names(m, [name for name, _ in pairs])
        if not pairs:
            raise ConfigError(f"{m['env']} must declare at least one name:weight pair")
        return tuple(pairs)
    if isinstance(default, bool):
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{m['env']} must be true or false, got {raw!r}")
    if isinstance(default, tuple):
        kind = type(default[0])
        try:
            values = tuple(kind(x) for x in raw.split(","))
        except ValueError:
            raise ConfigError(f"{m['env']} must be comma-separated {_kind(kind)}s, got {raw!r}") from None
        for v in values:
            _check_range(m, v)
        return values
    if not isinstance(default, (int, float)):
        return raw                                   # strings (URLs, names, the token)
    kind = type(default)
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{m['env']} must be {_kind(kind, article=True)}, got {raw!r}") from None
    _check_range(m, value)
    return value


def _check_names(m: Mapping, names) -> None:
    for name in names:
        if not NAME.fullmatch(name):
            raise ConfigError(f"{m['env']}: {name!r} is not a name (lower-case letters, digits and _, starting with a "
                              "letter, at most 32)")
    if len(set(names)) != len(names):
        raise ConfigError(f"{m['env']} names something twice")


def _check_range(m: Mapping, value: float) -> None:
    lo, hi = m["minimum"], m["maximum"]
    if lo is not None and value < lo:
        raise ConfigError(f"{m['env']} must be " + ("positive" if lo == 1 and isinstance(value, int)
                                                    else f"at least {lo}") + f", got {value}")
    if hi is not None and value > hi:
        raise ConfigError(f"{m['env']} must be at most {hi}, got {value}")


def _kind(kind: type, article: bool = False) -> str:
    word = "integer" if kind is int else "number"
    return f"an {word}" if article and word == "integer" else (f"a {word}" if article else word)
