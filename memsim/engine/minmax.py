"""Accelerator ``"minmax"``: a query's exact top C under a min-max-normalised
sum without scoring every live note.

Generative Agents' score (a ranker whose :meth:`~memsim.policies.base.Ranker.minmax_weights`
are ``(w1, w2, w3)``, the ``weighted-sum`` ranker) is ::

    w1 n(recency) + w2 n(importance) + w3 n(similarity),
    n(x) = (x - min x) / (max x - min x)  over the query's live notes

(0.5 for a term whose live values are all equal or hold a NaN). Each
note's score reads the row's extremes, so the reference scores every live
note of every query and arm: an exponential and three divisions per note.

Per query row, with the decay's recency a non-increasing function of the
age alone (:meth:`~memsim.policies.base.Decay.falls_with_age_alone`) on the
creation or last-use clock, and the notes in creation order:

* shared by the arms that see the same live notes (the batch's cache): the
  importance and similarity extremes (exact) and every live note's ``u =
  w2 n(importance) + w3 n(similarity)``, in one compiled pass;
* per arm, the recency extremes. Bands of notes are found without a pass
  over the store (columns are in creation order, and the arm's used notes
  come sorted by last use: ``PolicyState.uses_by_time``): the notes whose
  origin (creation, or last use) is at or after a time ``e``, and those
  before one. A note outside the newest band has an age of at least ``t -
  e``, so a recency of at most the curve's value there: the band's highest
  is the row's when that value, with a relative slack (:data:`SLACK`) for
  the rounding of the computed recency, is below it (likewise the oldest
  band's lowest, or a lowest at the curve's ``lower_bound``); else the
  bands widen;
* the bands, a wider band of newest origins and the notes whose ``u``
  reaches a guess are scored: their C-th best score, ``tau``, is one the
  row's top C reaches. A note outside the wider band scores at most ``u +
  w1 n(curve at its edge)``: only the notes whose ``u`` reaches ``tau``
  less that term (and :data:`MARGIN`) can enter the top C, and those the
  guess left out are scored besides. The guess (the band's width, and how
  many notes by ``u``) is the one that would have scored the fewest notes
  on the arm's row before, re-chosen every :data:`GUESS_ROWS` rows or
  when it fell short.

It runs where it pays (:data:`MIN_CELLS`): a row's shared pass and an
arm's few dozen array calls cost more than scoring a small row whole, as
one arm answered query by query over a small store does.

**Contract.** For every query of every arm it answers, the same top C (the
same notes in the same order, ties to the lower ``note_id``) and the same
score values, bit for bit, as :mod:`memsim.engine.reference`: a scored
note's terms are computed by the same float operations from the same
extremes (``tests/test_accelerators.py``, ``tests/test_minmax.py``). A row
it cannot prove (a recency with a NaN, a flat curve whose band covers the
store) leaves the batch to full scoring.
"""

from __future__ import annotations

import contextlib
from functools import cached_property
from typing import TYPE_CHECKING, Iterator

import numpy as np

from memsim.core import jit
from memsim.core.errors import MemsimError
from memsim.policies import Policy
from memsim.policies.base import Stickiness, declared_for
from .context import _GatheredContext, separable_recency
from .state import similarity_key
from .topc import _columns, top_candidates

if TYPE_CHECKING:
    from .context import BatchContext
    from .state import PolicyState

#: relative slack allowed between a computed recency and its curve (the
#: rounding of an exponential and a product is about 1e-16)
SLACK = 1e-12
#: slack of a score bound, relative to the weights' sum (a score's rounding
#: is about 1e-16 of it)
MARGIN = 1e-9
#: a row with at most this many live notes per candidate is scored in full
FEW = 4
#: it runs where the arms that share a batch's rows hold this many cells
#: between them (queries x notes x arms): below it, scoring whole rows costs
#: less. Per query (one row a batch), one Generative Agents arm over 50,000
#: notes scores whole rows (5% less CPU), over 200,000 through here (12%
#: less), and ten arms over 50,000 through here (11-17% less); per tick (a
#: day's 50 rows), whole rows cost more (one arm over 50,000 notes: 0.60 s
#: against 0.33 s; ``benchmarks/README.md``)
MIN_CELLS = 1 << 17
#: the newer band's first width (columns) per candidate, and the older
#: band's first width; each grows eightfold while it cannot prove the extreme
NEW_PER_CANDIDATE, OLD_COLUMNS, GROWTH = 2, 64, 8
#: live notes per row whose u is sampled (the estimate that picks the
#: newer band's width for the bound)
SAMPLE = 512
#: rows an arm's guess is kept while it holds every note needed
GUESS_ROWS = 8
#: a batch's rows are kept for its arms while they hold at most this many
#: bytes (a row: u, its similarity and importance, its live columns)
ROWS_BYTES, ROW_BYTES_PER_NOTE = 1 << 28, 32
#: a threshold on u that every live note reaches (u is -inf where not live)
LEAST = -np.finfo(np.float64).max


