"""Accelerator ``"prune"``: a query's exact top C without scoring every live note.

Per query, the notes above a similarity threshold (a level of
:class:`~memsim.engine.cells.SimOrder`, shared by every arm) are scored;
the query is done when its C-th best score is strictly above the ranker's
``score_bound`` at the threshold (given the decay's ``upper_bound`` and
``lower_bound`` and the stickiness and breadth bounds), else the threshold
is lowered. Runs only for policies whose components declare those bounds
(:func:`_prune_plan`); the ``"filter"`` accelerator may prove the queries a
level does not.

It runs only while it pays (:func:`_judge`): a cell it scores costs about
ten times a cell of the full (Q, L) scoring (gathered, padded, filtered),
so an arm whose pruning scored more than :data:`PAYING_SHARE` of a batch's
cells (a recency that decays fast ranks many notes of middling similarity
high: the levels and the filter keep a third of the notes) scores its next
batches in full, and tries the pruning again after a rest that doubles
each time it did not pay (batches of fewer than :data:`MIN_JUDGED` cells
are not judged). Both ways give the same answers; the choice is made on
counts alone, so the same replay takes the same paths.

**Contract.** For every query of every arm it answers, the same top C
(the same notes in the same order, ties to the lower ``note_id``) and the
same score values, bit for bit, as :mod:`memsim.engine.reference`, which
scores every live note; hence the same packing, metrics and feedback.
``tests/test_accelerators.py`` checks it for every registered component,
with this accelerator alone and with the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from memsim.policies import Policy
from memsim.policies.base import Ranker
from .context import _GatheredContext
from .cells import _cell_scores, ladder_level, _live_cells, _proven, _sim_order
from .simfilter import _filtered_top, _recency_blocks
from .state import similarity_key
from .topc import top_candidates

if TYPE_CHECKING:
    from .context import BatchContext
    from .cells import SimOrder
    from .state import PolicyState


#: the pruning pays while it scores at most this share of a batch's cells
#: (queries x notes)
PAYING_SHARE = 0.1
#: batches scored in full after the first batch whose pruning did not pay;
#: twice as many after each next one, at most MAX_REST
FIRST_REST, MAX_REST = 2, 64
#: a batch of fewer cells is not judged: it costs about a millisecond
#: either way
MIN_JUDGED = 1 << 16


def _prune_plan(policy: Policy, ctx: BatchContext) -> tuple[float | None, float | None] | None:
    """(lowest, highest recency) the ranker's bound needs when the policy can
    be pruned (module docstring), else None."""
    r = policy.ranker
    if (r.set_dependent or r.needs_truth or r.needs_planted or r.needs_logged
            or r.chooses_candidates() or type(r).score_bound is Ranker.score_bound):
        return None
    if policy.breadth.score_factor_bound(ctx) != 1.0:
        return None
    lo = hi = None
    if r.uses_recency:
        hi = policy.decay.upper_bound()
        if hi is None:
            return None
        acc = policy.stickiness.access_term_bound(ctx)
        if acc is None:
            return None
        if acc > 0:
            f = policy.breadth.access_factor_bound(ctx)
            if f is None:
                return None
            hi = hi + acc * f
        hi = hi * (1.0 + 1e-9)  # rounding of the computed recency
        lo = policy.decay.lower_bound()
        if lo is not None and policy.decay.reads_salience and not ctx.notes.default_salience:
            lo = None  # it holds at default salience only (Decay.reads_salience)
        if lo is not None:
            lo = lo * (1.0 - 1e-9)
    if r.score_bound(np.zeros(1), lo, hi, ctx) is None:
        return None
    return lo, hi




def _pruned_top(policy: Policy, ctx: BatchContext, c: int, st: PolicyState,
                use_filter: bool = True) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`top_candidates` of the policy's masked scores without scoring
    every live note (module docstring), or None when the policy cannot be
    pruned (then the caller scores in full). ``use_filter``: the similarity
    filter (:mod:`.simfilter`, the ``"filter"`` accelerator) may prove the
    queries a level does not."""
    q, n = len(ctx.t), len(ctx.idx)
    if st.prune_off or n == 0:
        return None
    if st.prune_rest:  # the last pruning did not pay (_judge)
        st.prune_rest -= 1
        return None
    plan = _prune_plan(policy, ctx)
    if plan is None:
        return None
    scored = st.work["cells"]
    lo, hi = plan
    ranker, retriever = policy.ranker, policy.retriever
    cc = min(c, n)
    order = _sim_order(ctx, retriever)
    pos = np.zeros((q, cc), dtype=np.int64)
    vals = np.full((q, cc), -np.inf)
    todo = np.arange(q)
    base = ladder_level(2 * c)
    level = max(base, st.prune_level)
    need = 0
    highs: np.ndarray | bool | None = None  # per-block recency bounds, when first needed
    scanned = ladder_level(4 * level)  # the first scan's depth: levels down to it cost no pass
    far = 0  # notes the deepest filtered query would have scored on a level
    while len(todo):
        full = 2 * level >= order.n
        level_cells = order.cells(level, todo, full, similarity_key(retriever))
        cells, live = _live_cells(level_cells, ctx, c)
        cols, tau = cells.cols, cells.tau
        scores = _cell_scores(policy, _GatheredContext(ctx, todo, cols, live, cells), st)
        if scores is None:
            return None
        p, v = top_candidates(scores, c)  # columns ascending: ties to the lower
        with np.errstate(invalid="ignore", over="ignore"):
            bound = np.asarray(ranker.score_bound(tau, lo, hi, ctx), dtype=np.float64)
        done = _proven(v, cc, full, np.where(np.isneginf(tau), -np.inf, bound))
        if done.any():
            d = np.flatnonzero(done)
            every = len(d) == len(todo)  # the rows' own arrays, no copies
            rows = todo[d]
            w = min(cc, p.shape[1])  # fewer only when every open note was scored
            pos[rows, :w] = np.take_along_axis(cols if every else cols[d], p[d, :w], axis=1)
            vals[rows, :w] = v[d, :w]
            # notes a query had to score: those whose bound reaches its C-th score
            kth = v[d, cc - 1] if w == cc else np.full(len(d), -np.inf)
            if np.isfinite(kth).all():
                sim, real = ((level_cells.sim, level_cells.real) if every else
                             (level_cells.sim[d], level_cells.real[d]))
                with np.errstate(invalid="ignore", over="ignore"):
                    b = np.asarray(ranker.score_bound(sim, lo, hi, ctx), dtype=np.float64)
                need = max(need, int(((b >= kth[:, None]) & real).sum(axis=1).max()))
        if use_filter and not full and not done.all() and (level >= scanned or st.prune_filter):
            if highs is None:
                highs = _recency_blocks(policy, ctx, hi)
                highs = False if highs is None else highs
            # the level's C-th best score is one each query's top C reaches
            kth = v[:, cc - 1] if v.shape[1] >= cc else np.full(len(todo), -np.inf)
            filt = ~done & np.isfinite(kth)
            if highs is not False and filt.any():
                rows = todo[filt]
                got = _filtered_top(policy, ctx, c, st, order, highs, lo, rows, kth[filt])
                if got is None:
                    return None
                pos[rows], vals[rows] = got
                st.accelerated["filter"] += len(rows)
                done |= filt
                far = max(far, _level_needed(ranker, ctx, order, rows, got[1][:, cc - 1], lo, hi))
        todo = todo[~done]
        level = ladder_level(4 * level)
    # the next batch starts at the level its queries needed, unless that is
    # deeper than the first scan holds: then it filters after its first level
    st.prune_filter = far > ladder_level(4 * base)
    st.prune_level = max(base, ladder_level(1.1 * max(need, 0 if st.prune_filter else far) + c))
    _judge(st, st.work["cells"] - scored, q * n)
    return pos, vals


