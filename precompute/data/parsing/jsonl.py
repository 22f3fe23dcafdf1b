"""JSON lines (one object per line) cut into ``Rows`` of text cells, so they meet the same converters as CSV.

A value becomes the text a CSV cell would hold: a string as is, a number in its shortest decimal form (an integer
id stays exact at any size, a float id such as ``1.0`` is refused as not an integer), ``null`` or an absent key
empty; ``true``, lists and objects become their JSON text, which no converter accepts. Ids may be written as
strings of digits, the usual way to carry 64-bit ids past JavaScript. Blank lines are skipped.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

import numpy as np
import orjson

from .report import Report
from .rows import Rows
from .source import Source


def cell(value: object) -> str:
    kind = type(value)
    if kind is str:
        return value
    if value is None:
        return ""
    if kind is int or kind is float:
        return str(value)
    return orjson.dumps(value).decode()


class JsonLines:
    """``chunks`` yields ``Rows`` with a column per field in ``fields``; ``list_field`` (a list of ids) becomes
    one ``|``-joined cell; ``object_field`` (an object of numbers) becomes a column ``<object_field>.<key>`` per key:
    the keys ``declared`` or, if it is None, every key found in the chunk."""

    def __init__(self, source: Source, report: Report) -> None:
        self.source = source
        self.report = report

    def chunks(self, fields: Sequence[str], chunk_rows: int, *, list_field: str | None = None,
               object_field: str | None = None, declared: Collection[str] | None = None) -> Iterator[Rows]:
        objects: list[dict] = []
        lines: list[int] = []
        problems: dict[int, str] = {}           # index in the chunk → why the line is no object
        for number, line in enumerate(self.source.lines(), 1):
            if not line or line.isspace():
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                problems[len(objects)], obj = f"not valid JSON ({str(exc).split(':')[0]})", {}
            if type(obj) is not dict:
                problems[len(objects)], obj = "not a JSON object", {}
            objects.append(obj)
            lines.append(number)
            if len(objects) == chunk_rows:
                yield self._rows(objects, lines, problems, fields, list_field, object_field, declared)
                objects, lines, problems = [], [], {}
        if objects:
            yield self._rows(objects, lines, problems, fields, list_field, object_field, declared)

    def _rows(self, objects: list[dict], lines: list[int], problems: dict[int, str], fields: Sequence[str],
              list_field: str | None, object_field: str | None, declared: Collection[str] | None) -> Rows:
        columns = {name: [cell(obj.get(name)) for obj in objects] for name in fields}
        rows = Rows(self.source.path, columns, np.array(lines, dtype=np.int64))
        rows.refuse_undecodable(self.source.undecodable, self.source.encoding, lines[-1])
        for i, reason in problems.items():
            rows.refuse_row(i, reason)
        if list_field is not None:
            columns[list_field] = [self._joined(rows, i, obj.get(list_field), list_field)
                                   for i, obj in enumerate(objects)]
        if object_field is not None:
            values = [self._object(rows, i, obj.get(object_field), object_field) for i, obj in enumerate(objects)]
            keys = list(declared) if declared is not None else list(dict.fromkeys(k for v in values for k in v))
            for key in keys:
                columns[f"{object_field}.{key}"] = [cell(v.get(key)) for v in values]
            if declared is not None:
                for key in sorted({k for v in values for k in v} - set(declared)):
                    self.report.note(f"{self.source.path}: {object_field} {key!r} is not declared: ignored")
        return rows

    @staticmethod
    def _joined(rows: Rows, i: int, value: object, name: str) -> str:
        if value is None:
            return ""
        texts = [cell(v) for v in value] if type(value) is list else None
        if texts is None or any("|" in t or not t for t in texts):
            rows.refuse_row(i, f"{name} is not a list of ids: {cell(value)[:40]}")
            return ""
        return "|".join(texts)

    @staticmethod
    def _object(rows: Rows, i: int, value: object, name: str) -> dict:
        if value is None:
            return {}
        if type(value) is not dict:
            rows.refuse_row(i, f"{name} is not an object: {cell(value)[:40]}")
            return {}
        return value
