"""The approximate retrievers: candidates from an HNSW index (hnswlib) and an IVF index (FAISS)."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings, strategies as hs
from hypothesis.extra import numpy as hnp

from memsim.runs.config import resolve_policy
from memsim.engine import Arm, SimSettings, simulate
from memsim.core.errors import ConfigError
from memsim.policies import build_component
from memsim.policies.context import ArrayContext
from memsim.policies import Retriever
from memsim.policies.retrieval import HNSW, IVF, Cosine, pair_cosine, pair_dots
from memsim.core.rng import seed_sequence
from memsim.checks.testing import check_component

from .helpers import random_stream

needs_hnswlib = pytest.mark.skipif(importlib.util.find_spec("hnswlib") is None,
                                   reason="hnswlib is not installed (pip install -e '.[ann]')")


def store(n=3000, q=300, dim=32, seed=0, live=None):
    rng = np.random.default_rng(seed)
    return ArrayContext(t=np.zeros(q), created_at=-np.arange(n, 0, -1.0),
                        note_emb=rng.normal(size=(n, dim)), query_emb=rng.normal(size=(q, dim)),
                        live=live)


def exact_top(ctx, m, allowed=None):
    sim = Cosine().similarity(ctx).astype(np.float64)
    if allowed is not None:
        sim = np.where(allowed, sim, -np.inf)
    top = np.argsort(-sim, axis=1, kind="stable")[:, :m]
    keep = np.zeros(sim.shape, dtype=bool)
    np.put_along_axis(keep, top, True, axis=1)
    return keep & np.isfinite(sim)


def half_live_store():
    """600 notes, each live for about half of 40 queries; the first query
    sees only 5 (fewer than any prefilter here: all of them)."""
    rng = np.random.default_rng(1)
    live = rng.random((40, 600)) < 0.5
    live[0] = False
    live[0, :5] = True
    return live, store(n=600, q=40, dim=8, live=live)


def assert_exact_but_scores(res):
    """The arms ``exact`` and ``ann`` rank, pack and measure alike; their
    scores differ by float32 rounding at most (the index arm's cosine is
    computed per cell, the exact arm's through the batch's product)."""
    for frame in (res.queries, res.rankings):
        got = {p: d.drop(columns="policy").reset_index(drop=True)
               for p, d in frame.groupby("policy")}
        scores = [c for c in got["exact"].columns if c == "score"]
        assert got["exact"].drop(columns=scores).equals(got["ann"].drop(columns=scores))
        for c in scores:
            np.testing.assert_allclose(got["ann"][c], got["exact"][c], rtol=0, atol=4e-7)


def assert_cosine_per_cell(r, ctx):
    """``r``'s similarity is the cosine (to float32 rounding), computed per
    cell: any rows and columns of it alone give the same floats."""
    sim = r.similarity(ctx)
    assert sim.dtype == np.float32
    np.testing.assert_allclose(sim, Cosine().similarity(ctx), rtol=0, atol=4e-7)
    rows, cols = np.array([2, 0]), np.array([7, 3, 3, 40])
    part = pair_cosine(ctx.query_vectors[rows], ctx.note_vectors[cols],
                       ctx.qnorm2[rows], ctx.nnorm2[cols])
    np.testing.assert_array_equal(part, sim[np.ix_(rows, cols)])


@settings(max_examples=100, deadline=None)
@given(q=hnp.arrays(np.float32, hs.tuples(hs.integers(1, 4), hs.integers(1, 40)),
                    elements=hs.floats(-1e3, 1e3, width=32)),
       n=hs.integers(1, 6), seed=hs.integers(0, 2**32 - 1))
def test_pair_dots_sum_each_pair_in_dimension_order(q, n, seed):
    notes = np.random.default_rng(seed).normal(size=(n, q.shape[1])).astype(np.float32)
    got = pair_dots(q, notes)
    for i in range(len(q)):
        for k in range(n):
            want = np.float32(0.0)
            for j in range(q.shape[1]):
                want = np.float32(want + np.float32(q[i, j] * notes[k, j]))
            assert got[i, k] == want or (np.isnan(got[i, k]) and np.isnan(want))
    # a cell's floats do not depend on the cells computed with it
    np.testing.assert_array_equal(pair_dots(q[-1:], notes[::-1]), got[-1:, ::-1])


@settings(max_examples=200, deadline=None)
@given(seed=hs.integers(0, 2**32 - 1), m=hs.integers(1, 30),
       dim=hs.sampled_from([1, 3, 16, 64]), ties=hs.booleans())
def test_index_retrievers_find_the_exact_nearest_m_without_every_cell(seed, m, dim, ties):
    """``nearest`` (a matrix product, then the reachable cells per cell) is
    the default's nearest M on the per-cell similarity, ties and all."""
    rng = np.random.default_rng(seed)
    notes = rng.normal(size=(60, dim)).astype(np.float32)
    if ties:  # repeated notes: equal cosines, to the lower column
        notes[rng.integers(0, 60, 20)] = notes[rng.integers(0, 60, 20)]
        notes[rng.integers(0, 60, 3)] = 0.0
    ctx = ArrayContext(t=np.zeros(5), created_at=np.zeros(60), note_emb=notes,
                       query_emb=rng.normal(size=(5, dim)).astype(np.float32))
    allowed = rng.random((5, 60)) < 0.8
    rows = np.array([4, 1, 2])
    r = IVF(prefilter=m, nlist=1, nprobe=1, train_size=1)
    want = Retriever.nearest(r, ctx, allowed, rows)
    np.testing.assert_array_equal(r.nearest(ctx, allowed, rows), want)
    assert (want.sum(axis=1) == np.minimum(m, allowed[rows].sum(axis=1))).all()
    # and with the notes tied with the M-th (the overlap's reference)
    np.testing.assert_array_equal(r.near_levels(ctx, allowed, rows),
                                  Retriever.near_levels(r, ctx, allowed, rows))


