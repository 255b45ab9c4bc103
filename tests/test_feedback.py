"""Per-query feedback: each query sees every use made before it.

The engine scores a tick's queries with one similarity product and, for an
arm with per-query feedback, corrects each query's top C for the notes used
since the tick began (the ``"walk"`` accelerator). These tests hold it
to two references: the same replay with every query of the tick scored on
its own (the accelerator off: bit-identical frames), and a
per-tick replay whose ticks are so short that every query is alone in its
own (the same semantics reached another way: the same rankings).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memsim.runs.config import resolve_policy
from memsim.engine import ACCELERATORS, Arm, SimSettings, simulate
from memsim.core.rng import seed_sequence
from memsim.data.stream import make_stream

from .helpers import random_stream
from .test_pruning import PRESET_NAMES, assert_same, policy_table

#: presets of real systems, whose sources update notes after every query
PER_QUERY_PRESETS = ["hivemind", "hivemind-2025-bug", "ai-memory", "ai-memory-breadth",
                     "feather", "feather-v0.16", "generative-agents", "generative-agents-code",
                     "langchain-time-weighted", "memorybank"]


def busy_stream(seed: int, n_notes: int = 400, n_queries: int = 150, dim: int = 8,
                accesses: int = 120):
    """A random stream with several queries a day and organic uses between them."""
    base = random_stream(seed, n_notes=n_notes, n_queries=n_queries, dim=dim, horizon=20.0)
    rng = np.random.default_rng(seed + 1)
    t = np.sort(rng.uniform(0.0, 20.0, accesses))
    created = base.notes.set_index("note_id")["created_at"]
    ids = np.array([rng.choice(created.index[created <= x]) if (created <= x).any() else -1
                    for x in t])
    acc = pd.DataFrame({"t": t[ids >= 0], "note_id": ids[ids >= 0],
                        "actor": rng.choice(["a0", "a1", "a2"], int((ids >= 0).sum()))})
    return make_stream(base.notes, base.queries, base.qrels, acc, base.note_embeddings,
                       base.query_embeddings, {"name": "busy"})


def walked(stream, arms, fast: bool, window: int = 64, **kw):
    """A per-query replay with the ``"walk"`` accelerator on or off."""
    on = ACCELERATORS if fast else tuple(a for a in ACCELERATORS if a != "walk")
    return simulate(stream, arms, SimSettings(save_rankings=True, feedback_mode="per-query",
                                              **kw),
                    seed_sequence(0), accelerators=on, walk_window=window)


@st.composite
def cases(draw):
    return {
        "seed": draw(st.integers(0, 10**6)),
        "n_notes": draw(st.integers(30, 300)),
        "n_queries": draw(st.integers(1, 80)),
        "accesses": draw(st.integers(0, 80)),
        "dim": draw(st.sampled_from([2, 4, 8])),
        "c": draw(st.integers(1, 40)),
        # a tick of every query (20 days) corrects past the first window
        "tick": draw(st.sampled_from([0.5, 1.0, 3.0, 20.0])),
        "window": draw(st.sampled_from([1, 3, 64])),
        "tables": [policy_table(draw) for _ in range(draw(st.integers(1, 3)))],
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
# a query whose uses change, seen by no later one, before a query scored in
# full: the uses recorded before the latter must be the changed ones
@example(case={"seed": 0, "n_notes": 30, "n_queries": 3, "accesses": 0, "dim": 4, "c": 17,
               "tick": 20.0, "window": 1,
               "tables": [{"retriever": "cosine", "ranker": "product", "decay": "none",
                           "stickiness": "access-term", "feedback": {"touch": "packed"},
                           "retention": "none"}]})
def test_corrected_batch_equals_each_query_alone(case):
    stream = busy_stream(case["seed"], n_notes=case["n_notes"], n_queries=case["n_queries"],
                         dim=case["dim"], accesses=case["accesses"])
    arms = [Arm(f"p{i}", resolve_policy(t, f"policies.p{i}"))
            for i, t in enumerate(case["tables"])]
    kw = {"candidates": case["c"], "tick_days": case["tick"]}
    assert_same(walked(stream, arms, False, **kw),
                walked(stream, arms, True, window=case["window"], **kw))


@pytest.mark.parametrize("c", [4, 30])
def test_every_preset_corrected_equals_alone(c):
    stream = busy_stream(3, n_notes=1500, n_queries=200, accesses=300)
    arms = [Arm(name, resolve_policy({"preset": name}, name)) for name in PRESET_NAMES]
    assert_same(walked(stream, arms, False, candidates=c), walked(stream, arms, True,
                                                                   candidates=c))


def test_cooldown_carries_over_ticks_in_the_correction():
    """Queries a few minutes apart, ticks shorter than the cooldown: a use
    within the cooldown of the same actor's last counted use of a note (in
    an earlier tick or earlier in this one) does not count, in the
    correction's what-if state as in the real one."""
    stream = busy_stream(7, n_notes=120, n_queries=150, dim=2, accesses=0)
    stream = make_stream(stream.notes.assign(created_at=stream.notes["created_at"] / 100,
                                             updated_at=stream.notes["created_at"] / 100),
                         stream.queries.assign(t=stream.queries["t"] / 100), stream.qrels,
                         None, stream.note_embeddings, stream.query_embeddings, {"name": "fast"})

    assert_cooldown_walks(stream, 3600.0, half_life_days=0.05, promote_after=3,
                          tick_days=0.02)


