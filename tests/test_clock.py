"""One clock for training and serving: features, windows and popularity are computed at the log's clock (its newest
event time, or PREFEED_AS_OF), never the wall clock, so what precompute builds is what training built at the same
instant."""

import dataclasses

import numpy as np
import pytest
from sqlalchemy import text

from precompute.data.history import load_histories
from precompute.data.log import load_events
from precompute.learning import periods
from precompute.ranking.source_index import for_items
from precompute.ranking.item_loader import load_item_table
from precompute.pipeline.pipeline import Pipeline
from precompute.units import DAY


def _newest_event(engine) -> float:
    with engine.connect() as conn:
        return conn.execute(text("SELECT max(ts) FROM events")).scalar()


@pytest.mark.parametrize("days_back", [0, 5], ids=["log clock", "explicit as-of"])
def test_precompute_builds_the_feature_rows_training_builds_at_the_same_clock(settings, world, r, own_users,
                                                                               days_back):
    # given a fixed database, and the clock: its newest event, or an explicit instant 5 days before it
    clock = _newest_event(world.engine) - days_back * DAY
    s = dataclasses.replace(settings, as_of=clock if days_back else 0.0)
    users = own_users(3)
    # when training's path builds features from the in-memory log at that clock (its time cut) ...
    items_t = load_item_table(world.engine, s, as_of=clock)
    pipeline = Pipeline(s, world.engine, r)
    pipeline.load()
    index_t = for_items(items_t, pipeline.bundle.sources.pairs())
    _, cand_t, X_t = periods.feature_rows(items_t, index_t, load_events(world.engine, clock), np.array(users),
                                         clock, s)
    # ... and precompute's path reads the batch from the database and builds them at the clock it reads
    hist = load_histories(world.engine, users, pipeline.items, s)
    cand_s, X_s = pipeline.features(hist)
    # then both ran at that clock, and every candidate and every feature of every row is identical
    assert hist.clock == clock and pipeline.items.as_of == clock
    assert len(cand_s.rows) > 0
    assert np.array_equal(items_t.ids[cand_t.rows], pipeline.items.ids[cand_s.rows])
    assert np.array_equal(X_t, X_s, equal_nan=True)     # NaN: no value (an item without events, ...), on both
    # and with an earlier instant, nothing after it is in the histories
    assert hist.ts.max() <= clock


def test_item_ids_may_be_sparse_64_bit_integers(pipeline):
    # given the item table's items under sparse ids up to 2**63 - 1 (a table indexed by id would need exbibytes)
    items = pipeline.items
    sparse = items.ids * (2**62 // int(items.ids.max())) + 1
    sparse[0] = 2**63 - 1
    table = dataclasses.replace(items, ids=sparse)
    # then every id maps to its row, and unknown ids (0, negative, absent, neighbours) to -1
    assert np.array_equal(table.rows(table.ids), np.arange(len(table)))
    probe = np.array([0, -5, 2**63 - 2, int(table.ids[3]) + 1, 7], dtype=np.int64)
    assert table.rows(probe).tolist() == [-1] * len(probe)
