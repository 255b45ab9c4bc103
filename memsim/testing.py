"""A checker for policy components and policies (Gymnasium's ``check_env``).

Call it on your own component in a notebook before you run it::

    from memsim.testing import check_component, check_policy
    check_component(MyDecay)              # the class, or an instance
    check_policy(Policy(decay=MyDecay()))

Each raises :class:`CheckError` naming the component and the failed check;
it returns None when every check passes. The checks, run on seeded random
:class:`~memsim.policies.ArrayContext` objects (and on any contexts you pass):

- construction: a frozen, validated dataclass of a known slot with a
  registry name, built with its defaults; every numeric parameter refuses
  NaN and +-inf (and values outside its range) with the uniform message
  naming the parameter; option parameters refuse an unknown value;
- config: ``to_config()`` has ``kind = name`` and rebuilds an equal
  component through the registry's build routine; it pickles;
- outputs: documented shapes and dtypes, finite values, nothing in the
  inputs or the context mutated, the same answer twice for the same seed;
- per slot: a decay's recency lies in [0, 1] for a note of default
  salience, never rises with age, never crosses a declared
  :meth:`~memsim.policies.Decay.lower_bound`, and matches a declared
  :meth:`~memsim.policies.Decay.exponential_form`; stickiness never makes a
  note older and adds no negative access term; breadth factors are >= 1;
  packers return a subset of the valid candidates within the budget;
  orderers return a permutation of the packed notes (-1 elsewhere);
  retentions return one flag per note;
- a scoring component that declares ``reads_uses()`` False gives the same
  output when the notes' recalls, last uses, distinct actors and tiers
  change.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle  # noqa: TID251 - worker processes (--jobs) receive policies pickled
from typing import Any, Callable, Iterable

import numpy as np

from .errors import ParameterError
from .params import Interval, Options, Validated
from .policies import SLOTS, ArrayContext, Component, Policy
from .policies.base import build_from_spec
from .planted import PlantedModel
from .policies.context import MEMORY_TYPE_CODES, TIER_CODES
from .workload import CLASS_NAMES, SyntheticWorkload

__all__ = ["CheckError", "check_component", "check_policy", "random_context"]

#: Shape of the random contexts: queries, notes, embedding dimension.
N_QUERIES, N_NOTES, DIM = 5, 60, 6
#: Candidates per query of the packer and orderer checks.
N_CANDIDATES = 12

ContextFactory = Callable[[int, bool], Any]


class CheckError(AssertionError):
    """A component or policy failed a check.

    Attributes
    ----------
    component : str
        The component (``"decay 'my-decay' (MyDecay)"``) or policy.
    check : str
        The check that failed.
    """

    def __init__(self, component: str, check: str, detail: str):
        self.component = component
        self.check = check
        super().__init__(f"{component}: check {check!r} failed: {detail}")


def random_context(seed: int = 0, sweep: bool = False) -> ArrayContext:
    """A seeded random :class:`~memsim.policies.ArrayContext`: 60 notes of
    mixed ages, uses, tiers, memory types, sizes and pins; 5 queries with
    embeddings, gains and a live mask (1 query at one sweep time, all notes
    live, when ``sweep``)."""
    rng = np.random.default_rng(seed)
    n, q = N_NOTES, (1 if sweep else N_QUERIES)
    created = rng.uniform(-400.0, 5.0, n)
    used = rng.random(n) < 0.6
    t = np.sort(rng.uniform(5.0, 10.0, q))
    live = None if sweep else rng.random((q, n)) < 0.9
    return ArrayContext(
        t=t, created_at=created, updated_at=created + rng.uniform(0.0, 3.0, n),
        last_access=np.where(used, created + rng.uniform(0.0, 5.0, n), np.nan),
        recalls=np.where(used, rng.integers(1, 40, n), 0),
        tier=rng.choice(list(TIER_CODES.values()), n),
        memory_type=rng.choice([MEMORY_TYPE_CODES[m] for m in ("episodic", "semantic",
                                                              "procedural")], n, p=[.6, .2, .2]),
        importance=rng.uniform(0.0, 2.0, n), salience=rng.uniform(0.25, 2.0, n),
        pinned=rng.random(n) < 0.2, distinct_actors=np.where(used, rng.integers(1, 5, n), 0),
        tokens=rng.integers(5, 500, n),
        note_emb=rng.normal(size=(n, DIM)), query_emb=rng.normal(size=(q, DIM)),
        gains=np.where(rng.random((q, n)) < 0.05, rng.choice([1.0, 0.5, -0.5], (q, n)), 0.0),
        live=live, rng=np.random.default_rng(seed + 1),
        # for rankers that read the planted model (bayes): the default world's
        note_class=rng.integers(-1, len(CLASS_NAMES), n),
        note_actor=rng.integers(0, 3, n), query_actor=rng.integers(0, 3, q),
        planted=_default_planted(),
    )


def _default_planted() -> PlantedModel:
    return PlantedModel.from_workload(SyntheticWorkload())


def _fresh_context(ages: np.ndarray, **cols: Any) -> ArrayContext:
    """Never-used notes of default salience at the given ages (one query at
    t = 0); ``cols`` override note columns."""
    return ArrayContext(t=0.0, created_at=-np.asarray(ages, dtype=np.float64), **cols)


def _label(obj: Any) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    slot, name = getattr(cls, "slot", "?") or "?", getattr(cls, "name", "?") or "?"
    return f"{slot} {name!r} ({cls.__qualname__})"


class _Checker:
    """Runs the checks of one component; :meth:`fail` raises CheckError."""

    def __init__(self, label: str):
        self.label = label

    def fail(self, check: str, detail: str) -> None:
        raise CheckError(self.label, check, detail)

    def require(self, ok: Any, check: str, detail: str) -> None:
        if not bool(ok):
            self.fail(check, detail)

    def array(self, x: Any, check: str, shape: tuple, kind: str) -> np.ndarray:
        """``x`` as an array of ``shape`` whose dtype kind is in ``kind``."""
        try:
            out = np.asarray(x)
        except Exception as exc:  # noqa: BLE001 - report anything as a failed check
            self.fail(check, f"returned {type(x).__name__}, not an array ({exc})")
        self.require(out.shape == shape, check, f"shape {out.shape}, expected {shape}")
        self.require(out.dtype.kind in kind, check,
                     f"dtype {out.dtype}, expected kind {kind!r}")
        return out

    def call(self, check: str, f: Callable, *args: Any) -> Any:
        try:
            return f(*args)
        except CheckError:
            raise
        except Exception as exc:  # noqa: BLE001 - a crash is a failed check
            self.fail(check, f"raised {type(exc).__name__}: {exc}")


# --------------------------------------------------------------------------
# Construction and configuration
# --------------------------------------------------------------------------


def _check_class(c: _Checker, cls: type) -> None:
    c.require(isinstance(cls, type) and issubclass(cls, Component), "component class",
              "not a subclass of memsim.policies.Component (Retriever, Decay, ...)")
    c.require(cls.slot in SLOTS, "slot", f"slot {cls.slot!r} is not one of {', '.join(SLOTS)}")
    c.require(isinstance(cls.name, str) and cls.name, "name",
              "set a registry name: name: ClassVar[str] = 'my-name'")
    c.require(dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, "frozen",
              "decorate the class with @dataclass(frozen=True, kw_only=True)")
    c.require(issubclass(cls, Validated), "validated", "not a memsim.params.Validated class")
    for pname, _default, allowed in c.call("describe", cls.describe):
        c.require(isinstance(pname, str) and isinstance(allowed, str), "describe",
                  f"describe() gave {pname!r}, {allowed!r}")


def _bad_values(iv: Interval) -> list:
    bad: list = [float("nan"), float("inf"), float("-inf")]
    if iv.low is not None and iv.low >= 0:
        bad.append(-1 if iv.integer else -1.0)
    if iv.high is not None:
        bad.append(iv.high + 1)
    return bad


def _check_validation(c: _Checker, cls: type) -> None:
    """Every numeric parameter refuses NaN, +-inf and out-of-range values, and
    every option parameter an unknown value, with the uniform message."""
    constraints = cls._all_constraints()
    for f in dataclasses.fields(cls):
        numeric = isinstance(f.default, (int, float)) and not isinstance(f.default, bool)
        c.require(not (f.init and numeric and f.name not in constraints), "validation",
                  f"numeric parameter {f.name!r} has no constraint: add it to _constraints "
                  "(e.g. Interval(0, None)) so that NaN and out-of-range values are refused")
    for param, cons in constraints.items():
        alts = cons if isinstance(cons, (list, tuple)) else (cons,)
        ivs = [a for a in alts if isinstance(a, Interval)]
        bad = _bad_values(ivs[0]) if ivs else (
            ["no-such-value"] if all(isinstance(a, Options) for a in alts) else [])
        for value in bad:
            try:
                cls(**{param: value})
            except ParameterError as exc:
                msg = str(exc)
                c.require(msg.startswith(f"The {param!r} parameter of {cls.__name__} must be ")
                          and "instead" in msg, "validation message",
                          f"{param}={value!r} gave {msg!r}, not the uniform message")
                continue
            except Exception as exc:  # noqa: BLE001
                c.fail("validation", f"{param}={value!r} raised {type(exc).__name__}: {exc}, "
                       "not a ParameterError")
            c.fail("validation", f"{param}={value!r} was accepted")


def _check_config(c: _Checker, comp: Component) -> None:
    cls = type(comp)
    cfg = c.call("to_config", comp.to_config)
    c.require(isinstance(cfg, dict) and cfg.get("kind") == cls.name, "to_config",
              f"to_config() gave {cfg!r}, expected a table with kind = {cls.name!r}")
    # the registry's own build routine, over a one-entry registry: the class
    # need not be registered to be checked
    registry = {cls.name: cls}
    for spec in (cfg, copy.deepcopy(cfg)):
        back = c.call("config round trip", lambda s: build_from_spec(
            s, registry, what=cls.slot, where=cls.slot), spec)
        c.require(back == comp and back.to_config() == cfg, "config round trip",
                  f"{cfg!r} rebuilt {back!r}")
    try:
        again = pickle.loads(pickle.dumps(comp))
    except Exception as exc:  # noqa: BLE001
        c.fail("pickle", f"{type(exc).__name__}: {exc}")
    c.require(again == comp, "pickle", "the unpickled component differs")


# --------------------------------------------------------------------------
# Outputs, per slot
# --------------------------------------------------------------------------


def _snapshot(ctx: Any) -> dict[str, np.ndarray]:
    """Copies of every array a component can reach through ``ctx``."""
    out: dict[str, np.ndarray] = {}
    for k, v in vars(ctx).items():
        if isinstance(v, np.ndarray):
            out[k] = v.copy()
        elif hasattr(v, "__dict__") and not isinstance(v, (type, np.random.Generator)):
            for k2, v2 in vars(v).items():
                if isinstance(v2, np.ndarray):
                    out[f"{k}.{k2}"] = v2.copy()
    for k in ("age_created", "age_updated", "age_last_access", "since_access", "recalls",
              "tier", "distinct_actors", "gains", "importance", "salience", "tokens"):
        out[f"ctx.{k}"] = np.array(getattr(ctx, k), copy=True)
    return out


def _unchanged(c: _Checker, before: dict, ctx: Any) -> None:
    after = _snapshot(ctx)
    for k, v in before.items():
        c.require(np.array_equal(after[k], v, equal_nan=v.dtype.kind == "f"), "no mutation",
                  f"the context's {k} was mutated")


def _same_input(c: _Checker, given: np.ndarray, kept: np.ndarray, what: str) -> None:
    c.require(np.array_equal(given, kept, equal_nan=kept.dtype.kind == "f"), "no mutation",
              f"the {what} argument was mutated")


def _run_retriever(c: _Checker, comp, ctx) -> np.ndarray:
    q, n = len(ctx.t), len(ctx.idx)
    out = c.array(c.call("similarity", comp.similarity, ctx), "similarity", (q, n), "f")
    c.require(np.isfinite(out).all(), "similarity", "non-finite similarity")
    return out


def _run_decay(c: _Checker, comp, ctx) -> np.ndarray:
    q, n = len(ctx.t), len(ctx.idx)
    age = np.array(ctx.age(comp.clock), dtype=np.float64, copy=True)
    kept = age.copy()
    out = c.array(c.call("recency", comp.recency, age, ctx), "recency", (q, n), "f")
    _same_input(c, age, kept, "age")
    c.require(np.isfinite(out).all() and (out >= 0).all(), "recency bounds",
              "recency must be finite and >= 0")
    return out


def _decay_curve_checks(c: _Checker, comp) -> None:
    """Fresh notes of default salience: recency in [0, 1], non-increasing in
    age, above a declared floor, equal to a declared exponential form."""
    ages = np.concatenate([[0.0], np.geomspace(1e-3, 1e5, 200)])
    lower = c.call("lower_bound", comp.lower_bound)
    for tier in TIER_CODES.values():
        ctx = _fresh_context(ages, tier=tier)
        age = ctx.age(comp.clock)
        rec = c.array(c.call("recency", comp.recency, age, ctx), "recency",
                      (1, len(ages)), "f")[0]
        c.require(np.isfinite(rec).all() and (rec >= 0).all() and (rec <= 1 + 1e-12).all(),
                  "recency bounds", f"a fresh note of default salience (tier {tier}) must "
                  f"get a recency in [0, 1], got {rec.min():.3g} .. {rec.max():.3g}")
        c.require((np.diff(rec) <= 1e-12).all(), "recency falls with age",
                  f"recency rises with age (tier {tier})")
        if lower is not None:
            c.require(np.isfinite(lower), "lower_bound", f"lower_bound() = {lower!r}")
            c.require((rec >= lower - 1e-12).all(), "floor never crossed",
                      f"recency {rec.min():.6g} < declared lower_bound() {lower!r} "
                      f"(tier {tier})")
        form = c.call("exponential_form", comp.exponential_form, ctx)
        c.require(not comp.per_note_form or (form is not None and np.ndim(form[0])
                                             and np.ndim(form[1])), "per_note_form",
                  "per_note_form = True, but exponential_form() gave no per-note arrays")
        if form is not None:
            floor, rate = (np.asarray(x, dtype=np.float64) for x in form)
            want = floor + (1.0 - floor) * np.exp(-rate * np.maximum(age, 0.0))
            c.require(np.allclose(want[0], rec, rtol=1e-9, atol=1e-300), "exponential_form",
                      f"floor + (1 - floor) exp(-rate age) differs from recency() (tier {tier})")


def _run_stickiness(c: _Checker, comp, ctx) -> np.ndarray:
    q, n = len(ctx.t), len(ctx.idx)
    age = np.array(ctx.age_created, dtype=np.float64, copy=True)
    kept = age.copy()
    eff = c.array(c.call("effective_age", comp.effective_age, age, ctx), "effective_age",
                  (q, n), "f")
    _same_input(c, age, kept, "age")
    c.require(np.isfinite(eff).all() and (eff <= np.maximum(age, 0.0) + 1e-9).all(),
              "effective_age", "use must never make a note older (effective age <= age)")
    acc = c.call("access_term", comp.access_term, ctx)
    acc = np.broadcast_to(np.asarray(acc, dtype=np.float64), (q, n))
    c.require(np.isfinite(acc).all() and (acc >= 0).all(), "access_term",
              "the access term must be finite and >= 0")
    return np.stack([eff, acc])


def _run_breadth(c: _Checker, comp, ctx) -> np.ndarray:
    q, n = len(ctx.t), len(ctx.idx)
    outs = []
    for f in (comp.on_access, comp.on_score):
        b = np.broadcast_to(np.asarray(c.call(f.__name__, f, ctx), dtype=np.float64), (q, n))
        c.require(np.isfinite(b).all() and (b >= 1.0).all(), f.__name__,
                  "breadth factors must be finite and >= 1")
        outs.append(b)
    return np.stack(outs)


def _run_ranker(c: _Checker, comp, ctx) -> np.ndarray:
    q, n = len(ctx.t), len(ctx.idx)
    rel = np.asarray(ctx.dots, dtype=np.float64) / 10.0
    rec = np.clip(np.asarray(ctx.age_created) / -400.0 + 1.0, 0.0, 1.0)
    rel_kept, rec_kept = rel.copy(), rec.copy()
    out = c.array(c.call("combine", comp.combine, rel, rec if comp.uses_recency else None, ctx),
                  "combine", (q, n), "f")
    _same_input(c, rel, rel_kept, "rel")
    _same_input(c, rec, rec_kept, "rec")
    c.require(np.isfinite(out).all(), "combine", "non-finite scores")
    return out


def _run_retention(c: _Checker, comp, ctx) -> np.ndarray:
    return c.array(c.call("evict", comp.evict, ctx), "evict", (len(ctx.idx),), "b")


def _pack_problems(seed: int, q: int) -> Iterable[tuple]:
    rng = np.random.default_rng(seed + 5)
    k = N_CANDIDATES
    values = -np.sort(-rng.uniform(-0.2, 1.0, (q, k)), axis=1)
    tokens = rng.integers(1, 400, (q, k)).astype(np.int64)
    valid = rng.random((q, k)) < 0.9
    yield values, tokens, valid, np.full(q, 800, dtype=np.int64)
    yield values, tokens, valid, np.zeros(q, dtype=np.int64)  # nothing fits
    yield values, tokens, valid, np.full(q, 10**6, dtype=np.int64)  # everything fits


def _run_packer(c: _Checker, comp, ctx) -> np.ndarray:
    outs = []
    for values, tokens, valid, budget in _pack_problems(0, len(ctx.t)):
        args = [values.copy(), tokens.copy(), valid.copy(), budget.copy()]
        if getattr(comp, "needs_similarity", False):  # a cut on the candidates' similarity
            args.append(np.clip(values + 0.1, -1.0, 1.0))
        out = c.array(c.call("pack", comp.pack, *args), "pack", values.shape, "b")
        for a, b, what in zip(args, (values, tokens, valid, budget),
                              ("values", "tokens", "valid", "budget")):
            _same_input(c, a, b, what)
        used = (tokens * out).sum(axis=1)
        c.require((used <= budget).all(), "budget", f"packed {used.tolist()} tokens over "
                  f"budgets {budget.tolist()}")
        c.require(not (out & ~valid).any(), "candidate subset", "packed an invalid candidate")
        outs.append(out)
    return np.stack(outs)


def _run_orderer(c: _Checker, comp, ctx) -> np.ndarray:
    rng = np.random.default_rng(6)
    q, k = len(ctx.t), N_CANDIDATES
    values = -np.sort(-rng.uniform(0, 1, (q, k)), axis=1)
    packed = rng.random((q, k)) < 0.5
    packed[0] = False  # a row with nothing packed
    args = [values.copy(), packed.copy()]
    out = c.array(c.call("order", comp.order, *args), "order", (q, k), "i")
    _same_input(c, args[0], values, "values")
    _same_input(c, args[1], packed, "packed")
    c.require(out.dtype == np.int64, "order", f"dtype {out.dtype}, expected int64")
    for r in range(q):
        c.require(sorted(out[r][packed[r]]) == list(range(int(packed[r].sum()))), "permutation",
                  f"row {r}: positions {out[r][packed[r]].tolist()} are not 0..n-1")
        c.require((out[r][~packed[r]] == -1).all(), "permutation",
                  f"row {r}: a candidate not packed must get -1")
    return out


_RUN = {
    "retriever": _run_retriever, "decay": _run_decay, "stickiness": _run_stickiness,
    "breadth": _run_breadth, "ranker": _run_ranker, "retention": _run_retention,
    "packer": _run_packer, "orderer": _run_orderer,
}


def _redraw_uses(ctx: ArrayContext, seed: int) -> None:
    """Give a fresh context (nothing read yet) other uses: recalls, last
    uses, distinct actors and tiers drawn again."""
    rng = np.random.default_rng(seed + 1000)
    n = len(ctx.idx)
    used = rng.random(n) < 0.5
    ctx.last_access = np.where(used, ctx.created_at + rng.uniform(0.0, 9.0, n), np.nan)
    ctx.recalls = np.where(used, rng.integers(1, 60, n), 0)
    ctx.distinct_actors = np.where(used, rng.integers(1, 7, n), 0)
    ctx.tier = rng.choice(list(TIER_CODES.values()), n)


def _check_outputs(c: _Checker, comp: Component, make_context: ContextFactory,
                   seed: int) -> None:
    slot = comp.slot
    run = _RUN.get(slot)
    if run is None:  # the feedback is read by the engine, not called
        return
    sweep = slot == "retention"
    ctx = make_context(seed, sweep)
    before = _snapshot(ctx)
    first = run(c, comp, ctx)
    _unchanged(c, before, ctx)
    second = run(c, comp, make_context(seed, sweep))
    c.require(np.array_equal(first, second, equal_nan=True), "determinism",
              "two runs on the same context and seed differ")
    if hasattr(comp, "reads_uses") and not c.call("reads_uses", comp.reads_uses):
        other = make_context(seed, sweep)
        if isinstance(other, ArrayContext):
            _redraw_uses(other, seed)
            c.require(np.array_equal(first, run(c, comp, other), equal_nan=True), "reads_uses",
                      "reads_uses() is False, but the output changed with the notes' uses "
                      "(recalls, last use, distinct actors, tier)")
    if slot == "decay":
        _decay_curve_checks(c, comp)


def check_component(component: Any, *, seed: int = 0,
                    contexts: Iterable[ContextFactory] = ()) -> None:
    """Check a policy component (class or instance) against the contract.

    Parameters
    ----------
    component : Component subclass or instance
        A class is built with its defaults.
    seed : int
        Seed of the random contexts.
    contexts : iterable of callable, optional
        More context factories ``make(seed, sweep) -> ScoringContext`` to run
        the output checks on (besides :func:`random_context`), e.g. contexts
        built by the engine.

    Raises
    ------
    CheckError
        Naming the component and the failed check.
    """
    c = _Checker(_label(component))
    cls = component if isinstance(component, type) else type(component)
    _check_class(c, cls)
    if isinstance(component, type):
        component = c.call("construct with defaults", cls)
    _check_validation(c, cls)
    c.require(_is_frozen(component), "frozen", "setting an attribute did not raise "
              "FrozenInstanceError: use @dataclass(frozen=True, kw_only=True)")
    _check_config(c, component)
    for make in (random_context, *contexts):
        _check_outputs(c, component, make, seed)


def _is_frozen(obj: Any) -> bool:
    try:
        obj._probe = 1
    except dataclasses.FrozenInstanceError:
        return True
    except Exception:  # noqa: BLE001 - any other refusal is not the dataclass's
        return False
    return False


def check_policy(policy: Policy, *, seed: int = 0,
                 contexts: Iterable[ContextFactory] = ()) -> None:
    """Check a whole policy: each component (:func:`check_component`), the
    config round trip, pickling, and its scores (shape (Q, L), no NaN, no
    mutation of the context, deterministic for a seed).

    Parameters
    ----------
    policy : Policy
    seed : int
        Seed of the random contexts.
    contexts : iterable of callable, optional
        More context factories ``make(seed, sweep)``, as for
        :func:`check_component`.

    Raises
    ------
    CheckError
        Naming the policy (or the component) and the failed check.
    """
    if not isinstance(policy, Policy):
        raise CheckError(f"policy {type(policy).__name__}", "policy",
                         "not a memsim.policies.Policy")
    c = _Checker("policy (" + ", ".join(f"{slot}={getattr(policy, slot).name}"
                                         for slot in SLOTS) + ")")
    contexts = tuple(contexts)
    for slot in SLOTS:
        check_component(getattr(policy, slot), seed=seed, contexts=contexts)
    cfg = c.call("to_config", policy.to_config)
    parts = {slot: build_from_spec(cfg[slot], {type(getattr(policy, slot)).name:
                                               type(getattr(policy, slot))},
                                   what=slot, where=slot) for slot in SLOTS}
    back = Policy(**parts, candidates=cfg.get("candidates"))
    c.require(back == policy, "config round trip", "to_config() does not rebuild the policy")
    c.require(pickle.loads(pickle.dumps(policy)) == policy, "pickle",
              "the unpickled policy differs")
    for make in (random_context, *contexts):
        ctx = make(seed, False)
        q, n = len(ctx.t), len(ctx.idx)
        before = _snapshot(ctx)
        score = c.array(c.call("score", policy.score, ctx), "score", (q, n), "f")
        _unchanged(c, before, ctx)
        c.require(not np.isnan(score).any(), "score", "NaN scores")
        again = np.asarray(policy.score(make(seed, False)))
        c.require(np.array_equal(score, again), "determinism",
                  "two runs on the same context and seed differ")