@contextlib.contextmanager
def at_any_size() -> Iterator[None]:
    """Within the block, the accelerator runs whatever its rows' size
    (:data:`MIN_CELLS` 0): ``memsim check --engine`` replays a small stream."""
    global MIN_CELLS
    saved, MIN_CELLS = MIN_CELLS, 0
    try:
        yield
    finally:
        MIN_CELLS = saved


def declared_weights(ranker) -> tuple[float, float, float] | None:
    """The ranker's ``minmax_weights()``, where it declares them for its own
    ``combine`` (:func:`~memsim.policies.base.declared_for`), else None."""
    return ranker.minmax_weights() if declared_for(ranker, "minmax_weights", "combine") else None


def _plan(policy: Policy, ctx: BatchContext) -> tuple[float, float, float] | None:
    """The ranker's min-max weights when the policy can be answered so
    (module docstring), else None."""
    r = policy.ranker
    weights = declared_weights(r)
    if weights is None or not (r.uses_recency and r.uses_similarity):
        return None
    if r.needs_truth or r.needs_planted or r.needs_logged or r.chooses_candidates():
        return None
    if not all(np.isfinite(w) and w >= 0 for w in weights):
        return None
    if not np.isfinite(sum(weights)):  # MARGIN * the sum: finite
        return None
    d = policy.decay
    if (not declared_for(d, "falls_with_age_alone", "recency") or not d.falls_with_age_alone()
            or d.clock not in ("created", "last_access")):
        return None
    if (type(policy.stickiness).effective_age is not Stickiness.effective_age
            or policy.stickiness.access_term_bound(ctx) != 0.0
            or policy.breadth.score_factor_bound(ctx) != 1.0):
        return None
    if not ctx.notes.creation_ordered:
        return None
    return tuple(float(w) for w in weights)


class _Term:
    """A term's min-max normalisation over a row's live values, as
    :func:`memsim.policies.rank.minmax_sum` computes it: ``((x - lo) + 0.0)
    / d`` where the live values spread (``d = hi - lo > 0``, no NaN), else
    0.5."""

    def __init__(self, lo: float, hi: float, nan: bool):
        self.lo = lo
        self.spread = bool(hi - lo > 0) and not nan
        self.d = hi - lo if self.spread else 1.0

    @classmethod
    def over(cls, x: np.ndarray) -> _Term:
        """The term over the values ``x`` (none: no spread)."""
        if len(x) == 0:
            return cls(np.inf, -np.inf, False)
        return cls(x.min(), x.max(), bool(np.isnan(x).any()))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if not self.spread:
            return np.full(np.shape(x), 0.5)
        out = np.subtract(x, self.lo)
        out += 0.0
        out /= self.d
        return out


