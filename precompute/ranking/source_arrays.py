"""A bundle's candidate sources as the arrays a worker reads, one uncompressed ``.npy`` file each, mapped read-only
from disk (``np.load(mmap_mode="r")``) so that every process on a host shares one copy through the page cache.

The fitted sources come as id pairs (``covisit.build_pairs``, ``knn.build_pairs``, ``latent.fit``). Stored so, a
worker had to hold the pairs and, beside them, each source re-sorted by item row in its own memory: ~2x the bundle's
size per bundle and per worker. Here they are stored over the bundle's own items instead, in the form the worker
uses, so that mapping a table's rows onto them takes arrays of the table's length only
(``source_index.for_items``):

    items.npy               int64 (n,)      the bundle's item ids, ascending; an item's *code* is its position here
    covisit_indptr.npy      int64 (n+1,)    co-visitation neighbours of code c: [indptr[c], indptr[c+1])
    covisit_nbr.npy         int32           their codes, strongest first (ties in the fitted pairs' order)
    covisit_weight.npy      float64         their weights
    knn_indptr.npy ...      the same for item-kNN, when the bundle has it
    latent_ids.npy          int64 (m,)      the latent model's item ids, ascending (when the bundle has it)
    latent_factors.npy      float32 (m, k)  their factors, one row per item

Neighbours are ordered by weight descending, ties in the order of the fitted pairs (a stable sort), which is the
order ``Neighbours.of`` gives the same pairs by item row. (The latent model's float32 product over the catalogue is
not stored: its columns follow the table's row order, which is by popularity and changes with every table.)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from . import knn

#: The sources' neighbour lists, by name: the prefix of their files and the keys of their id pairs.
NEIGHBOURS = {"covisit": ("src", "dst", "weight"), "knn": knn.KEYS}


@dataclasses.dataclass(frozen=True)
class CodeNeighbours:
    """One source's neighbour lists over a bundle's item codes (CSR)."""

    indptr: np.ndarray
    nbr: np.ndarray
    weight: np.ndarray


@dataclasses.dataclass(frozen=True)
class SourceArrays:
    """Every source of one bundle over its item codes: mapped read-only from the bundle's files (``read``), or
    in memory as ``of_pairs`` builds them. ``knn`` and ``latent_ids`` are None when the bundle has no such source."""

    items: np.ndarray
    covisit: CodeNeighbours
    knn: CodeNeighbours | None = None
    latent_ids: np.ndarray | None = None
    latent_factors: np.ndarray | None = None

    @classmethod
    def of_pairs(cls, pairs: dict[str, np.ndarray]) -> SourceArrays:
        """The arrays of fitted id ``pairs`` (``covisit.npz``'s keys)."""
        ids = [pairs[k] for name, (src, dst, _) in NEIGHBOURS.items() if src in pairs for k in (src, dst)]
        has_latent = "latent_ids" in pairs and len(pairs["latent_ids"]) > 0
        items = np.unique(np.concatenate([*ids, pairs["latent_ids"] if has_latent else np.empty(0, np.int64)])
                          .astype(np.int64))
        if len(items) >= 2 ** 31:
            raise ValueError("more than 2**31 items: neighbour codes are int32")
        lists = {name: _code_neighbours(items, pairs[src], pairs[dst], pairs[w])
                 for name, (src, dst, w) in NEIGHBOURS.items() if src in pairs}
        if not has_latent:
            return cls(items=items, covisit=lists["covisit"], knn=lists.get("knn"))
        return cls(items=items, covisit=lists["covisit"], knn=lists.get("knn"),
                   latent_ids=np.asarray(pairs["latent_ids"], dtype=np.int64),
                   latent_factors=np.ascontiguousarray(pairs["latent_factors"], dtype=np.float32))

    def files(self) -> dict[str, np.ndarray]:
        """File name → array, as ``write`` stores them."""
        out = {"items.npy": self.items}
        for name in NEIGHBOURS:
            lists = getattr(self, name)
            if lists is not None:
                out |= {f"{name}_{part}.npy": getattr(lists, part) for part in ("indptr", "nbr", "weight")}
        if self.latent_ids is not None:
            out |= {"latent_ids.npy": self.latent_ids, "latent_factors.npy": self.latent_factors}
        return out

    def write(self, directory: Path) -> list[str]:
        """Save every array under ``directory`` (created); the file names, for the bundle's checksums."""
        directory.mkdir(parents=True, exist_ok=True)
        names = []
        for name, array in self.files().items():
            np.save(directory / name, np.ascontiguousarray(array), allow_pickle=False)
            names.append(name)
        return names

    @classmethod
    def read(cls, directory: Path, names: list[str]) -> SourceArrays:
        """The arrays saved under ``directory`` (``names``: the files there), mapped read-only: a page is read from
        disk, or found in the page cache, when first touched, and shared by every process mapping the file."""
        # Plain ndarray views of the maps (their base keeps the map alive): indexing a ``np.memmap`` goes through
        # Python code, on the hot path.
        arrays = {name.removesuffix(".npy"): np.asarray(np.load(directory / name, mmap_mode="r", allow_pickle=False))
                  for name in names}
        lists = {name: CodeNeighbours(arrays[f"{name}_indptr"], arrays[f"{name}_nbr"], arrays[f"{name}_weight"])
                 for name in NEIGHBOURS if f"{name}_indptr" in arrays}
        return cls(items=arrays["items"], covisit=lists["covisit"], knn=lists.get("knn"),
                   latent_ids=arrays.get("latent_ids"), latent_factors=arrays.get("latent_factors"))

    def pairs(self) -> dict[str, np.ndarray]:
        """The id pairs these arrays were made of (in memory; the pairs touching no item are kept as they are)."""
        out = {}
        for name, (src, dst, w) in NEIGHBOURS.items():
            lists = getattr(self, name)
            if lists is not None:
                out[src] = np.repeat(self.items, np.diff(lists.indptr))
                out[dst] = self.items[lists.nbr]
                out[w] = np.array(lists.weight)
        if self.latent_ids is not None:
            out["latent_ids"], out["latent_factors"] = np.array(self.latent_ids), np.array(self.latent_factors)
        return out


def _code_neighbours(items: np.ndarray, src: np.ndarray, dst: np.ndarray, weight: np.ndarray) -> CodeNeighbours:
    """Id pairs as CSR over ``items`` codes: each source's by weight descending, ties in the pairs' order."""
    s, d = np.searchsorted(items, src), np.searchsorted(items, dst)
    order = np.lexsort((-weight, s))
    s, d, w = s[order], d[order], weight[order]
    indptr = np.r_[0, np.cumsum(np.bincount(s, minlength=len(items)))].astype(np.int64)
    return CodeNeighbours(indptr=indptr, nbr=d.astype(np.int32), weight=w.astype(np.float64))

