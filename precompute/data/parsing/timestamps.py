"""Times in a column of text cells: unix seconds or ISO-8601, parsed a whole column at a time.

A cell is ISO-8601 when its fifth character is ``-`` (``YYYY-MM-DD``, optionally ``T`` or a space and
``HH:MM[:SS[.ffffff]]``), else a number of seconds since 1970-01-01 UTC (integer or decimal). An ISO time may end
in ``Z`` (UTC) or an offset ``+HH:MM``, ``+HHMM`` or ``+HH`` (``-`` likewise); without a zone it is UTC, the zone
of every epoch-seconds log, so a file mixing both forms means one clock. The date and time are parsed by numpy's
``datetime64`` (C); the zone is cut off and applied here, because numpy ignores it with a warning.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .cells import each, to_float

MAX_ABS_SECONDS = 1e11      # ~year 5138: a larger value is milliseconds (or worse), not seconds


def parse(cells: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Seconds since 1970-01-01 UTC (float64; NaN where the cell is empty) and the mask of cells that are not a
    time. Range is the caller's business (``MAX_ABS_SECONDS``)."""
    n = len(cells)
    try:
        seconds = to_float(cells)                     # every cell epoch seconds: the common case, one pass
        return seconds, np.isnan(seconds)
    except ValueError:
        pass
    text = np.strings.strip(np.asarray(cells, dtype=str))
    empty = text == ""
    iso = np.strings.slice(text, 4, 5) == "-"
    number = ~iso & ~empty
    seconds = np.full(n, np.nan)
    failed = np.zeros(n, dtype=bool)
    seconds[number], failed[number] = each(to_float, text[number], np.float64)
    seconds[iso], failed[iso] = each(_iso, text[iso], np.float64)
    failed |= np.isnan(seconds) & ~empty
    return seconds, failed


def _iso(text: np.ndarray) -> np.ndarray:
    """ISO-8601 cells (a numpy str array) → epoch seconds; raises ValueError if any cell is not one."""
    text = text.copy()
    zulu = np.strings.endswith(text, "Z")
    text[zulu] = np.strings.slice(text[zulu], 0, -1)
    sign_at = np.maximum(np.strings.rfind(text, "+", 10), np.strings.rfind(text, "-", 10))
    zoned = sign_at > 0
    offset = np.zeros(len(text))
    if zoned.any():
        t, at = text[zoned], sign_at[zoned]
        zone = np.strings.slice(t, at, None)
        digits = np.strings.replace(np.strings.slice(zone, 1, None), ":", "")
        width = np.strings.str_len(digits)
        if not (np.strings.isdigit(digits) & ((width == 2) | (width == 4))).all():
            raise ValueError("bad zone")
        hours = np.strings.slice(digits, 0, 2).astype(np.int64)
        minutes = np.where(width == 4, np.strings.slice(digits, 2, 4), "0").astype(np.int64)
        if (hours > 23).any() or (minutes > 59).any():
            raise ValueError("bad zone")
        sign = np.where(np.strings.slice(zone, 0, 1) == "-", -1, 1)
        offset[zoned] = sign * (hours * 3600 + minutes * 60)
        text[zoned] = np.strings.slice(t, 0, at)
    micros = text.astype("datetime64[us]").astype(np.int64)
    return micros / 1e6 - offset
