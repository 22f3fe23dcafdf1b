"""How current the stored feeds are: coverage and age from the feed headers of a sample of users, and a capped
history of those numbers for the dashboard's chart.

Only the 32-byte headers are read (one GETRANGE per user, pipelined ``chunk`` at a time), never the records. A feed
is *current* when it is readable and stamped with the user's history version or a later one: what ``precompute
--stale`` would leave alone, apart from the bundle that built it (counted separately).

The history is a Redis list on the queue Redis (``<prefix>status:freshness``, newest first, JSON points), trimmed to
``PREFEED_FRESHNESS_POINTS``. A point is appended whenever status is computed (``manage.py status``, the dashboard),
at most once a minute (the newest point's time is kept
beside the list): no process runs only to sample, so the chart has points while someone looks or a cron line runs
``manage.py status`` every minute.
"""

from __future__ import annotations

import json
import time

import numpy as np
import redis

from .codec import MAX_HEADER_SIZE, FeedHeader
from .keys import Keys
from .store import header_of

SAMPLE_EVERY = 60          # seconds between two points of the history


def read_headers(r: redis.Redis, keys: Keys, user_ids: list[int], chunk: int = 1000) -> list[FeedHeader | None]:
    """Each user's feed header, None where the user has no readable feed."""
    out: list[FeedHeader | None] = []
    for i in range(0, len(user_ids), chunk):
        pipe = r.pipeline(transaction=False)
        for uid in user_ids[i:i + chunk]:
            pipe.getrange(keys.feed(uid), 0, MAX_HEADER_SIZE - 1)
        out += [header_of(head) for head in pipe.execute()]
    return out


def summarize(versions: list[tuple[int, int]], headers: list[FeedHeader | None], model_version: int | None,
              now: float) -> dict:
    """Coverage and age of ``headers`` (one per ``(user_id, history_version)`` of ``versions``). Ages in seconds
    since each feed was computed, over the feeds that exist; None when there are none."""
    missing = sum(h is None for h in headers)
    behind = sum(h is not None and h.history_version < v for (_, v), h in zip(versions, headers))
    # (a feed ranked in an experiment's arm is its arm's, whatever ranked it: not another bundle's)
    other_model = sum(h is not None and model_version is not None and not h.experiment
                      and h.model_version != model_version for h in headers)
    ages = np.array([now - h.computed_at for h in headers if h is not None], dtype=np.float64)
    current = len(headers) - missing - behind
    return {
        "sampled": len(headers),
        "current": current,
        "coverage": current / len(headers) if headers else None,
        "missing": missing,
        "behind_history": behind,
        "other_model": other_model,
        "age_p50_s": float(np.percentile(ages, 50)) if len(ages) else None,
        "age_p99_s": float(np.percentile(ages, 99)) if len(ages) else None,
        "age_max_s": float(ages.max()) if len(ages) else None,
    }


def history_key(keys: Keys) -> str:
    return f"{keys.prefix}status:freshness"


# KEYS: the history list, the newest point's time. ARGV: now (s), the point (JSON), points kept, seconds between
# points. The newest point's time is kept beside the list, so two processes computing status at once append one.
_RECORD = """
local last = tonumber(redis.call('GET', KEYS[2]) or '-1e18')
if tonumber(ARGV[1]) - last < tonumber(ARGV[4]) then return 0 end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('LPUSH', KEYS[1], ARGV[2])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[3]) - 1)
return 1
"""


def record(r: redis.Redis, keys: Keys, point: dict, keep: int, now: float | None = None) -> bool:
    """Append ``point`` (with its time ``t``) to the history unless the newest point is less than a minute older;
    True if appended."""
    now = time.time() if now is None else now
    key = history_key(keys)
    point = json.dumps({"t": round(now, 3), **point})
    return bool(r.eval(_RECORD, 2, key, f"{key}:last", repr(now), point, keep, SAMPLE_EVERY))


def history(r: redis.Redis, keys: Keys, n: int) -> list[dict]:
    """The newest ``n`` points of the history, oldest first; points that do not parse are left out."""
    points = []
    for raw in r.lrange(history_key(keys), 0, n - 1):
        try:
            p = json.loads(raw)
        except ValueError:
            continue
        if isinstance(p, dict) and isinstance(p.get("t"), (int, float)):
            points.append(p)
    return points[::-1]
