"""Every accelerator against the reference engine, for every registered component.

:func:`memsim.engine.reference.simulate` scores every live note of every
query and replays per-query feedback query by query: the executable
specification. Each accelerator (``simulate(..., accelerators=...)``, one at a
time and all together) must give the same frames bit for bit (rankings with
the notes the ranking hid, scores, packing, metrics, store, arms). The components come from the
registry, so a newly registered one is covered without editing this file;
each is put into a policy whose other slots let every accelerator run, in
arms that also stack, prefilter and feed back per query.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pandas.testing import assert_frame_equal

from memsim.engine import ACCELERATORS, Arm, SimSettings, reference, simulate
from memsim.checks.testing import check_component
from memsim.policies import REGISTRY, Policy, build_component
from memsim.policies.base import Ranker
from memsim.policies.retrieval import Cosine
from memsim.core.rng import seed_sequence
from memsim.data.stream import make_stream
from memsim.data.workload import CLASS_NAMES, SyntheticWorkload

COMPONENTS = [(slot, name) for slot, table in REGISTRY.items() for name in sorted(table)]

#: each accelerator alone ("filter" refines "prune"), then all of them
SETS = [("prefilter",), ("prune",), ("prune", "filter"), ("stack",), ("walk",), ("minmax",),
        ACCELERATORS]


@pytest.fixture(autouse=True)
def _minmax_at_test_scale(monkeypatch):
    """``"minmax"`` runs where its rows pay (``MIN_CELLS``): here, at any size."""
    from memsim.engine import minmax

    monkeypatch.setattr(minmax, "MIN_CELLS", 0)

#: the other slots: components under which every accelerator can run
#: (bounded, elementwise, one exponential of the age)
BASE = {"retriever": "cosine", "decay": {"kind": "half-life", "half_life_days": 3.0},
        "ranker": "product", "feedback": {"kind": "default", "touch": "packed"}}


@functools.lru_cache(maxsize=None)
def _stream(seed: int, n: int = 1500, q: int = 48, dim: int = 6):
    """A stream with every optional column an engine path reads: tiers,
    updates, importance, organic uses, expiry, per-query budgets, planted
    classes and a workload config (the ``bayes`` ranker), logged rankings
    (``as-logged``); near-duplicate notes make ties."""
    rng = np.random.default_rng(seed)
    created = np.sort(rng.uniform(-200, 8, n))
    notes = pd.DataFrame({
        "note_id": np.arange(n), "created_at": created,
        "updated_at": created + rng.uniform(0, 2, n),
        "tokens": rng.integers(5, 300, n),
        "actor": rng.choice(["a", "b", "c"], n),
        "tier": rng.choice(["task", "scratch", "longterm"], n, p=[.6, .3, .1]),
        "importance": rng.uniform(0, 2, n), "salience": rng.uniform(0.25, 2, n),
        "pinned": rng.random(n) < 0.05,
        "expires_at": np.where(rng.random(n) < 0.1, created + rng.uniform(1, 30, n), np.nan),
        "note_class": rng.choice(list(CLASS_NAMES), n),
        # a third of the notes superseded during the queries (the
        # invalidation retention, the store's stale notes, the
        # superseded-use curve)
        "superseded_at": np.where(rng.random(n) < 1 / 3,
                                  np.maximum(created, 0.0) + rng.uniform(0, 8, n), np.nan),
    })
    emb = rng.normal(size=(n, dim)).astype(np.float32)
    emb[1::7] = emb[::7][:len(emb[1::7])]  # exact duplicates: tied similarities
    qt = np.sort(rng.uniform(0, 8, q))
    queries = pd.DataFrame({"query_id": np.arange(q), "t": qt,
                            "actor": rng.choice(["a", "b"], q)})
    # budgets of the queries' own (drawn last: the other columns as before)
    budgets = np.random.default_rng([seed, 1]).choice([150, 400, 1500], q)
    queries["budget_tokens"] = budgets
    qrels = pd.DataFrame({"query_id": np.repeat(np.arange(q), 4),
                          "note_id": rng.choice(n, 4 * q),
                          "gain": rng.choice([1.0, 0.5, -0.5], 4 * q)}
                         ).drop_duplicates(["query_id", "note_id"])
    at = np.sort(rng.uniform(-5, 8, 60))
    accesses = pd.DataFrame({"t": at, "note_id": rng.choice(np.flatnonzero(created < -5), 60),
                             "actor": rng.choice(["a", "c"], 60)})
    retrieved = pd.DataFrame({"query_id": np.repeat(np.arange(q), 20),
                              "rank": np.tile(np.arange(1, 21), q),
                              "note_id": np.concatenate([rng.choice(np.flatnonzero(
                                  created <= t), 20, replace=False) for t in qt])})
    return make_stream(notes, queries, qrels, accesses, emb,
                       rng.normal(size=(q, dim)).astype(np.float32),
                       {"name": "accelerators", "source": "memsim.data.workload",
                        "config": SyntheticWorkload().to_config()}, retrieved=retrieved)


def _policy(**slots) -> Policy:
    table = {**BASE, **slots}
    return Policy(**{s: v if not isinstance(v, (str, dict)) else build_component(s, v, s)
                     for s, v in table.items()})


#: components whose defaults do nothing at this stream's size: the ivf
#: retriever trains its index once the store holds 40,000 notes
AT_TEST_SCALE = {"ivf": {"kind": "ivf", "nlist": 8, "nprobe": 2, "train_size": 200}}
#: the optional package each approximate retriever's index needs
NEEDS = {"hnsw": "hnswlib", "ivf": "faiss"}


def _arms(slot: str, name: str) -> list[Arm]:
    """The component in a policy of its own, and beside it: a policy that
    stacks with it (another decay), one with a prefilter, one whose uses
    take effect before the next query, one whose feedback promotes (and a
    packer that can cut on similarity, cutting so per tick and per query)."""
    comp = build_component(slot, AT_TEST_SCALE.get(name, name), slot)
    own = _policy(**{slot: comp})
    arms = [Arm("own", own)]
    if slot != "decay":
        arms.append(Arm("stacked", dataclasses.replace(own, decay=build_component(
            "decay", {"kind": "half-life-floor", "half_life_days": 4.0, "floor": 0.1}, "d"))))
    if slot != "retriever" and "prefilter" in type(own.retriever).__dataclass_fields__:
        arms.append(Arm("prefilter", dataclasses.replace(
            own, retriever=dataclasses.replace(own.retriever, prefilter=25))))
    elif slot == "retriever" and "prefilter" in type(comp).__dataclass_fields__:
        arms.append(Arm("prefilter", dataclasses.replace(
            own, retriever=dataclasses.replace(comp, prefilter=25))))
    fb = own.feedback
    if slot == "packer" and "cut_on" in type(comp).__dataclass_fields__:
        # a relevance cut on similarity: the packer reads the candidates'
        # similarity, per tick and per query
        cut = dataclasses.replace(own, packer=dataclasses.replace(
            comp, cut_on="similarity", min_relative_score=0.6))
        arms.append(Arm("cut-similarity", cut))
        arms.append(Arm("cut-similarity-per-query", dataclasses.replace(
            cut, feedback=dataclasses.replace(fb, timing="per-query"))))
    if "timing" in type(fb).__dataclass_fields__:
        # (a retriever's own index is built again for every query the
        # reference replays alone: the base retriever here)
        alone = own.retriever if not own.retriever.chooses_prefilter() else \
            build_component("retriever", BASE["retriever"], "retriever")
        arms.append(Arm("per-query", dataclasses.replace(
            own, retriever=alone, feedback=dataclasses.replace(fb, timing="per-query"))))
        if "touch" in type(fb).__dataclass_fields__:
            arms.append(Arm("touch-prefilter", dataclasses.replace(
                own, retriever=dataclasses.replace(own.retriever, prefilter=40)
                if "prefilter" in type(own.retriever).__dataclass_fields__ else own.retriever,
                # an index of its own is built for each query replayed alone: per tick
                feedback=dataclasses.replace(fb, touch="prefilter", timing="per-tick"
                                             if own.retriever.chooses_prefilter()
                                             else "per-query"))))
            if not own.retriever.chooses_prefilter():
                # every prefilter note gains a use before the query is scored
                # (Feather DB v0.16): walked as a use before the query itself
                arms.append(Arm("touch-prefilter-before", dataclasses.replace(
                    own, retriever=dataclasses.replace(own.retriever, prefilter=40)
                    if "prefilter" in type(own.retriever).__dataclass_fields__
                    else own.retriever,
                    feedback=dataclasses.replace(fb, touch="prefilter", before_scoring=True,
                                                 timing="per-query"))))
            arms.append(Arm("returned", dataclasses.replace(
                own, feedback=dataclasses.replace(fb, touch="returned", k=3, promote_after=2,
                                             cooldown_s=3600.0))))
    return arms


def _frames(result):
    return {k: getattr(result, k) for k in ("queries", "store", "arms", "rankings")}


@pytest.mark.parametrize("slot, name", COMPONENTS, ids=[f"{s}:{n}" for s, n in COMPONENTS])
def test_every_accelerator_gives_the_reference_frames(slot, name):
    """The component's arms (per tick, and beside it per-query ones), with
    each accelerator set, and with each tick taken in parts
    (``max_tick_cells``) against the reference in the same parts."""
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    stream = _stream(0)
    arms = _arms(slot, name)
    # "hidden": the rankings also hold the oracle's notes outside the top C
    settings = SimSettings(candidates=6, save_rankings="hidden", tick_days=2.0,
                           retention_period_days=3.0)
    want = _frames(reference.simulate(stream, arms, settings, seed_sequence(5)))
    # and with each tick taken in parts of about 4 queries (both engines)
    parts = dataclasses.replace(settings, max_tick_cells=4 * stream.n_notes)
    in_parts = _frames(reference.simulate(stream, arms, parts, seed_sequence(5)))
    for accelerators, s in [*((a, settings) for a in SETS), (ACCELERATORS, parts)]:
        got = simulate(stream, arms, s, seed_sequence(5), accelerators=accelerators)
        for key, frame in _frames(got).items():
            try:
                assert_frame_equal(frame, (want if s is settings else in_parts)[key],
                                   check_exact=True)
            except AssertionError as err:
                raise AssertionError(f"{slot}:{name} with {accelerators}"
                                     f"{'' if s is settings else ' in parts'}: {key} differ "
                                     f"from the reference\n{err}") from None


#: in per-query mode: the walk alone (each arm scored on its own), with the
#: stacking of arms, and all of them
PER_QUERY_SETS = [("walk",), ("walk", "stack"), ACCELERATORS]


@pytest.mark.parametrize("slot, name", COMPONENTS, ids=[f"{s}:{n}" for s, n in COMPONENTS])
def test_per_query_arms_walked_together_give_the_reference_frames(slot, name):
    """Every arm that leaves its timing to the experiment updates per query:
    the arms beside the component's own (another decay, a prefilter, a
    promoting feedback, ...) are walked through each batch together, their
    corrections packed as one array, and the arms that stack scored as one;
    and with each tick taken in parts of about 4 queries (``max_tick_cells``),
    against the reference in the same parts."""
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    stream = _stream(0)
    arms = _arms(slot, name)
    settings = SimSettings(candidates=6, save_rankings="hidden", tick_days=2.0,
                           retention_period_days=3.0, feedback_mode="per-query")
    want = _frames(reference.simulate(stream, arms, settings, seed_sequence(5)))
    # and with each tick taken in parts of about 4 queries (both engines)
    parts = dataclasses.replace(settings, max_tick_cells=4 * stream.n_notes)
    in_parts = _frames(reference.simulate(stream, arms, parts, seed_sequence(5)))
    for accelerators, s in [*((a, settings) for a in PER_QUERY_SETS), (ACCELERATORS, parts)]:
        got = simulate(stream, arms, s, seed_sequence(5), accelerators=accelerators)
        for key, frame in _frames(got).items():
            try:
                assert_frame_equal(frame, (want if s is settings else in_parts)[key],
                                   check_exact=True)
            except AssertionError as err:
                raise AssertionError(f"{slot}:{name} per query with {accelerators}"
                                     f"{'' if s is settings else ' in parts'}: {key} "
                                     f"differ from the reference\n{err}") from None


def test_per_query_arms_are_walked_and_stacked_together():
    """The per-query test above is not vacuous: several arms are walked in
    one batch, some of them stacked, and their corrections are packed with
    other arms' (``packed-together``)."""
    stream, arms = _stream(0), _arms("ranker", "product")
    settings = SimSettings(candidates=6, tick_days=2.0, retention_period_days=3.0,
                           feedback_mode="per-query")
    got = simulate(stream, arms, settings, seed_sequence(5))
    walked = [a.get("walk", 0) > 0 for a in got.accelerated]
    assert sum(walked) >= 3
    assert sum(a.get("stack", 0) > 0 and a.get("walk", 0) > 0 for a in got.accelerated) >= 2
    assert any(w.get("packed-together", 0) > 0 and a.get("walk", 0) > 0
               for a, w in zip(got.accelerated, got.work))


