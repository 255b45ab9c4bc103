"""Retrievers: the similarity between a query and each note.

A retriever's ``prefilter = M`` keeps each query's M nearest notes as the
only candidates. The exact retrievers take the exact top M; :class:`HNSW`
and :class:`IVF` take what an approximate index (hnswlib, FAISS) returns, so
that an ANN index's recall loss becomes a simulated effect. They override
``Retriever.prefilter_mask(ctx, mask)`` (by default the exact nearest M) and
``Retriever.prefilter_cells`` (the same candidates as cells), which the
engine then calls instead of its own exact top-M search, and compute their
cosine per cell (``Retriever.per_cell``, :func:`pair_dots`), so that the
engine scores their candidates without the batch's whole product.
"""

from __future__ import annotations

import abc
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from memsim.core.errors import ConfigError
from memsim.core.params import Interval

from .base import Retriever, ScoringContext, _allowed, _near_levels, _nearest, register

__all__ = ["Cosine", "InverseSquaredL2", "HNSW", "IVF", "GrowingIndex", "GrowingIVF",
           "pair_cosine", "pair_dots"]


def _inverse_norm(norm2: np.ndarray) -> np.ndarray:
    """``1 / sqrt(norm2)`` as float32, 0 for a zero vector: the cosine's
    factor of a query or a note (:meth:`Retriever.dot_scale`)."""
    with np.errstate(divide="ignore"):
        return np.where(norm2 > 0, 1.0 / np.sqrt(norm2), 0.0).astype(np.float32)


def pair_dots(queries: np.ndarray, notes: np.ndarray) -> np.ndarray:
    """The dot products (Q, K) of ``queries`` (Q, D) and ``notes`` (K, D) in
    float32, each the sum of its pair's products in dimension order
    (``((q0 n0 + q1 n1) + q2 n2) + ...``): a cell's floats depend on its
    query and note alone, not on the others computed with it, as a matrix
    product's do (BLAS tiles and reorders the sums). One elementwise
    multiply-add per dimension over the (Q, K) cells."""
    qv = np.asarray(queries, dtype=np.float32)
    nv = np.asarray(notes, dtype=np.float32)
    q, d = qv.shape
    k = len(nv)
    out = np.zeros((q, k), dtype=np.float32)
    if not (q and k and d):
        return out
    nt = np.ascontiguousarray(nv.T)  # (D, K): each dimension's row read once
    np.multiply(qv[:, :1], nt[0], out=out)
    term = np.empty_like(out)
    for j in range(1, d):
        np.multiply(qv[:, j:j + 1], nt[j], out=term)
        out += term
    return out


def pair_cosine(queries: np.ndarray, notes: np.ndarray, qnorm2: np.ndarray,
                nnorm2: np.ndarray) -> np.ndarray:
    """The cosine (Q, K) of each pair, per cell: :func:`pair_dots` scaled as
    :func:`_cosine` scales the product, ``(dots * 1/|q|) * 1/|n|`` in
    float32 (zero vectors get 0)."""
    return _to_cosine(pair_dots(queries, notes), _inverse_norm(np.asarray(qnorm2)),
                      _inverse_norm(np.asarray(nnorm2)))


def _to_cosine(dots: np.ndarray, q_inv: np.ndarray, n_inv: np.ndarray) -> np.ndarray:
    """``(dots * 1/|q|) * 1/|n|``, in place, from the float32 factors
    (:func:`_inverse_norm`) of the queries and the notes."""
    dots *= q_inv[:, None]
    dots *= n_inv[None, :]
    return dots


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


def _faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:
        raise ConfigError("retriever 'ivf' needs the faiss-cpu package: pip install -e "
                          "'.[ann]' (or pip install 'faiss-cpu>=1.8')") from exc
    return faiss


