"""A checker for policy components and policies (Gymnasium's ``check_env``).

Call it on your own component in a notebook before you run it::

    from memsim.checks.testing import check_component, check_policy
    check_component(MyDecay)              # the class, or an instance
    check_component(MyDecay, engine=True) # and through the engine's fast paths
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
  salience and never rises with age; stickiness never makes a note older
  and adds no negative access term; breadth factors are >= 1; packers
  return a subset of the valid candidates within the budget; orderers
  return a permutation of the packed notes (-1 elsewhere); retentions
  return one flag per note;
- as the engine calls them: a packer (an orderer) handles each row on its
  own (random problems packed whole, row by row and shuffled among other
  rows give the same masks); a ranker that does not declare
  ``set_dependent`` scores a cell alike whichever other notes the context
  holds, in whatever order; every decay, stickiness, breadth and ranker the
  engine may score on gathered cells runs on an (R, W) context of them
  (note vectors (R, W), as the engine's) and gives each cell its value on
  the whole context;
- a scoring component that declares ``reads_uses()`` False gives the same
  output when the notes' recalls, last uses, distinct actors and tiers
  change; a ranker that declares ``sets_read_uses`` False keeps its
  candidates and every other note's score when some notes' uses change;
- every promise the engine trusts, where it can break (the extreme notes of
  :func:`extreme_context`: ages 0, tiny and huge, no use and many, every
  tier code; similarities from -1 to 1; and the contexts above): a decay's
  ``upper_bound`` (any note), ``lower_bound`` (a note of default salience),
  ``exponential_form`` (equal to the recency) and ``half_life``; a ranker's
  ``score_bound`` and ``similarity_needed`` at the recency ranges the
  engine passes; a stickiness's ``access_term_bound``; a breadth's
  ``access_factor_bound`` and ``score_factor_bound``; a retention's
  ``evicts``. A broken promise fails with the declaration as the check and
  the context, the note and the values in the message;
- with ``engine=True``, :func:`check_engine_paths`: a small stream through
  the engine's fast paths and its reference gives identical results.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle  # noqa: TID251 - worker processes (--jobs) receive policies pickled
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from memsim.core.errors import ParameterError
from memsim.core.params import Interval, Options, Validated
from memsim.policies import SLOTS, ArrayContext, Component, Policy
from memsim.policies.base import (Breadth, ComponentOutputError, Ranker, Stickiness,
                                  build_from_spec, declared_for)
from memsim.data.planted import PlantedModel
from memsim.policies.context import MEMORY_TYPE_CODES, TIER_CODES, NoteAges
from memsim.policies.rank import minmax_sum
from memsim.core.rng import seed_sequence
from memsim.data.stream import make_stream
from memsim.data.workload import CLASS_NAMES, SyntheticWorkload

__all__ = ["CheckError", "check_component", "check_policy", "check_engine_paths",
           "random_context", "extreme_context"]

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
        except ComponentOutputError as exc:  # the slot's own check of what its method returned
            self.fail(exc.check or check, exc.detail)
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
    c.require(issubclass(cls, Validated), "validated", "not a memsim.core.params.Validated class")
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
    """Fresh notes of default salience: recency in [0, 1] and non-increasing
    in age at every tier (the declared bounds and forms are checked by
    :func:`_check_decay_promises`)."""
    ages = np.concatenate([[0.0], np.geomspace(1e-3, 1e5, 200)])
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
        form = c.call("exponential_form", comp.exponential_form, ctx)
        c.require(not comp.per_note_form or (form is not None and np.ndim(form[0])
                                             and np.ndim(form[1])), "per_note_form",
                  "per_note_form = True, but exponential_form() gave no per-note arrays")


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
    # what the engine passes: None for what the ranker declares it does not
    # read (a ranker that reads rel all the same fails "uses_similarity")
    call = "combine" if comp.uses_similarity else "uses_similarity"
    out = c.array(c.call(call, comp.combine, rel if comp.uses_similarity else None,
                         rec if comp.uses_recency else None, ctx), "combine", (q, n), "f")
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


def _redraw_uses(ctx: ArrayContext, seed: int, notes: np.ndarray | None = None) -> None:
    """Give a fresh context (nothing read yet) other uses: recalls, last
    uses, distinct actors and tiers drawn again (of the ``notes``, a bool
    mask, when given; of every note else)."""
    rng = np.random.default_rng(seed + 1000)
    n = len(ctx.idx)
    keep = np.zeros(n, dtype=bool) if notes is None else ~notes
    used = rng.random(n) < 0.5
    redrawn = {"last_access": np.where(used, ctx.created_at + rng.uniform(0.0, 9.0, n), np.nan),
               "recalls": np.where(used, rng.integers(1, 60, n), 0),
               "distinct_actors": np.where(used, rng.integers(1, 7, n), 0),
               "tier": rng.choice(list(TIER_CODES.values()), n)}
    for name, value in redrawn.items():
        setattr(ctx, name, np.where(keep, getattr(ctx, name), value))


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


# --------------------------------------------------------------------------
# Declared promises: the bounds, hints and closed forms the engine trusts
# --------------------------------------------------------------------------
#
# What a component declares beyond its slot's method lets the engine skip
# work (memsim.engine, "Pruning"): a wrong declaration silently changes
# results. Each promise is checked where it can break: on the extreme notes
# (:func:`extreme_context`), on the random contexts and on the caller's.

#: Ages (days) of the extreme notes: 0, tiny, ordinary, huge, and one scored
#: before its creation (every decay clamps a negative age to 0).
EXTREME_AGES = (0.0, 1e-9, 1e-3, 0.5, 30.0, 400.0, 1e5, 1e9, -1.0)
#: Uses of the extreme notes: (recalls, days since the last use as a share
#: of the age; NaN = never used).
EXTREME_USES = ((0, math.nan), (1, 0.0), (7, 0.5), (1000, 1.0))
#: Similarities of the ranker checks: the cosine's extremes and between.
EXTREME_SIMILARITIES = (-1.0, -0.5, -1e-9, 0.0, 1e-9, 0.25, 0.5, 0.75, 1.0 - 1e-9, 1.0)
#: Importances of the ranker checks.
EXTREME_IMPORTANCES = (0.0, 0.5, 1.0, 2.0)
#: (lowest, highest) recency handed to a ranker's bounds: what the engine
#: passes (a decay's floor or None, its upper bound, plus an access term).
RECENCY_RANGES = ((0.0, 1.0), (0.35, 1.0), (None, 1.0), (0.0, 2.5), (1.0, 1.0), (0.0, 0.0))
#: Relative slack of a bound for the rounding of a computed value.
_ROUND = 1e-12
_TIER_NAMES = {v: k for k, v in TIER_CODES.items()}
_TYPE_NAMES = {v: k for k, v in MEMORY_TYPE_CODES.items()}


def _r(x: Any) -> str:
    """``repr`` of a value, numpy scalars as Python ones (messages read 1.0,
    not np.float64(1.0))."""
    return repr(x.item() if isinstance(x, np.generic) else x)


def extreme_context(default_salience: bool = False) -> ArrayContext:
    """One query at t = 0 over the extreme notes: every age of
    :data:`EXTREME_AGES` x use of :data:`EXTREME_USES` x tier code; memory
    types, salience (1 when ``default_salience``), importance, distinct
    actors and pins drawn from a fixed seed."""
    rows = [(a, r, f, tier) for a in EXTREME_AGES for r, f in EXTREME_USES
            for tier in TIER_CODES.values()]
    age, recalls, frac, tier = (np.array(x) for x in zip(*rows))
    n = len(rows)
    rng = np.random.default_rng(0)
    used = recalls > 0
    created = -age
    return ArrayContext(
        t=0.0, created_at=created,
        last_access=np.where(used, np.maximum(created, -frac * age), np.nan),
        recalls=recalls, tier=tier,
        memory_type=rng.integers(0, len(MEMORY_TYPE_CODES), n),
        salience=1.0 if default_salience else rng.choice([0.25, 1.0, 2.0], n),
        importance=rng.choice(EXTREME_IMPORTANCES, n),
        distinct_actors=np.where(used, rng.choice([1, 2, 50], n), 0),
        pinned=rng.random(n) < 0.3, tokens=rng.integers(1, 2000, n),
        note_emb=rng.normal(size=(n, DIM)), query_emb=rng.normal(size=(1, DIM)),
        rng=np.random.default_rng(1))


def _note(ctx: Any, q: int, i: int, clock: str | None = None) -> str:
    """Where a check broke: a (query, note) cell of a context, in words."""
    def val(name: str) -> Any:
        try:
            v = np.asarray(getattr(ctx, name))
        except Exception:  # noqa: BLE001 - a context may lack a column
            return "?"
        return v[q, i] if v.ndim == 2 else v[i] if v.ndim == 1 else v

    parts = [f"note {i} of query {q}: age {float(val('age_created')):.6g} d"]
    if clock is not None and clock != "created":
        parts.append(f"{clock} age {float(np.asarray(ctx.age(clock))[q, i]):.6g} d")
    tier, mtype = val("tier"), val("memory_type")
    parts += [f"recalls {val('recalls')}", f"tier {_TIER_NAMES.get(int(tier), tier)}",
              f"memory type {_TYPE_NAMES.get(int(mtype), mtype)}",
              f"salience {float(val('salience')):.6g}"]
    return ", ".join(parts)


def _first(bad: np.ndarray) -> tuple[int, int]:
    q, i = np.unravel_index(int(np.flatnonzero(bad.ravel())[0]), bad.shape)
    return int(q), int(i)


def _first_difference(whole: np.ndarray, part: np.ndarray) -> tuple[int, int] | None:
    """The first cell (query, note) where ``part`` is not ``whole`` bit for
    bit (NaN equals NaN), or None."""
    bad = ~((part == whole) | (np.isnan(part) & np.isnan(whole)))
    return _first(bad) if bad.any() else None


def _promise_contexts(seed: int, contexts: Iterable[ContextFactory], sweep: bool = False
                      ) -> list[tuple[str, Any, bool]]:
    """(label, context, every note of default salience) to check promises on."""
    out = [("the extreme notes", extreme_context(), False),
           ("the extreme notes of default salience", extreme_context(True), True),
           (f"random_context(seed={seed})", random_context(seed, sweep), False)]
    for make in contexts:
        out.append((f"{getattr(make, '__name__', 'context')}(seed={seed})", make(seed, sweep),
                    False))
    return out


#: Note columns an :class:`ArrayContext` keeps per note (a subset keeps them).
_NOTE_COLUMNS = ("created_at", "updated_at", "last_access", "recalls", "tier", "memory_type",
                 "importance", "salience", "pinned", "distinct_actors", "tokens", "note_emb")


def _subset(ctx: Any, keep: np.ndarray) -> ArrayContext | None:
    """The :class:`ArrayContext` of the notes ``keep`` of ``ctx`` (None for
    another kind of context)."""
    if not isinstance(ctx, ArrayContext):
        return None
    cols = {k: np.asarray(getattr(ctx, k))[keep] for k in _NOTE_COLUMNS
            if getattr(ctx, k) is not None}
    sim = ctx._similarity
    return ArrayContext(t=ctx.t, query_emb=ctx.query_emb, rng=np.random.default_rng(3),
                        similarity=None if sim is None else np.asarray(sim)[:, keep], **cols)


def _elementwise(c: _Checker, check: str, what: str, f: Callable[[Any], Any], ctx: Any,
                 label: str) -> None:
    """A component that declares a bound declares itself elementwise (the
    engine may score any subset of the notes): ``f`` on a third of the
    notes gives their values among all of them."""
    keep = np.arange(0, len(ctx.idx), 3)
    sub = _subset(ctx, keep)
    if sub is None:
        return
    shape = (len(ctx.t), len(ctx.idx))
    whole = np.broadcast_to(np.asarray(c.call(what, f, ctx), dtype=np.float64), shape)[:, keep]
    part = np.broadcast_to(np.asarray(c.call(what, f, sub), dtype=np.float64), whole.shape)
    cell = _first_difference(whole, part)
    if cell is not None:
        q, i = cell
        c.fail(check, f"declaring {check}() declares {what} elementwise, but "
               f"{_note(ctx, q, int(keep[i]))} gets {_r(whole[q, i])} among all the notes and "
               f"{_r(part[q, i])} among a third of them ({label})")


def _check_decay_promises(c: _Checker, comp, seed: int, contexts) -> None:
    """``upper_bound`` (any note, any age), ``lower_bound`` (a note of default
    salience), ``reads_salience = False`` (the same multipliers whatever the
    notes' salience), ``exponential_form`` (equal to the recency) and
    ``half_life``."""
    hi = c.call("upper_bound", comp.upper_bound)
    lo = c.call("lower_bound", comp.lower_bound)
    if not comp.reads_salience:  # the engine then trusts lower_bound for every note
        varied, default = extreme_context(), extreme_context(True)
        got = [np.broadcast_to(np.asarray(c.call("recency", comp.recency,
                                                 np.asarray(x.age(comp.clock), np.float64), x),
                                          dtype=np.float64), (len(x.t), len(x.idx)))
               for x in (varied, default)]
        cell = _first_difference(got[1], got[0])
        if cell is not None:
            q, i = cell
            c.fail("reads_salience", f"reads_salience = False, but recency() = {_r(got[0][q, i])} "
                   f"for {_note(varied, q, i, comp.clock)} of salience "
                   f"{_r(np.asarray(varied.salience)[i])} and {_r(got[1][q, i])} at default "
                   "salience: declare reads_salience = True (the engine then trusts "
                   "lower_bound only where every note has default salience)")
    for name, v in (("upper_bound", hi), ("lower_bound", lo)):
        c.require(v is None or (isinstance(v, (int, float, np.floating)) and math.isfinite(v)),
                  name, f"{name}() = {_r(v)}: declare a finite number or None")
    alone = c.call("falls_with_age_alone", comp.falls_with_age_alone)
    if alone:
        _check_age_alone_curve(c, comp)
    for label, ctx, default_salience in _promise_contexts(seed, contexts):
        age = np.asarray(ctx.age(comp.clock), dtype=np.float64)
        rec = np.asarray(c.call("recency", comp.recency, age.copy(), ctx), dtype=np.float64)
        rec = np.broadcast_to(rec, age.shape)
        if alone:
            _check_age_alone(c, comp, age, rec, lo, label)
        if hi is not None:
            _elementwise(c, "upper_bound", "recency()",
                         lambda x: comp.recency(np.asarray(x.age(comp.clock), np.float64), x),
                         ctx, label)
            bad = ~(rec <= hi + _ROUND * max(1.0, abs(hi)))
            if bad.any():
                q, i = _first(bad)
                c.fail("upper_bound", f"recency() = {_r(rec[q, i])} > declared upper_bound() = "
                       f"{_r(hi)} for {_note(ctx, q, i, comp.clock)} ({label}); the engine "
                       "prunes with this bound: results would change")
        if lo is not None and default_salience:
            bad = ~(rec >= lo - _ROUND * max(1.0, abs(lo)))
            if bad.any():
                q, i = _first(bad)
                c.fail("lower_bound", f"recency() = {_r(rec[q, i])} < declared lower_bound() = "
                       f"{_r(lo)} for {_note(ctx, q, i, comp.clock)} ({label})")
        form = c.call("exponential_form", comp.exponential_form, ctx)
        if form is not None:
            try:
                floor, rate = (np.asarray(x, dtype=np.float64) for x in form)
                with np.errstate(over="ignore", invalid="ignore"):
                    want = np.broadcast_to(floor + (1.0 - floor) * np.exp(
                        -rate * np.maximum(age, 0.0)), age.shape)
            except (TypeError, ValueError) as exc:
                c.fail("exponential_form", f"exponential_form() = {_r(form)} is not (floor, "
                       f"rate) as scalars or per-note arrays ({exc}) ({label})")
            bad = ~np.isclose(want, rec, rtol=1e-9, atol=1e-15)
            if bad.any():
                q, i = _first(bad)
                c.fail("exponential_form", f"floor + (1 - floor) exp(-rate age) = {_r(want[q, i])}"
                       f" but recency() = {_r(rec[q, i])} for {_note(ctx, q, i, comp.clock)} "
                       f"({label})")
    _check_half_life(c, comp)


#: ages (days) on which a curve of the age alone must not rise: dense over
#: the first two months (a bump of a few minutes shows), sparse beyond
AGE_ALONE_GRID = np.unique(np.concatenate([np.linspace(0.0, 60.0, 86_401),
                                           np.geomspace(1e-6, 1e9, 20_001)]))


def _check_age_alone(c: _Checker, comp, age: np.ndarray, rec: np.ndarray, lo: float | None,
                     label: str) -> None:
    """``falls_with_age_alone()``: the same recency at the same age for any
    note (here, against fresh notes of default columns at those ages), never
    below ``lower_bound()`` (exactly: the engine takes a row's least recency
    at that bound for its least)."""
    flat = age.reshape(-1)
    own = np.asarray(c.call("recency", comp.recency, flat.copy(), _fresh_context(flat)),
                     dtype=np.float64).reshape(-1)
    bad = ~np.isclose(own, rec.reshape(-1), rtol=1e-12, atol=0.0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        c.fail("falls_with_age_alone", f"falls_with_age_alone() is True, but recency() = "
               f"{_r(rec.reshape(-1)[i])} for a note at age {_r(flat[i])} ({label}) and "
               f"{_r(own[i])} for a fresh note of default columns at that age; declare it "
               "only for a curve of the age alone")
    if lo is not None:
        c.require((rec >= lo).all(), "falls_with_age_alone",
                  f"falls_with_age_alone() is True, but recency() = {_r(rec.min())} < "
                  f"lower_bound() = {_r(lo)} ({label}): the engine reads a recency at the "
                  "bound as the least of any note")


def _check_age_alone_curve(c: _Checker, comp) -> None:
    """The declaration made where ``recency`` is defined, a curve that does
    not rise on :data:`AGE_ALONE_GRID`, and the same values on notes whose
    columns (importance, tokens, salience, recalls) take values far beyond
    the other contexts' (a curve that reads one of them shows)."""
    c.require(declared_for(comp, "falls_with_age_alone", "recency"), "falls_with_age_alone",
              f"falls_with_age_alone() is inherited from a class above the one that defines "
              f"recency() ({type(comp).__name__} overrides it): declare it again for this "
              "recency (or return False)")
    grid = AGE_ALONE_GRID
    own = np.asarray(c.call("recency", comp.recency, grid.copy(), _fresh_context(grid)),
                     dtype=np.float64).reshape(-1)
    up = np.flatnonzero(np.diff(own) > 1e-12 * np.abs(own[:-1]))
    if len(up):
        i = int(up[0])
        c.fail("falls_with_age_alone", f"falls_with_age_alone() is True, but recency() rises "
               f"with age: {_r(own[i])} at age {_r(grid[i])}, {_r(own[i + 1])} at "
               f"{_r(grid[i + 1])}")
    rng = np.random.default_rng(7)
    ages = rng.choice(grid, 500)
    wide = ArrayContext(t=0.0, created_at=-ages, importance=rng.uniform(0, 1e6, 500),
                        tokens=rng.integers(1, 10**6, 500), salience=rng.uniform(0, 100, 500),
                        recalls=rng.integers(0, 10**6, 500),
                        last_access=np.where(rng.random(500) < 0.5, -ages / 2, np.nan))
    age = np.asarray(wide.age(comp.clock), dtype=np.float64)
    rec = np.broadcast_to(np.asarray(c.call("recency", comp.recency, age.copy(), wide),
                                     dtype=np.float64), age.shape)
    _check_age_alone(c, comp, age, rec, None, "notes of far larger importance, tokens, "
                     "salience and recalls")


def _check_half_life(c: _Checker, comp) -> None:
    """``half_life()``: a fresh, never-used note of default salience (task
    tier, episodic) has halved its distance to the floor at that age. The
    floor is the declared ``lower_bound()`` or the curve's value at 1e15
    days (its limit); inf: the curve never falls; NaN: unknown."""
    h = c.call("half_life", comp.half_life)
    c.require(isinstance(h, (int, float, np.floating)) and (math.isnan(h) or h > 0),
              "half_life", f"half_life() = {_r(h)}: declare a number > 0, inf or NaN")
    if math.isnan(h):
        return
    ctx = _fresh_context([0.0, 1e15] if math.isinf(h) else [0.0, h, 1e15])
    rec = np.asarray(c.call("recency", comp.recency, ctx.age(comp.clock), ctx),
                     dtype=np.float64).reshape(-1)
    where = "a fresh note of default salience (task tier, episodic)"
    if math.isinf(h):
        c.require(np.isclose(rec[1], rec[0], rtol=1e-9, atol=0.0), "half_life",
                  f"half_life() = inf (never decays), but recency() falls from {_r(rec[0])} at "
                  f"age 0 to {_r(rec[1])} at 1e15 days for {where}")
        return
    r0, rh, rinf = rec
    floors = [float(rinf)]
    if comp.lower_bound() is not None and comp.lower_bound() != rinf:
        floors.append(float(comp.lower_bound()))
    ok = any(np.isclose(rh - f, 0.5 * (r0 - f), rtol=1e-6, atol=1e-9) for f in floors)
    c.require(ok, "half_life", f"half_life() = {_r(h)} days, but recency() there is {_r(rh)} for "
              f"{where}, not halfway from {_r(r0)} (age 0) to the floor "
              + " or ".join(f"{_r(f)}" for f in floors))


def _engine_prunes_with(ranker) -> bool:
    """Whether the engine consults the ranker's bounds at all (it never
    does for a set-dependent ranker or one that reads the truth, the
    planted model or a log, or chooses its own candidates)."""
    return not (ranker.set_dependent or ranker.needs_truth or ranker.needs_planted
                or ranker.needs_logged or ranker.chooses_candidates())


def _grid(lo: float | None, hi: float | None, recency: bool):
    """Cells (similarity, recency, importance) over the extreme values, and
    a context with one note per cell (one query at t = 0)."""
    recs = [None] if not recency else list(np.unique(np.linspace(
        0.0 if lo is None else lo, (0.0 if lo is None else lo) + 5.0 if hi is None else hi, 4)))
    cells = [(s, r, m) for s in EXTREME_SIMILARITIES for r in recs for m in EXTREME_IMPORTANCES]
    sim, rec, imp = zip(*cells)
    n = len(cells)
    rng = np.random.default_rng(2)
    ctx = ArrayContext(t=0.0, created_at=-rng.choice(EXTREME_AGES[:-1], n), importance=imp,
                       recalls=rng.integers(0, 50, n), similarity=np.array([sim]),
                       note_emb=rng.normal(size=(n, DIM)), query_emb=rng.normal(size=(1, DIM)),
                       rng=np.random.default_rng(3))
    rel = np.array([sim], dtype=np.float64)
    return rel, (None if not recency else np.array([rec], dtype=np.float64)), ctx


def _check_ranker_promises(c: _Checker, comp) -> None:
    """``score_bound`` (above the score of every note at or below the
    similarity, and an elementwise ``combine``) and ``similarity_needed``
    (below the similarity of every note reaching the score), for each
    recency range of :data:`RECENCY_RANGES`."""
    _check_minmax_weights(c, comp)
    declares_bound = type(comp).score_bound is not Ranker.score_bound
    declares_need = type(comp).similarity_needed is not Ranker.similarity_needed
    if not (declares_bound or declares_need) or not _engine_prunes_with(comp):
        return
    ranges = RECENCY_RANGES if comp.uses_recency else ((None, None),)
    for lo, hi in ranges:
        rel, rec, ctx = _grid(lo, hi, comp.uses_recency)
        score = np.asarray(c.call("combine", comp.combine,
                                  rel if comp.uses_similarity else None, rec, ctx),
                           dtype=np.float64)
        imp = np.asarray(ctx.importance)
        where = f"rec_lo={_r(lo)}, rec_hi={_r(hi)}"

        def cell(i: int, rel=rel, rec=rec, imp=imp) -> str:
            r = "" if rec is None else f", recency {_r(rec[0, i])}"
            return f"similarity {_r(rel[0, i])}{r}, importance {_r(imp[i])}"

        if declares_bound:
            bound = c.call("score_bound", comp.score_bound, rel, lo, hi, ctx)
            if bound is not None:
                bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), score.shape)
                bad = ~(score <= bound)
                if bad.any():
                    _, i = _first(bad)
                    c.fail("score_bound", f"combine() = {_r(score[0, i])} > score_bound() = "
                           f"{_r(bound[0, i])} ({where}) at {cell(i)}; the engine stops "
                           "scoring with this bound: results would change")
                # the engine's use: one bound at a similarity covers every note
                # at or below it
                sims = np.array([EXTREME_SIMILARITIES], dtype=np.float64)
                up = np.asarray(c.call("score_bound", comp.score_bound, sims, lo, hi, ctx),
                                dtype=np.float64).reshape(-1)
                for k, s in enumerate(sims[0]):
                    below = np.flatnonzero(rel[0] <= s)
                    i = below[np.argmax(score[0, below])]
                    c.require(score[0, i] <= up[k], "score_bound",
                              f"score_bound() at similarity {_r(s)} = {_r(up[k])} ({where}), but "
                              f"a note below it scores {_r(score[0, i])}: {cell(i)}; the "
                              "bound must hold for every note at or below the similarity")
                _check_elementwise(c, comp, rel, rec, ctx, score, where)
        if declares_need and hi is not None:
            for his, what in ((np.full(score.shape, float(hi)), f"rec_hi={_r(hi)}"),
                              (rec, "rec_hi = the note's own recency")):
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                    need = c.call("similarity_needed", comp.similarity_needed, score, lo, his,
                                  ctx)
                if need is None:
                    continue
                need = np.broadcast_to(np.asarray(need, dtype=np.float64), score.shape)
                bad = need > rel  # NaN reads as "every note may" (-inf), as in the engine
                if bad.any():
                    _, i = _first(bad)
                    c.fail("similarity_needed",
                           f"similarity_needed(score={_r(score[0, i])}, rec_lo={_r(lo)}, {what}) "
                           f"= {_r(need[0, i])}, above the similarity of a note that scores "
                           f"{_r(score[0, i])}: {cell(i)}; the engine would leave it out")


