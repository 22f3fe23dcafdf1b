"""The experiments table: create one (its arms checked and pinned, a free slot taken), list them, stop one.

Creating and stopping take the table's write lock first (a no-op UPDATE on SQLite, ``LOCK TABLE`` on PostgreSQL),
so two at once cannot take the same slot or stop one experiment twice; every check runs before anything is
written, and a refusal (``InvalidInput``) leaves the table as it was.

A running experiment holds the lowest free slot of the slot hash (``hashing.py``) as wide as its share of users;
stopping it frees the slot. A new experiment that finds no free slot that wide is refused: users are never in two
running experiments.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import Connection, Engine, insert, select, text, update
from sqlalchemy.exc import IntegrityError

from ..data.tables import StoredExperiment
from ..errors import InvalidInput
from ..ranking.layout import FeatureLayout
from .experiment import RUNNING, STOPPED, Arm, Experiment
from .specs import MODEL, method_of, pinned

NAME = re.compile(r"[a-z0-9_-]{1,64}")
ARM_NAME = re.compile(r"[a-z0-9_-]{1,32}")
#: How far the shares' sum may be from 1, and a slot narrower than asked may be (float sums).
TOLERANCE = 1e-9


def create(engine: Engine, name: str, arms: list[tuple[str, str]], shares: dict[str, float] | None, users: float,
           model_dir: Path, layout: FeatureLayout | None = None) -> Experiment:
    """Store a running experiment ``name`` with ``arms`` (name, spec), the first the control. ``shares``: each
    arm's share of the experiment's users (all arms or None: equal shares); ``users``: the share of all users in it.
    Model specs are pinned and their bundles checked (``specs.pinned``; against ``layout`` if given). ``InvalidInput``
    for any bad input, a taken name (whatever its status) or no free slot that wide; nothing is written then."""
    if not NAME.fullmatch(name):
        raise InvalidInput(f"experiment name {name!r}: 1 to 64 of a-z, 0-9, '_' and '-'")
    if not (isinstance(users, (int, float)) and 0 < users <= 1):
        raise InvalidInput(f"--users {users}: the share of all users in the experiment is above 0 and at most 1")
    checked = _arms(arms, shares, model_dir, layout)
    try:
        with engine.begin() as conn:
            _lock(conn)
            if conn.execute(select(StoredExperiment.id).where(StoredExperiment.name == name)).first():
                raise InvalidInput(f"an experiment named {name!r} exists already (stopped ones keep their names)")
            taken = [e.slot for e in _read(conn, running_only=True)]
            slot = free_slot(taken, users)
            if slot is None:
                free = max((b - a for a, b in gaps(taken)), default=0.0)
                raise InvalidInput(f"no free slot for {users:g} of the users: running experiments hold "
                                   f"{1 - free_total(taken):g} of them, the widest free slot is {free:g}; stop one "
                                   f"or ask for fewer --users")
            row = dict(name=name, arms=json.dumps([dict(name=a.name, spec=a.spec, share=a.share) for a in checked]),
                       users=float(users), slot_start=slot[0], slot_end=slot[1], status=RUNNING,
                       created_at=time.time(), stopped_at=None, winner=None)
            new_id = conn.execute(insert(StoredExperiment).values(**row)).inserted_primary_key[0]
    except IntegrityError:                      # the same name created meanwhile by another process
        raise InvalidInput(f"an experiment named {name!r} exists already (stopped ones keep their names)") from None
    return _experiment(dict(row, id=new_id))


def running(engine: Engine) -> list[Experiment]:
    """The running experiments, by id."""
    with engine.connect() as conn:
        return _read(conn, running_only=True)


def all_experiments(engine: Engine) -> list[Experiment]:
    """Every experiment, running or stopped, by id."""
    with engine.connect() as conn:
        return _read(conn, running_only=False)


def stop(engine: Engine, name: str, winner: str | None, model_dir: Path | None = None,
         layout: FeatureLayout | None = None) -> Experiment:
    """Mark the running experiment ``name`` stopped (its slot is free from then on), with ``winner`` (an arm's
    name) or None. A model winner's bundle is promoted (``bundle.promote`` in ``model_dir``, checked against
    ``layout`` if given) before the row changes: a bundle that fails its checks stops nothing. ``InvalidInput`` for
    an unknown or stopped experiment, a winner that is not one of its arms, or a simple-method winner (a simple
    method cannot become the default ranker)."""
    with engine.begin() as conn:
        _lock(conn)
        found = [e for e in _read(conn, running_only=False) if e.name == name]
        if not found:
            raise InvalidInput(f"no experiment named {name!r} (`manage.py experiments list`)")
        experiment = found[0]
        if experiment.status != RUNNING:
            raise InvalidInput(f"experiment {name!r} is stopped already")
        if winner is not None:
            arms = {a.name: a for a in experiment.arms}
            if winner not in arms:
                raise InvalidInput(f"--winner {winner!r} is not an arm of {name!r} (arms: {', '.join(arms)})")
            method, version = method_of(arms[winner].spec)
            if method != MODEL:
                raise InvalidInput(f"--winner {winner!r} ranks by {arms[winner].spec}: a simple method cannot become "
                                   f"the default ranker; stop without --winner, or with a model arm")
            if model_dir is None:
                raise ValueError("stopping with a model winner needs the model_dir to promote its bundle in")
            from ..ranking import bundle       # brings scipy: only the command that stops an experiment needs it

            bundle.promote(model_dir, int(version), layout, how=f"experiment {name}")
        at = time.time()
        conn.execute(update(StoredExperiment).where(StoredExperiment.id == experiment.id)
                     .values(status=STOPPED, stopped_at=at, winner=winner))
    return dataclasses.replace(experiment, status=STOPPED, stopped_at=at, winner=winner)


def gaps(taken: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The free intervals of [0, 1) around the ``taken`` slots, lowest first."""
    out, at = [], 0.0
    for start, end in sorted(taken):
        if start > at:
            out.append((at, start))
        at = max(at, end)
    if at < 1.0:
        out.append((at, 1.0))
    return out