# -- the exact nearest M (the default prefilter, the overlap's reference) -------


@settings(max_examples=300, deadline=None)
@given(sim=hnp.arrays(hs.sampled_from([np.float32, np.float64]),
                      hnp.array_shapes(min_dims=2, max_dims=2, max_side=30),
                      elements=hs.sampled_from([0.1, 0.2, 0.3, -1.0, np.nan, np.inf, -np.inf])
                      | hs.floats(-2, 2, width=32)),
       m=hs.integers(1, 35))
def test_the_nearest_m_are_the_first_of_a_stable_sort(sim, m):
    from memsim.policies.base import _nearest

    want = np.zeros(sim.shape, dtype=bool)
    np.put_along_axis(want, np.argsort(-sim, axis=1, kind="stable")[:, :m], True, axis=1)
    np.testing.assert_array_equal(_nearest(sim, m), want & np.isfinite(sim))
    # the levels: 2 above the m-th highest, 1 equal to it (every finite
    # value kept when a row has fewer than m)
    from memsim.policies.base import _near_levels

    for row, keep, got in zip(sim, want & np.isfinite(sim), _near_levels(sim, m)):
        key = np.where(np.isnan(row), -np.inf, row)
        if m > len(row):
            np.testing.assert_array_equal(got, 2 * keep)
            continue
        kth = np.sort(key)[::-1][m - 1]  # the m-th highest
        np.testing.assert_array_equal(got, np.where(np.isfinite(row) & (key > kth), 2, 0)
                                      + (np.isfinite(row) & (key == kth)))
        assert np.all(got[keep] >= 1) and np.count_nonzero(got) >= keep.sum()


def test_an_index_that_returns_a_tied_note_loses_nothing():
    """``prefilter_overlap``: a note tied with the M-th nearest (a repeated
    note) returned instead of the lower column's is no loss; a farther note
    is."""
    from types import SimpleNamespace
    from collections import Counter
    from memsim.engine.ann import chosen_cells, overlap_sample

    @dataclass(frozen=True, kw_only=True)
    class Picked(Cosine):
        cells: tuple = ()

        def prefilter_mask(self, ctx, mask=None):  # (an index's own choice)
            raise AssertionError("not called")

        def prefilter_cells(self, ctx, allowed):
            return np.array([0, 0]), np.array(self.cells)

    # note 1 and 2 are the same note (equal cosines); note 3 is farther
    sim = np.array([[0.9, 0.5, 0.5, 0.1]])
    for cells, found in [((0, 1), 2), ((0, 2), 2), ((0, 3), 1), ((1, 2), 1), ((2, 3), 1)]:
        work: Counter = Counter()
        ctx = SimpleNamespace(t=np.zeros(1), idx=np.arange(4), state=SimpleNamespace(work=work),
                              batch=SimpleNamespace(relevance=SimpleNamespace(query_ids=[0]),
                                                    qrows=overlap_sample(1)),
                              similarity=lambda r: sim)
        r = Picked(prefilter=2, cells=cells)
        assert r.chooses_prefilter()
        chosen_cells(ctx, r, np.ones((1, 4), dtype=bool))
        assert (work["overlap-exact"], work["overlap-found"]) == (2, found), cells


# -- without hnswlib -----------------------------------------------------------


