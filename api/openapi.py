"""GET /openapi.json: the API's OpenAPI 3.1 description (kept next to the code it describes)."""

from __future__ import annotations

from flask import Blueprint, current_app

from precompute.settings import Settings

from .errors import json_response

bp = Blueprint("openapi", __name__)

_ID = {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}
_ERROR = {"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_ADMIN = [{"admin": []}]


def _path_id(name: str) -> dict:
    return {"name": name, "in": "path", "required": True, "schema": _ID}


def _json_body(schema: dict) -> dict:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def spec(settings: Settings) -> dict:
    """The document for an app running with ``settings`` (its limits are the settings')."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "prefeed", "version": "1", "description": "Precomputed, ranked recommendation feeds."},
        "components": {
            "securitySchemes": {"admin": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"},
                                                                                  "dependency": {"type": "string"}}},
                "Event": {"type": "object", "additionalProperties": False, "required": ["user_id", "item_id", "type"],
                          "properties": {"user_id": _ID, "item_id": _ID,
                                         "type": {"enum": ["view", "click", "contact", "purchase"]},
                                         "ts": {"type": "number", "description": "epoch seconds, default now"},
                                         "event_id": {"type": "string", "minLength": 1, "maxLength": 64}}},
                "Feed": {"type": "object", "properties": {
                    "user_id": _ID, "source": {"enum": ["precomputed", "fallback"]},
                    "model_version": {"type": ["integer", "null"]}, "computed_at": {"type": ["number", "null"]},
                    "history_version": {"type": ["integer", "null"]},
                    "items": {"type": "array", "items": {"type": "object", "properties": {
                        "item_id": _ID, "score": {"type": "number"}, "boosted": {"type": "boolean"}}}}}},
            },
        },
        "paths": {
            "/feed/{user_id}": {"get": {
                "summary": "The user's ranked feed with live rules applied",
                "parameters": [_path_id("user_id"),
                               {"name": "limit", "in": "query",
                                "schema": {"type": "integer", "minimum": 1, "maximum": settings.page_limit_max}},
                               {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0}}],
                "responses": {"200": {"description": "feed", "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/Feed"}}}}, "400": _ERROR, "503": _ERROR}}},
            "/events": {"post": {
                "summary": "Store interaction events and schedule recomputes",
                "requestBody": _json_body({"oneOf": [
                    {"$ref": "#/components/schemas/Event"},
                    {"type": "array", "minItems": 1, "maxItems": settings.events_batch_max,
                     "items": {"$ref": "#/components/schemas/Event"}}]}),
                "responses": {"202": {"description": "accepted"}, "400": _ERROR, "404": _ERROR, "413": _ERROR,
                              "415": _ERROR, "503": _ERROR}}},
            "/boosts/{item_id}": {
                "put": {"security": _ADMIN, "parameters": [_path_id("item_id")],
                        "requestBody": _json_body({"type": "object", "required": ["weight"], "properties": {
                            "weight": {"type": "number", "exclusiveMinimum": 0,
                                       "maximum": settings.boost_max_weight},
                            "ttl_seconds": {"type": "integer", "minimum": 1,
                                            "maximum": settings.boost_max_ttl}}}),
                        "responses": {"200": {"description": "boost set"}, "400": _ERROR, "401": _ERROR,
                                      "404": _ERROR}},
                "delete": {"security": _ADMIN, "parameters": [_path_id("item_id")],
                           "responses": {"200": {"description": "boost removed"}, "401": _ERROR}}},
            "/items/{item_id}": {"put": {
                "security": _ADMIN, "parameters": [_path_id("item_id")],
                "requestBody": _json_body({"type": "object", "required": ["active"], "additionalProperties": False,
                                           "properties": {"active": {"type": "boolean"}}}),
                "responses": {"200": {"description": "updated"}, "400": _ERROR, "401": _ERROR, "404": _ERROR}}},
            "/healthz": {"get": {"responses": {"200": {"description": "all dependencies up"}, "503": _ERROR}}},
            "/livez": {"get": {"responses": {"200": {"description": "process up"}}}},
            "/openapi.json": {"get": {"responses": {"200": {"description": "this document"}}}},
        },
    }


@bp.get("/openapi.json")
def openapi():
    return json_response(current_app.extensions["prefeed"]["openapi"])
