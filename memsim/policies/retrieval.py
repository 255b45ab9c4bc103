"""Retrievers: the similarity between a query and each note.

A retriever's ``prefilter = M`` keeps each query's M nearest notes as the
only candidates. The exact retrievers take the exact top M; :class:`HNSW`
takes what an approximate index (hnswlib) returns, so that an ANN index's
recall loss becomes a simulated effect. It overrides
``Retriever.prefilter_mask(ctx, mask)`` (by default the exact nearest M),
which the engine then calls instead of its own exact top-M search.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from memsim.core.errors import ConfigError
from memsim.core.params import Interval

from .base import Retriever, ScoringContext, register

__all__ = ["Cosine", "InverseSquaredL2", "HNSW", "GrowingIndex"]


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

    The index is maintained, as a store's is: one index per stream (a
    replay's notes) and per build parameters (``M``, ``ef_construction``,
    ``seed``), shared by every arm that uses them, into which the notes are
    inserted once, one by one, in creation order (ties by ``note_id``),
    single-threaded, the level generator seeded by ``seed``. A batch of
    queries inserts the notes created since the last one, up to the last
    note the batch sees (``hnswlib`` ``add_items``). Such a build is
    deterministic and the graph after n inserts is the graph a build of
    the same n notes in the same order gives: the candidates are a function
    of the notes that exist, never of the batches, arms or earlier replays
    (a replay that starts again with fewer notes starts a new index). Notes
    that are not live for a query (created later in the batch's window,
    expired, evicted by the arm, of another store) stay in the graph and
    are filtered out of the search's results, as hnswlib's ``mark_deleted``
    elements are (a search filter; unlike ``mark_deleted``, they remain
    neighbours of later inserts, so that one graph serves arms whose
    evictions differ). A query with at most ``prefilter`` live notes gets
    all of them; one whose filtered search cannot reach ``prefilter`` live
    notes (a rare disconnected region) falls back to its exact top M. A
    context without the stream's notes (an :class:`ArrayContext`) gets an
    index of its own notes, built the same way.

    The engine measures what the index loses: on a seeded sample of up to
    200 queries per replay it also takes the exact nearest M and reports
    their overlap (``prefilter_overlap`` in ``arms.csv``).

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

    def new_index(self, dim: int, capacity: int) -> GrowingIndex:
        """An empty index of this retriever's build parameters."""
        return GrowingIndex(dim=dim, capacity=capacity, M=self.M,
                            ef_construction=self.ef_construction, seed=self.seed)

    def dot_scale(self, norm2: np.ndarray) -> np.ndarray:
        return _inverse_norm(norm2)

    def index(self, ctx: ScoringContext) -> tuple[GrowingIndex, np.ndarray]:
        """The index holding every note of ``ctx``, and each column's label
        in it (L,): the stream's maintained index when ``ctx`` offers the
        stream's notes (``ctx.notes``, rows ``ctx.idx``), else one built
        here over ``ctx``'s notes."""
        notes = getattr(ctx, "notes", None)
        if notes is not None and hasattr(notes, "emb") and hasattr(notes, "created_at"):
            return _stream_index(self, notes, np.asarray(ctx.idx))
        vec = np.asarray(ctx.note_vectors, dtype=np.float32)
        order = np.argsort(-np.asarray(ctx.age_created)[0], kind="stable")
        index = self.new_index(vec.shape[1], len(vec))
        index.grow(vec[order])
        return index, _inverse(order)

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
        count = np.count_nonzero(allowed, axis=1)  # one pass over the (Q, L) cells
        small = count <= m
        keep = np.zeros((q, n), dtype=bool)
        keep[small] = allowed[small]
        rows = np.flatnonzero(~small)
        if not len(rows):
            return keep
        index, label = self.index(ctx)
        size = index.count
        index.index.set_ef(self.ef)
        # the column of each label (-1: a note of the graph ctx does not hold)
        same = n == size and bool((label == np.arange(n)).all())
        column = np.arange(n) if same else np.full(size, -1, dtype=np.int64)
        if not same:
            column[label] = np.arange(n)
        qv = np.ascontiguousarray(np.asarray(ctx.query_vectors, dtype=np.float32))
        every = same & (count[rows] == n)
        open_rows = rows[every]  # every note of the graph allowed: one unfiltered call
        if len(open_rows):
            labels, _ = index.index.knn_query(qv[open_rows], k=m, num_threads=1)
            keep[open_rows[:, None], column[labels.astype(np.int64)]] = True
        for r in rows[~every]:
            if same:
                ok = allowed[r].tobytes()
            else:
                by_label = np.zeros(size, dtype=bool)
                by_label[label] = allowed[r]
                ok = by_label.tobytes()
            try:  # the filter reads one byte per label: 1 allowed, 0 not
                labels, _ = index.index.knn_query(qv[r:r + 1], k=m, num_threads=1,
                                                  filter=ok.__getitem__)
                keep[r, column[labels[0].astype(np.int64)]] = True
            except RuntimeError:  # the filtered search found fewer than m
                sim = np.where(allowed[r], _cosine_row(ctx, r), -np.inf)
                top = np.lexsort((np.arange(n), -sim))[:m]
                keep[r, top] = True
        return keep

    def reads_uses(self) -> bool:
        return False


