"""Every fitted candidate source of a bundle, mapped onto the rows of one ``ItemTable``: what candidate generation,
the simple methods and evaluate read.

A bundle stores its sources over its own item codes (``source_arrays.py``), mapped from disk; an older bundle, and
evaluate, hold them as id pairs in memory (``covisit.npz``'s keys). A worker builds this index once per bundle and
item table (``for_items``), and again only when either changes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import latent
from .item_table import ItemTable
from .latent import LatentIndex
from .neighbours import Neighbours
from .source_arrays import SourceArrays


@dataclasses.dataclass(frozen=True)
class SourceIndex:
    """The fitted sources over item rows: co-visitation always (possibly empty), item-kNN and the latent model when
    the bundle has them (None: not built)."""

    covisit: Neighbours
    knn: Neighbours | None = None
    latent: LatentIndex | None = None


def for_items(items: ItemTable, pairs: dict[str, np.ndarray] | SourceArrays) -> SourceIndex:
    """Map a bundle's sources onto ``items`` rows; pairs touching an unknown item are dropped. ``pairs``: fitted id
    pairs in memory (``covisit.npz``'s keys: the item-kNN pairs, ``knn.KEYS``, and latent factors, ``latent.KEYS``,
    when it has them, become ``knn`` and ``latent``), or a bundle's ``SourceArrays``, which are read in place."""
    if isinstance(pairs, SourceArrays):
        return _over_arrays(items, pairs)
    knn = None
    if "knn_src" in pairs:
        knn = Neighbours.of(items, pairs["knn_src"], pairs["knn_dst"], pairs["knn_weight"])
    factors = None
    if "latent_ids" in pairs and len(pairs["latent_ids"]):
        factors = LatentIndex.of(latent.by_row(items, pairs))
    return SourceIndex(covisit=Neighbours.of(items, pairs["src"], pairs["dst"], pairs["weight"]), knn=knn,
                       latent=factors)


def _over_arrays(items: ItemTable, arrays: SourceArrays) -> SourceIndex:
    """The index over a bundle's mapped arrays: equal to ``for_items`` of the pairs they were made of. It makes
    arrays of the table's length and the product's float32 factors; the lists and factor rows stay the bundle's."""
    row_of_code = items.rows(arrays.items)
    lists = {name: None if c is None else Neighbours.over_codes(items, row_of_code, c.indptr, c.nbr, c.weight)
             for name, c in (("covisit", arrays.covisit), ("knn", arrays.knn))}
    factors = None
    if arrays.latent_ids is not None and len(arrays.latent_ids):
        factors = LatentIndex.over_stored(items, arrays.latent_ids, arrays.latent_factors)
    return SourceIndex(covisit=lists["covisit"], knn=lists["knn"], latent=factors)
