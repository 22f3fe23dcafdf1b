"""The admin token: a bearer token for admin endpoints (boosts, item status), and bearer or HTTP basic auth (the
token as password, any user name) for the dashboard, so a browser can get in. Compared in constant time."""

from __future__ import annotations

import base64
import binascii
import functools
import hmac

from flask import current_app, request

from precompute.errors import Forbidden, Unauthorized

#: What a browser is asked for when the dashboard gets no credentials.
CHALLENGE = 'Basic realm="prefeed dashboard", charset="UTF-8"'


def admin_required(view):
    @functools.wraps(view)
    def wrapper(*args, **kwargs):
        token = _token()
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        if not token:
            raise Unauthorized("admin endpoints are disabled: PREFEED_ADMIN_TOKEN is not set")
        if scheme.lower() != "bearer" or not _same(given, token):
            raise Unauthorized("missing or invalid admin token")
        return view(*args, **kwargs)

    return wrapper


def check_dashboard() -> None:
    """Let the request through if it carries the admin token, as ``Authorization: Bearer <token>`` or as the
    password of HTTP basic auth (any user name). No credentials: 401 with a basic-auth challenge (a browser
    prompts); wrong ones: 403."""
    token = _token()
    if not token:
        raise Forbidden("the dashboard is disabled: PREFEED_ADMIN_TOKEN is not set")
    scheme, _, given = request.headers.get("Authorization", "").strip().partition(" ")
    scheme = scheme.lower()
    if scheme == "basic":
        try:
            decoded = base64.b64decode(given.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise Forbidden("malformed basic credentials") from None
        given = decoded.partition(":")[2]
    elif scheme != "bearer":
        raise Unauthorized("the dashboard needs the admin token (basic auth password or bearer token)",
                           challenge=CHALLENGE)
    if not _same(given.strip() if scheme == "bearer" else given, token):
        raise Forbidden("invalid admin token")


def dashboard_required(view):
    @functools.wraps(view)
    def wrapper(*args, **kwargs):
        check_dashboard()
        return view(*args, **kwargs)

    return wrapper


def _token() -> str | None:
    return current_app.extensions["prefeed"]["settings"].admin_token


def _same(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), token.encode())
