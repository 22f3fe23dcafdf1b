"""Similar items ("more like this"): each item's list of neighbours, stacked from the fitted sources.

The list of an item is its co-visitation neighbours, strongest first, then its item-kNN neighbours not already
listed, up to ``length`` items (``stack``). Why: on evaluate's item-to-item check (``learning/item_to_item.py``; the
table per log in docs/evaluation.md) co-visitation is the best single source on every log measured, and item-kNN
reaches items co-visitation never paired; the chain keeps the best source's list as it is and only fills its gaps,
so it is never worse than co-visitation alone. Putting item-kNN first cost 8 % of the hit rate on MovieLens-100K and
the synthetic log; the latent model's nearest items after both changed no list's top 10 on any log (co-visitation
and item-kNN keep 50 neighbours each) and cost a product over all item pairs at training: left out. The latent
neighbours stay here for evaluate's table (``latent_neighbours``).

Stacked from a bundle's fitted sources (``build``: flat int64 ids ``similar_src``, ``similar_dst``, grouped by src,
each src's list in order) when a worker that loads the current bundle writes them to Redis (``feeds/similar.py``;
once per bundle); evaluate builds the same lists over the item rows of its cut (``for_rows``). An item with no neighbour in any source has no list: serving then answers its categories'
popular items.
"""

from __future__ import annotations

import numpy as np

from .arrays import group_rank

KEYS = ("similar_src", "similar_dst")
#: The sources a list is stacked from, in the order they fill it.
ORDER = ("covisit", "knn")
#: Items whose latent neighbours are computed together: a (BLOCK, items) float32 matrix.
BLOCK = 512


def stack(parts: list[tuple[np.ndarray, np.ndarray]], length: int) -> tuple[np.ndarray, np.ndarray]:
    """The chain of ``parts`` (each ``(owner, neighbour)`` node pairs, grouped by owner, each owner's neighbours in
    order): per owner its first part's neighbours, then the next part's not yet listed, ..., at most ``length``;
    an owner is never its own neighbour. Returns ``(owner, neighbour)`` grouped by owner ascending, in list order."""
    parts = [_first(np.asarray(o, np.int64), np.asarray(n, np.int64), length) for o, n in parts]
    owner = np.concatenate([o for o, _ in parts]) if parts else np.empty(0, np.int64)
    nbr = np.concatenate([n for _, n in parts]) if parts else np.empty(0, np.int64)
    if len(owner) == 0 or length < 1:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    place = np.arange(len(owner))               # parts in order, each in its own order: the chain's order
    keep = owner != nbr
    owner, nbr, place = owner[keep], nbr[keep], place[keep]
    # The first place of each (owner, neighbour), then each owner's places in order, the first ``length`` kept.
    by_pair = np.lexsort((place, nbr, owner))
    first = np.r_[True, (owner[by_pair][1:] != owner[by_pair][:-1]) | (nbr[by_pair][1:] != nbr[by_pair][:-1])]
    at = by_pair[first]
    at = at[np.lexsort((place[at], owner[at]))]
    o = owner[at]
    at = at[group_rank(o) < length]
    return owner[at], nbr[at]


def _first(owner: np.ndarray, nbr: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` pairs of each owner (``owner`` grouped): no part brings more than a list can hold, so the
    stacking sorts at most ``n`` pairs per item and source (40 at 20), not the 50 + 50 the sources keep."""
    if len(owner) and np.any(owner[1:] < owner[:-1]):
        raise ValueError("stack: each part's pairs must be grouped by owner, ascending")
    keep = group_rank(owner) <= n          # one more than n: the owner itself, left out below, may be among them
    return owner[keep], nbr[keep]


def latent_neighbours(factors: np.ndarray, owners: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``n`` nodes of largest dot product with each of ``owners`` (rows of ``factors``, ``(nodes, k)``), a
    positive product only, best first (ties by node), the owner itself left out: ``(owner, neighbour)`` pairs."""
    out_o, out_n = [], []
    if factors.size == 0 or n < 1:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    f32 = np.ascontiguousarray(factors, dtype=np.float32)
    m = len(f32)
    k = min(n + 1, m)
    for lo in range(0, len(owners), BLOCK):
        q = owners[lo:lo + BLOCK]
        sim = f32[q] @ f32.T
        sim[np.arange(len(q)), q] = -np.inf
        top = np.argpartition(-sim, k - 1, axis=1)[:, :k]
        val = np.take_along_axis(sim, top, axis=1)
        order = np.lexsort((top, -val), axis=1)[:, :n]
        top, val = np.take_along_axis(top, order, axis=1), np.take_along_axis(val, order, axis=1)
        ok = val > 0
        out_o.append(np.repeat(q, ok.sum(axis=1)))
        out_n.append(top[ok])
    return np.concatenate(out_o), np.concatenate(out_n)


def _first_neighbours(lists, owners: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` neighbours of each of ``owners`` (ascending) in a source's lists by item row
    (``neighbours.Neighbours``): ``(owner, neighbour row)`` pairs."""
    nbr, _, lens = lists.gather(owners)
    owner = np.repeat(owners, lens)
    keep = group_rank(owner) < n
    return owner[keep], nbr[keep]


def for_rows(index, rows: np.ndarray, length: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each source's list (co-visitation, item-kNN, latent) of each item row of ``rows`` (ascending, distinct) and
    the stacked one (``"served"``), over a ``SourceIndex``'s rows: name → ``(owner row, neighbour row)`` pairs,
    grouped by owner, in list order."""
    rows = np.asarray(rows, dtype=np.int64)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    out["covisit"] = _first_neighbours(index.covisit, rows, length)
    if index.knn is not None:
        out["knn"] = _first_neighbours(index.knn, rows, length)
    if index.latent is not None:
        latent = index.latent
        factors = latent.factors if latent.factors is not None else latent.factors_of(np.arange(len(latent.column)))
        out["latent"] = latent_neighbours(factors, rows, length)
    out["served"] = stack([out[s] for s in ORDER if s in out], length)
    return out


def build(pairs: dict[str, np.ndarray], length: int) -> dict[str, np.ndarray]:
    """The stacked list of every item a bundle's ``pairs`` know (co-visitation, then item-kNN), keyed by item id:
    ``similar_src``, ``similar_dst`` (``KEYS``). Time and memory follow the pairs (a sort of them), not items²."""
    parts = [pairs.get(k, np.empty(0, np.int64)) for k in ("src", "dst", "knn_src", "knn_dst")]
    ids = np.unique(np.concatenate(parts).astype(np.int64))
    code = lambda x: np.searchsorted(ids, np.asarray(x, dtype=np.int64))  # noqa: E731
    lists = [(code(pairs["src"]), code(pairs["dst"]))] if "src" in pairs else []
    if "knn_src" in pairs:
        lists.append((code(pairs["knn_src"]), code(pairs["knn_dst"])))
    # Each part grouped by owner, in its own order (the pairs are stored by src, strongest first).
    owner, nbr = stack(lists, length)
    return {"similar_src": ids[owner], "similar_dst": ids[nbr]}
