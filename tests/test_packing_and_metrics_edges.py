"""Packers, the knapsack oracle and the per-query metrics against plain
reference code, on edge inputs: NaN and -inf values, invalid candidates
between real ones, budgets of -1, 0, 1 and far beyond the notes, 0-token
notes, equal sizes, ties, no relevant note and many."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsim.core.knapsack import knapsack_value
from memsim.data.stream import make_stream
from memsim.evaluation.metrics import (AGE_BUCKET_COLUMNS, AGE_BUCKETS, OLD_RECALL_COLUMN,
                                       RelevanceIndex, oracle_values, query_metrics)
from memsim.evaluation.reader import PositionalReader
from memsim.policies.frameworks import DropMiddle
from memsim.policies.ordering import ByScore, Edges, Reversed
from memsim.policies.packing import Exact, Greedy, GreedySwap, SkipFill, TopKCutoff

# --------------------------------------------------------------------------
# Reference packers: one row, a loop per rule as the docstrings state it
# --------------------------------------------------------------------------


def _ref_top_k(v, t, ok, b):
    out, used = np.zeros(len(v), bool), 0
    for j in range(len(v)):
        if not ok[j]:
            continue
        if used + t[j] > b:
            break
        out[j], used = True, used + t[j]
    return out


def _ref_skip_fill(v, t, ok, b):
    out, used = np.zeros(len(v), bool), 0
    for j in range(len(v)):
        if ok[j] and used + t[j] <= b:
            out[j], used = True, used + t[j]
    return out


def _ref_eligible(v, t, ok, b, cut=0.0, ref=None):
    """Value > 0 (NaN is not), fits alone, and at least ``cut`` times the best
    ``ref`` (the values by default) of the row's valid candidates with a number."""
    ref = v if ref is None else ref
    e = [bool(ok[j]) and v[j] > 0 and 0 <= t[j] <= b for j in range(len(v))]
    if cut > 0:
        nums = [ref[j] for j in range(len(v)) if ok[j] and not math.isnan(ref[j])]
        top = max(nums) if nums else -math.inf
        e = [e[j] and ref[j] >= cut * top for j in range(len(v))]
    return e


def _ref_greedy(v, t, ok, b, cut=0.0, ref=None):
    e = _ref_eligible(v, t, ok, b, cut, ref)
    dens = [math.inf if t[j] == 0 else v[j] / t[j] for j in range(len(v))]
    out, used = np.zeros(len(v), bool), 0
    for j in sorted((j for j in range(len(v)) if e[j]), key=lambda j: -dens[j]):  # stable
        if used + t[j] <= b:
            out[j], used = True, used + t[j]
    return out


def _brute_best(v, t, ok, b, cut=0.0, ref=None):
    """Best sum of values over every subset of the eligible notes that fits."""
    e = [j for j, x in enumerate(_ref_eligible(v, t, ok, b, cut, ref)) if x]
    best = 0.0
    for r in range(len(e) + 1):
        for s in itertools.combinations(e, r):
            if sum(t[j] for j in s) <= b:
                best = max(best, sum(v[j] for j in s))
    return best


