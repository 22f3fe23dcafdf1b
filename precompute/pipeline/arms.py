"""How a worker ranks the users of an experiment's arm (docs/experiments.md).

A user outside every running experiment is ranked by the promoted bundle, as without experiments; so is a user of
an arm whose spec is the promoted bundle's version. An arm ``model:<version>`` of another bundle is ranked by that
bundle: the worker loads it before fork beside the promoted one (``Arms.load``), with its own candidate index (the
co-visitation, kNN and latent pairs are the bundle's). An arm of a simple method is ranked without a model, from
what the worker holds already (``ranking/methods.py``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..experiments import Experiment, assign, method_of, registry
from ..experiments.experiment import RUNNING
from ..feeds.codec import NO_ARM
from ..ranking import bundle as bundles
from ..ranking.item_table import ItemTable
from ..ranking.layout import FeatureLayout
from ..ranking.source_index import SourceIndex, for_items
from ..settings import Settings

#: The ranker of a user: ("model", "<version>") or a simple method and its argument ("recent", "1d").
Key = tuple[str, str | None]


@dataclasses.dataclass
class Arms:
    """The running experiments as a worker holds them: the bundles their model arms need beyond the promoted one,
    each with its candidate index for the current item table, and the assignment version they were read at."""

    experiments: list[Experiment] = dataclasses.field(default_factory=list)
    assignment: int = 0
    #: model version → (bundle, candidate index over ``items``); the promoted bundle is not in it.
    bundles: dict[int, tuple[bundles.Bundle, SourceIndex]] = dataclasses.field(default_factory=dict)
    items: ItemTable | None = None

    @classmethod
    def load(cls, experiments: list[Experiment], assignment: int, settings: Settings, items: ItemTable,
             layout: FeatureLayout, promoted: int, known: Arms | None = None) -> Arms:
        """The arms of ``experiments``: every model arm's bundle other than ``promoted``, loaded once (a bundle
        ``known`` holds is kept), with its candidate index over ``items`` (kept too when ``known`` is of the same
        item table, else rebuilt)."""
        held = {}
        for version in sorted({int(v) for e in experiments for a in e.arms
                               for kind, v in [method_of(a.spec)] if kind == "model"} - {promoted}):
            if known is not None and version in known.bundles:
                b, index = known.bundles[version]
                held[version] = (b, index if known.items is items else for_items(items, b.sources))
                continue
            b = bundles.load(settings.model_dir, version, layout)
            held[version] = (b, for_items(items, b.sources))
        return cls(list(experiments), assignment, held, items)

    @staticmethod
    def read(engine) -> tuple[list[Experiment], int]:
        """The running experiments, and the assignment version: one more for every experiment created and for
        every one stopped, so it grows at each change of who is in which arm."""
        every = registry.all_experiments(engine)
        return [e for e in every if e.status == RUNNING], len(every) + sum(e.status != RUNNING for e in every)

    def keys(self, user_ids: np.ndarray, promoted: int) -> tuple[list[Key], np.ndarray, np.ndarray]:
        """Each user's ranker key, experiment id (0: none) and arm index (``codec.NO_ARM``: none)."""
        which, arm = assign(self.experiments, user_ids)
        keys: list[Key] = []
        exp_ids = np.zeros(len(user_ids), dtype=np.int64)
        arms = np.full(len(user_ids), NO_ARM, dtype=np.int64)
        for k, (e, a) in enumerate(zip(which.tolist(), arm.tolist())):
            if e < 0:
                keys.append(("model", str(promoted)))
                continue
            experiment = self.experiments[e]
            keys.append(method_of(experiment.arms[a].spec))
            exp_ids[k], arms[k] = experiment.id, a
        return keys, exp_ids, arms
