"""Item-kNN neighbours: each item's most similar items by cosine over the binary user × item matrix of a log (1 = the
user interacted with the item with positive type weight), as id pairs like co-visitation's.

Co-visitation says what is done next in a session; kNN says who else liked the same things over their whole
history, which reaches further than a session (on a purchase log, the kNN over whole histories is the strongest
static method). Its neighbours of the user's history items become candidates (``candidates.for_user``) and their
summed similarity a column (``ux_knn_score``), the classic item-kNN score Σ_{i ∈ history} cos(i, j).

Built at training time with the co-visitation pairs (``pairs["knn_*"]``) and stored beside them in the bundle
(``source_arrays.py``). Memory: the similarity of ``BLOCK`` source items to every item at a time (dense
float32) per thread, never the item × item matrix.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from . import arrays

#: Source items whose similarities are computed together: a (BLOCK, items) float32 matrix (~70 MB at 70k items).
BLOCK = 256
KEYS = ("knn_src", "knn_dst", "knn_weight")


def build_pairs(ev_user: np.ndarray, ev_item: np.ndarray, positive: np.ndarray, top_k: int) -> dict[str, np.ndarray]:
    """The ``top_k`` most similar items of every item id as flat arrays (``knn_src``, ``knn_dst``, ``knn_weight``:
    cosine, > 0), sorted by src then weight descending then dst. ``positive``: the events whose type weighs > 0."""
    user, item = ev_user[positive], ev_item[positive]
    if len(user) == 0 or top_k < 1:
        return _none()
    users, u = np.unique(user, return_inverse=True)
    ids, i = np.unique(item, return_inverse=True)
    x = sparse.csr_matrix((np.ones(len(u), dtype=np.float32), (u.ravel(), i.ravel())), shape=(len(users), len(ids)))
    x.sum_duplicates()
    x.data[:] = 1.0
    norms = np.sqrt(np.asarray(x.sum(axis=0)).ravel())
    xn = sparse.csc_matrix(x.multiply(1.0 / np.where(norms > 0, norms, 1.0)[None, :]), dtype=np.float32)
    xn_t = xn.T.tocsr()
    # The product's right side in CSR, once: SciPy converts a CSC operand to CSR on every product, a copy of the
    # whole matrix per block (~15 % of the fit's time on a 5 M-event log), with the same sums.
    xn = xn.tocsr()
    k = min(top_k, len(ids) - 1)
    if k < 1:
        return _none()

    def block(lo: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        hi = min(lo + BLOCK, len(ids))
        sim = (xn_t[lo:hi] @ xn).toarray()
        sim[np.arange(hi - lo), np.arange(lo, hi)] = 0.0            # an item is not its own neighbour
        top = np.argpartition(-sim, k - 1, axis=1)[:, :k]
        val = np.take_along_axis(sim, top, axis=1)
        owner = np.repeat(np.arange(lo, hi), k)
        top, val = top.ravel(), val.ravel()
        keep = val > 0
        return owner[keep], top[keep], val[keep].astype(np.float64)

    # SciPy's sparse product and NumPy's partition release the GIL: the blocks run on every core.
    src, dst, weight = zip(*arrays.on_every_core(block, range(0, len(ids), BLOCK)))
    s, d, w = np.concatenate(src), np.concatenate(dst), np.concatenate(weight)
    order = np.lexsort((d, -w, s))
    return {"knn_src": ids[s[order]], "knn_dst": ids[d[order]], "knn_weight": w[order]}


def _none() -> dict[str, np.ndarray]:
    return {k: np.empty(0, dtype=np.float64 if k == "knn_weight" else np.int64) for k in KEYS}
