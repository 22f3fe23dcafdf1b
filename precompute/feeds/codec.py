"""The feed value: ONE binary value per user::

    header (32 bytes, little-endian)  magic "PF", format u8, flags u8, count u32,
                                      history_version u64, computed_at f64 (epoch s), model_version u64
    records (12 bytes each)           item_id i64, score f32 — best first

Format 2 (64-bit item ids); a value of format 1 (32-bit ids) is unreadable, served as missing and rewritten.

Fixed-size records let the API read only the page it needs with GETRANGE (``page.py``); ``store.py`` writes whole
values under the version guard.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np

MAGIC = b"PF"
FORMAT = 2
HEADER = struct.Struct("<2sBBIQdQ")
HEADER_SIZE = HEADER.size          # 32
RECORD = np.dtype([("item", "<i8"), ("score", "<f4")])
RECORD_SIZE = RECORD.itemsize      # 12


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
    items: np.ndarray       # int64 ids
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
    n = min(count, (len(blob) - HEADER_SIZE) // RECORD_SIZE)
    rec = np.frombuffer(blob, dtype=RECORD, count=n, offset=HEADER_SIZE)       # a view: the records are not copied
    return Feed(FeedHeader(count, hv, at, mv), rec["item"], rec["score"])

