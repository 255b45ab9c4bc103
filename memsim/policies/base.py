"""Component base classes, the registry, and the composed :class:`Policy`.

A policy is a composition of small frozen components, each answering one
narrow question for the engine (Gymnasium's pattern: the engine owns the loop):

========== ==============================================================
slot       question
========== ==============================================================
retriever  how similar is each live note to the query? (and which notes
           are candidates at all: an optional nearest-M prefilter)
decay      how much is a note's age worth? (recency multiplier)
stickiness how does use slow ageing? (effective age, additive access term)
breadth    how much do many distinct actors count?
ranker     how are relevance, recency and importance combined into a score?
retention  which notes does a periodic sweep evict?
packer     which of the top-C candidates go into the token budget?
orderer    in which order are the packed notes placed in the context?
feedback   which notes count as used after a query, and what does use do?
========== ==============================================================

The score of note *i* for query *q* is computed in this fixed order::

    rel   = retriever.similarity(ctx)                       # (Q, L)
    age   = stickiness.effective_age(ctx.age(decay.clock), ctx)
    rec   = decay.recency(age, ctx)
    rec  += stickiness.access_term(ctx) * breadth.on_access(ctx)
    score = ranker.combine(rel, rec, ctx) * breadth.on_score(ctx)

Every component is registered under ``(slot, name)`` in :data:`REGISTRY`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..errors import ConfigError
from ..params import Interval, Options, Validated, describe_constraint, did_you_mean, fields_of

if TYPE_CHECKING:  # pragma: no cover
    from ..engine import Batch, PolicyState

__all__ = [
    "SLOTS",
    "REGISTRY",
    "register",
    "Component",
    "Retriever",
    "Decay",
    "Stickiness",
    "Breadth",
    "Ranker",
    "Retention",
    "Packer",
    "Orderer",
    "Feedback",
    "Policy",
    "ScoringContext",
    "build_component",
    "TIER_CODES",
    "MEMORY_TYPE_CODES",
]

SLOTS = (
    "retriever", "decay", "stickiness", "breadth", "ranker",
    "retention", "packer", "orderer", "feedback",
)

#: slot -> registry name -> component class
REGISTRY: dict[str, dict[str, type[Component]]] = {slot: {} for slot in SLOTS}

#: Integer codes for the ``tier`` column (unknown tiers map to "task").
TIER_CODES = {"task": 0, "scratch": 1, "longterm": 2}
#: Integer codes for the ``memory_type`` column (anything else is "other").
MEMORY_TYPE_CODES = {"episodic": 0, "semantic": 1, "procedural": 2, "other": 3}


def register(cls: type[Component]) -> type[Component]:
    """Class decorator: add a component class to :data:`REGISTRY`."""
    slot, name = cls.slot, cls.name
    if slot not in REGISTRY:
        REGISTRY[slot] = {}
    if name in REGISTRY[slot] and REGISTRY[slot][name] is not cls:
        raise RuntimeError(f"duplicate registration {slot}:{name}")
    REGISTRY[slot][name] = cls
    return cls


@dataclass(frozen=True, kw_only=True)
class Component(Validated):
    """Base of every pluggable part. Subclasses set ``slot`` and ``name``."""

    slot: ClassVar[str] = ""
    name: ClassVar[str] = ""

    def to_config(self) -> dict[str, Any]:
        """``{"kind": name, **params}``: the resolved TOML table of this part."""
        return {"kind": self.name, **self.params()}

    @classmethod
    def describe(cls) -> list[tuple[str, Any, str]]:
        """(parameter, default, allowed) for each parameter."""
        cons = cls._all_constraints()
        out = []
        for name, f in fields_of(cls).items():
            default = f.default if f.default is not dataclasses.MISSING else None
            if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                default = f.default_factory()  # type: ignore[misc]
            out.append((name, default, describe_constraint(cons[name]) if name in cons else "any"))
        return out


def build_component(slot: str, spec: Any, where: str) -> Component:
    """Build a component from a config value.

    ``spec`` is a registry name (``"skip-fill"``), a table with ``kind`` and
    parameters, or an already built component. ``where`` is the dotted key used
    in error messages.
    """
    if isinstance(spec, Component):
        return spec
    if isinstance(spec, str):
        spec = {"kind": spec}
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: expected a name or a table with 'kind', got {spec!r}")
    table = REGISTRY.get(slot, {})
    kind = spec.get("kind")
    if kind not in table:
        raise ConfigError(
            f"{where}.kind: unknown {slot} {kind!r}; allowed: {', '.join(sorted(table))}"
        )
    cls = table[kind]
    params = {k: v for k, v in spec.items() if k != "kind"}
    allowed = fields_of(cls)
    for key in params:
        if key not in allowed:
            raise ConfigError(
                f"{where}.{key}: unknown parameter of {slot} {kind!r}{did_you_mean(key, allowed)}"
                f"; allowed: {', '.join(allowed) or '(none)'}"
            )
    try:
        return cls(**params)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except TypeError as exc:  # wrong type that the dataclass itself refused
        raise ConfigError(f"{where}: {exc}") from None


# --------------------------------------------------------------------------
# Slot base classes. Defaults are the neutral element of each slot.
# --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Retriever(Component):
    """Similarity between queries and notes, and an optional nearest-M prefilter.

    ``prefilter = M > 0`` keeps only the M notes most similar to the query (ties
    by lower ``note_id``) as candidates for scoring, as an ANN index would.
    """

    slot: ClassVar[str] = "retriever"
    prefilter: int = 0
    _constraints: ClassVar[dict] = {"prefilter": Interval(0, None, integer=True)}

    def similarity(self, ctx: ScoringContext) -> np.ndarray:
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class Decay(Component):
    """Recency multiplier as a function of age (days).

    ``clock`` says which age: ``"created"`` (t - created_at), ``"updated"``
    (t - updated_at) or ``"last_access"`` (t - last access, creation if never
    accessed).
    """

    slot: ClassVar[str] = "decay"
    clock: str = "created"
    _constraints: ClassVar[dict] = {"clock": Options(("created", "updated", "last_access"))}

    def recency(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        raise NotImplementedError

    def half_life(self) -> float:
        """Age (days) at which a fresh, never-used note's multiplier halves
        its distance to the floor; inf if it never decays."""
        return float("nan")

    def exponential_form(self, ctx: ScoringContext):
        """``(floor, rate)`` when ``recency = floor + (1 - floor) * exp(-rate *
        age)`` (scalars or per-note (L,) arrays), else None.

        Lets the engine compute the (Q, L) recency without a transcendental
        per cell (see :meth:`ScoringContext.exponential_recency`); the value
        is the same as :meth:`recency`'s up to rounding.
        """
        return None


@dataclass(frozen=True, kw_only=True)
class Stickiness(Component):
    """How use slows ageing. The neutral element changes nothing."""

    slot: ClassVar[str] = "stickiness"

    def effective_age(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        return age

    def access_term(self, ctx: ScoringContext) -> np.ndarray | float:
        return 0.0


@dataclass(frozen=True, kw_only=True)
class Breadth(Component):
    """Reward for notes used by many distinct actors. Neutral: factor 1."""

    slot: ClassVar[str] = "breadth"

    def on_access(self, ctx: ScoringContext) -> np.ndarray | float:
        return 1.0

    def on_score(self, ctx: ScoringContext) -> np.ndarray | float:
        return 1.0


@dataclass(frozen=True, kw_only=True)
class Ranker(Component):
    """Combines relevance and recency into the score used for ranking and packing."""

    slot: ClassVar[str] = "ranker"
    #: True when the ranker needs the decay pipeline at all.
    uses_recency: ClassVar[bool] = True
    #: True when a note's score depends on the other live notes (e.g. a
    #: normalisation over the candidates); False lets the engine score only
    #: the notes a retriever prefilter keeps.
    set_dependent: ClassVar[bool] = False

    def combine(self, rel: np.ndarray, rec: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class Retention(Component):
    """Periodic eviction sweep. Neutral: keeps everything."""

    slot: ClassVar[str] = "retention"

    def evict(self, ctx: ScoringContext) -> np.ndarray:
        """Boolean mask over ``ctx.idx``: notes to evict now (at ``ctx.t[0]``).

        The engine only passes notes that exist and are not yet evicted.
        """
        return np.zeros(len(ctx.idx), dtype=bool)


@dataclass(frozen=True, kw_only=True)
class Packer(Component):
    """Chooses which of the top-C candidates fit the token budget."""

    slot: ClassVar[str] = "packer"

    def pack(self, values: np.ndarray, tokens: np.ndarray, valid: np.ndarray,
             budget: np.ndarray) -> np.ndarray:
        """Boolean mask (Q, C) of packed candidates.

        ``values`` (Q, C) are the policy's scores, candidates sorted best first;
        ``tokens`` (Q, C) int64; ``valid`` (Q, C) marks real candidates (rows
        may hold fewer than C); ``budget`` (Q,) int64. The packed tokens of a
        row never exceed its budget.
        """
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class Orderer(Component):
    """Places packed notes in the context."""

    slot: ClassVar[str] = "orderer"

    def order(self, values: np.ndarray, packed: np.ndarray) -> np.ndarray:
        """Context position (Q, C) int64 of each packed candidate, 0 first;
        -1 where not packed."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class Feedback(Component):
    """What counts as a use of a note, and what a use does.

    Parameters
    ----------
    touch : {"packed", "returned", "prefilter", "none"}
        Notes that gain a recall after a query: those packed into the context,
        the top ``k`` of the ranking ("returned", as a search API returns k
        results), or every prefilter candidate.
    k : int
        Number of returned notes for ``touch = "returned"``.
    before_scoring : bool
        Apply the touch before the query's scores are computed (Feather DB
        v0.16) instead of after.
    promote_after : int
        Promote a note to the ``longterm`` tier once it has this many recalls
        (0 = never).
    cooldown_s : float
        At most one recall per (note, actor) per this many seconds (ai-memory
        uses 60).
    """

    slot: ClassVar[str] = "feedback"
    name: ClassVar[str] = "default"
    touch: str = "packed"
    k: int = 10
    before_scoring: bool = False
    promote_after: int = 0
    cooldown_s: float = 0.0
    _constraints: ClassVar[dict] = {
        "touch": Options(("packed", "returned", "prefilter", "none")),
        "k": Interval(1, None, integer=True),
        "before_scoring": Options((True, False)),
        "promote_after": Interval(0, None, integer=True),
        "cooldown_s": Interval(0, None),
    }