def _judge(st: PolicyState, scored: int, cells: int) -> None:
    """After a pruned batch of ``cells`` (queries x notes) that scored
    ``scored`` of them: when that is more than :data:`PAYING_SHARE`, the
    arm's next batches are scored in full (:data:`FIRST_REST` of them, twice
    as many as the last rest when the pruning again did not pay, at most
    :data:`MAX_REST`), else the rest starts from the first again. A batch
    of fewer than :data:`MIN_JUDGED` cells changes nothing."""
    if cells < MIN_JUDGED:
        return
    if scored > PAYING_SHARE * cells:
        st.prune_wait = min(2 * st.prune_wait, MAX_REST) if st.prune_wait else FIRST_REST
        st.prune_rest = st.prune_wait
    else:
        st.prune_wait = 0


def _level_needed(ranker: Ranker, ctx: BatchContext, order: SimOrder, rows: np.ndarray,
                  kth: np.ndarray, lo: float | None, hi: float | None) -> int:
    """About how many notes the deepest of the queries ``rows`` would have
    had to score on a level to prove its top C (C-th score ``kth``): those
    of the sample whose similarity reaches ``similarity_needed`` at the
    highest recency, scaled to the store."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        need = np.asarray(ranker.similarity_needed(kth, lo, hi, ctx), dtype=np.float64)
    above = (order.neg_sample[rows] <= -need[:, None]).sum(axis=1)
    return int(above.max(initial=0)) * order.n // order.neg_sample.shape[1]

