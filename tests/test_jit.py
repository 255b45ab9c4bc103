"""The compiled kernels (``memsim.core.jit``, numba) against their numpy versions.

Each loop compiled with numba has a numpy version that runs without numba or
with ``MEMSIM_NUMBA=0``; both must give the same results bit for bit: the
packers (greedy-swap, skip-fill) alone on random problems (ties, free notes,
nothing or everything fitting), the top-C selection, the walk's merge of
rescored cells, Generative Agents' min-max sum (its rank by last access is
tested in ``test_generative_agents.py``), the age on a last-use clock, and
whole replays whose per-query arms pack again after each correction.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pandas.testing import assert_frame_equal

from memsim.core import jit
from memsim.engine import Arm, SimSettings, simulate, top_candidates
from memsim.policies import resolve_policy
from memsim.policies import packing, rank
from memsim.policies.packing import Greedy, GreedySwap, SkipFill
from memsim.core.rng import seed_sequence

from .helpers import numba_kernels

numba = pytest.importorskip("numba", reason="the compiled kernels need the 'fast' extra")


@st.composite
def _problems(draw):
    q = draw(st.integers(1, 6))
    c = draw(st.integers(1, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # rounded values and sizes in steps make ties; 0-token notes, values <= 0,
    # invalid slots, budgets from nothing to everything fitting
    values = np.round(rng.normal(0.4, 0.5, (q, c)), draw(st.sampled_from([1, 2, 8])))
    step = draw(st.sampled_from([1, 50]))
    tokens = rng.integers(0, draw(st.sampled_from([4, 12, 400])), (q, c)) * step
    valid = rng.random((q, c)) < draw(st.sampled_from([0.7, 1.0]))
    budget = rng.integers(-1, int(tokens.sum(axis=1).max()) + 2, q)
    if draw(st.booleans()):  # odd values: infinite (an infinite density) or NaN (never packed)
        odd = rng.random((q, c))
        values[odd < 0.1] = np.inf
        values[odd > 0.9] = np.nan
    return values, tokens.astype(np.int64), valid, budget.astype(np.int64)


def test_the_switch_turns_the_kernels_off():
    with numba_kernels(True):
        assert jit.enabled()
    with numba_kernels(False):
        assert not jit.enabled()


@settings(max_examples=300, deadline=None)
@given(_problems(), st.integers(0, 6), st.sampled_from([0.0, 0.5]), st.booleans())
def test_compiled_greedy_swap_packs_as_numpy(problem, max_swaps, cut, one_budget):
    packer = GreedySwap(max_swaps=max_swaps, min_relative_score=cut)
    values, tokens, valid, budget = problem
    if one_budget:  # one budget for every row, as a caller may pass it
        budget = budget[:1]
    with numba_kernels(False):
        want = packer.pack(values, tokens, valid, budget)
    with numba_kernels(True):
        got = packer.pack(values, tokens, valid, budget)
    assert got.dtype == bool and np.array_equal(got, want)


@settings(max_examples=300, deadline=None)
@given(_problems(), st.booleans())
def test_compiled_skip_fill_packs_as_numpy(problem, one_budget):
    values, tokens, valid, budget = problem
    if one_budget:  # one budget for every row, as a caller may pass it
        budget = budget[:1]
    with numba_kernels(False):
        want = SkipFill().pack(values, tokens, valid, budget)
    with numba_kernels(True):
        got = SkipFill().pack(values, tokens, valid, budget)
    assert got.dtype == bool and np.array_equal(got, want)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6), st.integers(0, 70), st.integers(0, 4), st.integers(0, 2**32 - 1),
       st.sampled_from([0.0, 0.1, 0.9]), st.sampled_from(["random", "rising", "falling", "peak"]),
       st.sampled_from([np.float64, np.float32]))
def test_compiled_top_candidates_order_as_a_stable_sort(q, n, levels, seed, odd, trend, dtype):
    """``top_candidates`` (a heap per row, compiled, and numpy's partition)
    gives the first c of a stable sort of the negated scores, values and
    dtype included: ties (few levels) to the lower column, -inf, NaN after
    every number (chosen only when too few are numbers), +inf, -0.0 equal to
    0.0, rows whose scores rise or fall with the column or peak in its
    middle (the heap reads the row from one end), c below, at and above the
    row's length; and with a live mask, the scores of the cells not live
    (and NaN) read as -inf."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, levels + 1, size=(q, n)).astype(dtype)
    if trend in ("rising", "falling"):
        scores += np.arange(n, dtype=dtype)[None, :] // 3 * (1 if trend == "rising" else -1)
    elif trend == "peak":  # highest in the middle: neither end reads the best first
        scores -= np.abs(np.arange(n) - n // 2).astype(dtype)[None, :] // 3
    scores[rng.random((q, n)) < 0.2] = -np.inf
    scores[rng.random((q, n)) < odd] = np.nan
    scores[rng.random((q, n)) < odd / 4] = np.inf
    scores[rng.random((q, n)) < 0.1] = -0.0
    c = int(rng.integers(1, n + 3))
    ref = np.argsort(-scores, axis=1, kind="stable")[:, :c]
    # with a live mask (a row, or one per query): cells not live, and NaN, are -inf
    live = rng.random((q, n) if seed % 2 else (1, n)) < 0.7
    seen = np.where(live & ~np.isnan(scores), scores, -np.inf)
    ref_live = np.argsort(-seen, axis=1, kind="stable")[:, :c]
    for on in (True, False):
        with numba_kernels(on):
            pos, vals = top_candidates(scores, c)
            pos_live, vals_live = top_candidates(scores, c, live)
        assert np.array_equal(pos, ref), on
        assert vals.dtype == dtype
        assert np.array_equal(vals, np.take_along_axis(scores, ref, axis=1), equal_nan=True)
        assert np.array_equal(pos_live, ref_live), on
        assert vals_live.dtype == dtype
        assert np.array_equal(vals_live, np.take_along_axis(seen, ref_live, axis=1))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 5), st.integers(0, 30), st.integers(0, 4), st.integers(0, 2**32 - 1),
       st.sampled_from([0.0, 0.05, 0.3]), st.sampled_from(["none", "row", "cells"]),
       st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0]), min_size=3, max_size=3))
