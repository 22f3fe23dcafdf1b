"""GET /openapi.json: the API's OpenAPI 3.1 description (kept next to the code it describes)."""

from __future__ import annotations

from flask import Blueprint

from precompute.settings import Settings

from .auth import require
from .errors import json_response
from .services import services

bp = Blueprint("openapi", __name__)

_ID = {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}
_MAYBE_NUMBER = {"type": ["number", "null"]}
_ERROR = {"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
def _key(scope: str) -> list[dict]:
    """A route behind a key with ``scope`` (an ``admin`` key has every scope)."""
    return [{"key": [scope]}]


_ADMIN = _key("admin")
_ITEMS = _key("items:write")


def _path_id(name: str) -> dict:
    return {"name": name, "in": "path", "required": True, "schema": _ID}


def _json_body(schema: dict) -> dict:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _item_fields(settings: Settings) -> dict:
    """The properties of an item body: absent means none (``active``: true) for PUT and POST, unchanged for PATCH."""
    return {
        "categories": {"type": ["array", "null"], "items": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
                       "description": "category ids; repeats collapse"},
        "price": {"type": ["number", "null"], "minimum": 0},
        "created_at": {"oneOf": [{"type": "number", "description": "epoch seconds"},
                                 {"type": "string", "description": "ISO-8601; no zone = UTC"}, {"type": "null"}]},
        "attributes": {"type": ["object", "null"], "additionalProperties": False,
                       "properties": {name: _MAYBE_NUMBER for name in settings.item_attributes},
                       "description": "declared in PREFEED_ITEM_ATTRIBUTES; null = none"},
        "active": {"type": "boolean"},
    }


def _items_paths(settings: Settings) -> dict:
    item = {"type": "object", "additionalProperties": False, "properties": _item_fields(settings)}
    written = {"item_id": _ID, "created": {"type": "boolean"}}
    refusals = {"400": _ERROR, "413": _ERROR, "415": _ERROR, **_KEYED, "503": _ERROR}
    return {
        "/items/{item_id}/similar": {"get": {
            "summary": "The item's similar items (\"more like this\"), with the live rules applied",
            "description": "co-visitation neighbours, then item-kNN's, precomputed per item; inactive items left out, "
                           "and with `user_id` the items that user interacted with; boosts are not applied. An item "
                           "whose list leaves nothing gets its categories' popular items (`source`: "
                           "`category_popular`)",
            "security": _key("feed:read"),
            "parameters": [_path_id("item_id"),
                           {"name": "limit", "in": "query", "schema": {
                               "type": "integer", "minimum": 1, "maximum": settings.similar_length,
                               "default": min(settings.similar_limit_default, settings.similar_length)}},
                           {"name": "user_id", "in": "query", "schema": _ID,
                            "description": "leave out the items this user interacted with (their recent seen items)"}],
            "responses": {"200": _object("similar items", {
                "item_id": _ID, "user_id": {"type": ["integer", "null"]},
                "source": {"enum": ["neighbours", "category_popular"]},
                "items": {"type": "array", "items": {"type": "object", "properties": {"item_id": _ID}}}}),
                "400": _ERROR, "404": {**_ERROR, "description": "an item the catalogue does not hold"},
                **_KEYED, "503": _ERROR}}},
        "/items/{item_id}": {
            "put": {"summary": "Create or replace a whole item", "security": _ITEMS,
                    "parameters": [_path_id("item_id")], "requestBody": _json_body(item),
                    "responses": {"200": _object("replaced", written), "201": _object("created", written),
                                  **refusals}},
            "patch": {"summary": "Change the given fields of an item ({\"active\": false}: sold)", "security": _ITEMS,
                      "parameters": [_path_id("item_id")], "requestBody": _json_body(item),
                      "responses": {"200": _object("the item id and the fields changed", {"item_id": _ID}),
                                    "404": _ERROR, **refusals}}},
        "/items": {"post": {
            "summary": "Create or replace items, all or nothing (the same id twice: the last wins)",
            "security": _ITEMS,
            "requestBody": _json_body({"type": "object", "additionalProperties": False, "required": ["items"],
                                       "properties": {"items": {
                                           "type": "array", "minItems": 1, "maxItems": settings.items_batch_max,
                                           "items": {**item, "required": ["item_id"],
                                                     "properties": {"item_id": _ID, **item["properties"]}}}}}),
            "responses": {"200": _object("counts", {"created": {"type": "integer"}, "updated": {"type": "integer"}}),
                          **refusals}}},
    }


#: What a route behind a key may also answer.
_KEYED = {"401": {**_ERROR, "description": "no key, or an unknown or revoked one"},
          "403": {**_ERROR, "description": "a key without the route's scope"},
          "429": {**_ERROR, "description": "over the key's rate (a token per page, per event), its new user ids per "
                  "minute, a user id's events per minute, or too many failed keys from this address: see "
                  "Retry-After"}}


def _dashboard_paths(settings: Settings) -> dict:
    """The operator's pages (docs/operating.md): HTML and a JSON snapshot, basic auth or bearer."""
    refusals = {"401": {**_ERROR, "description": "no credentials (with a basic-auth challenge)"},
                "403": {**_ERROR, "description": "a wrong token"}}
    security = [{"dashboard": []}, *_ADMIN]
    return {
        "/dashboard": {"get": {
            "summary": "Status at a glance, feed age over time, and a user lookup", "security": security,
            "parameters": [{"name": "user", "in": "query", "schema": _ID},
                           {"name": "limit", "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": settings.page_limit_max}}],
            "responses": {"200": {"description": "HTML", "content": {"text/html": {}}}, "400": _ERROR,
                          **refusals}}},
        "/dashboard/status.json": {"get": {
            "summary": "The snapshot `manage.py status --json` prints", "security": security,
            "responses": {"200": _object("status", {}), **refusals}}},
    }