def _check_minmax_weights(c: _Checker, comp) -> None:
    """``minmax_weights()``: ``combine`` is ``minmax_sum`` of the recency,
    the importance and the similarity with those weights, bit for bit (the
    ``"minmax"`` accelerator computes a note's score from those terms)."""
    weights = c.call("minmax_weights", comp.minmax_weights)
    if weights is None:
        return
    c.require(len(weights) == 3 and comp.uses_recency and comp.uses_similarity,
              "minmax_weights", "minmax_weights() must be three weights (recency, importance, "
              "similarity) of a ranker that reads both the recency and the similarity")
    c.require(declared_for(comp, "minmax_weights", "combine"), "minmax_weights",
              f"minmax_weights() is inherited from a class above the one that defines "
              f"combine() ({type(comp).__name__} overrides it): declare it again for this "
              "combine (or return None)")
    ctx = random_context(0)  # (its live mask leaves some notes out)
    q, n = len(ctx.t), len(ctx.idx)
    rng = np.random.default_rng(0)
    rel, rec = rng.uniform(-1, 1, (q, n)), rng.uniform(0, 1, (q, n))
    live = np.asarray(ctx.live, dtype=bool)
    for what, importance in (("", ctx.importance),
                             (" (importances from 0 to 10)", rng.uniform(0, 10, n)),
                             (" (importances up to 1e6)", rng.uniform(0, 1e6, n)),
                             (" (tied importances)", rng.choice([1.0, 10.0, 1000.0], n)),
                             (" (equal importances)", np.full(n, 3.0))):
        ctx.importance = importance
        got = np.asarray(c.call("combine", comp.combine, rel, rec, ctx), dtype=np.float64)
        want = minmax_sum([(weights[0], rec), (weights[1], ctx.importance), (weights[2], rel)],
                          live)
        c.require(np.array_equal(np.where(live, got, 0.0), np.where(live, want, 0.0),
                                 equal_nan=True),
                  "minmax_weights", f"minmax_weights() = {weights}, but combine() is not "
                  "minmax_sum of the recency, importance and similarity with those "
                  f"weights{what}")


