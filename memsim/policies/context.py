"""The scoring context: everything a policy component may read.

Components never see the engine. They read one object that satisfies the
:class:`ScoringContext` protocol: a batch of Q queries (or one sweep time)
over L notes, with (Q, L) matrices and (L,) note vectors (or chosen cells of
one, where both are (R, W): see :class:`ScoringContext`). Two classes
implement it:

- the engine's :class:`memsim.engine.BatchContext` (a batch of a stream,
  seen by one arm, with that arm's state);
- :class:`ArrayContext`, built from plain numpy arrays with sensible
  defaults, for notebooks, the curves, the checker (:mod:`memsim.checks.testing`)
  and the engine's retention sweeps.

The integer codes of the ``tier`` and ``memory_type`` columns are defined
here (:data:`TIER_CODES`, :data:`MEMORY_TYPE_CODES`), because both the
engine and the components that key on them must agree on them.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Protocol, runtime_checkable

import numpy as np

from memsim.core.rng import child, seed_sequence

__all__ = ["ScoringContext", "ArrayContext", "NoteAges", "TIER_CODES", "MEMORY_TYPE_CODES",
           "AGE_CLOCKS"]

#: Integer codes for the ``tier`` column (unknown tiers map to "task").
TIER_CODES = {"task": 0, "scratch": 1, "longterm": 2}
#: Integer codes for the ``memory_type`` column (anything else is "other").
MEMORY_TYPE_CODES = {"episodic": 0, "semantic": 1, "procedural": 2, "other": 3}
#: The ages a decay can count from (``Decay.clock``) and the context
#: attribute holding each.
AGE_CLOCKS = {"created": "age_created", "updated": "age_updated",
              "last_access": "age_last_access"}


@runtime_checkable
class ScoringContext(Protocol):
    """What a policy component may read: Q queries over L notes.

    Matrices are (Q, L), note vectors (L,), all read-only (a component never
    mutates them). For a retention sweep Q = 1 and ``t[0]`` is the sweep time.

    **Gathered cells.** The engine also scores chosen cells of a context (a
    retriever prefilter's candidates, the pruned scoring's, the per-query
    feedback's used notes) on a context of R query rows of W notes each:
    ``t`` is (R,), ``idx`` an (R, W) matrix, and every matrix *and every
    note vector* (``tokens``, ``importance``, ``recalls``, ``tier``, ...) is
    (R, W), the note of each cell. Write a component so that note vectors
    broadcast against the similarity's (or the age's) shape: elementwise
    operations and broadcasting (``rel * rec * (1 + w * ctx.importance)``),
    never a reshape or index that assumes a 1-D vector (``.reshape(1, -1)``,
    ``[None, :]``, ``len(ctx.idx)`` as the number of notes; take shapes
    from ``rel`` or the age). Such contexts offer no embeddings
    (``note_vectors``, ``query_vectors``); a component that reads what they
    lack (an AttributeError) is scored by whole rows instead.
    :func:`memsim.checks.testing.check_component` scores each decay,
    stickiness, breadth and (non set-dependent) ranker on such a context.

    Attributes
    ----------
    t : ndarray, shape (Q,)
        Query times (days).
    idx : ndarray of int, shape (L,)
        Row of each note in the store; results over notes follow this order.
    rng : numpy.random.Generator
        The policy's own random stream (a named child of the experiment's
        seed); the only source of randomness a component may use.
    live : ndarray of bool, shape (Q, L), or None
        The notes each query can see (existing, not expired, not evicted,
        inside the retriever's prefilter); None means all of them.
    dots, qnorm2, nnorm2
        Query-note dot products (Q, L), squared query norms (Q,) and squared
        note norms (L,): what a retriever computes its similarity from.
    note_vectors, query_vectors : ndarray, shapes (L, D) and (Q, D)
        The note and query embeddings themselves, for a retriever that
        searches an index of its own (``hnsw``, ``ivf``). The engine's contexts also
        offer ``notes``, the stream's note arrays (``emb``, ``created_at``
        by row; ``idx`` are rows of them), so that such a retriever keeps
        one index per stream instead of building one per batch.
    age_created, age_updated, age_last_access : ndarray, shape (Q, L)
        Days since creation, since the last update, and since the last use
        (creation counting as the first use).
    since_access : ndarray, shape (Q, L)
        Days since the last use; NaN where the note was never used.
    tokens, importance, salience, pinned, memory_type, recalls, tier, distinct_actors
        Note vectors (L,), or (R, W) on gathered cells (see above): size,
        importance, salience, pin flag, memory-type code
        (:data:`MEMORY_TYPE_CODES`), recall count, current tier code
        (:data:`TIER_CODES`), and the number of distinct actors that used it.
    gains : ndarray, shape (Q, L)
        True gains (0 where no qrel). Only a ranker that declares
        ``needs_truth = True`` (the oracle) may read them.
    planted : memsim.data.planted.PlantedModel or None
        The synthetic workload's own model (None when the stream has none),
        and ``note_class`` (L,): each note's planted class (index into
        :data:`memsim.data.workload.CLASS_NAMES`, -1 unknown). Only a ranker that
        declares ``needs_planted = True`` (``bayes``) may read them.
    note_actor, query_actor : ndarray of int, shapes (L,) and (Q,)
        Codes of each note's author and each query's actor (equal codes: the
        same actor).
    logged_rank, logged_score : ndarray, shape (Q, L), or None
        What a production system returned for each query (from a trace's
        ``retrieved`` events): the rank from 1 (inf where not returned) and
        the logged score (NaN where none); None when the stream has none.
        Only a ranker that declares ``needs_logged = True`` (``as-logged``)
        may read them.
    superseded_at : ndarray, shape (L,)
        When a newer note superseded each note (days; NaN = never): ground
        truth (:func:`memsim.evaluation.metrics.supersession_times`). Offered to
        retention sweeps; only a retention that declares ``needs_truth =
        True`` (``invalidation``, a detector model scored against it) may
        read it.

    A context may also offer ``whole`` (not part of the protocol; absent or
    None on a whole context): ``(context, flat)`` when it holds chosen cells
    of a bigger context, ``flat`` their row-major indices into its (Q, L)
    matrices, shaped as this context's matrices. Only a ranker that declares
    ``scores_cells`` reads it (its sets are those of the whole context).

    A context may also offer ``access_order()`` (not part of the protocol):
    the columns (L,) in ascending order of their last use, creation
    counting as the first use (a permutation of ``range(L)``, ties in any
    order), or None. Every row of ``age_last_access`` is then descending
    along it (``t - origin`` rounds monotonically), so a ranker that ranks
    notes by it need not sort each row (``generative-agents-code``).
    """

    t: np.ndarray
    idx: np.ndarray
    rng: np.random.Generator
    live: np.ndarray | None

    @property
    def dots(self) -> np.ndarray: ...

    @property
    def qnorm2(self) -> np.ndarray: ...

    @property
    def nnorm2(self) -> np.ndarray: ...

    @property
    def note_vectors(self) -> np.ndarray: ...

    @property
    def query_vectors(self) -> np.ndarray: ...

    def similarity(self, retriever: Any) -> np.ndarray:
        """The retriever's similarity (Q, L); a context may share or fix it."""

    @property
    def age_created(self) -> np.ndarray: ...

    @property
    def age_updated(self) -> np.ndarray: ...

    @property
    def age_last_access(self) -> np.ndarray: ...

    @property
    def since_access(self) -> np.ndarray: ...

    def age(self, clock: str) -> np.ndarray:
        """The age matrix (Q, L) of ``clock`` (a key of :data:`AGE_CLOCKS`)."""

    def exponential_recency(self, clock: str, floor: Any, rate: Any) -> np.ndarray | None:
        """``floor + (1 - floor) * exp(-rate * age)`` (Q, L) computed a faster
        way, or None where the context does not offer it (the caller then
        evaluates the decay cell by cell)."""

    @property
    def tokens(self) -> np.ndarray: ...

    @property
    def importance(self) -> np.ndarray: ...

    @property
    def salience(self) -> np.ndarray: ...

    @property
    def pinned(self) -> np.ndarray: ...

    @property
    def memory_type(self) -> np.ndarray: ...

    @property
    def recalls(self) -> np.ndarray: ...

    @property
    def tier(self) -> np.ndarray: ...

    @property
    def distinct_actors(self) -> np.ndarray: ...

    @property
    def gains(self) -> np.ndarray: ...

    @property
    def planted(self) -> Any: ...

    @property
    def note_class(self) -> np.ndarray: ...

    @property
    def note_actor(self) -> np.ndarray: ...

    @property
    def query_actor(self) -> np.ndarray: ...

    @property
    def logged_rank(self) -> np.ndarray | None: ...

    @property
    def logged_score(self) -> np.ndarray | None: ...

    @property
    def superseded_at(self) -> np.ndarray: ...


