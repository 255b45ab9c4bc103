"""Ticks taken in parts: a tick's queries are replayed in parts of bounded
(queries x notes) size, with the frames of the whole tick: per-query arms
see the state at each query's time, per-tick arms the tick's start, their
uses recorded after its last part (``memsim.engine.batch.replay_batches``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsim.core.errors import ConfigError
from memsim.core.rng import seed_sequence
from memsim.engine import Arm, ReplayCache, SimSettings, reference, simulate
from memsim.engine.batch import Batch, make_batches, replay_batches
from memsim.engine.settings import splits_ticks
from memsim.runs.config import (estimate_stream_bytes, experiment_from_dict, max_stream_gib,
                                resolve_policy)

from .helpers import random_stream
from .test_replay_cache import counting
from .test_pruning import assert_same


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**6), n_queries=st.integers(0, 80), n_notes=st.integers(1, 500),
       tick=st.sampled_from([0.5, 1.0, 3.0]), max_cells=st.integers(1, 5000))
def test_parts_cover_each_tick_in_order_and_bound_its_cells(seed, n_queries, n_notes, tick,
                                                             max_cells):
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0, 10, n_queries))
    created = rng.uniform(-5, 10, n_notes)
    ticks = make_batches(t, tick)
    parts = replay_batches(t, tick, created, True, max_cells)
    # per tick: its parts, consecutive, the first and the last flagged, the
    # tick's end kept
    k = 0
    for rows, t_end in ticks:
        got = []
        while k < len(parts) and parts[k][1] == t_end:
            got.append(parts[k])
            k += 1
        assert [first for _, _, first, _ in got] == [True] + [False] * (len(got) - 1)
        assert [last for *_, last in got] == [False] * (len(got) - 1) + [True]
        assert np.array_equal(np.concatenate([p for p, *_ in got]), rows)
        n = int((created <= t_end).sum())
        for p, *_ in got:
            # at least two queries (a tick of one: whole), and within the
            # bound but where two queries already exceed it
            assert len(p) >= min(2, len(rows))
            if len(got) > 1:
                assert len(p) * n <= max(max_cells, 3 * n)
        if len(rows) * n <= max_cells:
            assert len(got) == 1
    assert k == len(parts)
    # a replay with an arm that cannot take parts takes whole ticks
    whole = replay_batches(t, tick, created, False, max_cells)
    assert [(len(r), e, f, z) for r, e, f, z in whole] == [(len(r), e, True, True)
                                                            for r, e in ticks]


def _arms(timing="per-query"):
    tables = [
        {"ranker": "product", "decay": {"kind": "half-life-floor", "half_life_days": 5.0,
                                         "floor": 0.2},
         "retention": {"kind": "capacity", "max_notes": 900}},
        {"ranker": "weighted-sum", "decay": {"kind": "half-life", "half_life_days": 2.0},
         "feedback": {"touch": "returned", "k": 3}, "retriever": {"kind": "cosine",
                                                                  "prefilter": 40}},
        {"preset": "langchain-time-weighted"},
        {"preset": "generative-agents-code"},
    ]
    return [Arm(f"p{i}", resolve_policy({**t, "feedback": {**t.get("feedback", {}),
                                                           "timing": timing}}, f"p{i}"))
            for i, t in enumerate(tables)]


SETTINGS = dict(candidates=8, save_rankings="hidden", tick_days=2.0, retention_period_days=0.7)


@pytest.mark.parametrize("engine", ["accelerated", "reference"])
@pytest.mark.parametrize("timings", ["per-query", "per-tick", "both"])
def test_a_tick_in_parts_gives_the_whole_ticks_frames(engine, timings, monkeypatch):
    """Per-query and per-tick arms, alone and together (a retention whose
    sweeps fall inside ticks, a prefilter, set-dependent rankers, organic
    uses, hidden rankings): the frames of a replay whose ticks are taken in
    parts of a few queries are those of whole ticks, and the batches really
    are smaller."""
    stream = random_stream(3, n_notes=1500, n_queries=60, dim=6, horizon=12.0, accesses=80)
    arms = {"per-query": _arms(), "per-tick": _arms("per-tick"),
            "both": _arms()[:2] + _arms("per-tick")[2:]}[timings]
    s = SimSettings(**SETTINGS)
    run = simulate if engine == "accelerated" else reference.simulate
    whole = run(stream, arms, s, seed_sequence(1))
    shapes = []
    real = Batch.__init__

    def spy(self, **kw):
        real(self, **kw)
        shapes.append(self.valid.shape)

    monkeypatch.setattr(Batch, "__init__", spy)
    parts = run(stream, arms, SimSettings(**SETTINGS, max_tick_cells=4 * 1500), seed_sequence(1))
    assert_same(whole, parts)
    assert len(shapes) > len(make_batches(stream.queries["t"].to_numpy(), 2.0))
    assert max(q for q, _ in shapes) <= 5
    assert all(q * n <= 3 * n or q * n <= 4 * 1500 for q, n in shapes)


@pytest.mark.parametrize("table", [
    # a ranker that keeps per-note columns, updated from a whole call's context
    {"ranker": "memoripy", "feedback": {"timing": "per-tick"}},
    # uses of the whole tick's prefilter before scoring
    {"retriever": {"kind": "cosine", "prefilter": 30},
     "feedback": {"touch": "prefilter", "before_scoring": True, "timing": "per-tick"}}])
def test_a_policy_that_cannot_take_parts_keeps_ticks_whole(monkeypatch, table):
    stream = random_stream(3, n_notes=800, n_queries=40, dim=6, horizon=12.0)
    arms = _arms()[:1] + [Arm("whole", resolve_policy(table, "whole"))]
    assert not splits_ticks(arms[1].policy, SimSettings())
    made = counting(monkeypatch, Batch)
    simulate(stream, arms, SimSettings(**SETTINGS, max_tick_cells=100), seed_sequence(1))
    assert len(made) == len(make_batches(stream.queries["t"].to_numpy(), 2.0))


def test_replays_in_parts_share_a_cache_with_whole_ones(monkeypatch):
    """A cache keeps batches by their queries: a replay in parts and one of
    whole ticks (a per-tick arm) of the same stream each find their own,
    and a later replay in parts builds none."""
    stream = random_stream(5, n_notes=1200, n_queries=50, dim=6, horizon=10.0)
    cache = ReplayCache(10**9)
    s = SimSettings(**SETTINGS, max_tick_cells=3000)
    for arms in (_arms()[:2], _arms("per-tick")[:2], _arms()[1:3]):
        want = simulate(stream, arms, s, seed_sequence(2))
        assert_same(want, simulate(stream, arms, s, seed_sequence(2), cache=cache))
    made = counting(monkeypatch, Batch)
    simulate(stream, _arms()[2:], s, seed_sequence(2), cache=cache)
    assert made == []


def _ten_million(policy: dict) -> dict:
    return {"experiment": {"name": "big"},
            "workload": {"horizon_days": 365, "backfill_days": 365,
                         "notes_per_day": 1e7 / 730, "queries_per_day": 50},
            "policies": {"a": {"preset": "hivemind", "retention": {"kind": "ai-memory"}},
                         "b": policy}}


def test_ten_million_notes_replayed_per_query_fit_the_default_memory_limit(monkeypatch):
    """A year over a 10M-note store, replayed in parts, fits the default
    limit (per-query presets, a per-tick policy); beside a policy that keeps
    whole ticks (50 queries x 10M notes at once), it does not, and the error
    names that policy."""
    monkeypatch.delenv("MEMSIM_MAX_STREAM_GB", raising=False)
    exp = experiment_from_dict(_ten_million({"preset": "ai-memory",
                                             "feedback": {"timing": "per-tick"}}))
    assert estimate_stream_bytes(exp.workload) <= max_stream_gib() * 2**30
    assert estimate_stream_bytes(exp.workload, parts=False) > max_stream_gib() * 2**30
    with pytest.raises(ConfigError) as err:
        experiment_from_dict(_ten_million({"ranker": "memoripy"}))
    assert "policy 'b' keeps whole ticks" in str(err.value)
    assert "MEMSIM_MAX_STREAM_GB" in str(err.value)


def test_max_tick_cells_is_an_experiment_key_the_estimate_follows(monkeypatch):
    """``[experiment] max_tick_cells`` reaches the engine's settings and the
    memory estimate, is validated, and is written to the resolved config
    only when it is not the default (a default config keeps its table)."""
    monkeypatch.delenv("MEMSIM_MAX_STREAM_GB", raising=False)
    table = _ten_million({"preset": "ai-memory"})
    default = experiment_from_dict(table)
    assert "max_tick_cells" not in default.to_config()["experiment"]
    big = {**table, "experiment": {"name": "big", "max_tick_cells": 2**29}}
    with pytest.raises(ConfigError) as err:  # whole ticks: beyond the default limit
        experiment_from_dict(big)
    assert "GiB of memory" in str(err.value)
    monkeypatch.setenv("MEMSIM_MAX_STREAM_GB", "64")
    exp = experiment_from_dict(big)
    assert exp.sim.max_tick_cells == 2**29
    assert exp.to_config()["experiment"]["max_tick_cells"] == 2**29
    assert (estimate_stream_bytes(exp.workload, max_tick_cells=2**29)
            > estimate_stream_bytes(exp.workload))
    with pytest.raises(ConfigError) as err:
        experiment_from_dict({**table, "experiment": {"name": "big", "max_tick_cells": 0}})
    assert "max_tick_cells" in str(err.value)
