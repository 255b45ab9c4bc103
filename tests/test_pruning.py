"""Exact pruning: the engine's top C without scoring every note equals full scoring.

Each test runs the same stream twice, with the engine's accelerators
(``simulate(..., accelerators=...)``) on and off, and asks for identical frames
(same candidates, order, scores, packing, metrics and feedback, ties to the
lower ``note_id``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memsim
from memsim.runs.config import resolve_policy
from memsim.engine import (ACCELERATORS, Arm, SimSettings, cells, feedback_timing, pruning,
                           reference, simfilter, simulate, stacking)
from memsim.engine.prefilter import level_prefilter
from memsim.runs.runner import load_stream_for, replicate_seed
from memsim.policies.presets import PRESETS
from memsim.core.rng import seed_sequence

from .helpers import random_stream

ROOT = Path(__file__).resolve().parents[1]

# presets that run on any stream (as-logged needs logged rankings, bayes a planted model)
PRESET_NAMES = sorted(set(PRESETS) - {"as-logged"})

RANKERS = [
    "product", "similarity", "recency",
    {"kind": "feather-blend", "time_weight": 0.3, "min_weight": 0.2},
    {"kind": "additive", "importance_weight": 0.5},
    {"kind": "calibrated-product", "beta": 8.0},
    "weighted-sum",
]
DECAYS = [
    "none", "per-day", {"kind": "half-life", "half_life_days": 2.0}, "half-life-floor",
    "per-tier", "generative-agents", "langchain", "ebbinghaus",
    {"kind": "power-law", "recall_growth": 0.5}, "ai-memory",
    {"kind": "per-type-half-life", "episodic_half_life_days": 3.0, "floor": 0.2},
]
STICKINESS = ["none", "log-recall", "access-term"]
RETRIEVERS = ["cosine", "inverse-sq-l2", {"kind": "cosine", "prefilter": 30},
              {"kind": "inverse-sq-l2", "prefilter": 3}]
FEEDBACK = [
    {"touch": "packed"}, {"touch": "returned", "k": 3}, {"touch": "none"},
    {"touch": "packed", "promote_after": 2}, {"touch": "prefilter"},
    {"touch": "prefilter", "before_scoring": True},
]


def both(stream, arms, reader=None, **kw):
    """Results with the accelerators off and on (``accelerators``: those on)."""
    on = kw.pop("accelerators", ACCELERATORS)
    return [simulate(stream, arms, SimSettings(save_rankings=True, **kw), seed_sequence(0),
                     reader=reader, accelerators=acc) for acc in ((), on)]


def assert_each_alone(stream, arms, together, names=("rankings",), reader=None, **kw):
    """Arms never interact: each arm's frames ``names`` alone are those it
    had with the others in ``together``."""
    for a in arms:
        alone = simulate(stream, [a], SimSettings(save_rankings=True, **kw), seed_sequence(0),
                         reader=reader)
        for name in names:
            got = getattr(together, name)
            got = got[got["policy"] == a.policy_name].reset_index(drop=True)
            pd.testing.assert_frame_equal(getattr(alone, name), got, check_exact=True)


def assert_same(full, pruned):
    pd.testing.assert_frame_equal(full.queries, pruned.queries, check_exact=True)
    pd.testing.assert_frame_equal(full.store, pruned.store, check_exact=True)
    pd.testing.assert_frame_equal(full.arms, pruned.arms, check_exact=True)
    if full.rankings is None:
        assert pruned.rankings is None
    else:
        pd.testing.assert_frame_equal(full.rankings, pruned.rankings, check_exact=True)


def policy_table(draw) -> dict:
    if draw(st.booleans()):
        return {"preset": draw(st.sampled_from(PRESET_NAMES))}
    return {
        "retriever": draw(st.sampled_from(RETRIEVERS)),
        "ranker": draw(st.sampled_from(RANKERS)),
        "decay": draw(st.sampled_from(DECAYS)),
        "stickiness": draw(st.sampled_from(STICKINESS)),
        "feedback": draw(st.sampled_from(FEEDBACK)),
        "retention": draw(st.sampled_from(["none", "ai-memory"])),
    }


@st.composite
def cases(draw):
    n_pol = draw(st.integers(1, 3))
    tables = [policy_table(draw) for _ in range(n_pol)]
    return {
        "seed": draw(st.integers(0, 10**6)),
        "n_notes": draw(st.integers(30, 400)),  # some notes exist by the first query
        "n_queries": draw(st.integers(1, 30)),
        "dim": draw(st.sampled_from([2, 4, 8])),
        "c": draw(st.integers(1, 60)),
        "mode": draw(st.sampled_from(["per-tick", "per-query"])),
        "tables": tables,
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_pruned_scoring_equals_full_scoring(case):
    stream = random_stream(case["seed"], n_notes=case["n_notes"], n_queries=case["n_queries"],
                           dim=case["dim"])
    arms = [Arm(f"p{i}", resolve_policy(t, f"policies.p{i}"))
            for i, t in enumerate(case["tables"])]
    full, pruned = both(stream, arms, candidates=case["c"], feedback_mode=case["mode"])
    assert_same(full, pruned)


@pytest.mark.parametrize("c", [1, 5, 50])
def test_every_preset_on_a_larger_stream(c):
    stream = random_stream(7, n_notes=2500, n_queries=80, dim=8)
    arms = [Arm(name, resolve_policy({"preset": name}, name)) for name in PRESET_NAMES]
    full, pruned = both(stream, arms, candidates=c)
    assert_same(full, pruned)


def test_ties_go_to_the_lower_note_id():
    # many notes with the same vector and the same age: equal scores
    stream = random_stream(1, n_notes=600, n_queries=20, dim=2)
    emb = stream.note_embeddings.copy()
    emb[::3] = emb[0]
    stream.note_embeddings[:] = emb
    arms = [Arm("s", resolve_policy({"ranker": "similarity"}, "s")),
            Arm("p", resolve_policy({"ranker": "product", "decay": "none"}, "p"))]
    full, pruned = both(stream, arms, candidates=40)
    assert_same(full, pruned)


def test_pruning_scores_few_notes():
    """The pruned path runs (and is not a silent fallback) for the presets
    whose components declare bounds, and scores a small part of the cells."""
    stream = random_stream(2, n_notes=3000, n_queries=40, dim=8)
    arm = Arm("h", resolve_policy({"preset": "hivemind", "feedback": {"timing": "per-tick"}},
                                  "h"))
    full, pruned = both(stream, [arm], candidates=10)
    assert pruned.accelerated[0]["prune"] == len(stream.queries)
    assert pruned.work[0]["cells"] < 0.2 * full.work[0]["cells"]


@pytest.mark.parametrize("timing", ["per-tick", "per-query"])
def test_an_arm_whose_pruning_does_not_pay_is_scored_in_full_for_a_while(timing):
    """A recency that falls fast (rate 0.3 a day) ranks notes of middling
    similarity high, so the pruning scores more than PAYING_SHARE of a
    batch's cells: the arm's next batches are scored in full, and pruned
    again after each rest (so some but not all of its queries are pruned),
    with the frames of full scoring; a slow decay stays pruned throughout.
    The same replay takes the same paths."""
    # 30 queries a day over 2,500-5,000 notes (half made before the first
    # day): batches of more than MIN_JUDGED cells
    stream = random_stream(5, n_notes=5000, n_queries=360, dim=8, horizon=12.0)
    assert len(stream.queries) // 12 * (len(stream.notes) // 2) > pruning.MIN_JUDGED
    fast, slow = (Arm(name, resolve_policy({"ranker": "product", "decay": decay,
                                            "feedback": {"timing": timing}}, name))
                  for name, decay in (("fast", {"kind": "per-day", "rate": 0.3}),
                                      ("slow", {"kind": "half-life", "half_life_days": 90.0})))
    full, pruned = both(stream, [fast, slow], candidates=20)
    assert_same(full, pruned)
    n = len(stream.queries)
    # pruned alone or as one array with the other arm (the stack judges each)
    fast_pruned, slow_pruned = (a.get("prune", 0) + a.get("stack", 0)
                                for a in pruned.accelerated)
    assert 0 < fast_pruned < n / 2
    assert slow_pruned == n
    again = simulate(stream, [fast, slow], SimSettings(save_rankings=True, candidates=20),
                     seed_sequence(0))
    assert again.accelerated == pruned.accelerated and again.work == pruned.work


def test_the_rest_from_pruning_doubles_while_it_does_not_pay():
    """_judge: a batch that scored more than PAYING_SHARE of its cells rests
    the arm FIRST_REST batches, then twice the last rest each time, up to
    MAX_REST; one that paid starts the rests over; a small batch changes
    nothing."""
    from types import SimpleNamespace

    state = SimpleNamespace(prune_rest=0, prune_wait=0)
    big = pruning.MIN_JUDGED * 4
    rests = []
    for _ in range(8):
        pruning._judge(state, int(big * pruning.PAYING_SHARE) + 1, big)
        rests.append(state.prune_rest)
    first, most = pruning.FIRST_REST, pruning.MAX_REST
    assert rests == [min(first * 2 ** k, most) for k in range(8)]
    assert rests[-1] == most
    pruning._judge(state, pruning.MIN_JUDGED, pruning.MIN_JUDGED - 1)  # small: not judged
    assert state.prune_wait == most
    state.prune_rest = 0
    pruning._judge(state, int(big * pruning.PAYING_SHARE), big)  # paid
    assert (state.prune_rest, state.prune_wait) == (0, 0)
    pruning._judge(state, big, big)
    assert state.prune_rest == first


@st.composite
def filter_cases(draw):
    """Arms whose recency is an exponential of a clock, on stores large
    enough for the similarity filter (the ``"filter"`` accelerator)."""
    def decay():
        clock = draw(st.sampled_from(["created", "last_access"]))
        kind = draw(st.sampled_from(["half-life-floor", "half-life", "per-day", "per-tier"]))
        if kind == "half-life-floor":
            return {"kind": kind, "clock": clock, "floor": draw(st.floats(0.0, 0.95)),
                    "half_life_days": draw(st.floats(0.3, 400.0))}
        if kind == "half-life":
            return {"kind": kind, "clock": clock, "half_life_days": draw(st.floats(0.3, 400.0))}
        if kind == "per-day":
            return {"kind": kind, "clock": clock, "rate": draw(st.floats(0.0, 0.6))}
        return {"kind": kind}

    tables = [{"ranker": "product", "decay": decay(),
               "retriever": draw(st.sampled_from(["cosine", "inverse-sq-l2"])),
               "stickiness": draw(st.sampled_from(["none", "access-term"])),
               "feedback": draw(st.sampled_from(FEEDBACK)),
               "retention": draw(st.sampled_from(["none", "ai-memory"]))}
              for _ in range(draw(st.integers(1, 3)))]
    return {
        "seed": draw(st.integers(0, 10**6)),
        "n_notes": draw(st.integers(300, 2500)),
        "n_queries": draw(st.integers(1, 40)),
        "dim": draw(st.sampled_from([2, 4, 8])),
        "horizon": draw(st.sampled_from([3.0, 30.0, 300.0])),
        "c": draw(st.integers(1, 60)),
        "mode": draw(st.sampled_from(["per-tick", "per-query"])),
        "tables": tables,
    }


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(filter_cases())
def test_similarity_filter_equals_full_scoring(case):
    """The level's C-th best score, each note's highest recency and the
    ranker's ``similarity_needed`` keep every note of the top C: the frames
    equal full scoring's, for short and long half-lives, floors, the
    last-use clock, per-note rates (per tier), an access term, negative
    similarities (cosine) and retention."""
    stream = random_stream(case["seed"], n_notes=case["n_notes"], n_queries=case["n_queries"],
                           dim=case["dim"], horizon=case["horizon"])
    arms = [Arm(f"p{i}", resolve_policy(t, f"policies.p{i}"))
            for i, t in enumerate(case["tables"])]
    full, pruned = both(stream, arms, candidates=case["c"], feedback_mode=case["mode"])
    assert_same(full, pruned)


@st.composite
def stack_cases(draw):
    """Several product arms on one retriever and clock, differing in their
    decay's floor and rate, feedback and retention (the arms
    the ``"stack"`` accelerator scores as one array)."""
    clock = draw(st.sampled_from(["created", "last_access"]))
    n_arms = draw(st.integers(2, 5))
    tables = []
    for _ in range(n_arms):
        if draw(st.booleans()):
            decay = {"kind": "half-life-floor", "clock": clock,
                     "floor": draw(st.floats(0.0, 0.95)),
                     "half_life_days": draw(st.floats(0.3, 400.0))}
        else:
            decay = {"kind": "per-day", "clock": clock, "rate": draw(st.floats(0.0, 0.6))}
        retention = draw(st.sampled_from(
            ["none", "ai-memory", {"kind": "capacity", "max_notes": 200},
             {"kind": "capacity", "max_notes": 1200}]))
        tables.append({"ranker": "product", "decay": decay, "retention": retention,
                       "feedback": draw(st.sampled_from(FEEDBACK[:4]))})
    return {"seed": draw(st.integers(0, 10**6)), "n_notes": draw(st.integers(600, 2500)),
            "n_queries": draw(st.integers(2, 40)), "dim": draw(st.sampled_from([2, 4, 8])),
            "horizon": draw(st.sampled_from([3.0, 30.0, 300.0])), "c": draw(st.integers(1, 60)),
            "tables": tables}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stack_cases())
def test_stacked_arms_equal_full_scoring(case):
    """Arms scored as one array get the frames of full scoring, for random
    floors, rates, clocks, evictions and uses."""
    stream = random_stream(case["seed"], n_notes=case["n_notes"], n_queries=case["n_queries"],
                           dim=case["dim"], horizon=case["horizon"])
    arms = [Arm(f"p{i}", resolve_policy(t, f"policies.p{i}"))
            for i, t in enumerate(case["tables"])]
    full, pruned = both(stream, arms, candidates=case["c"])
    assert_same(full, pruned)


def test_similarity_filter_runs_and_keeps_ties():
    """The filter runs (not a silent fallback to the levels) where the
    levels the first scan holds do not prove the top C, and scores half as many notes
    as lowering the similarity threshold does for a short half-life with a
    low floor (no more for a long one with a high floor); notes
    tied at the C-th score (equal vectors, equal ages) go to the lower
    note_id as in full scoring."""
    arms = [Arm(name, resolve_policy({"ranker": "product", "decay": decay}, name))
            for name, decay in (("short", {"kind": "half-life-floor", "half_life_days": 2.0,
                                           "floor": 0.05}),
                                ("long", {"kind": "half-life-floor", "half_life_days": 90.0,
                                          "floor": 0.6}))]
    stream = random_stream(3, n_notes=3000, n_queries=40, dim=4)
    for arm, gain in zip(arms, (2, 1)):
        full, pruned = both(stream, [arm], candidates=30, accelerators=("prune", "filter"))
        assert_same(full, pruned)
        _, levels = both(stream, [arm], candidates=30, accelerators=("prune",))  # the levels alone
        assert_same(full, levels)
        assert 0 < pruned.work[0]["cells"] <= levels.work[0]["cells"] / gain

    emb = stream.note_embeddings.copy()
    emb[::5] = emb[2]  # equal vectors ...
    stream.note_embeddings[:] = emb
    notes = stream.notes
    notes.loc[notes.index[::5], "created_at"] = notes["created_at"].iloc[2]  # ... and ages
    ran = set()
    for together in ([arms[0]], arms):  # alone, then both arms as one array
        full, pruned = both(stream, together, candidates=30)
        assert_same(full, pruned)
        ran |= {name for a in pruned.accelerated for name in a}
    assert {"filter", "stack"} <= ran


def test_kept_cells_are_every_cell_at_or_above_its_blocks_need():
    """The filter's cells are exactly the cells whose similarity reaches the
    ranker's need at their row's C-th score and their block's highest
    recency, row by row in column order (the groups of blocks compared
    first leave out only cells that cannot): a short last block and group,
    a C-th score <= 0 (every note), NaN similarities (never kept, and
    hiding no other cell of their block), and rows stacked for two arms
    with recencies of their own."""
    rng = np.random.default_rng(8)
    q, n = 3, (cells.GROUP + 2) * cells.BLOCK + 7
    sim = rng.normal(0.2, 0.3, size=(q, n)).astype(np.float32)
    sim[1, 5] = sim[2, n - 1] = np.nan
    order = cells.SimOrder(sim, np.ones((q, n), dtype=bool))
    nb = -(-n // cells.BLOCK)
    policy = resolve_policy({"ranker": "product"}, "p")
    qrow = np.array([0, 1, 2, 2, 1])
    kth = np.array([0.5, 0.3, 0.4, -0.1, 0.2])
    highs = [np.where(rng.random(nb) < 0.3, 1.0, rng.uniform(0.05, 0.5, nb)) for _ in range(2)]
    parts = [(np.arange(3), policy, None, kth[:3], 0.0, highs[0]),
             (np.arange(3, 5), policy, None, kth[3:], 0.0, highs[1])]
    r, col = simfilter.kept_cells(order, qrow, parts)
    block = np.arange(n) // cells.BLOCK
    want = np.vstack([sim[qrow[i]] >= simfilter.needed_similarity(policy, None, kth[i], 0.0,
                                                     highs[i >= 3][block], sim.dtype)
                      for i in range(len(qrow))])
    want_r, want_col = np.nonzero(want)
    assert np.array_equal(r, want_r) and np.array_equal(col, want_col)
    assert (r == 3).sum() == n - 1  # every note but the NaN
    assert 0 < len(r) < 0.5 * want.size  # the needs leave most cells out


@pytest.mark.parametrize("clock", ["created", "last_access"])
def test_per_note_recency_bound_holds_for_every_note_of_its_block(clock):
    """A per-tier decay (a floor and a rate per note) is bounded per block
    at its youngest age, highest floor and lowest rate: never below the
    recency any of its notes has at any query of the batch (blocks that
    mix the task and scratch tiers, whose floors and rates order oppositely,
    included), and equal to it, up to the declared rounding, where a
    block's notes share a tier."""
    from memsim.engine import BatchContext, Batch
    from memsim.engine.state import NoteArrays, PolicyState
    from memsim.evaluation.metrics import RelevanceIndex
    from memsim.policies.context import TIER_CODES

    s = random_stream(4, n_notes=3000, n_queries=20, dim=4, horizon=300.0)
    codes = {a: i for i, a in enumerate(sorted(set(s.notes["actor"]) | set(s.queries["actor"])))}
    notes = NoteArrays.from_stream(s, codes)
    state = PolicyState(notes, len(codes))
    rng = np.random.default_rng(4)
    n, block = len(state.tier), cells.BLOCK
    per_block = rng.choice([TIER_CODES["task"], TIER_CODES["scratch"], TIER_CODES["longterm"]],
                           size=-(-n // block))
    tier = np.repeat(per_block, block)[:n]
    mixed = np.repeat(rng.random(len(per_block)) < 0.5, block)[:n]
    tier[mixed] = rng.choice([TIER_CODES["task"], TIER_CODES["scratch"]], size=int(mixed.sum()))
    state.tier[:] = tier
    state.last_access[:] = notes.created_at + rng.uniform(0.0, 20.0, n)
    rows = np.arange(20)
    qe = s.query_embeddings
    batch = Batch(qrows=rows, t=s.queries["t"].to_numpy()[rows], actors=np.zeros(20, int),
                  notes=notes, qemb=qe, qnorm2=(qe.astype(np.float64) ** 2).sum(1),
                  relevance=RelevanceIndex(s, notes.created_at))
    ctx = BatchContext(batch, state, rng)
    policy = resolve_policy({"ranker": "product", "decay": {"kind": "per-tier", "clock": clock}},
                            "p")
    got = simfilter._recency_blocks(policy, ctx, np.inf)
    floor, rate = policy.decay.exponential_form(ctx)
    origin = ctx.clock_origin(clock)
    each = policy.decay.exponential_curve(batch.t[:, None] - origin[None, :], floor, rate)
    starts = np.arange(0, len(batch.idx), block)
    want = np.maximum.reduceat(each.max(axis=0), starts)
    assert np.all(got >= want)
    one_tier = np.minimum.reduceat(tier[batch.idx], starts) == np.maximum.reduceat(
        tier[batch.idx], starts)
    assert 0 < one_tier.sum() < len(starts)
    np.testing.assert_allclose(got[one_tier], want[one_tier], rtol=1e-8)


@pytest.mark.parametrize("dead_share", [0.0, 0.97])
def test_block_max_is_each_seen_blocks_largest_similarity(dead_share):
    """A block's largest similarity (+inf with a NaN), for every block with
    a note some arm can see, a short last block included; blocks of dead
    notes alone read -inf."""
    rng = np.random.default_rng(4)
    q, n = 4, 40 * cells.BLOCK + 9
    sim = rng.normal(size=(q, n)).astype(np.float32)
    sim[2, 70] = np.nan
    dead = rng.random(n) < dead_share
    dead[n - 3] = False  # the short last block is seen
    order = cells.SimOrder(sim, np.ones((q, n), dtype=bool), dead if dead.any() else None)
    block = np.arange(n) // cells.BLOCK
    for b in range(block[-1] + 1):
        cols = block == b
        got = order.block_max()[:, b]
        if dead[cols].all():
            assert (got == -np.inf).all()
        else:
            want = sim[:, cols].max(axis=1)
            np.testing.assert_array_equal(got, np.where(np.isnan(want), np.inf, want))
    groups = np.arange(0, order.block_max().shape[1], cells.GROUP)
    np.testing.assert_array_equal(order.group_max(),
                                  np.maximum.reduceat(order.block_max(), groups, axis=1))


@pytest.mark.parametrize("n, same_rank", [(700, False), (20_000, False), (20_000, True),
                                          (300, False)])
def test_level_thresholds_are_the_sample_order_statistics(monkeypatch, n, same_rank):
    """A batch's first level and the one four times as deep get the sample
    values of their ranks, as sorting the sample gives them (NaN
    similarities sort last), also when both ranks are the same and when the
    deep level is below the whole sample; the later levels read the sort."""
    rng = np.random.default_rng(n)
    q = 7
    sim = rng.normal(size=(q, n)).astype(np.float32)
    sim[2, ::3] = np.nan
    sim[4, :] = sim[4, 0]  # one value: every rank ties
    if same_rank:
        monkeypatch.setattr(cells.SimOrder, "sample_rank", lambda self, m: 1)
    order = cells.SimOrder(sim, np.ones((q, n), dtype=bool))
    ranked = -np.sort(order.neg_sample, axis=1)
    k = ranked.shape[1]
    for m in (64, cells.ladder_level(4 * 64), 128, 91):
        j = order.sample_rank(m)
        want = ranked[:, j] if j < k else np.full(q, -np.inf)
        np.testing.assert_array_equal(order.tau(m), want)


@pytest.mark.parametrize("clock", ["created", "last_access"])
def test_arms_of_one_family_scored_as_one_array(clock):
    """Arms whose scores differ only by their decay's floor and rate are
    scored as one array (the path runs, for most of the batches), each with
    exactly the frames of full scoring and of being simulated alone: short
    and long half-lives, floors 0 to 0.9, a per-day rate, evictions of its
    own (capacity) and uses of its own (the last-use clock). An arm that
    evicted most of the store goes down the levels inside the stack, as it
    would alone."""
    stream = random_stream(11, n_notes=3000, n_queries=60, dim=4, horizon=120.0)
    decays = [{"kind": "half-life-floor", "half_life_days": hl, "floor": f, "clock": clock}
              for hl, f in ((1.5, 0.0), (9.0, 0.05), (30.0, 0.6), (400.0, 0.9))]
    decays += [{"kind": "half-life", "half_life_days": 20.0, "clock": clock},
               {"kind": "per-day", "rate": 0.05, "clock": clock}]
    arms = [Arm(f"a{i}", resolve_policy({"ranker": "product", "decay": d}, f"a{i}"))
            for i, d in enumerate(decays)]
    # (a long half-life: the notes it evicted would rank high if they were live)
    arms.append(Arm("cap", resolve_policy({"ranker": "product", "decay": decays[3],
                                           "retention": {"kind": "capacity",
                                                         "max_notes": 1500}}, "cap")))
    # one that evicted most of the store: too few live notes on the first levels
    arms.append(Arm("tiny", resolve_policy({"ranker": "product", "decay": decays[3],
                                            "retention": {"kind": "capacity",
                                                          "max_notes": 100}}, "tiny")))
    full, pruned = both(stream, arms, candidates=20)
    assert_same(full, pruned)
    stacked = [a.get("stack", 0) for a in pruned.accelerated]
    assert all(n > 0 for n in stacked)
    assert_each_alone(stream, arms[:3], pruned, names=("queries", "rankings"), candidates=20)



@pytest.mark.parametrize("mode", ["per-tick", "per-query"])
def test_per_note_curves_are_stacked(mode):
    """Arms whose decay has a curve per note (per-tier: by each note's tier
    in the arm's own state, which its promotions change) are scored as one
    array with arms of one curve, each cell with its own arm's floor and
    rate: the frames of full scoring, and of each arm alone."""
    stream = random_stream(12, n_notes=2500, n_queries=40, dim=4, horizon=90.0)
    tiers = [{"task_half_life_days": 30.0, "scratch_half_life_days": 2.0},
             {"task_half_life_days": 180.0, "task_floor": 0.1, "scratch_floor": 0.5},
             {"task_half_life_days": 720.0, "scratch_half_life_days": 40.0, "task_floor": 0.0}]
    arms = [Arm(f"t{i}", resolve_policy({"preset": "hivemind", "decay": d,
                                         "feedback": {"promote_after": 1 + i}}, f"t{i}"))
            for i, d in enumerate(tiers)]
    arms.append(Arm("one-curve", resolve_policy(
        {"preset": "hivemind", "decay": {"kind": "half-life-floor", "half_life_days": 9.0,
                                         "floor": 0.2}}, "one-curve")))
    assert sum(a.policy.decay.per_note_form for a in arms) == 3
    full, pruned = both(stream, arms, candidates=10, feedback_mode=mode)
    assert_same(full, pruned)
    assert all(a.get("stack") for a in pruned.accelerated)
    assert_each_alone(stream, arms[:2], pruned, names=("queries", "rankings"), candidates=10,
                      feedback_mode=mode)


def test_stacked_rows_go_down_the_levels_and_through_the_filter(monkeypatch):
    """A stack's rows that the first level does not prove go down the
    levels and, past the first scan's depth, through the similarity filter
    (short half-lives, low floors: recent notes far down the similarity
    order), with the frames of full scoring."""
    filtered = []
    stack_filtered = stacking._stack_filtered

    def spy(members, order, c, n, rows, *args):
        filtered.append(len(rows))
        return stack_filtered(members, order, c, n, rows, *args)

    monkeypatch.setattr(stacking, "_stack_filtered", spy)
    stream = random_stream(3, n_notes=3000, n_queries=40, dim=4)
    arms = [Arm(f"s{i}", resolve_policy({"ranker": "product", "decay": {
        "kind": "half-life-floor", "half_life_days": hl, "floor": f}}, f"s{i}"))
            for i, (hl, f) in enumerate(((1.0, 0.0), (2.0, 0.05), (5.0, 0.1)))]
    full, pruned = both(stream, arms, candidates=30)
    assert_same(full, pruned)
    assert all(a.get("stack") for a in pruned.accelerated)
    assert sum(filtered) > 0


@pytest.mark.parametrize("c", [3, 40])
def test_levels_packed_to_the_live_notes(c):
    """An arm that evicted most of the store scores only its live cells of a
    level, packed to the left (the path runs), with the same frames as full
    scoring, ties included."""
    stream = random_stream(5, n_notes=3000, n_queries=60, dim=4)
    emb = stream.note_embeddings.copy()
    emb[::4] = emb[1]  # equal similarities: ties across packed columns
    stream.note_embeddings[:] = emb
    decays = {"5d": {"kind": "half-life", "half_life_days": 5.0}, "none": "none"}
    arms = [Arm(f"cap-{m}-{d}", resolve_policy(
        {"ranker": "product", "decay": decay, "retention": {"kind": "capacity", "max_notes": m}},
        f"cap-{m}-{d}")) for m in (60, 400) for d, decay in decays.items()]
    full, pruned = both(stream, arms, candidates=c)
    assert_same(full, pruned)
    assert any(w.get("packed-levels") for w in pruned.work)


@pytest.mark.parametrize("prefilter", [None, 25])
def test_levels_leave_out_the_notes_every_arm_evicted(monkeypatch, prefilter):
    """The shared levels hold only the notes some arm can see; the notes
    every arm evicted are left out (the path runs), and every arm's frames
    equal full scoring's, with and without a prefilter (the nearest-M search
    runs on the same levels), for one arm alone and for several, also when
    fewer notes are left than the top C asks for."""
    opened = []
    real = cells.SimOrder.__init__

    def spy(self, sim, valid, dead=None, varying=None):
        real(self, sim, valid, dead, varying)
        opened.append(len(self.open) / max(self.n_all, 1))

    monkeypatch.setattr(cells.SimOrder, "__init__", spy)
    stream = random_stream(9, n_notes=2500, n_queries=50, dim=6)
    retriever = {"kind": "cosine", "prefilter": prefilter} if prefilter else "cosine"

    def arm(m, hl):
        return Arm(f"cap-{m}-{hl}", resolve_policy(
            {"ranker": "product", "retriever": retriever,
             "decay": {"kind": "half-life", "half_life_days": hl},
             "retention": {"kind": "capacity", "max_notes": m}}, f"cap-{m}-{hl}"))

    # (capacity 6 < 10 candidates: fewer notes left than the top C asks for)
    for arms in ([arm(6, 3.0)], [arm(150, 3.0)], [arm(80, 3.0), arm(300, 30.0), arm(300, 3.0)]):
        opened.clear()
        full, pruned = both(stream, arms, candidates=10)
        assert_same(full, pruned)
        assert min(opened) < 0.5
    assert_each_alone(stream, arms, pruned, candidates=10)


def test_quickstart_frames_identical_with_the_accelerators_on_and_off():
    """The quickstart's policies on its (shortened) stream: the same frames
    with every accelerator, with none, and from the reference engine."""
    overrides = ["workload.horizon_days=20", "workload.backfill_days=60",
                 "workload.queries_per_day=5", "workload.notes_per_day=40"]
    exp = memsim.load_experiment(ROOT / "experiments" / "quickstart.toml", overrides=overrides)
    stream = load_stream_for(exp, 0)
    arms = [Arm(name, pol, b) for b in exp.settings.budgets or (None,)
            for name, pol in exp.policies.items()]
    on = simulate(stream, arms, exp.sim, replicate_seed(exp, 0))
    off = simulate(stream, arms, exp.sim, replicate_seed(exp, 0), accelerators=())
    ref = reference.simulate(stream, arms, exp.sim, replicate_seed(exp, 0))
    for got in (off, ref):
        pd.testing.assert_frame_equal(on.queries, got.queries, check_exact=True)
    assert any(on.accelerated) and np.isfinite(on.queries["utility"]).any()


def test_namespaces_and_expiry():
    # separate stores in one stream (a query sees its own namespace only),
    # and notes that expire: the valid notes differ from query to query
    from memsim.data.stream import make_stream

    base = random_stream(5, n_notes=1200, n_queries=60, dim=4)
    rng = np.random.default_rng(5)
    notes = base.notes.copy()
    queries = base.queries.copy()
    notes["namespace"] = rng.choice(["u0", "u1", "u2"], len(notes))
    queries["namespace"] = rng.choice(["u0", "u1", "u2"], len(queries))
    notes["expires_at"] = np.where(rng.random(len(notes)) < 0.3,
                                   notes["created_at"] + rng.uniform(1, 20, len(notes)), np.nan)
    stream = make_stream(notes, queries, base.qrels, None, base.note_embeddings,
                         base.query_embeddings, {"name": "ns"})
    arms = [Arm(name, resolve_policy({"preset": name}, name))
            for name in ("hivemind", "feather", "similarity-only", "generative-agents")]
    full, pruned = both(stream, arms, candidates=12)
    assert_same(full, pruned)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), n_notes=st.integers(1, 3000), m=st.integers(1, 80),
       dim=st.sampled_from([2, 4]), quantise=st.booleans(),
       retriever=st.sampled_from(["cosine", "inverse-sq-l2"]),
       evicted_share=st.sampled_from([0.2, 0.9]), dead=st.booleans())
