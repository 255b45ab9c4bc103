"""Accelerator ``"filter"``: the similarity filter of the pruned scoring.

Within ``"prune"`` (it does nothing on its own): when the levels the
batch's first scan holds do not prove a query's top C and the recency is
one exponential of a clock (``Decay.exponential_form``, whose curve is
``Decay.exponential_curve``), a level's C-th best score is one the top C
reaches, so only the notes whose similarity reaches the ranker's
``similarity_needed`` at it and at the highest recency of their block of
columns can be in it, or tie; those alone are scored.

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
from memsim.policies.base import Ranker, Stickiness
from memsim.policies.context import AGE_CLOCKS
from .context import _GatheredContext
from .cells import BLOCK, GROUP, _LevelCells, _live_cells
from .cells import _cell_scores
from .state import similarity_key
from .topc import _packed_left, _top_of_cells

if TYPE_CHECKING:
    from .context import BatchContext
    from .cells import SimOrder
    from .state import PolicyState


def _exponential_form(policy: Policy, ctx: BatchContext):
    """``policy.decay.exponential_form(ctx)``, computed once per arm and
    batch (the stack and the arm's own pruning both ask; a per-tier form is
    a pass over the batch's notes)."""
    got = ctx.__dict__.get("_exponential_form")
    if got is None or got[0] is not policy.decay:
        got = ctx.__dict__["_exponential_form"] = (policy.decay,
                                                   policy.decay.exponential_form(ctx))
    return got[1]


def _filterable(policy: Policy) -> bool:
    """What :func:`_recency_blocks` asks of the components alone (no batch
    work): a ranker that declares ``similarity_needed`` and the plain clock
    as the age."""
    return (type(policy.ranker).similarity_needed is not Ranker.similarity_needed
            and type(policy.stickiness).effective_age is Stickiness.effective_age)


def _recency_blocks(policy: Policy, ctx: BatchContext, hi: float | None) -> np.ndarray | None:
    """Per block of :data:`BLOCK` consecutive columns (B,), the highest
    recency term any of its notes has at any query of the batch, at most
    the policy's ``hi``; None when the ranker declares no
    ``similarity_needed`` or the recency is not an exponential of a clock
    (``Decay.exponential_form`` of the plain age), whose highest value per
    note is known."""
    if hi is None or not _filterable(policy):
        return None
    form = _exponential_form(policy, ctx)
    clock = policy.decay.clock
    if form is None or clock not in AGE_CLOCKS:
        return None
    floor, rate = (np.asarray(x, dtype=np.float64) for x in form)
    starts = np.arange(0, len(ctx.idx), BLOCK)
    per_note = floor.ndim > 0 or rate.ndim > 0
    falls = _falls_with_age(floor, rate)
    if not per_note or falls:
        # a block's extremes of the clock's origin: its newest and oldest
        # note (the same for every arm on the creation and update clocks;
        # an arm's own last-access clock whose curve falls reads the newest
        # only)
        def extremes(oldest: bool = True):
            origin = ctx.clock_origin(clock)
            return (np.maximum.reduceat(origin, starts),
                    np.minimum.reduceat(origin, starts) if oldest else None)

        newest, oldest = (extremes(not falls) if clock == "last_access"
                          else ctx.shared(("origin-blocks", clock), extremes))
    else:
        newest = oldest = ctx.clock_origin(clock)
    with np.errstate(over="ignore", invalid="ignore"):
        curve = policy.decay.exponential_curve
        if falls:
            # every note's curve falls with its age, rises with its floor
            # and falls with its rate: a block's highest value is at most
            # the curve at its youngest age, highest floor and lowest rate
            # (per block, not per note: a per-tier decay at ten million
            # notes otherwise evaluates two curves per note and batch)
            if per_note:
                floor = _block_reduce(np.maximum, floor, starts, len(ctx.idx))
                rate = _block_reduce(np.minimum, rate, starts, len(ctx.idx))
            rec = curve(float(ctx.t.min()) - newest, floor, rate)
        else:
            # the curve is monotone in the age: its highest value over the
            # batch's queries is at the youngest age or at the oldest
            rec = np.maximum(curve(float(ctx.t.min()) - newest, floor, rate),
                             curve(float(ctx.t.max()) - oldest, floor, rate))
            if rec.shape != starts.shape:
                rec = np.maximum.reduceat(rec, starts)
        acc = policy.stickiness.access_term_bound(ctx)
        if acc:
            rec = rec + acc * policy.breadth.access_factor_bound(ctx)
        # the rounding of the computed recency; never above hi (NaN -> hi)
        return np.fmin(rec * (1.0 + 1e-9), hi)


def _falls_with_age(floor: np.ndarray, rate: np.ndarray) -> bool:
    """Whether every curve ``floor + (1 - floor) * exp(-rate * age)`` is
    non-increasing in the age (``age >= 0``), non-decreasing in its floor
    and non-increasing in its rate: every rate >= 0 and every floor <= 1
    (False with a NaN)."""
    return bool(np.all(rate >= 0.0)) and bool(np.all(floor <= 1.0))


def _block_reduce(ufunc, x: np.ndarray, starts: np.ndarray, n: int) -> np.ndarray:
    """``ufunc.reduceat`` of a per-note array over the blocks that start at
    ``starts``; a scalar stays as it is."""
    return x if x.ndim == 0 else ufunc.reduceat(np.broadcast_to(x, (n,)), starts)


def _filtered_top(policy: Policy, ctx: BatchContext, c: int, st: PolicyState, order: SimOrder,
                  highs: np.ndarray, lo: float | None, rows: np.ndarray, kth: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`top_candidates` of the queries ``rows``, given ``kth`` (R,),
    a score each of them has C notes at or above. A note can score ``kth``
    or more only when its similarity reaches the ranker's
    ``similarity_needed`` at ``kth`` and its block's highest recency, so
    every note of the top C, and every note tied with its C-th, is among
    those; they alone are scored (in column order: ties to the lower)."""
    r, col = kept_cells(order, rows, [(np.arange(len(rows)), policy, ctx, kth, lo, highs)])
    cells = _padded_cells(order, r, col, rows, similarity_key(policy.retriever))
    cells, live = _live_cells(cells, ctx, c)
    scores = _cell_scores(policy, _GatheredContext(ctx, rows, cells.cols, live, cells), st)
    if scores is None:
        return None
    return _top_of_cells(scores, cells.cols, c, len(ctx.idx))


def needed_similarity(policy: Policy, ctx: BatchContext, kth: np.ndarray, lo: float | None,
            highs: np.ndarray, dtype) -> np.ndarray:
    """The ranker's ``similarity_needed`` at ``kth`` and the highest
    recencies ``highs`` (arrays that broadcast), rounded down into the
    similarity's ``dtype`` (NaN: every note), so that comparing the
    similarity keeps a superset."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        need = np.asarray(policy.ranker.similarity_needed(kth, lo, highs, ctx), dtype=np.float64)
        need = np.where(np.isnan(need), -np.inf, need).astype(dtype)
    return np.nextafter(need, need.dtype.type(-np.inf))


def kept_cells(order: SimOrder, qrow: np.ndarray, parts: list[tuple]
                ) -> tuple[np.ndarray, np.ndarray]:
    """The cells of rows ``qrow`` (queries of the batch; several arms' rows
    may stack) whose similarity reaches the ranker's ``similarity_needed``
    at their row's C-th score ``kth`` and their block's highest recency:
    (row, column), row by row, columns ascending. ``parts``: ``(rows,
    policy, ctx, kth, lo, highs)``, each for its rows (ascending, and after
    the previous part's), ``highs`` per block (:func:`_recency_blocks`).

    The blocks are compared in groups of :data:`GROUP` first: a group's
    need at its highest recency is one for every note of it (the ranker's
    contract holds for any recency up to it), so a group whose largest
    similarity is below it is left out whole; the blocks of the others are
    compared one by one, then the cells of the blocks that remain."""
    dtype = order.sim.dtype
    bmax, gmax = order.block_max(), order.group_max()
    nb, ng = bmax.shape[1], gmax.shape[1]
    within = np.arange(GROUP)
    rs, bs, needs = [], [], []
    for rows, policy, ctx, kth, lo, highs in parts:
        q = qrow[rows]
        need = needed_similarity(policy, ctx, kth[:, None], lo,
                       np.maximum.reduceat(highs, np.arange(0, nb, GROUP))[None, :], dtype)
        r, g = np.divmod(np.flatnonzero(gmax[q] >= need), ng)  # row-major: groups ascending
        b = (g[:, None] * GROUP + within).ravel()
        r = np.repeat(r, GROUP)
        inside = b < nb  # the last group may be short
        r, b = r[inside], b[inside]
        need = needed_similarity(policy, ctx, kth[r], lo, highs[b], dtype)
        hit = bmax[q[r], b] >= need
        rs.append(rows[r[hit]])
        bs.append(b[hit])
        needs.append(need[hit])
    r, b, need = (np.concatenate(x) for x in (rs, bs, needs))
    n_all = order.n_all
    sims = np.full((len(r), BLOCK), -np.inf, dtype=dtype)
    whole = b < n_all // BLOCK
    sims[whole] = order.full_blocks()[qrow[r[whole]], b[whole]]
    if not whole.all():  # the last block, shorter
        tail = order.sim[:, b[~whole][0] * BLOCK:]
        sims[~whole, :tail.shape[1]] = tail[qrow[r[~whole]]]
    k, j = np.divmod(np.flatnonzero(sims >= need[:, None]), BLOCK)
    col = b[k] * BLOCK + j
    inside = col < n_all  # the last block's padding meets a need of -inf
    return r[k][inside], col[inside]


def _padded_cells(order: SimOrder, r: np.ndarray, col: np.ndarray, qrow: np.ndarray,
                  retriever: str) -> _LevelCells:
    """Cells given as (row, column) pairs, row by row in column order, as a
    padded (R, W) array of the rows ``qrow`` of the batch (W their most)."""
    cols, real, _ = _packed_left(r, col, np.bincount(r, minlength=len(qrow)))
    flat = qrow[:, None] * order.n_all + cols
    return _LevelCells(cols=cols, real=real, tau=np.full(len(qrow), -np.inf), flat=flat,
                       sim=np.take(order.sim, flat), valid=real & np.take(order.valid, flat),
                       retriever=retriever)