@pytest.mark.parametrize("ranker, retriever, accelerators", [
    # set-dependent, its sets reading the uses: every query scores the
    # batch's columns
    ("weighted-sum", "cosine", ACCELERATORS),
    # the walk off, a prefilter whose cells this ranker does not score:
    # each query scores its own prefilter's columns
    ("bayes", {"kind": "cosine", "prefilter": 25}, ("prefilter",)),
])
def test_an_arm_answered_query_by_query_packs_its_batch_with_no_other_arm(
        ranker, retriever, accelerators):
    """An arm answered query by query whose uses read no packing packs each
    batch's rows in one call: its own rows, not other arms' (its
    ``packed-together`` stays 0), with the frames of the reference."""
    stream = _stream(0)
    arm = Arm("alone", _policy(ranker=ranker, retriever=retriever,
                               feedback={"kind": "default", "touch": "returned", "k": 3}))
    settings = SimSettings(candidates=6, tick_days=2.0, feedback_mode="per-query",
                           save_rankings=True)
    got = simulate(stream, [arm], settings, seed_sequence(5), accelerators=accelerators)
    assert got.work[0].get("packed-together", 0) == 0 and not got.accelerated[0].get("walk")
    want = reference.simulate(stream, [arm], settings, seed_sequence(5))
    for key, frame in _frames(got).items():
        assert_frame_equal(frame, _frames(want)[key], check_exact=True)


