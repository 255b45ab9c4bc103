"""Scoring contexts: a batch (or chosen cells of it) seen by one arm."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from memsim.core import jit
from memsim.data.planted import PlantedModel
from memsim.policies import ArrayContext
from memsim.policies.context import AGE_CLOCKS
from .state import similarity_key, superseded
from .topc import _columns

if TYPE_CHECKING:
    from .batch import Batch
    from .cells import _LevelCells
    from .state import NoteArrays, PolicyState


class _NoteColumns:
    """The note columns and per-arm state a context reads at its ``idx``
    (a vector of rows, or a matrix of gathered cells): shared by the batch's
    context and the pruned scoring's gathered one."""

    notes: NoteArrays
    state: PolicyState
    idx: np.ndarray

    def _at(self, column: np.ndarray) -> np.ndarray:
        """A per-note array (a note column, the arm's state) at ``idx``."""
        return column[self.idx]

    @property
    def tokens(self) -> np.ndarray:
        return self._at(self.notes.tokens)

    @property
    def importance(self) -> np.ndarray:
        return self._at(self.notes.importance)

    @property
    def salience(self) -> np.ndarray:
        return self._at(self.notes.salience)

    @property
    def pinned(self) -> np.ndarray:
        return self._at(self.notes.pinned)

    @property
    def memory_type(self) -> np.ndarray:
        return self._at(self.notes.memory_type)

    @property
    def recalls(self) -> np.ndarray:
        return self._at(self.state.recalls)

    @property
    def superseded_at(self) -> np.ndarray:
        return self._at(superseded(self.notes))

    @property
    def tier(self) -> np.ndarray:
        return self._at(self.state.tier)

    @property
    def note_state(self) -> dict[str, np.ndarray]:
        """The ranker's per-note columns (``Ranker.note_columns``) at ``idx``."""
        return {k: self._at(v) for k, v in self.state.note_state.items()}


class _ArmCells(_NoteColumns):
    """The ages and per-arm columns of one arm's cells, written once for the
    batch's context (``idx`` a vector of L rows: (Q, L) values) and the
    gathered one (``idx`` an (R, W) matrix of cells: (R, W) values); ``t``
    holds the cells' query times and ``shared`` caches what every arm of
    the batch shares. The same float operations either way, so a cell
    scores alike in both."""

    t: np.ndarray

    @property
    def age_created(self) -> np.ndarray:
        return self.shared("age_created",
                           lambda: self.t[:, None] - self._at(self.notes.created_at))

    @property
    def age_updated(self) -> np.ndarray:
        return self.shared("age_updated",
                           lambda: self.t[:, None] - self._at(self.notes.updated_at))

    @cached_property
    def since_access(self) -> np.ndarray:
        """Days since last access; NaN where never accessed."""
        return self.t[:, None] - self._at(self.state.last_access)

    @cached_property
    def age_last_access(self) -> np.ndarray:
        """Days since last access, counting creation as the first access."""
        if "since_access" not in self.__dict__ and jit.enabled():
            # one compiled pass, not three over (Q, L) (a per-query arm
            # with a last-use clock scores every query row by row)
            last = self._at(self.state.last_access)
            created = self._at(self.notes.created_at)
            if last.ndim == 1:
                last, created = last[None, :], created[None, :]
            return _age_from_origin(self.t, last, created)
        s = self.since_access
        return np.where(np.isnan(s), self.age_created, s)

    def age(self, clock: str) -> np.ndarray:
        return getattr(self, AGE_CLOCKS[clock])

    @cached_property
    def distinct_actors(self) -> np.ndarray:
        return self.state.distinct_actors(self.idx.ravel()).reshape(self.idx.shape)

    @property
    def note_actor(self) -> np.ndarray:
        return self._at(self.notes.actor)