def _object(description: str, properties: dict) -> dict:
    return {"description": description, "content": {"application/json": {"schema": {
        "type": "object", "properties": properties}}}}


def spec(settings: Settings) -> dict:
    """The document for an app running with ``settings`` (its limits are the settings')."""
    return {
        "openapi": "3.1.0",
        "security": [{"key": []}],
        "info": {"title": "prefeed", "version": "1", "description": "Precomputed, ranked recommendation feeds."},
        "components": {
            "securitySchemes": {"key": {"type": "http", "scheme": "bearer",
                                        "description": "an API key (`manage.py keys create`) with the route's scope "
                                                       "(the scopes a route lists; an admin key has every scope)"},
                                "dashboard": {"type": "http", "scheme": "basic",
                                              "description": "any user name, the admin token as password"}},
            "schemas": {
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"},
                                                                                  "dependency": {"type": "string"}}},
                "Event": {"type": "object", "additionalProperties": False, "required": ["user_id", "item_id", "type"],
                          "properties": {"user_id": _ID, "item_id": _ID,
                                         "type": {"enum": [name for name, _ in settings.event_types]},
                                         "ts": {"type": "number", "description": "epoch seconds, default now"},
                                         "event_id": {"type": "string", "minLength": 1, "maxLength": 64},
                                         "value": {**_MAYBE_NUMBER, "description": "a rating, a watch time"}}},
                "Feed": {"type": "object", "properties": {
                    "user_id": _ID, "source": {"enum": ["precomputed", "fallback"]},
                    "model_version": {"type": ["integer", "null"]}, "computed_at": {"type": ["number", "null"]},
                    "history_version": {"type": ["integer", "null"]},
                    "experiment": {"type": ["string", "null"],
                                   "description": "the experiment the page belongs to; null outside any"},
                    "arm": {"type": ["string", "null"], "description": "its arm: the one that ranked the feed, or "
                            "for a fallback page the user's arm now"},
                    "served_at": {"type": "number", "description": "when the page was served, on the events' clock "
                                  "(the newest accepted event time, epoch s): events on its items up to "
                                  "`PREFEED_ATTRIBUTION_WINDOW` later are attributed to it"},
                    "next_cursor": {"type": ["string", "null"],
                                    "description": "continues this scroll (`?cursor=`); null at the feed's end"},
                    "restarted": {"type": "boolean", "description": "the cursor had expired: the page is the top"},
                    "items": {"type": "array", "items": {"type": "object", "properties": {
                        "item_id": _ID, "score": {"type": "number"}, "boosted": {"type": "boolean"}}}}}},
            },
        },
        "paths": {
            "/feed/{user_id}": {"get": {
                "summary": "The user's ranked feed with live rules applied", "security": _key("feed:read"),
                "parameters": [_path_id("user_id"),
                               {"name": "limit", "in": "query",
                                "schema": {"type": "integer", "minimum": 1, "maximum": settings.page_limit_max}},
                               {"name": "offset", "in": "query",
                                "schema": {"type": "integer", "minimum": 0, "maximum": settings.feed_length}},
                               {"name": "cursor", "in": "query", "schema": {"type": "string"},
                                "description": "a previous page's next_cursor (not with offset)"},
                               {"name": "exclude", "in": "query", "style": "form", "explode": False,
                                "schema": {"type": "array", "maxItems": settings.exclude_max, "items": _ID},
                                "description": "item ids this page leaves out (comma-separated; repeat them on "
                                               "each page of a scroll they are to stay out of)"},
                               {"name": "diversity", "in": "query",
                                "schema": {"type": "string", "pattern": r"^(off|[0-9]{1,3}/[0-9]{1,3})$"},
                                "description": "`K/W`: at most K items of one category (an item's lowest category "
                                               "id) in any W consecutive slots of the scroll, boosts included "
                                               "(1 <= K < W <= 50); `off`: none. Absent: the deployment's "
                                               "(PREFEED_DIVERSITY_MAX, PREFEED_DIVERSITY_WINDOW). When no item "
                                               "within 50 places fits, the next one is served anyway"}],
                "responses": {"200": {"description": "feed", "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/Feed"}}}}, "400": _ERROR, **_KEYED, "503": _ERROR}}},
            "/events": {"post": {
                "summary": "Store interaction events and schedule recomputes", "security": _key("events:write"),
                "requestBody": _json_body({"oneOf": [
                    {"$ref": "#/components/schemas/Event"},
                    {"type": "array", "minItems": 1, "maxItems": settings.events_batch_max,
                     "items": {"$ref": "#/components/schemas/Event"}}]}),
                "responses": {"202": _object("stored (events whose event_id was stored before for the same user: "
                                             "duplicates); items the catalogue did not have created bare", {
                                                 "accepted": {"type": "integer"}, "duplicates": {"type": "integer"},
                                                 "items_created": {"type": "integer"}}),
                              "400": _ERROR, "404": {**_ERROR, "description": "unknown items (named), when the key lacks "
                                                     "items:write or PREFEED_EVENTS_CREATE_ITEMS is false"},
                              "413": _ERROR, "415": _ERROR, **_KEYED, "503": _ERROR}}},
            "/boosts/{item_id}": {
                "put": {"security": _ADMIN, "parameters": [_path_id("item_id")],
                        "requestBody": _json_body({"type": "object", "required": ["weight"], "properties": {
                            "weight": {"type": "number", "exclusiveMinimum": 0,
                                       "maximum": settings.boost_max_weight},
                            "ttl_seconds": {"type": "integer", "minimum": 1,
                                            "maximum": settings.boost_max_ttl}}}),
                        "responses": {"200": {"description": "boost set"}, "400": _ERROR, "404": _ERROR,
                                      **_KEYED}},
                "delete": {"security": _ADMIN, "parameters": [_path_id("item_id")],
                           "responses": {"200": {"description": "boost removed"}, **_KEYED}}},
            **_items_paths(settings),
            "/healthz": {"get": {"summary": "Whether Redis and the database answer, as this process last checked "
                                            "them: at most once per PREFEED_HEALTHZ_TTL, the probes meanwhile "
                                            "answered from that check",
                                 "security": [], "responses": {"200": {"description": "all dependencies up"},
                                                               "503": _ERROR}}},
            "/livez": {"get": {"security": [], "responses": {"200": {"description": "process up"}}}},
            "/openapi.json": {"get": {"responses": {"200": {"description": "this document"}, **_KEYED}}},
            "/metrics": {"get": {"security": _key("metrics:read"),
                                 "responses": {"200": {"description": "Prometheus metrics (text format)"}, **_KEYED}}},
            **_dashboard_paths(settings),
        },
    }


@bp.get("/openapi.json")
@require(None)
def openapi():
    return json_response(services().openapi)