def test_compiled_minmax_sum_is_the_numpy_sum(q, n, levels, seed, odd, live, weights):
    """``minmax_sum`` of three terms (one compiled pass, and three
    ``minmax_normalise`` added in numpy) gives the same values bit for bit,
    the sign of every zero included: ties (few levels), rows all equal (0.5)
    or with nothing live, NaN and infinities among the live or dead
    columns, 0.0 and -0.0 both a row's minimum, terms of one row broadcast
    to all, zero weights, and a live mask that is absent, one row broadcast
    to all, or one per cell."""
    rng = np.random.default_rng(seed)

    def term(rows):
        x = rng.integers(-1, levels + 1, size=(rows, n)).astype(float)
        x[rng.random((rows, n)) < 0.3] = -0.0
        for v in (np.nan, np.inf, -np.inf):
            x[rng.random((rows, n)) < odd] = v
        return x

    terms = [(w, term(rows)) for w, rows in zip(weights, (q, q, 1))]
    mask = {"none": None, "row": rng.random(n) < 0.7, "cells": rng.random((q, n)) < 0.7}[live]
    got = {}
    for on in (True, False):
        with numba_kernels(on):
            got[on] = rank.minmax_sum(terms, mask)
    assert got[True].shape == got[False].shape == (q, n)
    assert got[True].tobytes() == got[False].tobytes()
    one = rank.minmax_normalise(terms[0][1], mask)  # each term in [0, 1], 0 where not live
    live_cells = np.ones((q, n), bool) if mask is None else np.broadcast_to(mask, (q, n))
    assert (one[~live_cells] == 0).all()
    numbers = one[live_cells][np.isfinite(one[live_cells])]
    assert ((numbers >= 0) & (numbers <= 1)).all()


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5), st.integers(0, 30), st.integers(0, 2**32 - 1), st.booleans())
def test_compiled_age_since_last_use_is_the_numpy_age(q, n, seed, per_row):
    """A last-use clock's age (``BatchContext.age_last_access``), compiled
    in one pass, against the numpy expression it replaces: the same floats,
    for notes never used (NaN: since creation), used at their creation,
    ages below 0 (a use after the query), and an origin per query row (a
    gathered context's cells) or one for every row (a batch's notes)."""
    from memsim.engine.context import _age_from_origin

    rng = np.random.default_rng(seed)
    rows = q if per_row else 1
    created = np.round(rng.uniform(-30, 30, (rows, n)), 2)
    last = created + np.round(rng.uniform(0, 20, (rows, n)), 1)
    last[rng.random((rows, n)) < 0.4] = np.nan
    last[rng.random((rows, n)) < 0.1] = -0.0
    t = np.round(rng.uniform(-10, 60, q), 1)
    since = t[:, None] - last
    want = np.where(np.isnan(since), t[:, None] - created, since)
    got = _age_from_origin(t, last, created)
    assert got.shape == (q, n)
    assert got.tobytes() == want.tobytes()


