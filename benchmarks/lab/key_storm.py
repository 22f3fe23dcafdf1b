"""The abuse benchmark's key storm: random bearer keys from addresses spread over 127.0.0.0/8, sent to two apps in
this process (each one API process: its own keyring and engine), with every database query counted per request by
a ``before_cursor_execute`` listener on each app's engine. Requests run one at a time, so a request's queries are
exactly those counted while it ran.

The keys: about half well-formed (``pf_`` and 43 URL-safe characters) and never seen before, one in ten a repeat of a
recent well-formed one (to the same app or the other), the rest malformed (wrong prefix, length or characters, or
no key at all). Real keys' feed pages are timed in the same loop, alternating rounds without and with storm requests
before them, so the machine's noise moves both alike."""

from __future__ import annotations

import dataclasses
import random
import secrets
import string
import time
from collections import Counter

import numpy as np
from sqlalchemy import event

from api import create_app
from api.services import services
from precompute.data import api_keys

#: The characters of a key after its prefix.
_ALPHABET = string.ascii_letters + string.digits + "-_"


class QueryCount:
    """Queries an engine has run (``before_cursor_execute``)."""

    def __init__(self, engine) -> None:
        self.n = 0
        event.listen(engine, "before_cursor_execute", self._count)

    def _count(self, *args) -> None:
        self.n += 1


def storm(settings, real_key: str, users: list[int], n_keys: int, n_pages: int, seed: int = 0) -> dict:
    """``n_keys`` storm requests, and ``n_pages`` real feed pages in quiet rounds and as many in storm rounds."""
    rng = random.Random(seed)
    quiet = dataclasses.replace(settings, log_level="WARNING")        # no log line per request on the console
    apps = [create_app(quiet) for _ in range(2)]
    clients = [app.test_client(use_cookies=False) for app in apps]
    counts = [QueryCount(services(app).engine) for app in apps]
    per_key: Counter = Counter()                  # (app, key) -> queries, well-formed keys only
    queries = Counter()                           # kind -> queries
    requests = Counter()                          # kind -> requests
    statuses: Counter = Counter()
    recent: list[str] = []
    real = {"Authorization": f"Bearer {real_key}"}
    page_ms: dict[str, list[float]] = {"quiet": [], "storm": []}
    per_round = max(1, n_keys // n_pages)
    sent = 0

    def one_storm_request() -> None:
        nonlocal sent
        which = rng.randrange(2)
        roll = rng.random()
        if roll < 0.1 and recent:
            kind, key = "well_formed", rng.choice(recent[-1000:])
        elif roll < 0.55:
            kind, key = "well_formed", api_keys.PREFIX + secrets.token_urlsafe(32)
            recent.append(key)
        else:
            kind, key = "malformed", _malformed(rng)
        address = f"127.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(2, 256)}"
        before = counts[which].n
        answer = clients[which].get(f"/feed/{rng.choice(users)}?limit=20",
                                    headers={"Authorization": f"Bearer {key}"} if key else {},
                                    environ_base={"REMOTE_ADDR": address})
        spent = counts[which].n - before
        statuses[answer.status_code] += 1
        requests[kind] += 1
        queries[kind] += spent
        if kind == "well_formed":
            per_key[(which, key)] += spent
        sent += 1

    def page(k: int) -> float:
        t0 = time.perf_counter()
        answer = clients[k % 2].get(f"/feed/{users[k % len(users)]}?limit=20", headers=real,
                                    environ_base={"REMOTE_ADDR": "127.0.0.1"})
        took = time.perf_counter() - t0
        if answer.status_code != 200:
            raise RuntimeError(f"a real key's feed page answered {answer.status_code}")
        return took * 1000

    for k in range(50):                          # warm both apps (keyring, connections) before timing
        page(k)
    t0 = time.perf_counter()
    for k in range(2 * n_pages):
        if k % 2:                                # storm round: its requests, then the page
            for _ in range(per_round):
                one_storm_request()
            page_ms["storm"].append(page(k))
        else:
            page_ms["quiet"].append(page(k))
    while sent < n_keys:
        one_storm_request()
    seconds = time.perf_counter() - t0
    distinct = len({key for _, key in per_key})
    worst = max(per_key.values(), default=0)
    quiet, stormy = np.array(page_ms["quiet"]), np.array(page_ms["storm"])
    for app in apps:
        impressions = services(app).impressions
        if impressions is not None:
            impressions.close()
        services(app).engine.dispose()
    return dict(
        requests=sum(requests.values()), seconds=seconds, rate_per_s=sum(requests.values()) / seconds,
        well_formed_requests=requests["well_formed"], malformed_requests=requests["malformed"],
        distinct_well_formed=distinct, app_key_pairs=len(per_key), queries_unknown=queries["well_formed"],
        queries_malformed=queries["malformed"], most_queries_one_key_one_process=worst,
        per_process_limit_ok=worst <= 1 and queries["malformed"] == 0,
        statuses={str(k): v for k, v in sorted(statuses.items())},
        real=dict(pages=len(quiet) + len(stormy), storm_requests_per_page=per_round,
                  p50_ms_without=float(np.percentile(quiet, 50)), p99_ms_without=float(np.percentile(quiet, 99)),
                  p50_ms_with=float(np.percentile(stormy, 50)), p99_ms_with=float(np.percentile(stormy, 99)),
                  ratio_p99=float(np.percentile(stormy, 99) / np.percentile(quiet, 99))))


def _malformed(rng: random.Random) -> str:
    """A key no stored key can be: the wrong prefix, length or characters, or none at all (no header)."""
    body = "".join(rng.choice(_ALPHABET) for _ in range(43))
    return rng.choice([
        "", "sk_" + body, api_keys.PREFIX + body[:rng.randrange(1, 43)], api_keys.PREFIX + body + "x",
        api_keys.PREFIX + body[:42] + rng.choice("!$%+/=.~"), body, secrets.token_hex(rng.randrange(1, 64))])
