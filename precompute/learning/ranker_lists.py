"""The ranker as a method: trained on the pre-cut log only, then ranked at the cut through the code the workers
run (``pipeline/pipeline.py``): histories read at the cut, ``candidates.for_batch``, ``features.build``,
``scoring.score``, ``arrays.top_desc_grouped``, with the source index of the pre-cut log (what the model was
trained with, and what the baselines use).

The one difference from serving: every item a user interacted with before the cut is left out, not only those of
the seen window. The histories are read with a seen window reaching back to the first pre-cut event and a cap of
distinct items no user exceeds, so the candidate code drops them before its cap, as it drops seen items.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..data.history import histories_from_arrays
from ..ranking import candidates, features, scoring
from ..ranking.arrays import top_desc_grouped
from ..ranking.item_table import ItemTable
from ..ranking.source_index import SourceIndex
from ..settings import Settings
from .lists import Collector, Ranked, batches, seen_of, truth_of
from .split import Split

#: Users whose histories are read together (the ranking itself goes ``rank_chunk_users`` at a time, as workers).
HISTORY_BATCH = 500


def all_seen(settings: Settings, split: Split) -> Settings:
    """``settings`` with a seen window covering the whole pre-cut log and a seen cap above any judged user's count
    of distinct pre-cut items."""
    first = float(split.pre.ts[0]) if split.n_before else split.cut
    most = int(np.diff(split.seen_offsets).max(initial=0))
    return dataclasses.replace(settings, seen_window=int(math.ceil(split.cut - first)) + 1,
                               seen_max_items=max(settings.seen_max_items, most + 1))


def rank(model, split: Split, items: ItemTable, index: SourceIndex, settings: Settings, n: int) -> Ranked:
    """``model``'s (a CatBoost ranker's) top-``n`` lists of the judged users, from candidates gathered with the
    source index ``index`` of the pre-cut log; its candidate set is what the workers would score."""
    at_cut = all_seen(settings, split)
    span = len(items) + 1
    out = Collector()
    for a, b in batches(split, HISTORY_BATCH):
        ev = split.events_of(a, b)
        hist = histories_from_arrays(split.users[a:b], ev.user, ev.item, ev.type, ev.ts, items, at_cut,
                                     clock=split.cut)
        for start in range(0, len(hist), settings.rank_chunk_users):
            stop = min(start + settings.rank_chunk_users, len(hist))
            part = hist.slice(start, stop)
            cand = candidates.for_batch(items, index, part, at_cut)
            X = features.build(items, part, cand, part.clock)
            scores = scoring.rank_scores(model, X, cand.offsets)
            top, offsets = top_desc_grouped(scores, cand.offsets, n)
            code = cand.owner * span + cand.rows
            s_owner, s_rows = seen_of(split, a + start, a + stop)
            if np.isin(code, s_owner * span + s_rows).any():
                raise RuntimeError("a pre-cut item reached the ranker's candidates; the seen window missed it")
            t_owner, t_rows = truth_of(split, a + start, a + stop)
            out.add(np.diff(offsets), cand.rows[top], np.isin(t_owner * span + t_rows, code))
    return out.ranked()
