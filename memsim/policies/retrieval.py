"""Retrievers: the similarity between a query and each note.

A retriever's ``prefilter = M`` keeps each query's M nearest notes as the
only candidates. The exact retrievers take the exact top M; :class:`HNSW`
takes what an approximate index (hnswlib) returns, so that an ANN index's
recall loss becomes a simulated effect. It overrides
``Retriever.prefilter_mask(ctx, mask)`` (by default the exact nearest M),
which the engine then calls instead of its own exact top-M search.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from memsim.errors import ConfigError
from memsim.params import Interval

from .base import Retriever, ScoringContext, register

__all__ = ["Cosine", "InverseSquaredL2", "HNSW"]


def _inverse_norm(norm2: np.ndarray) -> np.ndarray:
    """``1 / sqrt(norm2)`` as float32, 0 for a zero vector: the cosine's
    factor of a query or a note (:meth:`Retriever.dot_scale`)."""
    with np.errstate(divide="ignore"):
        return np.where(norm2 > 0, 1.0 / np.sqrt(norm2), 0.0).astype(np.float32)


def _cosine(ctx: ScoringContext) -> np.ndarray:
    """``q . n / (|q| |n|)`` (Q, L) in float32; zero vectors get 0."""
    # scale rows and columns instead of dividing a (Q, L) matrix
    sim = ctx.dots * _inverse_norm(ctx.qnorm2)[:, None]
    sim *= _inverse_norm(ctx.nnorm2)[None, :]
    return sim


@register
@dataclass(frozen=True, kw_only=True)
class Cosine(Retriever):
    """Cosine similarity, ``q . n / (|q| |n|)``, in [-1, 1].

    The usual dense-retriever score; zero vectors get similarity 0.
    """

    name: ClassVar[str] = "cosine"

    def similarity(self, ctx: ScoringContext) -> np.ndarray:
        return _cosine(ctx)

    def dot_scale(self, norm2: np.ndarray) -> np.ndarray:
        return _inverse_norm(norm2)

    def reads_uses(self) -> bool:
        return False


@register
@dataclass(frozen=True, kw_only=True)
class InverseSquaredL2(Retriever):
    """Feather DB's similarity ``1 / (1 + d)``, ``d`` the **squared** L2 distance.

    ``d = |q|^2 + |n|^2 - 2 q . n`` (Feather DB ``include/scoring.h``).

    Computed in float32, as the engine does; ``d`` is clamped at 0 against
    rounding.
    """

    name: ClassVar[str] = "inverse-sq-l2"

    def similarity(self, ctx: ScoringContext) -> np.ndarray:
        d = ctx.qnorm2[:, None].astype(np.float32) + ctx.nnorm2[None, :].astype(np.float32)
        d -= np.float32(2.0) * np.asarray(ctx.dots, dtype=np.float32)
        np.maximum(d, np.float32(0.0), out=d)
        # 1 / (1 + d), in place: the same float32 operations, no temporaries
        d += np.float32(1.0)
        return np.divide(np.float32(1.0), d, out=d)

    def reads_uses(self) -> bool:
        return False


def _hnswlib() -> Any:
    try:
        import hnswlib
    except ImportError as exc:
        raise ConfigError("retriever 'hnsw' needs the hnswlib package: pip install -e "
                          "'.[ann]' (or pip install 'hnswlib>=0.8')") from exc
    return hnswlib


@register
@dataclass(frozen=True, kw_only=True)
class HNSW(Retriever):
    """Cosine similarity over the candidates an approximate HNSW index returns.

    Scores are the :class:`Cosine` retriever's; the candidate set is what an
    hnswlib index (cosine space) returns for ``k = prefilter`` at beam width
    ``ef``: each query's ``prefilter`` approximate nearest notes among those
    live at its time. At a large ``ef`` (>= the number of notes) the search
    is exhaustive and the candidates are the exact top M, as ``cosine`` with
    the same ``prefilter``; at a small one some true neighbours are missed,
    as in a real deployment (Feather DB's default ``ef = 50`` returns another
    top 10 on 8-25% of queries at 5k-20k notes).

    The index. Each batch of queries gets an index over the notes that exist
    by its last query, inserted one by one in creation order (ties by
    ``note_id``), single-threaded, with the level generator seeded by
    ``seed``: the build is deterministic, and the graph is the one an
    incremental index would hold after the same inserts. Rebuilding per
    batch costs more than keeping one incremental index but has the same
    recall behaviour. Notes that are not live for a query (created later in
    the batch's window, expired, evicted, of another store) stay in the graph
    and are filtered out of the results, as an index's deleted elements are
    (hnswlib's ``mark_deleted``, a search filter). The index depends on the
    batch only, so every arm with the same index parameters shares it. A
    query with at most ``prefilter`` live notes gets all of them; one whose
    filtered search cannot reach ``prefilter`` live notes (a rare
    disconnected region) falls back to its exact top M.

    Why hnswlib: a small, single-purpose library (the reference
    implementation of HNSW) with a simple API and deterministic builds given
    a seed. FAISS is large and HNSW is one of its many indexes; USearch is
    fast but its builds are multi-threaded by default and it offers less
    control over a reproducible insertion order. Needs the ``ann`` extra
    (``pip install -e ".[ann]"``); without it the retriever validates and
    computes its similarity, and a run raises a ConfigError naming the extra.

    Parameters
    ----------
    prefilter : int >= 1
        Candidates per query (the index's ``k``); default 100.
    ef : int >= 1
        Search beam width (hnswlib uses ``max(ef, k)``); default 50.
    M : int >= 2
        Graph degree (links per node); default 16.
    ef_construction : int >= 1
        Beam width while building; default 200.
    seed : int >= 0
        The index's ``random_seed`` (its level generator); default 100.
    """

    name: ClassVar[str] = "hnsw"
    prefilter: int = 100
    ef: int = 50
    M: int = 16
    ef_construction: int = 200
    seed: int = 100
    _constraints: ClassVar[dict] = {
        "prefilter": Interval(1, None, integer=True),
        "ef": Interval(1, None, integer=True),
        "M": Interval(2, None, integer=True),
        "ef_construction": Interval(1, None, integer=True),
        "seed": Interval(0, 2**32 - 1, integer=True),
    }

    def similarity(self, ctx: ScoringContext) -> np.ndarray:
        return _cosine(ctx)

    def dot_scale(self, norm2: np.ndarray) -> np.ndarray:
        return _inverse_norm(norm2)

    def _build(self, ctx: ScoringContext) -> Any:
        """An index over every note of ``ctx`` (label = column), inserted in
        creation order."""
        hnswlib = _hnswlib()
        vec = np.asarray(ctx.note_vectors, dtype=np.float32)
        n, dim = vec.shape
        order = np.argsort(-np.asarray(ctx.age_created)[0], kind="stable")
        index = hnswlib.Index(space="cosine", dim=dim)
        index.init_index(max_elements=max(n, 1), ef_construction=self.ef_construction,
                         M=self.M, random_seed=self.seed)
        index.add_items(np.ascontiguousarray(vec[order]), order.astype(np.int64),
                        num_threads=1)
        return index

    def index(self, ctx: ScoringContext) -> Any:
        """The batch's index, shared by every arm when the context can share."""
        shared = getattr(ctx, "shared", None)
        if shared is None:
            return self._build(ctx)
        key = ("hnsw-index", self.M, self.ef_construction, self.seed)
        return shared(key, lambda: self._build(ctx))

    def prefilter_mask(self, ctx: ScoringContext, mask: np.ndarray | None = None
                       ) -> np.ndarray:
        """(Q, L) bool: the notes the index returns for each query, among the
        allowed ones (``mask``, default ``ctx.live``, else all)."""
        q, n = len(ctx.t), len(ctx.idx)
        if mask is None:
            mask = ctx.live
        allowed = (np.ones((q, n), dtype=bool) if mask is None
                   else np.broadcast_to(np.asarray(mask, dtype=bool), (q, n)))
        m = self.prefilter
        small = allowed.sum(axis=1) <= m
        keep = np.where(small[:, None], allowed, False)
        rows = np.flatnonzero(~small)
        if not len(rows):
            return keep
        index = self.index(ctx)
        index.set_ef(self.ef)
        qv = np.ascontiguousarray(np.asarray(ctx.query_vectors, dtype=np.float32))
        every = allowed[rows].all(axis=1)
        open_rows = rows[every]  # all notes allowed: one unfiltered call
        if len(open_rows):
            labels, _ = index.knn_query(qv[open_rows], k=m, num_threads=1)
            keep[open_rows[:, None], labels.astype(np.int64)] = True
        for r in rows[~every]:
            ok = allowed[r].tolist()
            try:
                labels, _ = index.knn_query(qv[r:r + 1], k=m, num_threads=1,
                                            filter=ok.__getitem__)
                keep[r, labels[0].astype(np.int64)] = True
            except RuntimeError:  # the filtered search found fewer than m
                sim = np.where(allowed[r], _cosine_row(ctx, r), -np.inf)
                top = np.lexsort((np.arange(n), -sim))[:m]
                keep[r, top] = True
        return keep

    def reads_uses(self) -> bool:
        return False


def _cosine_row(ctx: ScoringContext, r: int) -> np.ndarray:
    """Row ``r`` of the cosine similarity (L,)."""
    q = np.asarray(ctx.query_vectors, dtype=np.float32)[r]
    v = np.asarray(ctx.note_vectors, dtype=np.float32)
    qn = float(np.linalg.norm(q))
    vn = np.linalg.norm(v, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((vn > 0) & (qn > 0), (v @ q) / (vn * qn), 0.0)
