"""Decay families: the recency multiplier as a function of (effective) age.

Every family maps age in days (>= 0) to a multiplier; negative ages (a note
scored before its creation time, which the engine never does) are clamped to
0. ``age`` arrives as a (Q, L) matrix, already the *effective* age when a
stickiness component changed it; note-level inputs (tier, recalls, salience)
are read from the context as (L,) vectors and broadcast.

=================== ========================================================= =========
name                recency (age t in days, h = 24 t hours)                   clock
=================== ========================================================= =========
``none``            1                                                         created
``per-day``         (1 - rate) ** t                                           created
``half-life``       0.5 ** (t / H)                                            created
``half-life-floor`` floor + (1 - floor) * 0.5 ** (t / H)                      created
``per-tier``        half-life-floor per tier; longterm = 1                    created
``ai-memory``       salience * exp(-lambda_tier * t)                          updated
``generative-agents`` 0.995 ** h                                              last_access
``langchain``       (1 - decay_rate) ** h                                     last_access
``ebbinghaus``      exp(-t / S), S = s0 + k * recalls                         last_access
``power-law``       (1 + f * t / S) ** -d, f = 0.9 ** (-1/d) - 1              last_access
``per-type-half-life`` floor + (1 - floor) * 0.5 ** (t / H[memory type])   created
=================== ========================================================= =========

Besides :meth:`~memsim.policies.base.Decay.recency` and
:meth:`~memsim.policies.base.Decay.half_life`, every family here has
``lower_bound()``: the smallest multiplier it can return for a note of default
salience (its floor; 0 when the curve goes to 0). Every family but ``ai-memory``
(whose multiplier scales with the note's salience) has ``upper_bound() = 1``:
its multiplier never exceeds 1, which lets the engine prune (see
:mod:`memsim.engine`). Every family but ``ai-memory`` declares
``reads_salience = False``: its lower bound holds for every note, so the
pruning uses it on streams whose notes carry other saliences too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import numpy as np

from memsim.core.params import Interval, Options
from .base import MEMORY_TYPE_CODES, TIER_CODES, Decay, ScoringContext, register

__all__ = [
    "NoDecay",
    "PerDayRate",
    "HalfLife",
    "HalfLifeFloor",
    "PerTier",
    "AiMemoryTime",
    "GenerativeAgentsRecency",
    "LangChainRecency",
    "Ebbinghaus",
    "PowerLaw",
    "PerTypeHalfLife",
    "ai_memory_time_term",
]

_LN2 = math.log(2.0)
_TASK, _SCRATCH, _LONGTERM = TIER_CODES["task"], TIER_CODES["scratch"], TIER_CODES["longterm"]
_EPISODIC = MEMORY_TYPE_CODES["episodic"]

_POSITIVE = Interval(0, None, closed="neither")
_NON_NEGATIVE = Interval(0, None)
_FLOOR = Interval(0, 1, closed="left")


def _age(age: np.ndarray) -> np.ndarray:
    return np.maximum(np.asarray(age, dtype=np.float64), 0.0)


def _no_decay(age: np.ndarray) -> np.ndarray:
    """1 at every age, infinite ones included (``exp(inf * 0)`` would be NaN)."""
    return np.ones(np.shape(age), dtype=np.float64)


@register
@dataclass(frozen=True, kw_only=True)
class NoDecay(Decay):
    """No decay: ``recency = 1`` at every age (a static vector store)."""

    name: ClassVar[str] = "none"
    reads_salience: ClassVar[bool] = False

    def falls_with_age_alone(self) -> bool:
        return True

    def recency(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        return np.ones_like(age, dtype=np.float64)

    def half_life(self) -> float:
        return math.inf

    def lower_bound(self) -> float:
        return 1.0

    def upper_bound(self) -> float:
        return 1.0

    def reads_uses(self) -> bool:
        # the age alone: it depends on use only on the last-use clock
        return self.clock == "last_access"


@register
@dataclass(frozen=True, kw_only=True)
class PerDayRate(Decay):
    """A fixed share lost per day: ``recency = (1 - rate) ** days``.

    Hivemind's original multiplier was ``0.95 ** days`` (rate 0.05; seed 000,
    "5% a Day Sounds Gentle"): a half-life of ``ln 2 / -ln(0.95) = 13.5`` days,
    1e-4 after six months.

    Parameters
    ----------
    rate : float in [0, 1)
        Share of what is left lost each day (0 = no decay).
    """

    name: ClassVar[str] = "per-day"
    reads_salience: ClassVar[bool] = False
    rate: float = 0.05
    _constraints: ClassVar[dict] = {"rate": Interval(0, 1, closed="left")}

    def falls_with_age_alone(self) -> bool:
        return True

    def recency(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        if self.rate == 0:  # no decay: 1 even at an infinite age (inf * 0 is NaN)
            return _no_decay(age)
        # exp(age * ln(1 - rate)): the same value, several times faster than power
        return np.exp(_age(age) * np.log1p(-self.rate))

    def exponential_form(self, ctx: ScoringContext):
        return 0.0, -math.log1p(-self.rate)

    def half_life(self) -> float:
        return math.inf if self.rate == 0 else _LN2 / -math.log1p(-self.rate)

    def lower_bound(self) -> float:
        return 1.0 if self.rate == 0 else 0.0

    def upper_bound(self) -> float:
        return 1.0

    def reads_uses(self) -> bool:
        # the age alone: it depends on use only on the last-use clock
        return self.clock == "last_access"


@register
@dataclass(frozen=True, kw_only=True)
class HalfLife(Decay):
    """Exponential decay by half-life: ``recency = 0.5 ** (days / half_life)``.

    Feather DB's recency term (``include/scoring.h``:
    ``std::pow(0.5f, effective_age_days / decay_half_life_days)``), before its
    ``min_weight`` floor, which Feather applies in the blend (see the
    ``feather-blend`` ranker). Default half-life 30 days (Feather's
    ``ScoringConfig``).

    Parameters
    ----------
    half_life_days : float > 0
    """

    name: ClassVar[str] = "half-life"
    reads_salience: ClassVar[bool] = False
    half_life_days: float = 30.0
    _constraints: ClassVar[dict] = {"half_life_days": _POSITIVE}

    def falls_with_age_alone(self) -> bool:
        return True

    def recency(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        return np.exp2(-_age(age) / self.half_life_days)

    def exponential_form(self, ctx: ScoringContext):
        return 0.0, _LN2 / self.half_life_days

    def half_life(self) -> float:
        return self.half_life_days

    def lower_bound(self) -> float:
        return 0.0

    def upper_bound(self) -> float:
        return 1.0

    def reads_uses(self) -> bool:
        # the age alone: it depends on use only on the last-use clock
        return self.clock == "last_access"


@register
@dataclass(frozen=True, kw_only=True)
class HalfLifeFloor(Decay):
    """Half-life with a floor, never below ``floor`` (Hivemind's fix).

    ``recency = floor + (1 - floor) * 0.5 ** (days / half_life)``.

    Hivemind's fix (seed 000): half-life 180 days, floor 0.35, so that "age
    can never push a note below" the floor; a year-old note keeps about half
    its weight (0.35 + 0.65 * 0.5 ** (365/180) = 0.51). The tier is ignored
    (see ``per-tier`` for the tiered version).

    Parameters
    ----------
    half_life_days : float > 0
        Age at which the part above the floor has halved.
    floor : float in [0, 1)
        The multiplier an infinitely old note tends to.
    """

    name: ClassVar[str] = "half-life-floor"
    reads_salience: ClassVar[bool] = False
    half_life_days: float = 180.0
    floor: float = 0.35
    _constraints: ClassVar[dict] = {"half_life_days": _POSITIVE, "floor": _FLOOR}

    def falls_with_age_alone(self) -> bool:
        return True

    def recency(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        return self.floor + (1.0 - self.floor) * np.exp2(-_age(age) / self.half_life_days)

    def exponential_form(self, ctx: ScoringContext):
        return self.floor, _LN2 / self.half_life_days

    def half_life(self) -> float:
        return self.half_life_days

    def lower_bound(self) -> float:
        return self.floor

    def upper_bound(self) -> float:
        return 1.0

    def reads_uses(self) -> bool:
        # the age alone: it depends on use only on the last-use clock
        return self.clock == "last_access"


@register
@dataclass(frozen=True, kw_only=True)
class PerTier(Decay):
    """Half-life with a floor, per tier; the ``longterm`` tier never decays.

    Hivemind after the fix (seed 000, ``recencyMultiplier(tier, days)``)::

        longterm:  recency = 1                       ("that's what the tier means")
        task:      recency = 0.35 + 0.65 * 0.5 ** (days / 180)
        scratch:   recency = 0.05 + 0.95 * 0.5 ** (days / 21)

    The seed's snippet shows the task constants (180 d, 0.35) and says that a
    scratchpad should fade fast ("steep decay is a feature"); the scratch
    constants (21 d, 0.05) are the ones of ``docs/contracts/policies.md`` (the golden
    vectors ``hivemind_recency``). The tier is the note's *current* tier: a
    note promoted to longterm by the feedback's ``promote_after`` stops
    decaying at once. Unknown tiers count as ``task``.

    Parameters
    ----------
    task_half_life_days, scratch_half_life_days : float > 0
    task_floor, scratch_floor : float in [0, 1)
    """

    name: ClassVar[str] = "per-tier"
    reads_salience: ClassVar[bool] = False
    per_note_form: ClassVar[bool] = True
    task_half_life_days: float = 180.0
    task_floor: float = 0.35
    scratch_half_life_days: float = 21.0
    scratch_floor: float = 0.05
    _constraints: ClassVar[dict] = {
        "task_half_life_days": _POSITIVE,
        "task_floor": _FLOOR,
        "scratch_half_life_days": _POSITIVE,
        "scratch_floor": _FLOOR,
    }

    def recency(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        tier = np.asarray(ctx.tier)
        scratch = tier == _SCRATCH
        hl = np.where(scratch, self.scratch_half_life_days, self.task_half_life_days)
        fl = np.where(scratch, self.scratch_floor, self.task_floor)
        rec = fl + (1.0 - fl) * np.exp2(-_age(age) / hl)
        return np.where(tier == _LONGTERM, 1.0, rec)

    def exponential_form(self, ctx: ScoringContext):
        tier = np.asarray(ctx.tier)
        if tier.dtype == np.int8:  # the contexts' codes, read as they are
            codes = tier.view(np.uint8)
        else:  # other integers: every code but scratch and longterm is task
            codes = np.where((tier == _SCRATCH) | (tier == _LONGTERM), tier, _TASK)
        floor, rate = self._by_code
        return np.take(floor, codes), np.take(rate, codes)

    @cached_property
    def _by_code(self) -> tuple[np.ndarray, np.ndarray]:
        """(floor, rate) for each int8 tier code, read as uint8 (256 codes;
        any but scratch and longterm counts as task): one lookup per array."""
        floor = np.full(256, self.task_floor)
        rate = np.full(256, _LN2 / self.task_half_life_days)
        floor[_SCRATCH], rate[_SCRATCH] = self.scratch_floor, _LN2 / self.scratch_half_life_days
        floor[_LONGTERM], rate[_LONGTERM] = 1.0, 0.0  # 1 + 0 * anything: no decay
        return floor, rate

    def half_life(self) -> float:
        return self.task_half_life_days  # a fresh note is in the task tier

    def lower_bound(self) -> float:
        return min(self.task_floor, self.scratch_floor)

    def upper_bound(self) -> float:
        return 1.0


def ai_memory_lambda(lambda_per_day: float, tier: np.ndarray,
                     half_lives: dict[int, float]) -> np.ndarray | float:
    """Per-note decay rate: ``lambda`` unless the note's tier has a half-life
    set (> 0), then ``ln 2 / half_life``."""
    if not any(h > 0 for h in half_lives.values()):
        return lambda_per_day
    tier = np.asarray(tier)
    lam = np.full(tier.shape, float(lambda_per_day))
    for code, h in half_lives.items():
        if h > 0:
            lam[tier == code] = _LN2 / h
    return lam


def ai_memory_time_term(age_days, salience, lam) -> np.ndarray:
    """ai-memory's time term ``salience * exp(-lambda * age_days)``
    (``crates/ai-memory-store/src/decay.rs``, ``retention_score_with_breadth``);
    negative ages clamp to 0 as ``elapsed_days`` does in ``sweep.rs``."""
    lam = np.asarray(lam)
    if not lam.any():  # no tier decays: 1 even at an infinite age (inf * 0 is NaN)
        return np.asarray(salience, dtype=np.float64) * _no_decay(age_days)
    return np.asarray(salience, dtype=np.float64) * np.exp(-lam * _age(age_days))


@register
@dataclass(frozen=True, kw_only=True)
class AiMemoryTime(Decay):
    """ai-memory's time term: ``recency = salience * exp(-lambda_tier * age)``.

    Source: ``crates/ai-memory-store/src/decay.rs``
    (``retention_score_with_breadth``: ``time_term = salience *
    (-params.lambda * age_days).exp()``), seed 001. ``age`` counts from the
    note's last update (clock ``"updated"``; ``sweep.rs`` passes ``now -
    updated_at``). ``lambda`` defaults to 0.02/day ("~35-day half-life").
    Salience is the note's own (default 1.0; ai-memory clamps feedback-moved
    salience to [0.25, 2.0]), so the multiplier can exceed 1.

    Optional per-tier half-lives (the newest line's ``lambda_tier``): a tier
    whose half-life is set (> 0) decays at ``ln 2 / half_life`` instead of
    ``lambda``. In ai-memory the "tier" is the memory type and only episodic
    pages decay; memsim keys these half-lives on its own ``tier`` column
    (task / scratch / longterm): that mapping is memsim's.

    With ``episodic_only`` (default, as ai-memory: "other memory types never
    decay") a non-episodic note keeps ``recency = salience``.

    In ai-memory this term feeds the *eviction* sweep (``retention =
    "ai-memory"``), not retrieval ranking; as a decay it lets memsim ask what
    ranking by it would do. Add the ``access-term`` stickiness and the
    ``log-actors`` breadth (on ``"access"``) to get the full retention score.

    Parameters
    ----------
    lambda_per_day : float >= 0
    task_half_life_days, scratch_half_life_days, longterm_half_life_days : float >= 0
        0 = use ``lambda_per_day``.
    episodic_only : bool
    """

    name: ClassVar[str] = "ai-memory"
    clock: str = "updated"
    lambda_per_day: float = 0.02
    task_half_life_days: float = 0.0
    scratch_half_life_days: float = 0.0
    longterm_half_life_days: float = 0.0
    episodic_only: bool = True
    _constraints: ClassVar[dict] = {
        "lambda_per_day": _NON_NEGATIVE,
        "task_half_life_days": _NON_NEGATIVE,
        "scratch_half_life_days": _NON_NEGATIVE,
        "longterm_half_life_days": _NON_NEGATIVE,
        "episodic_only": Options((True, False)),
    }

    def _half_lives(self) -> dict[int, float]:
        return {_TASK: self.task_half_life_days, _SCRATCH: self.scratch_half_life_days,
                _LONGTERM: self.longterm_half_life_days}

    def recency(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        lam = ai_memory_lambda(self.lambda_per_day, ctx.tier, self._half_lives())
        if self.episodic_only:
            lam = np.where(np.asarray(ctx.memory_type) == _EPISODIC, lam, 0.0)
        return ai_memory_time_term(age, ctx.salience, lam)

    def half_life(self) -> float:
        if self.task_half_life_days > 0:
            return self.task_half_life_days
        return math.inf if self.lambda_per_day == 0 else _LN2 / self.lambda_per_day

    def lower_bound(self) -> float:
        # 1 only when no tier decays: a tier half-life decays even at lambda 0
        never = self.lambda_per_day == 0 and not any(h > 0 for h in self._half_lives().values())
        return 1.0 if never else 0.0


@register
@dataclass(frozen=True, kw_only=True)
class GenerativeAgentsRecency(Decay):
    """Generative Agents' recency: ``decay_factor ** hours_since_last_access``.

    Park et al., "Generative Agents: Interactive Simulacra of Human
    Behavior" (UIST 2023), section 4.1: "an exponential decay function over
    the number of sandbox game hours since the memory was last retrieved. Our
    decay factor is 0.995." A never-retrieved memory counts from its creation
    (clock ``"last_access"``). Half-life ``ln 2 / -ln 0.995`` = 138 h = 5.8 days.

    The released code (``joonspk-research/generative_agents``,
    ``persona/cognitive_modules/retrieve.py``) differs: ``recency_decay =
    0.99`` raised to the *rank* of each memory in last-access order, not to
    hours. memsim implements the paper.

    Parameters
    ----------
    decay_factor : float in (0, 1]
        Multiplier per hour (1 = no decay).
    """

    name: ClassVar[str] = "generative-agents"
    reads_salience: ClassVar[bool] = False
    clock: str = "last_access"
    decay_factor: float = 0.995
    _constraints: ClassVar[dict] = {"decay_factor": Interval(0, 1, closed="right")}

    def falls_with_age_alone(self) -> bool:
        return True

    def recency(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        if self.decay_factor == 1:  # no decay (24 * a huge age * 0 is NaN)
            return _no_decay(age)
        return np.exp(24.0 * _age(age) * math.log(self.decay_factor))

    def half_life(self) -> float:
        return math.inf if self.decay_factor == 1 else _LN2 / -math.log(self.decay_factor) / 24.0

    def lower_bound(self) -> float:
        return 1.0 if self.decay_factor == 1 else 0.0

    def upper_bound(self) -> float:
        return 1.0


@register
@dataclass(frozen=True, kw_only=True)
class LangChainRecency(Decay):
    """LangChain's recency: ``(1 - decay_rate) ** hours_since_last_access``.

    Hours since the document was last accessed. Source:
    ``langchain/retrievers/time_weighted_retriever.py``
    (``TimeWeightedVectorStoreRetriever._get_combined_score``: ``score =
    (1.0 - self.decay_rate) ** hours_passed`` with ``hours_passed`` from
    ``last_accessed_at``; ``decay_rate = 0.01``). ``last_accessed_at`` starts
    at the creation time and is reset for every returned document, so use it
    with a feedback that touches the returned notes. Half-life ``ln 2 /
    -ln 0.99`` = 69 h = 2.9 days.

    Parameters
    ----------
    decay_rate : float in [0, 1)
        Share lost per hour.
    """

    name: ClassVar[str] = "langchain"
    reads_salience: ClassVar[bool] = False
    clock: str = "last_access"
    decay_rate: float = 0.01
    _constraints: ClassVar[dict] = {"decay_rate": Interval(0, 1, closed="left")}

    def falls_with_age_alone(self) -> bool:
        return True

    def recency(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        if self.decay_rate == 0:  # no decay (24 * a huge age * 0 is NaN)
            return _no_decay(age)
        return np.exp(24.0 * _age(age) * math.log1p(-self.decay_rate))

    def half_life(self) -> float:
        return math.inf if self.decay_rate == 0 else _LN2 / -math.log1p(-self.decay_rate) / 24.0

    def lower_bound(self) -> float:
        return 1.0 if self.decay_rate == 0 else 0.0

    def upper_bound(self) -> float:
        return 1.0


def ebbinghaus_retention(t_days, recalls, strength_days: float,
                         strength_per_recall: float) -> np.ndarray:
    """MemoryBank's forgetting curve ``R = exp(-t / S)``, ``S = s0 + k * recalls``."""
    s = strength_days + strength_per_recall * np.asarray(recalls, dtype=np.float64)
    return np.exp(-_age(t_days) / s)


@register
@dataclass(frozen=True, kw_only=True)
class Ebbinghaus(Decay):
    """Ebbinghaus curve ``exp(-t / S)`` as MemoryBank uses it, S growing on recall.

    Zhong et al., "MemoryBank: Enhancing Large Language Models with Long-Term
    Memory" (AAAI 2024): ``R = e^(-t/S)``, t the time elapsed
    since the memory was learned or last recalled (clock ``"last_access"``), S
    the memory strength, 1 when a memory is first mentioned and increased by 1
    each time it is recalled, t reset to 0 at each recall. memsim: ``S =
    strength_days + strength_per_recall * recalls``, t in days (the paper's
    unit is a day as well). Half-life of a fresh note ``S ln 2`` (0.69 days by
    default). Used as a forgetting rule by the ``memorybank`` retention.

    Parameters
    ----------
    strength_days : float > 0
        Initial strength S0.
    strength_per_recall : float >= 0
        Strength gained per recall.
    """

    name: ClassVar[str] = "ebbinghaus"
    reads_salience: ClassVar[bool] = False
    clock: str = "last_access"
    strength_days: float = 1.0
    strength_per_recall: float = 1.0
    _constraints: ClassVar[dict] = {"strength_days": _POSITIVE,
                                    "strength_per_recall": _NON_NEGATIVE}

    def recency(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        return ebbinghaus_retention(age, ctx.recalls, self.strength_days,
                                    self.strength_per_recall)

    def half_life(self) -> float:
        return self.strength_days * _LN2

    def lower_bound(self) -> float:
        return 0.0

    def upper_bound(self) -> float:
        return 1.0


@register
@dataclass(frozen=True, kw_only=True)
class PowerLaw(Decay):
    """Power-law forgetting ``(1 + f * t / S) ** -d``, as FSRS fits to reviews.

    A forgetting curve of the kind spaced-repetition schedulers fit to real
    reviews.

    The FSRS family (open-spaced-repetition, FSRS-4.5 and later) models
    retrievability this way with ``f = 0.9 ** (-1/d) - 1`` so that ``R = 0.9``
    exactly when ``t = S`` (S = stability in days); FSRS-4.5 fixes ``d = 0.5``
    (``f = 19/81``). Power laws fit human forgetting better than exponentials
    (Wixted & Ebbesen 1991): they fall fast at first and then keep a long tail.
    None of Hivemind, ai-memory or Feather DB uses one; memsim adds it as a
    family to compare against.

    **memsim's design**: the stability of a note is ``stability_days * (1 +
    recall_growth * recalls)`` (FSRS grows stability per successful review by
    a fitted rule; memsim's linear growth, off by default, is a stand-in), and
    t counts from the last access (FSRS: from the last review). The default
    ``stability_days = 3`` (the order of FSRS's initial stability after a first
    good review) gives a half-life of ``3 * 3 / (19/81)`` = 38 days.

    Parameters
    ----------
    stability_days : float > 0
        Age at which a never-recalled note's recency is 0.9.
    decay : float > 0
        The power ``d``.
    recall_growth : float >= 0
        Relative stability gained per recall.
    """

    name: ClassVar[str] = "power-law"
    reads_salience: ClassVar[bool] = False
    clock: str = "last_access"
    stability_days: float = 3.0
    decay: float = 0.5
    recall_growth: float = 0.0
    _constraints: ClassVar[dict] = {"stability_days": _POSITIVE, "decay": _POSITIVE,
                                    "recall_growth": _NON_NEGATIVE}

    @property
    def factor(self) -> float:
        """``f = 0.9 ** (-1/d) - 1``: R(S) = 0.9."""
        return math.expm1(-math.log(0.9) / self.decay)

    def falls_with_age_alone(self) -> bool:
        # recall_growth reads each note's recalls
        return self.recall_growth == 0

    def recency(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        s = self.stability_days
        if self.recall_growth:
            s = s * (1.0 + self.recall_growth * np.asarray(ctx.recalls, dtype=np.float64))
        return np.exp(-self.decay * np.log1p(self.factor * _age(age) / s))

    def half_life(self) -> float:
        return self.stability_days * math.expm1(_LN2 / self.decay) / self.factor

    def lower_bound(self) -> float:
        return 0.0

    def upper_bound(self) -> float:
        return 1.0


@register
@dataclass(frozen=True, kw_only=True)
class PerTypeHalfLife(Decay):
    """One half-life per memory type, above one floor.

    ::

        recency = floor + (1 - floor) * 0.5 ** (days / H[type])

    with ``H[type]`` the half-life of the note's memory type (the
    ``memory_type`` column: ``episodic``, ``semantic``, ``procedural``,
    ``other``; a trace's ``type`` field, any other value counting as
    ``other``). Memory layers that type their notes (ai-memory decays only
    episodic pages; Hivemind keys its decay on tiers, see ``per-tier``)
    argue that an event, a fact and a how-to age at different speeds; this
    family lets each type have its own speed and lets a sweep find them. The
    form is memsim's: no system publishes per-type half-lives other than
    "episodic decays, the rest does not" (ai-memory, which is the limit
    ``H[other types] -> inf``, approached by a long half-life).

    It is one exponential per note (:meth:`exponential_form` gives per-note
    arrays), so the engine scores it with its fast separable recency and
    prunes exactly (``upper_bound() = 1``).

    Parameters
    ----------
    episodic_half_life_days, semantic_half_life_days, procedural_half_life_days,
    other_half_life_days : float > 0
        The half-life of each memory type (defaults: 30 days for events, a
        year for facts and how-tos, 90 days for the rest).
    floor : float in [0, 1)
        The multiplier every note tends to with age.
    """

    name: ClassVar[str] = "per-type-half-life"
    reads_salience: ClassVar[bool] = False
    per_note_form: ClassVar[bool] = True
    episodic_half_life_days: float = 30.0
    semantic_half_life_days: float = 365.0
    procedural_half_life_days: float = 365.0
    other_half_life_days: float = 90.0
    floor: float = 0.0
    _constraints: ClassVar[dict] = {
        "episodic_half_life_days": _POSITIVE,
        "semantic_half_life_days": _POSITIVE,
        "procedural_half_life_days": _POSITIVE,
        "other_half_life_days": _POSITIVE,
        "floor": _FLOOR,
    }

    @cached_property
    def _rate_by_code(self) -> np.ndarray:
        """``ln 2 / H`` indexed by memory-type code (:data:`MEMORY_TYPE_CODES`)."""
        rate = np.empty(len(MEMORY_TYPE_CODES))
        for type_name, code in MEMORY_TYPE_CODES.items():
            rate[code] = _LN2 / getattr(self, f"{type_name}_half_life_days")
        return rate

    def _rates(self, ctx: ScoringContext) -> np.ndarray:
        codes = np.asarray(ctx.memory_type, dtype=np.int64)
        # any code outside the table counts as "other"
        codes = np.where((codes >= 0) & (codes < len(MEMORY_TYPE_CODES)), codes,
                         MEMORY_TYPE_CODES["other"])
        return np.take(self._rate_by_code, codes)

    def recency(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        return self.floor + (1.0 - self.floor) * np.exp(-self._rates(ctx) * _age(age))

    def exponential_form(self, ctx: ScoringContext):
        rate = self._rates(ctx)
        return np.full(rate.shape, self.floor), rate

    def half_life(self) -> float:
        return self.episodic_half_life_days  # a note of the default type

    def lower_bound(self) -> float:
        return self.floor

    def upper_bound(self) -> float:
        return 1.0

    def reads_uses(self) -> bool:
        # the age and the type alone: it depends on use only on the last-use clock
        return self.clock == "last_access"
