"""Accelerator ``"stack"``: arms that differ only by their decay scored as one array.

Arms with the same retriever, ranker, clock and C whose scores differ
only by their decay's floor and rate, one per arm or one per note (a
sweep's trials; a per-tier decay's by each note's tier) go through the
pruned scoring's steps (the similarity levels, then the similarity filter)
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
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from memsim.core.errors import MemsimError
from memsim.policies import Policy
from memsim.policies.base import Breadth, Stickiness
from memsim.policies.context import AGE_CLOCKS
from .context import _clock_origin, separable_recency, _GatheredContext
from .cells import ladder_level, _proven, _sim_order
from .cells import _cells_scorable
from .pruning import _judge, _prune_plan
from .simfilter import _filterable, kept_cells, _padded_cells, _recency_blocks
from .state import similarity_key
from .topc import _top_of_cells, top_candidates

if TYPE_CHECKING:
    from .context import BatchContext
    from .state import PolicyState


@dataclass(eq=False)
class _Member:
    """An arm of :func:`_stacked_tops`: its context, state, the bounds of its
    pruning (its recency's lowest and highest) and its decay's exponential
    form (floor, rate): 0-d, or None for a form per note (a per-tier
    decay's, by each note's tier in the arm's state), found on the cells
    scored (:func:`_member_forms`)."""

    key: Any
    policy: Policy
    ctx: BatchContext
    st: PolicyState
    lo: float | None
    hi: float
    floor: np.ndarray | None
    rate: np.ndarray | None

    @cached_property
    def highs(self) -> np.ndarray:
        """Per block of columns, the highest recency
        (:func:`_recency_blocks`, which :func:`_stack_member`'s checks make
        an array): computed when the filter first needs it."""
        return _recency_blocks(self.policy, self.ctx, self.hi)


def _stack_member(key: Any, policy: Policy, ctx: BatchContext, st: PolicyState
                  ) -> _Member | None:
    """The arm (one :func:`_stackable`) as a member of a stack, or None
    when its score of a cell is not ``ranker.combine(similarity, floor + (1
    - floor) exp(-rate age))`` alone, with one floor and rate or one per
    note (:meth:`Policy.score` with a neutral stickiness and breadth, and a
    ranker that reads no use, so no state of its own; a per-tier decay's
    form reads the arm's tiers) of one of the notes' clocks, or the ranker
    declares no bound to prune it by (:func:`_prune_plan`) or no
    ``similarity_needed`` (:func:`_filterable`)."""
    if (not _filterable(policy) or policy.decay.clock not in AGE_CLOCKS
            or len(ctx.idx) == 0):
        return None
    # the form's kind, on one cell: a form per note is found on the cells
    # scored, as the arm's own scoring finds it (not a pass over the store)
    one = np.zeros((1, 1), dtype=np.int64)
    form = policy.decay.exponential_form(_GatheredContext(ctx, one[0], one, one == 0))
    if form is None:
        return None
    floor, rate = (np.asarray(x, dtype=np.float64) for x in form)
    if floor.ndim or rate.ndim:
        floor = rate = None
    plan = _prune_plan(policy, ctx)
    if plan is None or plan[1] is None:
        return None
    return _Member(key, policy, ctx, st, plan[0], plan[1], floor, rate)


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
    as one array, a row per (arm, query), through the steps of
    :func:`_pruned_top`: the similarity levels, and past the first scan's
    depth the cells a level's C-th best score keeps (:func:`_filtered_top`).
    A cell's recency is computed by the
    same float operations as the arm's own (:func:`separable_recency`
    with a floor and rate per row, or per cell), so every arm gets its own scores bit
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


#: the filter's blocks are read for a stack's rows when their queries are
#: at least 1/FILTER_SHARE of the batch's (or another arm read them already)
FILTER_SHARE = 4


class _NotStackable(Exception):
    """The ranker failed on the gathered cells of a stack, or gave them
    another shape (a contributor's that treats a note vector as 1-D): its
    arms are scored one by one."""


def _stack_top(members: list[_Member], c: int) -> dict[Any, tuple[np.ndarray, np.ndarray]]:
    """:func:`_stacked_tops` of one group (empty when its store is too small
    for levels): the levels of :func:`_pruned_top`, a row per (arm, query).
    A row whose top C a level proves (:func:`_proven`, at its arm's bound)
    is done; past the first scan's depth, a row with C live notes on the
    level keeps only the cells its C-th score needs (:func:`kept_cells`);
    the others go down to the next level, as each arm's own would. The
    filter reads the blocks' largest similarities, a pass over the batch's
    similarity: when few queries are left to filter and no arm has read
    them yet, their rows go down the levels instead (a pass over each)."""
    ctx0, policy0 = members[0].ctx, members[0].policy
    ranker = policy0.ranker
    q, n = len(ctx0.t), len(ctx0.idx)
    order = _sim_order(ctx0, policy0.retriever)
    base = ladder_level(2 * c)
    cc = min(c, n)
    if n == 0 or 2 * base >= order.n:
        return {}
    level = base
    key = similarity_key(policy0.retriever)
    arm = np.repeat(np.arange(len(members)), q)  # the member of each (arm, query) row
    qrow = np.tile(np.arange(q), len(members))
    pos = np.zeros((len(arm), cc), dtype=np.int64)
    vals = np.full(pos.shape, -np.inf)
    # the cells each member would have scored alone (the padding is the stack's)
    scored = np.zeros(len(members), dtype=np.int64)
    scanned = ladder_level(4 * level)  # the first scan's depth: levels down to it cost no pass
    todo = np.arange(len(arm))
    while len(todo):
        full = 2 * level >= order.n
        queries, at = np.unique(qrow[todo], return_inverse=True)
        lv = order.cells(level, queries, full, key)
        cols, tau = lv.cols[at], lv.tau[at]
        live = lv.real[at]
        bound = np.empty(len(todo))
        for k, i in _by_member(arm[todo]):
            m = members[k]
            live[i] &= m.ctx.live_cells(lv.flat[at[i]], cols[i], lv.valid[at[i]])
            with np.errstate(invalid="ignore", over="ignore"):
                bound[i] = np.asarray(ranker.score_bound(tau[i], m.lo, m.hi, m.ctx),
                                      dtype=np.float64)
        p, v = top_candidates(_stack_scores(members, arm[todo], qrow[todo], cols,
                                            lv.sim[at], live), c)  # ties to the lower column
        np.add.at(scored, arm[todo], cols.shape[1])
        done = _proven(v, cc, full, np.where(np.isneginf(tau), -np.inf, bound))
        d = np.flatnonzero(done)
        if len(d):
            w = min(cc, p.shape[1])  # fewer only when every open note was scored
            pos[todo[d], :w] = np.take_along_axis(cols[d], p[d, :w], axis=1)
            vals[todo[d], :w] = v[d, :w]
        if not full and not done.all() and level >= scanned:
            # the level's C-th best score is one each row's top C reaches
            kth = v[:, cc - 1] if v.shape[1] >= cc else np.full(len(todo), -np.inf)
            filt = ~done & np.isfinite(kth)
            if (filt.any() and not order.has_block_max
                    and FILTER_SHARE * len(np.unique(qrow[todo[filt]])) < q):
                filt[:] = False
            if filt.any():
                _stack_filtered(members, order, c, n, todo[filt], arm, qrow, kth[filt],
                                (pos, vals), scored)
                done |= filt
        todo = todo[~done]
        level = ladder_level(4 * level)
    for m, k in zip(members, scored.tolist()):
        _judge(m.st, k, q * n)
    return {m.key: (pos[k * q:(k + 1) * q], vals[k * q:(k + 1) * q])
            for k, m in enumerate(members)}


def _by_member(arm: np.ndarray) -> list[tuple[int, slice]]:
    """(member, its rows in ``arm``) for each member there: ``arm`` is
    non-decreasing (rows are taken in order, and a member's are
    consecutive), so each member's rows are a slice (views, not copies)."""
    ks = np.unique(arm)
    ends = np.searchsorted(arm, ks, side="right")
    return [(k, slice(int(e) - n, int(e)))
            for k, e, n in zip(ks.tolist(), ends, np.bincount(arm)[ks])]


def _stack_filtered(members: list[_Member], order, c: int, n: int, rows: np.ndarray,
                    arm: np.ndarray, qrow: np.ndarray, kth: np.ndarray,
                    out: tuple[np.ndarray, np.ndarray], scored: np.ndarray) -> None:
    """:func:`_filtered_top` of the stack's ``rows`` (ascending), given
    each one's C-th score on a level ``kth``: written into ``out``."""
    a, qs = arm[rows], qrow[rows]
    r, col = kept_cells(order, qs, [(np.arange(i.start, i.stop), members[k].policy,
                                     members[k].ctx, kth[i], members[k].lo, members[k].highs)
                                    for k, i in _by_member(a)])
    np.add.at(scored, a[r], 1)
    key = similarity_key(members[0].policy.retriever)
    where = np.full(len(rows), -1)
    for chunk in _chunks(np.bincount(r, minlength=len(rows))):
        where[chunk] = np.arange(len(chunk))
        pick = where[r] >= 0
        cells = _padded_cells(order, where[r[pick]], col[pick], qs[chunk], key)
        where[chunk] = -1
        live = cells.real.copy()
        for k, i in _by_member(a[chunk]):
            live[i] &= members[k].ctx.live_cells(cells.flat[i], cells.cols[i], cells.valid[i])
        out[0][rows[chunk]], out[1][rows[chunk]] = _top_of_cells(
            _stack_scores(members, a[chunk], qs[chunk], cells.cols, cells.sim, live),
            cells.cols, c, n)


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
    :meth:`Policy.score` of each member, as one array (``arm``
    non-decreasing)."""
    ctx0, policy0 = members[0].ctx, members[0].policy
    clock = policy0.decay.clock
    idx = ctx0.idx[cols]
    if clock == "last_access":  # each arm's own uses
        origin = np.empty(idx.shape)
        for k, i in _by_member(arm):
            origin[i] = _clock_origin(clock, ctx0.notes, members[k].st, idx[i])
    else:
        origin = _clock_origin(clock, ctx0.notes, members[0].st, idx)
    floor, rate = _member_forms(members, arm, qrow, cols, live)
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


def _member_forms(members: list[_Member], arm: np.ndarray, qrow: np.ndarray, cols: np.ndarray,
                  live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's floor and rate: (R, 1) when every member has one of each,
    else (R, W), each cell's own: a member's form per note found on its
    cells (a per-tier decay's, by each cell's note's tier in its state), as
    its own scoring finds it (:meth:`Policy.score` on gathered cells)."""
    if all(m.floor is not None for m in members):
        return (np.array([m.floor for m in members])[arm][:, None],
                np.array([m.rate for m in members])[arm][:, None])
    floor, rate = np.empty(cols.shape), np.empty(cols.shape)
    for k, i in _by_member(arm):
        m = members[k]
        if m.floor is not None:
            floor[i], rate[i] = m.floor, m.rate
            continue
        form = m.policy.decay.exponential_form(_GatheredContext(m.ctx, qrow[i], cols[i],
                                                                live[i]))
        try:
            floor[i], rate[i] = form
        except (TypeError, ValueError):  # no form, or not one per cell: one by one
            raise _NotStackable from None
    return floor, rate
