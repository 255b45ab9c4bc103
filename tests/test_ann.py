"""The ``hnsw`` retriever: candidates from an approximate HNSW index (hnswlib)."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from memsim.runs.config import resolve_policy
from memsim.engine import Arm, SimSettings, simulate
from memsim.core.errors import ConfigError
from memsim.policies import build_component
from memsim.policies.context import ArrayContext
from memsim.policies.retrieval import HNSW, Cosine
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
    rng = np.random.default_rng(1)
    live = rng.random((40, 600)) < 0.5
    live[0] = False
    live[0, :5] = True  # fewer live notes than the prefilter: all of them
    ctx = store(n=600, q=40, dim=8, live=live)
    got = HNSW(prefilter=20, ef=10).prefilter_mask(ctx)
    assert not (got & ~live).any()
    np.testing.assert_array_equal(got[0], live[0])
    assert (got[1:].sum(axis=1) == 20).all()
    exact = HNSW(prefilter=20, ef=600).prefilter_mask(ctx, live)
    np.testing.assert_array_equal(exact, exact_top(ctx, 20, live))