@jit.kernel
def _age_from_origin(t, last, created):
    """``t[r] - origin`` per cell (compiled by :func:`memsim.core.jit.kernel`),
    the origin its note's last use, or its creation where never used:
    ``last`` and ``created`` (R, W), or (1, L) for every query. The floats
    of ``np.where(np.isnan(t - last), t - created, t - last)``: the same
    subtraction of the same origin."""
    q, n = len(t), last.shape[1]
    shared = last.shape[0] == 1
    out = np.empty((q, n))
    for r in range(q):
        k = 0 if shared else r
        tr = t[r]
        for j in range(n):
            origin = last[k, j]
            if origin != origin:  # never used: since creation
                origin = created[k, j]
            out[r, j] = tr - origin
    return out


class BatchContext(_ArmCells):
    """A :class:`Batch` seen by one arm: the engine's
    :class:`~memsim.policies.context.ScoringContext`.

    Matrices are (Q, L) with L = ``len(idx)``; note vectors are (L,). Values
    that do not depend on the arm (the similarity, the ages since creation
    and update) are computed once per batch and shared by every arm through
    the batch's cache; the arm's own state (uses, tiers, actors) is read
    lazily. Components read attributes; nothing here is mutated by them.
    """

    def __init__(self, batch: Batch, state: PolicyState, rng: np.random.Generator):
        self.batch = batch
        self.state = state
        self.rng = rng
        self.t = batch.t
        self.idx = batch.idx
        self.notes = batch.notes
        #: (Q, L) bool: the notes each query may see (existing, not expired,
        #: not evicted, inside the prefilter); set by the engine before scoring
        self.live: np.ndarray | None = None
        #: the prefilter's cells, (Q, M) columns ascending and which are
        #: real, when they are the live ones and the arm scores them alone
        self.prefilter_cells: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def live(self) -> np.ndarray | None:
        if self._live is None and self._live_parts is not None:
            valid, evicted = self._live_parts
            self._live = valid & ~evicted[None, :]
            self._live_parts = None
        return self._live

    @live.setter
    def live(self, value: np.ndarray | None) -> None:
        self._live = value
        self._live_parts = None

    def set_live_lazily(self, valid: np.ndarray, evicted: np.ndarray) -> None:
        """``live = valid & ~evicted`` ((Q, L) and (L,)), computed on first
        read only: a pruned arm reads only the cells it scores."""
        self._live = None
        self._live_parts = (valid, evicted)

    def live_and_shared(self) -> tuple[np.ndarray, bool]:
        """``live`` (Q, L), and whether it is the batch's ``valid`` mask
        itself (the arm evicted none of the batch's notes and no prefilter
        cut it): then every such arm sees the same notes."""
        if self._live is None and self._live_parts is not None:
            valid, evicted = self._live_parts
            if not evicted.any():
                return valid, True
        return self.live, False

    def columns_of(self, rows: np.ndarray) -> np.ndarray:
        """The columns of the note rows ``rows`` that are among the batch's
        (those that are not left out), in the order of ``rows``."""
        at, hit = _columns(self.idx, np.asarray(rows, dtype=np.int64))
        return at[hit]

    def created_columns(self) -> np.ndarray:
        """The creation time (L,) of each column."""
        return self.shared("created-columns", lambda: self._at(self.notes.created_at))

    def live_cells(self, flat: np.ndarray, cols: np.ndarray,
                   valid_cells: np.ndarray | None = None) -> np.ndarray:
        """``live`` at the flat (row-major) cell indices ``flat``, whose note
        columns are ``cols`` (``valid_cells``: the batch's ``valid`` there,
        when known)."""
        if self._live_parts is None:
            return np.take(self.live, flat)
        valid, evicted = self._live_parts
        if valid_cells is None:
            valid_cells = np.take(valid, flat)
        return valid_cells & ~evicted[cols]

    def _at(self, column: np.ndarray) -> np.ndarray:
        # the batch's rows: a view, read-only, when they are consecutive (a
        # gather of every note is a pass a set-dependent ranker would pay
        # per query and arm)
        rows = self.batch.rows
        got = column[rows]
        if isinstance(rows, slice):
            got.flags.writeable = False
        return got

    # -- shared, from the batch -------------------------------------------
    @property
    def dots(self) -> np.ndarray:
        return self.batch.dots

    @property
    def qnorm2(self) -> np.ndarray:
        return self.batch.qnorm2

    @property
    def nnorm2(self) -> np.ndarray:
        return self.notes.norm2[self.batch.rows]

    @property
    def note_vectors(self) -> np.ndarray:
        # the batch's rows: a view when they are consecutive (no copy of the store)
        return self.notes.emb[self.batch.rows]

    @property
    def query_vectors(self) -> np.ndarray:
        return self.batch.qemb

    def shared(self, key, compute):
        """A value computed once per batch and shared by every arm (the
        similarity matrix, the age matrix): ``compute()`` runs on first use."""
        cache = self.batch.cache
        if key not in cache:
            cache[key] = compute()
        return cache[key]

    def access_order(self) -> np.ndarray | None:
        """The columns in ascending order of the last use (creation where
        none): the arm's state keeps the last such order and places again
        only the notes used since (:meth:`PolicyState.access_order`)."""
        return self.state.access_order(_clock_origin("last_access", self.notes, self.state,
                                                     self.idx))

    def similarity(self, retriever) -> np.ndarray:
        """The retriever's similarity (Q, L), shared across arms: computed on
        the batch's own cells when the retriever computes it per cell
        (``Retriever.per_cell``: a view of a batch, an arm's candidates,
        computes its cells alone, not the batch's product), else the batch's
        scaled product when the retriever is one
        (:meth:`Batch.scaled_similarity`, no (Q, L) dot products), else what
        the retriever computes."""
        if retriever.per_cell:
            return self.shared(("similarity", similarity_key(retriever)),
                               lambda: _per_cell_similarity(self, retriever))
        got = self.batch.scaled_similarity(retriever)
        if got is not None:
            return got
        return self.shared(("similarity", similarity_key(retriever)),
                           lambda: retriever.similarity(self))

    def exponential_recency(self, clock: str, floor, rate) -> np.ndarray | None:
        """``floor + (1 - floor) * exp(-rate * age)`` (Q, L) for the ages of
        ``clock`` (negative ages count as 0), or None for a clock without an
        origin.

        Every clock's age is ``t_q - origin_n``; with ``t0`` the batch's anchor
        (the end of its tick), ``exp(-r (t_q - o)) = exp(-r (t_q - t0)) *
        exp(-r (t0 - o))``: one exponential per note and one per (query,
        distinct rate) instead of one per cell (see :func:`separable_recency`).
        """
        origin = self.clock_origin(clock)
        if origin is None:
            return None
        return separable_recency(self.t, self.batch.t0, origin, floor,
                                    np.asarray(rate, dtype=np.float64))

    def clock_origin(self, clock: str) -> np.ndarray | None:
        """The origin (L,) of ``clock``'s ages, read from the state when first
        asked (None for an unknown clock)."""
        cache = self.__dict__.setdefault("_origins", {})
        if clock not in cache:
            cache[clock] = _clock_origin(clock, self.notes, self.state, self.idx)
        return cache[clock]

    # -- per arm, from the state ---------------------------------------------

    @cached_property
    def gains(self) -> np.ndarray:
        """True gains (Q, L), 0 where no qrel: only a ranker that declares
        ``needs_truth`` may read this."""
        return self.batch.gains_for(self.idx)

    # -- the planted model (for rankers that declare needs_planted) ---------
    @property
    def planted(self) -> PlantedModel | None:
        return self.notes.planted

    @property
    def note_class(self) -> np.ndarray:
        nc = self.notes.note_class
        return np.full(len(self.idx), -1, dtype=np.int64) if nc is None else nc[self.idx]

    # -- the logged rankings (for rankers that declare needs_logged) ---------
    @cached_property
    def _logged(self) -> tuple[np.ndarray, np.ndarray] | None:
        logged = getattr(self.batch, "logged", None)
        return None if logged is None else logged.dense(self.batch.qrows, self.idx)

    @property
    def logged_rank(self) -> np.ndarray | None:
        """(Q, L) rank (from 1) the production system gave each note, ``inf``
        where it did not return it; None when the stream has no logged
        rankings."""
        return None if self._logged is None else self._logged[0]

    @property
    def logged_score(self) -> np.ndarray | None:
        """(Q, L) score the production system logged, NaN where none; None
        when the stream has no logged rankings."""
        return None if self._logged is None else self._logged[1]

    @property
    def query_actor(self) -> np.ndarray:
        return self.batch.actors


