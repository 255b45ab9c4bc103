"""Packers: choose which top-C candidates go into the token budget.

Every packer implements one contract (:meth:`memsim.policies.base.Packer.pack`)::

    pack(values (Q, C) float, tokens (Q, C) int64, valid (Q, C) bool,
         budget (Q,) int64) -> packed (Q, C) bool

Candidates arrive sorted best first by the policy's score; ``values`` are those
scores (or, for the oracle, the true gains). A packed row never exceeds its
budget: ``sum(tokens[q, packed[q]]) <= budget[q]`` for every query ``q``.

================ ============================================ =====================
name             rule                                         time per query
================ ============================================ =====================
``top-k-cutoff`` rank order, stop at the first that overflows O(C)
``skip-fill``    rank order, skip what does not fit           O(C)
``greedy``       value per token, skip what does not fit      O(C log C)
``greedy-swap``  greedy, then a bounded swap pass             O(C log C + S C^2)
``exact``        0/1 knapsack optimum (DP, or MILP when B is  O(C B) (DP)
                 very large)
================ ============================================ =====================

The two rank-order packers reproduce what systems do (Hivemind before its fix
packs "top-k with a cutoff", seed 000) and pack whatever ranks high, whatever
its score. The three *value-based* packers (``greedy``, ``greedy-swap``,
``exact``) maximise the sum of ``values`` of the packed notes, and therefore
never pack a note whose value is ``<= 0`` (or NaN): such a note can only lower
the sum. That is also what makes ``exact`` usable as the oracle's packer, with
``values`` = true gains (stale notes have negative gains, irrelevant ones 0).

The exact solver itself lives in :mod:`memsim.core.knapsack`, shared with the
metrics' oracle (:func:`memsim.core.knapsack.knapsack_value`, re-exported here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from memsim.core import jit, knapsack
from memsim.core.knapsack import knapsack_value
from memsim.core.params import Interval, Options
from .base import Packer, register

__all__ = ["TopKCutoff", "SkipFill", "Greedy", "GreedySwap", "Exact", "knapsack_value"]

#: Relative tolerance for "strictly better" in float comparisons of value sums:
#: a swap must gain more than this share of the inserted note's value, so that
#: rounding noise never counts as an improvement.
_TOL = 1e-12


# --------------------------------------------------------------------------
# Shared helpers (all vectorised over the Q queries of a batch)
# --------------------------------------------------------------------------


def _as_arrays(values, tokens, valid, budget):
    values = np.asarray(values, dtype=np.float64)
    tokens = np.asarray(tokens, dtype=np.int64)
    valid = np.asarray(valid, dtype=bool)
    # a budget per row (one for every row broadcast): the compiled kernels
    # read budget[r] without bounds checks
    budget = np.ascontiguousarray(np.broadcast_to(
        np.asarray(budget, dtype=np.int64).reshape(-1), tokens.shape[:1]))
    return values, tokens, valid, budget


def _eligible(values, tokens, valid, budget):
    """Candidates a value-based packer may pack: real, value > 0 (NaN is not),
    non-negative size that fits the budget on its own."""
    return valid & (values > 0) & (tokens >= 0) & (tokens <= budget[:, None])


def _density(values, tokens, eligible):
    """Value per token; +inf for a free (0-token) note, -inf where not eligible."""
    with np.errstate(divide="ignore", invalid="ignore"):
        d = values / tokens
    d = np.where(tokens == 0, np.inf, d)
    return np.where(eligible, d, -np.inf)


def _fill_plan(order, tokens, eligible):
    """What a greedy fill visiting the columns in ``order`` (Q, C) reads,
    prepared once for every fill in that order: the order, its inverse, and
    the sizes and eligibility in that order, transposed (C, Q) so that each
    step of the fill reads contiguous memory."""
    inverse = np.empty_like(order)
    np.put_along_axis(inverse, order, np.arange(order.shape[1])[None, :], axis=1)
    return (order, inverse, np.take_along_axis(tokens, order, axis=1).T.copy(),
            np.take_along_axis(eligible, order, axis=1).T.copy())


def _greedy_fill(plan, budget, packed, used):
    """Visit columns in the plan's order (:func:`_fill_plan`), per row; add
    each eligible, unpacked note that still fits. Updates ``packed`` and
    ``used`` in place.

    One loop over the C candidate ranks, vectorised over queries; it stops
    as soon as no remaining note of any row can fit (suffix minimum of the
    sizes against the free space).
    """
    order, inverse, ts, eligible_s = plan
    c, q = ts.shape
    if q == 0 or c == 0:
        return packed, used
    open_ = eligible_s & ~np.take_along_axis(packed, order, axis=1).T
    big = np.iinfo(np.int64).max
    smallest_left = np.minimum.accumulate(np.where(open_, ts, big)[::-1], axis=0)[::-1]
    take_s = np.zeros((c, q), dtype=bool)
    for s in range(c):
        if (smallest_left[s] > budget - used).all():
            break  # nothing left that fits anywhere
        take = open_[s] & (used + ts[s] <= budget)
        take_s[s] = take
        used += ts[s] * take
    packed |= np.take_along_axis(take_s.T, inverse, axis=1)  # back to column order
    return packed, used


def _greedy(dens, tokens, eligible, budget):
    """The greedy fill by density ``dens`` (:func:`_density`): (packed, used,
    its fill plan). Columns by value per token, best first; ties by
    candidate rank (the sort is stable, and columns are in rank order)."""
    q, c = tokens.shape
    packed = np.zeros((q, c), dtype=bool)
    used = np.zeros(q, dtype=np.int64)
    plan = _fill_plan(np.argsort(-dens, axis=1, kind="stable"), tokens, eligible)
    return (*_greedy_fill(plan, budget, packed, used), plan)


# --------------------------------------------------------------------------
# Rank-order packers
# --------------------------------------------------------------------------


@register
@dataclass(frozen=True, kw_only=True)
class TopKCutoff(Packer):
    """Fill in rank order; stop at the first note that does not fit.

    Rule: with candidates sorted best first, pack candidates ``0..k-1`` where
    ``k`` is the largest prefix whose total tokens fit the budget. Cost never
    enters: "one 2,000-token note scoring 0.9 would shove out twenty 100-token
    notes scoring 0.85" (Hivemind's packing before its fix, seed 000, "top-k
    with a cutoff").

    Complexity: O(C) per query (one cumulative sum).
    """

    name: ClassVar[str] = "top-k-cutoff"

    def pack(self, values, tokens, valid, budget):
        values, tokens, valid, budget = _as_arrays(values, tokens, valid, budget)
        used = np.cumsum(np.where(valid, tokens, 0), axis=1)
        # cumsum is non-decreasing, so "fits so far" is a prefix of each row.
        return valid & (used <= budget[:, None])


@register
@dataclass(frozen=True, kw_only=True)
class SkipFill(Packer):
    """Fill in rank order; skip a note that does not fit and go on.

    Rule: visit candidates best first and add each one whose tokens still fit
    the remaining budget (what most vector-store integrations do).

    Complexity: O(C) per query.
    """

    name: ClassVar[str] = "skip-fill"

    def pack(self, values, tokens, valid, budget):
        values, tokens, valid, budget = _as_arrays(values, tokens, valid, budget)
        if jit.enabled():  # the same rule, row by row, compiled
            return _skip_fill_rows(tokens, valid, budget)
        q, c = tokens.shape
        packed = np.zeros((q, c), dtype=bool)
        used = np.zeros(q, dtype=np.int64)
        for j in range(c):  # loop over candidate ranks (C), vectorised over queries
            take = valid[:, j] & (used + tokens[:, j] <= budget)
            packed[:, j] = take
            used += np.where(take, tokens[:, j], 0)
        return packed


@jit.kernel
def _skip_fill_rows(tokens, valid, budget):
    """:class:`SkipFill` one row at a time (compiled by
    :func:`memsim.core.jit.kernel`): the same integer sums, so the same
    packing. A per-query arm packs a row at a time, where the numpy loop's
    C steps cost a few calls each."""
    q, c = tokens.shape
    packed = np.zeros((q, c), dtype=np.bool_)
    for r in range(q):
        used = 0
        for j in range(c):
            if valid[r, j] and used + tokens[r, j] <= budget[r]:
                packed[r, j] = True
                used += tokens[r, j]
    return packed


# --------------------------------------------------------------------------
# Value-based packers
# --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _ValuePacker(Packer):
    """Base of the packers that weigh value against size.

    Parameters
    ----------
    min_relative_score : float
        Candidates whose ``cut_on`` quantity is below this fraction of the
        query's best candidate's are never packed (0 = no cutoff). The best
        is the largest among the row's valid candidates, NaN left out (a
        NaN is below every cut and never packed).
        Value-per-token packing assumes the value is worth its tokens; raw
        similarity scores are not calibrated that way (a barely related
        40-token note scores half as much as the answer and is six times
        denser), so without a cutoff density packing fills the context with
        small, weakly related notes. A relative cutoff is memsim's design,
        not a published rule.
    cut_on : {"score", "similarity"}
        What the cut compares: the policy's score (the packer's ``values``),
        or the retriever's similarity of each candidate alone (the engine
        then passes it as ``similarity``; see :attr:`needs_similarity`). A
        cut on a score that multiplies similarity by recency also filters by
        age; a cut on similarity filters by relevance only.
    """

    min_relative_score: float = 0.0
    cut_on: str = "score"
    _constraints: ClassVar[dict] = {"min_relative_score": Interval(0, 1),
                                    "cut_on": Options(("score", "similarity"))}

    @property
    def needs_similarity(self) -> bool:
        """True when :meth:`pack` needs the candidates' ``similarity`` (Q, C)."""
        return self.cut_on == "similarity" and self.min_relative_score > 0

    def _eligible(self, values, tokens, valid, budget, similarity=None):
        eligible = _eligible(values, tokens, valid, budget)
        if self.min_relative_score > 0:
            ref = values
            if self.cut_on == "similarity":
                if similarity is None:
                    raise ValueError(f"packer {self.name!r} cuts on similarity: pack() needs "
                                     "the candidates' similarity")
                ref = np.asarray(similarity, dtype=np.float64)
            # the best of the row's real candidates that have a number: a NaN
            # (which is never packed) must not make every comparison False
            top = np.where(valid & ~np.isnan(ref), ref, -np.inf).max(axis=1, initial=-np.inf)
            eligible &= ref >= self.min_relative_score * top[:, None]
        return eligible


