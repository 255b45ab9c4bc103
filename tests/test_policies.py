"""Policy components: Hypothesis properties and small end-to-end runs.

Properties: recency stays within [floor, 1] and never rises with age;
stickiness never lowers a score; breadth >= 1 for w >= 0; a longterm note
never decays; the ai-memory sweep never evicts a pinned or a non-episodic note
(TTL expiry aside, which the engine applies to every note). Then every preset
runs through :func:`memsim.engine.simulate` on a tiny hand-built stream, and
the feedback rules are checked note by note (Feather 0.21.0 bumps only the k
returned notes, after scoring; v0.16 bumps the whole prefilter set, before).
Last, the presets' assumed marks: each names a real parameter of its policy,
is stated in the preset's text, and drops out when a table overrides it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memsim.runs.config import resolve_policy
from memsim.reporting.curves import crossover_age, curves_table, format_curves
from memsim.engine import Arm, SimSettings, simulate
from memsim.core.errors import ConfigError
from memsim.core.params import Interval, Options
from memsim.policies import (
    PRESETS,
    REGISTRY,
    ArrayContext,
    Policy,
    Retention,
    add_preset,
    assumptions,
    parameter_paths,
    preset_of,
)
from memsim.policies.breadth import LogActors
from memsim.policies.decay import (
    AiMemoryTime,
    Ebbinghaus,
    GenerativeAgentsRecency,
    HalfLife,
    HalfLifeFloor,
    LangChainRecency,
    NoDecay,
    PerDayRate,
    PerTier,
    PerTypeHalfLife,
    PowerLaw,
)
from memsim.policies.frameworks import ExpRate, LlamaIndexRecency
from memsim.policies.presets import HIVEMIND_CUT
from memsim.policies.rank import FeatherBlend, Product, WeightedSum, minmax_normalise
from memsim.policies.retention import AiMemorySweep, Capacity, MemoryBankForgetting
from memsim.policies.stickiness import AccessTerm, LogRecall, NoStickiness
from memsim.data.stream import make_stream
from memsim.data.workload import SyntheticWorkload

FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SWEEPS = settings(FAST, max_examples=30)

# --------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------

unit_open = st.floats(0.0, 0.999)
half_life = st.floats(0.01, 5000.0)
floor = st.floats(0.0, 0.999)
nonneg = st.floats(0.0, 10.0)

#: Strategies tuned to a decay's meaningful range; every other registered
#: decay gets one derived from its parameters' constraints
#: (:func:`constrained`), so a new decay is covered without editing this file.
TUNED_DECAYS = {
    NoDecay: st.builds(NoDecay),
    PerDayRate: st.builds(PerDayRate, rate=unit_open),
    HalfLife: st.builds(HalfLife, half_life_days=half_life),
    HalfLifeFloor: st.builds(HalfLifeFloor, half_life_days=half_life, floor=floor),
    PerTier: st.builds(PerTier, task_half_life_days=half_life, task_floor=floor,
                       scratch_half_life_days=half_life, scratch_floor=floor),
    AiMemoryTime: st.builds(AiMemoryTime, lambda_per_day=st.floats(0.0, 1.0),
                            task_half_life_days=st.sampled_from([0.0, 7.0, 365.0]),
                            scratch_half_life_days=st.sampled_from([0.0, 3.0]),
                            episodic_only=st.booleans()),
    GenerativeAgentsRecency: st.builds(GenerativeAgentsRecency, decay_factor=st.floats(0.5, 1.0)),
    LangChainRecency: st.builds(LangChainRecency, decay_rate=unit_open),
    Ebbinghaus: st.builds(Ebbinghaus, strength_days=st.floats(0.01, 100.0),
                          strength_per_recall=nonneg),
    PowerLaw: st.builds(PowerLaw, stability_days=st.floats(0.01, 100.0),
                        decay=st.floats(0.05, 5.0), recall_growth=nonneg),
    PerTypeHalfLife: st.builds(PerTypeHalfLife, episodic_half_life_days=half_life,
                               semantic_half_life_days=half_life,
                               procedural_half_life_days=half_life,
                               other_half_life_days=half_life, floor=floor),
    LlamaIndexRecency: st.builds(LlamaIndexRecency, time_decay=st.floats(0.001, 1.0),
                                 unstamped=st.sampled_from(["now", "created"])),
    ExpRate: st.builds(ExpRate, rate_per_day=st.floats(0.0, 5.0)),
}


def _inside(iv: Interval) -> st.SearchStrategy:
    """Values of an interval: its finite part, an open end moved in by 1e-3
    (1e-2 from a bound of 0), an unbounded side cut at 1e3 from the other."""
    lo = iv.low if iv.low is not None else (iv.high - 1e3 if iv.high is not None else -1e3)
    hi = iv.high if iv.high is not None else lo + 1e3
    if iv.low is not None and iv.closed in ("right", "neither"):
        lo = lo + (1e-2 if lo == 0 else 1e-3 * max(1.0, abs(lo)))
    if iv.high is not None and iv.closed in ("left", "neither"):
        hi = hi - 1e-3 * max(1.0, abs(hi))
    if iv.integer:
        return st.integers(math.ceil(lo), math.floor(hi))
    return st.floats(lo, hi)


def constrained(cls) -> st.SearchStrategy:
    """A component of ``cls`` with every constrained parameter drawn inside
    its constraint (the first interval or option set); ``clock`` keeps the
    class's own."""
    kwargs = {}
    for name, cons in cls._all_constraints().items():
        if name == "clock":
            continue
        alts = cons if isinstance(cons, (list, tuple)) else (cons,)
        ivs = [a for a in alts if isinstance(a, Interval)]
        opts = [v for a in alts if isinstance(a, Options) for v in a.values]
        kwargs[name] = _inside(ivs[0]) if ivs else st.sampled_from(opts)
    return st.builds(cls, **kwargs)