def _clock_origin(clock: str, notes: NoteArrays, state: PolicyState, idx: np.ndarray
                  ) -> np.ndarray | None:
    """The time each note of ``idx`` (any shape) counts ``clock``'s age from:
    creation, last update, or last use (creation when never used)."""
    if clock == "created":
        return notes.created_at[idx]
    if clock == "updated":
        return notes.updated_at[idx]
    if clock == "last_access":
        last = state.last_access[idx]
        return np.where(np.isnan(last), notes.created_at[idx], last)
    return None


#: largest exponent ``rate * (t0 - t)`` of a query factor: beyond it the
#: factor could overflow, and the cell is computed directly
_MAX_EXPONENT = 300.0


def separable_recency(t: np.ndarray, t0: float, origin: np.ndarray, floor,
                         rate: np.ndarray) -> np.ndarray:
    """``floor + (1 - floor) * exp(-rate * max(t - origin, 0))`` for queries
    ``t`` (Q,) and notes ``origin`` (L,), or cells ``origin`` (Q, W).

    A cell is computed as ``exp(-rate (t - t0)) * exp(-rate (t0 - origin))``
    (one exponential per note and per (query, rate)) when its age is >= 0 and
    its query factor cannot overflow, else directly. A cell's value therefore
    depends on its own query time, note and rate and on ``t0`` only, never
    on which other cells are computed with it: a full batch, a few gathered
    cells (pruning) and one query's row (per-query feedback) give the same
    floats.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        note_factor = np.exp(-rate * (t0 - origin))  # (L,) or scalar rate broadcast
        if origin.ndim == 1:
            rates, inverse = np.unique(np.broadcast_to(rate, origin.shape),
                                       return_inverse=True)
            query_factor = np.exp(-(t - t0)[:, None] * rates[None, :])  # (Q, K), >= 1
            rec = np.take(query_factor, inverse, axis=1) if len(rates) > 1 else (
                np.repeat(query_factor, len(origin), axis=1))
        elif rate.ndim:
            # cells: the same exponential of the same product, cell by cell
            # (or row by row: a rate per row, arms scored as one array)
            rec = np.exp(-(t - t0)[:, None] * rate)
            if rec.shape != origin.shape:
                rec = np.repeat(rec, origin.shape[1], axis=1)
        else:
            rec = np.repeat(np.exp(-(t - t0)[:, None] * rate[None]), origin.shape[1], axis=1)
        rec *= note_factor
    _direct_cells(rec, t, t0, origin, rate)
    floor = np.asarray(floor, dtype=np.float64)
    if floor.ndim or float(floor) != 0.0:
        rec *= 1.0 - floor  # Decay.exponential_curve, computed in place
        rec += floor
    return rec


def _direct_cells(rec: np.ndarray, t: np.ndarray, t0: float, origin: np.ndarray,
                  rate: np.ndarray) -> None:
    """Overwrite, in ``rec``, the cells the separable form cannot take (a
    negative age, or a query factor past :data:`_MAX_EXPONENT`) with
    ``exp(-rate * max(age, 0))``. Usually none: the check is on the batch's
    extremes first, and on the few late notes' columns next."""
    tmin = float(t.min())
    risky = float(rate.max(initial=0.0)) * (t0 - tmin) > _MAX_EXPONENT
    if origin.ndim == 1 and not risky:
        cols = np.flatnonzero(origin > tmin)  # notes created or used inside the batch
        if len(cols) == 0:
            return
        o = origin[cols]
        r = rate[cols] if rate.ndim else rate
        bad = o[None, :] > t[:, None]
        if bad.any():
            direct = np.exp(-r * np.maximum(t[:, None] - o[None, :], 0.0))
            sub = rec[:, cols]
            sub[bad] = direct[bad]
            rec[:, cols] = sub
        return
    if not risky and float(origin.max(initial=-np.inf)) <= tmin:
        return
    o = origin if origin.ndim == 2 else origin[None, :]
    r = rate if rate.ndim != 1 or origin.ndim == 2 else rate[None, :]
    if not risky and origin.ndim == 2:
        # gathered cells: only those of notes created or used inside the batch
        at = np.flatnonzero(origin > tmin)
        qt = t[at // origin.shape[1]]
        late = np.take(origin, at)
        bad = late > qt
        if bad.any():
            at, qt, late = at[bad], qt[bad], late[bad]
            rr = np.take(np.broadcast_to(r, origin.shape), at)
            np.put(rec, at, np.exp(-rr * np.maximum(qt - late, 0.0)))
        return
    bad = (o > t[:, None]) | (r * (t0 - t)[:, None] > _MAX_EXPONENT)
    if bad.any():
        direct = np.exp(-np.broadcast_to(r, bad.shape)[bad]
                        * np.maximum(np.broadcast_to(t[:, None] - o, bad.shape)[bad], 0.0))
        rec[bad] = direct


class _GatheredContext(_ArmCells):
    """Chosen cells of a :class:`BatchContext`: for the queries ``rows`` (R,),
    the note columns ``cols`` (R, W) of each. Matrices are (R, W) and so are
    note vectors (each cell's note); every value is the full context's for
    that cell, computed by the same float operations, so an elementwise
    component scores each cell exactly as on the full context."""

    def __init__(self, full: BatchContext, rows: np.ndarray, cols: np.ndarray,
                 live: np.ndarray | None, cells: _LevelCells | None = None):
        self.full = full
        self.rows = rows
        self.cols = cols
        self.idx = full.idx[cols]
        self.t = full.t[rows]
        self.rng = full.rng
        self.live = live
        self.notes = full.notes
        self.state = full.state
        self._cache: dict = {}
        if cells is None:
            self.flat = rows[:, None] * len(full.idx) + cols
        else:  # a level's cells, shared by every arm: their similarity too
            self.flat = cells.flat
            self._cache[("similarity", cells.retriever)] = cells.sim

    def _cells(self, mat: np.ndarray) -> np.ndarray:
        return np.take(mat, self.flat)

    @property
    def whole(self) -> tuple[BatchContext, np.ndarray]:
        """The context the cells were chosen from, and their flat indices in it."""
        return self.full, self.flat

    @property
    def dots(self) -> np.ndarray:
        return self._cells(self.full.dots)

    @property
    def qnorm2(self) -> np.ndarray:
        return self.full.qnorm2[self.rows]

    @property
    def nnorm2(self) -> np.ndarray:
        return self.notes.norm2[self.idx]

    def shared(self, key, compute):
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def similarity(self, retriever) -> np.ndarray:
        return self.shared(("similarity", similarity_key(retriever)),
                           lambda: self._cells(self.full.similarity(retriever)))

    def exponential_recency(self, clock: str, floor, rate) -> np.ndarray | None:
        # the cells' own origins, from the state as it is now (per-query
        # feedback rescores used notes on a context built before the use)
        origin = _clock_origin(clock, self.notes, self.state, self.idx)
        if origin is None:
            return None
        return separable_recency(self.t, self.full.batch.t0, origin, floor,
                                    np.asarray(rate, dtype=np.float64))

    @property
    def query_actor(self) -> np.ndarray:
        return self.full.query_actor[self.rows]


def _per_cell_similarity(ctx: BatchContext, retriever) -> np.ndarray:
    """A per-cell retriever's similarity on ``ctx``: a query row of a batch
    (:meth:`Batch.row`, the batch's columns) takes its row of the batch's,
    computed once for every row (the same floats: each cell alone); any
    other context computes its own cells (an arm's candidates' columns)."""
    source = ctx.batch.row_source()
    if source is not None:
        base, i = source
        return BatchContext(base, ctx.state, ctx.rng).similarity(retriever)[i:i + 1]
    return retriever.similarity(ctx)


class RowsContext:
    """K queries against the notes of K rows of W columns each, laid out as
    one (K, K * W) context (query i's notes are columns i * W ... i * W + W
    - 1): what a retriever computes its similarity from (products and
    norms), and an :class:`ArrayContext` for anything else, built then."""

    def __init__(self, batch: Batch, q: np.ndarray, rows: np.ndarray):
        self.batch, self.q, self.cols = batch, q, rows.reshape(-1)
        self.t = batch.t[q]
        self.idx = self.cols
        self.live = None

    @cached_property
    def dots(self) -> np.ndarray:
        return self.query_vectors @ self.note_vectors.T

    @cached_property
    def qnorm2(self) -> np.ndarray:
        return self.batch.qnorm2[self.q]

    @cached_property
    def nnorm2(self) -> np.ndarray:
        return self.batch.notes.norm2[self.cols]

    @cached_property
    def note_vectors(self) -> np.ndarray:
        return self.batch.notes.emb[self.cols]

    @cached_property
    def query_vectors(self) -> np.ndarray:
        return self.batch.qemb[self.q]

    @cached_property
    def _full(self) -> ArrayContext:
        return ArrayContext(t=self.t, created_at=self.batch.notes.created_at[self.cols],
                            note_emb=self.note_vectors, query_emb=self.query_vectors)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._full, name)


