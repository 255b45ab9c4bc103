"""Scoring an arm on a batch: its context, its top C, its packing."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from memsim.core.errors import ConfigError
from memsim.policies import Policy
from .ann import chosen_cells
from .arms import _pack_all, _Packed
from .context import BatchContext
from .prefilter import level_prefilter, _chosen_top, _prefilter_top
from .cells import _cells_scorable
from .minmax import _minmax_top, declared_weights
from .pruning import _pruned_top
from .stacking import _stacked_tops
from .state import similarity_key
from .topc import nonzero2, top_candidates
from .uses import _feedback, _feedback_uses, _reads_packing

if TYPE_CHECKING:
    from .arms import _ArmJob
    from .batch import Batch
    from .state import PolicyState


def _scoring_context(policy: Policy, st: PolicyState, rng, batch: Batch,
                     accelerators: tuple[str, ...], touch_before: bool = True
                     ) -> tuple[BatchContext, Batch]:
    """The context an arm scores, with ``live`` set: the batch's valid,
    unevicted notes, cut to the retriever's prefilter (and, with the
    ``"prefilter"`` accelerator when the ranker allows it, to the union of
    the prefilter's columns). Applies a prefilter touch that comes before
    scoring (Feather DB v0.16) unless ``touch_before`` is False (the walk
    scores on the state before it, and corrects each query for it)."""
    fb = policy.feedback
    fast = "prefilter" in accelerators
    if not policy.retriever.prefilter and not policy.ranker.needs_logged:
        ctx = BatchContext(batch, st, rng)
        ctx.set_live_lazily(batch.valid, st.evicted[batch.rows])
        return ctx, batch
    mask = cells = chosen = None
    ctx = BatchContext(batch, st, rng)
    if policy.retriever.prefilter:
        if fast and not policy.retriever.chooses_prefilter():
            # the exact nearest M, through the batch's similarity levels
            mask, cells = level_prefilter(ctx, policy.retriever, st.evicted[batch.rows])
        else:  # the retriever's own (an ANN index's, or the exact one by a full sort)
            chosen = chosen_cells(ctx, policy.retriever,
                                  batch.valid & ~st.evicted[batch.rows][None, :])
        if fb.touches_before_scoring and touch_before:
            qi, li = nonzero2(mask) if chosen is None else chosen
            st.touch(batch.idx[li], batch.actors[qi], batch.t[qi], fb)
            ctx = BatchContext(batch, st, rng)
        if cells is not None and not st.prune_off and _cells_scorable(policy):
            # the prefilter's cells are what the arm scores (_prefilter_top)
            ctx.prefilter_cells = cells
        elif fast and not policy.ranker.set_dependent:
            # only the prefilter's notes can be ranked: score those columns
            # alone (their union over the batch's queries)
            if chosen is None:
                cols = np.flatnonzero(mask.any(axis=0))
                mask = mask[:, cols]
            else:
                cols = np.unique(chosen[1])
                mask = _cells_mask(len(batch.t), cols, *chosen)
            batch = batch.subset(cols)
            ctx = BatchContext(batch, st, rng)
        if chosen is not None and mask is None:  # every column: the cells themselves
            mask = np.zeros(batch.valid.shape, dtype=bool)
            mask[chosen] = True
    if mask is None:
        mask = batch.valid & ~st.evicted[batch.rows][None, :]
    if policy.ranker.needs_logged:
        # replaying a production system: only the notes it returned
        if ctx.logged_rank is None:
            raise ConfigError(f"ranker {policy.ranker.name!r} needs a stream with logged "
                              "rankings (retrieved.parquet, from a trace's 'retrieved' events)")
        mask = mask & np.isfinite(ctx.logged_rank)
    ctx.live = mask
    return ctx, batch


def _cells_mask(q: int, cols: np.ndarray, qi: np.ndarray, li: np.ndarray) -> np.ndarray:
    """(Q, len(cols)) bool: the cells (``qi``, ``li``) over the columns
    ``cols`` (ascending, holding every ``li``)."""
    mask = np.zeros((q, len(cols)), dtype=bool)
    mask[qi, np.searchsorted(cols, li)] = True
    return mask


def _top(policy: Policy, ctx: BatchContext, c: int, st: PolicyState,
         accelerators: tuple[str, ...], peers: int = 1
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The arm's top C (positions, scores) and, when every note was scored
    or a ranker chose its candidates, the mask of the notes that could be
    candidates (None when another accelerator found it). ``peers``: the
    arms scored on the batch beside it with the same min-max terms
    (:func:`_minmax_peers`), itself included."""
    q = len(ctx.t)
    top = mask = None
    if "prefilter" in accelerators:
        top = _prefilter_top(policy, ctx, c, st)
        if top is None:  # a ranker's own candidates, as a prefilter of its own
            top, mask = _chosen_top(policy, ctx, c, st)
        if top is not None:
            st.accelerated["prefilter"] += q
    if top is None and "minmax" in accelerators:
        top = _minmax_top(policy, ctx, c, st, peers)
        if top is not None:
            st.accelerated["minmax"] += q
    if top is None and "prune" in accelerators:
        top = _pruned_top(policy, ctx, c, st, "filter" in accelerators)
        if top is not None:
            st.accelerated["prune"] += q
    if top is not None:
        return top[0], top[1], mask
    mask = ctx.live
    scores = np.asarray(policy.score(ctx), dtype=np.float64)
    st.work["cells"] += scores.size
    if policy.ranker.chooses_candidates():  # LangChain's: its own candidates
        mask = mask & np.asarray(policy.ranker.candidate_mask(ctx), dtype=bool)
    # a cell not live, or NaN, is -inf (read so by the selection)
    pos, vals = top_candidates(scores, c, mask)
    return pos, vals, mask


