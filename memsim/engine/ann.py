"""An approximate prefilter and what it loses.

A retriever that chooses its own prefilter (:meth:`Retriever.chooses_prefilter`:
an approximate index, ``hnsw`` or ``ivf``) returns candidates that may miss some of the
exact nearest M. Both engines take its candidates through
:func:`chosen_prefilter`, which also compares them with the exact nearest M
on a fixed sample of the replay's queries and adds up, in the arm's
``work`` counters, what it finds:

- ``"overlap-queries"``: the sampled queries the arm answered;
- ``"overlap-exact"``: their exact nearest-M candidates, in all;
- ``"overlap-found"``: how many of those the retriever returned too.

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

__all__ = ["OVERLAP_QUERIES", "chosen_prefilter", "overlap_sample"]

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
    """``retriever.prefilter_mask(ctx, allowed)`` as (Q, L) bool; for a
    retriever that chooses its prefilter, the sampled queries of the batch
    are also answered exactly (the default :meth:`Retriever.prefilter_mask`,
    the nearest M by a full sort, on each one's row alone) and the overlap
    counted in ``ctx.state.work`` (module docstring)."""
    got = np.asarray(retriever.prefilter_mask(ctx, allowed), dtype=bool)
    if not retriever.chooses_prefilter():
        return got
    batch = ctx.batch
    sample = overlap_sample(len(batch.relevance.query_ids))
    rows = np.flatnonzero(np.isin(batch.qrows, sample))
    if not len(rows):
        return got
    allowed = np.broadcast_to(allowed, got.shape)
    exact = np.zeros((len(rows), got.shape[1]), dtype=bool)
    for k, i in enumerate(rows.tolist()):
        # the query's own row: its similarity alone, the same floats (a row
        # made here only is not left in the batch's cache)
        kept = ("row", i) in batch.cache
        one = batch.row(i) if len(batch.t) > 1 else batch
        exact[k] = Retriever.prefilter_mask(retriever, BatchContext(one, ctx.state, ctx.rng),
                                            allowed[i:i + 1])[0]
        if not kept:
            batch.cache.pop(("row", i), None)
    work = ctx.state.work
    work["overlap-queries"] += len(rows)
    work["overlap-exact"] += int(exact.sum())
    work["overlap-found"] += int((exact & got[rows]).sum())
    return got
