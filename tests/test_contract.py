"""Contract suite over the whole policy registry (Gymnasium's checker pattern).

For every registered component: it builds with its defaults and round-trips
through its config; every numeric parameter refuses NaN and +-inf (and
negatives where the range starts at 0) with the uniform message naming the
parameter; outputs have the documented shapes and dtypes on a small random
context built by the real engine classes; inputs are not mutated; results are
deterministic for a seed; components and policies pickle. Every preset
resolves to a Policy, and ``experiments/presets.toml`` runs every preset.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import pickle
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from memsim.config import resolve_policy
from memsim.engine import Batch, NoteArrays, PolicyState
from memsim.errors import ConfigError, ParameterError
from memsim.metrics import RelevanceIndex
from memsim.params import Interval, Options
from memsim.policies import PRESETS, REGISTRY, Policy, ScoringContext, build_component
from memsim.policies.base import MEMORY_TYPE_CODES, TIER_CODES
from memsim.stream import make_stream

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
                       query_embeddings=rng.normal(size=(N_QUERIES, DIM)).astype(np.float32))


@functools.lru_cache(maxsize=None)
def _static(seed: int):
    """The stream, its note arrays and relevance index (read-only, cached)."""
    stream = _stream(seed)
    notes = NoteArrays.from_stream(stream, {a: i for i, a in enumerate("abcd")})
    return stream, notes, RelevanceIndex(stream, notes.created_at)


def make_context(seed: int = 0, sweep: bool = False) -> ScoringContext:
    """A real ScoringContext: random notes, random per-policy state (uses,
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
    return ScoringContext(batch, state, np.random.default_rng(seed + 2))


def _snapshot(ctx: ScoringContext) -> dict:
    """Copies of everything a component can read, to check nothing changed."""
    out = {}
    for obj, prefix in ((ctx.notes, "notes"), (ctx.state, "state"), (ctx.batch, "batch")):
        for k, v in vars(obj).items():
            if isinstance(v, np.ndarray):
                out[f"{prefix}.{k}"] = v.copy()
    for k in ("age_created", "age_updated", "age_last_access", "since_access", "recalls",
              "tier", "distinct_actors", "gains"):
        out[f"ctx.{k}"] = np.array(getattr(ctx, k), copy=True)
    return out


def _assert_unchanged(before: dict, ctx: ScoringContext) -> None:
    after = _snapshot(ctx)
    for k, v in before.items():
        np.testing.assert_array_equal(after[k], v, err_msg=f"{k} was mutated")


# --------------------------------------------------------------------------
# Construction, validation, config round-trip, pickling
# --------------------------------------------------------------------------


@pytest.mark.parametrize("slot, name, cls", COMPONENTS, ids=IDS)
def test_builds_with_defaults_and_round_trips(slot, name, cls):
    comp = cls()
    assert comp.slot == slot and comp.name == name
    assert REGISTRY[slot][name] is cls
    assert dataclasses.is_dataclass(comp)
    with pytest.raises(dataclasses.FrozenInstanceError):
        comp._probe = 1  # frozen
    cfg = comp.to_config()
    assert cfg["kind"] == name
    assert build_component(slot, cfg, "x") == comp
    assert build_component(slot, copy.deepcopy(cfg), "x").to_config() == cfg
    for pname, _default, allowed in cls.describe():
        assert isinstance(pname, str) and isinstance(allowed, str)


@pytest.mark.parametrize("slot, name, cls", COMPONENTS, ids=IDS)
def test_pickles(slot, name, cls):
    comp = cls()
    assert pickle.loads(pickle.dumps(comp)) == comp


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
def test_numeric_parameter_refuses_nan_inf_negative(slot, name, cls, param, iv):
    bad = [float("nan"), float("inf"), float("-inf")]
    if iv.low is not None and iv.low >= 0:
        bad.append(-1 if iv.integer else -1.0)
    if iv.high is not None:
        bad.append(iv.high + 1)
    for value in bad:
        with pytest.raises(ParameterError) as err:
            cls(**{param: value})
        msg = str(err.value)
        assert msg.startswith(f"The {param!r} parameter of {cls.__name__} must be "), msg
        assert "instead" in msg
        # and through a config table, with the dotted key in front
        with pytest.raises(ConfigError, match=f"policies.p.{slot}: The '{param}' parameter"):
            build_component(slot, {"kind": name, param: value}, f"policies.p.{slot}")


@pytest.mark.parametrize("slot, name, cls", COMPONENTS, ids=IDS)
def test_option_parameters_refuse_unknown_values(slot, name, cls):
    for param, cons in cls._all_constraints().items():
        alts = cons if isinstance(cons, (list, tuple)) else (cons,)
        if all(isinstance(c, Options) for c in alts):
            with pytest.raises(ParameterError, match=f"'{param}' parameter of {cls.__name__}"):
                cls(**{param: "no-such-value"})


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


# --------------------------------------------------------------------------
# Shapes, dtypes, no mutation, determinism
# --------------------------------------------------------------------------


def _run(slot, comp, ctx):
    """The component's answer on ``ctx``, checked for shape and dtype."""
    q, n = len(ctx.t), len(ctx.idx)
    if slot == "retriever":
        out = comp.similarity(ctx)
        assert out.shape == (q, n) and out.dtype.kind == "f"
        return out
    if slot == "decay":
        age = np.array(ctx.age(comp.clock), copy=True)
        age_before = age.copy()
        out = comp.recency(age, ctx)
        np.testing.assert_array_equal(age, age_before, err_msg="recency mutated its age input")
        out = np.asarray(out)
        assert out.shape == (q, n) and out.dtype.kind == "f"
        assert np.all(np.isfinite(out)) and np.all(out >= 0)
        return out
    if slot == "stickiness":
        age = np.array(ctx.age_created, copy=True)
        age_before = age.copy()
        eff = np.asarray(comp.effective_age(age, ctx))
        np.testing.assert_array_equal(age, age_before)
        assert eff.shape == (q, n) and eff.dtype.kind == "f"
        acc = np.broadcast_to(np.asarray(comp.access_term(ctx), dtype=np.float64), (q, n))
        assert np.all(np.isfinite(acc)) and np.all(acc >= 0)
        return np.stack([eff, acc])
    if slot == "breadth":
        outs = []
        for f in (comp.on_access, comp.on_score):
            b = np.broadcast_to(np.asarray(f(ctx), dtype=np.float64), (q, n))
            assert np.all(b >= 1.0)
            outs.append(b)
        return np.stack(outs)
    if slot == "ranker":
        rel = np.asarray(ctx.similarity(build_component("retriever", "cosine", "r")))
        rec = np.clip(np.asarray(ctx.age_created) / -400.0 + 1.0, 0.0, 1.0)
        rel_before, rec_before = rel.copy(), rec.copy()
        out = np.asarray(comp.combine(rel, rec if comp.uses_recency else None, ctx))
        np.testing.assert_array_equal(rel, rel_before)
        np.testing.assert_array_equal(rec, rec_before)
        assert out.shape == (q, n) and out.dtype.kind == "f"
        return out
    if slot == "retention":
        out = np.asarray(comp.evict(ctx))
        assert out.shape == (n,) and out.dtype == bool
        return out
    if slot == "packer":
        rng = np.random.default_rng(5)
        c = 12
        values = rng.uniform(-0.2, 1, (q, c))
        tokens = rng.integers(1, 400, (q, c)).astype(np.int64)
        valid = rng.random((q, c)) < 0.9
        budget = np.full(q, 800, dtype=np.int64)
        args = [values.copy(), tokens.copy(), valid.copy(), budget.copy()]
        out = np.asarray(comp.pack(*args))
        for a, b in zip(args, (values, tokens, valid, budget)):
            np.testing.assert_array_equal(a, b)
        assert out.shape == (q, c) and out.dtype == bool
        assert np.all((tokens * out).sum(axis=1) <= budget)
        assert not np.any(out & ~valid)
        return out
    if slot == "orderer":
        rng = np.random.default_rng(6)
        c = 12
        values = -np.sort(-rng.uniform(0, 1, (q, c)), axis=1)
        packed = rng.random((q, c)) < 0.5
        out = np.asarray(comp.order(values, packed))
        assert out.shape == (q, c) and out.dtype == np.int64
        for r in range(q):
            assert sorted(out[r][packed[r]]) == list(range(packed[r].sum()))
            assert np.all(out[r][~packed[r]] == -1)
        return out
    if slot == "feedback":
        return np.zeros(0)
    raise AssertionError(f"unknown slot {slot}")


@pytest.mark.parametrize("slot, name, cls", COMPONENTS, ids=IDS)
def test_shapes_dtypes_and_no_mutation(slot, name, cls):
    ctx = make_context(0, sweep=(slot == "retention"))
    before = _snapshot(ctx)
    _run(slot, cls(), ctx)
    _assert_unchanged(before, ctx)


@pytest.mark.parametrize("slot, name, cls", COMPONENTS, ids=IDS)
def test_deterministic_for_a_seed(slot, name, cls):
    sweep = slot == "retention"
    a = _run(slot, cls(), make_context(3, sweep=sweep))
    b = _run(slot, cls(), make_context(3, sweep=sweep))
    np.testing.assert_array_equal(a, b)


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
    ctx = make_context(1)
    before = _snapshot(ctx)
    score = np.asarray(policy.score(ctx), dtype=np.float64)
    _assert_unchanged(before, ctx)
    assert score.shape == (N_QUERIES, len(ctx.idx))
    assert not np.any(np.isnan(score))


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
    assert presets == set(PRESETS)
    assert set(table["workload"]) <= {"horizon_days", "backfill_days"}
    for name, ptable in table["policies"].items():
        resolve_policy(ptable, f"policies.{name}")
    try:
        import memsim.workload  # noqa: F401
    except ImportError:  # pragma: no cover - the generator is another issue's
        pytest.skip("memsim.workload is not available")
    import memsim

    exp = memsim.load_experiment(path)
    assert len(exp.policies) == len(PRESETS)


def test_memory_type_codes_match_the_sweep():
    # the ai-memory sweep's "episodic" is code 0 of the engine's mapping
    assert MEMORY_TYPE_CODES["episodic"] == 0