def _minmax_peers(jobs: list[_ArmJob]) -> list[int]:
    """For each job, how many of ``jobs`` share its min-max terms (the same
    similarity, importance weight and relevance weight, and C): the arms
    among which the ``"minmax"`` accelerator shares a query row's work."""
    keys = [None if (w := declared_weights(job.arm.policy.ranker)) is None else
            (similarity_key(job.arm.policy.retriever), w[1:], job.c) for job in jobs]
    return [1 if k is None else keys.count(k) for k in keys]


def _answer(job: _ArmJob) -> _Packed:
    """The batch's candidates and packing on the arm's state at its start,
    then its uses applied."""
    return _answer_all([job])[0][1]


def _answer_all(jobs: list[_ArmJob], pending: list[list] | None = None, pack: bool = True
                ) -> list[tuple[Batch, _Packed]]:
    """:func:`_answer` of several arms: (the batch each scored, its packing).
    With ``pending`` (a list per job), each arm's uses are appended to its
    list instead of recorded (a part of a tick: recorded after the tick).
    Without ``pack`` (for feedback that reads no packing), only the
    candidates (``pos``, ``vals``, ``cand_ok``, ``cand_rows``) are set: the
    caller packs them later, several queries at once."""
    scored = []
    contexts = [_scoring_context(job.arm.policy, job.st, job.rng, job.batch,
                                 job.accelerators) for job in jobs]
    stacked = _stacked_tops([(i, job.arm.policy, ctx, job.c, job.st)
                             for i, (job, (ctx, _)) in enumerate(zip(jobs, contexts))
                             if "stack" in job.accelerators])
    peers = _minmax_peers(jobs)
    for i, (job, (ctx, batch)) in enumerate(zip(jobs, contexts)):
        policy, st = job.arm.policy, job.st
        if i in stacked:
            pos, vals, mask = *stacked[i], None
            st.accelerated["stack"] += len(pos)
        else:
            pos, vals, mask = _top(policy, ctx, job.c, st, job.accelerators, peers[i])
        # keep only what the feedback reads (the prefilter touch: the
        # candidates' mask), not the context: (Q, L) matrices per arm
        if policy.feedback.touch != "prefilter":
            mask = None
        elif mask is None:
            mask = ctx.live
        scored.append((batch, pos, vals, mask))
    if pack:
        packs = _pack_all([(job, batch, pos, vals, slice(None))
                           for job, (batch, pos, vals, _) in zip(jobs, scored)])
    else:
        assert not any(_reads_packing(job.arm.policy.feedback) for job in jobs)
        packs = [_Packed(pos, vals, np.isfinite(vals), batch.idx[pos], *(None,) * 4)
                 for batch, pos, vals, _ in scored]
    # 5. feedback (after the ranker's own per-note state, read before the uses)
    for i, (job, (ctx, _), (batch, *_, mask), pk) in enumerate(zip(jobs, contexts, scored,
                                                                    packs)):
        job.st.update_note_state(job.arm.policy.ranker, ctx)
        if pending is None:
            _feedback(job.arm.policy.feedback, job.st, batch, mask, pk)
        else:
            pending[i].append(_feedback_uses(job.arm.policy.feedback, batch, mask, pk))
    return [(batch, pk) for (batch, *_), pk in zip(scored, packs)]