@pytest.mark.parametrize("accelerators", [(), ACCELERATORS])
def test_arms_answered_query_by_query_answer_each_query_together(accelerators):
    """Arms the walk cannot correct (Generative Agents' set-dependent
    ranker, whose sets read the uses) answer each query of a batch together:
    each on its own state and decay, their answers packed as one array (a
    promoting, a returned-uses and a packed-uses feedback among them; one
    whose uses read no packing packs its own rows after the batch), with the
    frames of the reference."""
    stream = _stream(0)
    ranker = "weighted-sum"
    feedbacks = [{"kind": "default", "touch": "packed"},
                 {"kind": "default", "touch": "packed", "promote_after": 2},
                 {"kind": "default", "touch": "returned", "k": 3}]
    arms = [Arm(f"arm-{i}", _policy(ranker=ranker, feedback=fb, decay={
        "kind": "generative-agents", "clock": "last_access", "decay_factor": f}))
            for i, (fb, f) in enumerate(zip(feedbacks, (0.9, 0.99, 0.995)))]
    settings = SimSettings(candidates=6, tick_days=2.0, feedback_mode="per-query",
                           save_rankings=True)
    got = simulate(stream, arms, settings, seed_sequence(5), accelerators=accelerators)
    assert not any(a.get("walk") for a in got.accelerated)
    together = [w.get("packed-together", 0) for w in got.work]
    assert together[0] > 0 and together[1] > 0 and together[2] == 0
    want = reference.simulate(stream, arms, settings, seed_sequence(5))
    for key, frame in _frames(got).items():
        assert_frame_equal(frame, _frames(want)[key], check_exact=True)


