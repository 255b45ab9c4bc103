"""Similarity levels and gathered cells: what the accelerators share.

The notes of each query by decreasing similarity, in levels shared by every
arm of a batch, and the scoring of chosen cells of a batch."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from memsim.core.errors import MemsimError
from .batch import Scan
from .state import similarity_key
from .topc import _packed_left, nonzero2

if TYPE_CHECKING:
    from memsim.policies import Policy

    from .batch import Batch
    from .context import BatchContext, _GatheredContext
    from .state import PolicyState


@dataclass(frozen=True, eq=False)
class _LevelCells:
    """The padded cells (R, W) of one pruning level: note columns, which are
    real, the level's thresholds (R,), flat indices into the batch's (Q, L)
    matrices, and the similarity and ``real & valid`` there."""

    cols: np.ndarray
    real: np.ndarray
    tau: np.ndarray
    flat: np.ndarray
    sim: np.ndarray
    valid: np.ndarray
    retriever: str


class SimOrder:
    """The notes of each query of a batch by decreasing similarity, in levels
    shared by every arm: level ``m`` holds, per query, the valid notes whose
    similarity is above a threshold ``tau`` chosen (from a fixed sample of
    the columns) so that about ``m`` notes are above it. Every note left out
    of a level has a similarity <= its ``tau``, or is one no arm can see (the
    batch's ``dead`` notes: every arm evicted it), which no level holds. A
    row is scanned once, at a level above the one first asked, and lower
    levels are filtered from it.

    Built on a similarity not yet computed (``sim`` None, ``source`` a
    :class:`_Pending`), the levels' sample is computed on its own, bit for
    bit the product's values there, and the first scan of every row runs
    on the product's blocks right after they are written, while they are
    in cache, on the product's threads (:meth:`_hits`): the (Q, N)
    similarity is not read again from memory for it."""

    SAMPLE = 4096

    def __init__(self, sim: np.ndarray | None, valid: np.ndarray,
                 dead: np.ndarray | None = None, varying: np.ndarray | None = None,
                 source: _Pending | None = None):
        self._sim = sim
        self._source = source
        #: (N,) bool: the columns where ``valid`` may be False (None: any)
        self.varying = varying
        self.q, self.n_all = (sim if sim is not None else valid).shape
        #: the columns some arm can see, ascending
        self.open = (np.arange(self.n_all) if dead is None or not dead.any()
                     else np.flatnonzero(~dead))
        self.valid = valid
        self.dead = dead if len(self.open) < self.n_all else None
        n = len(self.open)
        # about n / 8 columns, 512 to SAMPLE: thresholds from a sample that
        # costs a fraction of one pass over the row
        step = max(1, n // min(self.SAMPLE, max(512, n // 8)))
        # negated: the j-th smallest is the j-th largest similarity (an order
        # statistic per level asked, not a sort of the whole sample); in the
        # similarity's own dtype (negation is exact; a float32 partition is
        # about twice as fast), the thresholds taken from it as float64
        sample = None if sim is not None else source.sample(
            self.open[::step] if n < self.n_all else np.arange(0, self.n_all, step))
        if sample is None:  # from the similarity, computed now if it is not yet
            sample = (self.sim[:, self.open[::step]] if n < self.n_all
                      else self.sim[:, ::step])
        self.neg_sample = -sample
        #: how many notes the levels are counted in
        self.n = n
        self._tau: dict[int, np.ndarray] = {}
        self._sorted: np.ndarray | None = None
        self._cols: dict[int, dict[int, np.ndarray]] = {}
        self._cells: dict[tuple, _LevelCells] = {}
        self._block_max: np.ndarray | None = None
        self._group_max: np.ndarray | None = None

    @property
    def dtype(self) -> np.dtype:
        """The similarity's dtype (known before it is computed)."""
        return self._sim.dtype if self._sim is not None else self._source.dtype

    @property
    def sim(self) -> np.ndarray:
        """The similarity (Q, N), computed when first read if it is not yet."""
        if self._sim is None:
            self._sim = self._source.compute()[0]
            self._source = None  # (kept levels hold arrays only: ReplayCache.keep)
        return self._sim

    def cells(self, level: int, todo: np.ndarray, full: bool, retriever: str) -> _LevelCells:
        """The cells the queries ``todo`` score at ``level`` (every note when
        ``full``), built once per batch and shared by every arm that asks."""
        key = (level, full, todo.tobytes())
        got = self._cells.get(key)
        if got is None:
            cols, real, tau = _level_cells(self, level, todo, full)
            flat = todo[:, None] * self.n_all + cols
            got = _LevelCells(cols=cols, real=real, tau=tau, flat=flat,
                              sim=np.take(self.sim, flat), valid=real & np.take(self.valid, flat),
                              retriever=retriever)
            self._cells[key] = got
        return got

    @property
    def has_block_max(self) -> bool:
        """Whether :meth:`block_max` was computed (a pass over the similarity)."""
        return self._block_max is not None

    def block_max(self) -> np.ndarray:
        """(Q, B): the largest similarity of each block of :data:`BLOCK`
        consecutive columns (the similarity filter's, :func:`kept_cells`);
        +inf for a block with a NaN similarity (its cells are then compared
        one by one), -inf for one whose notes no arm can see (not read)."""
        if self._block_max is None:
            q, n = self.sim.shape
            if self.dead is None:
                bm = np.maximum.reduceat(self.sim, np.arange(0, n, BLOCK), axis=1)
            else:  # the blocks some arm can see: often a small part of the store
                bm = np.full((q, -(-n // BLOCK)), -np.inf, dtype=self.sim.dtype)
                seen = np.unique(self.open // BLOCK)
                cols = np.minimum((seen[:, None] * BLOCK + np.arange(BLOCK)).ravel(), n - 1)
                bm[:, seen] = np.maximum.reduceat(self.sim[:, cols],
                                                  np.arange(0, len(cols), BLOCK), axis=1)
            bm[np.isnan(bm)] = np.inf
            self._block_max = bm
        return self._block_max

    def group_max(self) -> np.ndarray:
        """(Q, G): the largest similarity of each group of :data:`GROUP`
        blocks (+inf where a block's is)."""
        if self._group_max is None:
            bm = self.block_max()
            self._group_max = np.maximum.reduceat(bm, np.arange(0, bm.shape[1], GROUP), axis=1)
        return self._group_max

    def full_blocks(self) -> np.ndarray:
        """The similarity's whole blocks as (Q, B', :data:`BLOCK`), a view."""
        q, n = self.sim.shape
        full = n // BLOCK
        return self.sim[:, :full * BLOCK].reshape(q, full, BLOCK)

    def sample_rank(self, m: int) -> int:
        """The sample rank whose value is level ``m``'s threshold."""
        return -(-m * self.neg_sample.shape[1] // self.n)

    def _set_tau(self, m: int, tau: np.ndarray) -> None:
        self._tau[m] = tau.astype(np.float64)  # (exact: sample values)
        self._cols[m] = {}

    def tau(self, m: int) -> np.ndarray:
        if m in self._tau:
            return self._tau[m]
        q, k = self.neg_sample.shape
        j = self.sample_rank(m)
        if j >= k:
            self._set_tau(m, np.full(q, -np.inf))
        elif not self._tau:
            # the batch's first level: its scan (cols) reads the level four
            # times as deep, so both thresholds are found here, by two
            # partitions (the second over the jh smallest only: numpy's
            # partition at several ranks at once is several times slower)
            hi = ladder_level(4 * m)
            jh = self.sample_rank(hi)
            if jh < k:
                part = np.partition(self.neg_sample, jh, axis=1)
                self._set_tau(hi, -part[:, jh])
                if j < jh:
                    part = np.partition(part[:, :jh], j, axis=1)
            else:
                part = np.partition(self.neg_sample, j, axis=1)
            self._set_tau(m, -part[:, j])
        else:
            # a further level: the sample sorted once, and every level
            # after it is a read
            if self._sorted is None:
                self._sorted = np.sort(self.neg_sample, axis=1)
            self._set_tau(m, -self._sorted[:, j])
        return self._tau[m]

    def cols(self, m: int, rows: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        """For each query of ``rows``: the valid columns above level ``m``'s
        threshold (ascending), and the thresholds (R,)."""
        tau = self.tau(m)
        got = self._cols[m]
        scan = []
        for r in rows.tolist():
            if r not in got:
                c = self._from_higher(m, r)
                if c is None:
                    scan.append(r)
                else:
                    got[r] = c
        if scan:
            self._scan(m, np.array(scan))
        return [got[r] for r in rows.tolist()], tau[rows]

    def _scan(self, m: int, rows: np.ndarray) -> None:
        """Scan the rows ``rows`` (none of them at a level above ``m`` yet)
        at the level four times as deep, kept for the lower thresholds to
        come, and filter level ``m`` from it: one pass over the rows."""
        hi = ladder_level(4 * m)
        # the thresholds are sample values: exact in the similarity's own
        # dtype, where the comparison is cheaper
        thi = self.tau(hi)[rows]
        tau = self.tau(m)
        deep, at_m = self._cols[hi], self._cols[m]
        every = ~np.isfinite(thi)  # a level as deep as the whole store
        for r in rows[every].tolist():
            deep[r] = c = self.open[self.valid[r, self.open]]
            at_m[r] = c[self.sim[r, c] > tau[r]]
        thi = thi[~every].astype(self.dtype)
        rows = rows[~every]
        if not np.array_equal(rows, np.arange(self.q)):
            # some rows (an arm's unproven ones): each on its own, no copies
            for r, th in zip(rows.tolist(), thi):
                hit = (self.sim[r] > th) & self.valid[r]
                if self.dead is not None:
                    hit &= ~self.dead
                deep[r] = c = np.flatnonzero(hit)
                at_m[r] = c[self.sim[r, c] > tau[r]]
            return
        # every row (a batch's first level): one comparison over the matrix,
        # or over the open columns alone when some are dead (retention often
        # leaves a small part of the store), block by block of SCAN_BLOCK
        # columns (small temporaries, each block read once while in cache)
        r_i, c, v = self._hits(thi)
        above = v > tau[r_i]
        ends = np.searchsorted(r_i, np.arange(1, len(rows) + 1)).tolist()
        start = 0
        for r, end in zip(rows.tolist(), ends):
            deep[r] = c[start:end]
            at_m[r] = c[start:end][above[start:end]]
            start = end

    def _hits(self, thi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The valid open cells whose similarity is above their row's
        ``thi`` (Q,): (rows, columns, similarities), row by row, columns
        ascending (the values read in the scan's pass, not gathered again
        from the matrix after it). When the similarity is not computed yet,
        it is now, each block scanned as it is written (:class:`Scan`; the
        product's blocks of columns are pieces in order; those it does not
        multiply hold no open note)."""
        scan = Scan(thi, self.valid, self.varying, self.dead)
        fresh = False
        if self._sim is None:
            self._sim, fresh = self._source.compute(scan)
            self._source = None
        if not fresh:
            for cols in self._scan_pieces():
                key = cols.start if isinstance(cols, slice) else int(cols[0])
                scan.found[key] = scan.of(self.sim, cols)
        return scan.hits()

    def _scan_pieces(self) -> list[slice | np.ndarray]:
        """The columns to scan, in order, in pieces of :data:`SCAN_BLOCK` at
        most: slices of the store, or of the stretches where the open
        columns lie (dead ones among them are masked); the open columns
        themselves when they are scattered."""
        if self.dead is None:
            return [slice(a, min(a + SCAN_BLOCK, self.n_all))
                    for a in range(0, self.n_all, SCAN_BLOCK)]
        o = self.open
        if len(o) == 0:
            return []
        # stretches: open columns less than SCAN_GAP apart
        cut = np.flatnonzero(np.diff(o) > SCAN_GAP) + 1
        starts, stops = o[np.r_[0, cut]], o[np.r_[cut - 1, len(o) - 1]] + 1
        if (int((stops - starts).sum()) > 2 * len(o)
                or len(starts) > max(16, len(o) // max(1, SCAN_GAP))):  # scattered: gather
            return [o[a:a + SCAN_BLOCK] for a in range(0, len(o), SCAN_BLOCK)]
        return [slice(a, min(a + SCAN_BLOCK, z))
                for s0, z in zip(starts.tolist(), stops.tolist())
                for a in range(s0, z, SCAN_BLOCK)]

    def _from_higher(self, m: int, r: int) -> np.ndarray | None:
        """Row ``r``'s columns at level ``m``, filtered from the smallest
        higher level already scanned (None when there is none)."""
        best = None
        for lv, got in self._cols.items():
            if lv > m and r in got and (best is None or lv < best):
                best = lv
        if best is None:
            return None
        c = self._cols[best][r]
        return c[self.sim[r, c] > self._tau[m][r]]


class _Pending:
    """A batch's similarity of a retriever, not computed yet
    (:meth:`Batch.similarity_pending`): its sample and then the whole
    product, for :class:`SimOrder`."""

    def __init__(self, batch: Batch, retriever) -> None:
        self.batch, self.retriever = batch, retriever
        self.dtype = self.dtype_of(batch)

    @staticmethod
    def dtype_of(batch: Batch) -> np.dtype:
        """The dtype of a batch's similarity (its product's)."""
        return np.result_type(batch.qemb, batch.notes.emb)

    def sample(self, cols: np.ndarray) -> np.ndarray | None:
        """The similarity at ``cols`` (:meth:`Batch.sample_similarity`)."""
        return self.batch.sample_similarity(self.retriever, cols)

    def compute(self, scan: Scan | None = None) -> tuple[np.ndarray, bool]:
        """The similarity, and whether it was computed now (each block then
        scanned by ``scan``: :meth:`Batch.scaled_similarity`)."""
        fresh = self.batch.similarity_pending(self.retriever)
        return self.batch.scaled_similarity(self.retriever, scan), fresh


#: a batch's similarity levels are built before its product (:class:`_Pending`)
#: when its similarity takes this many bytes or more: a smaller one is still
#: in cache when the scan reads it after the product, and the sample's own
#: products cost more than the scan saves (at 50k notes x 50 queries, 10 MB:
#: no faster; at 1M, 200 MB: the year's scan was about a fifth of its CPU)
PENDING_BYTES = 32 << 20


def _sim_order(ctx: BatchContext, retriever) -> SimOrder:
    """The batch's similarity levels of ``retriever``, shared by every arm
    (built before the similarity when it is still to be computed, and large)."""
    b = ctx.batch

    def build() -> SimOrder:
        if (b.similarity_pending(retriever)
                and b.valid.size * _Pending.dtype_of(b).itemsize >= PENDING_BYTES):
            return SimOrder(None, b.valid, b.dead, b.varying, _Pending(b, retriever))
        return SimOrder(ctx.similarity(retriever), b.valid, b.dead, b.varying)

    return ctx.shared(("similarity-order", similarity_key(retriever)), build)


def ladder_level(x: float) -> int:
    """The smallest level >= x of the ladder 64 * sqrt(2) ** k."""
    k = max(0, int(np.ceil(2.0 * np.log2(max(x, 64.0) / 64.0) - 0.05)))
    return int(round(64 * 2.0 ** (k / 2.0)))


def _level_cells(order: SimOrder, level: int, todo: np.ndarray, full: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cells the queries ``todo`` score at this level: columns (padded),
    which of them are real, and the similarity threshold below which no note
    was taken (-inf when every open note is)."""
    if full:
        n = len(order.open)
        return (np.broadcast_to(order.open, (len(todo), n)),
                np.ones((len(todo), n), dtype=bool), np.full(len(todo), -np.inf))
    lists, tau = order.cols(level, todo)
    width = max(1, max(len(x) for x in lists))
    cols = np.zeros((len(todo), width), dtype=np.int64)
    real = np.zeros((len(todo), width), dtype=bool)
    for i, x in enumerate(lists):  # a loop over the batch's queries, not notes
        cols[i, :len(x)] = x
        real[i, :len(x)] = True
    return cols, real, tau


def _proven(vals: np.ndarray, k: int, full: bool, left_out: np.ndarray) -> np.ndarray:
    """Which queries' top ``k`` found on a similarity level (``vals``, best
    first) is their exact top ``k``: every note was looked at (``full``), or
    the k-th value found is strictly above ``left_out``, what any note the
    level left out could reach (so no such note enters, or ties in)."""
    if full:
        return np.ones(len(vals), dtype=bool)
    if vals.shape[1] < k:
        return np.zeros(len(vals), dtype=bool)
    kth = vals[:, k - 1]
    return np.isfinite(kth) & (kth > left_out)


#: columns per piece of the first level's scan (:meth:`SimOrder._hits`)
SCAN_BLOCK = 8192

#: dead columns between two open ones, at most, for the scan to read them
#: (masked) rather than gather the open ones
SCAN_GAP = 256


#: columns per block of :func:`_recency_blocks`
BLOCK = 32


#: blocks per group of the similarity filter's first comparison
GROUP = 16


#: a level's cells are packed to an arm's live ones when at most this share
#: of them is live (packing costs a few passes over the cells)
_PACK_BELOW = 0.6


def _live_cells(cells: _LevelCells, ctx: BatchContext, c: int
                ) -> tuple[_LevelCells, np.ndarray]:
    """The cells of a level an arm scores, and which of them are live.

    A level holds every valid note above its similarity threshold; the notes
    an arm evicted (or its prefilter left out) are not live for it. When few
    cells are live (a retention that evicts most of the store), they are
    packed to the left, in column order so that ties still go to the lower
    note, and at least ``c`` wide when the level is.
    """
    live = cells.real & ctx.live_cells(cells.flat, cells.cols, cells.valid)
    k = live.sum(axis=1)
    if k.sum() > _PACK_BELOW * live.size:
        return cells, live
    ctx.state.work["packed-levels"] += 1
    r, j0 = nonzero2(live)
    cols, real, j = _packed_left(r, cells.cols[r, j0], k,
                                 width=max(1, min(c, cells.cols.shape[1])))
    shape = cols.shape
    # padding: column 0 of the row, as the level's own padding
    flat = np.repeat(cells.flat[:, :1] - cells.cols[:, :1], shape[1], axis=1)
    sim = np.zeros(shape, dtype=cells.sim.dtype)
    flat[r, j] = cells.flat[r, j0]
    sim[r, j] = cells.sim[r, j0]
    return dataclasses.replace(cells, cols=cols, real=real, flat=flat, sim=sim, valid=real), real


def _cell_scores(policy: Policy, g: _GatheredContext, st: PolicyState) -> np.ndarray | None:
    """The policy's scores of the gathered cells, -inf where not live (or
    NaN); None when a component reads what gathered cells lack, fails on
    them (a contributor's component that treats a note vector as 1-D) or
    returns another shape: the arm is then scored by whole rows
    (``st.prune_off``), where an error of its own is raised as it is. A
    memsim error (a refused output, :class:`ComponentOutputError`) is raised
    here."""
    try:
        scores = np.asarray(policy.score(g), dtype=np.float64)
    except MemsimError:
        raise
    except Exception:  # noqa: BLE001 - the whole rows decide: slower, not wrong
        scores = None
    if scores is None or scores.shape != g.cols.shape:
        st.prune_off = True
        return None
    st.work["cells"] += scores.size
    return np.where(g.live & ~np.isnan(scores), scores, -np.inf)


def _cells_scorable(policy: Policy) -> bool:
    """Whether the policy's score of a note can be computed on gathered
    cells: an elementwise ranker that reads no truth, plan or log and does
    not choose its own candidates."""
    r = policy.ranker
    return not (r.set_dependent or r.needs_truth or r.needs_planted or r.needs_logged
                or r.chooses_candidates())

