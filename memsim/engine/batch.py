"""Batches: queries scored together, and their shared similarity product."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from memsim.evaluation.metrics import RelevanceIndex

if TYPE_CHECKING:
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
        self.idx = np.flatnonzero((notes.created_at <= tmax) & (notes.expires_at > tmin))
        created = notes.created_at[self.idx]
        expires = notes.expires_at[self.idx]
        # only the notes created or expiring inside the batch's window are
        # valid for some of its queries and not others
        self.valid = np.ones((len(t), len(self.idx)), dtype=bool)
        part = np.flatnonzero((created > tmin) | (expires <= tmax))
        if len(part):
            self.valid[:, part] = ((created[part][None, :] <= t[:, None])
                                   & (expires[part][None, :] > t[:, None]))
        if notes.namespace is not None:
            # separate stores (one per user or conversation) in one stream
            self.valid &= notes.namespace[self.idx][None, :] == namespaces[:, None]
        self.qnorm2 = qnorm2
        #: the queries' embeddings (Q, D), for a retriever that searches an index
        self.qemb = qemb
        self._dots: np.ndarray | None = None
        #: (B,) bool: the blocks of :data:`PRODUCT_BLOCK` columns whose dot
        #: products the batch's values are built on (zeros stand for the
        #: others); fixed at the first read of :attr:`dots` (None before)
        self.multiplied: np.ndarray | None = None
        #: values shared by every arm of the batch (see BatchContext.shared)
        self.cache: dict = {}
        #: (L,) bool, the notes every arm of the replay has evicted (no arm
        #: can see them this batch: the shared levels leave them out); None
        #: when unknown (set with :meth:`set_dead`)
        self.dead: np.ndarray | None = None

    def open_blocks(self) -> np.ndarray:
        """(B,) bool: the product blocks holding a note some arm can see."""
        n = len(self.idx)
        nb = -(-n // self.product_block)
        if self.dead is None:
            return np.ones(nb, dtype=bool)
        dead = np.ones(nb * self.product_block, dtype=bool)
        dead[:n] = self.dead
        return ~dead.reshape(nb, self.product_block).all(axis=1)

    def product(self) -> np.ndarray:
        """The (Q, L) dot products of the queries and the notes, one matrix
        product per block of :data:`PRODUCT_BLOCK` columns of :attr:`multiplied`
        (zeros in the other blocks).

        A column's floats depend on the columns multiplied with it (BLAS
        tiles them), so the blocks are fixed: a block gives the same floats
        whichever others are multiplied, and a note's similarity does not
        depend on what the other arms evicted."""
        if self.multiplied is None:
            self.multiplied = self.open_blocks()
        q, n = len(self.qemb), len(self.idx)
        block = self.product_block
        emb = self.notes.emb
        out = np.empty((q, n), dtype=np.result_type(self.qemb, emb))
        lo, hi = (int(self.idx[0]), int(self.idx[-1])) if n else (0, -1)
        run = hi - lo + 1 == n  # the notes are consecutive rows: views, no copies
        for b in np.flatnonzero(self.multiplied).tolist():
            s = slice(b * block, min(n, (b + 1) * block))
            e = emb[lo + s.start:lo + s.stop] if run else emb[self.idx[s]]
            np.matmul(self.qemb, e.T, out=out[:, s])
        # the runs of skipped blocks, each in one write
        edges = np.flatnonzero(np.diff(np.r_[True, self.multiplied, True].astype(np.int8)))
        for a, z in zip(edges[::2].tolist(), edges[1::2].tolist()):
            out[:, a * block:z * block] = 0
        return out

    @property
    def dots(self) -> np.ndarray:
        """(Q, L) dot products of the queries and the notes (zeros in the
        blocks of notes every arm had evicted when first read): computed
        again (the same calls, the same floats) when a kept batch released
        them (:meth:`ReplayCache.keep`)."""
        if self._dots is None:
            self._dots = self.product()
        return self._dots

    def set_dead(self, dead: np.ndarray | None) -> None:
        """Set :attr:`dead` for this replay; the values built on other dead
        notes (the similarity levels, the per-query batches) are dropped, and
        so are the similarities when a block some arm can now see was not
        multiplied (its products are then computed)."""
        same = (dead is None and self.dead is None) or (
            dead is not None and self.dead is not None and np.array_equal(dead, self.dead))
        self.dead = dead
        if same:
            return
        drop = set(_DEAD_KEYS)
        if self.multiplied is not None:
            more = self.open_blocks() & ~self.multiplied
            if more.any():
                self.multiplied = self.multiplied | more
                self._dots = None  # the products again, with those blocks
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
        sub.idx = self.idx[cols]
        sub.valid = self.valid[:, cols]
        sub._dots = self.dots[:, cols]
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
            sub.valid, sub._dots = self.valid[r], self.dots[r]
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
