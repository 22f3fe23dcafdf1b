"""Holding under abuse and loss: how many failed authentications one client address may make, which proxies'
``X-Forwarded-For`` names the client, and the cursor secret a rotation retired."""

from __future__ import annotations

import dataclasses

from .environment import setting


@dataclasses.dataclass(frozen=True)
class SecuritySettings:
    # -- abuse and rotation ------------------------------------------------------------------------------------
    auth_failures_per_minute: int = setting(30, "PREFEED_AUTH_FAILURES_PER_MINUTE", "failed authentications (a "
                                            "key unknown, revoked or not of a key's shape) one client address may "
                                            "make per minute, counted across every API process; past them the "
                                            "address is answered 429 with `Retry-After` before its key is looked up",
                                            unit="1/min")
    auth_failures_burst: int = setting(30, "PREFEED_AUTH_FAILURES_BURST", "failed authentications one client "
                                       "address may make at once before the per-minute rate holds it",
                                       unit="failures")
    trusted_proxies: str = setting("", "PREFEED_TRUSTED_PROXIES", "comma-separated addresses or CIDRs of the "
                                   "reverse proxies in front of the API: a request from one of them is counted "
                                   "against the address its `X-Forwarded-For` names (read from the right, past "
                                   "the trusted ones); empty: the connection's own address, the header ignored",
                                   shown="empty")
    cursor_secret_previous: str | None = setting(None, "PREFEED_CURSOR_SECRET_PREVIOUS", "the `PREFEED_CURSOR_"
                                                 "SECRET` a rotation replaced: cursors it signed are still read for "
                                                 "`PREFEED_CURSOR_TTL` after the first API process started with it "
                                                 "here (then they restart the scroll)", secret=True)
