"""The ``"minmax"`` accelerator: Generative Agents' min-max-normalised sum
answered from the notes that can reach each query's top C.

Every test compares the engine's frames with the reference's
(:func:`memsim.engine.reference.simulate`, which scores every live note of
every query), bit for bit, and checks that the accelerator answered (or,
where it must not, did not). ``MIN_CELLS`` (where it pays) is lowered so
that it runs at test scale.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from pandas.testing import assert_frame_equal

from memsim.checks.testing import CheckError, check_component
from memsim.core.rng import seed_sequence
from memsim.data.stream import make_stream
from memsim.engine import ACCELERATORS, Arm, SimSettings, reference, simulate
from memsim.engine import minmax
from memsim.engine.state import PolicyState
from memsim.policies import REGISTRY, Decay, build_component
from memsim.policies.decay import GenerativeAgentsRecency
from memsim.policies.rank import WeightedSum, live_mask, minmax_sum

from .test_accelerators import _frames, _policy, _stream

WITHOUT = tuple(a for a in ACCELERATORS if a != "minmax")


@pytest.fixture(autouse=True)
def _at_test_scale(monkeypatch):
    monkeypatch.setattr(minmax, "MIN_CELLS", 0)


def _same_as_reference(stream, arms, settings, accelerators=ACCELERATORS):
    got = simulate(stream, arms, settings, seed_sequence(5), accelerators=accelerators)
    want = reference.simulate(stream, arms, settings, seed_sequence(5))
    for key, frame in _frames(got).items():
        try:
            assert_frame_equal(frame, _frames(want)[key], check_exact=True)
        except AssertionError as err:
            raise AssertionError(f"{key} differ from the reference\n{err}") from None
    return got


def _ga(decay, ranker=None, **slots):
    return _policy(ranker=ranker or "weighted-sum", decay=decay,
                   feedback={"kind": "default", "touch": "packed"}, **slots)


DECAYS = [
    {"kind": "generative-agents", "decay_factor": 0.995},
    {"kind": "generative-agents", "decay_factor": 0.9},
    {"kind": "half-life", "half_life_days": 3.0},  # the creation clock
    {"kind": "half-life-floor", "half_life_days": 0.5, "floor": 0.2},  # old notes at the floor
    {"kind": "per-day", "rate": 0.05, "clock": "last_access"},
    {"kind": "langchain", "decay_rate": 0.01},
    {"kind": "power-law", "stability_days": 1.0},
    {"kind": "exp-rate", "rate_per_day": 0.3, "clock": "last_access"},
]
RANKERS = [None, {"kind": "weighted-sum", "w_recency": 0.5, "w_importance": 2.0,
                  "w_relevance": 3.0},
           {"kind": "weighted-sum", "w_recency": 1.0, "w_importance": 0.0, "w_relevance": 1.0}]


@pytest.mark.parametrize("mode", ["per-query", "per-tick"])
@pytest.mark.parametrize("decay", DECAYS, ids=[f"{d['kind']}-{i}" for i, d in enumerate(DECAYS)])
def test_the_accelerator_gives_the_reference_frames(decay, mode):
    """Arms of each decay that falls with age alone, with Generative
    Agents' weights, the released code's and no importance, answered per
    query (all together) and per tick: the reference's frames, and each arm
    answered by the accelerator on every query but where a flat band makes
    it give the row up."""
    stream = _stream(0)
    arms = [Arm(f"w{i}", _ga(decay, ranker)) for i, ranker in enumerate(RANKERS)]
    settings = SimSettings(candidates=6, tick_days=2.0, feedback_mode=mode,
                           save_rankings="hidden", retention_period_days=3.0)
    got = _same_as_reference(stream, arms, settings)
    answered = [a.get("minmax", 0) for a in got.accelerated]
    assert all(a > 0 for a in answered), answered


DECAY_NAMES = sorted(REGISTRY["decay"])


@pytest.mark.parametrize("name", DECAY_NAMES)
def test_every_registered_decay_under_generative_agents_weights(name):
    """Each registered decay (a new one is covered without editing this
    file) under the ``weighted-sum`` ranker, per query and per tick: the
    reference's frames; answered by the accelerator where the decay
    declares a curve of the age alone on the creation or last-use clock
    (and that curve is not flat)."""
    if not REGISTRY["decay"][name].__module__.startswith("memsim."):
        pytest.skip("a plugin another test registered")
    decay = build_component("decay", name, "decay")
    stream = _stream(0)
    for mode in ("per-query", "per-tick"):
        settings = SimSettings(candidates=6, tick_days=2.0, feedback_mode=mode,
                               save_rankings="hidden", retention_period_days=3.0)
        got = _same_as_reference(stream, [Arm(name, _ga(decay))], settings)
        if got.accelerated[0].get("minmax", 0):
            assert decay.falls_with_age_alone() and decay.clock != "updated"


def test_it_scores_a_few_of_the_notes_and_shares_a_row_between_arms(monkeypatch):
    """On a 20,000-note store a Generative Agents arm scores a fifth or less of
    each query's notes, and arms that see the same notes compute a query
    row's terms once between them."""
    from memsim.data.workload import SyntheticWorkload

    stream = SyntheticWorkload(horizon_days=3, backfill_days=60, notes_per_day=320,
                               queries_per_day=10).generate(seed_sequence(3))
    rows = []
    make = minmax._Row
    monkeypatch.setattr(minmax, "_Row", lambda *a: rows.append(1) or make(*a))
    arms = [Arm(f"ga-{f}", _ga({"kind": "generative-agents", "decay_factor": f}))
            for f in (0.99, 0.995, 0.999)]
    settings = SimSettings(candidates=20, feedback_mode="per-query", save_rankings=True)
    got = _same_as_reference(stream, arms, settings)
    q = stream.n_queries
    assert len(rows) == q  # one row per query for the three arms
    for a, w in zip(got.accelerated, got.work):
        assert a["minmax"] == q
        assert w["cells"] < 0.2 * q * stream.n_notes, w["cells"] / q