#: the decays registered when this module was imported (tests that register a
#: component of their own, such as the README's example, come later)
REGISTERED_DECAYS = [cls for _, cls in sorted(REGISTRY["decay"].items())]
DECAYS = st.one_of([TUNED_DECAYS[cls] if cls in TUNED_DECAYS else constrained(cls)
                    for cls in REGISTERED_DECAYS])
TIERS = st.sampled_from(["task", "scratch", "longterm"])
MEMORY_TYPES = st.sampled_from(["episodic", "semantic", "procedural", "other"])
AGES = st.lists(st.floats(0.0, 1e5), min_size=1, max_size=30)


def test_every_registered_decay_is_drawn():
    # the strategy is built from the registry: a decay registered later is in it
    drawn = set()

    @settings(max_examples=300, deadline=None, database=None)
    @given(decay=DECAYS)
    def collect(decay):
        drawn.add(type(decay))

    collect()
    assert drawn == set(REGISTERED_DECAYS)
    assert {cls.name for cls in REGISTERED_DECAYS} >= {"half-life", "per-type-half-life",
                                                       "llamaindex", "exp-rate"}


@FAST
@given(data=st.data())
def test_a_derived_strategy_draws_valid_components(data):
    # every registered decay, with the tuned strategies set aside
    cls = data.draw(st.sampled_from(sorted(REGISTRY["decay"].values(), key=lambda c: c.name)))
    comp = data.draw(constrained(cls))
    assert type(comp) is cls and comp.to_config()["kind"] == cls.name


def _note_ctx(ages, **note):
    """One note seen at several ages: Q = len(ages) sweep times, L = 1."""
    return ArrayContext(t=np.asarray(ages, dtype=float), created_at=[0.0],
                            updated_at=[0.0], **{k: [v] for k, v in note.items()})


# --------------------------------------------------------------------------
# Decay properties
# --------------------------------------------------------------------------


@FAST
@given(decay=DECAYS, ages=AGES, tier=TIERS, recalls=st.integers(0, 500),
       memory_type=MEMORY_TYPES)
# a tier half-life decays even when lambda is 0: the floor is not 1
@example(decay=AiMemoryTime(lambda_per_day=0.0, scratch_half_life_days=3.0), ages=[1.0],
         tier="scratch", recalls=0, memory_type="episodic")
def test_recency_within_floor_and_one_and_never_rises_with_age(decay, ages, tier, recalls,
                                                                memory_type):
    ages = np.sort(np.asarray(ages))
    ctx = _note_ctx(ages, tier=tier, recalls=recalls, memory_type=memory_type)
    rec = np.asarray(decay.recency(ctx.age(decay.clock), ctx))[:, 0]
    lo = decay.lower_bound()
    assert np.all(rec >= lo - 1e-12) and np.all(rec <= 1.0 + 1e-12)
    assert np.all(np.diff(rec) <= 1e-12), "recency rose with age"
    assert rec[0] <= 1.0
    if ages[0] == 0:
        assert rec[0] == pytest.approx(1.0)


@FAST
@given(decay=st.builds(HalfLifeFloor, half_life_days=half_life, floor=floor),
       age=st.floats(0.0, 1e7))
def test_the_floor_is_never_crossed(decay, age):
    assert decay.recency(np.array([[age]]), None)[0, 0] >= decay.floor


@FAST
@given(decay=st.builds(PerTier, task_half_life_days=half_life, task_floor=floor,
                       scratch_half_life_days=half_life, scratch_floor=floor),
       ages=AGES)
def test_a_longterm_note_never_decays(decay, ages):
    ctx = _note_ctx(ages, tier="longterm")
    np.testing.assert_array_equal(decay.recency(ctx.age_created, ctx), 1.0)


@FAST
@given(ages=AGES, salience=st.floats(0.0, 2.0), memory_type=MEMORY_TYPES)
def test_ai_memory_time_term_is_bounded_by_salience(ages, salience, memory_type):
    decay = AiMemoryTime()
    ctx = _note_ctx(ages, salience=salience, memory_type=memory_type)
    rec = decay.recency(ctx.age(decay.clock), ctx)
    assert np.all(rec <= salience + 1e-12) and np.all(rec >= 0)
    if memory_type != "episodic":  # other memory types never decay
        np.testing.assert_allclose(rec, salience)


def test_half_lives():
    assert PerDayRate().half_life() == pytest.approx(13.513, abs=1e-3)
    for d in (HalfLife(), HalfLifeFloor(), PerTier(), AiMemoryTime(), GenerativeAgentsRecency(),
              LangChainRecency(), Ebbinghaus(), PowerLaw()):
        # the multiplier has lost half of its way to the floor at the half-life
        h = d.half_life()
        ctx = _note_ctx([h])
        r = d.recency(ctx.age(d.clock), ctx)[0, 0]
        lo = getattr(d, "task_floor", d.lower_bound())  # a fresh note is in the task tier
        assert r == pytest.approx(lo + 0.5 * (1 - lo), rel=1e-9), type(d).__name__
    assert NoDecay().half_life() == math.inf
    assert GenerativeAgentsRecency().half_life() == pytest.approx(5.76, abs=0.01)
    assert LangChainRecency().half_life() == pytest.approx(2.87, abs=0.01)
    assert PowerLaw().recency(np.array([[3.0]]), None)[0, 0] == pytest.approx(0.9)


def test_clocks():
    # age from last update (ai-memory), last access (GA, LangChain, MemoryBank)
    ctx = ArrayContext(t=100.0, created_at=[0.0], updated_at=[90.0], last_access=[99.0])
    assert AiMemoryTime().recency(ctx.age("updated"), ctx)[0, 0] == pytest.approx(
        math.exp(-0.02 * 10))
    assert LangChainRecency().recency(ctx.age("last_access"), ctx)[0, 0] == pytest.approx(
        0.99 ** 24)
    never = ArrayContext(t=1.0, created_at=[0.0])  # never accessed: from creation
    assert GenerativeAgentsRecency().recency(never.age("last_access"), never)[0, 0] == \
        pytest.approx(0.995 ** 24)


