"""Batches: queries scored together, and their shared similarity product."""

from __future__ import annotations

import multiprocessing
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from memsim.core import jit
from memsim.core.machine import default_jobs
from memsim.evaluation.metrics import RelevanceIndex
from .settings import MAX_TICK_CELLS, splits_ticks
from .state import similarity_key

if TYPE_CHECKING:
    from .settings import Arm, SimSettings
    from .state import NoteArrays


#: columns of a batch's similarity product computed in one call (:meth:`Batch.product`)
PRODUCT_BLOCK = 2048


class Batch:
    """Queries scored together, over the notes that exist by the batch's last
    query. Shared by every arm."""

    #: columns of the similarity product computed in one call
    #: (:meth:`product`): a column's floats depend on it
    product_block = PRODUCT_BLOCK

    def __init__(self, *, qrows: np.ndarray, t: np.ndarray, actors: np.ndarray, notes: NoteArrays,
                 qemb: np.ndarray, qnorm2: np.ndarray, relevance: RelevanceIndex,
                 namespaces: np.ndarray | None = None, t0: float | None = None):
        self.qrows = qrows
        self.t = t
        #: the anchor of separable recencies (the end of the batch's tick;
        #: default its last query): the same for every subset of its queries
        self.t0 = float(t.max()) if t0 is None else float(t0)
        self.actors = actors
        self.notes = notes
        self.relevance = relevance
        tmax, tmin = t.max(), t.min()
        #: the note rows the batch holds (ascending), and the same rows as a
        #: slice when they are consecutive (views of the note arrays, not copies)
        self.idx, self.rows = notes.existing(tmin, tmax)
        n = len(self.idx)
        # only the notes created or expiring inside the batch's window are
        # valid for some of its queries and not others
        part = notes.changing(self.rows, tmin, tmax)
        created = notes.created_at[self.rows]
        expires = notes.expires_at[self.rows]
        q = len(t)
        if notes.namespace is None:
            # True but in the columns of ``part``, written next (per row)
            edges = np.flatnonzero(np.diff(np.r_[-2, part, -2]) != 1)
            runs = np.c_[part[edges[:-1]], part[edges[1:] - 1] + 1]
            written = (np.arange(q)[:, None, None] * n + runs[None]).reshape(-1, 2)
            self.valid = notes.scratch.filled_except((q, n), bool, True, written, tag="valid")
        else:
            self.valid = notes.scratch.empty((q, n), bool, tag="valid")
            self.valid.fill(True)
        if len(part):
            self.valid[:, part] = ((created[part][None, :] <= t[:, None])
                                   & (expires[part][None, :] > t[:, None]))
        if notes.namespace is not None:
            # separate stores (one per user or conversation) in one stream
            self.valid &= notes.namespace[self.idx][None, :] == namespaces[:, None]
        #: (L,) bool, the columns where :attr:`valid` may hold a False (None:
        #: any): elsewhere every query sees the note, so a full scan of the
        #: similarity need not read ``valid`` there (a fifth of its bytes)
        self.varying: np.ndarray | None = None
        if notes.namespace is None:
            self.varying = np.zeros(n, dtype=bool)
            self.varying[part] = True
        # shared by every arm (and its buffer's bytes are accounted for)
        self.valid.flags.writeable = False
        self.qnorm2 = qnorm2
        #: the queries' embeddings (Q, D), for a retriever that searches an index
        self.qemb = qemb
        self._dots: np.ndarray | None = None
        #: (a weak reference to a batch, its row or None for all, its
        #: columns or None for all) when this is a view of that batch
        #: (:meth:`subset`, :meth:`row`): its products are the batch's there
        #: (weak: the batch's cache holds its rows)
        self._view: tuple | None = None
        #: (L,) bool: the notes whose dot products the batch's values are
        #: built on (zeros stand for the others: notes no arm can see); fixed
        #: at the first read of :attr:`dots` (None before)
        self.computed: np.ndarray | None = None
        #: values shared by every arm of the batch (see BatchContext.shared)
        self.cache: dict = {}
        #: (L,) bool, the notes every arm of the replay has evicted (no arm
        #: can see them this batch: the shared levels leave them out); None
        #: when unknown (set with :meth:`set_dead`)
        self.dead: np.ndarray | None = None

    def open_notes(self) -> np.ndarray:
        """(L,) bool: the notes some arm can see (not :attr:`dead`)."""
        return np.ones(len(self.idx), dtype=bool) if self.dead is None else ~self.dead

    def _block_counts(self, notes: np.ndarray) -> np.ndarray:
        """(B,) int: how many of the notes ``notes`` ((L,) bool) each block of
        :data:`PRODUCT_BLOCK` columns holds."""
        block = self.product_block
        nb = -(-len(notes) // block)
        per = np.zeros(nb * block, dtype=bool)
        per[:len(notes)] = notes
        return per.reshape(nb, block).sum(axis=1)

    @property
    def multiplied(self) -> np.ndarray | None:
        """(B,) bool: the blocks of :data:`PRODUCT_BLOCK` columns holding a
        note of :attr:`computed` (None before it is fixed)."""
        return None if self.computed is None else self._block_counts(self.computed) > 0

    def product(self) -> np.ndarray:
        """The (Q, L) dot products of the queries and the notes of
        :attr:`computed` (zeros at the others).

        A column's floats depend on the width of the product it is computed
        in (BLAS tiles the columns), so the blocks are fixed: a note's
        products are those of its block of :data:`PRODUCT_BLOCK` columns
        (the store's last, narrower block: of that width), whichever notes
        are multiplied with it, so its similarity does not depend on what
        the other arms evicted."""
        return self._blocks(None)

    def scaled_similarity(self, retriever, scan: Scan | None = None) -> np.ndarray | None:
        """The similarity (Q, L) of a retriever whose similarity is the dot
        product scaled by rows and columns (:meth:`Retriever.dot_scale`;
        None for another), kept in :attr:`cache` under the key every arm's
        context uses. Each block of :meth:`product` is scaled in place right
        after its product (while it is in cache), with the queries' factors
        (once per batch) and the notes' (once per replay): the floats of
        ``(dots * s_q[:, None]) * s_n[None, :]``, with no (Q, L) dot
        products kept. A view of a batch (:meth:`subset`, :meth:`row`) takes
        its batch's similarity at its cells.

        ``scan``, when the product is computed now (not for a view, nor
        when kept), is run on each block holding a note of :attr:`computed`
        as one thread writes it (:class:`Scan`: the first similarity
        level's, :class:`~memsim.engine.cells.SimOrder`)."""
        if self._view is not None:
            full = self._base().scaled_similarity(retriever)
            return None if full is None else self._cells_of(full)
        key = ("similarity", similarity_key(retriever))
        got = self.cache.get(key)
        if got is None:
            note_scale = self.notes.dot_scale(retriever)
            if note_scale is None:
                return None
            got = self.cache[key] = self._blocks((retriever.dot_scale(self.qnorm2), note_scale),
                                                 scan)
        return got

    def similarity_pending(self, retriever) -> bool:
        """Whether :meth:`scaled_similarity` would compute the product now:
        a batch (not a view) whose similarity of ``retriever`` is the scaled
        dot product, not yet computed."""
        return not (self._view is not None or retriever.per_cell
                    or ("similarity", similarity_key(retriever)) in self.cache
                    or self.notes.dot_scale(retriever) is None)

    def sample_similarity(self, retriever, cols: np.ndarray) -> np.ndarray | None:
        """(Q, len(cols)): :meth:`scaled_similarity` at the columns ``cols``
        (ascending, notes some arm can see), bit for bit, computed without
        the whole product; None where that cannot be ensured (not
        :meth:`similarity_pending`, or a BLAS whose rows depend on their
        neighbours, :func:`gathers_exactly`).

        Each note is multiplied in a product of its block's shape, as
        :meth:`_blocks` multiplies it: the notes of full-width blocks
        gathered :data:`PRODUCT_BLOCK` at a time (padded with zeros), those
        of the store's last, narrower block in that block's own product;
        then scaled as :meth:`_blocks` scales them."""
        if not self.similarity_pending(retriever):
            return None
        emb, block = self.notes.emb, self.product_block
        q, n, dim = len(self.qemb), len(self.idx), emb.shape[1]
        dtype = np.result_type(self.qemb, emb)
        if not gathers_exactly(block, q, dim, dtype.str):
            return None
        rows = self.idx[cols]
        tail = n // block * block  # the narrower last block's first column (n: none)
        k = int(np.searchsorted(cols, tail))
        o = np.empty((len(cols), q), dtype=dtype)
        buf = np.empty((block, dim), dtype=dtype)
        res = np.empty((block, q), dtype=dtype)
        for a in range(0, k, block):
            m = min(block, k - a)
            np.take(emb, rows[a:a + m], axis=0, out=buf[:m])
            buf[m:] = 0
            np.matmul(buf, self.qemb.T, out=res)
            o[a:a + m] = res[:m]
        if k < len(cols):
            last = np.empty((n - tail, q), dtype=dtype)
            np.matmul(emb[self.idx[tail:]], self.qemb.T, out=last)
            o[k:] = last[cols[k:] - tail]
        # the floats of _blocks' numpy write: a product, then each factor
        o *= retriever.dot_scale(self.qnorm2)[None, :].astype(dtype)
        out = np.empty((q, len(cols)), dtype=dtype)
        np.multiply(o.T, self.notes.dot_scale(retriever)[rows], out=out)
        return out

    def _blocks(self, scale: tuple[np.ndarray, np.ndarray] | None,
                scan: Scan | None = None) -> np.ndarray:
        """The products of the notes of :attr:`computed` (scaled in place
        with ``scale`` = (query factors (Q,), note factors (N,))), zeros at
        the others; on several threads when the batch is large
        (:func:`product_threads`): each product is computed alone, so the
        floats do not depend on the threads.

        A block whose notes are all computed (or the last, narrower one) is
        multiplied as it is. The computed notes of the full-width blocks
        where they are few (retention leaves a few live notes scattered in
        old blocks) are gathered, :data:`PRODUCT_BLOCK` at a time, into
        products of the same shape: a row's floats depend only on the shape
        it is multiplied in, not on its neighbours (checked on this BLAS
        for every shape used, :func:`gathers_exactly`; where it does not
        hold the blocks are multiplied as they are)."""
        if self.computed is None:
            self.computed = self.open_notes()
        q, n = len(self.qemb), len(self.idx)
        block = self.product_block
        emb = self.notes.emb
        lo, hi = (int(self.idx[0]), int(self.idx[-1])) if n else (0, -1)
        run = hi - lo + 1 == n  # the notes are consecutive rows: views, no copies
        count = self._block_counts(self.computed)
        nb = len(count)
        width = np.minimum(block, n - np.arange(nb) * block)
        dtype = np.result_type(self.qemb, emb)
        gathered = ((count * GATHER_SHARE[1] <= width * GATHER_SHARE[0]) & (count > 0)
                    & (width == block))
        if gathered.any() and not gathers_exactly(block, q, emb.shape[1], dtype.str):
            gathered[:] = False
        # the blocks holding a computed note are written whole (their other
        # cells zeros); zeros elsewhere
        edges = np.flatnonzero(np.diff(np.r_[False, count > 0, False].astype(np.int8)))
        cols = np.minimum(edges.reshape(-1, 2) * block, n)
        written = (np.arange(q)[:, None, None] * n + cols[None]).reshape(-1, 2)
        out = self.notes.scratch.zeros_except((q, n), dtype, written, tag="product")
        qscale = None if scale is None else scale[0][None, :].astype(out.dtype)
        # the transposed write compiled: numpy's strided copy reads the
        # buffer across its rows, about twice the time of the product at
        # 50 queries (the same floats: a product, then each factor in turn)
        compiled = (jit.enabled() and out.dtype == np.float32
                    and (scale is None or scale[1].dtype == np.float32))
        if compiled:
            qscale = None if scale is None else np.ascontiguousarray(qscale[0])
        # the scan in the pass that writes each block (compiled), or after a
        # run of blocks (numpy)
        fused = compiled and scan is not None and scale is not None

        def note_rows(s: slice | np.ndarray) -> slice | np.ndarray:
            if isinstance(s, slice):
                return slice(lo + s.start, lo + s.stop) if run else self.idx[s]
            return lo + s if run else self.idx[s]

        # the gathered notes' products, a full-width product per
        # PRODUCT_BLOCK of them (the last padded with zeros)
        gcols = np.flatnonzero(np.repeat(gathered, block)[:n] & self.computed)
        parts = -(-len(gcols) // block)
        res = self.notes.scratch.empty((parts * block, q), dtype, tag="gathered")

        def gather(part: list[int]) -> None:
            buf = _thread_buffer((block, emb.shape[1]), dtype, "gather")
            for g in part:
                c = gcols[g * block:(g + 1) * block]
                np.take(emb, note_rows(c), axis=0, out=buf[:len(c)])
                buf[len(c):] = 0
                np.matmul(buf, self.qemb.T, out=res[g * block:(g + 1) * block])

        # each gathered block's notes: a run of ``gcols``, rows of ``res``
        bounds = np.searchsorted(gcols, np.arange(nb + 1) * block)

        def write(o: np.ndarray, s: slice, picked: tuple[np.ndarray, np.ndarray] | None
                  ) -> None:
            """Block ``s`` from the products ``o``: column ``s.start + i``
            from row i (``picked`` None), else zeros but at the columns
            ``s.start + picked[1]``, from the rows ``picked[0]``."""
            nscale = scale[1][note_rows(s)] if scale is not None else None
            if picked is not None:
                rows, at = picked
                nscale = None if nscale is None else nscale[at]
            if compiled:
                f = qscale if scale is not None else _NO_SCALE
                ns = nscale if scale is not None else _NO_SCALE
                if picked is None:
                    _write_block(o, f, ns, out, s.start)
                else:
                    _write_picked(o, rows, at, f, ns, out, s.start, s.stop - s.start)
                return
            if picked is not None:
                out[:, s] = 0
                o, s = o[rows], s.start + at  # (copies)
            if scale is None:
                out[:, s] = o.T
            elif isinstance(s, slice):
                o *= qscale
                np.multiply(o.T, nscale, out=out[:, s])
            else:
                out[:, s] = np.multiply((o * qscale).T, nscale)

        def work(part: list[int]) -> None:
            # each block's product notes x queries, into a contiguous buffer
            # of this thread, scaled there, then written transposed in place.
            # BLAS runs this layout faster when the queries are few (1.4-2.5x
            # for 2-19 queries, a tick in parts of a large store; 1.1x for
            # 50), and each cell is the same sum of the same products
            # (tests/test_product_blocks.py: exactly ``Q @ N.T``)
            buf = _thread_buffer((block, q), out.dtype)
            span = None  # [a, z): consecutive blocks written, not yet visited
            for b in part:
                s = slice(b * block, min(n, (b + 1) * block))
                if gathered[b]:  # its notes' rows of the gathered products
                    rows = np.arange(bounds[b], bounds[b + 1])
                    o, picked = res, (rows, gcols[rows] - s.start)
                else:
                    o = buf[:s.stop - s.start]
                    np.matmul(emb[note_rows(s)], self.qemb.T, out=o)
                    at = None if count[b] == width[b] else np.flatnonzero(self.computed[s])
                    picked = None if at is None else (at, at)
                if fused:
                    scan.write(o, s, picked, qscale, scale[1][note_rows(s)], out)
                    continue
                write(o, s, picked)
                if scan is None:
                    continue
                if span is not None and span[1] == s.start and b % VISIT_BLOCKS:
                    span = (span[0], s.stop)
                    continue
                if span is not None:
                    scan.visit(out, *span)
                span = (s.start, s.stop)
            if span is not None:
                scan.visit(out, *span)

        blocks = np.flatnonzero(count > 0).tolist()
        for task, items in ((gather, list(range(parts))), (work, blocks)):
            threads = product_threads(len(items))
            if threads > 1:
                # runs of VISIT_BLOCKS blocks dealt in turn: each thread's
                # consecutive blocks are visited as one piece
                runs = [items[i:i + VISIT_BLOCKS] for i in range(0, len(items), VISIT_BLOCKS)]
                done = [_pool(threads).submit(task, [b for r in runs[i::threads] for b in r])
                        for i in range(threads)]
                for f in done:
                    f.result()
            elif items:
                task(items)
        # shared by every arm (and the buffer's zeros are accounted for)
        out.flags.writeable = False
        return out

    @property
    def dots(self) -> np.ndarray:
        """(Q, L) dot products of the queries and the notes (zeros in the
        blocks of notes every arm had evicted when first read): computed
        again (the same calls, the same floats) when a kept batch released
        them (:meth:`ReplayCache.keep`). Computed only when read: a scaled
        retriever's similarity does without them (:meth:`scaled_similarity`)."""
        if self._dots is None:
            if self._view is not None:
                self._dots = self._cells_of(self._base().dots)
            else:
                self._dots = self.product()
        return self._dots

    def _base(self) -> Batch:
        """The batch this one is a view of."""
        base = self._view[0]()
        if base is None:
            raise RuntimeError("a view of a batch outlived its batch")
        return base

    def row_source(self) -> tuple[Batch, int] | None:
        """(the batch, the row) when this is a query row of a batch over its
        columns (:meth:`row`), else None."""
        if self._view is None or self._view[1] is None or self._view[2] is not None:
            return None
        return self._base(), self._view[1]

    def _cells_of(self, full: np.ndarray) -> np.ndarray:
        """A (Q, L) matrix of the batch this one is a view of, at its cells."""
        _, i, cols = self._view
        rows = full if i is None else full[i:i + 1]
        return rows if cols is None else rows[:, cols]

    def set_dead(self, dead: np.ndarray | None) -> None:
        """Set :attr:`dead` for this replay; the values built on other dead
        notes (the similarity levels, the per-query batches) are dropped, and
        so are the similarities when a note some arm can now see was not
        computed (the products are then computed again, with it)."""
        same = (dead is None and self.dead is None) or (
            dead is not None and self.dead is not None and np.array_equal(dead, self.dead))
        self.dead = dead
        if same:
            return
        drop = set(_DEAD_KEYS)
        if self.computed is not None:
            more = self.open_notes() & ~self.computed
            if more.any():
                self.computed = self.computed | more
                self._dots = None  # the products again, with those notes
                drop.add("similarity")
        for key in [k for k in self.cache if isinstance(k, tuple) and k[0] in drop]:
            del self.cache[key]

    def gains_for(self, idx: np.ndarray) -> np.ndarray:
        """Dense true gains (Q, len(idx)); 0 where no qrel."""
        return self.relevance.dense_gains(self.qrows, idx)

    def subset(self, cols: np.ndarray) -> Batch:
        """The same queries over the note columns ``cols`` only (a policy's
        prefilter candidates), with a cache of its own."""
        sub = Batch.__new__(Batch)
        sub.__dict__.update(self.__dict__)
        sub.idx = sub.rows = self.idx[cols]
        sub.valid = self.valid[:, cols]
        sub.varying = None if self.varying is None else self.varying[cols]
        sub._dots = None if self._dots is None else self._dots[:, cols]
        sub._view = (weakref.ref(self), None, cols)
        sub.dead = None if self.dead is None else self.dead[cols]
        # the similarities already computed, at those columns (elementwise:
        # the same floats as computing them on the subset)
        sub.cache = {k: v[:, cols] for k, v in self.cache.items()
                     if isinstance(k, tuple) and k[0] == "similarity"}
        return sub

    def row(self, i: int) -> Batch:
        """Query ``i`` alone over the same note columns (the same similarity
        cells and anchor), kept in the cache so that every arm shares it."""
        key = ("row", i)
        if key not in self.cache:
            sub = Batch.__new__(Batch)
            sub.__dict__.update(self.__dict__)
            r = slice(i, i + 1)
            sub.qrows, sub.t, sub.actors = self.qrows[r], self.t[r], self.actors[r]
            sub.valid = self.valid[r]
            sub._dots = None if self._dots is None else self._dots[r]
            sub._view = (weakref.ref(self), i, None)
            sub.qnorm2, sub.qemb = self.qnorm2[r], self.qemb[r]
            sub.cache = {}
            self.cache[key] = sub
        return self.cache[key]



#: the keys of a batch's cache whose values depend on its ``dead`` notes
_DEAD_KEYS = ("similarity-order", "row")


def make_batches(t: np.ndarray, tick_days: float) -> list[tuple[np.ndarray, float]]:
    """Query row groups of each tick, in time order, with the tick's end."""
    if len(t) == 0:
        return []
    tick = np.floor(t / tick_days).astype(np.int64)
    cuts = np.flatnonzero(np.diff(tick)) + 1
    return [(rows, float((tick[rows[0]] + 1) * tick_days))
            for rows in np.split(np.arange(len(t)), cuts)]


def replay_batches(t: np.ndarray, tick_days: float, created_at: np.ndarray,
                   in_parts: bool, max_cells: int = MAX_TICK_CELLS
                   ) -> list[tuple[np.ndarray, float, bool, bool]]:
    """The batches a replay takes, in time order: (query rows, the tick's
    end, whether it starts its tick, whether it ends it).

    Each tick of :func:`make_batches` is one batch, unless every arm of the
    replay can take it in parts (``in_parts``:
    :func:`~memsim.engine.settings.splits_ticks`): then a tick is taken in
    parts of consecutive queries, so that a part's queries times the notes
    created by the tick's end are about ``max_cells`` at most, each part at
    least 2 queries (a tick of one stays whole). Each query is answered on
    the state it has (per-query: at its time; per-tick: at its tick's
    start, the tick's uses recorded after its last part) whichever part it
    is in, and its similarity row is the same (a product's rows do not
    depend on the rows multiplied with them, but for a single row's: hence
    2); only the batch's (Q, L) matrices, its memory, are bounded. (A
    random ranker's draws are per batch cell: they follow the parts, in
    both engines.)"""
    ticks = make_batches(t, tick_days)
    sizes = [len(rows) for rows, _ in ticks]
    if not in_parts or not sizes or max(sizes) * len(created_at) <= max_cells:
        return [(rows, t_end, True, True) for rows, t_end in ticks]
    created = np.sort(created_at)
    out = []
    for rows, t_end in ticks:
        q = len(rows)
        # the notes the tick's batch can hold (created by its last query)
        n = int(np.searchsorted(created, t_end, side="right"))
        parts = 1
        if q * n > max_cells:
            # parts of max_cells // n queries at most, at least 2 each
            parts = max(1, min(-(-q // max(2, max_cells // n)), q // 2))
        out.extend((part, t_end, k == 0, k == parts - 1)
                   for k, part in enumerate(np.array_split(rows, parts)))
    return out


def arm_batches(qt: np.ndarray, created_at: np.ndarray, arms: list[Arm],
                settings: SimSettings) -> list[tuple[np.ndarray, float, bool, bool]]:
    """:func:`replay_batches` of a replay of ``arms`` (both engines take
    these): ticks in parts of ``settings.max_tick_cells`` when every arm
    can take them so (:func:`~memsim.engine.settings.splits_ticks`)."""
    in_parts = bool(arms) and all(splits_ticks(a.policy, settings) for a in arms)
    return replay_batches(qt, settings.tick_days, created_at, in_parts, settings.max_tick_cells)


_NO_SCALE = np.zeros(0, dtype=np.float32)


@jit.kernel
def _write_block(o, qscale, nscale, out, c0):
    """One product block ``o`` (notes x queries) written transposed into
    ``out[:, c0:c0 + len(o)]``, scaled when the factors are given:
    ``(o[i, j] * qscale[j]) * nscale[i]`` in float32, as numpy's two
    multiplies in :meth:`Batch._blocks` round them (compiled by
    :func:`memsim.core.jit.kernel`; empty factors: a plain copy)."""
    n, q = o.shape
    scaled = len(qscale) > 0
    for j in range(q):
        row = out[j]
        if scaled:
            f = qscale[j]
            for i in range(n):
                row[c0 + i] = (o[i, j] * f) * nscale[i]
        else:
            for i in range(n):
                row[c0 + i] = o[i, j]


@jit.kernel
def _write_picked(o, rows, cols, qscale, nscale, out, c0, width):
    """:func:`_write_block` of the rows ``rows`` of ``o``: zeros in
    ``out[:, c0:c0 + width]`` but at the columns ``c0 + cols[i]``, which get
    row ``rows[i]`` (scaled by ``nscale[i]``). (Zeros first, then the few
    notes: no branch per cell.)"""
    q = o.shape[1]
    scaled = len(qscale) > 0
    for j in range(q):
        row = out[j]
        row[c0:c0 + width] = 0
        if scaled:
            f = qscale[j]
            for i in range(len(rows)):
                row[c0 + cols[i]] = (o[rows[i], j] * f) * nscale[i]
        else:
            for i in range(len(rows)):
                row[c0 + cols[i]] = o[rows[i], j]


#: a numpy scan of the product's blocks (:meth:`Scan.visit`) spans up to this
#: many consecutive blocks written by one thread (still in cache; a scan is
#: a few numpy calls, which a block of 2,048 columns barely pays)
VISIT_BLOCKS = 4


class Scan:
    """The cells of a similarity (Q, L) above their row's threshold, valid
    for the row's query (``valid``, read only at the columns ``varying``
    when given) and not ``dead``: rows, columns and values, row by row,
    columns ascending (the first level of
    :class:`~memsim.engine.cells.SimOrder`).

    Run on a batch's product as it is computed
    (:meth:`Batch.scaled_similarity`): compiled, in the pass that writes
    each block (:meth:`write`: the values compared as they are written);
    else with numpy on runs of blocks right after they are written
    (:meth:`visit`, while they are in cache). Both give the same cells.
    The threads write :attr:`found` under distinct keys (one assignment
    each: atomic).

    Parameters
    ----------
    th : ndarray (Q,)
        The thresholds, in the similarity's dtype (a cell is found when its
        value is strictly above its row's).
    valid : ndarray (Q, L) of bool
    varying : ndarray (L,) of bool or None
        The columns where ``valid`` may hold a False (None: any).
    dead : ndarray (L,) of bool or None
        The notes no arm can see (None: none); not read in a gathered list
        of columns (:meth:`of`), which holds open notes only.
    """

    def __init__(self, th: np.ndarray, valid: np.ndarray, varying: np.ndarray | None,
                 dead: np.ndarray | None) -> None:
        self.th, self.valid, self.varying, self.dead = th, valid, varying, dead
        #: a block's (or a run's) first column -> its cells
        self.found: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def of(self, sim: np.ndarray, cols: slice | np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The cells found in the columns ``cols`` of ``sim`` (numpy)."""
        part = sim[:, cols]
        hit = part > self.th[:, None]
        if self.varying is None or self.varying[cols].any():
            hit &= self.valid[:, cols]
        if self.dead is not None and isinstance(cols, slice):
            hit &= ~self.dead[cols]
        r_i, c = np.divmod(np.flatnonzero(hit), hit.shape[1])
        return (r_i, (cols[c] if isinstance(cols, np.ndarray) else c + cols.start),
                part[r_i, c])

    def visit(self, sim: np.ndarray, a: int, z: int) -> None:
        """Scan the columns ``[a, z)`` (numpy)."""
        self.found[a] = self.of(sim, slice(a, z))

    def write(self, o: np.ndarray, s: slice, picked: tuple[np.ndarray, np.ndarray] | None,
              qscale: np.ndarray, nscale: np.ndarray, out: np.ndarray) -> None:
        """Write block ``s`` of ``out`` from the products ``o`` as
        :meth:`Batch._blocks` does (float32, compiled), scanning it in the
        same pass. A block of picked notes (zeros elsewhere) is scanned at
        those notes alone: its other columns are not computed, so dead
        (:attr:`Batch.computed` holds every open note); without dead notes
        it is scanned whole."""
        check = self.varying is None or bool(self.varying[s].any())
        dead = _NO_DEAD if self.dead is None else self.dead
        rows, cols, vals = _hit_buffers(self.th.dtype)
        if picked is None:
            k = _write_scan(o, qscale, nscale, out, s.start, self.th, self.valid, check,
                            dead, self.dead is not None, rows, cols, vals)
        elif self.dead is None:  # (not in a replay: uncomputed notes are dead ones)
            _write_picked(o, picked[0], picked[1], qscale, nscale[picked[1]], out, s.start,
                          s.stop - s.start)
            self.visit(out, s.start, s.stop)
            return
        else:
            k = _write_picked_scan(o, picked[0], picked[1], qscale, nscale[picked[1]], out,
                                   s.start, s.stop - s.start, self.th, self.valid, check,
                                   dead, True, rows, cols, vals)
        if k > len(rows):  # more cells than the buffers hold: numpy's scan
            self.visit(out, s.start, s.stop)
            _hit_buffers(self.th.dtype, k)
            return
        self.found[s.start] = (rows[:k].copy(), cols[:k].copy(), vals[:k].copy())

    def hits(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every cell found: (rows, columns, values), row by row, columns
        ascending."""
        if not self.found:
            return (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64),
                    np.zeros(0, dtype=self.th.dtype))
        r_i, c, v = (np.concatenate(x) for x in zip(*(self.found[a] for a in sorted(self.found))))
        # each piece is row by row, its columns ascending; pieces in order
        order = np.argsort(r_i, kind="stable")
        return r_i[order], c[order], v[order]


_NO_DEAD = np.zeros(1, dtype=bool)

#: cells a thread's compiled scan keeps at first (:func:`_hit_buffers`)
HIT_BUFFER = 1 << 14


def _hit_buffers(dtype, need: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The calling thread's buffers of a compiled scan's cells (rows,
    columns, values), at least ``need`` long (grown to twice that)."""
    got = getattr(_LOCAL, "hits", None)
    if got is None or got[2].dtype != dtype or len(got[0]) < max(need, HIT_BUFFER):
        size = max(HIT_BUFFER, 2 * need)
        got = _LOCAL.hits = (np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64),
                             np.empty(size, dtype=dtype))
    return got


@jit.kernel
def _write_scan(o, qscale, nscale, out, c0, th, valid, check_valid, dead, check_dead,
                rows, cols, vals):
    """:func:`_write_block` (scaled), and the cells written above their
    row's threshold ``th`` (valid when ``check_valid``, not dead when
    ``check_dead``) kept in ``rows``, ``cols``, ``vals`` row by row; returns
    how many there are (those beyond the buffers are counted, not kept).
    (Not :func:`_write_picked_scan` with every note picked: reading ``o``
    through an index takes this loop 1.7 times as long.)"""
    n, q = o.shape
    k = 0
    cap = len(rows)
    for j in range(q):
        row = out[j]
        f = qscale[j]
        t = th[j]
        for i in range(n):
            x = (o[i, j] * f) * nscale[i]
            row[c0 + i] = x
            if x > t:
                c = c0 + i
                if (check_valid and not valid[j, c]) or (check_dead and dead[c]):
                    continue
                if k < cap:
                    rows[k] = j
                    cols[k] = c
                    vals[k] = x
                k += 1
    return k


@jit.kernel
def _write_picked_scan(o, picked, at, qscale, nscale, out, c0, width, th, valid,
                       check_valid, dead, check_dead, rows, cols, vals):
    """:func:`_write_picked` (scaled), and :func:`_write_scan`'s cells among
    the picked columns."""
    q = o.shape[1]
    k = 0
    cap = len(rows)
    for j in range(q):
        row = out[j]
        row[c0:c0 + width] = 0
        f = qscale[j]
        t = th[j]
        for i in range(len(picked)):
            x = (o[picked[i], j] * f) * nscale[i]
            c = c0 + at[i]
            row[c] = x
            if x > t:
                if (check_valid and not valid[j, c]) or (check_dead and dead[c]):
                    continue
                if k < cap:
                    rows[k] = j
                    cols[k] = c
                    vals[k] = x
                k += 1
    return k


#: (a, b): a full-width block's notes are gathered into shared products
#: when at most a/b of them are computed (a gathered note costs a copy of
#: its embedding besides its share of a product)
GATHER_SHARE = (1, 2)


@lru_cache(maxsize=None)
def gathers_exactly(block: int, q: int, dim: int, dtype: str) -> bool:
    """Whether this BLAS gives a note's row of a (``block``, ``dim``) x
    (``dim``, ``q``) product the same floats whichever rows are multiplied
    with it and wherever it sits: pairs of blocks of fixed random
    embeddings (:func:`_probe_rows`) and ``q`` fixed random queries, their
    rows gathered shuffled into products of the same shape, compared with
    their blocks' own products, bit for bit, over at least
    :data:`GATHER_PROBE_ROWS` rows (OpenBLAS picks its kernels by
    shape; a kernel whose rows take different paths by their place, as its
    matrix-vector one does on a few rows, gives some of them other bits).
    """
    rng = np.random.default_rng((20261204, q))
    for emb in _probe_rows(block, dim, dtype):
        qemb = rng.standard_normal((q, dim)).astype(dtype)
        own = np.empty((2 * block, q), dtype=dtype)
        for b in range(2):
            np.matmul(emb[b * block:(b + 1) * block], qemb.T,
                      out=own[b * block:(b + 1) * block])
        pick = rng.permutation(2 * block)[:block]
        got = np.empty((block, q), dtype=dtype)
        np.matmul(emb[pick], qemb.T, out=got)
        if got.tobytes() != own[pick].tobytes():
            return False
    return True


#: rows :func:`gathers_exactly` compares per shape, at least
GATHER_PROBE_ROWS = 4096


@lru_cache(maxsize=None)
def _probe_rows(block: int, dim: int, dtype: str) -> tuple[np.ndarray, ...]:
    """:func:`gathers_exactly`'s pairs of blocks of fixed random embeddings,
    drawn once per block shape: they are most of its cost, and each batch's
    query count asks again."""
    rng = np.random.default_rng(20261204)
    return tuple(rng.standard_normal((2 * block, dim)).astype(dtype)
                 for _ in range(-(-GATHER_PROBE_ROWS // block)))


#: multiplied blocks per thread, at least, for a batch's product to be split
#: over threads (below, the threads cost more than they save)
THREAD_BLOCKS = 8


def product_threads(blocks: int) -> int:
    """Threads for a product of ``blocks`` blocks: the cores this process may
    use (at most :data:`MAX_THREADS`), one per :data:`THREAD_BLOCKS` blocks,
    in a process of its own only (a worker process runs beside others that
    use the other cores). numpy's product releases the GIL; BLAS itself
    stays on one thread (its synchronisation costs more than the small
    products save)."""
    if multiprocessing.parent_process() is not None:
        return 1
    return max(1, min(_cores(), MAX_THREADS, blocks // THREAD_BLOCKS))


#: threads of a batch's product, at most
MAX_THREADS = 8


#: each thread's product buffers (:func:`_thread_buffer`)
_LOCAL = threading.local()


def _thread_buffer(shape: tuple[int, int], dtype, name: str = "product") -> np.ndarray:
    """A buffer ``name`` of the calling thread (a block's products, or the
    notes gathered for one), kept from one batch to the next (a fresh one in
    a worker thread is fresh pages every batch)."""
    need = shape[0] * shape[1]
    buf = getattr(_LOCAL, name, None)
    if buf is None or buf.dtype != dtype or buf.size < need:
        buf = np.empty(need, dtype=dtype)
        setattr(_LOCAL, name, buf)
    return buf[:need].reshape(shape)


@lru_cache(maxsize=1)
def _cores() -> int:
    return default_jobs()


@lru_cache(maxsize=None)
def _pool(threads: int) -> ThreadPoolExecutor:
    """The process's pool of ``threads`` threads for the products."""
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix="memsim-product")
