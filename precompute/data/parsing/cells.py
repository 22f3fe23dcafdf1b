"""A column of text cells converted whole, and its bad cells found by halving.

Conversions run over a whole column (numpy's C loops, or ``map`` over a builtin), never a Python statement per
cell. Only a column that holds a bad cell pays more: see ``each``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def each(convert: Callable, cells: Sequence, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    """``convert(cells)`` for the whole column, and the mask of cells it failed on.

    When the column holds a bad cell, the conversion raises for the whole column; the column is then halved until
    the bad cells stand alone (about log2(n) conversions per bad cell), so a chunk with one bad row costs a few
    more vectorized passes, not a Python loop over its cells. ``convert`` is the one definition of a valid cell.
    """
    try:
        return np.asarray(convert(cells), dtype=dtype), np.zeros(len(cells), dtype=bool)
    except (ValueError, OverflowError, TypeError):
        if len(cells) <= 1:
            return np.zeros(len(cells), dtype=dtype), np.ones(len(cells), dtype=bool)
        mid = len(cells) // 2
        left, left_failed = each(convert, cells[:mid], dtype)
        right, right_failed = each(convert, cells[mid:], dtype)
        return np.concatenate([left, right]), np.concatenate([left_failed, right_failed])


def to_float(cells: Sequence) -> np.ndarray:
    return np.fromiter(map(float, cells), dtype=np.float64, count=len(cells))


def to_int(cells: Sequence) -> np.ndarray:
    """Decimal integers as Python's ``int`` reads them (surrounding blanks allowed); overflow beyond int64 raises."""
    return np.array(cells, dtype=np.int64)
