"""Top-C selection (ties to the lower column) and padded-cell helpers."""

from __future__ import annotations

import numpy as np

from memsim.core import jit


def _kth_best(scores: np.ndarray, k: int) -> np.ndarray:
    """Each row's k-th largest value (-inf when it has fewer than k)."""
    if scores.shape[1] < k:
        return np.full(len(scores), -np.inf)
    return -np.partition(-scores, k - 1, axis=1)[:, k - 1]


def _top_of_cells(scores: np.ndarray, cols: np.ndarray, c: int, n: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`top_candidates` of gathered cells, as note columns: (R, min(c, n))."""
    p, v = top_candidates(scores, c)
    pos = np.zeros((len(scores), min(c, n)), dtype=np.int64)
    vals = np.full(pos.shape, -np.inf)
    w = min(pos.shape[1], p.shape[1])
    pos[:, :w] = np.take_along_axis(cols, p[:, :w], axis=1)
    vals[:, :w] = v[:, :w]
    return pos, vals


def _within(counts: np.ndarray) -> np.ndarray:
    """Each item's position within its group, for groups of ``counts``
    items one after the other."""
    return np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)


def _packed_left(r: np.ndarray, col: np.ndarray, counts: np.ndarray, width: int = 1
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Items ``col`` of rows ``r`` (row by row, ``counts`` per row) packed
    to the left of a (rows, W) array, W their most per row (at least
    ``width``): (values, which are real, each item's position in its row)."""
    j = _within(counts)
    shape = (len(counts), max(width, int(counts.max(initial=0))))
    cols = np.zeros(shape, dtype=np.int64)
    real = np.zeros(shape, dtype=bool)
    cols[r, j] = col
    real[r, j] = True
    return cols, real, j


def top_candidates(scores: np.ndarray, c: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``c`` best columns of each row, best first; ties broken by the lower
    column (the engine's columns are in ``note_id`` order, so ties go to the
    lower ``note_id``), NaN after every number: the first c of
    ``np.argsort(-scores, axis=1, kind="stable")``. Returns (positions (Q,
    c'), scores (Q, c')), c' = min(c, L).
    """
    q, n = scores.shape
    if jit.enabled():  # the same order, row by row, compiled
        return _top_rows(scores, c)
    if n <= c:
        order = np.argsort(-scores, axis=1, kind="stable")
        return order, np.take_along_axis(scores, order, axis=1)
    # (partitioned negated: numpy's introselect is several times slower at
    # n - c than at c - 1 over the many equal scores of the notes not live)
    part = np.argpartition(-scores, c - 1, axis=1)[:, :c]
    kth = np.take_along_axis(scores, part, axis=1).min(axis=1)
    n_ge = np.count_nonzero(scores >= kth[:, None], axis=1)
    over = np.flatnonzero(n_ge > c)
    pos = part
    if len(over):
        # Ties at the boundary: argpartition picked among equal scores
        # arbitrarily. Keep every score above the c-th, then the lowest
        # columns among those equal to it.
        s = scores[over]
        v = kth[over, None]
        need = c - (s > v).sum(axis=1)
        eq = s == v
        sel = (s > v) | (eq & (np.cumsum(eq, axis=1, dtype=np.int32) <= need[:, None]))
        pos = part.copy()
        pos[over] = np.nonzero(sel)[1].reshape(len(over), c)
    # score descending, then the lower column: columns ascending, then a
    # stable sort by score (faster than one lexsort of both keys)
    pos = np.sort(pos, axis=1)
    vals = np.take_along_axis(scores, pos, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    pos, vals = np.take_along_axis(pos, order, axis=1), np.take_along_axis(vals, order, axis=1)
    # a row with a NaN among its c best (too few numbers: its kth is NaN) is
    # sorted in full instead, where NaN goes after every number (ties
    # among NaN to the lower column)
    odd = np.flatnonzero(np.isnan(kth))
    if len(odd):
        pos[odd] = np.argsort(-scores[odd], axis=1, kind="stable")[:, :c]
        vals[odd] = np.take_along_axis(scores[odd], pos[odd], axis=1)
    return pos, vals


@jit.kernel
def _top_rows(scores, c):
    """:func:`top_candidates` one row at a time (compiled by
    :func:`memsim.core.jit.kernel`): a heap of the row's ``c`` best numbers so
    far, its root the worst of them (the lower score, of equal scores the
    higher column), which a column replaces only when it is better (the row
    read from its last ``c`` columns on); then the row's first NaN columns
    where it has fewer than ``c`` numbers. Comparisons only: the same
    positions and values as the numpy version, in a few ns a cell where a
    partition of the row's negated copy costs several times that."""
    q, n = scores.shape
    cc = min(c, n)
    pos = np.empty((q, cc), dtype=np.int64)
    vals = np.empty((q, cc), dtype=scores.dtype)
    hv = np.empty(cc, dtype=scores.dtype)
    hc = np.empty(cc, dtype=np.int64)
    if cc == 0:  # no column (or c = 0): the heap has no root to compare with
        return pos, vals

    def sift_down(hv, hc, size, v, j):
        # (v, j) enters at the root of the heap's first ``size`` items and
        # moves down while a child is worse
        i = 0
        while True:
            w = 2 * i + 1
            if w >= size:
                break
            if w + 1 < size and (hv[w + 1] < hv[w] or (hv[w + 1] == hv[w] and hc[w + 1] > hc[w])):
                w += 1
            if hv[w] < v or (hv[w] == v and hc[w] > j):
                hv[i], hc[i] = hv[w], hc[w]
                i = w
            else:
                break
        hv[i], hc[i] = v, j

    for r in range(q):
        m = 0
        for t in range(n):
            # the last columns first: when scores rise with the column (newer
            # notes, higher recency) they fill the heap with the best at once,
            # and each other column costs a comparison
            j = t + n - cc
            if j >= n:
                j -= n
            v = scores[r, j]
            if v != v:  # NaN: after every number
                continue
            if m < cc:  # the heap grows: the new item moves up while worse than its parent
                i = m
                m += 1
                while i > 0:
                    p = (i - 1) // 2
                    if v < hv[p] or (v == hv[p] and j > hc[p]):
                        hv[i], hc[i] = hv[p], hc[p]
                        i = p
                    else:
                        break
                hv[i], hc[i] = v, j
            elif v >= hv[0] and (v > hv[0] or j < hc[0]):  # better than the worst kept
                sift_down(hv, hc, cc, v, j)
        # the kept numbers, the worst first, written from the end
        for k in range(m - 1, -1, -1):
            pos[r, k], vals[r, k] = hc[0], hv[0]
            sift_down(hv, hc, k, hv[k], hc[k])
        # too few numbers: the first NaN columns follow them
        j = 0
        for k in range(m, cc):
            while scores[r, j] == scores[r, j]:
                j += 1
            pos[r, k], vals[r, k] = j, scores[r, j]
            j += 1
    return pos, vals