def test_a_batch_of_rows_too_large_to_keep_shares_one_row_at_a_time(monkeypatch):
    """Per tick, a batch's rows are kept for its arms while they fit
    ``ROWS_BYTES``; beyond it one row at a time (each arm computes its rows
    again): the same frames, and each row made once per arm."""
    stream = _stream(0)
    arms = [Arm(f"ga-{f}", _ga({"kind": "generative-agents", "decay_factor": f}))
            for f in (0.99, 0.995)]
    settings = SimSettings(candidates=6, tick_days=2.0, save_rankings="hidden")
    made = []
    make = minmax._Row
    monkeypatch.setattr(minmax, "_Row", lambda *a: made.append(1) or make(*a))
    _same_as_reference(stream, arms, settings)
    kept = len(made)
    made.clear()
    monkeypatch.setattr(minmax, "ROWS_BYTES", 0)
    got = _same_as_reference(stream, arms, settings)
    assert len(made) == 2 * kept == 2 * stream.n_queries
    assert all(a["minmax"] == stream.n_queries for a in got.accelerated)


def test_arms_that_evict_or_prefilter_see_rows_of_their_own():
    """An arm whose retention evicted notes, or whose retriever cut each
    query to its nearest notes, sees other notes than the batch's valid
    ones: its rows are its own, and its frames the reference's."""
    stream = _stream(1)
    ga = {"kind": "generative-agents", "decay_factor": 0.99}
    arms = [Arm("capacity", _ga(ga, retention={"kind": "capacity", "max_notes": 700})),
            Arm("prefilter", _ga(ga, retriever={"kind": "cosine", "prefilter": 200})),
            Arm("plain", _ga(ga))]
    for mode in ("per-query", "per-tick"):
        settings = SimSettings(candidates=6, tick_days=2.0, feedback_mode=mode,
                               save_rankings="hidden", retention_period_days=1.0)
        got = _same_as_reference(stream, arms, settings)
        assert got.accelerated[0]["minmax"] > 0 and got.accelerated[2]["minmax"] > 0


def test_with_and_without_the_compiled_row_pass(monkeypatch):
    """The row's terms computed by the compiled pass and by numpy: the same
    frames (the reference's) either way."""
    pytest.importorskip("numba")
    stream = _stream(2)
    arms = [Arm("ga", _ga({"kind": "generative-agents", "decay_factor": 0.99}))]
    settings = SimSettings(candidates=6, tick_days=2.0, feedback_mode="per-query",
                           save_rankings="hidden")
    for flag in ("1", "0"):
        monkeypatch.setenv("MEMSIM_NUMBA", flag)
        assert _same_as_reference(stream, arms, settings).accelerated[0]["minmax"] > 0


