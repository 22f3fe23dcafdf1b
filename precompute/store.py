"""Redis layout and the feed codec.

A feed is ONE binary value per user::

    header (32 bytes, little-endian)  magic "PF", format u8, flags u8, count u32,
                                      history_version u64, computed_at f64 (epoch s), model_version u64
    records (8 bytes each)            item_id u32, score f32 — best first

Fixed-size records let the API read only the page it needs with GETRANGE. Writes go through a Lua script that
refuses to replace a feed stamped with a newer history version (the version guard), and set the TTL in the same
step, so a reader sees either the old feed or the new one, never a mix.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import redis

from . import defaults

MAGIC = b"PF"
FORMAT = 1
HEADER = struct.Struct("<2sBBIQdQ")
HEADER_SIZE = HEADER.size          # 32
RECORD = np.dtype([("item", "<u4"), ("score", "<f4")])
RECORD_SIZE = RECORD.itemsize      # 8

# Returns 1 if written, 0 if the stored feed has a newer history version. The stored version is read from the
# header bytes 8..15 (u64 little-endian); Lua numbers are doubles, exact up to 2^53.
_GUARDED_SET = """
local head = redis.call('GETRANGE', KEYS[1], 0, 15)
if string.len(head) == 16 and string.sub(head, 1, 2) == 'PF' then
  local v = 0
  for i = 16, 9, -1 do v = v * 256 + string.byte(head, i) end
  if v > tonumber(ARGV[2]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[3])
return 1
"""


class CorruptFeed(ValueError):
    pass


@dataclasses.dataclass
class FeedHeader:
    count: int
    history_version: int
    computed_at: float
    model_version: int


@dataclasses.dataclass
class Feed:
    header: FeedHeader
    items: np.ndarray       # uint32 ids
    scores: np.ndarray      # float32


def encode(item_ids: np.ndarray, scores: np.ndarray, history_version: int, computed_at: float,
           model_version: int) -> bytes:
    return encode_many(item_ids, scores, [0, len(item_ids)], [history_version], computed_at, model_version)[0]


def encode_many(item_ids: np.ndarray, scores: np.ndarray, offsets, history_versions, computed_at: float,
                model_version: int) -> list[bytes]:
    """One value per user: user ``k``'s ranked items are ``item_ids[offsets[k]:offsets[k+1]]`` (records built
    for the whole batch at once, then cut)."""
    rec = np.empty(len(item_ids), dtype=RECORD)
    rec["item"] = item_ids
    rec["score"] = scores
    body = memoryview(rec.tobytes())
    bounds = np.asarray(offsets, dtype=np.int64).tolist()
    return [HEADER.pack(MAGIC, FORMAT, 0, b - a, int(v), float(computed_at), int(model_version))
            + body[a * RECORD_SIZE:b * RECORD_SIZE]
            for a, b, v in zip(bounds[:-1], bounds[1:], history_versions)]


def decode(blob: bytes) -> Feed:
    """Decode a whole value or a prefix of one (as GETRANGE returns); a partial trailing record is ignored."""
    if len(blob) < HEADER_SIZE:
        raise CorruptFeed(f"feed value of {len(blob)} bytes is shorter than its header")
    magic, fmt, _flags, count, hv, at, mv = HEADER.unpack_from(blob)
    if magic != MAGIC or fmt != FORMAT:
        raise CorruptFeed("feed value has an unknown magic or format")
    body = blob[HEADER_SIZE:]
    n = min(count, len(body) // RECORD_SIZE)
    rec = np.frombuffer(body, dtype=RECORD, count=n)
    return Feed(FeedHeader(count, hv, at, mv), rec["item"], rec["score"])


class Keys:
    """Every key prefeed uses, under one prefix."""

    def __init__(self, prefix: str = defaults.KEY_PREFIX) -> None:
        self.prefix = prefix
        self.boost_prefix = f"{prefix}boost:"     # one key per boosted item: value weight, native TTL
        self.inactive = f"{prefix}inactive"        # set of deactivated item ids
        self.dirty = f"{prefix}dirty"              # zset user_id -> time it may next be claimed
        self.drain_flag = f"{prefix}drain:pending"
        self.drain_scheduled_flag = f"{prefix}drain:scheduled"
        self.popular_global = f"{prefix}popular:global"

    def feed(self, user_id: int) -> str:
        return f"{self.prefix}feed:{user_id}"

    def boost(self, item_id: int) -> str:
        return f"{self.boost_prefix}{item_id}"

    def seen(self, user_id: int) -> str:
        return f"{self.prefix}seen:{user_id}"       # zset item_id -> history version of the interaction

    def popular_category(self, category: int) -> str:
        return f"{self.prefix}popular:cat:{category}"


class FeedStore:
    def __init__(self, r: redis.Redis, keys: Keys, ttl: int = defaults.FEED_TTL_SECONDS) -> None:
        self.r = r
        self.keys = keys
        self.ttl = ttl
        self._guarded_set = r.register_script(_GUARDED_SET)

    def write_many(self, feeds: list[tuple[int, bytes, int]]) -> list[bool]:
        """Write ``(user_id, value, history_version)`` feeds in one pipeline; True where written, False where a
        newer feed was kept."""
        pipe = self.r.pipeline(transaction=False)
        for user_id, value, version in feeds:
            self._guarded_set(keys=[self.keys.feed(user_id)], args=[value, version, self.ttl], client=pipe)
        return [bool(x) for x in pipe.execute()]

    def read(self, user_id: int, n_records: int | None = None) -> Feed | None:
        key = self.keys.feed(user_id)
        blob = self.r.get(key) if n_records is None else \
            self.r.getrange(key, 0, HEADER_SIZE + n_records * RECORD_SIZE - 1)
        return decode(blob) if blob else None

    def stale_users(self, versions: list[tuple[int, int]], chunk: int = 1000) -> list[int]:
        """Of ``(user_id, history_version)`` pairs, the users whose stored feed is missing or older."""
        stale = []
        for i in range(0, len(versions), chunk):
            part = versions[i:i + chunk]
            pipe = self.r.pipeline(transaction=False)
            for uid, _ in part:
                pipe.getrange(self.keys.feed(uid), 0, HEADER_SIZE - 1)
            for (uid, version), head in zip(part, pipe.execute()):
                fields = HEADER.unpack(head) if len(head) == HEADER_SIZE else None
                if fields is None or fields[0] != MAGIC or fields[4] < version:
                    stale.append(uid)
        return stale

    def publish_popular(self, global_ids: np.ndarray, by_category: list[np.ndarray]) -> None:
        """Popular item ids for the fallback feed, one uint32 array per list, replaced in one transaction."""
        pipe = self.r.pipeline(transaction=True)
        pipe.set(self.keys.popular_global, np.asarray(global_ids, dtype="<u4").tobytes())
        for c, ids in enumerate(by_category):
            pipe.set(self.keys.popular_category(c), np.asarray(ids, dtype="<u4").tobytes())
        pipe.execute()