def assert_cooldown_walks(stream, cooldown_s: float, *, half_life_days: float,
                          promote_after: int, tick_days: float, **feedback):
    """A ``cooldown_s`` arm beside one without (a product ranker whose
    recency and promotions read the uses; ``feedback``: more of its keys)
    gives the reference's frames walked, and promotes fewer notes than the
    arm without: the cooldown refused some uses."""
    def policy(cooldown: float):
        return resolve_policy(
            {"ranker": "product", "decay": {"kind": "half-life",
                                            "half_life_days": half_life_days},
             "stickiness": "log-recall",
             "feedback": {"touch": "returned", "k": 4, "cooldown_s": cooldown,
                          "promote_after": promote_after, **feedback}}, "p")

    arms = [Arm("cooldown", policy(cooldown_s)), Arm("none", policy(0.0))]
    kw = {"candidates": 8, "tick_days": tick_days}
    fast = walked(stream, arms, True, **kw)
    assert_same(walked(stream, arms, False, **kw), fast)
    promoted = fast.arms.set_index("policy")["promoted_notes"]
    assert 0 < promoted["cooldown"] < promoted["none"]


@pytest.mark.parametrize("feedback", [
    {"touch": "returned", "k": 3},
    # every prefilter note used before the query is scored (Feather DB
    # v0.16): the query scored in full must see its own uses
    {"touch": "prefilter", "before_scoring": True},
])
def test_a_use_that_lowers_a_score_is_rescored_in_full(feedback):
    """When a used candidate falls below the tick's C-th score, a note
    outside the tick's top C may enter: the merge cannot prove its top C,
    and the query is scored again in full, with the same frames."""
    from dataclasses import dataclass
    from typing import ClassVar

    from memsim.policies import Policy
    from memsim.policies.rank import Product

    @dataclass(frozen=True, kw_only=True)
    class Novelty(Product):
        name: ClassVar[str] = "novelty"

        def combine(self, rel, rec, ctx):
            return rel * rec / (1.0 + ctx.recalls)

        def reads_uses(self) -> bool:
            return True

    retriever = {"kind": "cosine", "prefilter": 20 if feedback["touch"] == "prefilter" else 0}
    base = resolve_policy({"ranker": "product", "retriever": retriever, "feedback": feedback},
                          "n")
    policy = dataclasses.replace(base, ranker=Novelty())
    assert isinstance(policy, Policy)
    stream = busy_stream(5, n_notes=300, n_queries=150, dim=2)
    arms = [Arm("novelty", policy)]
    fast = walked(stream, arms, True, candidates=5)
    assert fast.accelerated[0]["walk"] and fast.work[0].get("rescored")
    assert_same(walked(stream, arms, False, candidates=5), fast)


def test_per_query_equals_one_query_per_tick():
    """Per-query feedback within day-long ticks gives the rankings of a
    per-tick replay whose ticks hold one query each (scores to rounding)."""
    stream = busy_stream(11, n_notes=800, n_queries=160, accesses=200)
    assert stream.queries["t"].is_unique
    arms = [Arm(name, resolve_policy({"preset": name}, name)) for name in PER_QUERY_PRESETS]
    arms.append(Arm("sticky", resolve_policy(
        {"ranker": "product", "decay": {"kind": "half-life", "half_life_days": 3.0},
         "stickiness": "log-recall", "feedback": {"touch": "returned", "k": 3,
                                                  "promote_after": 2}}, "sticky")))
    settings_ = dict(save_rankings=True, candidates=12, retention_period_days=1.0)
    walk = simulate(stream, arms, SimSettings(feedback_mode="per-query", **settings_),
                    seed_sequence(0))
    alone = simulate(stream, arms, SimSettings(feedback_mode="per-tick", tick_days=1e-5,
                                               **settings_), seed_sequence(0))
    a, b = walk.rankings, alone.rankings
    assert len(a) == len(b)
    pd.testing.assert_frame_equal(a[["policy", "query_id", "rank", "note_id", "packed"]],
                                  b[["policy", "query_id", "rank", "note_id", "packed"]])
    np.testing.assert_allclose(a["score"], b["score"], rtol=1e-6)
    cols = ["recall", "utility", "tokens_used", "n_packed"]
    np.testing.assert_allclose(walk.queries[cols].to_numpy(float),
                               alone.queries[cols].to_numpy(float), rtol=1e-9)
    pd.testing.assert_frame_equal(walk.arms, alone.arms)


