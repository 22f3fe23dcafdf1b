"""The collector's intake: the served pages in the Redis list (``impressions.py``) moved to the database.

The list is read a batch at a time; each batch is stored in one transaction (``served_pages``, each user's
``exposures`` counts for the report, each item's impressions of the day, ``data/item_days.py``), then trimmed from
the list. A batch stored but not trimmed (the job died between) is read again and stores nothing twice: a page is
named by ``(writer, seq)``, and copies of one page in a batch (a flush sent again after its reply was lost) are
stored and counted once. Gaps in a writer's numbers are counted lost. A batch the database refuses for what it holds
(a constraint, a value out of range; not for being unreachable) is stored page by page; the pages it refuses are set
aside in a bounded Redis list (``impressions:rejected``) and counted, so no record can block the list. The list is
trimmed only while the collection still holds its lock (checked in the same script), each batch renewing it: a
collection that outlived its lock stops instead of trimming pages another has not stored.
"""

from __future__ import annotations

import dataclasses
import logging

import redis
from sqlalchemy import Engine, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DataError, IntegrityError

from ..data import item_days
from ..data.tables import Exposure, ImpressionWriter, ServedPage
from ..errors import first_line
from ..feeds.keys import Keys
from .impressions import Impression, unpack

log = logging.getLogger(__name__)

#: Pages read from Redis and stored per transaction.
PAGE_BATCH = 2000
#: Records set aside (refused by the database) kept in Redis for an operator to read; older ones are dropped.
REJECTED_KEEP = 1000

#: Trim the list only while the lock is ours, and renew it: KEYS lock, list; ARGV token, records read, lock ms.
_TRIM = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('ltrim', KEYS[2], ARGV[2], -1)
redis.call('pexpire', KEYS[1], ARGV[3])
return 1
"""
LOCK_SECONDS = 600
#: What the database answers a row it will not store (a constraint, a value out of range), as against being
#: unreachable: the batch is then stored page by page and the refused pages set aside.
_REFUSED = (IntegrityError, DataError)


@dataclasses.dataclass
class Intake:
    pages: int = 0              # records read from Redis
    stored: int = 0             # of them stored now (the others were stored before: a batch read again)
    malformed: int = 0          # records that were not impression records (dropped)
    expired: int = 0            # records older than PREFEED_IMPRESSIONS_KEEP (dropped: read again after pruning,
                                # they would be counted twice)
    lost: int = 0               # pages found missing (gaps in a writer's numbers)
    duplicates: int = 0         # copies of a page read in the same batch (stored and counted once)
    rejected: int = 0           # records the database refused (set aside in Redis, not stored)
    #: (experiment, arm) -> [pages, impressions] stored now
    served: dict = dataclasses.field(default_factory=dict)
    #: the users of the pages stored now
    users: set = dataclasses.field(default_factory=set)


def insert_for(engine: Engine):
    """The dialect's ``insert`` (with ``on_conflict_do_nothing``/``_do_update``)."""
    return pg_insert if engine.dialect.name == "postgresql" else sqlite_insert


def move_pages(engine: Engine, r: redis.Redis, keys: Keys, lock, oldest: float, done: Intake) -> bool:
    """Store the list's pages a batch at a time (see the module doc); False when the lock was lost on the way."""
    insert, trim = insert_for(engine), r.register_script(_TRIM)
    while True:
        raw = r.lrange(keys.impressions, 0, PAGE_BATCH - 1)
        if not raw:
            return True
        records = _readable(raw, oldest, done)
        try:
            with engine.begin() as conn:
                stored = _store(conn, insert, [page for page, _ in records])
        except _REFUSED as exc:
            log.warning("impressions: a batch was refused (%s); storing it page by page", first_line(exc))
            stored = _store_each(engine, r, keys, insert, records, done)
        new, lost, served = stored
        if not trim(keys=[lock.name, keys.impressions], args=[lock.local.token, len(raw), LOCK_SECONDS * 1000]):
            log.warning("impressions: the collector's lock expired; another collection carries on")
            return False
        done.pages += len(raw)
        done.stored += len(new)
        done.users.update(p.user_id for p in new)
        done.lost += lost
        _add_served(done.served, served)


def _readable(raw: list[bytes], oldest: float, done: Intake) -> list[tuple[Impression, bytes]]:
    """The batch's records worth storing, each with its bytes: malformed and expired ones counted and left out,
    and one copy of each ``(writer, seq)``."""
    out, names = [], set()
    for record in raw:
        try:
            page = unpack(record)
        except ValueError:
            done.malformed += 1
            continue
        if page.served_at < oldest:
            done.expired += 1
        elif (page.writer, page.seq) in names:
            done.duplicates += 1
        else:
            names.add((page.writer, page.seq))
            out.append((page, record))
    return out