def _ranker_outputs(c: _Checker, comp, ctx, keep: np.ndarray | None = None
                    ) -> list[tuple[str, np.ndarray]]:
    """A ranker's ``combine`` (at the relevance and recency
    ``_run_ranker`` gives, each passed where the ranker reads it) and, for
    one that chooses its candidates, ``candidate_mask``, on ``ctx``: (the
    method, its (Q, L) values as floats). ``keep``: ``ctx`` holds those
    notes of the context whose relevance and recency it gets (its
    ``whole``)."""
    source = ctx if keep is None else ctx.whole[0]
    rel = np.asarray(source.dots, dtype=np.float64) / 10.0  # as _run_ranker's
    rec = np.clip(np.asarray(source.age_created) / -400.0 + 1.0, 0.0, 1.0)
    if keep is not None:
        rel, rec = rel[:, keep], np.broadcast_to(rec, rel.shape[:1] + rec.shape[-1:])[:, keep]
    calls = [("combine", (rel if comp.uses_similarity else None,
                          rec if comp.uses_recency else None))]
    if comp.chooses_candidates():
        calls.append(("candidate_mask", ()))
    shape = (len(ctx.t), len(ctx.idx))
    return [(name, np.broadcast_to(np.asarray(c.call(name, getattr(comp, name), *args, ctx),
                                              dtype=np.float64), shape))
            for name, args in calls]


