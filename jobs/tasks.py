"""Job functions. Arguments are plain ids; failures raise (RQ records them and retries with backoff)."""

from __future__ import annotations

import logging
import math
import time
import uuid

import numpy as np
from rq import get_current_job

from precompute.errors import InvalidInput
from precompute.feeds.dirty import DirtyUsers, NewUserPace
from precompute.feeds.keys import Keys
from precompute.feeds.refresh import FeedClocks
from precompute.pipeline.pipeline import STAGES

from . import context, queues

log = logging.getLogger(__name__)
#: While new users wait out their share of a drain's time, known users are looked for this often (s).
PAUSE_POLL = 0.02


def recompute_users(user_ids: list[int]) -> dict:
    """Rank and store ``user_ids``' feeds. The summary (users, feeds written and kept, items scored, seconds by
    stage) is the job's result, which the worker turns into metrics (``jobs/metrics.py``)."""
    if not isinstance(user_ids, list) or not all(isinstance(u, int) and u > 0 for u in user_ids):
        raise InvalidInput("recompute_users takes a list of positive integer user ids")
    pipeline = context.get()
    pipeline.refresh_arms()
    done = pipeline.recompute(user_ids)
    FeedClocks(context.queue_redis(), pipeline.settings).record(done.written_ids, done.newest_event, done.clock)
    result = done.as_dict()
    result["process"] = context.stats()
    return result


def drain_dirty() -> dict:
    """Recompute users marked dirty by new events, a batch at a time, until none is due: known users
    ``PREFEED_BATCH_SIZE`` at a time, new users as many as fit ``PREFEED_NEW_USERS_BATCH_MS`` and no more than
    ``PREFEED_NEW_USERS_SHARE`` of the job's time (``NewUserPace``), and only while no other drain ranks new users
    (``DirtyUsers.claim_tiers``' ranker)."""
    pipeline = context.get()
    settings = pipeline.settings
    r = context.queue_redis()
    dirty = DirtyUsers(r, settings)
    job = get_current_job()
    if job is not None:
        dirty.clear_drain_flag(job.id)    # if flagged, events from now on enqueue another drain: no wake-up is lost
    clocks = FeedClocks(r, settings)
    # Feeds the log's clock has moved PREFEED_FEED_REFRESH past since they were computed join the dirty users.
    dirty.mark(clocks.due(pipeline.items.as_of, settings.batch_size * settings.drain_max_batches))
    pace = NewUserPace(settings.new_users_batch_ms / 1000, settings.batch_size, settings.new_users_share)
    ranker = job.id if job is not None else uuid.uuid4().hex     # new users: one drain at a time ranks them
    try:
        counts, more = _drain(pipeline, dirty, clocks, pace, ranker)
    finally:
        dirty.stop_ranking(ranker)          # before any hand-over: the next drain may rank new users at once
    if more:
        queues.notify_changed(settings, r, [])   # more may be due: hand over to a fresh job
    _drain_later(settings, r, dirty)
    return {**counts, "job": job.id if job else None, "process": context.stats()}


def _drain(pipeline, dirty: DirtyUsers, clocks: FeedClocks, pace: NewUserPace, ranker: str) -> tuple[dict, bool]:
    """``drain_dirty``'s batches, until none is due or ``PREFEED_DRAIN_MAX_BATCHES`` (then True: a fresh job is to
    take over, so that a job stays short and a stopping worker is not held up)."""
    settings = pipeline.settings
    users = batches = written = kept = scored = 0
    seconds = dict.fromkeys(STAGES, 0.0)
    more = False
    while batches < settings.drain_max_batches and not context.stopping():
        now = time.monotonic()
        known, fresh, stamp = dirty.claim_tiers(settings.batch_size, pace.allowed(now), ranker)
        claimed = known + fresh
        if not claimed:
            due = dirty.next_due()
            if now < pace.resume_at and due is not None and due <= time.time() * 1000:
                time.sleep(min(PAUSE_POLL, pace.resume_at - now))   # new users wait their share; known ones not
                continue
            break
        started = time.perf_counter()
        try:
            pipeline.refresh_arms()             # experiments created or stopped since the job began
            result = pipeline.recompute(claimed)
        except BaseException:
            dirty.release(claimed, stamp)       # due again at once: RQ's retry of this job picks them up
            raise
        dirty.complete(claimed, stamp)
        pace.observe(len(claimed), time.perf_counter() - started, len(fresh))
        clocks.record(result.written_ids, result.newest_event, result.clock)
        users, written, kept = users + result.users, written + result.written, kept + result.kept_newer
        scored += result.scored_items
        for stage, s in result.seconds.items():
            seconds[stage] += s
        batches += 1
    else:
        more = True                             # stopped by its bounds, not for want of users due
    counts = {"users": users, "written": written, "kept_newer": kept, "scored_items": scored, "seconds": seconds,
              "batches": batches}
    return counts, more