register(Feedback)


# --------------------------------------------------------------------------
# Scoring context: everything a component may read, computed lazily.
# --------------------------------------------------------------------------


_AGE_ATTR = {"created": "age_created", "updated": "age_updated",
             "last_access": "age_last_access"}


class ScoringContext:
    """Read-only view of one batch of queries over the existing notes, for one
    policy. Matrices are (Q, L) with L = ``len(idx)``; note vectors are (L,).

    Components read attributes; nothing here is mutated by them.
    """

    def __init__(self, batch: Batch, state: PolicyState, rng: np.random.Generator):
        self.batch = batch
        self.state = state
        self.rng = rng
        self.t = batch.t
        self.idx = batch.idx
        self.notes = batch.notes
        #: (Q, L) bool: the notes each query may see (existing, not expired,
        #: not evicted, inside the prefilter); set by the engine before scoring
        self.live: np.ndarray | None = None

    # -- shared, from the batch -------------------------------------------
    @property
    def dots(self) -> np.ndarray:
        return self.batch.dots

    @property
    def qnorm2(self) -> np.ndarray:
        return self.batch.qnorm2

    @property
    def nnorm2(self) -> np.ndarray:
        return self.notes.norm2[self.idx]

    def shared(self, key, compute):
        """A value computed once per batch and shared by every policy (the
        similarity matrix, the age matrix): ``compute()`` runs on first use."""
        cache = self.batch.cache
        if key not in cache:
            cache[key] = compute()
        return cache[key]

    def similarity(self, retriever: Retriever) -> np.ndarray:
        """The retriever's similarity (Q, L), shared across policies."""
        return self.shared(("similarity", retriever.name),
                           lambda: retriever.similarity(self))

    @property
    def age_created(self) -> np.ndarray:
        return self.shared("age_created",
                           lambda: self.t[:, None] - self.notes.created_at[self.idx][None, :])

    @property
    def age_updated(self) -> np.ndarray:
        return self.shared("age_updated",
                           lambda: self.t[:, None] - self.notes.updated_at[self.idx][None, :])

    @cached_property
    def since_access(self) -> np.ndarray:
        """Days since last access; NaN where never accessed."""
        return self.t[:, None] - self.state.last_access[self.idx][None, :]

    @cached_property
    def age_last_access(self) -> np.ndarray:
        """Days since last access, counting creation as the first access."""
        s = self.since_access
        return np.where(np.isnan(s), self.age_created, s)

    def age(self, clock: str) -> np.ndarray:
        return getattr(self, _AGE_ATTR[clock])

    def exponential_recency(self, clock: str, floor, rate) -> np.ndarray | None:
        """``floor + (1 - floor) * exp(-rate * age)`` (Q, L) for the ages of
        ``clock``, or None where the fast form does not apply.

        Every clock's age is ``t_q - origin_n``; with ``t0`` the batch's last
        query time, ``exp(-r (t_q - o)) = exp(-r (t_q - t0)) * exp(-r (t0 - o))``:
        one exponential per note and one per (query, distinct rate) instead of
        one per cell. It applies when no live cell has a negative age (which
        the slow path clamps to 0) and the per-query factor cannot overflow.
        """
        t = self.t
        t0, tmin = float(t.max()), float(t.min())
        if clock == "created":
            origin = self.notes.created_at[self.idx]
        elif clock == "last_access":
            last = self.state.last_access[self.idx]
            if (last > tmin).any():  # a use inside the batch's window: the slow path clamps
                return None
            origin = np.where(np.isnan(last), self.notes.created_at[self.idx], last)
        elif clock == "updated":
            origin = self.notes.updated_at[self.idx]
            if (origin > self.notes.created_at[self.idx]).any():
                return None  # an update may postdate the query: the slow path clamps
        else:
            return None
        rate = np.asarray(rate, dtype=np.float64)
        if float(rate.max(initial=0.0)) * (t0 - tmin) > 300.0:
            return None
        note_factor = np.exp(-rate * (t0 - origin))  # (L,) or scalar rate broadcast
        rates, inverse = np.unique(np.broadcast_to(rate, origin.shape), return_inverse=True)
        query_factor = np.exp(-(t - t0)[:, None] * rates[None, :])  # (Q, K), >= 1
        rec = np.take(query_factor, inverse, axis=1) if len(rates) > 1 else (
            np.repeat(query_factor, len(origin), axis=1))
        rec *= note_factor
        floor = np.asarray(floor, dtype=np.float64)
        if floor.ndim or float(floor) != 0.0:
            rec *= 1.0 - floor
            rec += floor
        return rec

    @property
    def tokens(self) -> np.ndarray:
        return self.notes.tokens[self.idx]

    @property
    def importance(self) -> np.ndarray:
        return self.notes.importance[self.idx]

    @property
    def salience(self) -> np.ndarray:
        return self.notes.salience[self.idx]

    @property
    def pinned(self) -> np.ndarray:
        return self.notes.pinned[self.idx]

    @property
    def memory_type(self) -> np.ndarray:
        return self.notes.memory_type[self.idx]

    # -- per policy, from the state ----------------------------------------
    @property
    def recalls(self) -> np.ndarray:
        return self.state.recalls[self.idx]

    @property
    def tier(self) -> np.ndarray:
        return self.state.tier[self.idx]

    @cached_property
    def distinct_actors(self) -> np.ndarray:
        return self.state.distinct_actors(self.idx)

    @cached_property
    def gains(self) -> np.ndarray:
        """True gains (Q, L), 0 where no qrel: only the oracle may read this."""
        return self.batch.gains_for(self.idx)