def free_total(taken: Sequence[tuple[float, float]]) -> float:
    return sum(b - a for a, b in gaps(taken))


def free_slot(taken: Sequence[tuple[float, float]], users: float) -> tuple[float, float] | None:
    """The lowest free slot ``users`` wide beside the ``taken`` ones, or None. A gap short of ``users`` by float
    rounding only (``TOLERANCE``) fits, and the slot then ends where the gap does, never over a taken one."""
    for start, end in gaps(taken):
        if end - start >= users - TOLERANCE:
            return start, min(start + users, end)
    return None


def _arms(arms: list[tuple[str, str]], shares: dict[str, float] | None, model_dir: Path,
          layout: FeatureLayout | None) -> list[Arm]:
    """The arms checked, their specs pinned and their shares set; ``InvalidInput`` for the first thing wrong."""
    if len(arms) < 2:
        raise InvalidInput(f"an experiment needs at least 2 arms (--arm NAME=SPEC), got {len(arms)}")
    names = [n for n, _ in arms]
    for n in names:
        if not ARM_NAME.fullmatch(n):
            raise InvalidInput(f"arm name {n!r}: 1 to 32 of a-z, 0-9, '_' and '-'")
    reused = sorted({n for n in names if names.count(n) > 1})
    if reused:
        raise InvalidInput(f"arm name {reused[0]!r} is used twice")
    if shares:
        unknown = sorted(set(shares) - set(names))
        if unknown:
            raise InvalidInput(f"--share {unknown[0]}: no arm of that name")
        missing = [n for n in names if n not in shares]
        if missing:
            raise InvalidInput(f"--share for some arms but not {', '.join(missing)}: give a share to every arm, or "
                               f"to none for equal shares")
        for n in names:
            if not (math.isfinite(shares[n]) and shares[n] > 0):
                raise InvalidInput(f"--share {n}={shares[n]}: a share is above 0")
        total = math.fsum(shares[n] for n in names)
        if abs(total - 1.0) > TOLERANCE:
            raise InvalidInput(f"the shares sum to {total:g}, not 1")
        split = [float(shares[n]) for n in names]
    else:
        split = [1.0 / len(names)] * len(names)
    return [Arm(n, pinned(spec, model_dir, layout), s) for (n, spec), s in zip(arms, split)]


def _lock(conn: Connection) -> None:
    """Take the experiments table's write lock for the rest of ``conn``'s transaction (readers go on)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("LOCK TABLE experiments IN SHARE ROW EXCLUSIVE MODE"))
    else:                                   # SQLite: a write statement takes the database's write lock
        conn.execute(update(StoredExperiment).where(StoredExperiment.status == RUNNING)
                     .values(status=StoredExperiment.status))


def _read(conn: Connection, running_only: bool) -> list[Experiment]:
    query = select(StoredExperiment.__table__).order_by(StoredExperiment.id)
    if running_only:
        query = query.where(StoredExperiment.status == RUNNING)
    return [_experiment(dict(row._mapping)) for row in conn.execute(query)]


def _experiment(row: dict) -> Experiment:
    arms = tuple(Arm(a["name"], a["spec"], float(a["share"])) for a in json.loads(row["arms"]))
    return Experiment(id=int(row["id"]), name=row["name"], arms=arms, users=float(row["users"]),
                      slot=(float(row["slot_start"]), float(row["slot_end"])), status=row["status"],
                      created_at=float(row["created_at"]), stopped_at=row["stopped_at"], winner=row["winner"])