@register
@dataclass(frozen=True, kw_only=True)
class Greedy(_ValuePacker):
    """Value-per-token greedy: the classic knapsack heuristic.

    Rule: sort the candidates by density ``values / tokens`` (highest first,
    ties by candidate rank; a 0-token note has infinite density) and add each
    one that still fits, skipping those that do not. Notes with value ``<= 0``
    are never packed. Hivemind's fixed packer starts this way ("ranked by value
    per token (score divided by size) and added greedily", seed 000).

    Alone, greedy can be arbitrarily bad (one large valuable note behind a small
    dense one: see the ``swap_needed`` golden scenario); :class:`GreedySwap`
    and :class:`Exact` repair that.

    Complexity: O(C log C) per query (the sort), then one O(C) pass.
    """

    name: ClassVar[str] = "greedy"

    def pack(self, values, tokens, valid, budget, similarity=None):
        values, tokens, valid, budget = _as_arrays(values, tokens, valid, budget)
        eligible = self._eligible(values, tokens, valid, budget, similarity)
        return _greedy(_density(values, tokens, eligible), tokens, eligible, budget)[0]


@register
@dataclass(frozen=True, kw_only=True)
class GreedySwap(_ValuePacker):
    """Value-per-token greedy followed by a bounded swap pass.

    Hivemind's packer is "greedy, then a swap pass [that] puts back any
    high-value note the small ones were blocking" (seed 000); its swap rule is
    not public. **The rule below is memsim's design.**

    Rule. Start from :class:`Greedy`. Then, in each pass, visit the unpacked
    eligible notes ``j`` by value (highest first, ties by rank). To make room
    for ``j`` (``need = tokens_j - free`` tokens), consider two removal sets
    among the packed notes:

    * the shortest prefix, in order of *ascending* value per token (ties: worse
      rank first), whose tokens cover ``need`` (the greedy cover);
    * the single packed note of least value whose tokens alone cover ``need``.

    Take the one that loses less value, ``removed``. Swap (remove it, insert
    ``j``) when ``value_j - removed > 1e-12 * value_j``. Any removal freeing
    ``need`` tokens loses at least ``need * d_min`` (``d_min`` = least density
    among the packed notes), so a note with ``value_j <= need * d_min`` at the
    start of a pass is skipped in that pass (it is reconsidered in the next,
    against the new packed set); this prunes most candidates. After each pass, the
    freed space is refilled greedily by density. Passes stop when a pass makes
    no swap, after ``max_swaps`` passes, or when a query has made
    ``max_swaps`` swaps.

    Guarantees: every swap strictly increases the packed value and keeps the row
    within budget, and the refill only adds notes, so the result is never worse
    than :class:`Greedy` (``greedy-swap >= greedy`` in the policy's value) and
    never exceeds the budget. It is not optimal; :class:`Exact` is.

    Parameters
    ----------
    max_swaps : int
        Bound on the number of swaps per query and on the number of passes
        (``0`` = plain greedy).

    Notes
    -----
    Complexity: O(C log C) for the greedy, then at most ``max_swaps`` passes of
    O(C^2) each (C candidates, each checked against the packed set with one
    cumulative sum), vectorised over queries: O(C log C + S C^2) per query with
    ``S = max_swaps``.
    """

    name: ClassVar[str] = "greedy-swap"
    max_swaps: int = 4
    _constraints: ClassVar[dict] = {"max_swaps": Interval(0, None, integer=True)}

    def pack(self, values, tokens, valid, budget, similarity=None):
        values, tokens, valid, budget = _as_arrays(values, tokens, valid, budget)
        eligible = self._eligible(values, tokens, valid, budget, similarity)
        dens = _density(values, tokens, eligible)
        if jit.enabled():  # the same rule, row by row, compiled
            return _greedy_swap_rows(values, tokens, eligible, budget, dens, int(self.max_swaps))
        packed, used, plan = _greedy(dens, tokens, eligible, budget)
        if self.max_swaps == 0 or not eligible.any():
            return packed
        return _swap_passes(values, tokens, eligible, budget, packed, used, self.max_swaps,
                            dens, plan)


