"""Contract suite over the whole policy registry (Gymnasium's checker pattern).

Every registered component goes through :func:`memsim.checks.testing.check_component`
(frozen validated construction, the uniform parameter messages, config round
trip, pickling, shapes, dtypes, bounds, no mutation, determinism) on the
checker's own random contexts *and* on contexts built by the real engine
classes; every preset through :func:`memsim.checks.testing.check_policy`. A user
component that breaks the contract is caught. ``experiments/presets.toml``
runs every preset.
"""

from __future__ import annotations

import functools
import pickle  # noqa: TID251 - worker processes (--jobs) receive policies pickled
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest

from memsim.runs.config import resolve_policy
from memsim.engine import Batch, BatchContext, NoteArrays, PolicyState
from memsim.data.workload import CLASS_NAMES, SyntheticWorkload
from memsim.core.errors import ConfigError, ParameterError
from memsim.evaluation.metrics import RelevanceIndex
from memsim.core.params import Interval
from memsim.policies import (
    PRESETS,
    REGISTRY,
    Decay,
    Orderer,
    Packer,
    Policy,
    ScoringContext,
    build_component,
)
from memsim.policies.base import MEMORY_TYPE_CODES, TIER_CODES
from memsim.data.stream import make_stream
from memsim.checks.testing import CheckError, check_component, check_policy, random_context

ROOT = Path(__file__).resolve().parents[1]

COMPONENTS = [(slot, name, cls) for slot, table in REGISTRY.items()
              for name, cls in sorted(table.items())]
IDS = [f"{slot}:{name}" for slot, name, _ in COMPONENTS]
# the slots of the policy catalogue (packers, orderers and the feedback have
# their own suites; they still go through the registry-wide checks here)
SCORING_SLOTS = ("decay", "stickiness", "breadth", "ranker", "retention")


def _numeric_params():
    out = []
    for slot, name, cls in COMPONENTS:
        for param, cons in cls._all_constraints().items():
            alts = cons if isinstance(cons, (list, tuple)) else (cons,)
            ivs = [c for c in alts if isinstance(c, Interval)]
            if ivs:
                out.append((slot, name, cls, param, ivs[0]))
    return out


NUMERIC = _numeric_params()


# --------------------------------------------------------------------------
# A small random context built with the engine's own classes
# --------------------------------------------------------------------------

N_NOTES, N_QUERIES, DIM = 60, 5, 6


@functools.lru_cache(maxsize=None)
def _stream(seed: int):
    rng = np.random.default_rng(seed)
    n = N_NOTES
    created = rng.uniform(-400, 5, n)
    notes = pd.DataFrame({
        "note_id": np.arange(n),
        "created_at": created,
        "updated_at": created + rng.uniform(0, 3, n),
        "tokens": rng.integers(5, 500, n),
        "actor": rng.choice(["a", "b", "c", "d"], n),
        "tier": rng.choice(["task", "scratch", "longterm"], n),
        "importance": rng.uniform(0, 2, n),
        "salience": rng.uniform(0.25, 2, n),
        "memory_type": rng.choice(["episodic", "semantic", "procedural"], n, p=[.6, .2, .2]),
        "pinned": rng.random(n) < 0.2,
        # planted classes and the default workload's config: the bayes ranker reads them
        "note_class": rng.choice(list(CLASS_NAMES), n),
    })
    queries = pd.DataFrame({"query_id": np.arange(N_QUERIES),
                            "t": np.sort(rng.uniform(0, 10, N_QUERIES)),
                            "actor": rng.choice(["a", "b"], N_QUERIES)})
    qrels = pd.DataFrame({"query_id": np.repeat(np.arange(N_QUERIES), 3),
                          "note_id": rng.choice(n, 3 * N_QUERIES),
                          "gain": rng.choice([1.0, 0.5, -0.5], 3 * N_QUERIES)}
                         ).drop_duplicates(["query_id", "note_id"])
    return make_stream(notes, queries, qrels,
                       note_embeddings=rng.normal(size=(n, DIM)).astype(np.float32),
                       query_embeddings=rng.normal(size=(N_QUERIES, DIM)).astype(np.float32),
                       meta={"source": "memsim.data.workload",
                             "config": SyntheticWorkload().to_config()})