def test_per_query_feedback_changes_rankings_within_a_tick():
    """The correction matters: with recall-driven stickiness, queries of one
    tick rank differently once they see each other's uses."""
    stream = busy_stream(5, n_notes=600, n_queries=200, accesses=0)
    arm = Arm("sticky", resolve_policy(
        {"ranker": "product", "decay": {"kind": "half-life", "half_life_days": 1.0},
         "stickiness": "log-recall", "feedback": {"touch": "returned", "k": 5}}, "sticky"))
    runs = [simulate(stream, [arm], SimSettings(save_rankings=True, candidates=10,
                                                feedback_mode=m), seed_sequence(0))
            for m in ("per-tick", "per-query")]
    a, b = (r.rankings.set_index(["query_id", "rank"])["note_id"] for r in runs)
    assert (a != b.reindex(a.index)).mean() > 0.01


def test_feedback_timing_is_per_policy():
    """A policy's ``feedback.timing`` overrides the experiment's mode, and
    arms of different timings in one replay equal their replays alone."""
    stream = busy_stream(8, n_notes=500, n_queries=120)
    quick = resolve_policy({"preset": "feather"}, "q")
    assert quick.feedback.timing == "per-query"
    tick = resolve_policy({"preset": "feather", "feedback": {"timing": "per-tick"}}, "t")
    both = simulate(stream, [Arm("q", quick), Arm("t", tick)],
                    SimSettings(save_rankings=True), seed_sequence(0))
    for name, pol, mode in (("q", quick, "per-tick"), ("t", tick, "per-query")):
        # the experiment's mode is the other one: the policy's timing wins
        alone = simulate(stream, [Arm(name, pol)], SimSettings(save_rankings=True,
                                                               feedback_mode=mode),
                         seed_sequence(0))
        got = both.rankings[both.rankings["policy"] == name].reset_index(drop=True)
        pd.testing.assert_frame_equal(got, alone.rankings)
    assert not both.rankings[both.rankings["policy"] == "q"]["note_id"].reset_index(
        drop=True).equals(both.rankings[both.rankings["policy"] == "t"]["note_id"]
                          .reset_index(drop=True))


def test_real_system_presets_run_per_query_and_baselines_follow_the_experiment():
    for name in PER_QUERY_PRESETS:
        assert resolve_policy({"preset": name}, name).feedback.timing == "per-query", name
    for name in ("similarity-only", "recency-only", "random", "oracle"):
        assert resolve_policy({"preset": name}, name).feedback.timing == "experiment", name


def test_a_component_that_reads_what_gathered_cells_lack_is_rescored_by_rows():
    """A ranker reading the raw note vectors (which pruned and rescored cells
    do not offer) falls back to whole rows, with the same frames."""
    from dataclasses import dataclass
    from typing import ClassVar

    from memsim.policies import Policy
    from memsim.policies.rank import Product

    @dataclass(frozen=True, kw_only=True)
    class VectorReading(Product):
        name: ClassVar[str] = "vector-reading"

        def combine(self, rel, rec, ctx):
            assert ctx.note_vectors is not None  # a BatchContext has them; cells do not
            return super().combine(rel, rec, ctx)

    base = resolve_policy({"preset": "feather"}, "v")
    policy = Policy(**{**{k: getattr(base, k) for k in ("retriever", "decay", "stickiness",
                                                          "breadth", "retention", "packer",
                                                          "orderer", "feedback")},
                       "ranker": VectorReading()})
    stream = busy_stream(4, n_notes=400, n_queries=120)
    arms = [Arm("v", policy)]
    fast, alone = walked(stream, arms, True), walked(stream, arms, False)
    assert_same(alone, fast)
    assert not fast.rankings.empty
