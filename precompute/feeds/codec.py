"""The feed value: ONE binary value per user::

    header (44 bytes, little-endian)  magic "PF", format u8 (3), flags u8, count u32,
                                      history_version u64, computed_at f64 (epoch s), model_version u64,
                                      experiment u32, assignment u32, arm u16, reserved u16
    records (12 bytes each)           item_id i64, score f32 — best first

``experiment``: the id of the experiment whose arm ranked the feed (0: none, the promoted bundle ranked it), ``arm``
its index in that experiment (``NO_ARM`` outside any), ``assignment``: the assignment version the feed was ranked
under (it grows at each experiment created or stopped; ``store.py``'s guard keeps a feed of a newer assignment
over one of an older at the same history version). ``model_version``: the bundle that ranked it, 0 for a
simple-method arm.

Format 2, the header's first 32 bytes alone (no experiment), is read too: during an upgrade the feeds written
before it keep serving (as outside any experiment) until they are rewritten. A value of format 1 (32-bit ids) is
unreadable, served as missing and rewritten.

Fixed-size records let the API read only the page it needs with GETRANGE (``page.py``: it reads
``MAX_HEADER_SIZE`` bytes of header whatever the format); ``store.py`` writes whole values under the version guard.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np

MAGIC = b"PF"
FORMAT = 3
#: Formats a reader decodes: this one and the one before it (an upgrade's feeds keep serving).
READABLE = (2, 3)
HEADER_V2 = struct.Struct("<2sBBIQdQ")                 # 32 bytes
HEADER = struct.Struct("<2sBBIQdQIIHH")                # 44 bytes
HEADER_SIZE = HEADER.size
MAX_HEADER_SIZE = max(HEADER.size, HEADER_V2.size)
RECORD = np.dtype([("item", "<i8"), ("score", "<f4")])
RECORD_SIZE = RECORD.itemsize      # 12
#: ``arm`` of a feed ranked outside any experiment.
NO_ARM = 0xFFFF


class CorruptFeed(ValueError):
    pass


@dataclasses.dataclass
class FeedHeader:
    count: int
    history_version: int
    computed_at: float
    model_version: int
    experiment: int = 0          # 0: none
    assignment: int = 0
    arm: int = NO_ARM


@dataclasses.dataclass
class Feed:
    header: FeedHeader
    items: np.ndarray       # int64 ids
    scores: np.ndarray      # float32


def encode(item_ids: np.ndarray, scores: np.ndarray, history_version: int, computed_at: float,
           model_version: int, experiment: int = 0, assignment: int = 0, arm: int = NO_ARM) -> bytes:
    return encode_many(item_ids, scores, [0, len(item_ids)], [history_version], computed_at, model_version,
                       [experiment], assignment, [arm])[0]


def encode_many(item_ids: np.ndarray, scores: np.ndarray, offsets, history_versions, computed_at: float,
                model_version, experiments=None, assignment: int = 0, arms=None) -> list[bytes]:
    """One value per user: user ``k``'s ranked items are ``item_ids[offsets[k]:offsets[k+1]]`` (records built
    for the whole batch at once, then cut). ``model_version``, ``experiments``, ``arms``: one for the batch or one
    per user (defaults: no experiment)."""
    rec = np.empty(len(item_ids), dtype=RECORD)
    rec["item"] = item_ids
    rec["score"] = scores
    body = memoryview(rec.tobytes())
    bounds = np.asarray(offsets, dtype=np.int64).tolist()
    n = len(bounds) - 1
    models = _each(model_version, n)
    experiments = _each(0 if experiments is None else experiments, n)
    arms = _each(NO_ARM if arms is None else arms, n)
    return [HEADER.pack(MAGIC, FORMAT, 0, b - a, int(v), float(computed_at), m, e, int(assignment), arm, 0)
            + body[a * RECORD_SIZE:b * RECORD_SIZE]
            for a, b, v, m, e, arm in zip(bounds[:-1], bounds[1:], history_versions, models, experiments, arms)]


def _each(value, n: int) -> list[int]:
    return [int(value)] * n if np.ndim(value) == 0 else [int(x) for x in value]


def decode_header(blob: bytes) -> tuple[FeedHeader, int]:
    """The header of a value (or of its first ``MAX_HEADER_SIZE`` bytes) and the offset of its first record."""
    if len(blob) < HEADER_V2.size:
        raise CorruptFeed(f"feed value of {len(blob)} bytes is shorter than its header")
    magic, fmt = blob[:2], blob[2]
    if magic != MAGIC or fmt not in READABLE:
        raise CorruptFeed("feed value has an unknown magic or format")
    if fmt == 2:
        _, _, _flags, count, hv, at, mv = HEADER_V2.unpack_from(blob)
        return FeedHeader(count, hv, at, mv), HEADER_V2.size
    if len(blob) < HEADER.size:
        raise CorruptFeed(f"feed value of {len(blob)} bytes is shorter than its header")
    _, _, _flags, count, hv, at, mv, experiment, assignment, arm, _ = HEADER.unpack_from(blob)
    return FeedHeader(count, hv, at, mv, experiment, assignment, arm), HEADER.size


def decode(blob: bytes) -> Feed:
    """Decode a whole value or a prefix of one (as GETRANGE returns); a partial trailing record is ignored."""
    header, start = decode_header(blob)
    n = min(header.count, (len(blob) - start) // RECORD_SIZE)
    rec = np.frombuffer(blob, dtype=RECORD, count=n, offset=start)       # a view: the records are not copied
    return Feed(header, rec["item"], rec["score"])