def origin_order(origin: np.ndarray, known: tuple[np.ndarray, np.ndarray] | None = None
                 ) -> np.ndarray | None:
    """A permutation that sorts ``origin`` (L,) ascending (ties in any
    order); None when a value is NaN.

    ``known``: ``(values, order)``, an earlier array of the same length and
    a permutation that sorts it. Only the entries whose value changed since
    are placed again (removed, then inserted where their value goes), the
    others keeping their sorted order: a few passes over the array instead
    of a sort, when few changed (the uses of a query or two)."""
    if np.isnan(origin).any():
        return None
    if known is not None and len(known[0]) == len(origin):
        before, order = known
        moved = np.flatnonzero(origin != before)
        if 8 * len(moved) <= len(origin):
            keep = np.ones(len(origin), dtype=bool)
            keep[moved] = False
            rest = order[keep[order]]
            moved = moved[np.argsort(origin[moved], kind="stable")]
            at = np.searchsorted(origin[rest], origin[moved], side="right")
            return np.insert(rest, at, moved)
    return np.argsort(origin)


def _codes(values: Any, table: dict[str, int], n: int, default: str) -> np.ndarray:
    """Integer codes (L,) from names or codes; unknown names map to "other"
    when the table has it, else to ``default``."""
    if values is None:
        return np.full(n, table[default], dtype=np.int8)
    arr = np.broadcast_to(np.asarray(values), (n,))
    if arr.dtype.kind in "iu":
        return arr.astype(np.int8)
    fallback = table.get("other", table[default])
    # a Python loop over the distinct names only
    names, inverse = np.unique(arr.astype(str), return_inverse=True)
    codes = np.array([table.get(str(v), fallback) for v in names], dtype=np.int8)
    return codes[inverse.reshape(-1)]


