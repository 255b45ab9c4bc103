"""An approximate prefilter and what it loses.

A retriever that chooses its own prefilter (:meth:`Retriever.chooses_prefilter`:
an approximate index, ``hnsw`` or ``ivf``) returns candidates that may miss some of the
exact nearest M. Both engines take its candidates through
:func:`chosen_cells` (the reference as a mask, :func:`chosen_prefilter`),
which also compares them with the exact nearest M
on a fixed sample of the replay's queries and adds up, in the arm's
``work`` counters, what it finds:

- ``"overlap-queries"``: the sampled queries the arm answered;
- ``"overlap-exact"``: their exact nearest-M candidates, in all;
- ``"overlap-found"``: how many of those the retriever returned too, a
  note tied with a query's M-th nearest counting as one of them while the
  tie has places left (the exact order keeps the lower column of a tie;
  an index that returns the other has lost nothing).

``arms.csv``'s ``prefilter_overlap`` is ``found / exact`` (the share of the
exact candidates the index returned, the recall of its top M over the
sample; 1 when it loses none) and ``prefilter_sampled`` the queries
(:func:`memsim.engine.frames.prefilter_overlap`).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from memsim.policies import Retriever
from memsim.core.rng import child, seed_sequence
from .context import BatchContext

__all__ = ["OVERLAP_QUERIES", "chosen_cells", "chosen_prefilter", "overlap_sample"]

#: queries per replay whose approximate candidates are compared with the exact ones
OVERLAP_QUERIES = 200


@lru_cache(maxsize=16)
def overlap_sample(n_queries: int) -> np.ndarray:
    """The query rows (ascending) of a stream of ``n_queries`` queries whose
    candidates are compared: ``min(n, OVERLAP_QUERIES)`` drawn without
    replacement from the named stream ``"prefilter-overlap"`` of seed 0, so
    that every replay of a stream (every arm, both engines) samples the
    same queries."""
    rng = child(seed_sequence(0), "prefilter-overlap")
    rows = rng.choice(n_queries, size=min(n_queries, OVERLAP_QUERIES), replace=False)
    rows = np.sort(rows)
    rows.setflags(write=False)
    return rows


def chosen_prefilter(ctx: BatchContext, retriever: Retriever, allowed: np.ndarray
                     ) -> np.ndarray:
    """The cells of :func:`chosen_cells` as a (Q, L) bool mask."""
    keep = np.zeros(np.shape(allowed), dtype=bool)
    keep[chosen_cells(ctx, retriever, allowed)] = True
    return keep


def chosen_cells(ctx: BatchContext, retriever: Retriever, allowed: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``retriever.prefilter_cells(ctx, allowed)`` (query rows, note
    columns; ``allowed`` (Q, L) bool); for a retriever that chooses its
    prefilter, the sampled queries of the batch are also answered exactly
    (:meth:`Retriever.near_levels`: the default prefilter's nearest M,
    and the notes tied with the M-th) and the overlap counted in ``ctx.state.work`` (module docstring)."""
    allowed = np.broadcast_to(np.asarray(allowed, dtype=bool), (len(ctx.t), len(ctx.idx)))
    qi, cols = retriever.prefilter_cells(ctx, allowed)
    if not retriever.chooses_prefilter():
        return qi, cols
    batch = ctx.batch
    sample = overlap_sample(len(batch.relevance.query_ids))
    rows = np.flatnonzero(np.isin(batch.qrows, sample))
    if not len(rows):
        return qi, cols
    # a note tied with the M-th nearest is as near as the one the exact
    # order keeps (the lower column): it fills a tied place as well
    level = retriever.near_levels(ctx, allowed, rows)
    exact = np.minimum(np.count_nonzero(level, axis=1), retriever.prefilter)
    at = np.full(len(ctx.t), -1, dtype=np.int64)
    at[rows] = np.arange(len(rows))  # each sampled query's row of ``level``
    hit = at[qi] >= 0
    got = level[at[qi[hit]], cols[hit]]
    above = np.count_nonzero(level == 2, axis=1)
    found = (np.bincount(at[qi[hit]], weights=got == 2, minlength=len(rows))
             + np.minimum(np.bincount(at[qi[hit]], weights=got == 1, minlength=len(rows)),
                          exact - above))
    work = ctx.state.work
    work["overlap-queries"] += len(rows)
    work["overlap-exact"] += int(exact.sum())
    work["overlap-found"] += int(found.sum())
    return qi, cols