def test_it_declines_what_it_cannot_prove():
    """A decay that reads more than the age (Ebbinghaus: the recalls), a
    flat curve (no band proves the extremes), a breadth factor on the
    score, a stickiness that moves the age, notes out of creation order, and
    a store below ``MIN_CELLS``: scored in full, the reference's frames."""
    stream = _stream(0)
    base = {"kind": "generative-agents", "decay_factor": 0.99}
    arms = [Arm("ebbinghaus", _ga({"kind": "ebbinghaus"})),
            Arm("flat", _ga({"kind": "none"})),
            Arm("breadth", _ga(base, breadth={"kind": "log-actors"})),
            Arm("sticky", _ga(base, stickiness={"kind": "log-recall"}))]
    settings = SimSettings(candidates=6, tick_days=2.0, feedback_mode="per-query",
                           save_rankings="hidden")
    got = _same_as_reference(stream, arms, settings)
    assert [a.get("minmax", 0) for a in got.accelerated] == [0, 0, 0, 0]
    # notes whose ids are not in creation order (the same notes in order: answered)
    rng = np.random.default_rng(0)
    created = rng.uniform(-30, 3, 300)
    for times, answered in ((created, False), (np.sort(created), True)):
        got = _same_as_reference(_small_stream(rng, times, 8), [Arm("ga", _ga(base))],
                                 settings)
        assert (got.accelerated[0].get("minmax", 0) > 0) == answered


def test_below_min_cells_it_scores_whole_rows(monkeypatch):
    monkeypatch.setattr(minmax, "MIN_CELLS", 1 << 17)
    stream = _stream(0)
    arms = [Arm("ga", _ga({"kind": "generative-agents", "decay_factor": 0.99}))]
    settings = SimSettings(candidates=6, tick_days=2.0, feedback_mode="per-query",
                           save_rankings=True)
    got = _same_as_reference(stream, arms, settings)
    assert got.accelerated[0].get("minmax", 0) == 0


def _small_stream(rng, created, q, importance=None, tied_vectors=False):
    """A stream of notes created at ``created`` (note_id in that order), q
    queries over three days, and a few organic uses before them."""
    n = len(created)
    notes = pd.DataFrame({"note_id": np.arange(n), "created_at": created, "actor": "a",
                          "tokens": rng.integers(5, 200, n),
                          "importance": rng.uniform(0, 5, n) if importance is None
                          else importance})
    emb = rng.normal(size=(n, 4)).astype(np.float32)
    if tied_vectors:
        emb[1::3] = emb[::3][:len(emb[1::3])]
    qt = np.sort(rng.uniform(0, 3, q))
    queries = pd.DataFrame({"query_id": np.arange(q), "t": qt, "actor": "a"})
    qrels = pd.DataFrame({"query_id": np.arange(q), "note_id": rng.choice(n, q),
                          "gain": 1.0})
    used = rng.choice(n, 10)
    accesses = pd.DataFrame({"t": np.maximum(created[used], -1.0) + 0.5,
                             "note_id": used, "actor": "a"})
    accesses = accesses[accesses["t"] < 0].sort_values("t")
    return make_stream(notes, queries, qrels, accesses, emb,
                       rng.normal(size=(q, 4)).astype(np.float32), {"name": "random"})


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(40, 400), q=st.integers(1, 12),
       ties=st.sampled_from(["none", "created", "similarity", "both"]),
       importance=st.sampled_from(["spread", "constant", "two"]),
       w=st.tuples(*[st.sampled_from([0.0, 0.5, 1.0, 3.0])] * 3),
       factor=st.floats(0.5, 0.9999), mode=st.sampled_from(["per-query", "per-tick"]),
       c=st.integers(1, 8))