def _swap_candidates(values, tokens, eligible, budget, packed, used, dens):
    """The unpacked notes that may beat the value any removal making room
    for them must lose (at least ``need * least packed density``)."""
    d_min = np.min(np.where(packed, dens, np.inf), axis=1)
    need0 = tokens - (budget - used)[:, None]
    with np.errstate(invalid="ignore"):  # inf - inf (an infinite value): NaN, not a candidate
        bound = np.where(need0 > 0, need0 * d_min[:, None], 0.0)
        return eligible & ~packed & (values - bound > _TOL * values)


#: cells (rows x candidates x packed slots) of one step of the swap pass
_SWAP_CELLS = 1 << 18


def _count_below(sorted_rows, x):
    """For each row of the non-decreasing non-negative integers
    ``sorted_rows`` (R, C): how many are below each of that row's ``x``
    (R, S): one binary search over the rows laid end to end, each shifted
    above the one before."""
    span = int(sorted_rows[:, -1].max(initial=0)) + 2
    shift = np.arange(len(sorted_rows), dtype=np.int64)[:, None] * span
    # x beyond a row's range counts as its ends: 0 below, or all of it
    at = np.searchsorted((sorted_rows + shift).ravel(), (np.clip(x, 0, span - 1) + shift).ravel())
    return at.reshape(x.shape) - shift // span * sorted_rows.shape[1]


