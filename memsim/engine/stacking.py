"""Accelerator ``"stack"``: arms that differ only by their decay scored as one array.

Per-tick arms with the same retriever, ranker, clock and C whose scores
differ only by their decay's floor and rate (a sweep's trials) go through
the pruned scoring's two steps (the base level, then the similarity filter)
as one array, a row per (arm, query); each cell's recency is computed by
the same float operations as the arm's own.

**Contract.** For every query of every arm it answers, the same top C
(the same notes in the same order, ties to the lower ``note_id``) and the
same score values, bit for bit, as :mod:`memsim.engine.reference`, which
scores every live note; hence the same packing, metrics and feedback.
``tests/test_accelerators.py`` checks it for every registered component,
with this accelerator alone and with the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from memsim.core.errors import MemsimError
from memsim.policies import Policy
from memsim.policies.base import Breadth, Stickiness
from .context import _clock_origin, separable_recency, _GatheredContext
from .cells import ladder_level, _sim_order
from .cells import _cells_scorable
from .pruning import _judge, _prune_plan
from .simfilter import _exponential_form, _filterable, kept_cells, _padded_cells, _recency_blocks
from .state import similarity_key
from .topc import _kth_best, _top_of_cells

if TYPE_CHECKING:
    from .context import BatchContext
    from .state import PolicyState


@dataclass(eq=False)
class _Member:
    """An arm of :func:`_stacked_tops`: its context, state, the bounds of its
    pruning and its decay's one exponential (floor, rate)."""

    key: Any
    policy: Policy
    ctx: BatchContext
    st: PolicyState
    lo: float | None
    highs: np.ndarray
    floor: float
    rate: float


def _stack_member(key: Any, policy: Policy, ctx: BatchContext, st: PolicyState
                  ) -> _Member | None:
    """The arm (one :func:`_stackable`) as a member of a stack, or None
    when its score of a cell is not ``ranker.combine(similarity, floor + (1
    - floor) exp(-rate age))`` alone with one floor and rate
    (:meth:`Policy.score` with a neutral stickiness and breadth, and a
    ranker that reads no use, so no state of its own) or it cannot be
    filtered (:func:`_recency_blocks`)."""
    if policy.decay.per_note_form or not _filterable(policy):
        return None  # before the form: a per-tier form is a pass over the notes
    form = _exponential_form(policy, ctx)
    if form is None or np.ndim(form[0]) or np.ndim(form[1]):
        return None
    plan = _prune_plan(policy, ctx)
    highs = None if plan is None else _recency_blocks(policy, ctx, plan[1])
    if highs is None:
        return None
    return _Member(key, policy, ctx, st, plan[0], highs, float(form[0]), float(form[1]))


def _stackable(policy: Policy, st: PolicyState) -> bool:
    """What :func:`_stack_member` asks of the components alone (no batch
    work): a neutral stickiness and breadth, a ranker that reads no use and
    scores gathered cells, no prefilter; and an arm whose pruning pays (one
    resting from it, :func:`~.pruning._judge`, is scored in full alone)."""
    s, b, r = policy.stickiness, policy.breadth, policy.ranker
    return not (st.prune_off or st.prune_rest or policy.retriever.prefilter
                or not _cells_scorable(policy)
                or not r.uses_recency or r.reads_uses()
                or type(s).access_term is not Stickiness.access_term
                or type(b).on_score is not Breadth.on_score)


def _stacked_tops(items: list[tuple[Any, Policy, BatchContext, int, PolicyState]]
                  ) -> dict[Any, tuple[np.ndarray, np.ndarray]]:
    """The top C of several arms at once, ``(key, policy, ctx, c, st)`` each:
    key -> (positions, scores) for the arms scored here; the others are
    scored one by one (:func:`_top`).

    Arms with the same retriever, ranker, clock and C whose scores differ
    only by their decay's floor and rate (:func:`_stack_member`) are scored
    as one array, a row per (arm, query), through the two steps of
    :func:`_pruned_top`: the base level's cells, then the cells its C-th best
    score keeps (:func:`_filtered_top`). A cell's recency is computed by the
    same float operations as the arm's own (:func:`separable_recency`
    with a floor and rate per row), so every arm gets its own scores bit
    for bit.
    """
    groups: dict[tuple, list[tuple]] = {}
    for key, policy, ctx, c, st in items:
        if _stackable(policy, st):
            groups.setdefault((repr(policy.retriever), repr(policy.ranker),
                               policy.decay.clock, c), []).append((key, policy, ctx, st))
    out: dict[Any, tuple[np.ndarray, np.ndarray]] = {}
    for (_, _, _, c), group in groups.items():
        # an arm alone is scored on its own: no member's bounds to compute
        members = [m for m in (_stack_member(*g) for g in group) if m is not None] \
            if len(group) > 1 else []
        if len(members) > 1:
            try:
                out.update(_stack_top(members, c))
            except _NotStackable:  # each scored alone (its own fallback to whole rows)
                pass
    return out


class _NotStackable(Exception):
    """The ranker failed on the gathered cells of a stack, or gave them
    another shape (a contributor's that treats a note vector as 1-D): its
    arms are scored one by one."""