def _first_output_difference(pairs: Iterable[tuple[str, np.ndarray, np.ndarray]]
                             ) -> tuple[str, int, int, float, float] | None:
    """The first cell where two values of one of a ranker's outputs differ
    bit for bit (:func:`_first_difference`), over ``(method, values,
    other values)`` of equal shapes: (method, query, column, value, other
    value), or None."""
    for name, a, b in pairs:
        cell = _first_difference(a, b)
        if cell is not None:
            return name, *cell, float(a[cell]), float(b[cell])
    return None


def _check_scores_cells(c: _Checker, comp, seed: int, contexts) -> None:
    """``scores_cells``: given chosen cells of a context (``ctx.whole``:
    here every third note of each query), ``combine`` and
    ``candidate_mask`` give each cell what it gets on the whole context
    (the engine scores only a ranker's own candidates with it)."""
    if not comp.scores_cells:
        return
    for label, ctx, _ in _promise_contexts(seed, contexts):
        q, n = len(ctx.t), len(ctx.idx)
        keep = np.arange(0, n, 3)
        sub = _subset(ctx, keep)
        if sub is None:
            continue
        sub.live = None if ctx.live is None else np.asarray(ctx.live)[:, keep]
        sub.whole = (ctx, np.arange(q)[:, None] * n + keep[None, :])
        found = _first_output_difference(
            (name, whole[:, keep], part) for (name, whole), (_, part)
            in zip(_ranker_outputs(c, comp, ctx), _ranker_outputs(c, comp, sub, keep)))
        if found is not None:
            name, qi, i, whole, part = found
            c.fail("scores_cells", f"declaring scores_cells declares that chosen cells "
                   f"(ctx.whole) get their values in the whole context, but "
                   f"{_note(ctx, qi, int(keep[i]))} gets {name}() = {_r(whole)} in "
                   f"the whole context and {_r(part)} among a third of its notes ({label})")