def _store(conn, insert, pages: list[Impression]) -> tuple[list[Impression], int, dict]:
    """Store ``pages`` (distinct names) in the caller's transaction: ``(the pages new here, pages found lost, (experiment,
    arm) -> [pages, impressions] new)``."""
    if not pages:
        return [], 0, {}
    rows = [dict(writer=p.writer, seq=p.seq, user_id=p.user_id, experiment=p.experiment, arm=p.arm,
                 served_at=p.served_at, position=p.position, items=p.items.astype("<i8").tobytes(),
                 request_id=p.request_id) for p in pages]
    # executemany: SQLAlchemy batches the rows into multi-row INSERTs itself, compiled once
    stored = set(conn.execute(insert(ServedPage).on_conflict_do_nothing()
                              .returning(ServedPage.writer, ServedPage.seq), rows).all())
    new = [p for p in pages if (p.writer, p.seq) in stored]
    item_days.add(conn, insert, item_days.impressions_of(new))
    return new, _count_gaps(conn, insert, new), _count_exposures(conn, insert, new)


def _store_each(engine: Engine, r: redis.Redis, keys: Keys, insert, records: list[tuple[Impression, bytes]],
                done: Intake):
    """Store a refused batch one page at a time (a savepoint each, one transaction); set aside the pages the
    database refuses. Same answer as ``_store``."""
    new, lost, served, refused = [], 0, {}, []
    with engine.begin() as conn:
        for page, record in records:
            try:
                with conn.begin_nested():
                    one_new, one_lost, one_served = _store(conn, insert, [page])
            except _REFUSED:
                refused.append(record)
                continue
            new += one_new
            lost += one_lost
            _add_served(served, one_served)
    if refused:
        with r.pipeline(transaction=False) as pipe:
            pipe.rpush(keys.impressions_rejected, *refused)
            pipe.ltrim(keys.impressions_rejected, -REJECTED_KEEP, -1)
            pipe.execute()
        done.rejected += len(refused)
        log.error("impressions: %d pages refused by the database, set aside in %s", len(refused),
                  keys.impressions_rejected)
    return new, lost, served


def _add_served(into: dict, served: dict) -> None:
    """Add ``served``'s (experiment, arm) -> [pages, impressions] to ``into``'s."""
    for arm, (n, m) in served.items():
        counts = into.setdefault(arm, [0, 0])
        counts[0] += n
        counts[1] += m


def _count_exposures(conn, insert, pages: list[Impression]) -> dict:
    """Add ``pages`` to their users' exposures; returns (experiment, arm) -> [pages, impressions]."""
    per_user: dict[tuple[int, int, int], list] = {}
    served: dict[tuple[int, int], list] = {}
    for p in pages:
        row = per_user.setdefault((p.experiment, p.arm, p.user_id), [0, 0, p.served_at])
        row[0] += 1
        row[1] += len(p.items)
        counts = served.setdefault((p.experiment, p.arm), [0, 0])
        counts[0] += 1
        counts[1] += len(p.items)
    rows = [dict(experiment=e, arm=a, user_id=u, pages=n, impressions=m, first_served_at=t)
            for (e, a, u), (n, m, t) in sorted(per_user.items())]
    if rows:
        stmt = insert(Exposure)
        conn.execute(stmt.on_conflict_do_update(
            index_elements=["experiment", "arm", "user_id"],
            set_={"pages": Exposure.pages + stmt.excluded.pages,
                  "impressions": Exposure.impressions + stmt.excluded.impressions}), rows)
    return served


def _count_gaps(conn, insert, pages: list[Impression]) -> int:
    """Pages missing between the ones stored now and the newest stored before, per writer; the writers' newest
    numbers move on."""
    seqs: dict[int, list[int]] = {}
    for p in pages:
        seqs.setdefault(p.writer, []).append(p.seq)
    lost = 0
    for writer in sorted(seqs):
        before = conn.execute(select(ImpressionWriter.last_seq).where(ImpressionWriter.writer == writer)).scalar()
        last, missing = int(before or 0), 0
        for seq in sorted(seqs[writer]):
            if seq > last + 1:
                missing += seq - last - 1
            last = max(last, seq)
        stmt = insert(ImpressionWriter).values(writer=writer, last_seq=last, lost=missing)
        conn.execute(stmt.on_conflict_do_update(index_elements=["writer"], set_={
            "last_seq": stmt.excluded.last_seq, "lost": ImpressionWriter.lost + stmt.excluded.lost}))
        lost += missing
    return lost