class _Row:
    """What every arm that sees the same live notes shares on a query row:
    the importance and similarity terms, every note's ``u`` (-inf where not
    live), a sorted sample of the live notes' ``u``, the live columns, and
    (when first asked) the C best columns by ``u``."""

    def __init__(self, ctx: BatchContext, policy: Policy, r: int, live: np.ndarray,
                 weights: tuple[float, float, float], c: int):
        _, w2, w3 = weights
        rel = np.ascontiguousarray(ctx.similarity(policy.retriever)[r], dtype=np.float64)
        imp = np.ascontiguousarray(np.broadcast_to(np.asarray(ctx.importance, dtype=np.float64),
                                                   rel.shape))
        live = np.ascontiguousarray(live)
        if jit.enabled():
            u, *ends = _row_u(imp, rel, live, w2, w3)
            self.imp, self.rel = _Term(*ends[:3]), _Term(*ends[3:])
        else:
            self.imp, self.rel = _Term.over(imp[live]), _Term.over(rel[live])
            u = w2 * self.imp(imp) + w3 * self.rel(rel)
            u[~live] = -np.inf
        self.u, self.rel_row, self.imp_row, self.c = u, rel, imp, c
        # a sample of the live notes' u (every step-th column), sorted: how
        # many notes a threshold on u keeps, estimated without a pass
        step = max(1, len(u) // SAMPLE)
        self.sample = np.sort(u[::step][live[::step]])
        self.live = live
        self.live_cols = np.flatnonzero(live)
        self.n_live = len(self.live_cols)

    @cached_property
    def best(self) -> np.ndarray:
        """The C best columns by u, ascending."""
        return np.sort(top_candidates(self.u[None, :], self.c)[0][0])

    def estimate(self, thr: np.ndarray) -> np.ndarray:
        """About how many live notes have ``u >= thr`` (elementwise)."""
        k = len(self.sample) - np.searchsorted(self.sample, thr, side="left")
        return k * (self.n_live / max(1, len(self.sample)))

    def threshold(self, count: float) -> float:
        """A value of u that about ``count`` live notes reach (every live
        note, and no other, when ``count`` is as many)."""
        m = len(self.sample)
        k = int(np.ceil(count * m / max(1, self.n_live)))
        return LEAST if k >= m else float(self.sample[m - max(k, 1)])


@jit.kernel
def _row_u(imp, rel, live, w2, w3):
    """:class:`_Row`'s terms in two passes (compiled by
    :func:`memsim.core.jit.kernel`): the live values' extremes and whether
    one is NaN, then ``u = w2 n(imp) + w3 n(rel)`` (-inf where not live)
    with :class:`_Term`'s float operations. Returns (u, lo, hi, nan of
    ``imp``, lo, hi, nan of ``rel``)."""
    n = len(rel)
    lo2 = lo3 = np.inf
    hi2 = hi3 = -np.inf
    nan2 = nan3 = False
    for j in range(n):
        if live[j]:
            a, b = imp[j], rel[j]
            nan2 |= a != a
            nan3 |= b != b
            lo2 = a if a < lo2 else lo2
            hi2 = a if a > hi2 else hi2
            lo3 = b if b < lo3 else lo3
            hi3 = b if b > hi3 else hi3
    s2 = hi2 - lo2 > 0 and not nan2
    s3 = hi3 - lo3 > 0 and not nan3
    d2 = hi2 - lo2 if s2 else 1.0
    d3 = hi3 - lo3 if s3 else 1.0
    u = np.empty(n)
    for j in range(n):
        a = ((imp[j] - lo2) + 0.0) / d2
        b = ((rel[j] - lo3) + 0.0) / d3
        v = w2 * (a if s2 else 0.5) + w3 * (b if s3 else 0.5)
        u[j] = v if live[j] else -np.inf
    return u, lo2, hi2, nan2, lo3, hi3, nan3


def _shared_row(ctx: BatchContext, policy: Policy, r: int, live: np.ndarray, same: bool,
                weights: tuple[float, float, float], c: int) -> _Row:
    """The row's :class:`_Row`, shared through the batch's cache by the arms
    that see the batch's valid notes. A row holds a few arrays of the
    store's size, so the cache keeps one row at a time (the latest asked)
    where the arms answer one query after the other (a query row of a
    tick's batch, kept in the tick's cache) or where the batch's rows would
    hold more than :data:`ROWS_BYTES` between them; else every row of the
    batch, which each arm then reads in turn."""
    if not same:
        return _Row(ctx, policy, r, live, weights, c)
    key = ("minmax-row", similarity_key(policy.retriever), weights[1:], c)
    source = ctx.batch.row_source()
    if source is None and len(ctx.t) * len(ctx.idx) * ROW_BYTES_PER_NOTE <= ROWS_BYTES:
        return ctx.shared((*key, r), lambda: _Row(ctx, policy, r, live, weights, c))
    cache, i = (ctx.batch.cache, r) if source is None else (source[0].cache, source[1])
    kept = cache.get(key)
    if kept is None or kept[0] != i:
        kept = cache[key] = (i, _Row(ctx, policy, r, live, weights, c))
    return kept[1]


def _minmax_top(policy: Policy, ctx: BatchContext, c: int, st: PolicyState, peers: int = 1
                ) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`~memsim.engine.topc.top_candidates` of the policy's masked
    scores without scoring every live note (module docstring), or None when
    the policy or a row cannot be answered so, or when it would not pay
    (the caller scores in full): ``peers`` arms share its rows' work
    (itself included), and it runs where their batch holds :data:`MIN_CELLS`
    cells (queries x notes x arms)."""
    q, n = len(ctx.t), len(ctx.idx)
    if n == 0 or q * n * peers < MIN_CELLS:
        return None
    weights = _plan(policy, ctx)
    if weights is None:
        return None
    live, same = ctx.live_and_shared()
    cc = min(c, n)
    pos = np.zeros((q, cc), dtype=np.int64)
    vals = np.full((q, cc), -np.inf)
    scored = 0
    for r in range(q):
        shared = _shared_row(ctx, policy, r, live[r], same, weights, c)
        if shared.n_live <= FEW * c:
            return None
        got = _row_top(policy, ctx, st, r, shared, weights, c)
        if got is None:
            return None
        pos[r], vals[r], cells = got
        scored += cells
    st.work["cells"] += scored
    return pos, vals


class _Origins:
    """Where a row's notes' origins lie, without a pass over the store: the
    columns are in creation order, and on the last-use clock the arm's used
    notes come sorted by their last use (``PolicyState.uses_by_time``)."""

    def __init__(self, ctx: BatchContext, st: PolicyState, row: _Row, by_use: bool):
        self.ctx, self.live = ctx, row.live
        self.created = ctx.created_columns()  # ascending
        self.live_cols = row.live_cols  # the bands count live columns only
        self.last = st.last_access if by_use else None
        none = np.zeros(0, dtype=np.int64)
        self.rows, self.times, self.since = st.uses_by_time() if by_use else (none, none, none)
        if len(self.since):  # the live columns used since the list was made
            cols = self.ctx.columns_of(self.since)
            self.since = _union(cols[self.live[cols]])

    def origin(self, cols: np.ndarray) -> np.ndarray:
        """The origin of the columns ``cols``: the last use, else creation."""
        created = self.created[cols]
        if self.last is None:
            return created
        last = self.last[self.ctx.idx[cols]]
        return np.where(np.isnan(last), created, last)

    def newest_edges(self, ks: np.ndarray) -> np.ndarray:
        """For each k, a time at or after which about ``2 k`` notes have
        their origin: the k-th newest column's creation or, later, the k-th
        latest use."""
        n, m = len(self.live_cols), len(self.times)
        edges = self.created[self.live_cols[np.maximum(0, n - ks)]]
        if m:
            edges = np.maximum(edges, np.where(ks <= m, self.times[np.maximum(0, m - ks)],
                                               -np.inf))
        return edges

    def newer(self, edge: float) -> np.ndarray:
        """The live columns whose origin is at or after ``edge``, ascending."""
        first = int(np.searchsorted(self.created, edge, side="left"))
        cols = np.arange(first, len(self.created))
        cols = cols[self.live[cols]]
        if self.last is None:
            return cols
        used = self._used(self.rows[np.searchsorted(self.times, edge, side="left"):])
        used = used[(used < first) & (self.last[self.ctx.idx[used]] >= edge)]
        return _union(cols, used) if len(used) else cols

    def older(self, k: int) -> tuple[np.ndarray, float]:
        """The live columns whose origin is before an edge, ascending, and
        the edge: the creation of the k-th live column, or of the first
        created after it when others share its time (a bulk import); inf
        (every live column) when there are k or fewer."""
        n = len(self.created)
        last_col = int(self.live_cols[k]) if k < len(self.live_cols) else n
        if last_col < n:
            last_col = int(np.searchsorted(self.created, self.created[last_col], side="right"))
        edge = float(self.created[last_col]) if last_col < n else np.inf
        cols = np.arange(min(last_col, n))
        cols = cols[self.live[cols]]
        if self.last is None:
            return cols, edge
        cols = cols[np.isnan(self.last[self.ctx.idx[cols]])]  # else the origin is the last use
        used = self._used(self.rows[:np.searchsorted(self.times, edge, side="left")])
        used = used[self.last[self.ctx.idx[used]] < edge]
        return (_union(cols, used) if len(used) else cols), edge

    def _used(self, rows: np.ndarray) -> np.ndarray:
        """The live columns of the listed notes ``rows`` and of those used
        since the list was made (a last use only moves later: every note
        last used on one side of a time is among the two)."""
        cols = self.ctx.columns_of(rows)
        return np.concatenate([cols[self.live[cols]], self.since])

    def count_newer(self, edges: np.ndarray) -> np.ndarray:
        """At most how many notes have their origin at or after each edge."""
        n = len(self.created)
        k = n - np.searchsorted(self.created, edges, side="left")
        return k + len(self.times) - np.searchsorted(self.times, edges, side="left") + len(self.since)


def _row_top(policy: Policy, ctx: BatchContext, st: PolicyState, r: int, row: _Row,
             weights: tuple[float, float, float], c: int
             ) -> tuple[np.ndarray, np.ndarray, int] | None:
    """One row's top C (positions, scores) and the cells scored, or None."""
    w1, w2, w3 = weights
    n = row.n_live  # the bands count live notes
    t = float(ctx.t[r])
    origins = _Origins(ctx, st, row, policy.decay.clock == "last_access")
    floor = policy.decay.lower_bound()  # never undercut (Decay.falls_with_age_alone)
    margin = MARGIN * max(1.0, w1 + w2 + w3)

    form = policy.decay.exponential_form(ctx)

    def curve(origins) -> np.ndarray:
        """The recency a note of each origin gets on this row, computed as
        the engine scores it (``Policy.recency``: the separable form with the
        batch's anchor where the decay declares one, which may differ from
        ``Decay.recency`` by more than SLACK for subnormal values)."""
        origins = np.asarray(origins, dtype=np.float64)
        if form is not None:
            return separable_recency(ctx.t[r:r + 1], float(ctx.batch.t0), origins, form[0],
                                     np.asarray(form[1], dtype=np.float64))[0]
        return np.asarray(policy.decay.recency(t - origins, ctx), dtype=np.float64)

    def edges_curve(origins) -> np.ndarray | None:
        """:func:`curve`, or None where the decay fails on a few ages (it
        reads the context after all: the row is scored in full)."""
        try:
            got = curve(origins)
        except MemsimError:
            raise
        except Exception:  # noqa: BLE001 - the whole rows decide: slower, not wrong
            return None
        return got if got.shape == np.shape(origins) else None

    # the band of newest origins and the notes by u that the arm's last row
    # needed: scored at once with the bands of the recency's extremes, they
    # usually hold every note that can reach the top C
    width, count, age = st.minmax_guess or (NEW_PER_CANDIDATE * c, 4 * c, GUESS_ROWS)
    # (a small store starts narrower: the bands may grow before they give up)
    k_new, k_old = (max(1, min(k, n // (2 * FEW))) for k in (NEW_PER_CANDIDATE * c, OLD_COLUMNS))
    while True:
        if max(k_new, k_old) > n // FEW:
            return None  # a flat curve, a small store: whole rows cost less
        width = min(max(width, k_new), n // FEW)
        e_new, e_band = origins.newest_edges(np.array([k_new, width]))
        band = origins.newer(e_band)  # (e_band <= e_new: it holds the newer band)
        newer = band[origins.origin(band) >= e_new]
        older, e_old = origins.older(k_old)
        if len(newer) == 0 or len(older) == 0:
            k_new, k_old = (k_new * GROWTH if len(newer) == 0 else k_new,
                            k_old * GROWTH if len(older) == 0 else k_old)
            continue
        guess = row.threshold(count)
        by_u = np.flatnonzero(row.u >= guess)
        if len(by_u) < c:  # at least C live notes: tau below is a real C-th score
            # (every note whose u is above the least of the C best is one)
            by_u = row.best
            guess = float(np.nextafter(row.u[by_u].min(), np.inf))
        cols = _union(band, older, by_u)
        rec = _recency(policy, ctx, r, cols)
        if np.isnan(rec).any():
            return None
        hi = rec[np.searchsorted(cols, newer)].max()
        lo = rec[np.searchsorted(cols, older)].min()
        edge = edges_curve([e_new, e_old, e_band])
        if edge is None:
            return None
        # a band's extreme is the row's when every note outside it lies
        # strictly on the other side of the curve's value at its edge, or
        # (the lowest) when it is the curve's least value
        ok_new = edge[0] * (1.0 + SLACK) < hi
        ok_old = k_old >= n or edge[1] * (1.0 - SLACK) > lo or (floor is not None and lo <= floor)
        if ok_new and ok_old:
            break
        k_new, k_old = (k_new if ok_new else k_new * GROWTH,
                        k_old if ok_old else k_old * GROWTH)
    t1 = _Term(lo, hi, False)
    scores = _scores(weights, t1, row, rec, cols)
    if not np.isfinite(scores).all():
        return None  # an infinite importance: the reference's NaN scores
    # a score the top C reaches (cols holds C live notes or more)
    tau = np.partition(scores, len(scores) - c)[len(scores) - c]
    # outside the band, a note's recency is at most the curve at its edge:
    # it can reach tau only if its u reaches need
    need = tau - w1 * float(t1(edge[2:] * (1.0 + SLACK))[0]) - margin
    missed = need < guess
    if missed:  # the notes the guess left out
        more = np.flatnonzero((row.u >= need) & (row.u < guess) & (row.u > -np.inf))
        more = more[~_columns(cols, more)[1]]  # (cols: ascending, distinct)
        rec2 = _recency(policy, ctx, r, more)
        more_scores = _scores(weights, t1, row, rec2, more)
        if np.isnan(rec2).any() or not np.isfinite(more_scores).all():
            return None
        cols = np.concatenate([cols, more])
        order = np.argsort(cols, kind="stable")
        cols, scores = cols[order], np.concatenate([scores, more_scores])[order]
    if missed or age >= GUESS_ROWS:
        st.minmax_guess = (*_next_guess(origins, row, t1, curve, t, tau, margin, weights,
                                        k_new, n), 1)
    else:
        st.minmax_guess = (width, count, age + 1)
    p, v = top_candidates(scores[None, :], c)
    cc = min(c, n)
    return cols[p[0, :cc]], v[0, :cc], len(cols)


def _next_guess(origins: _Origins, row: _Row, t1: _Term, curve, t: float, tau: float,
                margin: float, weights: tuple[float, float, float], k_new: int, n: int
                ) -> tuple[int, float]:
    """The band width whose bound would have kept the fewest notes on this
    row, and about how many notes by u it keeps: the next row's guess."""
    widths = k_new * GROWTH ** np.arange(8)
    widths = widths[widths <= max(k_new, n // FEW)]
    edges = origins.newest_edges(widths)
    need = tau - weights[0] * t1(curve(edges) * (1.0 + SLACK)) - margin
    by_u = row.estimate(need)
    best = int(np.argmin(origins.count_newer(edges) + by_u))
    return int(widths[best]), float(1.25 * by_u[best] + 8)


def _union(*parts: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``parts`` (a sort: ``np.unique`` costs
    several times more on a few hundred values)."""
    x = np.sort(np.concatenate(parts))
    if len(x) > 1:
        x = x[np.concatenate([[True], x[1:] != x[:-1]])]
    return x


def _recency(policy: Policy, ctx: BatchContext, r: int, cols: np.ndarray) -> np.ndarray:
    """The recency of row ``r``'s notes ``cols`` as the full row computes it
    (the same float operations per cell)."""
    g = _GatheredContext(ctx, np.array([r]), cols[None, :], np.ones((1, len(cols)), dtype=bool))
    return np.broadcast_to(np.asarray(policy.recency(g), dtype=np.float64), (1, len(cols)))[0]


def _scores(weights: tuple[float, float, float], t1: _Term, row: _Row, rec: np.ndarray,
            cols: np.ndarray) -> np.ndarray:
    """``w1 n(rec) + w2 n(imp) + w3 n(rel)`` of the notes ``cols``, added left
    to right as :func:`memsim.policies.rank.minmax_sum` adds them (the
    similarity and importance are the row's own values at ``cols``)."""
    w1, w2, w3 = weights
    return w1 * t1(rec) + w2 * row.imp(row.imp_row[cols]) + w3 * row.rel(row.rel_row[cols])