@dataclass(frozen=True, kw_only=True)
class Policy(Validated):
    """A complete policy: one component per slot.

    ``candidates`` overrides the experiment's top-C for this policy (None:
    the experiment's).
    """

    retriever: Retriever = field(default=None)  # type: ignore[assignment]
    decay: Decay = field(default=None)  # type: ignore[assignment]
    stickiness: Stickiness = field(default=None)  # type: ignore[assignment]
    breadth: Breadth = field(default=None)  # type: ignore[assignment]
    ranker: Ranker = field(default=None)  # type: ignore[assignment]
    retention: Retention = field(default=None)  # type: ignore[assignment]
    packer: Packer = field(default=None)  # type: ignore[assignment]
    orderer: Orderer = field(default=None)  # type: ignore[assignment]
    feedback: Feedback = field(default=None)  # type: ignore[assignment]
    candidates: int | None = None

    _constraints: ClassVar[dict] = {
        "candidates": (Interval(1, None, integer=True), Options((None,))),
    }

    #: The component used for a slot left unset.
    DEFAULTS: ClassVar[dict[str, str]] = {
        "retriever": "cosine",
        "decay": "none",
        "stickiness": "none",
        "breadth": "none",
        "ranker": "product",
        "retention": "none",
        "packer": "skip-fill",
        "orderer": "score",
        "feedback": "default",
    }

    def __post_init__(self) -> None:
        for slot in SLOTS:
            value = getattr(self, slot)
            if value is None:
                value = build_component(slot, self.DEFAULTS[slot], slot)
                object.__setattr__(self, slot, value)
            elif not isinstance(value, Component) or value.slot != slot:
                raise ConfigError(f"{slot}: expected a {slot} component, got {value!r}")
        super().__post_init__()

    @classmethod
    def from_config(cls, table: dict[str, Any], where: str = "policy") -> Policy:
        """Build from a resolved or partial TOML table (slot -> spec)."""
        kwargs: dict[str, Any] = {}
        for key, value in table.items():
            if key in SLOTS:
                kwargs[key] = build_component(key, value, f"{where}.{key}")
            elif key == "candidates":
                kwargs[key] = value
            else:
                allowed = list(SLOTS) + ["candidates", "preset"]
                raise ConfigError(
                    f"{where}.{key}: unknown key{did_you_mean(key, allowed)}; "
                    f"allowed: {', '.join(allowed)}"
                )
        try:
            return cls(**kwargs)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    def to_config(self) -> dict[str, Any]:
        out: dict[str, Any] = {slot: getattr(self, slot).to_config() for slot in SLOTS}
        if self.candidates is not None:
            out["candidates"] = self.candidates
        return out

    # -- scoring -------------------------------------------------------------
    def score(self, ctx: ScoringContext) -> np.ndarray:
        """Scores (Q, L) of the context's notes for its queries (see module doc)."""
        rel = ctx.similarity(self.retriever)
        if self.ranker.uses_recency:
            rec = None
            fast = getattr(ctx, "exponential_recency", None)  # stand-in contexts lack it
            if fast is not None and type(self.stickiness).effective_age is Stickiness.effective_age:
                # age is the plain clock: an exponential family can be
                # computed separably (same values, far fewer exponentials)
                form = self.decay.exponential_form(ctx)
                if form is not None:
                    rec = fast(self.decay.clock, *form)
            if rec is None:
                age = self.stickiness.effective_age(ctx.age(self.decay.clock), ctx)
                rec = self.decay.recency(age, ctx)
            access = self.stickiness.access_term(ctx)
            if not (np.isscalar(access) and access == 0.0):
                rec = rec + access * self.breadth.on_access(ctx)
        else:
            rec = None
        score = self.ranker.combine(rel, rec, ctx)
        b = self.breadth.on_score(ctx)
        if not (np.isscalar(b) and b == 1.0):
            score = score * b
        return score