def mark_reassigned(experiment_id: int, after: int = 0) -> dict:
    """One step of rebuilding the users whose arm changed when experiment ``experiment_id`` was created or stopped:
    every user of its slot (``precompute/experiments``). The next ``PREFEED_REASSIGN_BATCH`` user ids above
    ``after`` are looked at, those of the slot marked dirty (the drain rebuilds them; their old feeds serve until
    then), and the next step is scheduled ``PREFEED_REASSIGN_INTERVAL`` later: a bounded rate, whatever the number
    of users."""
    from precompute.data import users
    from precompute.experiments import registry

    if not isinstance(experiment_id, int) or not isinstance(after, int):
        raise InvalidInput("mark_reassigned takes an experiment id and a user id")
    pipeline = context.get()
    settings, r = pipeline.settings, context.queue_redis()
    found = [e for e in registry.all_experiments(pipeline.engine) if e.id == experiment_id]
    if not found:                   # a job of another database's experiment: nothing here to rebuild, nothing to retry
        log.warning("mark_reassigned: no experiment has id %s in this database", experiment_id)
        return {"experiment": experiment_id, "looked_at": 0, "marked": 0, "next_after": None}
    ids = users.ids_after(pipeline.engine, after, settings.reassign_batch)
    moved = [u for u, arm in zip(ids, found[0].arm_of(np.array(ids, dtype=np.int64)).tolist()) if arm >= 0]
    if moved:
        queues.notify_changed(settings, r, moved)
    if len(ids) == settings.reassign_batch:
        queues.enqueue_reassign(settings, r, experiment_id, ids[-1], at=time.time() + settings.reassign_interval)
    return {"experiment": experiment_id, "looked_at": len(ids), "marked": len(moved),
            "next_after": ids[-1] if len(ids) == settings.reassign_batch else None}


def rebuild_lost(token: str, offset: int = 0) -> dict:
    """One step of the rebuild that follows a Redis which lost its data (``jobs/recovery.py``): the next
    ``PREFEED_RECOVERY_BATCH`` of the users active within ``PREFEED_FEED_TTL`` (most recently active first; listed by
    the first step) from position ``offset``; those whose feed is missing or behind their history are marked dirty
    (the drain rebuilds them), and the next step is scheduled ``PREFEED_RECOVERY_INTERVAL`` later. A step of a
    rebuild that a newer one replaced does nothing."""
    from precompute.data import durable
    from precompute.feeds import recovery

    if not isinstance(token, str) or not isinstance(offset, int) or offset < 0:
        raise InvalidInput("rebuild_lost takes a rebuild's token and a position")
    pipeline = context.get()
    settings, r, keys = pipeline.settings, context.queue_redis(), Keys(pipeline.settings.key_prefix)
    if recovery.current_token(r, keys) != token:
        return {"rebuild": token, "superseded": True}
    ids = None if offset == 0 else recovery.users_at(r, keys, offset, settings.recovery_batch)
    if ids is None:             # the first step (or a list gone since, a day on): list the users now
        offset = 0
        recovery.set_users(r, keys, durable.active_users(pipeline.engine, settings))
        ids = recovery.users_at(r, keys, 0, settings.recovery_batch) or []
    stale = pipeline.store.stale_users(durable.history_versions(pipeline.engine, ids)) if ids else []
    if stale:
        queues.notify_changed(settings, r, stale)
    looked_at, more = offset + len(ids), len(ids) == settings.recovery_batch
    recovery.advance(r, keys, looked_at, len(stale), finished=not more)
    if more:
        queues.enqueue_recovery(settings, r, token, looked_at, at=time.time() + settings.recovery_interval)
    return {"rebuild": token, "looked_at": len(ids), "marked": len(stale), "next": looked_at if more else None}