def _check_sets_read_uses(c: _Checker, comp, seed: int, contexts) -> None:
    """``sets_read_uses`` False: drawing again the uses of every other note
    (recalls, last use, distinct actors, tier) changes neither the
    ranker's candidates (``candidate_mask``) nor ``combine`` at the notes
    whose uses stayed (the engine then rescores only the notes used before
    a query)."""
    if comp.sets_read_uses:
        return
    for label, ctx, _ in _promise_contexts(seed, contexts):
        n = len(ctx.idx)
        kept, other = _subset(ctx, np.arange(n)), _subset(ctx, np.arange(n))
        if kept is None:
            continue
        moved = np.arange(n) % 2 == 1
        _redraw_uses(other, seed, moved)
        kept.live = other.live = ctx.live
        # the scores compared at the notes whose uses stayed, the candidates at every note
        cols = {"combine": np.flatnonzero(~moved), "candidate_mask": np.arange(n)}
        found = _first_output_difference(
            (name, before[:, cols[name]], after[:, cols[name]]) for (name, before), (_, after)
            in zip(_ranker_outputs(c, comp, kept), _ranker_outputs(c, comp, other)))
        if found is not None:
            name, qi, i, before, after = found
            c.fail("sets_read_uses", f"declaring sets_read_uses False declares that a "
                   f"note's uses change no other note's candidacy or score, but "
                   f"{_note(ctx, qi, int(cols[name][i]))} gets {name}() = {_r(before)}, and "
                   f"{_r(after)} when the uses of every other note are drawn again ({label})")


def _check_elementwise(c: _Checker, comp, rel, rec, ctx, score, where: str) -> None:
    """A ranker that declares a bound declares ``combine`` elementwise: the
    score of a cell is the same when only some of the notes are scored."""
    keep = np.arange(0, rel.shape[1], 3)
    part = np.asarray(c.call("combine", comp.combine, rel[:, keep],
                             None if rec is None else rec[:, keep], _subset(ctx, keep)),
                      dtype=np.float64)
    bad = ~((part == score[:, keep]) | (np.isnan(part) & np.isnan(score[:, keep])))
    if bad.any():
        _, i = _first(bad)
        c.fail("score_bound", f"declaring score_bound() declares combine() elementwise, but a "
               f"note scores {_r(score[0, keep[i]])} among all the notes and {_r(part[0, i])} "
               f"among a third of them ({where})")


def _bounded(c: _Checker, check: str, value: Any, bound: float, shape: tuple, label: str,
             ctx: Any, what: str) -> None:
    v = np.broadcast_to(np.asarray(value, dtype=np.float64), shape)
    bad = ~(v <= bound + _ROUND * max(1.0, abs(bound)))
    if bad.any():
        q, i = _first(bad)
        c.fail(check, f"{what} = {_r(v[q, i])} > declared {check}() = {_r(bound)} for "
               f"{_note(ctx, q, i)} ({label}); the engine prunes with this bound")


def _check_stickiness_breadth_promises(c: _Checker, comp, seed: int, contexts) -> None:
    """``access_term_bound``, ``access_factor_bound`` and ``score_factor_bound``
    (1 only when the factor is exactly 1) hold on every note of a context."""
    for label, ctx, _ in _promise_contexts(seed, contexts):
        shape = (len(ctx.t), len(ctx.idx))
        if isinstance(comp, Stickiness):
            b = c.call("access_term_bound", comp.access_term_bound, ctx)
            if b is not None:
                _elementwise(c, "access_term_bound", "effective_age()", lambda x: (
                    comp.effective_age(np.asarray(x.age_created, np.float64), x)), ctx, label)
                _elementwise(c, "access_term_bound", "access_term()", comp.access_term, ctx,
                             label)
                _bounded(c, "access_term_bound", c.call("access_term", comp.access_term, ctx),
                         b, shape, label, ctx, "access_term()")
        elif isinstance(comp, Breadth):
            b = c.call("access_factor_bound", comp.access_factor_bound, ctx)
            if b is not None:
                _elementwise(c, "access_factor_bound", "on_access()", comp.on_access, ctx, label)
                _bounded(c, "access_factor_bound", c.call("on_access", comp.on_access, ctx), b,
                         shape, label, ctx, "on_access()")
            b = c.call("score_factor_bound", comp.score_factor_bound, ctx)
            if b is not None:
                _elementwise(c, "score_factor_bound", "on_score()", comp.on_score, ctx, label)
                f = np.broadcast_to(np.asarray(c.call("on_score", comp.on_score, ctx),
                                               dtype=np.float64), shape)
                bad = ~(f == 1.0) if b == 1.0 else ~(f <= b)
                if bad.any():
                    q, i = _first(bad)
                    c.fail("score_factor_bound", f"score_factor_bound() = {_r(b)} but on_score() "
                           f"= {_r(f[q, i])} for {_note(ctx, q, i)} ({label})")


def _check_retention_promises(c: _Checker, comp, seed: int, contexts) -> None:
    """``evicts = False``: the engine skips the sweeps, so the retention must
    never evict."""
    if comp.evicts:
        return
    for label, ctx, _ in _promise_contexts(seed, contexts, sweep=True):
        out = np.asarray(c.call("evict", comp.evict, ctx), dtype=bool)
        if out.any():
            i = int(np.flatnonzero(out)[0])
            c.fail("evicts", f"evicts = False (the engine skips its sweeps), but evict() "
                   f"evicts {_note(ctx, 0, i)} ({label})")


def _check_retriever_promises(c: _Checker, comp, seed: int, contexts) -> None:
    """``per_cell``: every third note against every other query (a context of
    those alone) gets the floats it gets in the whole context, bit for bit:
    the engine computes such a similarity on the cells an arm scores only."""
    if not comp.per_cell:
        return
    for label, ctx, _ in _promise_contexts(seed, contexts):
        if not isinstance(ctx, ArrayContext) or ctx.note_emb is None or ctx.query_emb is None:
            continue
        rows, keep = np.arange(0, len(ctx.t), 2), np.arange(0, len(ctx.idx), 3)
        sub = _subset(ctx, keep)
        sub = ArrayContext(t=ctx.t[rows], query_emb=np.asarray(ctx.query_emb)[rows],
                           **{k: getattr(sub, k) for k in _NOTE_COLUMNS
                              if getattr(sub, k) is not None})
        whole = np.asarray(c.call("similarity", comp.similarity, ctx))[np.ix_(rows, keep)]
        part = np.asarray(c.call("similarity", comp.similarity, sub))
        cell = _first_difference(whole, part)
        if cell is not None:
            q, i = cell
            c.fail("per_cell", f"per_cell = True (the engine computes only the cells it "
                   f"scores), but {_note(ctx, int(rows[q]), int(keep[i]))} gets similarity "
                   f"{_r(whole[q, i])} in the whole context and {_r(part[q, i])} with every "
                   f"third note and every other query ({label})")


def _check_promises(c: _Checker, comp: Component, seed: int, contexts) -> None:
    slot = comp.slot
    if slot == "retriever":
        _check_retriever_promises(c, comp, seed, contexts)
    elif slot == "decay":
        _check_decay_promises(c, comp, seed, contexts)
    elif slot == "ranker":
        _check_ranker_promises(c, comp)
        _check_scores_cells(c, comp, seed, contexts)
        _check_sets_read_uses(c, comp, seed, contexts)
    elif slot in ("stickiness", "breadth"):
        _check_stickiness_breadth_promises(c, comp, seed, contexts)
    elif slot == "retention":
        _check_retention_promises(c, comp, seed, contexts)


