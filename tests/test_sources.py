"""The candidate sources are declared once (``ranking/sources.py``): the layout's source columns, the flag bits,
evaluate's recall table, the methods an arm may rank by and the score each ranks by all come from that list, and
they are the columns and bits the bundles written so far record."""

from __future__ import annotations

import pytest

from precompute.errors import InvalidInput
from precompute.experiments.specs import method_of
from precompute.learning import replay
from precompute.ranking import candidates, layout, methods, sources
from precompute.settings import Settings

#: What bundles of format 1 record: the source columns in this order, each source's bit.
RECORDED = ["ux_from_covisit", "ux_from_category", "ux_from_global", "ux_from_recent_1h", "ux_from_recent_1d",
            "ux_from_knn", "ux_from_latent", "ux_n_sources"]
BITS = {"covisit": 1, "category": 2, "global": 4, "recent_1h": 8, "recent_1d": 16, "knn": 32, "latent": 64}


def test_the_layouts_source_columns_and_the_bits_are_the_ones_bundles_record():
    names = layout.for_settings(Settings()).names
    assert [n for n in names if n.startswith("ux_from_") or n == "ux_n_sources"] == RECORDED
    assert {s.name: s.bit for s in sources.SOURCES} == BITS
    assert (candidates.FROM_COVISIT, candidates.FROM_KNN, candidates.FROM_LATENT, candidates.FROM_CATEGORY,
            candidates.FROM_GLOBAL, candidates.ALL_SOURCES) == (1, 32, 64, 2, 4, 127)


def test_each_source_has_a_bit_of_its_own_below_the_flags_width():
    bits = [s.bit for s in sources.SOURCES]
    assert all(b > 0 and b & (b - 1) == 0 for b in bits) and len(set(bits)) == len(bits)
    assert sources.ALL == sum(bits) < 2 ** 15
    assert [s.bit for s in sources.SOURCES] == sorted(bits)          # declared in the layout's (bits') order


def test_evaluate_reports_every_declared_source_once():
    assert sorted(replay.SOURCES) == sorted(s.name for s in sources.SOURCES)
    assert all(replay.SOURCES[s.name] == s.bit for s in sources.SOURCES)


@pytest.mark.parametrize("method,takes_window", sorted(sources.METHODS.items()))
def test_an_arm_may_rank_by_exactly_the_declared_methods(method, takes_window):
    spec = f"{method}:1d" if takes_window else method
    assert method_of(spec) == (method, "1d" if takes_window else None)
    # and a scoring source's method ranks by that source's score
    if method not in ("popular", "recent"):
        assert methods.SOURCE_SCORE[method] in candidates.Candidates.__dataclass_fields__


def test_a_method_not_declared_is_refused():
    with pytest.raises(InvalidInput, match="unknown method 'category'"):
        method_of("category")