def test_random_streams_give_the_reference_frames(seed, n, q, ties, importance, w, factor,
                                                  mode, c):
    """Random small stores with tied creation times, tied similarities,
    constant or two-valued importance, any weights and decay factor, and
    organic uses: the reference's frames."""
    rng = np.random.default_rng(seed)
    created = np.sort(rng.uniform(-30, 3, n))
    if ties in ("created", "both"):
        created = np.sort(np.round(created))  # many notes per day, the same time
    imp = {"spread": rng.uniform(0, 5, n), "constant": np.ones(n),
           "two": rng.choice([1.0, 7.0], n)}[importance]
    stream = _small_stream(rng, created, q, imp, ties in ("similarity", "both"))
    ranker = {"kind": "weighted-sum", "w_recency": w[0], "w_importance": w[1],
              "w_relevance": w[2]}
    arms = [Arm("a", _ga({"kind": "generative-agents", "decay_factor": factor}, ranker)),
            Arm("b", _ga({"kind": "half-life", "half_life_days": 2.0}, ranker))]
    settings = SimSettings(candidates=c, tick_days=1.0, feedback_mode=mode,
                           save_rankings="hidden")
    got = _same_as_reference(stream, arms, settings)
    event(f"answered: {all(a.get('minmax', 0) > 0 for a in got.accelerated)}")


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), steps=st.integers(1, 60))
def test_uses_by_time_finds_every_note_last_used_before_or_after_a_time(seed, steps):
    """``PolicyState.uses_by_time``: the notes last used at or after a time
    are the listed ones listed at or after it and those used since, those
    last used before it among the listed ones listed before it and those
    used since, whatever the order of the uses and however many."""
    rng = np.random.default_rng(seed)
    n = 50
    notes = SimpleNamespace(note_id=np.arange(n), tier0=np.zeros(n, dtype=np.int8),
                            created_at=np.sort(rng.uniform(0, 5, n)))
    state = PolicyState(notes, 1)
    fb = dataclasses.make_dataclass("Fb", [("cooldown_s", float, 0.0),
                                           ("promote_after", int, 0)])()
    for _ in range(steps):
        if rng.random() < 0.3:
            state.uses_by_time()  # a list made in between
        k = int(rng.integers(1, 6))
        state.touch(rng.integers(0, n, k), np.zeros(k, dtype=np.int64),
                    rng.uniform(0, 20, k), fb)
        rows, times, since = state.uses_by_time()
        assert np.all(np.diff(times) >= 0)
        for edge in rng.uniform(-1, 21, 5):
            after = set(rows[np.searchsorted(times, edge, side="left"):]) | set(since)
            before = set(rows[:np.searchsorted(times, edge, side="left")]) | set(since)
            last = state.last_access
            want_after = set(np.flatnonzero(last >= edge))
            want_before = set(np.flatnonzero(last < edge))
            assert want_after <= after and want_before <= before


@dataclass(frozen=True, kw_only=True)
class TieredDecay(Decay):
    """Half-life 3 days, 30 for long-term notes: declared, wrongly, as a
    curve of the age alone."""

    name: ClassVar[str] = "test-tiered-age-alone"
    reads_salience: ClassVar[bool] = False

    def recency(self, age, ctx):
        tier = np.asarray(ctx.tier)
        return np.exp2(-np.maximum(age, 0.0) / np.where(tier == 2, 30.0, 3.0))

    def falls_with_age_alone(self):
        return True

    def lower_bound(self):
        return 0.0

    def upper_bound(self):
        return 1.0


@dataclass(frozen=True, kw_only=True)
class SwappedWeights(WeightedSum):
    """Declares the weights in the wrong order."""

    name: ClassVar[str] = "test-swapped-minmax-weights"
    w_importance: float = 2.0

    def minmax_weights(self):
        return self.w_importance, self.w_recency, self.w_relevance


@dataclass(frozen=True, kw_only=True)
class ReviewDay(Decay):
    """A half-life of a day, but 0.99 for ages in [7, 7.05): rises with age
    in a window of an hour, declared as falling."""

    name: ClassVar[str] = "test-review-day"
    reads_salience: ClassVar[bool] = False

    def recency(self, age, ctx):
        a = np.maximum(np.asarray(age, dtype=np.float64), 0.0)
        return np.where((a >= 7.0) & (a < 7.05), 0.99, np.exp2(-a))

    def falls_with_age_alone(self):
        return True

    def lower_bound(self):
        return 0.0

    def upper_bound(self):
        return 1.0


@dataclass(frozen=True, kw_only=True)
class PoignantGA(GenerativeAgentsRecency):
    """Notes of importance 5 or more decay ten times slower: it reads a
    column, and inherits the declaration of a curve of the age alone."""

    name: ClassVar[str] = "test-poignant-ga"

    def recency(self, age, ctx):
        slow = np.asarray(ctx.importance, dtype=np.float64) >= 5.0
        hours = 24.0 * np.maximum(np.asarray(age, dtype=np.float64), 0.0)
        return np.exp(np.where(slow, 0.1, 1.0) * hours * np.log(self.decay_factor))