@pytest.mark.parametrize("mode", ["per-tick", "per-query"])
def test_langchain_arms_score_their_candidates_alone_and_share_their_sets(mode, monkeypatch):
    """The LangChain test above is not vacuous: with ``"prefilter"`` a
    LangChain arm scores only its candidates' cells (at most ``search_k +
    k`` per query, where the reference scores every note), and arms that
    differ by their decay (the same live notes) find the store's sets once
    per batch between them; the frames stay the reference's."""
    from memsim.policies.rank import LangChainTimeWeighted

    found = []
    find = LangChainTimeWeighted._find_sets
    monkeypatch.setattr(LangChainTimeWeighted, "_find_sets",
                        lambda self, ctx, live: found.append(1) or find(self, ctx, live))
    stream = _stream(0)
    ranker = {"kind": "langchain-time-weighted", "search_k": 10, "k": 2}
    arms = [Arm(f"decay-{h}", _policy(ranker=ranker, decay={"kind": "half-life",
                                                          "half_life_days": h}))
            for h in (1.0, 3.0, 9.0)]
    settings = SimSettings(candidates=6, tick_days=2.0, feedback_mode=mode, save_rankings=True)
    got = simulate(stream, arms, settings, seed_sequence(5), accelerators=("prefilter",))
    t = stream.queries["t"].to_numpy()
    batches = len(t) if mode == "per-query" else len(np.unique(np.floor(t / 2.0)))
    assert len(found) == batches  # once per batch, not per arm
    assert all(a.get("prefilter") == len(t) for a in got.accelerated)
    assert all(0 < w["cells"] <= 12 * len(t) for w in got.work)
    off = simulate(stream, arms, settings, seed_sequence(5), accelerators=())
    assert all(w["cells"] > 100 * len(t) for w in off.work)
    want = reference.simulate(stream, arms, settings, seed_sequence(5))
    for key, frame in _frames(got).items():
        assert_frame_equal(frame, _frames(off)[key], check_exact=True)
        assert_frame_equal(frame, _frames(want)[key], check_exact=True)