def cell_similarity(policy, batch: Batch):
    """``similarity(q, rows)``: the policy's retriever's similarity of the
    batch's queries ``q`` (K,) to the note rows ``rows`` (K, W), any notes
    (not only the batch's columns): computed on :class:`RowsContext`."""
    def block(q: np.ndarray, rows: np.ndarray) -> np.ndarray:
        k, w = rows.shape
        sim = np.asarray(policy.retriever.similarity(RowsContext(batch, q, rows)),
                         dtype=np.float64)
        return sim.reshape(k, k, w)[np.arange(k), np.arange(k)]

    def similarity(q: np.ndarray, rows: np.ndarray) -> np.ndarray:
        # blocks of at most 128 rows: the context is (K, K * W)
        return np.concatenate([block(q[i:i + 128], rows[i:i + 128])
                               for i in range(0, len(q), 128)]) if len(q) else \
            np.zeros(rows.shape)
    return similarity


def sweep_context(notes: NoteArrays, st: PolicyState, idx: np.ndarray, t: float,
                   rng: np.random.Generator) -> ArrayContext:
    """The notes ``idx`` of one arm at a sweep time ``t``: one pseudo-query,
    no similarity and no ground truth (retention reads neither)."""
    return ArrayContext(
        t=np.array([t]), idx=idx, created_at=notes.created_at[idx],
        updated_at=notes.updated_at[idx], last_access=st.last_access[idx],
        recalls=st.recalls[idx], tier=st.tier[idx], memory_type=notes.memory_type[idx],
        importance=notes.importance[idx], salience=notes.salience[idx],
        pinned=notes.pinned[idx], distinct_actors=st.distinct_actors(idx),
        tokens=notes.tokens[idx], rng=rng, superseded_at=superseded(notes)[idx],
    )


class SweepView(_NoteColumns, ArrayContext):
    """:func:`sweep_context`, its columns gathered only when read: a
    retention reads a few (ai-memory's seven of thirteen), each the same
    values; anything else comes from the full context, built then."""

    def __init__(self, notes: NoteArrays, st: PolicyState, idx: np.ndarray, t: float,
                 rng: np.random.Generator):
        self.notes, self.state, self.idx, self.rng = notes, st, idx, rng
        self.t = np.array([t])
        self.live = None

    @cached_property
    def _full(self) -> ArrayContext:
        return sweep_context(self.notes, self.state, self.idx, float(self.t[0]), self.rng)

    def __getattr__(self, name: str) -> Any:
        # only for what neither class defines: the full context's
        return getattr(self._full, name)

    @property
    def created_at(self) -> np.ndarray:
        return self.notes.created_at[self.idx]

    @property
    def updated_at(self) -> np.ndarray:
        return self.notes.updated_at[self.idx]

    @property
    def last_access(self) -> np.ndarray:
        return self.state.last_access[self.idx]

    @cached_property
    def distinct_actors(self) -> np.ndarray:
        return self.state.distinct_actors(self.idx)
