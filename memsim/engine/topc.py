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


def nonzero2(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.nonzero`` of a 2-D mask (row-major: rows, then each row's
    columns ascending), through ``flatnonzero``: the same arrays, about ten
    times faster (numpy's 2-D ``nonzero`` walks the mask index by index)."""
    return np.divmod(np.flatnonzero(mask), mask.shape[1])


def _columns(idx: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the note rows ``rows`` (any shape) are among the batch's
    columns ``idx`` (ascending), and which of them are there at all."""
    if len(idx) == 0:
        return np.zeros(np.shape(rows), dtype=np.int64), np.zeros(np.shape(rows), dtype=bool)
    lo, n = int(idx[0]), len(idx)
    if int(idx[-1]) - lo + 1 == n:  # consecutive rows (a batch's, usually): no search
        at = np.asarray(rows, dtype=np.int64) - lo
        hit = (at >= 0) & (at < n)
        return np.where(hit, at, np.where(at < 0, 0, n - 1)), hit
    at = np.minimum(np.searchsorted(idx, rows), len(idx) - 1)
    return at, idx[at] == rows


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


def top_candidates(scores: np.ndarray, c: int, live: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The ``c`` best columns of each row, best first; ties broken by the lower
    column (the engine's columns are in ``note_id`` order, so ties go to the
    lower ``note_id``), NaN after every number: the first c of
    ``np.argsort(-scores, axis=1, kind="stable")``. Returns (positions (Q,
    c'), scores (Q, c')), c' = min(c, L).

    With ``live`` (bool, broadcast to the scores' shape), the scores are
    those of ``np.where(live & ~np.isnan(scores), scores, -np.inf)``: a
    cell not live, or NaN, counts as -inf (read so by the compiled kernel,
    without those passes over the scores).
    """
    q, n = scores.shape
    if jit.enabled():  # the same order, row by row, compiled
        if live is None:
            return _top_rows(scores, c, _ALL)
        return _top_rows(scores, c, np.ascontiguousarray(np.broadcast_to(live, (q, n))))
    if live is not None:
        scores = np.where(live & ~np.isnan(scores), scores, -np.inf)
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


#: ``live`` of :func:`_top_rows` for every cell
_ALL = np.zeros((0, 0), dtype=bool)


@jit.kernel
def _top_rows(scores, c, live):
    """:func:`top_candidates` one row at a time (compiled by
    :func:`memsim.core.jit.kernel`), by comparisons only, so the same
    positions and values as the numpy version (``live`` (Q, L), or (0, 0)
    for every cell: a cell not live, or NaN, is read as -inf):

    1. the row's c-th best number, ``kth``: a min-heap of the c greatest
       values seen, which a value replaces only when strictly greater. The
       row is read from the end whose half holds the greater of 32 sampled
       values each, so that scores that rise or fall with the column (newer
       notes' recency) put its best values in the heap first and each other
       value costs one comparison;
    2. in column order, every value above ``kth`` and the first of those
       equal to it that the top c has room for, inserted by value after the
       equal ones (a stable sort of at most c items);
    3. where the row has fewer than c numbers, its first NaN columns."""
    q, n = scores.shape
    cc = min(c, n)
    pos = np.empty((q, cc), dtype=np.int64)
    vals = np.empty((q, cc), dtype=scores.dtype)
    heap = np.empty(cc, dtype=scores.dtype)
    if cc == 0:  # no column (or c = 0): nothing to keep
        return pos, vals
    masked = live.shape[0] > 0
    seen = np.empty(n if masked else 0, dtype=scores.dtype)
    for r in range(q):
        row = scores[r]
        if masked:  # the row as the numpy version sees it, in one pass
            for j in range(n):
                v = row[j]
                seen[j] = v if live[r, j] and v == v else -np.inf
            row = seen
        # read from the end whose half holds the greater sampled value
        # (from the last column when the row's values rise with it)
        half, lo, hi = n // 2, -np.inf, -np.inf
        samples = min(half, 32)
        for t in range(samples):
            at = t * half // samples
            if row[at] > lo:  # (NaN is not)
                lo = row[at]
            if row[half + at] > hi:
                hi = row[half + at]
        start, step = (n - 1, -1) if hi >= lo else (0, 1)
        m = t = 0  # numbers in the heap, columns read
        while m < cc and t < n:  # the heap fills: v moves up while below its parent
            v = row[start + step * t]
            t += 1
            if v != v:  # NaN: after every number
                continue
            i = m
            m += 1
            while i > 0 and v < heap[(i - 1) // 2]:
                heap[i] = heap[(i - 1) // 2]
                i = (i - 1) // 2
            heap[i] = v
        while t < n:  # full: a value greater than the least replaces it (NaN is not)
            v = row[start + step * t]
            t += 1
            if v > heap[0]:
                i = 0
                while 2 * i + 1 < cc:
                    w = 2 * i + 1
                    if w + 1 < cc and heap[w + 1] < heap[w]:
                        w += 1
                    if heap[w] >= v:
                        break
                    heap[i] = heap[w]
                    i = w
                heap[i] = v
        # the kept columns in column order: with a full heap, those above kth
        # and as many equal to it as the top c has room for; else every number
        kth = heap[0]
        room = cc
        if m == cc:
            for i in range(cc):
                if heap[i] > kth:
                    room -= 1
        k = 0
        for j in range(n):
            v = row[j]
            if m == cc:
                if not v >= kth:  # below kth, or NaN
                    continue
                if v == kth:
                    if room == 0:
                        continue
                    room -= 1
            elif v != v:
                continue
            i = k  # after the values >= v: a stable sort by value, descending
            while i > 0 and vals[r, i - 1] < v:
                vals[r, i], pos[r, i] = vals[r, i - 1], pos[r, i - 1]
                i -= 1
            vals[r, i], pos[r, i] = v, j
            k += 1
            if k == cc:
                break
        j = 0
        while k < cc:  # too few numbers: the first NaN columns follow them
            if row[j] != row[j]:
                pos[r, k], vals[r, k] = j, row[j]
                k += 1
            j += 1
    return pos, vals