def test_the_numpy_version_runs_when_switched_off(monkeypatch):
    """Not vacuous: with the switch off the kernel is never called, with it
    on it is (and the greedy packer, which it does not serve, is unchanged)."""
    calls = []
    for name in ("_greedy_swap_rows", "_skip_fill_rows"):
        kernel = getattr(packing, name)
        monkeypatch.setattr(packing, name,
                            lambda *a, k=kernel, n=name: calls.append(n) or k(*a))
    rng = np.random.default_rng(3)
    values, tokens = rng.uniform(0, 1, (5, 20)), rng.integers(1, 300, (5, 20))
    valid, budget = np.ones((5, 20), bool), np.full(5, 700)
    with numba_kernels(False):
        off = [p.pack(values, tokens, valid, budget) for p in (GreedySwap(), SkipFill())]
    assert not calls
    with numba_kernels(True):
        on = [p.pack(values, tokens, valid, budget) for p in (GreedySwap(), SkipFill())]
        Greedy().pack(values, tokens, valid, budget)
    assert calls == ["_greedy_swap_rows", "_skip_fill_rows"]
    assert all(np.array_equal(a, b) for a, b in zip(on, off))


def test_replays_with_and_without_the_kernels_are_identical():
    """Per-query arms (Hivemind's greedy-swap and skip-fill, corrected and
    packed again together; Generative Agents' two, replayed query by query
    through the compiled min-max sum and rank) give the same frames with the
    kernels on and off."""
    from tests.test_accelerators import _frames, _stream

    stream = _stream(1)
    arms = [Arm(f"hivemind-{hl}", resolve_policy(
        {"preset": "hivemind", "decay": {"task_half_life_days": hl}}, "policies.h"))
        for hl in (2.0, 30.0, 180.0)]
    arms.append(Arm("hivemind-skip-fill", resolve_policy(
        {"preset": "hivemind", "packer": "skip-fill"}, "policies.s")))
    arms += [Arm(p, resolve_policy({"preset": p}, "policies.g"))
             for p in ("generative-agents", "generative-agents-code")]
    assert all(a.policy.feedback.timing == "per-query" for a in arms)
    settings_ = SimSettings(candidates=12, save_rankings=True, tick_days=2.0,
                            budget_tokens=400)
    with numba_kernels(False):
        want = _frames(simulate(stream, arms, settings_, seed_sequence(2)))
    with numba_kernels(True):
        got = simulate(stream, arms, settings_, seed_sequence(2))
    assert all(a["walk"] for a in got.accelerated[:4])
    for key, frame in _frames(got).items():
        assert_frame_equal(frame, want[key], check_exact=True)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 8), st.integers(1, 12), st.integers(0, 2**32 - 1))
def test_compiled_walk_merge_orders_as_numpy(q, c, seed):
    """The walk's merge of first candidates and rescored cells
    (``walk._merge_cells``): the compiled insertion and numpy's lexsort give
    the same queries, scores and columns: ties in score (to the lower
    column), -inf and +inf scores, first candidates used before their query
    (dropped) or after it (kept), no column used, columns near each other
    (looked up in a table) or far apart (searched), queries of one cell or
    many."""
    from memsim.engine.walk import _merge_cells

    rng = np.random.default_rng(seed)
    levels = np.array([-np.inf, 0.1, 0.2, 0.3, np.inf])  # few values: ties
    fv = rng.choice(levels, (q, c), p=[0.2, 0.3, 0.2, 0.2, 0.1])
    fp = rng.integers(0, 3 * c, (q, c))
    order = np.lexsort((fp, -fv), axis=1)  # as a first scoring gives them
    fv, fp = np.take_along_axis(fv, order, axis=1), np.take_along_axis(fp, order, axis=1)
    # the columns used (ascending), and the first query that sees each
    ucols = np.flatnonzero(rng.random(3 * c) < rng.choice([0.0, 0.3, 0.9]))
    useen = rng.integers(0, q + 1, len(ucols))
    aq = np.flatnonzero(rng.random(q) < 0.7)
    if not len(aq):
        aq = np.array([q - 1])
    counts = rng.integers(1, 6, len(aq))
    cq = np.repeat(aq, counts)
    new = rng.choice(levels, counts.sum())
    ci = rng.integers(0, 3 * c, counts.sum())
    # columns far apart: the compiled lookup searches instead of a table
    spread = int(rng.choice([1, 1_000_003]))
    fp, ucols, ci = fp * spread, ucols * spread, ci * spread
    with numba_kernels(False):
        want = _merge_cells(fv, fp, cq, new, ci, ucols, useen)
    with numba_kernels(True):
        got = _merge_cells(fv, fp, cq, new, ci, ucols, useen)
    assert np.array_equal(want[0], aq)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype and np.array_equal(g, w)
