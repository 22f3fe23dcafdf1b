"""The two hashes that place a user, the same in every process and on every host, with nothing stored per user.

    h(key, user_id) = (u64 >> 11) / 2**53, where
    u64 = the 8-byte BLAKE2b digest (``hashlib.blake2b(data, digest_size=8)``, no key, no salt, no person) of
          data = key + the user id in ASCII decimal (``str(int(user_id))``: "7", "-3", "9007199254740993"),
          read as an unsigned little-endian 64-bit integer

so ``h`` is the digest as a fraction of 2**64, cut to 53 bits: exactly representable as a float64, and always in
[0, 1) (rounding a 64-bit value to a float could give 1.0).

    slot hash  key = b"prefeed-experiments:"             which experiment, if any: one hash shared by all of them
    arm hash   key = f"{name}:{id}:".encode("utf-8")     which arm of experiment ``id`` called ``name``

A running experiment holds a slot [start, end) of the slot hash; its arms split the arm hash by their shares. The
arm hash is keyed by the experiment, so arms are independent of the slot and of any other experiment's arms.
BLAKE2b's output is uniform whatever the ids look like (consecutive, sparse, negative).

Hashing is one ``hashlib`` call per id (about a microsecond): the key's state is computed once per call and copied
for each id, which gives the same digest as hashing the concatenation.
"""

from __future__ import annotations

import hashlib

import numpy as np

SLOT_KEY = b"prefeed-experiments:"
#: 2**-53: the weight of the lowest of the 53 bits kept.
_UNIT = 1.0 / (1 << 53)


def arm_key(name: str, experiment_id: int) -> bytes:
    """The arm hash's key of experiment ``experiment_id`` called ``name``."""
    return f"{name}:{experiment_id}:".encode("utf-8")


def fractions(key: bytes, user_ids: np.ndarray) -> np.ndarray:
    """``h(key, u)`` for every id of ``user_ids`` (any integer array), as float64 in [0, 1)."""
    ids = np.asarray(user_ids).ravel().tolist()
    if not ids:
        return np.zeros(0, dtype=np.float64)
    head = hashlib.blake2b(key, digest_size=8)
    digests = bytearray()
    for uid in ids:
        h = head.copy()
        h.update(str(int(uid)).encode("ascii"))
        digests += h.digest()
    words = np.frombuffer(bytes(digests), dtype="<u8")
    return (words >> np.uint64(11)).astype(np.float64) * _UNIT


def fraction(key: bytes, user_id: int) -> float:
    """``h(key, user_id)`` for one id, without numpy: the API places one user per page."""
    h = hashlib.blake2b(key, digest_size=8)
    h.update(str(int(user_id)).encode("ascii"))
    return (int.from_bytes(h.digest(), "little") >> 11) * _UNIT