@dataclass(frozen=True, kw_only=True)
class _IndexRetriever(Retriever):
    """Cosine similarity over the candidates an approximate index returns: the
    search and index upkeep shared by :class:`HNSW` and :class:`IVF`.

    A subclass gives :meth:`new_index` (an empty index of its build
    parameters: ``count``, ``ready``, ``grow``, ``search_one``,
    ``search_open``) and :meth:`build_key` (the parameters two arms must
    share to share an index).
    """

    per_cell: ClassVar[bool] = True
    prefilter: int = 100
    _constraints: ClassVar[dict] = {"prefilter": Interval(1, None, integer=True)}

    def similarity(self, ctx: ScoringContext) -> np.ndarray:
        """The cosine of each pair, computed per cell (:func:`pair_cosine`):
        an arm scores only its candidates' cells, so the engine computes
        those alone instead of the batch's whole product."""
        return pair_cosine(ctx.query_vectors, ctx.note_vectors, ctx.qnorm2, ctx.nnorm2)

    def reads_uses(self) -> bool:
        return False

    def nearest(self, ctx: ScoringContext, allowed: np.ndarray, rows: np.ndarray
                ) -> np.ndarray:
        """The exact nearest M (:meth:`Retriever.nearest`: the same notes),
        without the similarity of every cell: a float32 matrix product of
        the rows with the notes finds the cells whose cosine may reach the
        M-th highest (:func:`_reachable`), and only those are computed per
        cell and ranked."""
        return self._exact(ctx, allowed, rows, levels=False)

    def near_levels(self, ctx: ScoringContext, allowed: np.ndarray, rows: np.ndarray
                    ) -> np.ndarray:
        """:meth:`Retriever.near_levels` as :meth:`nearest` finds the
        nearest."""
        return self._exact(ctx, allowed, rows, levels=True)

    def _exact(self, ctx: ScoringContext, allowed: np.ndarray, rows: np.ndarray,
               levels: bool) -> np.ndarray:
        allowed = np.asarray(allowed[rows], dtype=bool)
        keep = np.zeros(allowed.shape, dtype=np.int8 if levels else bool)
        if not keep.size:
            return keep
        qv = np.asarray(ctx.query_vectors, dtype=np.float32)[rows]
        nv = np.asarray(ctx.note_vectors, dtype=np.float32)
        qn2, nn2 = np.asarray(ctx.qnorm2)[rows], np.asarray(ctx.nnorm2)
        approx = _to_cosine(qv @ nv.T, _inverse_norm(qn2), _note_inverse_norms(ctx, nn2))
        near = _reachable(approx, allowed, self.prefilter, nv.shape[1])
        rank = _near_levels if levels else _nearest
        for i in range(len(keep)):
            cols = np.flatnonzero(near[i])
            sim = pair_cosine(qv[i:i + 1], nv[cols], qn2[i:i + 1], nn2[cols])
            # the candidates in column order: ties still go to the lower column
            keep[i, cols] = rank(sim, self.prefilter)[0]
        return keep

    @abc.abstractmethod
    def new_index(self, dim: int, capacity: int) -> Any:
        """An empty index of this retriever's build parameters."""

    @abc.abstractmethod
    def build_key(self) -> tuple:
        """The build parameters: arms whose keys are equal share an index."""

    def index(self, ctx: ScoringContext) -> tuple[Any, np.ndarray]:
        """The index holding every note of ``ctx``, and each column's label
        in it (L,): the stream's maintained index when ``ctx`` offers the
        stream's notes (``ctx.notes``, rows ``ctx.idx``), else one built
        here over ``ctx``'s notes."""
        if _offers_stream(ctx):
            return _stream_index(self, ctx.notes, np.asarray(ctx.idx))
        vec = np.asarray(ctx.note_vectors, dtype=np.float32)
        order = np.argsort(-np.asarray(ctx.age_created)[0], kind="stable")
        index = self.new_index(vec.shape[1], len(vec))
        index.grow(vec[order])
        return index, _inverse(order)

    def prefilter_mask(self, ctx: ScoringContext, mask: np.ndarray | None = None
                       ) -> np.ndarray:
        """(Q, L) bool: the notes the index returns for each query, among the
        allowed ones (``mask``, default ``ctx.live``, else all)."""
        allowed = _allowed(ctx, mask)
        keep = np.zeros(allowed.shape, dtype=bool)
        keep[self.prefilter_cells(ctx, allowed)] = True
        return keep

    def prefilter_cells(self, ctx: ScoringContext, allowed: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`prefilter_mask`'s cells, (query rows, note columns), each
        row's columns ascending, the rows in order: the index's answers
        without a (Q, L) mask of them."""
        q, n = allowed.shape
        m = self.prefilter
        # row by row: np.count_nonzero over an axis is a sum, several times slower
        count = np.array([np.count_nonzero(row) for row in allowed], dtype=np.int64)
        small = count <= m
        found: list[np.ndarray | None] = [None] * q
        for r in np.flatnonzero(small).tolist():  # at most m allowed: every one
            found[r] = np.flatnonzero(allowed[r])
        rows = np.flatnonzero(~small)
        if len(rows):
            index, label = self.index(ctx)
            if not index.searchable(int(label.max()) + 1 if len(label) else 0):
                # no index yet (too few notes to train one): exact search
                exact = self.nearest(ctx, allowed, rows)
                for k, r in enumerate(rows.tolist()):
                    found[r] = np.flatnonzero(exact[k])
            else:
                self._search(ctx, allowed, rows, count, index, label, found)
        cols = [np.zeros(0, dtype=np.int64) if f is None else f for f in found]
        qi = np.repeat(np.arange(q), [len(c) for c in cols])
        return qi, (np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64))

    def _search(self, ctx: ScoringContext, allowed: np.ndarray, rows: np.ndarray,
                count: np.ndarray, index: Any, label: np.ndarray, found: list) -> None:
        """The columns (ascending) the index returns for each query of
        ``rows``, into ``found``."""
        q, n = allowed.shape
        m = self.prefilter
        size = index.count
        # ctx's columns are the index's first n labels, in order (a store in
        # creation order; the index may hold later notes, which no query of
        # ctx sees: a filter of n labels leaves them out)
        prefix = bool((label == np.arange(n)).all())
        # the column of each label (-1: a note of the index ctx does not hold)
        column = np.arange(n) if prefix else np.full(size, -1, dtype=np.int64)
        if not prefix:
            column[label] = np.arange(n)
        qv = np.ascontiguousarray(np.asarray(ctx.query_vectors, dtype=np.float32))
        every = prefix & (n == size) & (count[rows] == n)
        open_rows = rows[every]  # every note of the index allowed: no filter
        searched: list[tuple[int, np.ndarray | None]] = []
        if len(open_rows):
            searched += zip(open_rows.tolist(), index.search_open(qv[open_rows], m, self))
        for r in rows[~every].tolist():
            if prefix:
                ok = allowed[r]
            else:
                ok = np.zeros(size, dtype=bool)
                ok[label] = allowed[r]
            searched.append((r, index.search_one(qv[r], m, self, ok)))
        for r, labels in searched:
            if labels is None:  # the search could not return m notes: the exact top m
                found[r] = np.flatnonzero(self.nearest(ctx, allowed, np.array([r]))[0])
            else:
                found[r] = np.sort(column[labels[labels >= 0]])


@register
@dataclass(frozen=True, kw_only=True)
class HNSW(_IndexRetriever):
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
    of the notes inserted by the end of the query's batch, never of the
    arms or earlier replays (a replay that starts again with fewer notes
    starts a new index). Notes created later in the same batch are in the
    graph when an earlier query of it searches (filtered out of its
    results, they still shape the links), so a query's candidates can
    depend on the tick's length: on one 120-query stream 37 queries got
    other candidates than from a graph of exactly their notes at
    ``tick_days = 1``, none at ``0.01`` (a tick short enough to hold one
    query makes the graph per query). Notes
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
    Inserting costs a graph search per note (about 0.2-0.3 ms at 100k-400k
    notes): where notes arrive as often as queries, :class:`IVF` is the
    cheaper index to keep.

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
    ef: int = 50
    M: int = 16
    ef_construction: int = 200
    seed: int = 100
    _constraints: ClassVar[dict] = {
        "ef": Interval(1, None, integer=True),
        "M": Interval(2, None, integer=True),
        "ef_construction": Interval(1, None, integer=True),
        "seed": Interval(0, 2**32 - 1, integer=True),
    }

    def new_index(self, dim: int, capacity: int) -> GrowingIndex:
        """An empty index of this retriever's build parameters."""
        return GrowingIndex(dim=dim, capacity=capacity, M=self.M,
                            ef_construction=self.ef_construction, seed=self.seed)

    def build_key(self) -> tuple:
        return (self.M, self.ef_construction, self.seed)


@register
@dataclass(frozen=True, kw_only=True)
class IVF(_IndexRetriever):
    """Cosine similarity over the candidates an inverted-file index returns.

    The index of FAISS's ``IndexIVFFlat`` and pgvector's ``ivfflat``: the
    notes' unit vectors are split into ``nlist`` lists by their nearest
    centroid (spherical k-means, inner product), and a query scans only the
    ``nprobe`` lists whose centroids are nearest to it, keeping the
    ``prefilter`` notes of highest cosine among their live notes. Notes it
    does not probe are never candidates: the recall loss of the index. A
    query whose probed lists hold fewer than ``prefilter`` live notes gets
    those only, as an IVF scan does (pgvector before its iterative scans); a
    query with at most ``prefilter`` live notes gets all of them.

    The index is maintained, as a store's is, and costs little to keep:
    one index per stream and build parameters (``nlist``, ``train_size``,
    ``seed``), shared by every arm that uses them. Until the store holds
    ``train_size`` notes there is no index and the candidates are the exact
    nearest ``prefilter`` (a table scanned without one); then the centroids
    are trained once, on those first ``train_size`` notes in creation order
    (FAISS's k-means, seeded, ten iterations, one thread), and every note is
    added to its list as it arrives (a note's list never changes, as in a
    deployed index whose centroids are not retrained). Which of the two is
    decided per batch: a batch whose last query sees ``train_size`` notes
    searches the index for its earlier queries too, on centroids trained
    partly on notes created after them (a short ``tick_days`` makes it per
    query). Notes are added in
    creation order (ties by ``note_id``), in parts too small for FAISS's
    matrix product, and each query is searched alone, so that each note's
    list and each query's probes are computed from it alone (a matrix
    product's last bits may depend on the batch): once the index is
    trained, the candidates are a function of the notes that exist, never
    of the batches, arms or earlier replays.
    Notes a query cannot see (created later, expired, evicted by its arm)
    stay in their lists and are filtered out of its scan (an ``IDSelector``).
    So a replay of the same stream that starts again (a sweep's next trial,
    through a :class:`~memsim.engine.ReplayCache`) keeps the index as it is:
    its later notes are not live yet, and the store searches it once it
    holds ``train_size`` notes, as a fresh one would.

    The engine measures what the index loses: on a seeded sample of up to
    200 queries per replay it also takes the exact nearest M and reports
    their overlap (``prefilter_overlap`` in ``arms.csv``). With ``nprobe =
    nlist`` every list is scanned and the candidates are the exact nearest M
    (up to the last bits of FAISS's inner products against numpy's cosine).

    Why FAISS: the reference implementation of IVF indexes (k-means
    training, inverted lists, filtered scans) with a small Python API.
    Adding a note costs one comparison with each centroid (6-8 us measured
    at 200k-1M notes), where an HNSW insert is a graph search (0.2-0.3 ms):
    the index to keep where notes arrive as often as queries. Needs the
    ``ann`` extra (``pip install -e ".[ann]"``); without it the retriever
    validates and computes its similarity, and a run raises a ConfigError
    naming the extra.

    Parameters
    ----------
    prefilter : int >= 1
        Candidates per query; default 100.
    nlist : int >= 1
        Lists (centroids); default 1024 (FAISS's advice is 4-16 sqrt(N)).
    nprobe : int >= 1
        Lists scanned per query (at most ``nlist``); default 32.
    train_size : int >= nlist
        Notes the centroids are trained on: the first ``train_size``, once
        the store holds them; default 40,000 (about 39 per list, FAISS's
        minimum).
    seed : int >= 0
        The k-means seed; default 1234 (FAISS's).
    """

    name: ClassVar[str] = "ivf"
    nlist: int = 1024
    nprobe: int = 32
    train_size: int = 40_000
    seed: int = 1234
    _constraints: ClassVar[dict] = {
        "nlist": Interval(1, None, integer=True),
        "nprobe": Interval(1, None, integer=True),
        "train_size": Interval(1, None, integer=True),
        "seed": Interval(0, 2**31 - 1, integer=True),
    }

    def _check(self) -> None:
        if self.nprobe > self.nlist:
            self._fail("nprobe", f"at most nlist ({self.nlist})", self.nprobe)
        if self.train_size < self.nlist:
            self._fail("train_size", f"at least nlist ({self.nlist})", self.train_size)

    def new_index(self, dim: int, capacity: int) -> GrowingIVF:
        """An empty index of this retriever's build parameters."""
        return GrowingIVF(dim=dim, nlist=self.nlist, train_size=self.train_size,
                          seed=self.seed)

    def build_key(self) -> tuple:
        return (self.nlist, self.train_size, self.seed)


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

    #: searched from its first note
    ready = True
    #: a graph holding later notes is another graph (they are neighbours of
    #: earlier ones): a replay that starts again starts a new index
    serves_prefix = False

    def searchable(self, n: int) -> bool:
        """Whether a store of the first ``n`` notes is searched through the
        index: always (a graph answers from its first note)."""
        return True

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

    def search_open(self, queries: np.ndarray, k: int, r: HNSW) -> list[np.ndarray | None]:
        """The labels (k,) of each query's k nearest notes, every note
        allowed; None for a query whose search cannot return k (a graph
        built with a tiny ``M`` and ``ef``), which then gets the exact top k
        as a filtered search's would."""
        self.index.set_ef(r.ef)
        try:
            return list(self.index.knn_query(queries, k=k, num_threads=1)[0].astype(np.int64))
        except RuntimeError:  # some query found fewer than k: each one on its own
            return [self._one(q, k) for q in queries]

    def _one(self, query: np.ndarray, k: int) -> np.ndarray | None:
        try:
            return self.index.knn_query(query[None, :], k=k, num_threads=1)[0][0].astype(np.int64)
        except RuntimeError:
            return None

    def search_one(self, query: np.ndarray, k: int, r: HNSW, ok: np.ndarray
                   ) -> np.ndarray | None:
        """The labels (k,) of the query's k nearest allowed notes (``ok`` by
        label), or None when the filtered search cannot find k."""
        self.index.set_ef(r.ef)
        allowed = ok.tobytes()
        try:  # the filter reads one byte per label: 1 allowed, 0 not
            labels, _ = self.index.knn_query(query[None, :], k=k, num_threads=1,
                                             filter=allowed.__getitem__)
        except RuntimeError:  # the filtered search found fewer than k
            return None
        return labels[0].astype(np.int64)


@contextmanager
def _one_thread(faiss: Any):
    """FAISS on one OpenMP thread (its k-means and scans are then the same
    floats on every machine), restoring the process's setting after."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def _unit(vectors: np.ndarray) -> np.ndarray:
    """Each row divided by its norm, float32 (a zero row stays zero); each
    row's floats computed from it alone."""
    v = np.asarray(vectors, dtype=np.float32)
    return v * _inverse_norm(np.einsum("ij,ij->i", v, v))[:, None]


class GrowingIVF:
    """A FAISS ``IndexIVFFlat`` (inner product over unit vectors) that notes
    are only ever added to, in an insertion order, labelled ``0 .. count - 1``
    in that order; trained on the first ``train_size`` notes once it holds
    them (:attr:`ready`), before which it only keeps them.

    Notes are added at most :attr:`chunk` at a time and queries searched one
    by one: FAISS assigns fewer than ``distance_compute_blas_threshold``
    vectors (20 in older releases, 128,000 in 1.15) to their centroids with
    one inner product per pair, whose floats depend on that pair only, not
    on a matrix product's blocking, so a note's list and a query's probes do
    not depend on how the notes were batched (``tests/test_ann_index.py``).
    """

    def __init__(self, *, dim: int, nlist: int, train_size: int, seed: int):
        self.faiss = _faiss()
        self.dim, self.nlist, self.train_size, self.seed = dim, nlist, train_size, seed
        #: notes held so far
        self.count = 0
        self.index: Any = None
        self._held: list[np.ndarray] = []
        self.chunk = max(1, int(self.faiss.cvar.distance_compute_blas_threshold) - 1)

    #: an index holding later notes answers for the first n as one built on
    #: them: a note's list depends on the centroids and that note alone, and
    #: a scan skips the notes its filter leaves out (later notes are not
    #: live), so a replay that starts again keeps the index
    serves_prefix = True

    @property
    def ready(self) -> bool:
        """Whether the centroids are trained (the index can be searched)."""
        return self.index is not None

    def searchable(self, n: int) -> bool:
        """Whether a store of the first ``n`` notes is searched through the
        index: once it holds ``train_size`` notes (before, a store has no
        index and is scanned exactly)."""
        return self.ready and n >= self.train_size

    def grow(self, vectors: np.ndarray) -> None:
        """Add the next notes of the order, ``vectors`` (K, D)."""
        if not len(vectors):
            return
        unit = _unit(vectors)
        start, self.count = self.count, self.count + len(unit)
        if self.index is None:
            self._held.append(unit)
            if self.count < self.train_size:
                return
            unit, start, self._held = np.concatenate(self._held), 0, []
            self._train(unit[:self.train_size])
        ids = np.arange(start, start + len(unit), dtype=np.int64)
        with _one_thread(self.faiss):
            for i in range(0, len(unit), self.chunk):
                self.index.add_with_ids(unit[i:i + self.chunk], ids[i:i + self.chunk])

    def _train(self, sample: np.ndarray) -> None:
        faiss = self.faiss
        quantizer = faiss.IndexFlatIP(self.dim)
        index = faiss.IndexIVFFlat(quantizer, self.dim, self.nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = self.seed
        index.cp.spherical = True  # unit centroids: the nearest by cosine
        index.cp.niter = 10
        # the advice of about 39 notes per list is the user's (train_size):
        # no warning printed for fewer
        index.cp.min_points_per_centroid = 1
        with _one_thread(faiss):
            index.train(np.ascontiguousarray(sample))
        self._quantizer, self.index = quantizer, index  # the index reads the quantizer

    def search_open(self, queries: np.ndarray, k: int, r: IVF) -> list[np.ndarray]:
        """The labels of each query's k nearest notes in its probed lists
        (-1 padded), every note allowed."""
        return [self.search_one(q, k, r, None) for q in queries]

    def search_one(self, query: np.ndarray, k: int, r: IVF, ok: np.ndarray | None
                   ) -> np.ndarray:
        """The labels (k,) of the query's k nearest allowed notes (``ok`` by
        label, the labels past its length left out; None: all) in its
        ``r.nprobe`` nearest lists, -1 where they hold fewer."""
        faiss = self.faiss
        if ok is None:
            params = faiss.SearchParametersIVF(nprobe=r.nprobe)
        else:
            bits = np.packbits(ok, bitorder="little")  # bit i of byte i >> 3: label i
            sel = faiss.IDSelectorBitmap(len(bits), faiss.swig_ptr(bits))
            params = faiss.SearchParametersIVF(sel=sel, nprobe=r.nprobe)
        with _one_thread(faiss):
            _, labels = self.index.search(np.ascontiguousarray(query[None, :]), k,
                                          params=params)
        return labels[0]


class _StreamIndexes:
    """A stream's creation order and its maintained indexes (one per
    retriever kind and build parameters)."""

    def __init__(self, created_at: np.ndarray):
        #: note rows in creation order (ties by row, i.e. ``note_id``)
        self.order = np.argsort(np.asarray(created_at), kind="stable")
        #: each note row's place in it: its label in every index
        self.rank = _inverse(self.order)
        self.indexes: dict[tuple, Any] = {}


#: the maintained indexes of each stream's notes (the engine's note arrays,
#: one object per replayed stream), dropped with them
_STREAMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _offers_stream(ctx: ScoringContext) -> bool:
    """Whether ``ctx`` offers the stream's notes (``ctx.notes``, the
    engine's note arrays, at rows ``ctx.idx``)."""
    notes = getattr(ctx, "notes", None)
    return notes is not None and hasattr(notes, "emb") and hasattr(notes, "created_at")


def _note_inverse_norms(ctx: ScoringContext, nnorm2: np.ndarray) -> np.ndarray:
    """``_inverse_norm(nnorm2)`` of ``ctx``'s notes: for the stream's notes,
    the cosine's note factors the engine computes once per replay
    (``NoteArrays.dot_scale``: elementwise, the same floats), read at
    ``ctx.idx`` (a slice when the rows are consecutive); computed here for
    another context."""
    idx = np.asarray(getattr(ctx, "idx", ()))
    if not (_offers_stream(ctx) and hasattr(ctx.notes, "dot_scale")) or idx.ndim != 1 \
            or not len(idx):
        return _inverse_norm(nnorm2)
    every = ctx.notes.dot_scale(Cosine())
    lo = int(idx[0])
    if int(idx[-1]) - lo + 1 == len(idx):  # consecutive rows: a view
        return every[lo:lo + len(idx)]
    return every[idx]


def _stream_index(retriever: _IndexRetriever, notes: Any, idx: np.ndarray
                  ) -> tuple[Any, np.ndarray]:
    """The stream's index of ``retriever``'s kind and build parameters,
    grown to hold every note up to the last (in creation order) of the rows
    ``idx``, and the labels of ``idx``."""
    got = _STREAMS.get(notes)
    if got is None:
        got = _STREAMS[notes] = _StreamIndexes(notes.created_at)
    label = got.rank[idx]
    n = int(label.max()) + 1 if len(label) else 0
    key = (retriever.name, *retriever.build_key())
    index = got.indexes.get(key)
    if index is None or (index.count > n and not index.serves_prefix):
        # a new replay of a graph index: it starts again
        index = got.indexes[key] = retriever.new_index(notes.emb.shape[1], n)
    index.grow(notes.emb[got.order[index.count:n]])
    return index, label


def _inverse(order: np.ndarray) -> np.ndarray:
    """The inverse permutation of ``order``."""
    inv = np.empty(len(order), dtype=np.int64)
    inv[order] = np.arange(len(order))
    return inv


def _reachable(approx: np.ndarray, allowed: np.ndarray, m: int, dim: int) -> np.ndarray:
    """(R, L) bool: the allowed cells whose per-cell cosine may be among
    their row's ``m`` highest, from ``approx``, the same cosines through a
    matrix product.

    Two float32 dot products of the same ``dim`` terms, summed in any order,
    differ by at most ``2 gamma |q| |n|`` (``gamma = dim u / (1 - dim u)``,
    ``u = 2**-24``; Higham, *Accuracy and Stability of Numerical
    Algorithms*, 3.1), so two cosines scaled by the same factors by at most
    ``delta = 2 gamma + 6u`` (the two float32 scalings). With ``kth`` the
    row's ``m``-th highest approximate value, ``m`` allowed notes have a
    cosine of at least ``kth - delta``; a note whose approximate value is
    below ``kth - 2 delta`` has a cosine below that, and is not among the
    ``m`` highest. Kept: every other allowed cell (non-finite ones too, left
    to the exact ranking); the bound is doubled for margin."""
    u = 2.0 ** -24
    gamma = dim * u / (1 - dim * u)
    delta = 2 * gamma + 6 * u
    key = np.where(allowed & ~np.isnan(approx), approx, -np.inf)
    n = key.shape[1]
    if m >= n:
        return allowed.copy()
    kth = np.partition(key, n - m, axis=1)[:, n - m].astype(np.float64)
    # the threshold in float64, then the float32 at or below it
    low = (kth - 4 * delta).astype(key.dtype)
    low = np.where(low > kth - 4 * delta, np.nextafter(low, -np.inf), low)[:, None]
    return allowed & ((key >= low) | ~np.isfinite(approx))
