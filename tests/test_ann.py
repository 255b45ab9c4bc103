"""The approximate retrievers: candidates from an HNSW index (hnswlib) and an IVF index (FAISS)."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as hs
from hypothesis.extra import numpy as hnp

from memsim.runs.config import resolve_policy
from memsim.engine import Arm, SimSettings, simulate
from memsim.core.errors import ConfigError
from memsim.policies import build_component
from memsim.policies.context import ArrayContext
from memsim.policies.retrieval import HNSW, IVF, Cosine
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


# -- without hnswlib -----------------------------------------------------------


def test_validates_and_scores_as_cosine_without_the_index():
    r = build_component("retriever", {"kind": "hnsw", "ef": 20, "M": 8, "prefilter": 50},
                        "retriever")
    assert (r.ef, r.M, r.prefilter) == (20, 8, 50)
    check_component(r)
    ctx = store(n=50, q=4, dim=8)
    np.testing.assert_array_equal(r.similarity(ctx), Cosine().similarity(ctx))


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
    q = {p: d.drop(columns="policy").reset_index(drop=True)
         for p, d in res.queries.groupby("policy")}
    assert q["exact"].equals(q["ann"])
    r = {p: d.drop(columns="policy").reset_index(drop=True)
         for p, d in res.rankings.groupby("policy")}
    assert r["exact"].equals(r["ann"])


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
    np.testing.assert_array_equal(r.similarity(ctx), Cosine().similarity(ctx))


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
    for frame in (res.queries, res.rankings):
        got = {p: d.drop(columns="policy").reset_index(drop=True)
               for p, d in frame.groupby("policy")}
        assert got["exact"].equals(got["ann"])
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
