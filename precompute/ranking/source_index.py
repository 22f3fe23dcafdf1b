"""Every fitted candidate source of a bundle, mapped onto the rows of one ``ItemTable``: what candidate generation,
the simple methods and evaluate read.

The bundle stores each source keyed by item id (``covisit.npz``: the co-visitation pairs, ``knn.KEYS``,
``latent.KEYS``); a worker builds this index once per bundle and item table (``for_items``), and again only when
either changes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import latent
from .item_table import ItemTable
from .latent import LatentIndex
from .neighbours import Neighbours


@dataclasses.dataclass(frozen=True)
class SourceIndex:
    """The fitted sources over item rows: co-visitation always (possibly empty), item-kNN and the latent model when
    the bundle has them (None: not built)."""

    covisit: Neighbours
    knn: Neighbours | None = None
    latent: LatentIndex | None = None


def for_items(items: ItemTable, pairs: dict[str, np.ndarray]) -> SourceIndex:
    """Map a bundle's ``pairs`` onto ``items`` rows; pairs touching an unknown item are dropped. The item-kNN pairs
    (``knn.KEYS``) and latent factors (``latent.KEYS``), when ``pairs`` has them, become ``knn`` and ``latent``."""
    knn = None
    if "knn_src" in pairs:
        knn = Neighbours.of(items, pairs["knn_src"], pairs["knn_dst"], pairs["knn_weight"])
    factors = None
    if "latent_ids" in pairs and len(pairs["latent_ids"]):
        factors = LatentIndex.of(latent.by_row(items, pairs))
    return SourceIndex(covisit=Neighbours.of(items, pairs["src"], pairs["dst"], pairs["weight"]), knn=knn,
                       latent=factors)