@pytest.mark.parametrize("ranker", [
    {"kind": "langchain-time-weighted", "search_k": 10, "k": 2},
    {"kind": "langchain-time-weighted", "search_k": 25, "k": 4, "relevance": "l2",
     "importance_weight": 0.5, "default_salience": 0.2},
    {"kind": "langchain-time-weighted", "search_k": 6, "k": 0, "relevance": "inner-product"},
])
def test_langchain_arms_are_walked_per_query_with_the_reference_frames(ranker):
    """LangChain's sets read no use (``sets_read_uses`` False): its
    per-query arms are walked, each query corrected at the notes used
    before it among its own candidates, and give the reference's frames;
    the uses within a batch change the answers (per tick differs), so the
    corrections are not vacuous."""
    stream = _stream(0)
    feedback = {"kind": "default", "touch": "returned", "k": 3}
    # (a capacity cap evicts between ticks: the sets change with the live notes)
    arms = [Arm(f"{rate}-{touch}-{cap}", _policy(
                ranker=ranker, decay={"kind": "langchain", "decay_rate": rate},
                feedback={**feedback, "touch": touch},
                retention={"kind": "capacity", "max_notes": cap}))
            for rate, touch, cap in ((0.02, "returned", 5000), (0.3, "returned", 700),
                                     (0.02, "packed", 700), (0.3, "packed", 5000))]
    settings = SimSettings(candidates=6, tick_days=2.0, retention_period_days=3.0,
                           feedback_mode="per-query", save_rankings="hidden")
    _walked_as_the_reference(stream, arms, settings)


