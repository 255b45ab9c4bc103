"""Packers and orderers: budget, optimality, golden scenarios, orderings."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsim.core.errors import ConfigError, ParameterError
from memsim.policies import REGISTRY, build_component
from memsim.policies.ordering import ByScore, Edges, Reversed
from memsim.core.knapsack import knapsack_value
from memsim.policies.packing import Exact, Greedy, GreedySwap, TopKCutoff

# kept in the repository (tests/golden/README.md): a fresh clone runs these
GOLDEN = Path(__file__).resolve().parent / "golden" / "source_vectors.json"
VALUE_BASED = ("greedy", "greedy-swap", "exact")


def _value(values, packed):
    return np.where(packed, values, 0.0).sum(axis=1)


def _brute_force(values, tokens, valid, budget):
    """Best value per row over all 2^C subsets (C <= 12)."""
    q, c = values.shape
    subsets = np.array(list(itertools.product([False, True], repeat=c)), dtype=bool)  # (2^C, C)
    best = np.zeros(q)
    for r in range(q):
        ok = ~(subsets & ~valid[r]).any(axis=1)
        ok &= subsets.astype(np.int64) @ tokens[r] <= budget[r]
        v = subsets.astype(np.float64) @ values[r]
        best[r] = max(0.0, v[ok].max(initial=0.0))
    return best


@st.composite
def packing_problems(draw, max_c=12):
    q = draw(st.integers(1, 4))
    c = draw(st.integers(1, max_c))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    # mix of sizes incl. 0-token notes, negative/zero values, invalid slots and
    # budgets from "nothing fits" to "everything fits"
    values = np.round(rng.normal(0.4, 0.5, (q, c)), draw(st.sampled_from([1, 2, 6])))
    tokens = rng.integers(0, draw(st.sampled_from([5, 60, 400])), (q, c))
    valid = rng.random((q, c)) < draw(st.sampled_from([0.6, 1.0]))
    budget = rng.integers(-1, int(tokens.sum(axis=1).max()) + 2, q)
    sorted_ = draw(st.booleans())
    if sorted_:  # as the engine passes them: best first by score
        order = np.argsort(-values, axis=1, kind="stable")
        values = np.take_along_axis(values, order, axis=1)
        tokens = np.take_along_axis(tokens, order, axis=1)
    return values, tokens.astype(np.int64), valid, budget.astype(np.int64)


ALL_PACKERS = {name: cls() for name, cls in REGISTRY["packer"].items()}


def test_registry_has_the_packers_and_orderers():
    assert {"top-k-cutoff", "skip-fill", "greedy", "greedy-swap", "exact"} <= set(REGISTRY["packer"])
    assert {"score", "reversed", "edges"} <= set(REGISTRY["orderer"])


@settings(max_examples=150, deadline=None)
@given(packing_problems())
def test_no_packer_exceeds_the_budget(problem):
    values, tokens, valid, budget = problem
    for name, packer in ALL_PACKERS.items():
        packed = np.asarray(packer.pack(values, tokens, valid, budget))
        assert packed.shape == values.shape and packed.dtype == bool, name
        assert not (packed & ~valid).any(), name
        used = np.where(packed, tokens, 0).sum(axis=1)
        assert (used <= np.maximum(budget, 0)).all(), name
        if name in VALUE_BASED:  # value <= 0 is never packed by value-based packers
            assert not (packed & ~(values > 0)).any(), name


@settings(max_examples=150, deadline=None)
@given(packing_problems())
def test_exact_is_optimal_and_dominates(problem):
    values, tokens, valid, budget = problem
    exact = _value(values, Exact().pack(values, tokens, valid, budget))
    np.testing.assert_allclose(exact, _brute_force(values, tokens, valid, budget), atol=1e-9)
    milp = _value(values, Exact(method="milp").pack(values, tokens, valid, budget))
    np.testing.assert_allclose(milp, exact, atol=1e-9)
    for name, packer in ALL_PACKERS.items():
        other = _value(values, packer.pack(values, tokens, valid, budget))
        assert (exact >= other - 1e-9).all(), name
    greedy = _value(values, Greedy().pack(values, tokens, valid, budget))
    swap = _value(values, GreedySwap().pack(values, tokens, valid, budget))
    assert (swap >= greedy - 1e-12).all()
    np.testing.assert_array_equal(
        GreedySwap(max_swaps=0).pack(values, tokens, valid, budget),
        Greedy().pack(values, tokens, valid, budget))


def _swap_rule(values, tokens, valid, budget, max_swaps, tol=1e-12):
    """:class:`GreedySwap`'s rule for one query, note by note, as its
    docstring states it (a reference for the vectorised passes)."""
    c = len(values)
    ok = [bool(valid[i]) and values[i] > 0 and 0 <= tokens[i] <= budget for i in range(c)]
    dens = [np.inf if tokens[i] == 0 else values[i] / tokens[i] for i in range(c)]
    by_density = sorted((i for i in range(c) if ok[i]), key=lambda i: -dens[i])  # stable: rank
    packed, used = set(), 0

    def refill():
        nonlocal used
        for i in by_density:
            if i not in packed and used + tokens[i] <= budget:
                packed.add(i)
                used += tokens[i]

    refill()
    swaps = 0
    for _ in range(max_swaps):
        d_min = min((dens[i] for i in packed), default=np.inf)
        free = budget - used

        # the pass-start bound: making room costs at least need * least density
        bound = [(tokens[j] - free) * d_min if tokens[j] > free else 0.0 for j in range(c)]
        cands = sorted((j for j in range(c) if ok[j] and j not in packed
                        and values[j] - bound[j] > tol * values[j]), key=lambda j: -values[j])
        swapped = False
        for j in cands:
            if swaps >= max_swaps:
                break
            need = tokens[j] - (budget - used)
            removal, removed = [], 0.0
            if need > 0:
                # the greedy cover: ascending value per token, worse rank first
                order = sorted(packed, key=lambda i: (dens[i], -i))
                got = 0
                for i in order:
                    if got >= need:
                        break
                    removal.append(i)
                    got += tokens[i]
                    removed += values[i]
                singles = [i for i in packed if tokens[i] >= need]
                if singles:
                    one = min(singles, key=lambda i: (values[i], -i))
                    if values[one] < removed:
                        removal, removed = [one], values[one]
            if values[j] - removed > tol * abs(values[j]):
                for i in removal:
                    packed.discard(i)
                    used -= tokens[i]
                packed.add(j)
                used += tokens[j]
                swaps += 1
                swapped = True
        refill()
        if not swapped:
            break
    out = np.zeros(c, dtype=bool)
    out[sorted(packed)] = True
    return out


@settings(max_examples=300, deadline=None)
@given(packing_problems(max_c=30), st.integers(1, 5))
def test_greedy_swap_follows_its_rule_note_by_note(problem, max_swaps):
    values, tokens, valid, budget = problem
    got = GreedySwap(max_swaps=max_swaps).pack(values, tokens, valid, budget)
    for r in range(len(values)):
        want = _swap_rule(values[r], tokens[r], valid[r], budget[r], max_swaps)
        assert np.array_equal(got[r], want), r


@settings(max_examples=100, deadline=None)
@given(packing_problems(max_c=10))
def test_knapsack_value_is_exact(problem):
    values, tokens, valid, budget = problem
    for r in range(values.shape[0]):
        v, t = values[r][valid[r]], tokens[r][valid[r]]
        best, chosen = knapsack_value(v, t, int(budget[r]))
        expect = _brute_force(v[None], t[None], np.ones((1, len(v)), bool), budget[r:r + 1])[0]
        assert best == pytest.approx(expect, abs=1e-9)
        assert chosen.dtype == bool and chosen.shape == v.shape
        assert int(t[chosen].sum()) <= max(int(budget[r]), 0)
        assert not (chosen & ~(v > 0)).any()
        assert float(v[chosen].sum()) == pytest.approx(best, abs=1e-12)


def test_knapsack_value_edge_cases():
    assert knapsack_value([], [], 100)[0] == 0.0
    assert knapsack_value([-1.0, 0.0], [1, 1], 100)[0] == 0.0
    best, chosen = knapsack_value([0.5, 0.2], [10, 10], 100)  # fast path: all fit
    assert best == pytest.approx(0.7) and chosen.tolist() == [True, True]
    best, chosen = knapsack_value([0.5, 0.2], [200, 10], 100)  # too large alone
    assert best == pytest.approx(0.2) and chosen.tolist() == [False, True]


# --------------------------------------------------------------------------
# The blog's example and the golden scenarios (seed 000)
# --------------------------------------------------------------------------


def _one(items, budget):
    arr = np.asarray(items, dtype=np.float64)
    return (arr[:, 0][None, :], arr[:, 1].astype(np.int64)[None, :],
            np.ones((1, len(arr)), dtype=bool), np.array([budget], dtype=np.int64))


def test_blog_example_2000_token_note_vs_twenty_small_ones():
    # "one 2,000-token note scoring 0.9 would shove out twenty 100-token notes
    # scoring 0.85. Same budget."
    problem = _one([(0.9, 2000)] + [(0.85, 100)] * 20, 2000)
    assert _value(problem[0], TopKCutoff().pack(*problem))[0] == pytest.approx(0.9)
    for packer in (Greedy(), GreedySwap(), Exact(), Exact(method="milp")):
        assert _value(problem[0], packer.pack(*problem))[0] == pytest.approx(17.0), packer.name


def _golden_packing():
    return json.loads(GOLDEN.read_text())["hivemind_packing"]


@pytest.mark.parametrize("case", _golden_packing(), ids=lambda c: c["scenario"])
def test_golden_hivemind_packing(case):
    problem = _one(case["items_value_tokens"], case["budget"])
    values = problem[0]

    def chosen(packer):
        packed = packer.pack(*problem)[0]
        return sorted(np.flatnonzero(packed).tolist()), float(values[0][packed].sum())

    topk_set, topk_v = chosen(TopKCutoff())
    assert topk_set == sorted(case["topk_cutoff"])
    assert topk_v == pytest.approx(case["topk_value"])

    greedy_set, greedy_v = chosen(Greedy())
    assert greedy_set == sorted(case["greedy_density"])  # golden lists insertion order
    assert greedy_v == pytest.approx(case["greedy_value"])

    exact_set, exact_v = chosen(Exact())
    assert exact_v == pytest.approx(case["dp_value"])
    assert exact_set == sorted(case["dp_set"])
    assert knapsack_value(values[0], problem[1][0], case["budget"])[0] == pytest.approx(
        case["dp_value"])

    # The golden greedy + swap uses "one illustrative swap rule"; memsim's rule
    # is its own design (see GreedySwap), so the contract is greedy <= ours <=
    # exact. On these three scenarios ours also equals the golden one (same set,
    # same value: 17.0, 0.95, 2.4); the last assertion pins that as a regression
    # check, not as a requirement on the rule.
    swap_set, swap_v = chosen(GreedySwap())
    assert greedy_v - 1e-12 <= swap_v <= exact_v + 1e-12
    assert swap_v == pytest.approx(case["greedy_swap_value"])
    assert swap_set == sorted(case["greedy_plus_swap"])


# --------------------------------------------------------------------------
# Exact: large budgets (MILP), gcd reduction, bucketing guard
# --------------------------------------------------------------------------


def test_exact_uses_milp_for_large_budgets_and_agrees_with_the_dp():
    rng = np.random.default_rng(7)
    c = 30
    tokens = rng.integers(5_000, 60_000, (2, c))
    values = -np.sort(-rng.uniform(0.05, 1.0, (2, c)), axis=1)
    valid = np.ones((2, c), dtype=bool)
    budget = np.array([300_001, 400_003])  # > milp_budget: "auto" takes HiGHS
    auto = Exact()
    assert budget.min() > auto.milp_budget
    dp = Exact(method="dp", max_cells=2**24)
    got_auto, got_dp = auto.pack(values, tokens, valid, budget), dp.pack(values, tokens, valid, budget)
    assert dp.bucket_width(c, int(budget.max())) == 1  # the DP here is exact
    assert (np.where(got_auto, tokens, 0).sum(axis=1) <= budget).all()
    np.testing.assert_allclose(_value(values, got_auto), _value(values, got_dp), rtol=1e-9)


def test_exact_gcd_reduction_keeps_large_round_sizes_exact():
    # sizes in multiples of 100: the table shrinks 100-fold, the answer is exact
    problem = _one([(0.9, 2000)] + [(0.85, 100)] * 20 + [(0.5, 1900)], 2000)
    assert _value(problem[0], Exact(max_cells=64).pack(*problem))[0] == pytest.approx(17.0)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 9), st.sampled_from([64, 128, 300]))
def test_bucketing_guard_is_feasible_and_within_its_bound(seed, c, max_cells):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, 120, c)
    values = rng.uniform(0.01, 1.0, c)
    budget = int(rng.integers(1, tokens.sum()))
    packer = Exact(method="dp", max_cells=max_cells)
    elig = tokens <= budget
    g = int(np.gcd.reduce(tokens[elig])) if elig.any() else 1
    # the guard works in gcd-reduced units: w there is g * w tokens, and the
    # rounding adds at most g * (w - 1) tokens per note
    wb = packer.bucket_width(int(elig.sum()), budget // g)
    extra = g * (wb - 1)
    packed = packer.pack(values[None], tokens[None], np.ones((1, c), bool),
                         np.array([budget]))[0]
    got = float(values[packed].sum())
    assert int(tokens[packed].sum()) <= budget  # rounding sizes UP keeps it feasible
    best, opt = knapsack_value(values, tokens, budget)
    assert got <= best + 1e-9
    # stated bound: at least the optimum with every size inflated by w - 1 ...
    inflated, _ = knapsack_value(values, tokens + extra, budget)
    assert got >= inflated - 1e-9
    # ... hence at least V* (B - t_max - (w - 1)) / (B + n* (w - 1))
    n_star, t_max = int(opt.sum()), int(tokens[opt].max(initial=0))
    assert got >= best * (budget - t_max - extra) / (budget + n_star * extra) - 1e-9
    # and never below the heuristic
    swap = GreedySwap().pack(values[None], tokens[None], np.ones((1, c), bool),
                             np.array([budget]))[0]
    assert got >= float(values[swap].sum()) - 1e-12


def test_bucketing_really_happens_with_a_small_table():
    packer = Exact(method="dp", max_cells=64)
    assert packer.bucket_width(10, 1000) > 1
    assert packer.bucket_width(10, 5) == 1
    w = packer.bucket_width(10, 1000)
    assert 10 * (1000 // w + 1) <= 64 and 10 * (1000 // (w - 1) + 1) > 64


def test_packer_parameters_are_validated():
    with pytest.raises(ParameterError, match="'max_swaps' parameter of GreedySwap"):
        GreedySwap(max_swaps=-1)
    with pytest.raises(ParameterError, match="'method' parameter of Exact"):
        Exact(method="simplex")
    with pytest.raises(ConfigError, match=r"^packer: The 'max_cells' parameter"):
        build_component("packer", {"kind": "exact", "max_cells": 10}, "packer")
    assert build_component("packer", {"kind": "greedy-swap", "max_swaps": 2},
                           "p").to_config() == {"kind": "greedy-swap", "min_relative_score": 0.0,
                                                "cut_on": "score", "max_swaps": 2}
    with pytest.raises(ParameterError, match="'min_relative_score' parameter of Greedy"):
        Greedy(min_relative_score=1.5)


def test_relative_cutoff_keeps_small_weak_notes_out():
    # one 500-token answer scored 0.9 and ten 40-token notes scored 0.45: on
    # raw scores density prefers the small ones; a 0.9 cutoff keeps only the answer
    values = np.array([[0.9] + [0.45] * 10])
    tokens = np.array([[500] + [40] * 10])
    valid = np.ones_like(values, dtype=bool)
    budget = np.array([600])
    raw = Greedy().pack(values, tokens, valid, budget)
    assert not raw[0, 0] and raw[0, 1:].all()
    cut = Greedy(min_relative_score=0.9).pack(values, tokens, valid, budget)
    assert cut[0].tolist() == [True] + [False] * 10


@settings(max_examples=100, deadline=None)
@given(packing_problems())
def test_one_budget_serves_every_row(problem):
    """A budget of one value is every row's (the compiled kernels, which read
    a budget per row without bounds checks, get it broadcast); a budget of
    another length than the rows' is refused."""
    values, tokens, valid, budget = problem
    every = np.full(len(values), budget[0])
    for name, packer in ALL_PACKERS.items():
        got = np.asarray(packer.pack(values, tokens, valid, budget[:1]))
        assert np.array_equal(got, np.asarray(packer.pack(values, tokens, valid, every))), name
        with pytest.raises(ValueError):
            packer.pack(values, tokens, valid, np.zeros(len(values) + 1, np.int64))