def _ref_drop_middle(v, t, ok, b):
    """AutoGen's loop: the messages oldest first (the candidates come newest
    first), ``pop(len // 2)`` while they exceed the limit."""
    history = [j for j in range(len(v)) if ok[j]][::-1]
    while history and sum(t[j] for j in history) > b:
        history.pop(len(history) // 2)
    out = np.zeros(len(v), bool)
    out[history] = True
    return out


@st.composite
def odd_problems(draw, max_c=9):
    """Rows with NaN and -inf values, gaps of invalid candidates, 0-token
    notes, equal sizes, value ties and budgets from -1 to far beyond."""
    q = draw(st.integers(1, 4))
    c = draw(st.integers(1, max_c))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    values = np.round(rng.normal(0.3, 0.5, (q, c)), draw(st.sampled_from([0, 1, 3])))
    kind = rng.random((q, c))
    values[kind < 0.08] = np.nan
    values[(kind >= 0.08) & (kind < 0.14)] = -np.inf
    if draw(st.booleans()):
        tokens = rng.integers(0, draw(st.sampled_from([3, 20, 100])), (q, c))
    else:  # every note the same size
        tokens = np.full((q, c), draw(st.integers(1, 4)))
    valid = rng.random((q, c)) < draw(st.sampled_from([0.5, 0.8, 1.0]))
    budget = rng.choice([-1, 0, 1, 5, 30, 200, 10**12], q)
    return values, tokens.astype(np.int64), valid, budget.astype(np.int64)


@pytest.fixture(params=["1", "0"], ids=["numba", "numpy"])
def kernels(request, monkeypatch):
    monkeypatch.setenv("MEMSIM_NUMBA", request.param)


# --------------------------------------------------------------------------
# The relative cut: a NaN value must not hide the row's best
# --------------------------------------------------------------------------


@pytest.mark.parametrize("packer", [Greedy(min_relative_score=0.5),
                                    GreedySwap(min_relative_score=0.5),
                                    Exact(min_relative_score=0.5)], ids=lambda p: p.name)
def test_a_nan_value_does_not_empty_a_cut_row(packer, kernels):
    # 0.9 and 0.5 are at least half the best (0.9); the NaN is never packed
    values = np.array([[0.9, np.nan, 0.5, 0.2]])
    tokens = np.array([[10, 10, 10, 10]])
    valid = np.ones((1, 4), bool)
    got = packer.pack(values, tokens, valid, np.array([100]))
    assert got[0].tolist() == [True, False, True, False]


@pytest.mark.parametrize("cls", [Greedy, GreedySwap, Exact], ids=lambda c: c.name)
def test_a_nan_similarity_does_not_empty_a_similarity_cut_row(cls, kernels):
    packer = cls(min_relative_score=0.5, cut_on="similarity")
    values = np.array([[0.9, 0.8, 0.5, 0.2]])
    similarity = np.array([[0.6, np.nan, 0.4, 0.1]])
    got = packer.pack(values, np.full((1, 4), 10), np.ones((1, 4), bool), np.array([100]),
                      similarity=similarity)
    assert got[0].tolist() == [True, False, True, False]


# --------------------------------------------------------------------------
# Every packer against its reference, row by row
# --------------------------------------------------------------------------


@settings(max_examples=120, deadline=None)
@given(odd_problems(), st.sampled_from([0.0, 0.3, 0.8]), st.booleans())
def test_packers_follow_their_rules_on_odd_rows(problem, cut, compiled):
    values, tokens, valid, budget = problem
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMSIM_NUMBA", "1" if compiled else "0")
        rules = {
            "top-k-cutoff": (TopKCutoff(), _ref_top_k),
            "skip-fill": (SkipFill(), _ref_skip_fill),
            "drop-middle": (DropMiddle(), _ref_drop_middle),
            "greedy": (Greedy(min_relative_score=cut),
                       lambda *a: _ref_greedy(*a, cut=cut)),
        }
        got = {name: p.pack(values, tokens, valid, budget) for name, (p, _) in rules.items()}
        exact = Exact(min_relative_score=cut).pack(values, tokens, valid, budget)
        swap = GreedySwap(min_relative_score=cut).pack(values, tokens, valid, budget)
    for r in range(len(values)):
        row = (values[r], tokens[r], valid[r], int(budget[r]))
        for name, (_, ref) in rules.items():
            assert got[name][r].tolist() == ref(*row).tolist(), (name, r)
        best = _brute_best(*row, cut=cut)
        for name, packed in (("exact", exact[r]), ("greedy-swap", swap[r])):
            assert not (packed & ~valid[r]).any(), name
            assert tokens[r][packed].sum() <= max(int(budget[r]), 0), name
            assert not (packed & ~(values[r] > 0)).any(), name
        assert math.isclose(values[r][exact[r]].sum(), best, abs_tol=1e-9)
        greedy_value = values[r][got["greedy"][r]].sum()
        assert greedy_value - 1e-12 <= values[r][swap[r]].sum() <= best + 1e-9


@settings(max_examples=80, deadline=None)
@given(odd_problems(max_c=30), st.integers(0, 5), st.sampled_from([0.0, 0.5]))
def test_rows_pack_alone_as_together_and_compiled_as_numpy(problem, max_swaps, cut):
    values, tokens, valid, budget = problem
    packers = [SkipFill(), GreedySwap(max_swaps=max_swaps, min_relative_score=cut)]
    with pytest.MonkeyPatch.context() as mp:
        for p in packers:
            mp.setenv("MEMSIM_NUMBA", "1")
            fast = p.pack(values, tokens, valid, budget)
            mp.setenv("MEMSIM_NUMBA", "0")
            slow = p.pack(values, tokens, valid, budget)
            assert np.array_equal(fast, slow), p
            for r in range(len(values)):
                one = p.pack(values[r:r + 1], tokens[r:r + 1], valid[r:r + 1], budget[r:r + 1])
                assert np.array_equal(one[0], slow[r]), (p, r)


def test_orderers_read_ranks_not_values():
    packed = np.array([[True, False, True, True, False, True]])
    for values in (np.array([[np.nan, 1.0, -np.inf, 2.0, 0.0, np.nan]]), np.zeros((1, 6))):
        assert ByScore().order(values, packed)[0].tolist() == [0, -1, 1, 2, -1, 3]
        assert Reversed().order(values, packed)[0].tolist() == [3, -1, 2, 1, -1, 0]
        assert Edges().order(values, packed)[0].tolist() == [0, -1, 3, 1, -1, 2]


# --------------------------------------------------------------------------
# The oracle: exact against every subset
# --------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 10), st.integers(0, 2**32 - 1),
       st.sampled_from([4, 100, 2_000_000]), st.sampled_from(["fit", "some", "huge"]))