@dataclass(frozen=True, kw_only=True)
class ClippedWeightedSum(WeightedSum):
    """Clips the importance to 0..10 before the min-max sum: overrides
    combine and inherits the weights' declaration."""

    name: ClassVar[str] = "test-clipped-weighted-sum"

    def combine(self, rel, rec, ctx):
        imp = np.clip(np.asarray(ctx.importance, dtype=np.float64), 0.0, 10.0)
        return minmax_sum([(self.w_recency, rec), (self.w_importance, imp),
                           (self.w_relevance, rel)], live_mask(ctx))


@pytest.mark.parametrize("cls, check", [
    (TieredDecay, "falls_with_age_alone"),  # reads the tier
    (ReviewDay, "falls_with_age_alone"),  # rises with age within an hour
    (PoignantGA, "falls_with_age_alone"),  # overrides recency, inherits the declaration
    (SwappedWeights, "minmax_weights"),  # the weights in another order
    (ClippedWeightedSum, "minmax_weights"),  # overrides combine, inherits the declaration
])
def test_the_checker_refuses_false_declarations(cls, check):
    with pytest.raises(CheckError) as err:
        check_component(cls)
    assert err.value.check == check


def test_the_engine_takes_an_inherited_declaration_as_none():
    """A subclass that overrides the declared method and inherits the
    declaration is scored in full: the reference's frames."""
    rng = np.random.default_rng(0)
    created = np.sort(rng.uniform(-5, 0, 400))
    importance = rng.uniform(1, 10, 400)
    importance[[3, 100, 200]] = 1000.0  # what the clipping changes
    stream = _stream_of(created, np.array([0.5, 1.5]), importance)
    arms = [Arm("clipped", _policy(ranker=ClippedWeightedSum(),
                                   decay={"kind": "generative-agents", "decay_factor": 0.99})),
            Arm("poignant", _ga(PoignantGA(decay_factor=0.99)))]
    settings = SimSettings(candidates=3, tick_days=1.0, save_rankings=True)
    got = _same_as_reference(stream, arms, settings)
    assert [a.get("minmax", 0) for a in got.accelerated] == [0, 0]


def test_the_engine_check_replays_a_min_max_ranker_through_the_accelerator(monkeypatch):
    """``check_component(..., engine=True)`` of the min-max ranker and of a
    curve of the age alone replays them through the accelerator (beside a
    partner of the other kind), whatever ``MIN_CELLS``."""
    from memsim.checks import testing

    monkeypatch.setattr(minmax, "MIN_CELLS", 1 << 17)
    answered = []
    simulate_ = testing._simulate

    def spy(*args):
        got = simulate_(*args)
        answered.append(sum(a.get("minmax", 0) for a in got.accelerated))
        return got

    monkeypatch.setattr(testing, "_simulate", spy)
    for comp in (WeightedSum(), GenerativeAgentsRecency()):
        answered.clear()
        testing.check_engine_paths(comp)
        assert max(answered) > 0
    assert minmax.MIN_CELLS == 1 << 17  # restored


def _stream_of(created, qt, importance, emb=None, qemb=None, seed=0):
    """A stream of notes created at ``created`` (in that order) with the
    given importance and vectors, and queries at ``qt``."""
    rng = np.random.default_rng(seed)
    n, q = len(created), len(qt)
    notes = pd.DataFrame({"note_id": np.arange(n), "created_at": created, "actor": "a",
                          "tokens": rng.integers(5, 200, n), "importance": importance})
    emb = rng.normal(size=(n, 4)).astype(np.float32) if emb is None else emb
    qemb = rng.normal(size=(q, 4)).astype(np.float32) if qemb is None else qemb
    queries = pd.DataFrame({"query_id": np.arange(q), "t": qt, "actor": "a"})
    qrels = pd.DataFrame({"query_id": np.arange(q), "note_id": rng.choice(n, q), "gain": 1.0})
    accesses = pd.DataFrame({"t": np.zeros(0), "note_id": np.zeros(0, dtype=np.int64),
                             "actor": np.array([], dtype=object)})
    return make_stream(notes, queries, qrels, accesses, emb, qemb, {"name": "edges"})