def _next_swap(r, start, n_cand, comp, packed, used, state):
    """For the rows ``r``: the slot of each row's next swap among its
    candidates ``comp`` from ``start`` on (-1 when none), and the swaps
    (rows of ``r`` that swap, the notes swapped in, the notes removed
    (D, C), the tokens freed); None when no row swaps.

    Every (row, candidate) pair is evaluated with the float operations of the
    rule (:class:`GreedySwap`): the greedy cover and the single note, against
    the packed set of its row as it is now.
    """
    values, tokens, budget, rem_order, rem_rank, tok_o, val_o, size_order, size_asc, val_s = state
    c = tokens.shape[1]
    slots = np.arange(comp.shape[1])
    todo = (slots >= start[:, None]) & (slots < n_cand[:, None])
    rr = r[:, None]
    vj = values[rr, comp]
    tj = tokens[rr, comp]
    need = tj - (budget[r] - used[r])[:, None]  # (R, S)
    pk = packed[r]
    k = np.arange(len(r))[:, None]
    # (a) greedy cover: shortest prefix in ascending-density order; ct is
    # non-decreasing, so the count of "< need" is the first index with
    # ct >= need (it exists because need <= used, as tj <= budget)
    pk_o = pk[k, rem_order[r]]
    ct = np.cumsum(np.where(pk_o, tok_o[r], 0), axis=1)
    cv = np.cumsum(np.where(pk_o, val_o[r], 0.0), axis=1)
    p = np.minimum(_count_below(ct, need), c - 1)
    cover_val = np.where(need > 0, cv[k, p], 0.0)
    # (b) the single least valuable packed note that frees enough alone: the
    # notes of at least ``need`` tokens are the first ones by size,
    # descending; the least value among the packed of each prefix
    # (which one, when several tie, is found below for the rows that swap)
    by_size = np.where(pk[k, size_order[r]], val_s[r], np.inf)
    least = np.minimum.accumulate(by_size, axis=1)
    n_ge = c - _count_below(size_asc[r], need)  # notes of at least need tokens
    single_val = np.where(n_ge > 0, least[k, np.maximum(n_ge - 1, 0)], np.inf)
    use_single = (need > 0) & (single_val < cover_val)
    removed = np.where(use_single, single_val, cover_val)
    do = todo & ((vj - removed) > _TOL * np.abs(vj))
    hit = do.any(axis=1)
    at = np.where(hit, np.argmax(do, axis=1), -1)
    if not hit.any():
        return at, None
    d = np.flatnonzero(hit)
    s = at[d]
    j, nd, pd = comp[d, s], need[d, s], p[d, s]
    single = use_single[d, s]
    # ties: the worse rank, i.e. the last column, via the reversed argmin
    ok1 = pk[d] & (tokens[r[d]] >= nd[:, None])
    i1d = (c - 1) - np.argmin(np.where(ok1, values[r[d]], np.inf)[:, ::-1], axis=1)
    remove = pk[d] & (rem_rank[r[d]] <= pd[:, None]) & (nd[:, None] > 0) \
        & ~single[:, None]
    remove[np.flatnonzero(single), i1d[single]] = True
    cover_tok = np.where(nd > 0, ct[d, pd], 0)
    freed = np.where(single, tokens[r[d], i1d], cover_tok)
    return at, (d, j, remove, freed)