def test_knapsack_value_is_the_best_subset(n, seed, scale, how):
    rng = np.random.default_rng(seed)
    values = rng.choice([-1.0, 0.0, 0.5, 1.0, 2.0, 3.0, np.nan], n)
    tokens = rng.integers(0, scale, n)
    budget = {"fit": int(tokens.sum()), "some": int(rng.integers(-1, tokens.sum() + 2)),
              "huge": 10**15}[how]
    best, chosen = knapsack_value(values, tokens, budget)
    want = _brute_best(values, tokens, np.ones(n, bool), budget)
    assert math.isclose(best, want, abs_tol=1e-12)
    assert math.isclose(values[chosen].sum() if chosen.any() else 0.0, best, abs_tol=1e-12)
    assert tokens[chosen].sum() <= max(budget, 0)
    assert not (chosen & ~(values > 0)).any()


# --------------------------------------------------------------------------
# The per-query metrics against a loop over each query's notes
# --------------------------------------------------------------------------


def _stream(rng):
    n = int(rng.integers(3, 15))
    nq = int(rng.integers(1, 6))
    # ages on and next to the buckets' edges
    created = rng.choice([-500, -400, -200, -100, -90, -89.5, -30, -7, -6.99, 0, 1, 3], n)
    notes = pd.DataFrame({"note_id": np.arange(n) * 3 + 1, "created_at": created.astype(float),
                          "tokens": rng.integers(1, rng.choice([3, 50]), n), "actor": "a"})
    queries = pd.DataFrame({"query_id": np.arange(nq) * 7 + 2,
                            "t": np.sort(rng.uniform(0, 5, nq)), "actor": "a"})
    rows = []
    for qid in queries["query_id"]:
        k = int(rng.integers(0, min(n, 12) + 1))  # no relevant note ... many
        for nid in rng.choice(notes["note_id"], k, replace=False):
            rows.append((qid, nid, float(rng.choice([1.0, 0.5, 2.0, -0.5, -1.0, 3.0]))))
    qrels = pd.DataFrame(rows, columns=["query_id", "note_id", "gain"]).astype(
        {"query_id": "int64", "note_id": "int64", "gain": "float64"})
    return make_stream(notes, queries, qrels)


