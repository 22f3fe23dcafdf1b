"""Setting values as environment strings, for the ``Settings`` of this package: declaring one (``setting``), parsing
one (range- and name-checked, ``ConfigError`` naming the variable) and writing one back."""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError


#: What a declared name (an event type, an item attribute) may look like: it becomes part of a feature's name.
NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


def setting(default: Any, env: str, doc: str, unit: str = "", minimum: float | None = 1,
            maximum: float | None = None, secret: bool = False, shown: str | None = None, kind: str = "") -> Any:
    """A ``Settings`` field read from ``env``. Numbers must lie in ``[minimum, maximum]``; tuples are
    comma-separated numbers, each checked the same way. ``shown``: the default as ``docs/configuration.md`` states
    it, for defaults derived from other settings. ``kind``: ``"names"`` for a comma-separated list of names,
    ``"weights"`` for comma-separated ``name:weight`` pairs (names as ``NAME``, weights range-checked)."""
    meta = dict(env=env, doc=doc, unit=unit, minimum=minimum, maximum=maximum, secret=secret, shown=shown,
                kind=kind)
    return dataclasses.field(default=default, metadata=meta)


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
    # float() reads "nan" and "inf"; NaN passes every comparison below, so finiteness is checked first.
    if not math.isfinite(value):
        raise ConfigError(f"{m['env']} must be a finite number, got {value}")
    lo, hi = m["minimum"], m["maximum"]
    if lo is not None and value < lo:
        raise ConfigError(f"{m['env']} must be " + ("positive" if lo == 1 and isinstance(value, int)
                                                    else f"at least {lo}") + f", got {value}")
    if hi is not None and value > hi:
        raise ConfigError(f"{m['env']} must be at most {hi}, got {value}")


def _kind(kind: type, article: bool = False) -> str:
    word = "integer" if kind is int else "number"
    return f"an {word}" if article and word == "integer" else (f"a {word}" if article else word)


def markdown_table(cls: type) -> str:
    """The table of the settings ``cls`` declares, as ``docs/configuration.md`` shows it."""
    rows = ["| variable | default | unit | meaning |", "|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        m = f.metadata
        default = m["shown"] or ("unset" if f.default is None else f"`{format_value(f.default)}`")
        rows.append(f"| `{m['env']}` | {default} | {m['unit']} | {m['doc']} |")
    return "\n".join(rows)


def without_config(cls: type, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) less every variable ``cls`` reads and any ``PREFEED_*``."""
    base = os.environ if base is None else base
    names = {f.metadata["env"] for f in dataclasses.fields(cls)}
    return {k: v for k, v in base.items() if k not in names and not k.startswith("PREFEED_")}


def values_from_env(cls: type, env: Mapping[str, str]) -> dict[str, Any]:
    """The fields of ``cls`` that ``env`` sets (unset or empty variables are left out: they keep their default),
    parsed; a malformed value raises ``ConfigError`` naming the variable."""
    values = {}
    for f in dataclasses.fields(cls):
        raw = env.get(f.metadata["env"])
        if raw is not None and raw != "":
            values[f.name] = parse(f, raw)
    return values


def as_env(obj) -> dict[str, str]:
    """The environment variables that rebuild ``obj`` (unset fields left out)."""
    values = {f.metadata["env"]: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    return {env: format_value(value) for env, value in values.items() if value is not None}


def public(obj, redact) -> dict[str, str]:
    """Every field as its environment variable and value for display: secrets as "(set)", ``*_url`` fields through
    ``redact`` (which masks their passwords)."""
    out = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if value is None:
            text = "(unset)"
        elif f.metadata["secret"]:
            text = "(set)"
        else:
            text = redact(format_value(value)) if f.name.endswith("_url") else format_value(value)
        out[f.metadata["env"]] = text
    return out