def test_nearest_m_prefilter_equals_a_full_sort(seed, n_notes, m, dim, quantise, retriever,
                                                evicted_share, dead):
    """The prefilter's exact nearest-M search (threshold levels) keeps the
    notes a full sort keeps, ties to the lower note_id; also when the levels
    leave out notes every arm evicted (some of this arm's evicted notes)."""
    from memsim.engine import Batch, BatchContext, NoteArrays, PolicyState, top_candidates
    from memsim.evaluation.metrics import RelevanceIndex

    s = random_stream(seed % 1000, n_notes=n_notes, n_queries=25, dim=dim)
    if quantise:  # many equal similarities
        s.note_embeddings[:] = np.round(s.note_embeddings)
    codes = {a: i for i, a in enumerate(sorted(set(s.notes["actor"]) | set(s.queries["actor"])))}
    notes = NoteArrays.from_stream(s, codes)
    state = PolicyState(notes, len(codes))
    rng = np.random.default_rng(seed)
    state.evicted[:] = rng.random(n_notes) < evicted_share
    rows = np.arange(25)
    qe = s.query_embeddings
    batch = Batch(qrows=rows, t=s.queries["t"].to_numpy()[rows], actors=np.zeros(25, int),
                  notes=notes, qemb=qe, qnorm2=(qe.astype(np.float64) ** 2).sum(1),
                  relevance=RelevanceIndex(s, notes.created_at))
    pol = resolve_policy({"retriever": {"kind": retriever, "prefilter": m}}, "p")
    evicted = state.evicted[batch.idx]
    if dead:  # as if other arms saw some of them
        batch.dead = evicted & (rng.random(len(evicted)) < 0.7)
    ctx = BatchContext(batch, state, rng)
    got, (cols, real) = level_prefilter(ctx, pol.retriever, evicted)
    live = batch.valid & ~evicted[None, :]
    sim = np.where(live, ctx.similarity(pol.retriever), -np.inf)
    want = np.zeros_like(live)
    if sim.shape[1]:
        pos, vals = top_candidates(sim, m)
        np.put_along_axis(want, pos, np.isfinite(vals), axis=1)
    np.testing.assert_array_equal(got, want)
    # the retrievers' declared default (the reference's): the same notes
    np.testing.assert_array_equal(pol.retriever.prefilter_mask(ctx, live), want)
    # the same cells, each row's columns ascending, padding after them
    assert cols.shape == real.shape == (len(want), m)
    for row, c, r in zip(want, cols, real):
        np.testing.assert_array_equal(c[r], np.flatnonzero(row))
        assert not r[r.sum():].any()