def _walked_as_the_reference(stream, arms: list[Arm], settings: SimSettings) -> None:
    """Every query of every per-query arm is walked, with the reference's
    frames, and the uses within a batch change the rankings (a per-tick
    replay differs), so the walk's corrections are not vacuous."""
    got = simulate(stream, arms, settings, seed_sequence(5))
    assert all(a.get("walk") == len(stream.queries) for a in got.accelerated)
    want = reference.simulate(stream, arms, settings, seed_sequence(5))
    for key, frame in _frames(got).items():
        assert_frame_equal(frame, _frames(want)[key], check_exact=True)
    tick = simulate(stream, arms, dataclasses.replace(settings, feedback_mode="per-tick"),
                    seed_sequence(5))
    assert not tick.rankings.equals(got.rankings)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RelativeSimilarity(Ranker):
    """A set-dependent ranker whose sets read no use, choosing no
    candidates: the recency times the similarity scaled to [0, 1] over each
    query's live notes (read on the whole context, ``ctx.whole``)."""

    name: ClassVar[str] = "relative-similarity"
    set_dependent: ClassVar[bool] = True
    scores_cells: ClassVar[bool] = True
    sets_read_uses: ClassVar[bool] = False

    def combine(self, rel, rec, ctx):
        full, at = getattr(ctx, "whole", (ctx, None))
        sim = np.asarray(full.similarity(Cosine()), dtype=np.float64)
        live = np.ones(sim.shape, dtype=bool) if full.live is None else np.asarray(full.live)
        lo = np.where(live, sim, np.inf).min(axis=1)
        span = np.where(live, sim, -np.inf).max(axis=1) - lo
        span = np.where(span > 0, span, 1.0)
        rows = np.arange(len(sim))[:, None] if at is None else np.asarray(at) // sim.shape[1]
        return (np.asarray(rel, dtype=np.float64) - lo[rows]) / span[rows] * rec


def test_a_set_dependent_ranker_whose_sets_read_no_use_is_walked():
    """The walk serves any ranker that declares ``sets_read_uses`` False
    and ``scores_cells``, not only one that chooses its candidates: the
    checker accepts this one, and its per-query arms are walked with the
    reference's frames (uses within a batch change them)."""
    check_component(RelativeSimilarity)
    stream = _stream(0)
    arms = [Arm(f"r{rate}", _policy(ranker=RelativeSimilarity(),
                                    decay={"kind": "langchain", "decay_rate": rate},
                                    retention={"kind": "capacity", "max_notes": 900}))
            for rate in (0.02, 0.3)]
    settings = SimSettings(candidates=6, tick_days=2.0, retention_period_days=3.0,
                           feedback_mode="per-query", save_rankings=True)
    _walked_as_the_reference(stream, arms, settings)


def test_each_accelerator_answers_queries():
    """The tests above are not vacuous: on their stream, the product
    ranker's arms and the weighted-sum ranker's (``"minmax"``), every
    accelerator answers queries (``SimResult.accelerated``), and none does
    in the reference or with the accelerators off."""
    stream = _stream(0)
    arms = [*_arms("ranker", "product"), *_arms("ranker", "weighted-sum")[:1]]
    settings = SimSettings(candidates=6, tick_days=2.0, retention_period_days=3.0)
    got = simulate(stream, arms, settings, seed_sequence(5)).accelerated
    used = {name for per_arm in got for name, n in per_arm.items() if n > 0}
    assert used == set(ACCELERATORS)
    off = simulate(stream, arms, settings, seed_sequence(5), accelerators=())
    assert all(not a for a in off.accelerated)
    assert all(not a for a in reference.simulate(stream, arms, settings,
                                                 seed_sequence(5)).accelerated)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.integers(0, 5), st.booleans(), st.integers(0, 2**32 - 1))
def test_the_walks_column_lookup_finds_each_row_or_none(n, start, gaps, seed):
    """``walk._columns``: where note rows are among a batch's columns (a
    search, or arithmetic when the columns are consecutive rows), for rows
    inside, before and after them, in any shape."""
    from memsim.engine.walk import _columns

    rng = np.random.default_rng(seed)
    idx = start + np.arange(n)
    if gaps and n:
        idx = np.unique(start + rng.integers(0, 3 * n, n))
    rows = rng.integers(0, start + 3 * n + 2, size=(3, 4))
    at, hit = _columns(idx, rows)
    where = {int(r): i for i, r in enumerate(idx)}
    assert at.shape == hit.shape == rows.shape
    assert hit.tolist() == [[int(r) in where for r in row] for row in rows]
    assert np.array_equal(at[hit], [where[int(r)] for r in rows[hit]])
    assert ((at >= 0) & (at < max(1, len(idx)))).all()  # usable as an index


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 6), st.integers(0, 40), st.floats(0.0, 1.0), st.integers(0, 2**32 - 1))
def test_nonzero2_is_numpys_nonzero(q, n, share, seed):
    """The engine's 2-D ``nonzero`` (through ``flatnonzero``) gives numpy's
    arrays: rows, then each row's columns ascending; empty masks too."""
    from memsim.engine.topc import nonzero2

    mask = np.random.default_rng(seed).random((q, n)) < share
    got, want = nonzero2(mask), np.nonzero(mask)
    assert all(np.array_equal(g, w) and g.dtype == w.dtype for g, w in zip(got, want))