def _stack_top(members: list[_Member], c: int) -> dict[Any, tuple[np.ndarray, np.ndarray]]:
    """:func:`_stacked_tops` of one group (empty when its store is too small
    for levels; an arm with a query short of C live notes on the base level
    is left to be scored on its own)."""
    ctx0, policy0 = members[0].ctx, members[0].policy
    q, n = len(ctx0.t), len(ctx0.idx)
    order = _sim_order(ctx0, policy0.retriever)
    level = ladder_level(2 * c)
    cc = min(c, n)
    if n == 0 or 2 * level >= order.n:
        return {}
    rows = np.arange(q)
    arm = np.repeat(np.arange(len(members)), q)  # the member of each (arm, query) row
    qrow = np.tile(rows, len(members))
    lv = order.cells(level, rows, False, similarity_key(policy0.retriever))
    cols = np.tile(lv.cols, (len(members), 1))
    live = np.concatenate([lv.real & m.ctx.live_cells(lv.flat, lv.cols, lv.valid)
                           for m in members])
    kth = _kth_best(_stack_scores(members, arm, qrow, cols, np.tile(lv.sim, (len(members), 1)),
                                  live), cc).reshape(len(members), q)
    # an arm with a query that has fewer than C live notes on the level
    # (one that evicted most of the store) is scored on its own
    ok = np.isfinite(kth).all(axis=1)
    if not ok.all():
        members = [m for m, k in zip(members, ok) if k]
        if len(members) < 2:
            return {}
        kth = kth[ok]
        arm = np.repeat(np.arange(len(members)), q)
        qrow = np.tile(rows, len(members))
    kth = kth.ravel()
    r, col = kept_cells(order, qrow, [(np.arange(k * q, (k + 1) * q), m.policy, m.ctx,
                                        kth[k * q:(k + 1) * q], m.lo, m.highs)
                                       for k, m in enumerate(members)])
    pos = np.zeros((len(arm), cc), dtype=np.int64)
    vals = np.full(pos.shape, -np.inf)
    where = np.full(len(arm), -1)
    for chunk in _chunks(np.bincount(r, minlength=len(arm))):
        where[chunk] = np.arange(len(chunk))
        pick = where[r] >= 0
        cells = _padded_cells(order, where[r[pick]], col[pick], qrow[chunk],
                              similarity_key(policy0.retriever))
        where[chunk] = -1
        live = cells.real.copy()
        for k in np.unique(arm[chunk]).tolist():
            at = np.flatnonzero(arm[chunk] == k)
            live[at] &= members[k].ctx.live_cells(cells.flat[at], cells.cols[at],
                                                  cells.valid[at])
        pos[chunk], vals[chunk] = _top_of_cells(
            _stack_scores(members, arm[chunk], qrow[chunk], cells.cols, cells.sim, live),
            cells.cols, c, n)
    # each arm judged by the cells it would have scored alone (its level's
    # and its own kept cells: the padding is the stack's)
    kept = np.bincount(arm[r], minlength=len(members))
    for m, k in zip(members, kept.tolist()):
        _judge(m.st, q * lv.cols.shape[1] + k, q * n)
    return {m.key: (pos[k * q:(k + 1) * q], vals[k * q:(k + 1) * q])
            for k, m in enumerate(members)}


def _chunks(counts: np.ndarray) -> list[np.ndarray]:
    """The rows (ascending) of one or two padded arrays for rows of
    ``counts`` cells: split where the padded area is least (a few rows that
    keep many more cells than the rest are padded apart)."""
    by = np.argsort(counts, kind="stable")
    c = counts[by]
    n = len(c)
    area = np.arange(1, n + 1) * c + (n - np.arange(1, n + 1)) * c[-1]  # split after k
    k = int(np.argmin(area)) + 1
    return [np.sort(by[:k]), np.sort(by[k:])] if k < n else [np.arange(n)]


def _stack_scores(members: list[_Member], arm: np.ndarray, qrow: np.ndarray, cols: np.ndarray,
                  sim: np.ndarray, live: np.ndarray) -> np.ndarray:
    """The scores of the cells ``cols`` of the rows ``qrow`` of the batch,
    each row scored by its member ``arm``, -inf where not live:
    :meth:`Policy.score` of each member, as one array."""
    ctx0, policy0 = members[0].ctx, members[0].policy
    clock = policy0.decay.clock
    idx = ctx0.idx[cols]
    if clock == "last_access":  # each arm's own uses
        origin = np.empty(idx.shape)
        for k in np.unique(arm).tolist():
            at = np.flatnonzero(arm == k)
            origin[at] = _clock_origin(clock, ctx0.notes, members[k].st, idx[at])
    else:
        origin = _clock_origin(clock, ctx0.notes, members[0].st, idx)
    floor = np.array([m.floor for m in members])[arm][:, None]
    rate = np.array([m.rate for m in members])[arm][:, None]
    rec = separable_recency(ctx0.t[qrow], ctx0.batch.t0, origin, floor, rate)
    # the ranker reads no use: any member's cells give it the same columns
    g = _GatheredContext(ctx0, qrow, cols, live)
    rel = sim if policy0.ranker.uses_similarity else None
    try:
        scores = np.asarray(policy0.ranker.combine(rel, rec, g), dtype=np.float64)
    except MemsimError:
        raise
    except Exception as exc:  # noqa: BLE001 - scored alone, where its error is its own
        raise _NotStackable from exc
    if scores.shape != cols.shape:
        raise _NotStackable
    for k, rows in enumerate(np.bincount(arm, minlength=len(members)).tolist()):
        members[k].st.work["cells"] += rows * cols.shape[1]
    return np.where(live & ~np.isnan(scores), scores, -np.inf)