# --------------------------------------------------------------------------
# How the engine calls a component: rows packed together, chosen cells
# --------------------------------------------------------------------------
#
# The engine packs (and orders) several arms' rows, or a batch's queries, in
# one call, and scores chosen cells of a context (a prefilter's candidates,
# the pruned scoring's, the per-query walk's) on a context whose matrices
# and note vectors are (R, W). A component that reads across rows, or
# across the notes of a query without declaring ``set_dependent``, or that
# treats a note vector as 1-D, gives other results in the engine than in
# the checks above: these checks call it as the engine does.

#: Rows of the packer and orderer row checks.
N_ROWS = 8

#: The rule a packer and an orderer follow, in the messages.
ROWS_RULE = {
    "packer": ("a packer packs each row on its own, from that row's values, tokens, validity "
               "and budget alone (never from the other rows of the call: the engine packs "
               "several arms' rows, or a batch's queries, in one call)"),
    "orderer": ("an orderer orders each row on its own, from that row's values and packed "
                "flags alone (never from the other rows of the call: the engine orders several "
                "arms' rows, or a batch's queries, in one call)"),
}

#: The shape rule of gathered cells, in the messages.
CELLS_RULE = ("the engine scores chosen cells of a context (a prefilter's candidates, the "
              "pruned scoring's, the per-query walk's) on a context whose matrices and note "
              "vectors (importance, tokens, recalls, tier, ...) are all (R, W): R query rows, "
              "W notes each, ctx.idx an (R, W) matrix. Note vectors broadcast against the "
              "similarity's shape: use elementwise operations and broadcasting, never reshape "
              "or index a note vector as 1-D (no .reshape(1, -1), [None, :] or len(ctx.idx))")

#: What a ranker that does not declare set_dependent promises, in the messages.
SET_DEPENDENT_RULE = ("a ranker that does not declare set_dependent = True scores each "
                      "(query, note) cell from that cell's own inputs, whichever other notes "
                      "the context holds and in whatever order (the engine scores a "
                      "prefilter's candidates, pruned cells and, with per-query feedback, "
                      "the used notes alone); declare set_dependent: ClassVar[bool] = True "
                      "when a score depends on the other notes (a normalisation over the "
                      "candidates, a rank)")


def _pack_rows_problem(rng: np.random.Generator, q: int) -> tuple[np.ndarray, ...]:
    """A packing problem of ``q`` rows that differ in scale, validity and
    budget: values sorted best first (each row's own scale), tokens,
    valid, budgets (one row may get 0)."""
    k = N_CANDIDATES
    scale = rng.uniform(0.05, 3.0, (q, 1))
    values = -np.sort(-rng.uniform(-0.2, 1.0, (q, k)), axis=1) * scale
    tokens = rng.integers(1, 400, (q, k)).astype(np.int64)
    valid = rng.random((q, k)) < 0.85
    budget = rng.integers(0, 2400, q).astype(np.int64)
    return values, tokens, valid, budget


def _rows_call(c: _Checker, comp, arrays: tuple[np.ndarray, ...], rows: np.ndarray
               ) -> np.ndarray:
    """The packer's ``pack`` (or the orderer's ``order``) on the ``rows``
    of ``arrays``, as an array."""
    args = [np.array(a[rows]) for a in arrays]
    if comp.slot == "packer":
        if getattr(comp, "needs_similarity", False):  # as _run_packer passes it
            args.append(np.clip(args[0] + 0.1, -1.0, 1.0))
        return np.asarray(c.call("pack", comp.pack, *args))
    return np.asarray(c.call("order", comp.order, *args))


def _check_rows(c: _Checker, comp, seed: int) -> None:
    """A packer (an orderer) gives each row what it gives that row alone,
    whichever rows share the call and in whatever order: each row of a
    problem of :data:`N_ROWS` rows packed in one call, row by row, and
    shuffled among the rows of another problem."""
    if comp.slot not in ("packer", "orderer"):
        return
    rng = np.random.default_rng(seed + 11)
    method = "pack" if comp.slot == "packer" else "order"
    for _ in range(2):
        values, tokens, valid, budget = _pack_rows_problem(rng, N_ROWS)
        if comp.slot == "packer":
            arrays: tuple[np.ndarray, ...] = (values, tokens, valid, budget)
        else:  # what the engine orders: the packed candidates' values, -inf elsewhere
            packed = valid & (rng.random(valid.shape) < 0.6)
            arrays = (np.where(valid, values, -np.inf), packed)
        other = _pack_rows_problem(rng, 5)
        if comp.slot == "orderer":
            other = (np.where(other[2], other[0], -np.inf), other[2] & (other[1] < 200))
        whole = _rows_call(c, comp, arrays, np.arange(N_ROWS))
        perm = rng.permutation(N_ROWS)
        mixed = _rows_call(c, comp, tuple(np.concatenate([a[perm], b]) for a, b
                                          in zip(arrays, other)),
                           np.arange(N_ROWS + len(other[0])))[:N_ROWS]
        for r in range(N_ROWS):
            alone = _rows_call(c, comp, arrays, np.array([r]))[0]
            among = mixed[int(np.flatnonzero(perm == r)[0])]
            for got, how in ((alone, "alone"), (among, "shuffled among other rows")):
                if not np.array_equal(whole[r], got):
                    c.fail("independent rows", f"{method}() gives row {r} "
                           f"{_r(whole[r].astype(np.int64).tolist())} in a call of {N_ROWS} "
                           f"rows and {_r(got.astype(np.int64).tolist())} {how}: "
                           f"{ROWS_RULE[comp.slot]}")


class _CellsContext(NoteAges):
    """Chosen cells of an :class:`ArrayContext` as the engine's gathered
    context gives them: for the queries ``rows`` (R,), the note columns
    ``cols``, (R, W) (each row its own notes, in any order) or (W,) (the
    same notes for every row). Matrices and note vectors take the shape of
    ``cols`` broadcast against ``rows[:, None]``; every value is the whole
    context's at that cell, computed by the same float operations. Like the
    engine's, it offers no embeddings (``note_vectors``, ``query_vectors``):
    a component that reads them is scored by whole rows."""

    def __init__(self, ctx: ArrayContext, rows: np.ndarray, cols: np.ndarray):
        self._ctx, self._rows, self._cols = ctx, rows, cols
        n = len(ctx.idx)
        self.t = ctx.t[rows]
        self.idx = ctx.idx[cols]
        self.rng = np.random.default_rng(0)
        full_live = np.ones((len(ctx.t), n), dtype=bool) if ctx.live is None else ctx.live
        self.live = self._cells(full_live)
        self.whole = (ctx, rows[:, None] * n + cols)
        self.planted = ctx.planted

    def _cells(self, mat: np.ndarray) -> np.ndarray:
        return np.asarray(mat)[self._rows[:, None], self._cols]

    def _at(self, col: np.ndarray) -> np.ndarray:
        return np.asarray(col)[self._cols]

    def __getattr__(self, name: str) -> Any:
        if name in ("tokens", "importance", "salience", "pinned", "memory_type", "recalls",
                    "tier", "distinct_actors", "note_class", "note_actor", "superseded_at"):
            return self._at(getattr(self._ctx, name))
        if name in ("dots", "gains", "logged_rank", "logged_score"):
            m = getattr(self._ctx, name)
            return None if m is None else self._cells(m)
        raise AttributeError(name)

    @property
    def qnorm2(self) -> np.ndarray:
        return self._ctx.qnorm2[self._rows]

    @property
    def nnorm2(self) -> np.ndarray:
        return self._at(self._ctx.nnorm2)

    @property
    def query_actor(self) -> np.ndarray:
        return self._ctx.query_actor[self._rows]

    def similarity(self, retriever: Any) -> np.ndarray:
        return self._cells(self._ctx.similarity(retriever))

    def _note_times(self, name: str) -> np.ndarray:
        return self._at(getattr(self._ctx, name))


