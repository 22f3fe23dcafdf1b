"""The API's OpenAPI document as a markdown reference (``docs/api.md``, written by ``manage.py docs``).

Rendered from the document the app serves at ``/openapi.json`` (``openapi.spec``), so a route, parameter or status
added there appears here and ``tests/test_reference_docs.py`` fails until the page is regenerated. Plain reading of
the OpenAPI 3.1 subset ``openapi.py`` uses: security schemes, paths with parameters, a JSON request body and
responses, and component schemas (``$ref`` becomes a link to the schema's section).
"""

from __future__ import annotations

import json

#: The operations a path may hold, in the order their sections appear.
METHODS = ("get", "put", "post", "patch", "delete")


def markdown(doc: dict, intro: str = "") -> str:
    """The reference page for ``doc``: ``intro``, the authentication schemes, one section per route and method (in
    the document's order), then the schemas the routes refer to."""
    info = doc.get("info", {})
    out = [f"# {info.get('title', 'API')} HTTP API", ""]
    out += [x for text in (info.get("description"), intro) if text for x in (text, "")]
    out += _security_schemes(doc), ""
    for path, operations in doc.get("paths", {}).items():
        for method in (m for m in METHODS if m in operations):
            out += _operation(doc, method, path, operations[method]), ""
    schemas = doc.get("components", {}).get("schemas", {})
    if schemas:
        out += ["## Schemas", ""]
        for name, schema in schemas.items():
            out += [f"### {name}", "", *([schema["description"], ""] if schema.get("description") else []),
                    *(_properties(schema) or [_schema(schema)]), ""]
    return "\n".join(out).rstrip() + "\n"


def _security_schemes(doc: dict) -> str:
    schemes = doc.get("components", {}).get("securitySchemes", {})
    rows = ["## Authentication", "",
            f"Routes need {_security(doc.get('security', []))} unless their section says otherwise.", "",
            "| scheme | kind | meaning |", "|---|---|---|"]
    for name, s in schemes.items():
        kind = " ".join(x for x in (s.get("type"), s.get("scheme")) if x)
        rows.append(_row(f"`{name}`", kind, s.get("description", "")))
    return "\n".join(rows)


def _operation(doc: dict, method: str, path: str, op: dict) -> str:
    out = [f"## {method.upper()} {path}", ""]
    out += [x for text in (op.get("summary"), op.get("description")) if text for x in (text, "")]
    out += [f"Authentication: {_security(op.get('security', doc.get('security', [])))}.", ""]
    parameters = op.get("parameters", [])
    if parameters:
        out += ["| parameter | in | type | required | meaning |", "|---|---|---|---|---|"]
        out += [_row(f"`{p['name']}`", p["in"], _schema(p.get("schema", {}), described=True),
                     "yes" if p.get("required") else "no", p.get("description", "")) for p in parameters]
        out.append("")
    body = op.get("requestBody")
    if body:
        for media, content in body.get("content", {}).items():
            schema, table = content.get("schema", {}), _properties(content.get("schema", {}))
            out += [f"Request body ({'required' if body.get('required') else 'optional'}, `{media}`): "
                    f"{_schema(schema, described=True, flat=bool(table))}.", "", *([*table, ""] if table else [])]
    out += ["| status | meaning | body |", "|---|---|---|"]
    for status, response in sorted(op.get("responses", {}).items(), key=lambda kv: (not kv[0].isdigit(), kv[0])):
        content = response.get("content", {})
        answer = "; ".join(f"`{media}`" + (f": {_schema(c['schema'])}" if c.get("schema") else "")
                           for media, c in content.items())
        out.append(_row(status, response.get("description", ""), answer))
    return "\n".join(out)


def _security(requirements: list[dict]) -> str:
    """``[]``: no credentials; a list: any one of its entries, each naming schemes all of which apply (with the
    scopes they list, if any)."""
    if not requirements:
        return "no credentials"
    return " or ".join(" and ".join(f"`{name}`" + (f" with scope {', '.join(f'`{s}`' for s in scopes)}"
                                                    if scopes else "")
                                    for name, scopes in entry.items()) or "no credentials"
                       for entry in requirements)


def _properties(schema: dict) -> list[str]:
    """A table of an object schema's fields, nested objects' fields as ``a.b`` and arrays of objects' as ``a[].b``;
    no rows for any other schema."""
    rows = list(_fields(schema, ""))
    if not rows:
        return []
    return ["| field | type | required | meaning |", "|---|---|---|---|", *rows]


def _fields(schema: dict, prefix: str):
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        yield _row(f"`{prefix}{name}`", _schema(prop, flat=True), "yes" if name in required else "no",
                   prop.get("description", ""))
        if prop.get("properties"):
            yield from _fields(prop, f"{prefix}{name}.")
        elif prop.get("items", {}).get("properties"):
            yield from _fields(prop["items"], f"{prefix}{name}[].")


def _schema(s: dict, described: bool = False, flat: bool = False) -> str:
    """One line for schema ``s``: its type with bounds; ``described``: with its description in parentheses; ``flat``:
    an object's fields left to the table's following rows instead of listed inline."""
    if "$ref" in s:
        name = s["$ref"].rsplit("/", 1)[-1]
        text = f"[{name}](#{name.lower()})"
    elif "oneOf" in s:
        text = " or ".join(_schema(x, described=True) for x in s["oneOf"])
    elif "enum" in s:
        text = "one of " + ", ".join(f"`{json.dumps(v)}`" for v in s["enum"])
    else:
        types = s.get("type", "any")
        types = list(types) if isinstance(types, list) else [types]
        if "array" in types and "items" in s:
            items = s["items"]
            types[types.index("array")] = "array of " + ("objects" if flat and items.get("properties")
                                                         else _schema(items, described=True))
        if "object" in types and s.get("properties") and not flat:
            fields = ", ".join(f"{k}: {_schema(v)}" for k, v in s["properties"].items())
            types[types.index("object")] = f"object {{{fields}}}"
        text = " or ".join(types)
        bounds = _bounds(s)
        if bounds:
            text += f" ({bounds})"
    if described and s.get("description"):
        text += f" ({s['description']})"
    return text


def _bounds(s: dict) -> str:
    parts = [f"{sign} {_number(s[key])}" for key, sign in (("minimum", "≥"), ("exclusiveMinimum", ">"),
                                                             ("maximum", "≤"), ("exclusiveMaximum", "<")) if key in s]
    for low, high, unit in (("minItems", "maxItems", "items"), ("minLength", "maxLength", "characters")):
        if low in s and high in s:
            parts.append(f"{s[low]}–{s[high]} {unit}")
        elif low in s or high in s:
            parts.append(f"at least {s[low]} {unit}" if low in s else f"at most {s[high]} {unit}")
    types = s.get("type")
    if s.get("additionalProperties") is False and "object" in (types if isinstance(types, list) else [types]):
        parts.append("no other fields")
    return ", ".join(parts)


def _number(x: float) -> str:
    """``x`` as JSON writes it; the largest 64-bit id as ``2^63 − 1``."""
    return "2^63 − 1" if x == 2**63 - 1 else json.dumps(x)


def _row(*cells: str) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"
