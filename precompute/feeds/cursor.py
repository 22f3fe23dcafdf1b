"""Scroll cursors: what a client hands back to get the next page of a feed that may change between two reads.

A cursor carries what the scroll's guarantees need and no more: the user it belongs to, the ids served so far (so
none is served twice, whatever the feed has become), and how many slots and boosted items the scroll has shown (so
the boost density holds on the pages put together). The next page is the served list of the feed as it is now
(live rules and boosts applied) without the ids served, from the scroll's next slot (``boosts.lift_boosts``):
every still-eligible item ranked above the deepest one served is either served already or on that page.

Encoding: the served ids sorted, delta-coded as little-endian int64 and zlib-compressed (dense id ranges shrink to a
byte or two per id), behind a small header; signed and dated with ``itsdangerous`` (HMAC-SHA1 over the payload and
its timestamp). A tampered cursor, or one issued for another user, is refused (``InvalidInput``); an expired one
(older than ``PREFEED_CURSOR_TTL``) is reported as such, and the scroll starts over.
"""

from __future__ import annotations

import base64
import dataclasses
import secrets
import struct
import zlib

import numpy as np
from itsdangerous import BadSignature, SignatureExpired, TimestampSigner

from ..errors import InvalidInput

_HEAD = struct.Struct("<BqII")          # layout version, user id, slots served, boosted items served
_VERSION = 1
#: The most ids a cursor carries: a scroll of 20 pages of the largest page (100).
MAX_SERVED = 2000


@dataclasses.dataclass(frozen=True)
class Scroll:
    user_id: int
    served: frozenset[int]
    slots: int          # items served so far (the next page starts at this slot)
    boosted: int        # boosted items among them

    def after(self, page_ids: list[int], page_boosted: int) -> Scroll:
        return Scroll(self.user_id, self.served | frozenset(page_ids), self.slots + len(page_ids),
                      self.boosted + page_boosted)


def shared_secret(r, key: str) -> bytes:
    """The secret every API process signs cursors with: one random value, set once in Redis (``key``), never
    expiring."""
    r.set(key, secrets.token_hex(32), nx=True)
    return r.get(key)


def start(user_id: int) -> Scroll:
    return Scroll(user_id, frozenset(), 0, 0)


class Cursors:
    def __init__(self, secret: bytes, ttl: int) -> None:
        self.signer = TimestampSigner(secret, salt="prefeed.cursor")
        self.ttl = ttl

    def encode(self, scroll: Scroll) -> str | None:
        """The cursor of ``scroll``; None once it has served ``MAX_SERVED`` items (the scroll ends there)."""
        if len(scroll.served) >= MAX_SERVED:
            return None
        ids = np.sort(np.fromiter(scroll.served, dtype=np.int64, count=len(scroll.served)))
        deltas = np.diff(ids, prepend=np.int64(0)).astype("<i8")
        head = _HEAD.pack(_VERSION, scroll.user_id, scroll.slots, scroll.boosted)
        payload = head + zlib.compress(deltas.tobytes(), 1)
        return self.signer.sign(base64.urlsafe_b64encode(payload).rstrip(b"=")).decode("ascii")

    def decode(self, cursor: str, user_id: int) -> Scroll | None:
        """The scroll ``cursor`` continues, or None when it has expired; ``InvalidInput`` when it was not issued
        here, was altered, or belongs to another user."""
        try:
            raw = self.signer.unsign(cursor.encode("ascii"), max_age=self.ttl)
        except SignatureExpired:
            return None
        except (BadSignature, UnicodeEncodeError):
            raise InvalidInput("cursor is not one this API issued (or it was altered)") from None
        payload = base64.urlsafe_b64decode(raw + b"=" * (-len(raw) % 4))
        version, owner, slots, boosted = _HEAD.unpack_from(payload)
        if version != _VERSION or owner != user_id:
            raise InvalidInput("cursor belongs to another user's scroll")
        ids = np.cumsum(np.frombuffer(zlib.decompress(payload[_HEAD.size:]), dtype="<i8"))
        return Scroll(user_id, frozenset(ids.tolist()), slots, boosted)