@functools.lru_cache(maxsize=None)
def _static(seed: int):
    """The stream, its note arrays and relevance index (read-only, cached)."""
    stream = _stream(seed)
    notes = NoteArrays.from_stream(stream, {a: i for i, a in enumerate("abcd")})
    return stream, notes, RelevanceIndex(stream, notes.created_at)


def make_context(seed: int = 0, sweep: bool = False) -> BatchContext:
    """The engine's context: random notes, random per-policy state (uses,
    last access, actors, tiers, a few evictions), 5 queries (1 for a sweep)."""
    stream, notes, relevance = _static(seed)
    rng = np.random.default_rng(seed + 1)
    state = PolicyState(notes, 4)
    used = rng.random(N_NOTES) < 0.6
    state.recalls[used] = rng.integers(1, 40, used.sum())
    state.last_access[used] = notes.created_at[used] + rng.uniform(0, 5, used.sum())
    for row in np.flatnonzero(used):
        for actor in rng.choice(4, rng.integers(1, 5), replace=False):
            state.actor_bits[row, 0] |= np.uint64(1) << np.uint64(actor)
    state.tier[rng.random(N_NOTES) < 0.2] = TIER_CODES["longterm"]
    state.evicted[rng.random(N_NOTES) < 0.05] = True
    rows = np.arange(1) if sweep else np.arange(N_QUERIES)
    qt = stream.queries["t"].to_numpy()[rows]
    qemb = stream.query_embeddings[rows]
    batch = Batch(qrows=rows, t=qt, actors=np.zeros(len(rows), dtype=np.int64), notes=notes,
                  qemb=qemb, qnorm2=np.einsum("ij,ij->i", qemb, qemb, dtype=np.float64),
                  relevance=relevance)
    return BatchContext(batch, state, np.random.default_rng(seed + 2))


def test_both_contexts_satisfy_the_protocol():
    assert isinstance(random_context(0), ScoringContext)
    assert isinstance(make_context(0), ScoringContext)


# --------------------------------------------------------------------------
# Every registered component, through the checker
# --------------------------------------------------------------------------


@pytest.mark.parametrize("slot, name, cls", COMPONENTS, ids=IDS)
def test_component_passes_the_checker(slot, name, cls):
    assert cls.slot == slot and cls.name == name
    assert REGISTRY[slot][name] is cls
    for seed in (0, 3):
        check_component(cls, seed=seed, contexts=[make_context])
    # and through the registry itself (what an experiment's TOML uses)
    comp = cls()
    assert build_component(slot, comp.to_config(), "x") == comp


@pytest.mark.parametrize("slot, name, cls",
                         [c for c in COMPONENTS if c[0] in SCORING_SLOTS],
                         ids=[i for c, i in zip(COMPONENTS, IDS) if c[0] in SCORING_SLOTS])
def test_documented(slot, name, cls):
    doc = cls.__doc__ or ""
    assert len(doc.strip()) > 40, f"{slot}:{name} needs a docstring with its formula"
    own = [p for p in cls._all_constraints() if p != "clock"]
    if own:
        assert "Parameters" in doc, f"{slot}:{name}: numpydoc Parameters section"
        for p in own:
            assert p in doc, f"{slot}:{name}: parameter {p!r} is not documented"


@pytest.mark.parametrize("slot, name, cls, param, iv", NUMERIC,
                         ids=[f"{s}:{n}.{p}" for s, n, _, p, _ in NUMERIC])
def test_numeric_parameter_refused_through_a_config_table(slot, name, cls, param, iv):
    # the checker refuses the values on the class; a config table puts the
    # dotted key in front of the same message
    for value in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(ConfigError, match=f"policies.p.{slot}: The '{param}' parameter"):
            build_component(slot, {"kind": name, param: value}, f"policies.p.{slot}")


def test_invalid_parameters_named_in_the_uniform_message():
    from memsim.policies.decay import HalfLife, HalfLifeFloor, PerTier

    with pytest.raises(ParameterError) as err:
        HalfLife(half_life_days=-3.0)
    assert str(err.value) == ("The 'half_life_days' parameter of HalfLife must be a float > 0. "
                              "Got -3.0 instead.")
    for floor in (1.0, 1.5, -0.1, float("nan")):
        with pytest.raises(ParameterError, match="'floor' parameter of HalfLifeFloor"):
            HalfLifeFloor(floor=floor)
        with pytest.raises(ParameterError, match="'task_floor' parameter of PerTier"):
            PerTier(task_floor=floor)
    with pytest.raises(ParameterError, match="'scratch_half_life_days' parameter of PerTier"):
        PerTier(scratch_half_life_days=0.0)