def _batch(seed, gaps):
    """A stream and a policy's batch: candidates among the existing notes,
    with cells that are not candidates between them when ``gaps``."""
    rng = np.random.default_rng(seed)
    s = _stream(rng)
    created = s.notes["created_at"].to_numpy()
    tok = s.notes["tokens"].to_numpy()
    rel = RelevanceIndex(s, created)
    nq = len(s.queries)
    qrows, t = np.arange(nq), s.queries["t"].to_numpy()
    c = int(rng.integers(1, 14))
    cand_rows = np.zeros((nq, c), np.int64)
    ok = np.zeros((nq, c), bool)
    for q in range(nq):
        existing = np.flatnonzero(created <= t[q])
        rng.shuffle(existing)
        m = min(len(existing), c)
        slots = np.sort(rng.choice(c, m, replace=False)) if gaps else np.arange(m)
        cand_rows[q, slots] = existing[:m]
        ok[q, slots] = True
    packed = ok & (rng.random((nq, c)) < 0.6)
    budget = rng.integers(0, 60, nq)
    evicted = rng.random(len(created)) < 0.2
    args = dict(cand_rows=cand_rows, cand_ok=ok, packed=packed,
                position=Edges().order(None, packed), gains=rel.lookup(qrows, cand_rows),
                tokens=tok[cand_rows], t=t, qrows=qrows, budget=budget,
                oracle=oracle_values(rel, qrows, t, budget, tok), relevance=rel,
                evicted=evicted, reader=PositionalReader())
    return s, args


def _reference(s, a):
    """Each metric of docs/contracts/metrics.md, by a loop per query."""
    created = s.notes["created_at"].to_numpy()
    tok = s.notes["tokens"].to_numpy()
    qr, reader, nan = s.qrels, a["reader"], math.nan
    out = []
    for q in range(len(a["qrows"])):
        t = a["t"][q]
        qid = s.queries["query_id"].iloc[q]
        mine = qr[qr["query_id"] == qid]
        gain = {int(np.searchsorted(s.notes["note_id"], n)): g
                for n, g in zip(mine["note_id"], mine["gain"])}
        rp = {r: g for r, g in gain.items() if g > 0 and created[r] <= t}
        ranking = [a["cand_rows"][q, j] for j in range(a["cand_ok"].shape[1])
                   if a["cand_ok"][q, j]]
        cols = np.flatnonzero(a["packed"][q])
        packed = [a["cand_rows"][q, j] for j in cols]
        m = {"utility": sum(gain.get(r, 0.0) for r in packed)}
        m["oracle_utility"] = _brute_best(np.array(list(rp.values())),
                                          tok[list(rp)].astype(np.int64),
                                          np.ones(len(rp), bool), int(a["budget"][q]))
        m["utility_ratio"] = m["utility"] / m["oracle_utility"] if m["oracle_utility"] else nan
        m["recall"] = sum(r in rp for r in packed) / len(rp) if rp else nan
        used = sum(tok[r] for r in packed)
        m["precision"] = sum(tok[r] for r in packed if r in rp) / used if used else nan
        dcg = sum(max(gain.get(r, 0.0), 0.0) / math.log2(i + 2)
                  for i, r in enumerate(ranking[:10]))
        idcg = sum(g / math.log2(i + 2)
                   for i, g in enumerate(sorted(rp.values(), reverse=True)[:10]))
        m["ndcg@10"] = dcg / idcg if idcg > 0 else nan
        first = next((i + 1 for i, r in enumerate(ranking) if r in rp), None)
        m["mrr"] = (1.0 / first if first else 0.0) if rp else nan
        m["stale_rate"] = sum(gain.get(r, 0) < 0 for r in packed) / len(packed) if packed else nan
        m["harm"] = sum(-gain[r] for r in packed if gain.get(r, 0) < 0)
        m["tokens_used"], m["n_packed"], m["n_relevant"] = used, len(packed), len(rp)
        for col, (lo, hi) in zip(AGE_BUCKET_COLUMNS, AGE_BUCKETS):
            inside = [r for r in rp if lo <= t - created[r] < hi]
            m[col] = sum(r in packed for r in inside) / len(inside) if inside else nan
        old = [r for r in rp if t - created[r] >= 90]
        m[OLD_RECALL_COLUMN] = sum(r in packed for r in old) / len(old) if old else nan
        ages = [t - created[r] for r in packed if r in rp]
        m["max_relevant_age"] = max(ages) if ages else nan
        m["evicted_relevant"] = float(any(a["evicted"][r] for r in rp)) if rp else nan
        m["abstained"] = nan if rp else float(not packed)
        miss_rel = miss_stale = 1.0
        for j in cols:
            n = len(packed)
            p = float(reader.curve(a["position"][q, j] / (n - 1) if n > 1 else 0.0, n))
            g = gain.get(a["cand_rows"][q, j], 0.0)
            miss_rel *= (1 - p) if g > 0 else 1.0
            miss_stale *= (1 - p) if g < 0 else 1.0
        m["answer_prob"] = ((1 - miss_rel) * (1 - reader.stale_weight * (1 - miss_stale))
                            if rp else nan)
        out.append(m)
    return out