# -- arms packed and measured together -----------------------------------------

PACKERS = ["skip-fill", "greedy-swap", "exact", "top-k-cutoff", "greedy",
           {"kind": "greedy-swap", "min_relative_score": 0.5}]


@st.composite
def together_cases(draw):
    """Per-tick arms, several with the same packer (they pack as one array),
    with retention (each its own evictions in the metrics), feedback and
    various C."""
    tables = []
    for i in range(draw(st.integers(2, 5))):
        table = policy_table(draw)
        if i < 2 and "preset" in table:  # at least two per-tick arms
            table = {"ranker": draw(st.sampled_from(RANKERS))}
        if "preset" not in table:
            table["packer"] = draw(st.sampled_from(PACKERS))
            table["retention"] = draw(st.sampled_from(
                ["none", "ai-memory", {"kind": "capacity", "max_notes": 40}]))
            if draw(st.booleans()):
                table["candidates"] = draw(st.integers(1, 30))
        tables.append(table)
    return {
        "seed": draw(st.integers(0, 10**6)),
        "n_notes": draw(st.integers(30, 600)),
        "n_queries": draw(st.integers(1, 30)),
        "dim": draw(st.sampled_from([2, 4, 8])),
        "c": draw(st.integers(1, 60)),
        "reader": draw(st.booleans()),
        "tables": tables,
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(together_cases())
def test_arms_packed_together_equal_each_arm_alone(case):
    """The per-tick arms of a batch pack (those alike) and are measured as
    one array: each arm's frames equal those it gets alone, and those of
    full scoring, bit for bit."""
    from memsim.evaluation.reader import PositionalReader

    stream = random_stream(case["seed"], n_notes=case["n_notes"], n_queries=case["n_queries"],
                           dim=case["dim"])
    arms = [Arm(f"p{i}", resolve_policy(t, f"policies.p{i}"))
            for i, t in enumerate(case["tables"])]
    reader = PositionalReader() if case["reader"] else None
    full, together = both(stream, arms, reader=reader, candidates=case["c"])
    alike = [(repr(a.policy.packer), repr(a.policy.orderer), a.policy.candidates or case["c"])
             for a in arms if feedback_timing(a.policy, SimSettings()) == "per-tick"]
    if len(set(alike)) < len(alike):  # two arms pack alike: the path runs
        assert any(w.get("packed-together") for w in together.work)
    assert_same(full, together)
    assert_each_alone(stream, arms, together, names=("queries", "rankings"), reader=reader,
                      candidates=case["c"])
