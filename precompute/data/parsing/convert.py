"""Columns of ``Rows`` to validated arrays: ids, numbers, times, choices from a table, short texts, id lists.

Each converter returns an array with one value per row (garbage where the row is refused) and refuses the rows
whose cell is not valid, with a reason naming the column and the cell. The rules, for every format:

- an id is a decimal integer from 1 to 2**63-1 (``MAX_ID``); a category id may also be 0;
- a number is a decimal number (``1``, ``2.5``, ``1e3``); empty or ``nan`` is missing (NaN) where the field is
  optional and refused where it is required; infinities are refused;
- a time is unix seconds or ISO-8601 (``timestamps.py``), at most ``MAX_ABS_SECONDS`` from 1970 and at most
  ``max_future`` seconds after the wall clock when its rows are read (the ``PREFEED_EVENT_MAX_FUTURE`` that
  ``POST /events`` allows): one such time would move the log's clock, or top the newest items, for good.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from itertools import repeat

import numpy as np

from .cells import each, to_float, to_int
from .report import short
from .rows import Rows
from .timestamps import MAX_ABS_SECONDS, parse

MAX_ID = 2**63 - 1
MAX_TEXT = 64               # characters of an event_id, as the API accepts it


def ids(rows: Rows, name: str) -> np.ndarray:
    """int64 ids, 1 to 2**63-1."""
    cells = rows.columns[name]
    values, failed = each(to_int, cells, np.int64)
    rows.refuse(failed | (values < 1), lambda i: _missing(name, cells[i])
                or f"{name} {short(cells[i])} is not an id (an integer from 1 to 2**63-1)")
    return values


def category_ids(tokens: list[str], owner: np.ndarray, rows: Rows, name: str) -> np.ndarray:
    """int64 category ids (0 to 2**63-1) from ``tokens``, the id lists of rows cut apart; ``owner[k]`` is the row
    of token ``k``. A row with a bad token is refused."""
    values, failed = each(to_int, tokens, np.int64)
    failed |= values < 0
    first_bad = {}
    for k in np.flatnonzero(failed).tolist():
        first_bad.setdefault(int(owner[k]), tokens[k])
    mask = np.zeros(rows.n, dtype=bool)
    mask[list(first_bad)] = True
    rows.refuse(mask, lambda i: f"{name}: {short(first_bad[i])} is not a category id (an integer from 0 to "
                                f"2**63-1)")
    return values


def numbers(rows: Rows, name: str, *, required: bool = False, minimum: float | None = None) -> np.ndarray:
    """float64; NaN where missing (allowed only when not ``required``)."""
    cells = rows.columns[name]
    text = cells if required else [cell or "nan" for cell in cells]
    values, failed = each(to_float, text, np.float64)
    if not required and failed.any():                   # blanks around nothing are empty too
        for i in np.flatnonzero(failed).tolist():
            if not cells[i].strip():
                values[i], failed[i] = np.nan, False
    bad = failed | np.isinf(values)
    if required:
        bad |= np.isnan(values)
    if minimum is not None:
        bad |= values < minimum

    def reason(i: int) -> str:
        if not failed[i] and np.isfinite(values[i]):
            return f"{name} {short(cells[i])} is below {minimum:g}"
        return _missing(name, cells[i]) or f"{name} {short(cells[i])} is not a number"

    rows.refuse(bad, reason)
    return values


def times(rows: Rows, name: str, *, required: bool, max_future: float) -> np.ndarray:
    """float64 seconds since 1970-01-01 UTC; NaN where missing (allowed only when not ``required``); a time more
    than ``max_future`` seconds after now is refused."""
    cells = rows.columns[name]
    values, failed = parse(cells)
    far = np.abs(values) > MAX_ABS_SECONDS
    ahead = after(values, max_future)
    bad = failed | far | ahead | (np.isnan(values) if required else False)

    def reason(i: int) -> str:
        if far[i]:
            return f"{name} {short(cells[i])} is not seconds since 1970 (milliseconds?)"
        if ahead[i]:
            return f"{name} {short(cells[i])} is more than {max_future:g} s after now"
        return _missing(name, cells[i]) or f"{name} {short(cells[i])} is not unix seconds or an ISO-8601 time"

    rows.refuse(bad, reason)
    return values


def after(seconds: np.ndarray, max_future: float) -> np.ndarray:
    """The mask of the times more than ``max_future`` seconds after the wall clock (NaN is not)."""
    return seconds > time.time() + max_future


def choices(rows: Rows, name: str, codes: Mapping[str, int], default: int) -> np.ndarray:
    """int16 codes of a column holding names from ``codes`` or the codes themselves; empty is ``default``."""
    cells = rows.columns[name]
    table = {**{str(code): code for code in codes.values()}, **codes, "": default}
    values = np.fromiter(map(table.get, cells, repeat(-1)), dtype=np.int64, count=len(cells))
    for i in np.flatnonzero(values < 0).tolist():       # " view" after a comma and a space
        values[i] = table.get(cells[i].strip(), -1)
    known = ", ".join(f"{n} ({c})" for n, c in codes.items())
    rows.refuse(values < 0, lambda i: f"{name} {short(cells[i])} is not one of {known}")
    return values.astype(np.int16)


def texts(rows: Rows, name: str, max_length: int = MAX_TEXT) -> np.ndarray:
    """object array of str, None where empty; longer than ``max_length`` is refused."""
    cells = rows.columns[name]
    lengths = np.fromiter(map(len, cells), dtype=np.int64, count=len(cells))
    values = np.array(cells, dtype=object)
    values[lengths == 0] = None
    rows.refuse(lengths > max_length, lambda i: f"{name} is longer than {max_length} characters")
    return values


def _missing(name: str, cell: str) -> str:
    return f"{name} is missing" if not cell.strip() else ""