def _assert_metrics(got, want):
    for q, ref in enumerate(want):
        for k, v in ref.items():
            g = float(got[k][q])
            if math.isnan(v):
                assert math.isnan(g), (k, q, g)
            else:
                assert math.isclose(g, v, rel_tol=1e-12, abs_tol=1e-12), (k, q, g, v)


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_metrics_match_a_loop_over_each_query(seed):
    s, a = _batch(seed, gaps=False)
    _assert_metrics(query_metrics(**a), _reference(s, a))


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_cells_that_are_not_candidates_take_no_rank(seed):
    s, a = _batch(seed, gaps=True)
    _assert_metrics(query_metrics(**a), _reference(s, a))


def test_a_gap_before_the_first_relevant_note_does_not_lower_mrr_or_ndcg():
    s = make_stream(
        pd.DataFrame({"note_id": [1, 2, 3], "created_at": [0.0, 0.0, 0.0], "tokens": [5, 5, 5],
                      "actor": "a"}),
        pd.DataFrame({"query_id": [1], "t": [1.0], "actor": "a"}),
        pd.DataFrame({"query_id": [1], "note_id": [2], "gain": [1.0]}))
    rel = RelevanceIndex(s, s.notes["created_at"].to_numpy())
    cand_rows = np.array([[0, 1, 2]])
    ok = np.array([[False, True, True]])  # the first cell is no candidate
    packed = np.zeros((1, 3), bool)
    m = query_metrics(cand_rows=cand_rows, cand_ok=ok, packed=packed,
                      position=np.full((1, 3), -1), gains=rel.lookup(np.array([0]), cand_rows),
                      tokens=np.full((1, 3), 5), t=np.array([1.0]), qrows=np.array([0]),
                      budget=np.array([10]), oracle=np.array([1.0]), relevance=rel,
                      evicted=np.zeros(3, bool))
    assert m["mrr"][0] == 1.0 and m["ndcg@10"][0] == 1.0


def test_ndcg_and_rr_agree_with_ir_measures_with_gaps():
    ir_measures = pytest.importorskip("ir_measures")
    for seed in range(40):
        s, a = _batch(seed, gaps=True)
        m = query_metrics(**a)
        notes, qids = s.notes["note_id"].to_numpy(), s.queries["query_id"].to_numpy()
        created = s.notes["created_at"].to_numpy()
        qrels, run = [], []
        for q in range(len(qids)):
            mine = s.qrels[(s.qrels["query_id"] == qids[q]) & (s.qrels["gain"] > 0)]
            for n, g in zip(mine["note_id"], mine["gain"]):
                if created[np.searchsorted(notes, n)] <= a["t"][q]:
                    qrels.append(ir_measures.Qrel(str(qids[q]), str(n), int(g * 2)))
            real = a["cand_rows"][q][a["cand_ok"][q]]
            run += [ir_measures.ScoredDoc(str(qids[q]), str(notes[r]), float(len(real) - i))
                    for i, r in enumerate(real)]
        got = {(x.query_id, str(x.measure)): x.value for x in ir_measures.iter_calc(
            [ir_measures.nDCG @ 10, ir_measures.RR], qrels, run)}
        for q, qid in enumerate(qids):
            if (str(qid), "nDCG@10") in got:
                assert math.isclose(m["ndcg@10"][q], got[(str(qid), "nDCG@10")], abs_tol=1e-9)
                assert math.isclose(m["mrr"][q], got[(str(qid), "RR")], abs_tol=1e-9)