def _swap_passes(values, tokens, eligible, budget, packed, used, max_swaps, dens, plan):
    """The swap passes of :class:`GreedySwap` (see its docstring for the
    rule), after the greedy fill by the densities ``dens`` of ``plan``,
    which also refills."""
    q, c = tokens.shape
    cand0 = _swap_candidates(values, tokens, eligible, budget, packed, used, dens)
    if not cand0.any():
        return packed  # no note can beat its cheapest removal: greedy's answer stands
    # Removal order: ascending density; among equal densities the worse rank
    # (higher column) goes first. Sorting the reversed columns stably gives that.
    rem_order = (c - 1) - np.argsort(dens[:, ::-1], axis=1, kind="stable")
    # each column's place in that order (the inverse permutation)
    rem_rank = np.empty_like(rem_order)
    np.put_along_axis(rem_rank, rem_order, np.arange(c)[None, :], axis=1)
    tok_el = np.where(eligible, tokens, 0)
    val_el = np.where(eligible, values, 0.0)
    tok_o = np.take_along_axis(tok_el, rem_order, axis=1)
    val_o = np.take_along_axis(val_el, rem_order, axis=1)
    # Insertion candidates: by value, best first, ties by rank.
    ins_order = np.argsort(-np.where(eligible, values, -np.inf), axis=1, kind="stable")
    # the notes by size (eligible ones; only they are ever packed), ascending,
    # and the columns by size descending
    size_asc = np.sort(tok_el, axis=1)
    size_order = np.argsort(tok_el, axis=1)[:, ::-1]
    val_s = np.take_along_axis(values, size_order, axis=1)
    swaps = np.zeros(q, dtype=np.int64)
    state = (values, tokens, budget, rem_order, rem_rank, tok_o, val_o, size_order, size_asc,
             val_s)

    for pass_ in range(max_swaps):
        swapped_any = False
        # Prune with a lower bound on the value any removal must lose: freeing
        # ``need`` tokens costs at least ``need * (least packed density)``.
        # Notes that cannot beat it against the packed set at the start of the
        # pass are skipped in this pass (they are reconsidered in the next).
        if pass_:
            cand0 = _swap_candidates(values, tokens, eligible, budget, packed, used, dens)
        cand_s = np.take_along_axis(cand0, ins_order, axis=1)
        n_cand = cand_s.sum(axis=1)
        # per row, the candidates in insertion order, compacted to the left
        r, k = np.nonzero(cand_s)
        comp = np.zeros((q, int(n_cand.max(initial=0))), dtype=ins_order.dtype)
        comp[r, np.arange(len(r)) - np.repeat(np.cumsum(n_cand) - n_cand, n_cand)] = \
            ins_order[r, k]
        per = max(1, _SWAP_CELLS // max(1, comp.shape[1] * c))  # rows per step
        # The pass visits each row's candidates in order and swaps in those
        # that beat their removal against the packed set as it is then. The
        # set changes only at a swap, so the next swap of a row is its first
        # remaining candidate that beats its removal now: every candidate
        # before it is evaluated at once, against the same set.
        start = np.zeros(q, dtype=np.int64)
        while True:
            act = np.flatnonzero((start < n_cand) & (swaps < max_swaps))
            if not len(act):
                break
            for r in np.split(act, np.arange(per, len(act), per)):
                at, sw = _next_swap(r, start[r], n_cand[r], comp[r], packed, used, state)
                start[r] = np.where(at >= 0, at + 1, n_cand[r])
                if sw is None:
                    continue
                swapped_any = True
                d, j, removed_cols, freed = sw
                rd = r[d]
                packed[rd] &= ~removed_cols
                packed[rd, j] = True
                used[rd] += tokens[rd, j] - freed
                swaps[rd] += 1
        # Refill the space the swaps left (only adds notes: value can only grow).
        packed, used = _greedy_fill(plan, budget, packed, used)
        if not swapped_any:
            break
    return packed


@jit.kernel
def _greedy_swap_rows(values, tokens, eligible, budget, dens, max_swaps):
    """:class:`GreedySwap` one row at a time (compiled by :func:`memsim.core.jit.kernel`):
    the greedy fill by density, then the swap passes, each step the float
    operations of the numpy version (:func:`_greedy`, :func:`_swap_passes`)
    in the same order, so the same packing bit for bit; its orders are the
    same stable sorts.

    The numpy version's steps over all rows are the same per row: a row's
    swaps read its own packed set only; a pass that makes no swap in a row
    leaves it as it is (the refill adds nothing after a greedy fill), so the
    passes stopping when no row swaps, or each row when it does not, pack
    the same.
    """
    q, c = tokens.shape
    packed = np.zeros((q, c), dtype=np.bool_)
    cand = np.empty(c, dtype=np.int64)
    for r in range(q):
        b = budget[r]
        # by density, best first (ties: rank). The removal order (density
        # ascending, ties: the worse rank first) is this one read backwards:
        # the densities hold no NaN (_density), so reversing the stable sort
        # is the numpy version's stable sort of the reversed columns. The
        # insertion order (by value, ties: rank) is found among the pass's
        # candidates only, the few there are.
        fill_order = np.argsort(-dens[r], kind="mergesort")
        used = 0
        swaps = 0
        swapped = True
        for it in range(max_swaps + 1):
            # the greedy fill (_greedy_fill): at first, then after each pass
            for m in range(c):
                j = fill_order[m]
                if eligible[r, j] and not packed[r, j] and used + tokens[r, j] <= b:
                    packed[r, j] = True
                    used += tokens[r, j]
            if it == max_swaps or not swapped:
                break
            # the candidates of the pass (_swap_candidates)
            d_min = np.inf
            for k in range(c):
                if packed[r, k] and dens[r, k] < d_min:
                    d_min = dens[r, k]
            n_cand = 0
            for j in range(c):
                if not eligible[r, j] or packed[r, j]:
                    continue
                need0 = tokens[r, j] - (b - used)
                bound = need0 * d_min if need0 > 0 else 0.0
                v = values[r, j]
                if v - bound > _TOL * v:
                    # in insertion order: after the candidates of greater
                    # or equal value (a stable sort of the few there are)
                    i = n_cand
                    while i > 0 and values[r, cand[i - 1]] < v:
                        cand[i] = cand[i - 1]
                        i -= 1
                    cand[i] = j
                    n_cand += 1
            swapped = False
            for m in range(n_cand):
                if swaps >= max_swaps:
                    break
                j = cand[m]
                need = tokens[r, j] - (b - used)
                # (a) the greedy cover: the shortest prefix, in removal
                # order, of the packed notes whose tokens cover need
                ct = 0
                cv = 0.0
                p = c - 1
                for k in range(c):
                    col = fill_order[c - 1 - k]
                    if packed[r, col]:
                        ct += tokens[r, col]
                        cv += values[r, col]
                    else:
                        cv += 0.0
                    if ct >= need:
                        p = k
                        break
                cover_val = cv if need > 0 else 0.0
                # (b) the least valuable packed note that frees need alone
                # (ties: the last column)
                single_val = np.inf
                i1 = -1
                for k in range(c - 1, -1, -1):
                    if packed[r, k] and tokens[r, k] >= need and values[r, k] < single_val:
                        single_val = values[r, k]
                        i1 = k
                use_single = need > 0 and single_val < cover_val
                removed = single_val if use_single else cover_val
                vj = values[r, j]
                if not (vj - removed > _TOL * abs(vj)):
                    continue
                freed = 0
                if use_single:
                    packed[r, i1] = False
                    freed = tokens[r, i1]
                elif need > 0:
                    for k in range(p + 1):
                        packed[r, fill_order[c - 1 - k]] = False
                    freed = ct
                packed[r, j] = True
                used += tokens[r, j] - freed
                swaps += 1
                swapped = True
    return packed


# --------------------------------------------------------------------------
# Exact 0/1 knapsack
# --------------------------------------------------------------------------


@register
@dataclass(frozen=True, kw_only=True)
class Exact(_ValuePacker):
    """Exact 0/1 knapsack: the set of candidates of maximal total value that fits.

    Rule: maximise ``sum(values[S])`` subject to ``sum(tokens[S]) <= budget``
    over subsets ``S`` of the eligible candidates (value ``> 0``; notes of value
    ``<= 0`` are never packed). With ``values`` = true gains this is the
    oracle's packer. Source: the textbook dynamic programme over integer
    capacities (Kellerer, Pferschy & Pisinger, *Knapsack Problems*, 2004,
    ch. 2); Hivemind's notes call it "affordable at this size" (seed 000).

    Algorithm, per query:

    1. fast path: when every eligible note fits, take them all (O(C));
    2. divide all sizes and the budget by the gcd of the eligible sizes
       (exact; e.g. sizes in multiples of 100 shrink the table 100-fold);
    3. choose a method (``method = "auto"``), with ``n`` eligible notes and
       reduced budget ``B``:

       * ``B > milp_budget``: ``scipy.optimize.milp`` (HiGHS branch and bound,
         exact, ``mip_rel_gap = 0``). Measured on heavy-tailed sizes with the
         budget binding (``benchmarks/bench_packers.py``, part 2): the DP costs
         1.5 to 3 ns per cell ``n * B``; HiGHS costs 0.3 to 1 ms per note,
         nearly independent of ``B`` and noisy. The DP still wins at
         B = 256,000 for C <= 200 (C = 50: 13 ms vs 21 ms; C = 200: 52 vs
         80 ms) and HiGHS wins beyond (C = 50 at B = 1e6: DP 163 ms, HiGHS
         27 ms; C = 1,000 at B = 256,000: 436 vs 314 ms); at the budgets
         memsim simulates (1,500 to 16,000 tokens) the DP is 10 to 30 times
         faster. Hence the default ``milp_budget = 300,000``.
       * else ``n * (B + 1) <= max_cells``: the DP, exact.
       * else: the DP on bucketed sizes (the large-budget guard, below).

       ``method = "dp"`` never uses HiGHS; ``method = "milp"`` always does.
       When HiGHS does not prove optimality within ``milp_time_limit`` seconds,
       the DP path is used instead.

    DP: ``dp[b] = max(dp[b], dp[b - t_j] + v_j)`` for all ``b`` at once (numpy
    max over shifted arrays, one per item), a boolean table of "taking ``j`` was
    strictly better at capacity ``b``", then a backtrack from ``b = B``.
    **O(C * B) time and O(C * B) memory** per query (bits of the table).

    Large-budget guard (bucketing). When ``n * (B + 1) > max_cells``, sizes are
    rounded **up** to multiples of a bucket width ``w`` (the smallest with
    ``n * (B // w + 1) <= max_cells``): the DP runs on ``t'_j = ceil(t_j / w)``
    with capacity ``B' = B // w`` (sizes, ``B`` and ``w`` in the gcd-reduced
    units of step 2; multiply by the gcd for tokens). The result is always
    feasible (``sum t_j <= w * sum t'_j <= w * B' <= B``). Optimality loss
    bound: since ``w * t'_j <= t_j + w - 1``, every set that fits when each note
    costs ``w - 1`` extra is feasible for the bucketed DP, so

    ``V_bucket >= OPT(t + w - 1, B)``,

    the exact optimum with every size inflated by ``w - 1``. Consequently, with
    ``n*`` notes in the true optimum ``V*`` and ``t_max`` the largest among
    them, ``V_bucket >= V* * (B - t_max - w + 1) / (B + n* (w - 1))`` (the
    densest notes of the optimum that fit the inflated budget are a feasible
    prefix; a density-sorted prefix keeps at least its share of the value). The
    loss is thus at most about ``n* w / B`` of ``V*`` plus one note. The bucketed
    answer is also compared with :class:`GreedySwap` and the better one kept,
    so ``exact`` is never worse than ``greedy-swap`` even when bucketed.

    Parameters
    ----------
    method : {"auto", "dp", "milp"}
        Solver choice, see above.
    max_cells : int
        Largest DP table ``n * (B + 1)`` (booleans) per query before bucketing.
        The default (2**25, 32 MiB) keeps C = 1,000 at B = 16,000 exact.
    milp_budget : int
        Reduced budget above which ``"auto"`` uses HiGHS.
    milp_time_limit : float
        Seconds HiGHS may spend on one query.
    """

    name: ClassVar[str] = "exact"
    method: str = "auto"
    max_cells: int = 2**25
    milp_budget: int = 300_000
    milp_time_limit: float = 10.0
    _constraints: ClassVar[dict] = {
        "method": Options(("auto", "dp", "milp")),
        "max_cells": Interval(64, None, integer=True),
        "milp_budget": Interval(1, None, integer=True),
        "milp_time_limit": Interval(0, None, closed="neither"),
    }

    def pack(self, values, tokens, valid, budget, similarity=None):
        values, tokens, valid, budget = _as_arrays(values, tokens, valid, budget)
        eligible = self._eligible(values, tokens, valid, budget, similarity)
        packed = eligible.copy()
        over = np.where(eligible, tokens, 0).sum(axis=1) > budget
        for q in np.flatnonzero(over):  # only queries whose eligible notes overflow
            cols = np.flatnonzero(eligible[q])
            packed[q] = False
            packed[q, cols[self.solve(values[q, cols], tokens[q, cols], int(budget[q]))]] = True
        return packed

    def bucket_width(self, n: int, budget: int) -> int:
        """The bucket width ``w`` the guard uses for ``n`` notes and a (reduced)
        budget; 1 when no bucketing is needed."""
        return knapsack.bucket_width(n, budget, self.max_cells)

    def solve(self, v: np.ndarray, t: np.ndarray, budget: int, *,
              never_bucket: bool = False) -> np.ndarray:
        """Chosen mask for one query whose notes all have ``v > 0`` and
        ``0 <= t <= budget``.

        ``never_bucket=True`` trades the memory guard for exactness: a table
        over ``max_cells`` goes to HiGHS, and if HiGHS fails, to the full DP.
        """
        return knapsack.solve(v, t, budget, method=self.method, max_cells=self.max_cells,
                              milp_budget=self.milp_budget,
                              milp_time_limit=self.milp_time_limit,
                              never_bucket=never_bucket, heuristic=_greedy_swap_one)


def _greedy_swap_one(v: np.ndarray, t: np.ndarray, budget: int) -> np.ndarray:
    """:class:`GreedySwap`'s set for one query: what a bucketed exact answer
    must beat."""
    return GreedySwap().pack(v[None, :], t[None, :], np.ones((1, len(v)), bool),
                             np.array([budget]))[0]