#: The outputs of a scoring component that are one value per cell (the
#: others may be scalars or anything that broadcasts to the cells).
_PER_CELL = ("recency", "effective_age", "combine")


class _CellShapeError(Exception):
    """An output of :func:`_cell_outputs` of another shape than the cells'."""


def _cell_outputs(comp, ctx: Any, rel: np.ndarray, rec: np.ndarray
                  ) -> list[tuple[str, np.ndarray]]:
    """What a scoring component computes per cell on ``ctx``: (method, its
    values as floats of the context's cells); ``rel`` and ``rec`` are the
    ranker's inputs at those cells. Raises what the component raises, and
    :class:`_CellShapeError` for an output that is not one value per cell
    (or, for a term or factor, does not broadcast to the cells)."""
    shape = np.shape(ctx.idx) if np.ndim(ctx.idx) == 2 else (len(ctx.t), len(ctx.idx))
    if comp.slot == "decay":
        outs = [("recency", comp.recency(np.asarray(ctx.age(comp.clock), np.float64), ctx))]
    elif comp.slot == "stickiness":
        outs = [("effective_age", comp.effective_age(np.asarray(ctx.age_created, np.float64),
                                                     ctx)),
                ("access_term", comp.access_term(ctx))]
    elif comp.slot == "breadth":
        outs = [("on_access", comp.on_access(ctx)), ("on_score", comp.on_score(ctx))]
    else:
        outs = [("combine", comp.combine(rel if comp.uses_similarity else None,
                                         rec if comp.uses_recency else None, ctx))]
    got = []
    for name, v in outs:
        v = np.asarray(v, dtype=np.float64)
        try:
            if name in _PER_CELL and v.shape != shape:
                raise ValueError
            got.append((name, np.broadcast_to(v, shape)))
        except ValueError:
            raise _CellShapeError(f"{name}() returned shape {v.shape}, expected {shape}, one "
                                  "value per cell") from None
    return got


def _engine_gathers(comp) -> bool:
    """Whether the engine may score the component on gathered cells: any
    decay, stickiness and breadth (with a ranker it gathers); a ranker it
    scores cell by cell (:func:`memsim.engine.cells._cells_scorable`), or
    one that chooses its candidates and scores cells of them."""
    if comp.slot != "ranker":
        return comp.slot in ("decay", "stickiness", "breadth")
    return _engine_prunes_with(comp) or (comp.chooses_candidates() and comp.scores_cells)