# --------------------------------------------------------------------------
# Stickiness and breadth properties
# --------------------------------------------------------------------------

STICKINESS = st.one_of(
    st.builds(LogRecall, weight=nonneg),
    st.builds(AccessTerm, sigma=nonneg, mu_per_day=st.floats(0.0, 1.0)),
)


@FAST
@given(decay=DECAYS, stick=STICKINESS, w=nonneg,
       notes=st.lists(st.tuples(st.floats(0.0, 2000.0), st.integers(0, 300),
                                st.one_of(st.just(math.nan), st.floats(0.0, 500.0)),
                                st.integers(0, 20), TIERS, st.floats(0.0, 1.0)),
                      min_size=1, max_size=20))
def test_stickiness_never_lowers_a_score(decay, stick, w, notes):
    age, recalls, since, actors, tier, sim = map(np.array, zip(*notes))
    ctx = ArrayContext(t=0.0, created_at=-age, updated_at=-age,
                           last_access=np.where(np.isnan(since), np.nan,
                                                -np.minimum(since, age)),
                           recalls=recalls, distinct_actors=actors, tier=tier,
                           similarity=sim[None, :])
    for ranker in (Product(), FeatherBlend()):
        plain = Policy(decay=decay, stickiness=NoStickiness(), ranker=ranker).score(ctx)
        sticky = Policy(decay=decay, stickiness=stick, breadth=LogActors(weight=w),
                        ranker=ranker).score(ctx)
        assert np.all(np.asarray(sticky, dtype=np.float64)
                      >= np.asarray(plain, dtype=np.float64) - 1e-6)


@FAST
@given(w=st.floats(0.0, 100.0), actors=st.lists(st.integers(0, 10_000), min_size=1),
       apply=st.sampled_from(["access", "score"]))
def test_breadth_is_at_least_one(w, actors, apply):
    b = LogActors(weight=w, apply=apply)
    ctx = ArrayContext(created_at=np.zeros(len(actors)), distinct_actors=actors)
    for f in (b.on_access, b.on_score):
        assert np.all(np.asarray(f(ctx)) >= 1.0)
    factor = b.on_access(ctx) if apply == "access" else b.on_score(ctx)
    assert np.all(np.diff(np.asarray(factor)[np.argsort(actors)]) >= -1e-12)  # monotone


def test_breadth_on_score_multiplies_any_ranker():
    ctx = ArrayContext(t=0.0, created_at=[-5.0, -5.0], distinct_actors=[1, 10],
                           similarity=[[0.5, 0.5]])
    base = Policy(ranker=Product(), decay=HalfLife()).score(ctx)[0]
    wide = Policy(ranker=Product(), decay=HalfLife(),
                  breadth=LogActors(weight=1.0, apply="score")).score(ctx)[0]
    np.testing.assert_allclose(wide, base * [1.0, 1 + math.log(10)])
    # on "access" without an access term it changes nothing
    acc = Policy(ranker=Product(), decay=HalfLife(), breadth=LogActors(weight=1.0)).score(ctx)[0]
    np.testing.assert_allclose(acc, base)


# --------------------------------------------------------------------------
# Rankers
# --------------------------------------------------------------------------


@FAST
@given(q=st.integers(1, 4), n=st.integers(1, 12), data=st.data())
def test_weighted_sum_is_normalised_per_query(q, n, data):
    arr = st.lists(st.floats(-1, 1), min_size=q * n, max_size=q * n)
    rel = np.array(data.draw(arr)).reshape(q, n)
    rec = np.abs(np.array(data.draw(arr))).reshape(q, n)
    live = np.array(data.draw(st.lists(st.booleans(), min_size=q * n, max_size=q * n))
                    ).reshape(q, n)
    ctx = ArrayContext(t=np.zeros(q), created_at=np.zeros(n), live=live,
                           importance=np.linspace(0, 1, n))
    score = WeightedSum().combine(rel, rec, ctx)
    assert score.shape == (q, n)
    assert np.all(score[live] >= -1e-12) and np.all(score[live] <= 3 + 1e-12)
    norm = minmax_normalise(rel, live)
    for r in range(q):
        vals = norm[r][live[r]]
        if len(vals) and np.ptp(rel[r][live[r]]) > 0:
            assert vals.min() == 0.0 and vals.max() == pytest.approx(1.0)
        elif len(vals):
            assert np.all(vals == 0.5)


@FAST
@given(q=st.integers(1, 4), n=st.integers(0, 12), seed=st.integers(0, 10**6),
       special=st.booleans(), one_row=st.booleans())
