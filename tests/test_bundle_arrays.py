"""A bundle's candidate sources mapped read-only from disk (format 2) rank exactly as the same sources held in
memory as id pairs, which is how a bundle of the older format (``covisit.npz``) still loads and ranks."""

import dataclasses
import json
import shutil

import numpy as np
import pytest

from precompute.ranking import bundle, latent
from precompute.ranking.layout import for_settings
from precompute.ranking.neighbours import Neighbours
from precompute.ranking.source_arrays import SourceArrays
from precompute.ranking.source_index import for_items
from precompute.pipeline.pipeline import STAGES
from tests.test_pipeline import histories


def _as_format_1(settings, version: int) -> int:
    """Bundle ``version`` rewritten as the older format wrote it: the same model(s), its sources as id pairs in
    ``covisit.npz`` (``np.savez``), meta.json of format 1 with the checksums it recorded."""
    old = version + 7_000_000_000
    src, dst = settings.model_dir / str(version), settings.model_dir / str(old)
    shutil.copytree(src, dst)
    shutil.rmtree(dst / "sources")
    pairs = bundle.load(settings.model_dir, version).sources.pairs()
    np.savez(dst / "covisit.npz", **pairs)
    meta = json.loads((dst / "meta.json").read_text())
    names = ["model.cbm", "covisit.npz", *(["first_stage.cbm"] if "cascade" in meta else [])]
    meta.update(format=1, version=old, sha256={n: bundle.file_sha256(dst / n) for n in names})
    (dst / "meta.json").write_text(json.dumps(meta))
    return old


def test_a_mapped_bundle_ranks_exactly_as_its_pairs_in_memory_and_an_old_bundle_still_loads(pipeline, settings,
                                                                                             world, own_users):
    # given the session's bundle (format 2, its sources mapped from disk) and the same bundle in the older format
    mapped = bundle.load(settings.model_dir, world.version, for_settings(settings))
    old = bundle.load(settings.model_dir, _as_format_1(settings, world.version), for_settings(settings))
    assert mapped.meta["format"] == 2 and isinstance(mapped.sources, SourceArrays)
    assert old.meta["format"] == 1 and isinstance(old.sources, dict)
    assert isinstance(mapped.sources.covisit.weight.base, np.memmap)      # a view of the file, not a copy
    # when a batch of users is ranked by each, with its own source index over the same item table
    hist = histories(pipeline, own_users(40))
    ranked = {}
    for name, b in (("mapped", mapped), ("old", old)):
        index = for_items(pipeline.items, b.sources)
        ranked[name] = pipeline.rank(hist, dict.fromkeys(STAGES, 0.0), b, index)
    # then every candidate, every score and so the order are the same, bit for bit
    (c1, s1), (c2, s2) = ranked["mapped"], ranked["old"]
    for field in dataclasses.fields(c1):
        assert np.array_equal(getattr(c1, field.name), getattr(c2, field.name)), field.name
    assert len(s1) > 0 and np.array_equal(s1, s2)


def test_the_mapped_arrays_are_read_only(settings, world):
    # given the session's bundle loaded as a worker loads it
    arrays = bundle.load(settings.model_dir, world.version).sources
    # then no array of it can be written in place (it is the page cache every process on the host shares)
    for name, array in arrays.files().items():
        assert not array.flags.writeable, name
        with pytest.raises(ValueError):
            array[:1] = 0


class _Table:
    """Only what mapping sources onto rows reads of an item table: its length and ``rows``."""

    def __init__(self, ids: np.ndarray):
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def rows(self, item_ids):
        lookup = {int(i): r for r, i in enumerate(self.ids)}
        return np.array([lookup.get(int(i), -1) for i in np.asarray(item_ids)], dtype=np.int64)


def test_sources_over_codes_gather_what_pairs_over_rows_do_whatever_the_row_order():
    rng = np.random.default_rng(5)
    # given fitted id pairs with tied weights, latent factors (some all zero), and an item table whose rows are not
    # in id order (it orders them by popularity) and which lacks some of the bundle's items and has others
    ids = rng.choice(np.arange(10, 400), 120, replace=False)
    src, dst = rng.choice(ids, 900), rng.choice(ids, 900)
    weight = rng.integers(1, 4, 900) / 2.0
    order = np.lexsort((dst, -weight, src))
    factors = rng.standard_normal((80, 6)).astype(np.float32)
    factors[::7] = 0.0
    pairs = {"src": src[order], "dst": dst[order], "weight": weight[order],
             "knn_src": src[order][::2], "knn_dst": dst[order][::2], "knn_weight": weight[order][::2],
             "latent_ids": np.sort(ids[:80]), "latent_factors": factors}
    table = _Table(np.r_[rng.permutation(ids[15:]), [1, 2, 3]])
    # when both are mapped onto the table: the pairs in memory, and the arrays a bundle stores
    in_memory, arrays = for_items(table, pairs), for_items(table, SourceArrays.of_pairs(pairs))
    # then every row's neighbours are the same rows, weights and order, alone or gathered with others
    rows = np.r_[np.arange(len(table)), rng.integers(0, len(table), 50)]
    for name in ("covisit", "knn"):
        a, b = getattr(in_memory, name), getattr(arrays, name)
        assert isinstance(a, Neighbours) and not b.complete
        for x, y in zip(a.gather(rows, np.linspace(1, 2, len(rows))), b.gather(rows, np.linspace(1, 2, len(rows)))):
            assert np.array_equal(x, y) and x.dtype == y.dtype
    # and the latent model's columns, factors and norm are the same
    a, b = in_memory.latent, arrays.latent
    assert np.array_equal(a.rows, b.rows) and np.array_equal(a.column, b.column) and a.norm == b.norm
    assert np.array_equal(a.factors32, b.factors32)
    assert np.array_equal(a.factors_of(rows), b.factors_of(rows))
    owner = np.sort(rng.integers(0, 5, len(rows)))
    assert np.array_equal(a.user_vectors(rows, owner, 5), latent.user_vectors(a.factors, rows, owner, 5))
    assert np.array_equal(a.user_vectors(rows, owner, 5), b.user_vectors(rows, owner, 5))