def test_unknown_parameter_is_refused_with_suggestion():
    with pytest.raises(ConfigError, match=r"half_life_day.*did you mean 'half_life_days'"):
        build_component("decay", {"kind": "half-life", "half_life_day": 3}, "policies.p.decay")


def test_randomised_components_depend_on_the_seed():
    from memsim.policies.rank import RandomRanker
    from memsim.policies.retention import MemoryBankForgetting

    ctx1, ctx2 = make_context(3), make_context(3)
    ctx2.rng = np.random.default_rng(99)
    rel = np.zeros((N_QUERIES, len(ctx1.idx)))
    assert not np.array_equal(RandomRanker().combine(rel, None, ctx1),
                              RandomRanker().combine(rel, None, ctx2))
    prob = MemoryBankForgetting(mode="probabilistic", strength_days=200.0)
    s1, s2 = make_context(4, sweep=True), make_context(4, sweep=True)
    np.testing.assert_array_equal(prob.evict(s1), prob.evict(s2))
    s2.rng = np.random.default_rng(12345)
    assert not np.array_equal(prob.evict(make_context(4, sweep=True)), prob.evict(s2))


# --------------------------------------------------------------------------
# The checker catches broken user components
# --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _FloorBreaker(Decay):
    """Declares a floor of 0.2 but decays to 0."""

    name: ClassVar[str] = "floor-breaker"
    half_life_days: float = 10.0
    _constraints: ClassVar[dict] = {"half_life_days": Interval(0, None, closed="neither")}

    def recency(self, age, ctx):
        return np.exp2(-np.maximum(age, 0.0) / self.half_life_days)

    def lower_bound(self):
        return 0.2


@dataclass(frozen=True, kw_only=True)
class _Unchecked(Decay):
    """A numeric parameter without a constraint: NaN would pass."""

    name: ClassVar[str] = "unchecked"
    half_life_days: float = 10.0

    def recency(self, age, ctx):
        return np.exp2(-np.maximum(age, 0.0) / self.half_life_days)


@dataclass(frozen=True, kw_only=True)
class _Overpacker(Packer):
    """Packs every valid candidate, whatever the budget."""

    name: ClassVar[str] = "overpacker"

    def pack(self, values, tokens, valid, budget):
        return np.asarray(valid, dtype=bool).copy()


@dataclass(frozen=True, kw_only=True)
class _Duplicator(Orderer):
    """Puts every packed note at position 0."""

    name: ClassVar[str] = "duplicator"

    def order(self, values, packed):
        return np.where(packed, 0, -1).astype(np.int64)


@dataclass(frozen=True, kw_only=True)
class _Mutator(Decay):
    """Writes into its age argument."""

    name: ClassVar[str] = "mutator"

    def recency(self, age, ctx):
        age[...] = 0.0
        return np.ones_like(age)


@dataclass(frozen=True, kw_only=True)
class _OneCurvePerNote(Decay):
    """Declares per-note curves, but its exponential form is one curve."""

    name: ClassVar[str] = "one-curve-per-note"
    per_note_form: ClassVar[bool] = True

    def recency(self, age, ctx):
        return np.exp(-0.1 * np.maximum(age, 0.0))

    def exponential_form(self, ctx):
        return 0.0, 0.1


@dataclass(frozen=True, kw_only=True)
class _Incomplete(Decay):
    """Forgets to implement recency."""

    name: ClassVar[str] = "incomplete"


@pytest.mark.parametrize("cls, check", [
    (_FloorBreaker, "lower_bound"),
    (_Unchecked, "validation"),
    (_Overpacker, "budget"),
    (_Duplicator, "permutation"),
    (_Mutator, "no mutation"),
    (_OneCurvePerNote, "per_note_form"),
    (_Incomplete, "construct with defaults"),
])
def test_checker_catches_a_broken_user_component(cls, check):
    with pytest.raises(CheckError) as err:
        check_component(cls)
    assert err.value.check == check
    assert cls.name in str(err.value) and cls.__name__ in str(err.value)
    assert f"check {check!r} failed" in str(err.value)
    if check != "construct with defaults":
        # the same component inside a policy is caught by check_policy too
        with pytest.raises(CheckError, match=cls.name):
            check_policy(Policy(**{cls.slot: cls()}))