def _default_rng() -> np.random.Generator:
    # A named stream of its own, so that an ArrayContext built without a
    # generator is reproducible and never touches numpy's global state.
    return child(seed_sequence(0), "array-context")


class NoteAges:
    """The ages a context derives from its query times ``t`` and its notes'
    times, written once: ``_note_times(name)`` gives the notes' column
    ``name`` shaped to broadcast against ``t[:, None]``."""

    t: np.ndarray

    def _note_times(self, name: str) -> np.ndarray:
        raise NotImplementedError

    @property
    def age_created(self) -> np.ndarray:
        return self.t[:, None] - self._note_times("created_at")

    @property
    def age_updated(self) -> np.ndarray:
        return self.t[:, None] - self._note_times("updated_at")

    @property
    def since_access(self) -> np.ndarray:
        return self.t[:, None] - self._note_times("last_access")

    @property
    def age_last_access(self) -> np.ndarray:
        s = self.since_access
        return np.where(np.isnan(s), self.age_created, s)

    def age(self, clock: str) -> np.ndarray:
        return getattr(self, AGE_CLOCKS[clock])

    def exponential_recency(self, clock: str, floor: Any, rate: Any) -> None:
        """Always None: decays are evaluated cell by cell here."""
        return None


class ArrayContext(NoteAges):
    """A :class:`ScoringContext` built from plain arrays.

    Q queries at times ``t`` over L notes. Note attributes are (L,) arrays
    (scalars broadcast); ``similarity``, ``gains`` and ``live`` are (Q, L).
    Times are in days: ages are ``t - created_at`` etc. Every default
    describes a fresh, never-used note: task tier, episodic, importance and
    salience 1, 100 tokens, not pinned.

    Parameters
    ----------
    t : float or array_like, shape (Q,)
        Query (or sweep) times.
    created_at : array_like, shape (L,)
        Note creation times (``-ages`` when ``t = 0``).
    updated_at : array_like, shape (L,), optional
        Last update (default: ``created_at``).
    last_access : array_like, shape (L,), optional
        Last use; NaN = never used (default: never).
    recalls : array_like of int, shape (L,), optional
        Use counts (default 0).
    tier, memory_type : array_like of str or int codes, shape (L,), optional
        Defaults ``"task"`` and ``"episodic"`` (codes: :data:`TIER_CODES`,
        :data:`MEMORY_TYPE_CODES`).
    importance, salience : array_like, shape (L,), optional
        Default 1.0.
    pinned : array_like of bool, shape (L,), optional
        Default False.
    distinct_actors : array_like of int, shape (L,), optional
        Default 0 (never used).
    tokens : array_like of int, shape (L,), optional
        Default 100.
    similarity : array_like, shape (Q, L), optional
        Returned by :meth:`similarity` whatever the retriever; without it the
        retriever computes from ``note_emb`` / ``query_emb``, and without
        those every similarity is 1.
    note_emb, query_emb : array_like, shape (L, D) and (Q, D), optional
        Embeddings, for retrievers.
    gains : array_like, shape (Q, L), optional
        True gains (for the oracle; default 0).
    live : array_like of bool, shape (Q, L), optional
        Which notes each query can see (default: all, ``None``).
    idx : array_like of int, shape (L,), optional
        Store row of each note (default ``0..L-1``).
    note_class : array_like of int, shape (L,), optional
        Planted class codes (default -1: unknown).
    note_actor, query_actor : array_like of int, shapes (L,) and (Q,), optional
        Author and asking-actor codes (default 0: one actor).
    planted : memsim.data.planted.PlantedModel, optional
        The planted model, for the ``bayes`` ranker (default None).
    logged_rank, logged_score : array_like, shape (Q, L), optional
        A logged production ranking (rank from 1, inf = not returned; score,
        NaN = not logged), for the ``as-logged`` ranker (default None).
    superseded_at : array_like, shape (L,), optional
        When each note was superseded (days; default NaN: never).
    rng : numpy.random.Generator or int, optional
        Random stream for randomised components; an int seeds a new
        Generator; default: a fixed named child stream of seed 0.

    Notes
    -----
    :meth:`exponential_recency` always returns None: decays are evaluated
    cell by cell, the reference form.
    """

    def __init__(self, *, t: Any = 0.0, created_at: Any, updated_at: Any = None,
                 last_access: Any = None, recalls: Any = None, tier: Any = None,
                 memory_type: Any = None, importance: Any = None, salience: Any = None,
                 pinned: Any = None, distinct_actors: Any = None, tokens: Any = None,
                 similarity: Any = None, note_emb: Any = None, query_emb: Any = None,
                 gains: Any = None, live: Any = None, idx: Any = None,
                 note_class: Any = None, note_actor: Any = None, query_actor: Any = None,
                 planted: Any = None, logged_rank: Any = None, logged_score: Any = None,
                 superseded_at: Any = None, rng: np.random.Generator | int | None = None):
        self.t = np.atleast_1d(np.asarray(t, dtype=np.float64))
        created = np.atleast_1d(np.asarray(created_at, dtype=np.float64))
        n, q = len(created), len(self.t)
        self.idx = np.arange(n) if idx is None else np.asarray(idx, dtype=np.int64)
        if self.idx.shape != (n,):
            raise ValueError(f"idx must have one row per note ({n}), got shape {self.idx.shape}")

        def vec(x, default, dtype):
            if x is None:
                return np.full(n, default, dtype=dtype)
            return np.array(np.broadcast_to(np.asarray(x, dtype=dtype), (n,)))

        def mat(x, dtype):
            return np.array(np.broadcast_to(np.asarray(x, dtype=dtype), (q, n)))

        self.created_at = created
        self.updated_at = created.copy() if updated_at is None else vec(updated_at, 0.0,
                                                                         np.float64)
        self.last_access = vec(last_access, np.nan, np.float64)
        self.recalls = vec(recalls, 0, np.int64)
        self.tier = _codes(tier, TIER_CODES, n, "task")
        self.memory_type = _codes(memory_type, MEMORY_TYPE_CODES, n, "episodic")
        self.importance = vec(importance, 1.0, np.float64)
        self.salience = vec(salience, 1.0, np.float64)
        self.pinned = vec(pinned, False, bool)
        self.distinct_actors = vec(distinct_actors, 0, np.int64)
        self.tokens = vec(tokens, 100, np.int64)
        self._similarity = None if similarity is None else np.asarray(similarity)
        self.note_emb = None if note_emb is None else np.asarray(note_emb, dtype=np.float32)
        self.query_emb = None if query_emb is None else np.asarray(query_emb, dtype=np.float32)
        self.gains = np.zeros((q, n)) if gains is None else mat(gains, np.float64)
        self.live = None if live is None else mat(live, bool)
        self.note_class = vec(note_class, -1, np.int64)
        self.note_actor = vec(note_actor, 0, np.int64)
        self.query_actor = (np.zeros(q, dtype=np.int64) if query_actor is None else
                            np.array(np.broadcast_to(np.asarray(query_actor, np.int64), (q,))))
        self._planted = planted
        self.logged_rank = None if logged_rank is None else mat(logged_rank, np.float64)
        self.logged_score = (None if logged_score is None and logged_rank is None else
                             mat(np.nan if logged_score is None else logged_score, np.float64))
        self.superseded_at = vec(superseded_at, np.nan, np.float64)
        if rng is None:
            rng = _default_rng()
        elif isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
            rng = np.random.default_rng(int(rng))
        self.rng = rng

    # -- similarity --------------------------------------------------------
    def _embeddings(self) -> tuple[np.ndarray, np.ndarray]:
        if self.note_emb is None or self.query_emb is None:
            raise ValueError("this ArrayContext has no embeddings: pass note_emb and query_emb "
                             "to compute a retriever's similarity")
        return self.query_emb, self.note_emb

    @cached_property
    def dots(self) -> np.ndarray:
        qe, ne = self._embeddings()
        return qe @ ne.T

    @cached_property
    def qnorm2(self) -> np.ndarray:
        qe, _ = self._embeddings()
        return np.einsum("ij,ij->i", qe, qe, dtype=np.float64)

    @cached_property
    def nnorm2(self) -> np.ndarray:
        _, ne = self._embeddings()
        return np.einsum("ij,ij->i", ne, ne, dtype=np.float64)

    @property
    def note_vectors(self) -> np.ndarray:
        return self._embeddings()[1]

    @property
    def query_vectors(self) -> np.ndarray:
        return self._embeddings()[0]

    def similarity(self, retriever: Any) -> np.ndarray:
        """The given ``similarity``, else the retriever's on the embeddings,
        else 1 everywhere."""
        if self._similarity is not None:
            return self._similarity
        if self.note_emb is None or self.query_emb is None:
            return np.ones((len(self.t), len(self.idx)))
        return retriever.similarity(self)

    # -- ages (NoteAges) ---------------------------------------------------------
    def _note_times(self, name: str) -> np.ndarray:
        return getattr(self, name)[None, :]

    def access_order(self) -> np.ndarray | None:
        """The columns in ascending order of the last use (creation where
        none); None when a time is NaN."""
        return origin_order(np.where(np.isnan(self.last_access), self.created_at,
                                     self.last_access))

    @property
    def planted(self) -> Any:
        return self._planted