def test_validates_and_scores_as_cosine_without_the_index():
    r = build_component("retriever", {"kind": "hnsw", "ef": 20, "M": 8, "prefilter": 50},
                        "retriever")
    assert (r.ef, r.M, r.prefilter) == (20, 8, 50)
    check_component(r)
    ctx = store(n=50, q=4, dim=8)
    assert_cosine_per_cell(r, ctx)


@pytest.mark.parametrize("param, value", [("ef", 0), ("M", 1), ("prefilter", 0),
                                          ("ef_construction", 0), ("seed", -1)])
def test_bad_parameters_are_refused(param, value):
    with pytest.raises(ConfigError, match=param):
        build_component("retriever", {"kind": "hnsw", param: value}, "retriever")


def test_a_run_without_hnswlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "hnswlib", None)  # import hnswlib -> ImportError
    with pytest.raises(ConfigError, match=r"\[ann\]"):
        HNSW(prefilter=5).prefilter_mask(store(n=50, q=2, dim=8))


# -- with hnswlib ---------------------------------------------------------------


@needs_hnswlib
def test_large_ef_gives_the_exact_prefilter_metrics():
    s = random_stream(7, n_notes=1500, n_queries=80, dim=16)
    tables = {"exact": {"preset": "similarity-only",
                        "retriever": {"kind": "cosine", "prefilter": 40}},
              "ann": {"preset": "similarity-only",
                      "retriever": {"kind": "hnsw", "prefilter": 40, "ef": 2000}}}
    arms = [Arm(n, resolve_policy(t, n), None) for n, t in tables.items()]
    res = simulate(s, arms, SimSettings(tick_days=5.0, save_rankings=True), seed_sequence(0))
    assert_exact_but_scores(res)


@needs_hnswlib
def test_small_ef_misses_true_neighbours():
    ctx = store()
    exact = exact_top(ctx, 10)
    got = HNSW(prefilter=10, ef=10).prefilter_mask(ctx)
    assert (got.sum(axis=1) == 10).all()
    recall = (got & exact).sum(axis=1) / 10
    # 3,000 random notes in 32 dimensions: recall@10 0.70 at ef = 10
    assert 0.5 < recall.mean() < 0.9
    wide = HNSW(prefilter=10, ef=400).prefilter_mask(ctx)
    np.testing.assert_array_equal(wide, exact)


@needs_hnswlib
def test_the_index_is_deterministic_for_a_seed():
    ctx = store(n=2000, q=100)
    a = HNSW(prefilter=10, ef=10, seed=3).prefilter_mask(ctx)
    b = HNSW(prefilter=10, ef=10, seed=3).prefilter_mask(store(n=2000, q=100))
    np.testing.assert_array_equal(a, b)
    c = HNSW(prefilter=10, ef=10, seed=4).prefilter_mask(ctx)
    assert not np.array_equal(a, c)  # another graph misses other neighbours


@needs_hnswlib
def test_candidates_are_live_notes_only():
    live, ctx = half_live_store()
    got = HNSW(prefilter=20, ef=10).prefilter_mask(ctx)
    assert not (got & ~live).any()
    np.testing.assert_array_equal(got[0], live[0])
    assert (got[1:].sum(axis=1) == 20).all()
    exact = HNSW(prefilter=20, ef=600).prefilter_mask(ctx, live)
    np.testing.assert_array_equal(exact, exact_top(ctx, 20, live))


# -- the ivf retriever (FAISS) -------------------------------------------------

needs_faiss = pytest.mark.skipif(importlib.util.find_spec("faiss") is None,
                                 reason="faiss-cpu is not installed (pip install -e '.[ann]')")


def test_ivf_validates_and_scores_as_cosine_without_the_index():
    r = build_component("retriever", {"kind": "ivf", "nlist": 64, "nprobe": 8,
                                      "train_size": 1000, "prefilter": 50}, "retriever")
    assert (r.nlist, r.nprobe, r.train_size, r.prefilter) == (64, 8, 1000, 50)
    check_component(r)
    ctx = store(n=50, q=4, dim=8)
    assert_cosine_per_cell(r, ctx)


@pytest.mark.parametrize("params, key", [({"nlist": 0}, "nlist"), ({"nprobe": 0}, "nprobe"),
                                         ({"prefilter": 0}, "prefilter"),
                                         ({"seed": -1}, "seed"),
                                         ({"nlist": 8, "nprobe": 9}, "nprobe"),
                                         ({"nlist": 64, "train_size": 63}, "train_size")])
