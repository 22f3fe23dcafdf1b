"""Bearer-token check for admin endpoints (boosts, item status), compared in constant time."""

from __future__ import annotations

import functools
import hmac

from flask import current_app, request

from precompute.errors import Unauthorized


def admin_required(view):
    @functools.wraps(view)
    def wrapper(*args, **kwargs):
        token = current_app.extensions["prefeed"]["settings"].admin_token
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        if not token:
            raise Unauthorized("admin endpoints are disabled: PREFEED_ADMIN_TOKEN is not set")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), token.encode()):
            raise Unauthorized("missing or invalid admin token")
        return view(*args, **kwargs)

    return wrapper