def test_minmax_normalise_is_the_formula_row_by_row(q, n, seed, special, one_row):
    """Each row, over its live columns: ``(x - min) / (max - min)``, 0.5
    when they are all equal (or none varies: an infinite or NaN spread),
    0 where not live; the same floats as the formula written per row, with
    ties, infinities, NaN and a live mask shared by every row."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 3, (q, n)).astype(float) + rng.normal(size=(q, n)) * (seed % 2)
    if special and n:
        x[rng.random((q, n)) < 0.2] = rng.choice([np.nan, np.inf, -np.inf])
    live = rng.random((1 if one_row else q, n)) < rng.random()
    got = minmax_normalise(x, live)
    every = np.broadcast_to(live, (q, n))
    with np.errstate(invalid="ignore", divide="ignore"):
        for r in range(q):
            v = x[r][every[r]]
            lo, hi = (v.min(), v.max()) if len(v) else (np.inf, -np.inf)
            want = (x[r] - lo) / (hi - lo) if hi - lo > 0 else np.full(n, 0.5)
            want = np.where(every[r], want, 0.0)
            assert np.array_equal(got[r], want, equal_nan=True)


def test_generative_agents_all_equal_terms_score_half():
    ctx = ArrayContext(t=0.0, created_at=[0.0, 0.0, 0.0], similarity=[[0.3, 0.3, 0.3]])
    policy = resolve_policy({"preset": "generative-agents"}, "ga")
    np.testing.assert_allclose(policy.score(ctx), 1.5)


def test_random_and_oracle_rankers():
    ctx = ArrayContext(t=[0.0, 1.0], created_at=[0.0, 0.0, 0.0],
                           gains=[[0.0, 1.0, -0.5], [2.0, 0.0, 0.0]], rng=7)
    oracle = resolve_policy({"preset": "oracle"}, "o")
    np.testing.assert_array_equal(oracle.score(ctx), ctx.gains)
    rnd = resolve_policy({"preset": "random"}, "r")
    a = rnd.score(ArrayContext(t=[0.0], created_at=[0.0] * 5, rng=7))
    b = rnd.score(ArrayContext(t=[0.0], created_at=[0.0] * 5, rng=7))
    np.testing.assert_array_equal(a, b)
    assert np.all((a >= 0) & (a < 1))


# --------------------------------------------------------------------------
# Retention properties
# --------------------------------------------------------------------------

SWEEP_NOTES = st.lists(
    st.tuples(st.floats(0.0, 3000.0),                         # age since update
              st.integers(0, 100),                            # accesses
              st.one_of(st.just(math.nan), st.floats(0, 3000)),  # days since access
              st.floats(0.0, 2.0),                            # salience
              st.booleans(),                                  # pinned
              MEMORY_TYPES, TIERS, st.integers(0, 10)),
    min_size=1, max_size=30)


def _sweep_ctx(notes, seed=0):
    age, acc, since, sal, pinned, mtype, tier, actors = map(np.array, zip(*notes))
    recalls = np.where(np.isnan(since), 0, acc)
    return ArrayContext(t=0.0, created_at=-age - 1.0, updated_at=-age,
                            last_access=np.where(np.isnan(since), np.nan, -since),
                            recalls=recalls, salience=sal, pinned=pinned.astype(bool),
                            memory_type=mtype, tier=tier, distinct_actors=actors, rng=seed)


@FAST
@given(notes=SWEEP_NOTES, lam=st.floats(0.0, 5.0), thr=st.floats(0.0, 10.0), w=nonneg,
       hl=st.sampled_from([0.0, 1.0, 30.0]))
def test_ai_memory_sweep_never_evicts_pinned_or_non_episodic(notes, lam, thr, w, hl):
    ctx = _sweep_ctx(notes)
    sweep = AiMemorySweep(lambda_per_day=lam, cold_threshold=thr, breadth_weight=w,
                          task_half_life_days=hl)
    ev = sweep.evict(ctx)
    assert not np.any(ev & ctx.pinned)
    assert not np.any(ev & (ctx.memory_type != 0))
    # strict "<": a note exactly at the threshold stays
    score = sweep.retention_score(ctx)
    np.testing.assert_array_equal(ev, (score < thr) & ~ctx.pinned & (ctx.memory_type == 0))


@SWEEPS
@given(notes=SWEEP_NOTES, mode=st.sampled_from(["threshold", "probabilistic"]),
       seed=st.integers(0, 2**32 - 1))
def test_memorybank_never_forgets_pinned(notes, mode, seed):
    ctx = _sweep_ctx(notes, seed)
    ev = MemoryBankForgetting(mode=mode).evict(ctx)
    assert not np.any(ev & ctx.pinned)


@SWEEPS
@given(notes=SWEEP_NOTES, cap=st.integers(1, 40),
       by=st.sampled_from(["last-access", "recalls", "created", "ai-memory"]))
def test_capacity_keeps_the_cap(notes, cap, by):
    ctx = _sweep_ctx(notes)
    ev = Capacity(max_notes=cap, by=by).evict(ctx)
    kept = len(notes) - ev.sum()
    assert not np.any(ev & ctx.pinned)
    assert kept == max(min(cap, len(notes)), int(ctx.pinned.sum()))


def test_capacity_keeps_the_best():
    ctx = ArrayContext(t=0.0, created_at=[-9.0, -1.0, -5.0, -3.0])
    assert Capacity(max_notes=2, by="created").evict(ctx).tolist() == [True, False, True, False]
    ctx = ArrayContext(t=0.0, created_at=[-9.0] * 4, recalls=[3, 0, 7, 3])
    # ties at 3 recalls: the lower note_id is kept
    assert Capacity(max_notes=2, by="recalls").evict(ctx).tolist() == [False, True, False, True]


# --------------------------------------------------------------------------
# Curves
# --------------------------------------------------------------------------


def test_curves_table_columns_and_values():
    df = curves_table(["hivemind-2025-bug", "hivemind", "feather", "similarity-only",
                       "generative-agents"])
    assert list(df.columns[:3]) == ["preset", "decay", "ranker"]
    assert [c for c in df.columns if c.startswith("rec_")] == [
        "rec_0d", "rec_7d", "rec_30d", "rec_90d", "rec_180d", "rec_365d", "rec_730d"]
    row = df.set_index("preset")
    assert row.loc["hivemind-2025-bug", "rec_30d"] == pytest.approx(0.95 ** 30)
    assert row.loc["hivemind", "rec_365d"] == pytest.approx(0.5094011392461987)
    assert row.loc["feather", "rec_90d"] == pytest.approx(0.125)
    assert row.loc["similarity-only", "half_life_days"] == math.inf
    assert row.loc["similarity-only", "crossover_days"] == math.inf
    assert math.isnan(row.loc["generative-agents", "crossover_days"])
    # product ranker: old wins while 0.95**a > 0.7 / 0.8
    assert row.loc["hivemind-2025-bug", "crossover_days"] == pytest.approx(
        math.log(0.7 / 0.8) / math.log(0.95), rel=1e-6)
    text = format_curves(df)
    assert "hivemind-2025-bug" in text and "13.5" in text and "always" in text


def test_curves_show_a_rankers_own_recency_term():
    """Rankers that keep their recency term (not the decay slot) used to
    print 1.000 at every age with half-life 'none', beside a finite
    crossover: now their own term, from their published formulas."""
    df = curves_table(["redis-agent-memory", "openmemory", "memoripy"]).set_index("preset")
    for a in (7, 30, 90):
        # agent-memory-server: 0.6 * 0.5 ** (a / 7) + 0.4 * 0.5 ** (a / 30), never used
        assert df.loc["redis-agent-memory", f"rec_{a}d"] == pytest.approx(
            0.6 * 0.5 ** (a / 7) + 0.4 * 0.5 ** (a / 30), rel=1e-12)
        # OpenMemory: exp(-d / 7) * (1 - d / 60), clipped at 0
        assert df.loc["openmemory", f"rec_{a}d"] == pytest.approx(
            max(math.exp(-a / 7) * (1 - a / 60), 0.0), rel=1e-12, abs=1e-300)
    assert df.loc["memoripy", "rec_7d"] == pytest.approx(math.exp(-1e-4 * 7 * 86400), rel=1e-9)
    # half-life: where the term of a never-used note halves
    h = df.loc["redis-agent-memory", "half_life_days"]
    assert 0.6 * 0.5 ** (h / 7) + 0.4 * 0.5 ** (h / 30) == pytest.approx(0.5, abs=1e-9)
    assert df.loc["memoripy", "half_life_days"] == pytest.approx(
        math.log(2) / 1e-4 / 86400, rel=1e-8)
    text = format_curves(df.reset_index())
    assert "0.0802" in text  # memoripy's 1.93 hours, not 0.1


def test_a_cleanup_of_never_used_notes_has_no_eviction_age():
    """cognee's cleanup deletes every never-used note once anything was
    used: its eviction does not follow from the age (it read 'never')."""
    df = curves_table(["cognee-cleanup", "langgraph-store-ttl"]).set_index("preset")
    assert math.isnan(df.loc["cognee-cleanup", "evict_after_days"])
    assert df.loc["langgraph-store-ttl", "evict_after_days"] == pytest.approx(30.0, rel=1e-8)
    lines = format_curves(df.reset_index()).splitlines()
    assert lines[2].split()[-1] == "n/a" and lines[3].split()[-1] == "30.0"


def test_a_half_life_of_minutes_is_not_printed_as_zero():
    df = curves_table(["llamaindex-time-weighted"])
    assert format_curves(df).splitlines()[2].split()[-3] == "0.00627"


def test_a_huge_half_life_prints_as_a_number_not_hundreds_of_digits():
    df = curves_table(["feather", "hivemind"],
                      overrides={"policies.hivemind.decay.task_half_life_days": 1e308})
    lines = format_curves(df).splitlines()
    assert max(len(line) for line in lines[:4]) < 120
    assert lines[3].split()[-3] == "1e+308" and lines[2].split()[-3] == "30.0"


def test_curves_overrides_and_errors():
    df = curves_table(["feather"], overrides={"decay.half_life_days": 60.0})
    assert df.loc[0, "half_life_days"] == 60.0
    df = curves_table(["feather", "hivemind"],
                      overrides={"policies.feather.decay.half_life_days": 60.0})
    assert df.loc[0, "half_life_days"] == 60.0 and df.loc[1, "half_life_days"] == 180.0
    with pytest.raises(ConfigError):
        curves_table(["no-such-preset"])
    with pytest.raises(ConfigError):
        curves_table(["feather"], overrides={"decay.no_such_param": 1})
    with pytest.raises(ConfigError):
        curves_table(["feather"], delta=0.0)
    # a floor above the needed multiplier: the old note always wins
    assert crossover_age(resolve_policy(
        {"preset": "hivemind", "decay": {"task_floor": 0.9}}, "h")) == math.inf


def test_curves_policy_keys_apply_or_are_refused(capsys):
    """Every policies.NAME key applies to preset NAME as in an experiment
    file's [policies.NAME] (a parameter, a whole slot, the whole table), or
    is refused naming the key and the presets given: none is dropped."""
    from memsim.cli import main as cli_main

    df = curves_table(["feather", "hivemind"], overrides={"policies.feather.decay": "none"})
    assert df.loc[0, "half_life_days"] == math.inf and df.loc[1, "half_life_days"] == 180.0
    df = curves_table(["feather"], overrides={"policies.feather.decay": "half-life",
                                              "policies.feather.decay.half_life_days": 7.0})
    assert df.loc[0, "half_life_days"] == 7.0
    df = curves_table(["feather"], overrides={"policies.feather": {"preset": "hivemind"}})
    assert df.loc[0, "half_life_days"] == 180.0
    # a quoted part names the same preset (it used to be no policy '"feather"')
    df = curves_table(["feather", "hivemind"], overrides={'policies."feather".decay': "none"})
    assert df.loc[0, "half_life_days"] == math.inf and df.loc[1, "half_life_days"] == 180.0
    with pytest.raises(ConfigError, match="feather.decay.kind: unknown decay 'nope'"):
        curves_table(["feather"], overrides={"policies.feather.decay": "nope"})
    for key, value, said in [
            ("policies.feathr.decay.half_life_days", 90,
             r"--set policies.feathr.decay.half_life_days: no policy 'feathr' "
             r"\(did you mean 'feather'\?\) \(policies: feather, hivemind\)"),
            ("policies.oracle.decay", "none", r"no policy 'oracle' \(policies: feather, hivemind"),
            ("policies.feather", 3, r"--set policies.feather: expected a table .* got 3"),
            ("policies", 3, r"--set policies: give policies.PRESET.KEY .*feather, hivemind")]:
        with pytest.raises(ConfigError, match=said):
            curves_table(["feather", "hivemind"], overrides={key: value})
    capsys.readouterr()
    assert cli_main(["curves", "feather", "--set",
                     "policies.feathr.decay.half_life_days=90"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no policy 'feathr'" in err[0], err
    assert crossover_age(resolve_policy({"preset": "recency-only"}, "r")) == 0.0


# --------------------------------------------------------------------------
# End to end through the engine
# --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Probe(Retention):
    """A test-only retention that evicts nothing and records, at each sweep,
    the per-note state the policy sees (not registered)."""

    name: ClassVar[str] = "probe"
    log: list = field(default_factory=list, compare=False)

    def evict(self, ctx):
        self.log.append({"t": float(ctx.t[0]), "idx": ctx.idx.copy(),
                         "recalls": np.array(ctx.recalls), "tier": np.array(ctx.tier),
                         "since": np.array(ctx.since_access[0]),
                         "actors": np.array(ctx.distinct_actors)})
        return np.zeros(len(ctx.idx), dtype=bool)


def _stream(n_notes=40, query_times=(0.0, 1.0), dim=4, seed=0, actors=None, **note_cols):
    rng = np.random.default_rng(seed)
    notes = pd.DataFrame({"note_id": np.arange(n_notes),
                          "created_at": -rng.uniform(1, 100, n_notes),
                          "tokens": rng.integers(10, 120, n_notes),
                          "actor": "a0", **note_cols})
    m = len(query_times)
    queries = pd.DataFrame({"query_id": np.arange(m), "t": list(query_times),
                            "actor": actors if actors is not None else ["a0"] * m})
    qrels = pd.DataFrame({"query_id": np.arange(m), "note_id": rng.choice(n_notes, m),
                          "gain": 1.0}).drop_duplicates(["query_id", "note_id"])
    qemb = np.tile(rng.normal(size=(1, dim)), (m, 1)).astype(np.float32)
    nemb = (qemb[:1] + rng.normal(scale=0.8, size=(n_notes, dim))).astype(np.float32)
    return make_stream(notes, queries, qrels, note_embeddings=nemb, query_embeddings=qemb)


def _run(stream, policy, **settings):
    res = simulate(stream, [Arm("p", policy)], SimSettings(**settings),
                   np.random.SeedSequence(0))
    return res


def _with_probe(preset, **kw):
    probe = Probe()
    policy = dataclasses.replace(resolve_policy({"preset": preset, **kw}, preset), retention=probe)
    return policy, probe


# presets that replay a production log run on traces (tests/test_trace.py)
@pytest.mark.parametrize("preset", sorted(
    n for n in PRESETS if not resolve_policy({"preset": n}, n).ranker.needs_logged))
def test_every_preset_runs_end_to_end(preset):
    stream = _stream(n_notes=60, query_times=np.linspace(0, 20, 12), seed=3,
                     pinned=np.arange(60) % 7 == 0,
                     memory_type=np.where(np.arange(60) % 5 == 0, "semantic", "episodic"))
    res = simulate(stream, [Arm(preset, resolve_policy({"preset": preset}, preset)),
                            Arm(preset + "-500", resolve_policy({"preset": preset}, preset), 500)],
                   SimSettings(save_rankings=True), np.random.SeedSequence(1))
    q = res.queries
    assert len(q) == 2 * 12
    assert np.all(q["tokens_used"] <= q["budget"])
    assert q["utility"].notna().all()
    assert np.all((q["recall"].dropna() >= 0) & (q["recall"].dropna() <= 1))
    again = simulate(stream, [Arm(preset, resolve_policy({"preset": preset}, preset))],
                     SimSettings(save_rankings=True), np.random.SeedSequence(1))
    pd.testing.assert_frame_equal(
        q[q["policy"] == preset].reset_index(drop=True), again.queries)
    if preset == "oracle":
        ok = q["utility_ratio"].notna()
        np.testing.assert_allclose(q.loc[ok, "utility_ratio"], 1.0)


def _nearest_sq_l2(stream, qi, m):
    q = stream.query_embeddings[qi].astype(np.float64)
    d = ((stream.note_embeddings.astype(np.float64) - q) ** 2).sum(axis=1)
    return set(np.argsort(d, kind="stable")[:m].tolist())


def test_feather_bumps_only_the_k_returned_after_scoring():
    stream = _stream(n_notes=40, query_times=(0.0, 1.0))
    policy, probe = _with_probe("feather")
    res = _run(stream, policy, save_rankings=True)
    before, after = probe.log[0], probe.log[1]
    assert before["recalls"].sum() == 0
    bumped = set(after["idx"][after["recalls"] > 0].tolist())
    r0 = res.rankings[res.rankings["query_id"] == 0]
    assert len(r0) == 10 and set(r0["note_id"]) == bumped
    assert np.all(after["recalls"][after["recalls"] > 0] == 1)
    assert bumped <= _nearest_sq_l2(stream, 0, 30)
    # scored with the counts from before the search: the Feather formula at 0 recalls
    notes = stream.notes.set_index("note_id")
    q = stream.query_embeddings[0].astype(np.float32)
    for nid, score in zip(r0["note_id"], r0["score"]):
        d = np.float32(((stream.note_embeddings[nid] - q) ** 2).sum())
        sim = np.float32(1) / (np.float32(1) + d)
        rec = np.float32(0.5 ** (-notes.loc[nid, "created_at"] / 30.0))
        expected = np.float32(0.7) * sim + np.float32(0.3) * rec
        assert score == pytest.approx(float(expected), rel=1e-5)


def test_feather_v016_bumps_the_prefilter_set_before_scoring():
    stream = _stream(n_notes=40, query_times=(0.0, 1.0))
    policy, probe = _with_probe("feather-v0.16")
    res = _run(stream, policy, save_rankings=True)
    after = probe.log[1]
    bumped = set(after["idx"][after["recalls"] > 0].tolist())
    assert bumped == _nearest_sq_l2(stream, 0, 30)
    # the first query was already scored with one recall each
    r0 = res.rankings[res.rankings["query_id"] == 0]
    notes = stream.notes.set_index("note_id")
    nid, score = int(r0["note_id"].iloc[0]), float(r0["score"].iloc[0])
    q = stream.query_embeddings[0]
    d = np.float32(((stream.note_embeddings[nid] - q) ** 2).sum())
    sim = 1 / (1 + float(d))
    age = -notes.loc[nid, "created_at"]
    rec = 0.5 ** (age / (1 + math.log(2)) / 30)
    assert score == pytest.approx(0.7 * sim + 0.3 * rec, rel=1e-5)


def test_langchain_retrieval_resets_last_access_of_the_k_returned():
    stream = _stream(n_notes=30, query_times=(0.5, 1.0))
    policy, probe = _with_probe("langchain-time-weighted")
    res = _run(stream, policy, save_rankings=True)
    after = probe.log[1]
    touched = ~np.isnan(after["since"])
    assert touched.sum() == 4
    np.testing.assert_allclose(after["since"][touched], 0.5)
    r0 = res.rankings[res.rankings["query_id"] == 0]
    assert set(r0["note_id"]) == set(after["idx"][touched].tolist())


def test_a_ranker_that_reads_no_similarity_spares_the_product(monkeypatch):
    """LangChain's ranker computes its relevance itself (``uses_similarity =
    False``): a replay of it alone multiplies the queries by the notes once
    per batch, not a second time for the retriever's similarity that it
    would not read: the cosine's scaled product for its ``"cosine"``
    relevance (shared with the arms whose retriever is the cosine), the
    plain dot products for ``"l2"``."""
    from memsim.engine.batch import Batch

    products = []
    blocks = Batch._blocks

    def counted(self, scale, visit=None):
        products.append(scale is None)  # True: the plain dot products
        return blocks(self, scale, visit)

    monkeypatch.setattr(Batch, "_blocks", counted)
    stream = _stream(n_notes=60, query_times=(0.5, 1.0, 2.5))
    lc = resolve_policy({"preset": "langchain-time-weighted"}, "lc")
    assert not lc.ranker.uses_similarity
    for relevance, plain in (("cosine", False), ("l2", True)):
        products.clear()
        _run(stream, dataclasses.replace(lc, ranker=dataclasses.replace(
            lc.ranker, relevance=relevance)), feedback_mode="per-tick", tick_days=1.0)
        assert products == [plain] * 3, relevance  # one product per tick (3)
    products.clear()
    _run(stream, resolve_policy({"preset": "hivemind"}, "h"), feedback_mode="per-tick",
         tick_days=1.0)
    assert products == [False] * 3  # the retriever's similarity


def test_hivemind_promotes_after_five_uses_and_then_never_decays():
    stream = _stream(n_notes=5, query_times=tuple(float(i) for i in range(7)))
    policy, probe = _with_probe("hivemind")
    _run(stream, policy)
    recalls = probe.log[-1]["recalls"]
    tier = probe.log[-1]["tier"]
    assert np.all((recalls >= 5) == (tier == 2))
    assert (tier == 2).any()


def test_ai_memory_cooldown_counts_one_access_per_actor_per_minute():
    minute = 1 / 1440
    times = (0.0, 0.2 * minute, 0.5 * minute, 2 * minute, 1.0)
    stream = _stream(n_notes=3, query_times=times, actors=["a0", "a0", "a1", "a0", "a0"])
    policy, probe = _with_probe("ai-memory")
    _run(stream, policy, feedback_mode="per-query")
    sweep = [entry for entry in probe.log if entry["t"] == 1.0][0]
    # every note is packed by each query: a0 at 0 (bump), 0.2 min (cooled),
    # a1 at 0.5 min (bump), a0 at 2 min (bump)
    assert np.all(sweep["recalls"] == 3)
    assert np.all(sweep["actors"] == 2)


def test_ai_memory_sweep_spares_pinned_and_semantic_notes_but_ttl_removes_them():
    n = 6
    stream = _stream(n_notes=n, query_times=(200.0, 201.0),
                     pinned=[True, False, False, True, False, False],
                     memory_type=["episodic", "episodic", "semantic", "episodic",
                                  "procedural", "episodic"],
                     expires_at=[np.nan, np.nan, np.nan, 150.0, np.nan, np.nan])
    policy = resolve_policy({"preset": "ai-memory"}, "ai")
    res = _run(stream, policy)
    # notes 1 and 5 (unpinned episodic, ~100-300 days, never used) are evicted;
    # 0 (pinned), 2 (semantic), 4 (procedural) are not; 3 (pinned) expired by TTL
    # is gone without being evicted
    assert int(res.arms.loc[0, "evicted_notes"]) == 2
    assert res.store["store_notes"].iloc[-1] == 3


def test_memorybank_forgets_unrecalled_notes():
    stream = _stream(n_notes=10, query_times=(0.0, 10.0))
    res = _run(stream, resolve_policy({"preset": "memorybank"}, "mb"))
    assert int(res.arms.loc[0, "evicted_notes"]) == 10  # all > 3 days untouched at t = 0


# --------------------------------------------------------------------------
# Assumed marks: what memsim supplied where a source is silent
# --------------------------------------------------------------------------


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_assumed_mark_names_a_parameter_of_the_resolved_policy(preset):
    marks = assumptions(preset)
    paths = parameter_paths(resolve_policy({"preset": preset}, preset).to_config())
    paths.setdefault("candidates", None)
    assert set(marks) <= set(paths), set(marks) - set(paths)
    for key, reason in marks.items():
        assert isinstance(reason, str) and reason.strip() and "\n" not in reason
        assert f"``{key}``" in PRESETS[preset].doc  # stated in the preset's text


def test_hivemind_relevance_cut_is_on_and_marked_assumed():
    policy = resolve_policy({"preset": "hivemind"}, "h")
    assert policy.packer.min_relative_score == HIVEMIND_CUT > 0
    marks = assumptions("hivemind")
    assert "packer.min_relative_score" in marks
    # the private parts named by the source: the swap rule and the access weight
    assert {"packer.max_swaps", "stickiness.kind"} <= set(marks)
    # published facts are not marked
    assert not {"decay.task_half_life_days", "decay.task_floor",
                "feedback.promote_after"} & set(marks)
    assert "packer.min_relative_score" not in assumptions("hivemind-2025-bug")


def test_the_cut_follows_from_the_similarity_law():
    # HIVEMIND_CUT = (mu - sd) / (mu + sd) of the asked slot's cosine, rounded
    m = SyntheticWorkload().similarity_model()
    mu, sd = m.on_slot_mean, m.on_slot_sd
    assert HIVEMIND_CUT == pytest.approx((mu - sd) / (mu + sd), abs=0.01)
    assert m.same_topic_mean / mu < HIVEMIND_CUT


def test_an_override_is_the_tables_choice_not_an_assumption():
    marks = assumptions({"preset": "hivemind", "packer": {"min_relative_score": 0.5}})
    assert "packer.min_relative_score" not in marks and "packer.max_swaps" in marks
    # the same value again keeps the mark
    assert "packer.min_relative_score" in assumptions(
        {"preset": "hivemind", "packer": {"min_relative_score": HIVEMIND_CUT}})
    # another component kind drops every mark of its slot
    marks = assumptions({"preset": "hivemind", "packer": "exact"})
    assert not [k for k in marks if k.startswith("packer.")]
    assert "retriever.kind" in marks


def test_a_run_folders_resolved_table_finds_its_preset():
    for name in sorted(PRESETS):
        table = resolve_policy({"preset": name}, name).to_config()
        table.setdefault("candidates", 50)  # as the experiment writes it
        assert preset_of(table) == name
        assert assumptions(table) == assumptions(name)
    tuned = resolve_policy({"preset": "ai-memory-breadth",
                            "retention": {"breadth_weight": 0.7}}, "t")
    assert preset_of(tuned) in {"ai-memory", "ai-memory-breadth"}
    assert "retention.breadth_weight" not in assumptions(tuned)
    custom = {"ranker": "product", "decay": {"kind": "half-life-floor"}, "packer": "greedy"}
    assert preset_of(custom) is None and assumptions(custom) == {}


def test_add_preset_refuses_a_mark_on_no_parameter():
    with pytest.raises(RuntimeError, match="not parameters of its policy"):
        add_preset("test-bad-mark", "x.", assumed={"packer.no_such": "why"},
                   packer="greedy")
    assert "test-bad-mark" not in PRESETS
    with pytest.raises(ConfigError, match="unknown preset"):
        assumptions("no-such-preset")


@given(st.floats(0.5, 900.0), st.floats(0.0, 0.95), st.floats(0.5, 900.0), st.floats(0.0, 0.95))
def test_per_tier_form_of_any_code_is_the_same_from_its_lookup(task_hl, task_fl, scratch_hl,
                                                               scratch_fl):
    """The per-tier form of the contexts' int8 codes equals that of the
    same codes as int64, and every code gets its tier's floor and rate:
    unknown ones the task tier's."""
    from memsim.policies.decay import PerTier

    decay = PerTier(task_half_life_days=task_hl, task_floor=task_fl,
                    scratch_half_life_days=scratch_hl, scratch_floor=scratch_fl)
    codes = np.arange(-128, 128)
    by_table = decay.exponential_form(ArrayContext(created_at=np.zeros(256),
                                                   tier=codes.astype(np.int8)))
    wide = type("Wide", (), {"tier": codes.astype(np.int64)})()  # codes as int64
    by_code = decay.exponential_form(wide)
    for a, b in zip(by_table, by_code):
        np.testing.assert_array_equal(a, b)
    assert by_code[0][codes == 2].tolist() == [1.0] and by_code[1][codes == 2].tolist() == [0.0]
    # every code the values the docstring gives: scratch, longterm, else task
    scratch, other = codes == 1, (codes != 1) & (codes != 2)
    assert (by_code[0][scratch] == scratch_fl).all() and (by_code[0][other] == task_fl).all()
    assert (by_code[1][scratch] == math.log(2.0) / scratch_hl).all()
    assert (by_code[1][other] == math.log(2.0) / task_hl).all()


@pytest.mark.parametrize("kind, params", [
    ("exp-rate", {"rate_per_day": 0.0}), ("per-day", {"rate": 0.0}),
    ("langchain", {"decay_rate": 0.0}), ("generative-agents", {"decay_factor": 1.0}),
    ("ai-memory", {"lambda_per_day": 0.0})])
def test_a_decay_set_to_none_is_one_at_every_age(kind, params):
    """exp(age * log(1)) was NaN at an infinite age (and, times 24 hours,
    at 1e308 days) though the family reports lower_bound() = 1."""
    from memsim.policies import ArrayContext
    from memsim.policies.base import REGISTRY
    ctx = ArrayContext(t=0.0, created_at=np.array([-np.inf, -1e308, -3.0, 0.0]))
    c = REGISTRY["decay"][kind](**params)
    assert c.lower_bound() == 1.0
    assert np.array_equal(c.recency(ctx.age(c.clock), ctx), np.ones((1, 4)))