def _check_cells(c: _Checker, comp, seed: int) -> None:
    """A scoring component as the engine scores chosen cells.

    A ranker that does not declare ``set_dependent``: on a third of the
    notes, reordered, each cell scores what it scores among all of them.
    Every component the engine may score on gathered cells: on (R, W)
    cells (queries repeated and reordered, each row its own notes in any
    order, note vectors (R, W)), it runs, returns one value per cell, and
    each cell gets its value on the whole context."""
    if comp.slot not in ("decay", "stickiness", "breadth", "ranker"):
        return
    ctx = random_context(seed)
    q, n = len(ctx.t), len(ctx.idx)
    rel = np.asarray(ctx.dots, dtype=np.float64) / 10.0  # as _run_ranker's
    rec = np.clip(np.asarray(ctx.age_created) / -400.0 + 1.0, 0.0, 1.0)
    try:
        whole = _cell_outputs(comp, ctx, rel, rec)
    except AttributeError:  # reads what these contexts lack: the engine scores whole rows
        return
    except Exception as exc:  # noqa: BLE001 - a crash is a failed check
        c.fail(_whole_check(comp), _crash(exc))
    rng = np.random.default_rng(seed + 13)
    probes = []
    if comp.slot == "ranker" and not comp.set_dependent:
        probes.append(("set_dependent", np.arange(q), rng.permutation(n)[: n // 3],
                       "among a third of the notes, reordered"))
    if _engine_gathers(comp):
        rows = np.concatenate([rng.permutation(q), rng.integers(0, q, 2)])
        cols = np.stack([rng.choice(n, n // 4, replace=False) for _ in rows])
        probes.append(("gathered cells", rows, cols,
                       f"among gathered cells ({len(rows)} query rows of {n // 4} notes each, "
                       "queries repeated and reordered, note vectors of that shape)"))
    for check, rows, cols, how in probes:
        part_ctx = _CellsContext(ctx, rows, cols)
        try:
            part = _cell_outputs(comp, part_ctx, rel[rows[:, None], cols],
                                 rec[rows[:, None], cols])
        except AttributeError:
            continue
        except Exception as exc:  # noqa: BLE001 - a crash on cells is a failed check
            detail = _crash(exc)
            if np.ndim(cols) == 2:
                c.fail("gathered cells", f"{detail} {how}: {CELLS_RULE}")
            c.fail(_whole_check(comp), f"{detail} {how}")
        for (name, w), (_, p) in zip(whole, part):
            cell = _first_difference(w[rows[:, None], cols], p)
            if cell is None:
                continue
            r, j = cell
            qi, i = int(rows[r]), int(cols[j] if np.ndim(cols) == 1 else cols[r, j])
            got = (f"{_note(ctx, qi, i)} gets {name}() = {_r(w[qi, i])} on the whole "
                   f"context and {_r(p[r, j])} {how}")
            if comp.slot != "ranker":
                c.fail(check, f"{got}: {comp.slot} values are computed cell by cell (the "
                       f"engine scores chosen cells): each from that cell's own inputs")
            if comp.set_dependent:  # gathered with ctx.whole: scores_cells
                c.fail("scores_cells", f"{got}: declaring scores_cells declares that chosen "
                       "cells (ctx.whole) get their values in the whole context")
            c.fail("set_dependent", f"{got}: {SET_DEPENDENT_RULE}")


def _crash(exc: Exception) -> str:
    """What a component's exception says, in a check's message."""
    if isinstance(exc, ComponentOutputError):
        return exc.detail
    if isinstance(exc, _CellShapeError):
        return str(exc)
    return f"raised {type(exc).__name__}: {exc}"


def _whole_check(comp) -> str:
    """The check a crash on the whole context is reported under."""
    return {"decay": "recency", "ranker": "combine"}.get(comp.slot, comp.slot)


# --------------------------------------------------------------------------
# The engine's fast paths against its reference
# --------------------------------------------------------------------------


# ---- The one place that switches the engine's accelerators ----------------
def _simulate(stream, arms, settings, seed, accelerated: bool):
    """:func:`memsim.engine.simulate` with every accelerator on
    (:data:`memsim.engine.ACCELERATORS`), or the reference engine
    (:func:`memsim.engine.reference.simulate`: every live note scored,
    per-query feedback replayed query by query)."""
    from memsim.engine import ACCELERATORS, reference, simulate

    if not accelerated:
        return reference.simulate(stream, arms, settings, seed)
    return simulate(stream, arms, settings, seed, accelerators=ACCELERATORS)
# ----------------------------------------------------------------------------


#: Notes of :func:`_engine_stream`: enough that pruning leaves most of them
#: unscored (a decay declaring a wrong upper bound then changes rankings).
N_ENGINE_NOTES = 1000


def _engine_stream(seed: int):
    """A small synthetic stream: 1,000 notes over 60 days of mixed tiers,
    types, importance and salience, 40 queries with a few judged notes
    each, the default workload's planted model (for ``bayes``) and a
    logged ranking of 5 notes per query (for ``as-logged``)."""
    rng = np.random.default_rng(seed)
    n, q, dim = N_ENGINE_NOTES, 40, 8
    created = np.sort(rng.uniform(-30.0, 30.0, n))
    notes = pd.DataFrame({
        "note_id": np.arange(n), "created_at": created,
        "tokens": rng.integers(10, 400, n), "actor": rng.choice(["a", "b", "c"], n),
        "tier": rng.choice(list(TIER_CODES), n), "importance": rng.uniform(0.0, 2.0, n),
        "salience": rng.uniform(0.25, 2.0, n),
        "memory_type": rng.choice(["episodic", "semantic", "procedural"], n, p=[.6, .2, .2]),
        "pinned": rng.random(n) < 0.1, "note_class": rng.choice(list(CLASS_NAMES), n)})
    t = np.sort(rng.uniform(0.0, 30.0, q))
    queries = pd.DataFrame({"query_id": np.arange(q), "t": t, "actor": rng.choice(["a", "b"], q)})
    rows = [(qi, int(ni), float(rng.choice([1.0, 0.5, -0.5])))
            for qi, tq in enumerate(t) for ni in rng.choice(np.flatnonzero(created <= tq), 4,
                                                            replace=False)]
    # a production system's logged rankings, for the as-logged ranker
    logged = [(qi, k + 1, int(ni), 1.0 / (k + 1)) for qi, tq in enumerate(t)
              for k, ni in enumerate(rng.choice(np.flatnonzero(created <= tq), 5, replace=False))]
    return make_stream(notes, queries, pd.DataFrame(rows, columns=["query_id", "note_id", "gain"]),
                       note_embeddings=rng.normal(size=(n, dim)).astype(np.float32),
                       query_embeddings=rng.normal(size=(q, dim)).astype(np.float32),
                       meta={"name": "check-engine-paths", "source": "memsim.data.workload",
                             "config": SyntheticWorkload().to_config()},
                       retrieved=pd.DataFrame(logged, columns=["query_id", "rank", "note_id",
                                                               "score"]))


def check_engine_paths(component_or_policy: Any, *, seed: int = 0) -> None:
    """Run a component (in a policy of defaults) or a policy through the
    engine's fast paths and its reference on a small synthetic stream, and
    require identical results. A ranker that declares ``minmax_weights``
    also runs over Generative Agents' decay, and a decay that declares
    ``falls_with_age_alone`` under the ``weighted-sum`` ranker, with the
    ``"minmax"`` accelerator on at this size.

    The stream (:func:`_engine_stream`) is replayed with per-tick and with
    per-query feedback, once with every accelerator on (pruned scoring, the
    corrected per-query tick) and once with the reference alone; every
    frame (queries, rankings, store, arms) must be equal bit for bit.

    Raises
    ------
    CheckError
        ``check = "engine paths"``, naming the first query and column that
        differ and both values.
    """
    from memsim.engine import Arm, SimSettings
    from memsim.engine.minmax import at_any_size
    from memsim.policies.decay import GenerativeAgentsRecency
    from memsim.policies.rank import WeightedSum

    if isinstance(component_or_policy, Policy):
        policy, label = component_or_policy, "policy (" + ", ".join(
            f"{slot}={getattr(component_or_policy, slot).name}" for slot in SLOTS) + ")"
    else:
        comp = component_or_policy
        label = _label(comp)
        if isinstance(comp, type):
            comp = comp()
        policy = Policy(**{comp.slot: comp})
    c = _Checker(label)
    stream = _engine_stream(seed)
    arms = [Arm("p", policy)]
    if not isinstance(component_or_policy, Policy):
        # the "minmax" accelerator serves a min-max ranker over a curve of the
        # age alone: the component beside its partner of the other kind
        if comp.slot == "ranker" and comp.minmax_weights() is not None:
            arms.append(Arm("minmax", Policy(ranker=comp, decay=GenerativeAgentsRecency())))
        elif comp.slot == "decay" and comp.falls_with_age_alone():
            arms.append(Arm("minmax", Policy(decay=comp, ranker=WeightedSum())))
    for mode in ("per-tick", "per-query"):
        settings = SimSettings(candidates=8, budget_tokens=800, feedback_mode=mode,
                               save_rankings=True)
        runs = []
        for on in (False, True):
            with at_any_size():
                runs.append(c.call("simulate", _simulate, stream, arms, settings,
                                   seed_sequence(seed), on))
        ref, fast = runs
        for name in ("rankings", "queries", "store", "arms"):
            a, b = getattr(ref, name), getattr(fast, name)
            if a is None and b is None:
                continue
            try:
                pd.testing.assert_frame_equal(a, b, check_exact=True)
            except AssertionError:
                c.fail("engine paths", f"with feedback {mode}: the fast paths give another "
                       f"{name} frame than the reference: {_frame_difference(a, b)}")


def _frame_difference(a: pd.DataFrame | None, b: pd.DataFrame | None) -> str:
    """The first difference of two frames, in words."""
    if a is None or b is None or a.shape != b.shape or list(a.columns) != list(b.columns):
        return (f"shapes {None if a is None else a.shape} (reference) and "
                f"{None if b is None else b.shape} (fast)")
    for col in a.columns:
        x, y = a[col].to_numpy(), b[col].to_numpy()
        same = (x == y) | (pd.isna(x) & pd.isna(y))
        if not same.all():
            r = int(np.flatnonzero(~same)[0])
            key = ", ".join(f"{k} {a[k].iloc[r]}" for k in ("replicate", "query_id", "rank")
                            if k in a.columns)
            n_rows = int((~same).sum())
            return (f"{n_rows} of {len(a)} rows differ in {_r(col)}; first at row {r} ({key}): "
                    f"{_r(x[r])} (reference) vs {_r(y[r])} (fast)")
    return "the dtypes or the index differ"


def check_component(component: Any, *, seed: int = 0,
                    contexts: Iterable[ContextFactory] = (), engine: bool = False) -> None:
    """Check a policy component (class or instance) against the contract.

    Besides construction, configuration and outputs, the component is
    called as the engine calls it: a packer or an orderer on rows packed
    together, row by row and shuffled (check ``"independent rows"``); a
    ranker that does not declare ``set_dependent`` on a third of the
    notes, reordered (check ``"set_dependent"``); a decay, stickiness,
    breadth or ranker on gathered cells, whose note vectors are (R, W)
    (check ``"gathered cells"``). Every promise the
    component declares is checked where it can break (the extreme notes of
    :func:`extreme_context`, the random contexts and ``contexts``): a
    decay's ``upper_bound``, ``lower_bound``, ``exponential_form`` and
    ``half_life``; a ranker's ``score_bound`` and ``similarity_needed``
    (over similarities from -1 to 1 and the recency ranges the engine
    passes); a stickiness's ``access_term_bound``; a breadth's
    ``access_factor_bound`` and ``score_factor_bound``; a retention's
    ``evicts``.

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
    engine : bool
        Also run :func:`check_engine_paths`: the component through the
        engine's fast paths and its reference on a small stream (about a
        second).

    Raises
    ------
    CheckError
        Naming the component, the failed check (the declaration, for a
        broken promise), where it broke and the values.
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
    contexts = tuple(contexts)
    for make in (random_context, *contexts):
        _check_outputs(c, component, make, seed)
    _check_promises(c, component, seed, contexts)
    _check_rows(c, component, seed)
    _check_cells(c, component, seed)
    if engine:
        check_engine_paths(component, seed=seed)


def _is_frozen(obj: Any) -> bool:
    try:
        obj._probe = 1
    except dataclasses.FrozenInstanceError:
        return True
    except Exception:  # noqa: BLE001 - any other refusal is not the dataclass's
        return False
    return False


def check_policy(policy: Policy, *, seed: int = 0,
                 contexts: Iterable[ContextFactory] = (), engine: bool = False) -> None:
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
    engine : bool
        Also run :func:`check_engine_paths` on the policy.

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
    if engine:
        check_engine_paths(policy, seed=seed)