def test_bad_ivf_parameters_are_refused(params, key):
    with pytest.raises(ConfigError, match=key):
        build_component("retriever", {"kind": "ivf", **params}, "retriever")


def test_an_ivf_run_without_faiss_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(ConfigError, match=r"faiss-cpu.*\[ann\]"):
        IVF(prefilter=5).prefilter_mask(store(n=50, q=2, dim=8))


@needs_faiss
def test_ivf_probing_every_list_gives_the_exact_prefilter_metrics():
    s = random_stream(7, n_notes=1500, n_queries=80, dim=16)
    ivf = {"kind": "ivf", "prefilter": 40, "nlist": 16, "nprobe": 16, "train_size": 200}
    tables = {"exact": {"preset": "similarity-only",
                        "retriever": {"kind": "cosine", "prefilter": 40}},
              "ann": {"preset": "similarity-only", "retriever": ivf}}
    arms = [Arm(n, resolve_policy(t, n), None) for n, t in tables.items()]
    res = simulate(s, arms, SimSettings(tick_days=5.0, save_rankings=True), seed_sequence(0))
    assert_exact_but_scores(res)
    assert res.arms.set_index("policy").loc["ann", "prefilter_overlap"] == 1.0


@needs_faiss
def test_ivf_scans_only_its_probed_lists():
    ctx = store()
    exact = exact_top(ctx, 10)
    recall = {}
    for nprobe in (1, 4, 16, 32):
        got = IVF(prefilter=10, nlist=32, nprobe=nprobe, train_size=1000).prefilter_mask(ctx)
        assert (got.sum(axis=1) == 10).all()  # ~94 notes a list: always 10 found
        recall[nprobe] = ((got & exact).sum(axis=1) / 10).mean()
    # 3,000 random notes in 32 dimensions (no clusters: IVF's hardest case):
    # one list of 32 holds about a fifth of the nearest 10, every list all
    assert recall[1] < 0.3 and recall[1] < recall[4] < recall[16] < 0.95
    assert recall[32] == 1.0


@needs_faiss
def test_ivf_answers_exactly_until_it_holds_its_training_notes():
    ctx = store(n=2000, q=50)
    exact = exact_top(ctx, 10)
    untrained = IVF(prefilter=10, nlist=32, nprobe=1, train_size=2001)
    np.testing.assert_array_equal(untrained.prefilter_mask(ctx), exact)
    assert not untrained.index(ctx)[0].ready
    trained = IVF(prefilter=10, nlist=32, nprobe=1, train_size=2000)
    assert trained.index(ctx)[0].ready
    assert (trained.prefilter_mask(ctx) != exact).any()


@needs_faiss
def test_ivf_is_deterministic_for_a_seed():
    ctx = store(n=2000, q=100)
    a = IVF(prefilter=10, nlist=32, nprobe=2, train_size=1000, seed=3).prefilter_mask(ctx)
    b = IVF(prefilter=10, nlist=32, nprobe=2, train_size=1000,
            seed=3).prefilter_mask(store(n=2000, q=100))
    np.testing.assert_array_equal(a, b)
    c = IVF(prefilter=10, nlist=32, nprobe=2, train_size=1000, seed=4).prefilter_mask(ctx)
    assert not np.array_equal(a, c)  # other centroids: other lists probed


@needs_faiss
def test_ivf_candidates_are_live_notes_and_thin_lists_give_fewer():
    live, ctx = half_live_store()
    got = IVF(prefilter=20, nlist=8, nprobe=2, train_size=300).prefilter_mask(ctx)
    assert not (got & ~live).any()
    np.testing.assert_array_equal(got[0], live[0])
    every = IVF(prefilter=20, nlist=8, nprobe=8, train_size=300).prefilter_mask(ctx, live)
    np.testing.assert_array_equal(every, exact_top(ctx, 20, live))
    # 64 lists of about 9 notes, half of them live: one probed list holds
    # fewer than 20, and the scan returns what it holds
    thin = IVF(prefilter=20, nlist=64, nprobe=1, train_size=300).prefilter_mask(ctx, live)
    assert not (thin & ~live).any()
    assert (thin[1:].sum(axis=1) < 20).all() and thin[1:].sum() > 0


@needs_hnswlib
def test_a_search_that_cannot_find_m_falls_back_to_the_exact_top_m(monkeypatch):
    from memsim.policies import retrieval

    live, ctx = half_live_store()
    monkeypatch.setattr(retrieval.GrowingIndex, "search_one", lambda *a, **k: None)
    got = HNSW(prefilter=20, ef=10).prefilter_mask(ctx)
    np.testing.assert_array_equal(got, exact_top(ctx, 20, live))