@pytest.mark.parametrize("retriever", [{"kind": "cosine", "prefilter": 3},
                                       {"kind": "hnsw", "prefilter": 3},
                                       {**AT_TEST_SCALE["ivf"], "prefilter": 3}],
                         ids=lambda r: r["kind"])
@pytest.mark.parametrize("timing", ["per-tick", "per-query"])
def test_a_query_before_the_first_note_gets_an_empty_answer(retriever, timing):
    """A prefilter's gathered cells indexed the batch's notes, none yet: an
    IndexError (a real trace whose first query comes before its first note
    could not run with a prefilter). The reference answered it, empty."""
    if retriever["kind"] in NEEDS:
        pytest.importorskip(NEEDS[retriever["kind"]])
    rng = np.random.default_rng(3)
    n, q = 30, 6
    notes = pd.DataFrame({"note_id": np.arange(n), "created_at": np.linspace(2, 5, n),
                          "tokens": 50, "actor": "a"})
    queries = pd.DataFrame({"query_id": np.arange(q), "t": [0.5, 0.7, 3.0, 3.5, 4.5, 6.0],
                            "actor": "a"})
    qrels = pd.DataFrame({"query_id": np.arange(q), "note_id": np.arange(q), "gain": 1.0})
    stream = make_stream(notes, queries, qrels, None,
                         rng.normal(size=(n, 8)).astype(np.float32),
                         rng.normal(size=(q, 8)).astype(np.float32), {"name": "early"})
    policy = _policy(retriever=build_component("retriever", retriever, "retriever"),
                     feedback={"kind": "default", "timing": timing})
    arms = [Arm("p", policy, 300)]
    settings = SimSettings(candidates=5, tick_days=1.0)
    want = _frames(reference.simulate(stream, arms, settings, seed_sequence(2)))
    got = _frames(simulate(stream, arms, settings, seed_sequence(2)))
    for key, frame in got.items():
        if frame is None or want[key] is None:
            assert frame is None and want[key] is None, key
        else:
            assert_frame_equal(frame, want[key], check_exact=True)
    assert got["queries"]["n_packed"].iloc[:2].tolist() == [0, 0]


def test_an_hnsw_graph_too_sparse_to_return_prefilter_notes_falls_back_to_exact():
    """M = 2, ef = 1: the search over every note (no filter) cannot return
    100 notes, and hnswlib raised ("Probably ef or M is too small") through
    the run; the filtered search already fell back to the exact top M."""
    pytest.importorskip("hnswlib")
    rng = np.random.default_rng(4)
    n, q = 600, 20
    # every note live at every query: the unfiltered search
    notes = pd.DataFrame({"note_id": np.arange(n), "created_at": np.linspace(-30, 0, n),
                          "tokens": 50, "actor": "a"})
    queries = pd.DataFrame({"query_id": np.arange(q), "t": np.linspace(1, 2, q), "actor": "a"})
    qrels = pd.DataFrame({"query_id": np.arange(q), "note_id": np.arange(q), "gain": 1.0})
    stream = make_stream(notes, queries, qrels, None,
                         rng.normal(size=(n, 16)).astype(np.float32),
                         rng.normal(size=(q, 16)).astype(np.float32), {"name": "sparse"})
    retriever = build_component("retriever", {"kind": "hnsw", "prefilter": 100, "ef": 1,
                                              "M": 2, "ef_construction": 2}, "retriever")
    arms = [Arm("p", _policy(retriever=retriever), 400)]
    settings = SimSettings(candidates=6, tick_days=2.0)
    want = _frames(reference.simulate(stream, arms, settings, seed_sequence(5)))
    got = _frames(simulate(stream, arms, settings, seed_sequence(5)))
    assert_frame_equal(got["queries"], want["queries"], check_exact=True)
    assert got["arms"]["prefilter_overlap"].notna().all()
