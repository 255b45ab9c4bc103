"""Accelerator ``"prefilter"``: a retriever prefilter's nearest M found
through the batch's similarity levels, and only its cells scored.

The reference takes :meth:`Retriever.prefilter_mask` (the exact nearest M by
a full sort of each row, unless the retriever searches otherwise) and scores
every note. Here, for a retriever that keeps the default, the same M notes
are found on the similarity levels (:func:`level_prefilter`: a threshold
lowered until the M-th found is strictly above it), and an arm whose
ranker scores gathered cells scores those (Q, M) cells alone; other arms
score the union of the batch's prefilter columns. A ranker that chooses its
own candidates and scores cells (``Ranker.scores_cells``: LangChain's, the
store's nearest and the newest few) is a prefilter of its own: its
candidates' cells are scored alone (:func:`_chosen_top`).

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
from .context import _GatheredContext
from .cells import ladder_level, _proven, _sim_order
from .cells import _cell_scores, _cells_scorable
from .state import similarity_key
from .topc import _packed_left, _top_of_cells, nonzero2, top_candidates

if TYPE_CHECKING:
    from .context import BatchContext
    from .state import PolicyState


def _prefilter_top(policy: Policy, ctx: BatchContext, c: int,
                   st: PolicyState) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`top_candidates` of the policy's masked scores when a prefilter
    leaves each query a few live notes (its M nearest): only those cells are
    scored, in column order (so ties still go to the lower note). None when
    the policy has no prefilter or must be scored in full."""
    if st.prune_off or not policy.retriever.prefilter or not _cells_scorable(policy):
        return None
    cells = ctx.prefilter_cells
    return _cells_top(policy, ctx, *(_mask_cells(ctx.live) if cells is None else cells), c, st)


def _chosen_top(policy: Policy, ctx: BatchContext, c: int, st: PolicyState
                ) -> tuple[tuple[np.ndarray, np.ndarray] | None, np.ndarray | None]:
    """:func:`top_candidates` of the policy's masked scores for a ranker
    that chooses its candidates and scores cells of them
    (``Ranker.scores_cells``): its candidates' cells alone are scored, in
    column order (so ties still go to the lower note). Returns ((positions,
    scores), the candidates' (Q, L) mask); (None, None) for another ranker,
    or one that reads what gathered cells lack (then scored in full)."""
    r = policy.ranker
    if st.prune_off or not (r.chooses_candidates() and r.scores_cells):
        return None, None
    mask = ctx.live & np.asarray(r.candidate_mask(ctx), dtype=bool)
    top = _cells_top(policy, ctx, *_mask_cells(mask), c, st)
    return (None, None) if top is None else (top, mask)


def _mask_cells(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cells of a (Q, L) mask as (Q, M) note columns, each row's
    ascending and packed to the left, and which are real."""
    rows, j0 = nonzero2(mask)  # row-major: each row's columns ascending
    cols, real, _ = _packed_left(rows, j0, np.bincount(rows, minlength=len(mask)))
    return cols, real


def _cells_top(policy: Policy, ctx: BatchContext, cols: np.ndarray, real: np.ndarray,
               c: int, st: PolicyState) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`top_candidates` of the policy's scores of the cells ``cols``
    (those ``real``) alone, as note columns; None when a component reads
    what gathered cells lack, or when the batch has no note yet (a query
    before the store's first note: the full scoring answers it, empty)."""
    if len(ctx.idx) == 0:
        return None
    g = _GatheredContext(ctx, np.arange(len(ctx.t)), cols, real)
    scores = _cell_scores(policy, g, st)
    return None if scores is None else _top_of_cells(scores, cols, c, len(ctx.idx))


def level_prefilter(ctx: BatchContext, retriever, evicted: np.ndarray
                    ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """The ``retriever.prefilter`` most similar valid, unevicted notes of
    each query (ties to the lower ``note_id``), as (Q, L) bool: an exact
    nearest-M search. Like the pruned scoring, it looks only at the notes
    above a similarity threshold (the batch's shared levels) and lowers it
    until the M-th found is strictly above it. Also returns the same cells
    as (Q, M) note columns, ascending in each row, and which are real."""
    m = retriever.prefilter
    order = _sim_order(ctx, retriever)
    keep = np.zeros(order.sim.shape, dtype=bool)
    none = order.n_all  # sorts after every column
    chosen = np.full((len(keep), m), none, dtype=np.int64)
    todo = np.arange(len(keep))
    level = ladder_level(2 * m)
    while len(todo):
        full = 2 * level >= order.n
        cells = order.cells(level, todo, full, similarity_key(retriever))
        live = cells.valid & ~evicted[cells.cols]
        pos, vals = top_candidates(np.where(live, cells.sim, -np.inf), m)
        done = _proven(vals, m, full, cells.tau)  # a note left out is at or below tau
        d = np.flatnonzero(done)
        cols = np.take_along_axis(cells.cols[d], pos[d], axis=1)
        rows = np.broadcast_to(todo[d][:, None], cols.shape)
        ok = np.isfinite(vals[d])
        keep[rows[ok], cols[ok]] = True
        chosen[todo[d], :cols.shape[1]] = np.where(ok, cols, none)
        todo = todo[~done]
        level = ladder_level(4 * level)
    chosen.sort(axis=1)
    real = chosen < none
    chosen[~real] = 0
    return keep, (chosen, real)