class GrowingIndex:
    """An hnswlib index (cosine space) that notes are only ever added to,
    one by one, single-threaded: it holds the first :attr:`count` notes of
    an insertion order, labelled ``0 .. count - 1`` in that order.

    hnswlib draws each insert's level from a generator seeded by
    ``random_seed`` and links it through a search of the graph so far, so
    the graph after n inserts depends on those n vectors and their order
    only: growing it batch by batch gives the graph a single build of the
    same n gives (``tests/test_ann_index.py`` checks it), whatever the
    capacity (``resize_index`` only reallocates).
    """

    def __init__(self, *, dim: int, capacity: int, M: int, ef_construction: int, seed: int):
        hnswlib = _hnswlib()
        self.index = hnswlib.Index(space="cosine", dim=dim)
        self.index.init_index(max_elements=max(int(capacity), 1),
                              ef_construction=ef_construction, M=M, random_seed=seed)
        #: notes inserted so far
        self.count = 0

    def grow(self, vectors: np.ndarray) -> None:
        """Insert the next notes of the order, ``vectors`` (K, D)."""
        k = len(vectors)
        if not k:
            return
        need = self.count + k
        if need > self.index.get_max_elements():
            # doubling: a stream inserted batch by batch reallocates log(n) times
            self.index.resize_index(max(need, 2 * self.index.get_max_elements()))
        self.index.add_items(np.ascontiguousarray(vectors, dtype=np.float32),
                             np.arange(self.count, need, dtype=np.int64), num_threads=1)
        self.count = need


class _StreamIndexes:
    """A stream's creation order and its maintained indexes (one per build
    parameters)."""

    def __init__(self, created_at: np.ndarray):
        #: note rows in creation order (ties by row, i.e. ``note_id``)
        self.order = np.argsort(np.asarray(created_at), kind="stable")
        #: each note row's place in it: its label in every index
        self.rank = _inverse(self.order)
        self.indexes: dict[tuple, GrowingIndex] = {}


#: the maintained indexes of each stream's notes (the engine's note arrays,
#: one object per replayed stream), dropped with them
_STREAMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _stream_index(retriever: HNSW, notes: Any, idx: np.ndarray
                  ) -> tuple[GrowingIndex, np.ndarray]:
    """The stream's index of ``retriever``'s build parameters, grown to hold
    every note up to the last (in creation order) of the rows ``idx``, and
    the labels of ``idx``."""
    got = _STREAMS.get(notes)
    if got is None:
        got = _STREAMS[notes] = _StreamIndexes(notes.created_at)
    label = got.rank[idx]
    n = int(label.max()) + 1 if len(label) else 0
    key = (retriever.M, retriever.ef_construction, retriever.seed)
    index = got.indexes.get(key)
    if index is None or index.count > n:  # a new replay: its index starts again
        index = got.indexes[key] = retriever.new_index(notes.emb.shape[1], n)
    index.grow(notes.emb[got.order[index.count:n]])
    return index, label


def _inverse(order: np.ndarray) -> np.ndarray:
    """The inverse permutation of ``order``."""
    inv = np.empty(len(order), dtype=np.int64)
    inv[order] = np.arange(len(order))
    return inv


def _cosine_row(ctx: ScoringContext, r: int) -> np.ndarray:
    """Row ``r`` of the cosine similarity (L,)."""
    q = np.asarray(ctx.query_vectors, dtype=np.float32)[r]
    v = np.asarray(ctx.note_vectors, dtype=np.float32)
    qn = float(np.linalg.norm(q))
    vn = np.linalg.norm(v, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((vn > 0) & (qn > 0), (v @ q) / (vn * qn), 0.0)