def collect_impressions() -> dict:
    """Move the served pages buffered in Redis to the database and attribute the events stored since
    (``precompute/experiments/collect.py``); scheduled by the API when it sends pages or accepts events, and again by
    itself while events wait for attribution."""
    from precompute.data.event_types import EventTypes
    from precompute.experiments.collect import collect, settle_seconds
    from precompute.experiments.registry import all_experiments

    pipeline = context.get()
    settings, r = pipeline.settings, context.queue_redis()
    queues.collect_started(settings, r)
    done = collect(pipeline.engine, r, settings)
    if done is None:                    # another collection is running: it reschedules itself if needed
        queues.schedule_collect(settings, r)
        return {"collected": False}
    if done.waiting or r.llen(Keys(settings.key_prefix).impressions):
        queues.schedule_collect(settings, r, max(settings.impressions_collect_interval, settle_seconds(settings)))
    if settings.rank_shown and done.users:
        # What a user was shown is part of their feed's input: their feed is due again, coalesced and capped per
        # user like an event's (PREFEED_RECOMPUTE_INTERVAL_MS).
        queues.notify_changed(settings, r, sorted(done.users))
    names = {e.id: e for e in all_experiments(pipeline.engine)} if done.by_type or done.served else {}
    types = dict(enumerate(EventTypes.of(settings).names, start=1))

    def arm(experiment: int, index: int) -> tuple[str, str]:
        found = names.get(experiment)
        if found is None or not 0 <= index < len(found.arms):
            return "", ""
        return found.name, found.arms[index].name

    return {"collected": True, "pages": done.pages, "stored": done.stored, "malformed": done.malformed,
            "lost": done.lost, "duplicates": done.duplicates, "rejected": done.rejected, "events": done.events,
            "bounded": done.bounded, "attributed": done.attributed, "pruned": done.pruned,
            "served": [[*arm(e, a), n, m] for (e, a), (n, m) in sorted(done.served.items())],
            "attributed_by": [[*arm(e, a), types.get(t, str(t)), n] for (e, a, t), n in sorted(done.by_type.items())],
            "process": context.stats()}


def _drain_later(settings, r, dirty: DirtyUsers) -> None:
    """Make sure a drain job will run for the users still dirty when a drain ends.

    Users due later (still leased by a claimer that died, or inside their recompute interval) need a drain then,
    even if no new event arrives: one is scheduled, unless one is already scheduled as early. New users another drain
    is ranking are left to it (due, for this drain's successors, when its lease ends). Users due now need a
    drain waiting in the queue, one at a time (the drain flag). Scheduling for "now" as well would leave two jobs
    behind each drain while events keep coming, and the jobs would double each round."""
    next_due = dirty.next_due()
    if next_due is None:
        return
    ranked_until = dirty.ranked_until()
    if ranked_until is not None:
        # Another drain ranks the new users (it sees to them when it ends): they are due for this one's successors
        # no sooner than that drain's lease ends (it died), else a drain here would find only them, end, and
        # hand over again, round and round.
        known = dirty.next_due(known_only=True)
        next_due = min(known if known is not None else math.inf, max(next_due, ranked_until))
    if next_due <= time.time() * 1000:
        queues.notify_changed(settings, r, [])
    elif dirty.try_flag_scheduled(queues.drain_time_ms(next_due)):
        queues.schedule_drain(settings, r, next_due / 1000)
