"""Scroll cursors: what a client hands back to get the next page of a feed that may change between two reads.

A cursor carries what the scroll's guarantees need and no more: the user it belongs to, the ids served so far (so
none is served twice, whatever the feed has become), how many slots and boosted items the scroll has shown (so the
boost density holds on the pages put together) and, with the diversity rule on, the categories of its last W-1
slots (layout 4, ``diversity.pack``). The next page is the served list of the feed as it is now (live rules,
boosts and diversity applied) without the ids served, from the scroll's next slot (``boosts.lift_boosts``): every
still-eligible item ranked above the deepest one served is served already, on that page, or (diversity) waiting.

Encoding: a small header (layout version, key id, user, slots and boosted items served, the time it was issued),
then the served ids sorted and delta-coded: the smallest id, then each gap in the fewest bytes (1, 2, 4 or 8) that
hold the largest, zlib-compressed only past ``_RAW_MAX`` bytes (a deep scroll: 2,000 ids scattered over 20,000
items take ~1.7k characters, well inside a request line). Signed with a 128-bit keyed BLAKE2b MAC over all of it
(BLAKE2's own keyed mode, which needs no HMAC around it), under a key derived from the shared secret; URL-safe
base64. A tampered cursor, or one issued for another user, is refused (``InvalidInput``); an expired one (older than
``PREFEED_CURSOR_TTL``), or one of a layout this version does not write, is reported as expired, and the scroll
starts over.

Key ids and rotation: the key id is a 32-bit fingerprint of the secret that signed the cursor (``key_id``), so a
reader knows which of its secrets to check the MAC with before it checks it. ``Cursors`` holds the current secret
and the previous ones, each read until ``PREFEED_CURSOR_TTL`` after it was replaced: the operator's
``PREFEED_CURSOR_SECRET_PREVIOUS`` from the time its rotation was stamped in Redis (``retired_at``), a secret this
process replaced when it followed Redis (below) from then. A cursor whose key id names none of them was signed with
a secret this API no longer has (the rotation is over, or Redis lost the secret while no process held it): it is
read as expired, and the scroll starts over, where a MAC check under the wrong secret would have been a 400. So are
cursors of the layout before key ids (version 2). Only a cursor whose secret is known can be told to be tampered
with; one whose key id was altered restarts the scroll, which any client may do anyway.

A lost secret: without ``PREFEED_CURSOR_SECRET`` the secret is kept in the queue Redis, which may lose it (restarted
empty) while API processes hold it in memory. So each process compares its secret with the kept one at most every
``PREFEED_LIVE_REFRESH_MS`` (one GET, in the request that finds the check due: no round trip on other pages;
``Cursors.check``): a key gone is given this process's secret back (``SET NX``: the first process to look wins, and
the others follow it); a key holding another secret (a process started after the loss made one, or another put its
own back) makes this process sign with that one and read its own for ``PREFEED_CURSOR_TTL`` more. Every process
signs with one secret within a refresh interval of the first one that looks, without a restart. Scrolls restart
in that interval only (a page on a process that has not looked yet), and when a process started after the loss made
a new secret before any older process put the old one back: cursors of the old secret then restart on the new
process. Request threads read the held secrets as one immutable value (``_Held``) that a check replaces whole.

Every page of a scroll decodes one cursor and encodes the next, inside a request where caches are cold: there a
numpy call costs ~5-15 us, zlib's set-up ~25 us and an HMAC through OpenSSL ~25 us, against ~6 us for BLAKE2b (built
into Python). So both directions are plain Python over the ids, one ``struct`` call and one MAC.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import secrets
import struct
import time
import zlib
from itertools import accumulate
from operator import sub
from typing import Any, NamedTuple

import redis

from ..errors import InvalidInput
from . import diversity

#: layout version, key id, user id, slots served, boosted items served, issued at (epoch s), smallest id served,
#: body form (the width in bytes of each gap, plus ``_PACKED`` when the gaps are zlib-compressed)
_HEAD = struct.Struct("<BIqIIIqB")
_VERSION, _WITH_RECENT = 3, 4      # 4: layout 3 with ``diversity.pack(Scroll.recent)`` before the gaps
_UNNAMED = (1, 2)       # layouts before key ids: signed with a secret that cannot be named, so they start over
_NAMED, _PACKED = struct.Struct("<BI"), 0x80    # every layout from 3 on starts with its version and key id
#: Gaps of at most this many bytes go as they are (~1.4k characters): zlib's set-up costs more than they would
#: shrink; past it (more than ~500 scattered ids) they are compressed, to about half.
_RAW_MAX = 1024
_CODES, _TAG = {1: "B", 2: "H", 4: "I", 8: "Q"}, 16       # gap widths' struct codes; bytes of MAC (128 bits)
#: URL-safe base64 (RFC 4648 section 5) from and to the standard alphabet ``binascii`` speaks.
_URLSAFE, _STANDARD = bytes.maketrans(b"+/", b"-_"), bytes.maketrans(b"-_", b"+/")
_PAD = (b"", b"===", b"==", b"=")       # what a cursor of ``len % 4`` characters lacks (it goes without padding)
#: The most ids a cursor carries: a scroll of 20 pages of the largest page (100).
MAX_SERVED = 2000


class Scroll(NamedTuple):
    """Immutable, and a tuple: built on every page, where a frozen dataclass's ``__init__`` (one
    ``object.__setattr__`` per field) cost more."""

    user_id: int
    served: tuple[int, ...]     # the ids served so far, ascending (as the cursor carries them)
    slots: int                  # items served so far (the next page starts at this slot)
    boosted: int                # boosted items among them
    recent: tuple[int, ...] = ()    # categories of the last W-1 slots, oldest first (``diversity.py``)

    def after(self, page_ids: list[int], page_boosted: int, recent: tuple[int, ...] = ()) -> Scroll:
        """The scroll once it has served a page of ``page_ids``, ``page_boosted`` of them boosted."""
        return Scroll(self.user_id, tuple(_merged(self.served, page_ids)), self.slots + len(page_ids),
                      self.boosted + page_boosted, recent)


def shared_secret(r, key: str) -> bytes:
    """The secret every API process signs cursors with: one random value, set once in Redis (``key``), never
    expiring."""
    r.set(key, secrets.token_hex(32), nx=True)
    return r.get(key)


def key_id(secret: bytes) -> int:
    """The 32-bit name of ``secret`` that its cursors carry (a fingerprint: it tells nothing a MAC does not)."""
    return int.from_bytes(hashlib.blake2b(secret, digest_size=4, person=b"prefeed.key-id").digest(), "little")


def retired_at(r, key: str, previous: bytes) -> float:
    """When ``previous`` was first seen replaced (epoch s): stamped in Redis (under ``key`` and the secret's key id)
    by the first API process that starts with it as the previous secret, and read by every other."""
    stamp = f"{key}:retired:{key_id(previous):08x}"
    r.set(stamp, repr(time.time()), nx=True)
    return float(r.get(stamp))


def from_settings(settings, r, key: str) -> Cursors:
    """The ``Cursors`` of ``settings``: ``PREFEED_CURSOR_SECRET``, or the secret kept in Redis (``key``) followed at
    most every ``PREFEED_LIVE_REFRESH_MS``; and ``PREFEED_CURSOR_SECRET_PREVIOUS`` read for ``PREFEED_CURSOR_TTL``
    after its rotation."""
    previous = settings.cursor_secret_previous.encode() if settings.cursor_secret_previous else None
    retired = None if previous is None else retired_at(r, key, previous)
    if settings.cursor_secret:
        return Cursors(settings.cursor_secret.encode(), settings.cursor_ttl, previous, retired)
    return Cursors(shared_secret(r, key), settings.cursor_ttl, previous, retired,
                   kept=Kept(r, key, settings.live_refresh_ms / 1000.0))


def start(user_id: int) -> Scroll:
    return Scroll(user_id, (), 0, 0)


class Kept(NamedTuple):
    """Where the secret is kept, and how often a process compares its own with it."""

    r: redis.Redis              # the queue Redis
    key: str                    # ``Keys.cursor_secret``
    every: float                # seconds between two checks (``PREFEED_LIVE_REFRESH_MS``)


class _Held(NamedTuple):
    """The secrets a ``Cursors`` holds at one time: built whole and never changed, so request threads read it
    without a lock while a check replaces it (one attribute store)."""

    secret: bytes               # signs new cursors
    key_id: int
    mac: Any                    # the keyed MAC state of ``secret`` (``_keyed``)
    #: key id -> (keyed MAC state, epoch s until which its cursors are read): ``secret`` and every previous one
    known: dict[int, tuple[Any, float]]
    previous_until: float | None    # the latest such end of a previous secret (None: none held)


def _held(secret: bytes, previous: dict[int, tuple[Any, float]]) -> _Held:
    """Signing with ``secret``, reading the ``previous`` secrets (key id -> keyed MAC state, end) too."""
    kid, mac = key_id(secret), _keyed(secret)
    previous = {k: v for k, v in previous.items() if k != kid}
    return _Held(secret, kid, mac, {**previous, kid: (mac, float("inf"))},
                 max((until for _, until in previous.values()), default=None))


class Cursors:
    """Signs cursors with ``secret``; reads those of ``secret`` and, until ``ttl`` seconds after ``retired_at``
    (epoch s), those of ``previous``. With ``kept``, follows the secret kept in Redis (``check``)."""

    def __init__(self, secret: bytes, ttl: int, previous: bytes | None = None,
                 retired_at: float | None = None, kept: Kept | None = None) -> None:
        self.ttl = ttl
        others = {}
        if previous is not None:
            others[key_id(previous)] = (_keyed(previous), (time.time() if retired_at is None else retired_at) + ttl)
        self._held = _held(secret, others)
        self._kept = kept
        self._checked = time.monotonic()        # monotonic s of the last check (``secret`` was just read)

    @property
    def key_id(self) -> int:
        """The key id of the cursors this signs."""
        return self._held.key_id

    @property
    def previous_until(self) -> float | None:
        """Epoch s until which cursors of a previous secret are read (None: no previous secret)."""
        return self._held.previous_until

    def check(self) -> None:
        """Follow the secret kept in Redis (the module doc): give a key that is gone this process's secret
        (``SET NX``), or sign with the one the key holds if it is another, reading this process's own for ``ttl``
        more. A Redis that does not answer leaves the secrets as they are until the next check: the page does not
        need it."""
        if self._kept is None:
            return                      # PREFEED_CURSOR_SECRET: nothing kept in Redis to follow
        self._checked = time.monotonic()
        held, (r, key, _) = self._held, self._kept
        try:
            kept = r.get(key)
            if kept is None:
                r.set(key, held.secret, nx=True)
                kept = r.get(key)
        except redis.RedisError:
            return
        if kept is None or kept == held.secret:
            return
        now = time.time()
        still = {k: v for k, v in held.known.items() if v[1] > now and k != held.key_id}
        self._held = _held(kept, {**still, held.key_id: (held.mac, now + self.ttl)})

    def _current(self) -> _Held:
        """The secrets held, once checked against Redis if a check is due."""
        if self._kept is not None and time.monotonic() - self._checked >= self._kept.every:
            self.check()
        return self._held

    def encode(self, scroll: Scroll) -> str | None:
        """The cursor of ``scroll``; None once it has served ``MAX_SERVED`` items (the scroll ends there), or
        before it has served any (its next page is the top)."""
        return self._token(scroll.user_id, scroll.served, scroll.slots, scroll.boosted, scroll.recent)

    def next(self, scroll: Scroll, page_ids: list[int], page_boosted: int, recent: tuple[int, ...] = ()) -> str | None:
        """The cursor of ``scroll.after(...)``, encoded without building it: a page's last step."""
        return self._token(scroll.user_id, _merged(scroll.served, page_ids), scroll.slots + len(page_ids),
                           scroll.boosted + page_boosted, recent)

    def _token(self, user_id: int, ids, slots: int, boosted: int, recent: tuple[int, ...]) -> str | None:
        """``encode`` of the scroll of these fields (``ids``: the served ids, ascending)."""
        if not 0 < len(ids) < MAX_SERVED:
            return None
        held = self._current()
        gaps = list(map(sub, ids[1:], ids))
        width = _width(max(gaps, default=0))
        body = struct.pack(f"<{len(gaps)}{_CODES[width]}", *gaps)
        form = width
        if len(body) > _RAW_MAX:
            body, form = zlib.compress(body, 1), width | _PACKED
        body = diversity.pack(recent) + body if recent else body
        payload = _HEAD.pack(_WITH_RECENT if recent else _VERSION, held.key_id, user_id, slots, boosted,
                             int(time.time()), ids[0], form) + body
        signed = binascii.b2a_base64(payload + self._sign(payload, held.mac), newline=False)
        return signed.translate(_URLSAFE).rstrip(b"=").decode("ascii")

    def decode(self, cursor: str, user_id: int) -> Scroll | None:
        """The scroll ``cursor`` continues, or None when it has expired (or has a layout this version does not
        write, or was signed with a secret this API no longer holds); ``InvalidInput`` when it is not a cursor, was
        altered, or belongs to another user."""
        try:
            raw = binascii.a2b_base64(cursor.encode("ascii").translate(_STANDARD) + _PAD[len(cursor) & 3])
        except (binascii.Error, UnicodeEncodeError):        # not base64, or not ASCII
            raw = b""
        payload = raw[:-_TAG]
        known_ids = self._current().known
        if len(payload) < _HEAD.size or payload[0] not in (_VERSION, _WITH_RECENT):
            return self._other_layout(payload, raw[-_TAG:], known_ids)
        _, kid, owner, slots, boosted, issued, first, form = _HEAD.unpack_from(payload)
        known = known_ids.get(kid)
        if known is None:
            return None                 # signed with a secret this API no longer has: start over
        if not hmac.compare_digest(raw[-_TAG:], self._sign(payload, known[0])):
            raise InvalidInput("cursor is not one this API issued (or it was altered)")
        now = time.time()
        if not 0 <= int(now) - issued <= self.ttl or now > known[1]:
            return None                 # expired, dated ahead of this host's clock, or of a retired secret
        if owner != user_id:
            raise InvalidInput("cursor belongs to another user's scroll")
        recent, body = diversity.unpack(payload[_HEAD.size:], payload[0] == _WITH_RECENT)
        if form & _PACKED:
            body = zlib.decompress(body)
        width = form & ~_PACKED
        gaps = body if width == 1 else struct.unpack(f"<{len(body) // width}{_CODES[width]}", body)
        return Scroll(user_id, tuple(accumulate(gaps, initial=first)), slots, boosted, recent)

    def _other_layout(self, payload: bytes, tag: bytes, known_ids: dict) -> None:
        """A cursor not of this layout: None (start over) if it is of the layout before key ids, or of another
        layout signed with a secret held here; ``InvalidInput`` otherwise."""
        if payload and payload[0] in _UNNAMED and len(payload) >= _HEAD.size - _NAMED.size + 1:
            return None                 # before key ids: its secret cannot be told
        known = known_ids.get(_NAMED.unpack_from(payload)[1]) if len(payload) >= _NAMED.size else None
        if known is None or not hmac.compare_digest(tag, self._sign(payload, known[0])):
            raise InvalidInput("cursor is not one this API issued (or it was altered)")
        return None

    def _sign(self, payload: bytes, keyed=None) -> bytes:
        mac = (self._held.mac if keyed is None else keyed).copy()
        mac.update(payload)
        return mac.digest()


def _keyed(secret: bytes):
    """The cursors' own key, whatever else the secret signs, as a keyed MAC state: set up once and copied per MAC
    (keying a BLAKE2b state compresses a block of its own)."""
    key = hashlib.blake2b(secret, digest_size=32, person=b"prefeed.cursor").digest()
    return hashlib.blake2b(key=key, digest_size=_TAG)


def _width(largest: int) -> int:
    """The fewest bytes (1, 2, 4 or 8) that hold the gap ``largest`` (>= 0)."""
    return 1 if largest < 1 << 8 else 2 if largest < 1 << 16 else 4 if largest < 1 << 32 else 8


def _merged(served: tuple[int, ...], page_ids: list[int]) -> list[int]:
    """``served`` (ascending) and a page's ids, ascending. ``served`` is one ascending run, so the sort is a merge:
    ~3 us at 400 ids, where sorting a set of them from scratch was ~13 us."""
    return sorted([*served, *page_ids])