def test_a_separable_recency_is_bounded_as_the_engine_computes_it():
    """A decay with an exponential form is scored in its separable form
    (``exp(-r (t - t0)) * exp(-r (t0 - origin))``), which differs from the
    curve by far more than SLACK where the note factor is subnormal: the
    bound on the notes outside the newest band is the separable value at
    its edge. Here the note just older than the band scores the top."""
    r, ulp = 300.0, 5e-324
    newest = 1 - (-np.log(10 * ulp)) / r  # a note factor of 10 ulp
    second = 1 - (-np.log(4.6 * ulp)) / r - 2e-4  # 4.7 ulp, rounded to 5
    created = np.array([-1.6] * 36 + [second - 1e-6, second, newest])
    importance = np.array([0.0] * 30 + [1.0] * 6 + [0.51, 0.0, 0.0])
    stream = _stream_of(created, np.array([0.1]), importance)
    arm = Arm("x", _ga({"kind": "exp-rate", "rate_per_day": r},
                       {"kind": "weighted-sum", "w_recency": 1.0, "w_importance": 1.0,
                        "w_relevance": 0.0}))
    settings = SimSettings(candidates=1, tick_days=1.0, save_rankings="hidden")
    got = _same_as_reference(stream, [arm], settings)
    assert got.accelerated[0]["minmax"] == 1


def test_weights_whose_sum_overflows_are_declined():
    """Weights of 1e308 (each finite, their sum not) on notes whose scores
    stay finite (the newest note, of the highest recency, is of middling
    importance; the most important is the oldest): declined, with the
    reference's frames (a bound of -inf let notes outside the prefilter in)."""
    rng = np.random.default_rng(0)
    live_times = np.r_[-10.0, np.linspace(-9, -2, 8), -0.1]
    created = np.r_[live_times, np.linspace(-8.5, -0.2, 30)]
    near = np.r_[np.ones(10, bool), np.zeros(30, bool)]
    order = np.argsort(created, kind="stable")
    created, near = created[order], near[order]
    importance = np.where(near, 0.0, 0.7)
    idx = np.flatnonzero(near)
    importance[idx[0]], importance[idx[1:4]], importance[idx[-1]] = 1.0, 0.9, 0.4
    emb = np.zeros((40, 4), np.float32)
    emb[near, 0] = 1.0
    emb[near, 1:] = rng.normal(scale=0.01, size=(10, 3))
    emb[~near, 1] = 1.0  # far from the query: outside its prefilter of 10
    emb[~near, 2:] = rng.normal(scale=0.01, size=(30, 2))
    stream = _stream_of(created, np.array([0.5]), importance, emb,
                        np.array([[1.0, 0, 0, 0]], np.float32))
    arm = Arm("huge", _ga({"kind": "generative-agents", "decay_factor": 0.99},
                          {"kind": "weighted-sum", "w_recency": 1e308, "w_importance": 1e308,
                           "w_relevance": 0.0}, retriever={"kind": "cosine", "prefilter": 10}))
    settings = SimSettings(candidates=1, tick_days=1.0, save_rankings="hidden")
    got = _same_as_reference(stream, [arm], settings)
    assert got.accelerated[0].get("minmax", 0) == 0


@pytest.mark.parametrize("case", ["ttl", "long-tick", "bulk-import"])
def test_rows_of_many_notes_not_live_or_tied_oldest_are_answered(case):
    """The bands count live notes: a retention that evicted the oldest
    notes, a long tick whose early queries cannot see the notes created
    later in it, and a bulk import (a third of the store created at one
    time, the oldest) are answered on every query, with the reference's
    frames."""
    rng = np.random.default_rng(1)
    ga = {"kind": "generative-agents", "decay_factor": 0.99}
    settings = SimSettings(candidates=6, tick_days=1.0, feedback_mode="per-query",
                           save_rankings="hidden", retention_period_days=1.0)
    if case == "ttl":
        stream, arm = _stream(1), Arm("ttl", _ga(ga, retention={"kind": "ttl", "ttl_days": 60}))
        settings = dataclasses.replace(settings, tick_days=2.0)
    elif case == "long-tick":
        created = np.sort(np.r_[rng.uniform(-20, 0, 600), rng.uniform(0, 7, 1400)])
        stream = _stream_of(created, np.sort(rng.uniform(0.1, 7, 20)), rng.uniform(0, 5, 2000))
        arm, settings = Arm("ga", _ga(ga)), dataclasses.replace(settings, tick_days=7.0)
    else:
        created = np.sort(np.r_[np.full(600, -30.0), rng.uniform(-5, 0, 1400)])
        stream = _stream_of(created, np.sort(rng.uniform(0.1, 3, 12)), rng.uniform(0, 5, 2000))
        arm = Arm("ga", _ga(ga))
    got = _same_as_reference(stream, [arm], settings)
    assert got.accelerated[0]["minmax"] == stream.n_queries