# --------------------------------------------------------------------------
# Presets
# --------------------------------------------------------------------------

REQUIRED_PRESETS = (
    "hivemind-2025-bug", "hivemind", "ai-memory", "ai-memory-breadth", "feather",
    "feather-v0.16", "generative-agents", "langchain-time-weighted", "memorybank",
    "similarity-only", "recency-only", "random", "oracle",
)


def test_every_required_preset_exists():
    assert set(REQUIRED_PRESETS) <= set(PRESETS)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_resolves_scores_and_pickles(name):
    policy = resolve_policy({"preset": name}, "p")
    assert isinstance(policy, Policy)
    assert pickle.loads(pickle.dumps(policy)) == policy
    # the resolved table rebuilds the same policy (what config.toml stores)
    assert Policy.from_config(policy.to_config()) == policy
    doc = PRESETS[name].doc
    assert len(doc) > 80
    check_policy(policy, seed=1, contexts=[make_context])


BASELINES = ("similarity-only", "recency-only", "random", "oracle")


@pytest.mark.parametrize("name", [n for n in REQUIRED_PRESETS if n not in BASELINES])
def test_system_preset_docs_cite_a_source(name):
    doc = PRESETS[name].doc.lower()
    assert any(s in doc for s in ("seed 00", ".rs", ".h", ".py", "et al.", "aaai", "uist")), doc


def test_hivemind_preset_says_what_memsim_designed():
    doc = " ".join(PRESETS["hivemind"].doc.split())
    assert "swap rule" in doc and "access weight" in doc and "not public" in doc.lower()
    assert "1,500" in doc


def test_ai_memory_preset_documents_the_weight_coercion():
    for name in ("ai-memory", "ai-memory-breadth"):
        doc = " ".join(PRESETS[name].doc.split())
        assert "coerces" in doc and "NaN" in doc


def test_preset_overrides_merge_with_the_preset():
    p = resolve_policy({"preset": "feather", "decay": {"half_life_days": 90.0}}, "p")
    assert p.decay.name == "half-life" and p.decay.half_life_days == 90.0
    assert p.ranker.name == "feather-blend" and p.candidates == 10
    with pytest.raises(ConfigError, match="unknown preset"):
        resolve_policy({"preset": "no-such"}, "p")


def test_presets_experiment_runs_every_preset():
    path = ROOT / "experiments" / "presets.toml"
    table = tomllib.loads(path.read_text())
    presets = {t["preset"] for t in table["policies"].values()}
    # the agent frameworks' presets run in experiments/frameworks.toml
    fw = tomllib.loads((ROOT / "experiments" / "frameworks.toml").read_text())
    framework = {t["preset"] for t in fw["policies"].values()} - presets
    # presets that replay a production log need a stream with logged rankings
    replay_only = {n for n in PRESETS if resolve_policy({"preset": n}, n).ranker.needs_logged}
    assert replay_only == {"as-logged"}
    assert presets | framework == set(PRESETS) - replay_only
    assert set(table["workload"]) <= {"horizon_days", "backfill_days"}
    for name, ptable in table["policies"].items():
        resolve_policy(ptable, f"policies.{name}")
    try:
        import memsim.data.workload  # noqa: F401
    except ImportError:  # pragma: no cover - the generator is another issue's
        pytest.skip("memsim.data.workload is not available")
    import memsim

    exp = memsim.load_experiment(path)
    # one arm per preset, plus NAME-PACKER arms: a preset with the packer
    # that beats its source's on this workload (the file's header)
    extra = {n: t for n, t in table["policies"].items() if set(t) != {"preset"}}
    assert len(exp.policies) == len(PRESETS) - len(replay_only) - len(framework) + len(extra)
    assert extra and all(set(t) == {"preset", "packer"} and n == f"{t['preset']}-{t['packer']}"
                         for n, t in extra.items())


def test_memory_type_codes_match_the_sweep():
    # the ai-memory sweep's "episodic" is code 0 of the engine's mapping
    assert MEMORY_TYPE_CODES["episodic"] == 0