def test_packers_accept_an_empty_batch():
    z = np.zeros((0, 5))
    for packer in ALL_PACKERS.values():
        out = packer.pack(z, z.astype(np.int64), z.astype(bool), np.zeros(0, np.int64))
        assert out.shape == (0, 5)


# --------------------------------------------------------------------------
# Orderers
# --------------------------------------------------------------------------


def test_edges_order_example():
    packed = np.ones((1, 5), dtype=bool)
    # rank 1 -> first, 2 -> last, 3 -> second, 4 -> second-to-last, 5 -> middle
    assert Edges().order(np.zeros((1, 5)), packed)[0].tolist() == [0, 4, 1, 3, 2]
    assert Reversed().order(np.zeros((1, 5)), packed)[0].tolist() == [4, 3, 2, 1, 0]
    assert ByScore().order(np.zeros((1, 5)), packed)[0].tolist() == [0, 1, 2, 3, 4]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.integers(1, 30), st.integers(0, 2**32 - 1))
def test_orderings_are_permutations_of_the_packed(q, c, seed):
    rng = np.random.default_rng(seed)
    packed = rng.random((q, c)) < rng.random()
    values = -np.sort(-rng.random((q, c)), axis=1)
    for orderer in (ByScore(), Reversed(), Edges()):
        pos = orderer.order(values, packed)
        assert pos.dtype == np.int64 and pos.shape == (q, c)
        assert (pos[~packed] == -1).all()
        for r in range(q):
            n = int(packed[r].sum())
            assert sorted(pos[r][packed[r]].tolist()) == list(range(n))
            if n:
                cols = np.flatnonzero(packed[r])
                best, second = cols[0], cols[1] if n > 1 else None
                if orderer.name in ("score", "edges"):
                    assert pos[r, best] == 0  # the best packed note is first
                if orderer.name == "reversed":
                    assert pos[r, best] == n - 1
                if orderer.name == "edges" and second is not None:
                    assert pos[r, second] == n - 1  # the runner-up closes the context
