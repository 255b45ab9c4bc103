"""The work replays of one stream share from one call to the next
(:class:`memsim.engine.ReplayCache`): results identical to replays without
it, the shared work really skipped, and the budget kept."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsim.engine.batch import Batch, make_batches
from memsim.engine.cache import array_bytes
from memsim.engine.cells import SimOrder
from memsim.runs.config import resolve_policy
from memsim.engine import ACCELERATORS, Arm, ReplayCache, SimSettings, simulate
from memsim.core.rng import seed_sequence

from .helpers import random_stream
from .test_pruning import assert_same, policy_table


def run(stream, arms, cache=None, accelerators=ACCELERATORS, **kw):
    return simulate(stream, arms, SimSettings(save_rankings=True, **kw), seed_sequence(0),
                    cache=cache, accelerators=accelerators)


def product_arm(name, hl, floor=0.3, capacity=None, retriever="cosine"):
    table = {"ranker": "product", "retriever": retriever,
             "decay": {"kind": "half-life-floor", "half_life_days": hl, "floor": floor}}
    if capacity is not None:
        table["retention"] = {"kind": "capacity", "max_notes": capacity}
    return Arm(name, resolve_policy(table, name))


def counting(monkeypatch, cls):
    """A list that grows by one at each ``cls(...)``."""
    made = []
    real = cls.__init__

    def spy(self, *args, **kw):
        made.append(1)
        real(self, *args, **kw)

    monkeypatch.setattr(cls, "__init__", spy)
    return made


@st.composite
def replays(draw):
    """A stream and three replays of it with other arms each (any policy,
    per-tick or per-query), sharing one cache of a drawn budget."""
    return {
        "seed": draw(st.integers(0, 10**6)),
        "n_notes": draw(st.integers(30, 1500)),
        "n_queries": draw(st.integers(1, 40)),
        "c": draw(st.integers(1, 40)),
        "budget": draw(st.sampled_from([0, 20_000, 200_000, 10**9])),
        "tick": draw(st.sampled_from([1.0, 3.0])),
        "replays": [(draw(st.sampled_from(["per-tick", "per-query"])),
                     [policy_table(draw) for _ in range(draw(st.integers(1, 3)))])
                    for _ in range(3)],
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replays())
def test_replays_with_a_cache_equal_replays_without(case):
    stream = random_stream(case["seed"], n_notes=case["n_notes"], n_queries=case["n_queries"],
                           dim=6)
    cache = ReplayCache(case["budget"])
    for k, (mode, tables) in enumerate(case["replays"]):
        arms = [Arm(f"p{k}{i}", resolve_policy(t, f"p{k}{i}")) for i, t in enumerate(tables)]
        kw = dict(candidates=case["c"], feedback_mode=mode, tick_days=case["tick"])
        assert_same(run(stream, arms, **kw), run(stream, arms, cache, **kw))
        assert 0 <= cache.nbytes <= case["budget"]
        work = cache.work(stream, case["tick"])
        assert cache.nbytes == sum(work.sizes.values())
        assert set(work.sizes) == set(work.batches)


def test_a_second_replay_builds_no_batch_and_no_levels(monkeypatch):
    """With room for everything, every batch is kept after the first replay;
    the next replay of the same stream (other arms, no eviction) builds no
    batch, no similarity product and no levels, and gives the frames it gives
    alone. The bytes counted are those of the arrays the batches hold."""
    stream = random_stream(4, n_notes=3000, n_queries=60, dim=8)
    cache = ReplayCache(10**9)
    first = [product_arm("a", 20.0), product_arm("b", 200.0, floor=0.6)]
    run(stream, first, cache, candidates=10)
    work = cache.work(stream, 1.0)
    n_batches = len(make_batches(stream.queries["t"].to_numpy(np.float64), 1.0))
    assert len(work.batches) == n_batches > 10
    assert cache.nbytes == sum(array_bytes(b, {id(b.notes), id(b.relevance),
                                                       id(b.logged)})
                               for b in work.batches.values())
    # the similarities and levels are kept, the dot products released
    for b in work.batches.values():
        assert b._dots is None and ("similarity", "cosine") in b.cache
        assert ("similarity-order", "cosine") in b.cache
    batches, orders = counting(monkeypatch, Batch), counting(monkeypatch, SimOrder)
    products = []
    # the products behind the dots and a scaled similarity
    monkeypatch.setattr(Batch, "_blocks", lambda self, scale, visit=None, real=Batch._blocks:
                        products.append(1) or real(self, scale, visit))
    second = [product_arm("c", 5.0, floor=0.1), product_arm("d", 60.0)]
    got = run(stream, second, cache, candidates=10)
    assert (batches, orders, products) == ([], [], [])
    assert_same(run(stream, second, ReplayCache(0), candidates=10), got)


def test_released_dot_products_come_back_the_same():
    stream = random_stream(5, n_notes=800, n_queries=20, dim=8)
    cache = ReplayCache(10**9)
    run(stream, [product_arm("a", 30.0, retriever="inverse-sq-l2")], cache, candidates=5)
    for b in cache.work(stream, 1.0).batches.values():
        assert b._dots is None
        fresh = Batch(qrows=b.qrows, t=b.t, actors=b.actors, notes=b.notes,
                             qemb=b.qemb, qnorm2=b.qnorm2, relevance=b.relevance, t0=b.t0)
        np.testing.assert_array_equal(b.dots, fresh.dots)
        assert b.dots.dtype == fresh.dots.dtype == np.float32


def test_the_budget_keeps_the_first_batches_only():
    stream = random_stream(6, n_notes=2000, n_queries=40, dim=8)
    arms = [product_arm("a", 20.0)]
    full = ReplayCache(10**9)
    run(stream, arms, full, candidates=10)
    sizes = full.work(stream, 1.0).sizes
    budget = sum(sizes.values()) // 2
    half = ReplayCache(budget)
    run(stream, arms, half, candidates=10)
    kept = half.work(stream, 1.0).sizes
    assert 0 < half.nbytes <= budget and 0 < len(kept) < len(sizes)
    assert kept == {bi: sizes[bi] for bi in kept}
    # earliest first, skipping only those that did not fit
    first_missing = min(set(sizes) - set(kept))
    assert sum(sizes[bi] for bi in kept if bi < first_missing) + sizes[first_missing] > budget
    assert ReplayCache(0).nbytes == 0


def test_arms_that_evict_rebuild_the_levels_of_kept_batches(monkeypatch):
    """The levels leave out the notes every arm evicted, which depends on the
    arms: a kept batch rebuilds them when those differ (else a replay would
    read another replay's levels), and the frames equal a replay without
    the cache, also when the first replay evicted and the next does not."""
    stream = random_stream(9, n_notes=2500, n_queries=50, dim=6)
    cache = ReplayCache(10**9)
    for arms in ([product_arm("cap", 3.0, capacity=150)],
                 [product_arm("cap2", 3.0, capacity=60), product_arm("cap3", 3.0, capacity=80)],
                 [product_arm("all", 3.0)]):
        assert_same(run(stream, arms, candidates=10), run(stream, arms, cache, candidates=10))
    orders = counting(monkeypatch, SimOrder)
    arms = [product_arm("cap", 3.0, capacity=150)]
    assert_same(run(stream, arms, ReplayCache(0), candidates=10),
                run(stream, arms, cache, candidates=10))
    assert len(orders) > 10


def test_per_query_batches_follow_the_evicted_notes():
    """Queries scored one at a time (per-query arms with the walk off) get a
    batch of their own, kept with the tick's; its levels too are rebuilt
    when the notes every arm evicted differ."""
    stream = random_stream(11, n_notes=1500, n_queries=40, dim=6)
    cache = ReplayCache(10**9)

    def arm(name, capacity):
        table = {"ranker": "product", "retriever": {"kind": "cosine", "prefilter": 15},
                 "decay": {"kind": "half-life", "half_life_days": 3.0},
                 "feedback": {"touch": "prefilter", "before_scoring": True}}
        if capacity:
            table["retention"] = {"kind": "capacity", "max_notes": capacity}
        return Arm(name, resolve_policy(table, name))

    for arms in ([arm("a", 100)], [arm("b", None)], [arm("c", 40)]):
        # walked (the touch is a use before the query) and query by query
        for acc in (ACCELERATORS, tuple(a for a in ACCELERATORS if a != "walk")):
            kw = dict(candidates=8, feedback_mode="per-query", accelerators=acc)
            assert_same(run(stream, arms, **kw), run(stream, arms, cache, **kw))
    kept = cache.work(stream, 1.0).batches.values()
    assert any(k[0] == "row" for b in kept for k in b.cache)


def test_a_cache_is_per_stream_object_and_tick():
    s1 = random_stream(1, n_notes=500, n_queries=20)
    s2 = random_stream(2, n_notes=500, n_queries=20)
    cache = ReplayCache(10**9)
    arms = [product_arm("a", 10.0)]
    for stream, tick in ((s1, 1.0), (s2, 1.0), (s1, 2.0), (s1, 1.0)):
        assert_same(run(stream, arms, tick_days=tick, candidates=5),
                    run(stream, arms, cache, tick_days=tick, candidates=5))
    assert cache.work(s1, 1.0).inputs is not cache.work(s2, 1.0).inputs
    assert cache.work(s1, 1.0).batches is not cache.work(s1, 2.0).batches
    # the streams used last are kept, with the bytes of their batches
    cache.MAX_STREAMS = 2
    kept = cache.work(s1, 1.0)
    cache.work(s2, 1.0)
    assert cache.nbytes == sum(kept.sizes.values()) > 0
    assert cache.work(s1, 1.0) is kept and cache.work(s1, 2.0) is not kept


def test_values_that_are_not_arrays_are_not_kept():
    pytest.importorskip("hnswlib")
    stream = random_stream(3, n_notes=600, n_queries=20, dim=8)
    arms = [Arm("ann", resolve_policy({"ranker": "product",
                                       "retriever": {"kind": "hnsw", "prefilter": 20, "ef": 8},
                                       "decay": "half-life"}, "ann"))]
    cache = ReplayCache(10**9)
    for _ in range(2):
        assert_same(run(stream, arms, candidates=5), run(stream, arms, cache, candidates=5))
    batches = cache.work(stream, 1.0).batches.values()
    assert batches and not any(k[0] == "hnsw-index" for b in batches for k in b.cache)


def test_array_bytes_counts_owned_arrays_once():
    a = np.zeros(100)
    view = a[::2]
    holder = SimOrder.__new__(SimOrder)
    holder.__dict__.update(x=a, y=[view, (a, np.ones(3, np.float32))], z={"k": None})
    assert array_bytes(holder, set()) == 800 + 12
    assert array_bytes(holder, {id(a)}) == 12
    assert array_bytes({"index": object()}, set()) is None
    assert array_bytes(pd.DataFrame({"a": [1]}), set()) is None
