"""experiment: an experiment run live through the product, and its report checked against the simulation's own count.

The log (the environment's database, else the synthetic marketplace) is cut at a quantile. A fresh prefeed gets the
catalogue and the events before the cut and a model trained on them (``lab/product.py``), and two experiments that
share its users half and half: ``ranker-vs-recent`` (the model against ``recent:1d``, "popular yesterday", the
control) and ``a-a`` (the model twice). The log after the cut is then replayed through the running API and workers, as the replay protocol
judges (``learning/steps.py``): before each of a user's next steps the user reads a page of their feed (once it has
caught up with their own events and carries their arm), and clicks (``POST /events``, type ``click``) the page's
items they chose in that step, at the step's time (or the page's ``served_at``, when later); the log's own events
follow as the replay reaches them. Steps of different users are read concurrently, a batch at a time (``batches``).

Then ``experiments report NAME --json`` runs for both experiments. The simulation counts for itself what attribution
must find, with the rule written out here again: every click event it posted or replayed goes to the newest page it
read for that user, served at or before the click and at most ``PREFEED_ATTRIBUTION_WINDOW`` before it, holding the
item. Pages, exposed users and attributed clicks per arm must equal the report's exactly.

A/A: the ``a-a`` experiment's users, with their attributed clicks, are split again under 100 other assignment hashes
(both arms rank alike, so any split is as good as the live one) and judged as the report judges: a verdict is a false
one, and the sample-ratio check must flag none.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import click
import numpy as np
from sqlalchemy import text

from precompute.experiments import assign_one, hashing, registry, report
from precompute.feeds.client import clients
from precompute.feeds.codec import MAX_HEADER_SIZE
from precompute.feeds.keys import Keys
from precompute.feeds.store import header_of
from precompute.learning.steps import find
from precompute.ranking.item_loader import load_item_table

from .lab.product import CATCH_UP, Product, product_of_log
from .lab.results import table, write_result

#: A user's feed may be recomputed at once after each step (``PREFEED_RECOMPUTE_INTERVAL_MS``, 1 s by default, would
#: hold every read of a user who acted a moment ago for a second: the replay runs faster than the log happened).
FAST = {"recompute_interval_ms": 1}
FULL = dict(cut=0.8, users=None, steps=10, workers=2, iterations=None, k=10, concurrency=16, seeds=100,
            settings=FAST)
QUICK = dict(cut=0.8, users=40, steps=2, workers=1, iterations=30, k=10, concurrency=8, seeds=20, settings=FAST)
#: The control first: what a shop has ("popular yesterday"), then the ranker that would replace it.
EXPERIMENTS = {"ranker-vs-recent": ("recent=recent:1d", "ranker=model:current"),
               "a-a": ("a=model:current", "b=model:current")}


def run(quick: bool = False) -> dict:
    cfg = QUICK if quick else FULL
    with product_of_log(quick, cfg) as (product, source, name):
        events, cut = product.events, product.cut
        for experiment, arms in EXPERIMENTS.items():
            product.manage("experiments", "create", experiment, *[x for a in arms for x in ("--arm", a)],
                           "--users", "0.5")
        items, steps, who = judged_steps(source, product, events, cut, cfg)
        t0 = time.perf_counter()
        sim = Simulation(product, items, cfg)
        sim.replay(steps)
        seconds = time.perf_counter() - t0
        reports = {e: json.loads(product.manage("experiments", "report", e, "--json")) for e in EXPERIMENTS}
        expected = sim.expected()
        aa = resplit(product, cfg["seeds"])
    checks, rows = [], []
    for experiment, got in reports.items():
        for arm in got["arms"]:
            mine = expected.get((experiment, arm["name"]), dict(users=0, pages=0, clicks=0))
            theirs = dict(users=arm["users"], pages=arm["pages"], clicks=arm["events"]["click"]["attributed"])
            checks.append(mine == theirs)
            rows.append([experiment, arm["name"], arm["spec"], theirs["users"], theirs["pages"], theirs["clicks"],
                         mine["clicks"], fmt_num(arm["events"]["click"]["per_user"]), fmt_ratio(arm)])
    main = reports["ranker-vs-recent"]
    out = dict(log=name, cut=cut, cut_quantile=cfg["cut"], users=int(len(who)), steps=len(steps), late_reads=sim.late,
               replay_seconds=seconds, reports=reports, simulated={f"{e}/{a}": v for (e, a), v in expected.items()},
               exact=all(checks), verdict=main["verdict"], ratio=main["arms"][1]["ratio"],
               ratio_interval=main["arms"][1]["ratio_interval"], aa_verdict=reports["a-a"]["verdict"], aa=aa)
    print(table(f"experiment on {name} at cut {cfg['cut']:g}: {len(steps)} steps of {len(who)} users, "
                f"replayed through HTTP in {seconds:.0f}s",
                ["experiment", "arm", "spec", "users", "pages", "clicks (report)", "clicks (simulation)",
                 "clicks per user", "ratio (95%)"], rows))
    print(f"report counts equal the simulation's: {out['exact']}; verdict: {main['verdict']}; A/A verdict: "
          f"{out['aa_verdict']}; A/A re-split under {aa['seeds']} seeds: {aa['false_verdicts']} false verdicts, "
          f"{aa['sample_ratio_flagged']} sample-ratio flags; reads that waited over {CATCH_UP:g}s: {sim.late}")
    print(f"wrote {write_result('experiment' if quick else f'experiment-{name}', out, quick)}")
    return out


def judged_steps(source, product: Product, events, cut: float, cfg: dict):
    """``(items, steps, users)``: the item table at the cut, and the first ``cfg["steps"]`` steps after it of every
    user with history before it, or of a seeded sample of ``cfg["users"]`` of them."""
    items = load_item_table(source, product.settings, as_of=cut)
    steps = find(events, items, cut, float("inf"), cfg["steps"])
    who = steps.users()
    if cfg["users"] is not None and len(who) > cfg["users"]:
        who = np.sort(np.random.default_rng(0).choice(who, size=cfg["users"], replace=False))
        steps = find(events, items, cut, float("inf"), cfg["steps"], users=who)
    return items, steps, who


class Simulation:
    """The simulated users: they read pages, click what they chose, and remember every page they read."""

    def __init__(self, product: Product, items, cfg: dict) -> None:
        self.product, self.items, self.cfg = product, items, cfg
        self.settings = product.settings
        self.names = [n for n, _ in self.settings.event_types]
        self.click = self.names.index("click") + 1
        self.pages: dict[int, list[tuple[float, str, str, set]]] = {}     # user -> (served_at, exp, arm, items)
        self.reads: list[tuple[int, str, list, set]] = []                  # (user, arm, items in order, chosen)
        self.clicks: list[tuple[int, int, float]] = []                     # (user, item, ts) posted by the users
        self.late = 0
        self.redis = clients(self.settings)[1]
        self.keys = Keys(self.settings.key_prefix)
        self.running = registry.running(product.engine)
        self.local = threading.local()

    def replay(self, steps) -> None:
        """Post the log after the cut in order; the steps in batches that may be read at once (see ``batches``)."""
        with ThreadPoolExecutor(self.cfg["concurrency"]) as pool, \
                click.progressbar(length=len(steps), label="replaying steps", file=sys.stderr) as bar:
            for batch in batches(steps, self.cfg["concurrency"]):
                self.product.post_until(self.names, int(steps.posted[batch[0]]))
                for s, got in zip(batch, pool.map(lambda s: self.read(steps, s), batch)):
                    self.act(steps, s, *got)
                bar.update(len(batch))

    def read(self, steps, s: int):
        """Step ``s``'s page, once the user's feed has caught up with their events and carries their arm."""
        http = getattr(self.local, "http", None) or self.product.connect()
        self.local.http = http
        uid = int(steps.user[s])
        with self.product.engine.connect() as conn:
            want = conn.execute(text("SELECT history_version FROM users WHERE id = :u"), {"u": uid}).scalar()
        which, arm = assign_one(self.running, uid)
        experiment = self.running[which].id if which >= 0 else 0
        deadline, late = time.monotonic() + CATCH_UP, False
        while True:
            head = header_of(self.redis.getrange(self.keys.feed(uid), 0, MAX_HEADER_SIZE - 1))
            if head is not None and head.history_version >= (want or 0) and head.experiment == experiment and \
                    (not experiment or head.arm == arm):
                break
            if time.monotonic() > deadline:
                late = True
                break
            time.sleep(0.02)
        status, body = self.product.get(f"/feed/{uid}?limit={self.cfg['k']}", http)
        if status != 200:
            raise RuntimeError(f"GET /feed/{uid} answered {status}: {body}")
        return body, late

    def act(self, steps, s: int, body: dict, late: bool) -> None:
        uid, served_at = int(steps.user[s]), body["served_at"]
        shown = [e["item_id"] for e in body["items"]]
        self.pages.setdefault(uid, []).append((served_at, body["experiment"], body["arm"], set(shown)))
        self.late += late
        chosen = set(self.items.ids[steps.rows[steps.offsets[s]:steps.offsets[s + 1]]].tolist())
        self.reads.append((uid, body["arm"], shown, chosen))
        ts = max(float(steps.ts[s]), served_at)
        clicked = [{"user_id": uid, "item_id": i, "type": "click", "ts": ts, "event_id": f"click-{s}-{i}"}
                   for i in shown if i in chosen]
        if clicked:
            self.product.post(clicked)
            self.clicks += [(uid, e["item_id"], ts) for e in clicked]

    def expected(self) -> dict:
        """Per (experiment, arm): exposed users, pages, and clicks attributed by the rule (see the module doc)."""
        out: dict = {}
        for uid, pages in self.pages.items():
            for _, experiment, arm, _ in pages:
                row = out.setdefault((experiment, arm), dict(users=set(), pages=0, clicks=0))
                row["pages"] += 1
                row["users"].add(uid)
        ev = self.product.events
        n_cut = int(np.searchsorted(ev.ts, self.product.cut, side="right"))
        logged = [(int(u), int(i), float(t)) for u, i, k, t in zip(ev.user[n_cut:self.product.n_posted],
                                                                  ev.item[n_cut:self.product.n_posted],
                                                                  ev.type[n_cut:self.product.n_posted],
                                                                  ev.ts[n_cut:self.product.n_posted])
                  if k == self.click]
        window = self.settings.attribution_window
        for uid, item, ts in self.clicks + logged:
            served = [p for p in self.pages.get(uid, ()) if p[0] <= ts <= p[0] + window and item in p[3]]
            if served:
                newest = max(served, key=lambda p: p[0])
                out[(newest[1], newest[2])]["clicks"] += 1
        return {k: dict(users=len(v["users"]), pages=v["pages"], clicks=v["clicks"]) for k, v in out.items()
                if k[0] is not None}


def batches(steps, most: int):
    """Runs of up to ``most`` consecutive steps of distinct users, read together after posting the log up to the
    first one's events. A later step's user may then read a page that lacks their own newest events (still to be
    posted), as a live user whose last events have not arrived yet does; their step's own events, its truth, are
    never posted before the page is read."""
    batch: list[int] = []
    users: set[int] = set()
    for s in range(len(steps)):
        uid = int(steps.user[s])
        if len(batch) >= most or uid in users:
            yield batch
            batch, users = [], set()
        batch.append(s)
        users.add(uid)
    if batch:
        yield batch


def resplit(product: Product, seeds: int) -> dict:
    """The A/A experiment's users, with their attributed clicks, split again under ``seeds`` other hashes and
    judged as the report judges (see the module doc)."""
    experiment = next(e for e in registry.all_experiments(product.engine) if e.name == "a-a")
    click = [n for n, _ in product.settings.event_types].index("click") + 1
    arms = report.read(product.engine, experiment, [click])
    users = np.concatenate([a.user_ids for a in arms])
    clicks = np.concatenate([a.events[click] for a in arms])
    false = flagged = 0
    for seed in range(seeds):
        second = hashing.fractions(f"a-a-resplit-{seed}:".encode(), users) >= 0.5
        judged = report.judge([clicks[~second], clicks[second]], [0.5, 0.5], seed)
        false += judged.verdict is not None
        flagged += judged.sample_ratio_p is not None and judged.sample_ratio_p < report.SAMPLE_RATIO_ALPHA
    return dict(seeds=seeds, users=int(len(users)), false_verdicts=false, sample_ratio_flagged=flagged)


def fmt_num(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def fmt_ratio(arm: dict) -> str:
    iv = arm["ratio_interval"]
    return "-" if arm["ratio"] is None else f"{arm['ratio']:.2f}x" + (f" ({iv[0]:.2f}-{iv[1]:.2f})" if iv else "")
