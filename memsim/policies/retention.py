"""Retention: periodic eviction sweeps.

``evict(ctx)`` returns a bool mask over ``ctx.idx`` (the notes that exist and
are not yet evicted at the sweep time ``ctx.t[0]``); the engine marks them
evicted for the rest of the run. TTL expiry (``expires_at``) is not a
retention decision: the engine removes expired notes for every policy,
pinned ones included, before any sweep sees them (as ai-memory's sweep does
first, "regardless of tier or pin").

============ ==================================================================
name         evicts
============ ==================================================================
``none``     nothing
``ai-memory`` unpinned episodic notes with retention < cold_threshold (strict)
``capacity`` all but the best ``max_notes`` by a retention score
``memorybank`` notes whose Ebbinghaus retention R = exp(-t/S) < threshold, or
             each with probability 1 - R (seeded)
``invalidation`` notes a newer note superseded, as a detector with a given
             recall and false-positive rate finds them; kept for audit,
             marked invalid (not erased)
============ ==================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from memsim.core.params import Interval, Options
from memsim.core.rng import child
from .base import MEMORY_TYPE_CODES, TIER_CODES, Retention, ScoringContext, register
from .breadth import breadth_factor
from .decay import ai_memory_lambda, ai_memory_time_term, ebbinghaus_retention
from .stickiness import ai_memory_access_term

__all__ = ["KeepAll", "AiMemorySweep", "Capacity", "MemoryBankForgetting", "Invalidation"]

_NON_NEGATIVE = Interval(0, None)
_EPISODIC = MEMORY_TYPE_CODES["episodic"]


@register
@dataclass(frozen=True, kw_only=True)
class KeepAll(Retention):
    """Never evicts (TTL expiry still applies: the engine enforces ``expires_at``)."""

    name: ClassVar[str] = "none"
    evicts: ClassVar[bool] = False

    def evict(self, ctx: ScoringContext) -> np.ndarray:
        return np.zeros(len(ctx.idx), dtype=bool)


@register
@dataclass(frozen=True, kw_only=True)
class AiMemorySweep(Retention):
    """ai-memory's forget sweep: evict cold, unpinned, episodic notes.

    Source: ``crates/ai-memory-consolidate/src/sweep.rs`` (``run_sweep``,
    ``is_decayable``) and ``crates/ai-memory-store/src/decay.rs``
    (``retention_score_with_breadth``, ``DecayParams::default``), seed 001::

        retention   = salience * exp(-lambda_tier * age_since_update)
                      + access_term
        access_term = 0 if never accessed, else
                      sigma * ln(1 + access_count) * exp(-mu * days_since_access)
                      * (1 + breadth_weight * ln(max(distinct_actors, 1)))
        evict       = episodic and not pinned and retention < cold_threshold

    defaults ``lambda = 0.02``/day, ``sigma = 0.6``, ``mu = 0.04``/day,
    ``cold_threshold = 0.20``, ``breadth_weight = 0`` (identity), salience the
    note's own (default 1.0). Age counts from the note's last update
    (``updated_at``), not its creation. Semantic, procedural and other memory
    types are never evicted; pinned notes never are; TTL-expired notes are
    removed by the engine before the sweep (even pinned ones). A fresh unused
    note (retention 1) is evicted after ``ln(5) / 0.02`` = 80.5 days without
    an update or access. ai-memory soft-deletes and hard-deletes 180 days
    later unless accessed again; memsim treats eviction as final.

    ai-memory coerces an invalid ``breadth_weight`` (NaN, inf, negative) to 0;
    memsim refuses it (see :func:`memsim.policies.breadth.ai_memory_coerce_weight`).

    Optional per-tier half-lives: a tier whose half-life is set (> 0) decays
    at ``ln 2 / half_life`` instead of ``lambda`` (memsim keys them on its
    ``tier`` column, see the ``ai-memory`` decay).

    Parameters
    ----------
    lambda_per_day, sigma, mu_per_day, breadth_weight : float >= 0
    cold_threshold : float >= 0
    task_half_life_days, scratch_half_life_days, longterm_half_life_days : float >= 0
        0 = use ``lambda_per_day``.
    """

    name: ClassVar[str] = "ai-memory"
    lambda_per_day: float = 0.02
    sigma: float = 0.6
    mu_per_day: float = 0.04
    breadth_weight: float = 0.0
    cold_threshold: float = 0.20
    task_half_life_days: float = 0.0
    scratch_half_life_days: float = 0.0
    longterm_half_life_days: float = 0.0
    _constraints: ClassVar[dict] = {
        "lambda_per_day": _NON_NEGATIVE,
        "sigma": _NON_NEGATIVE,
        "mu_per_day": _NON_NEGATIVE,
        "breadth_weight": _NON_NEGATIVE,
        "cold_threshold": _NON_NEGATIVE,
        "task_half_life_days": _NON_NEGATIVE,
        "scratch_half_life_days": _NON_NEGATIVE,
        "longterm_half_life_days": _NON_NEGATIVE,
    }

    def retention_score(self, ctx: ScoringContext) -> np.ndarray:
        """ai-memory's retention score (L,) of each note at the sweep time."""
        lam = ai_memory_lambda(self.lambda_per_day, ctx.tier, {
            TIER_CODES["task"]: self.task_half_life_days,
            TIER_CODES["scratch"]: self.scratch_half_life_days,
            TIER_CODES["longterm"]: self.longterm_half_life_days,
        })
        time_term = ai_memory_time_term(ctx.age_updated[0], ctx.salience, lam)
        access = ai_memory_access_term(ctx.recalls, ctx.since_access[0], self.sigma,
                                       self.mu_per_day)
        if self.breadth_weight:
            access = access * breadth_factor(ctx.distinct_actors, self.breadth_weight)
        return time_term + access

    def decayable(self, ctx: ScoringContext) -> np.ndarray:
        """Notes the sweep may evict: episodic and not pinned (``is_decayable``)."""
        return (np.asarray(ctx.memory_type) == _EPISODIC) & ~np.asarray(ctx.pinned, dtype=bool)

    def evict(self, ctx: ScoringContext) -> np.ndarray:
        return self.decayable(ctx) & (self.retention_score(ctx) < self.cold_threshold)


@register
@dataclass(frozen=True, kw_only=True)
class Capacity(Retention):
    """A capacity cap: keep the best ``max_notes`` by a retention score.

    Evicts the rest at each sweep.

    **memsim's design** (none of the three systems caps its store). ``by``
    chooses the score:

    * ``"last-access"``: the most recently used (creation counts as a use): LRU;
    * ``"recalls"``: the most used: LFU;
    * ``"created"``: the newest: FIFO;
    * ``"ai-memory"``: ai-memory's retention score with its default parameters.

    Ties are kept in favour of the newer note, then the lower ``note_id``.
    With ``protect_pinned`` pinned notes are never evicted and count against
    the cap (if they alone exceed it, every unpinned note goes).

    Parameters
    ----------
    max_notes : int >= 1
    by : {"last-access", "recalls", "created", "ai-memory"}
    protect_pinned : bool
    """

    name: ClassVar[str] = "capacity"
    max_notes: int = 1000
    by: str = "last-access"
    protect_pinned: bool = True
    _constraints: ClassVar[dict] = {
        "max_notes": Interval(1, None, integer=True),
        "by": Options(("last-access", "recalls", "created", "ai-memory")),
        "protect_pinned": Options((True, False)),
    }

    def _score(self, ctx: ScoringContext) -> np.ndarray:
        if self.by == "last-access":
            return -np.asarray(ctx.age_last_access[0], dtype=np.float64)
        if self.by == "recalls":
            return np.asarray(ctx.recalls, dtype=np.float64)
        if self.by == "created":
            return -np.asarray(ctx.age_created[0], dtype=np.float64)
        return AiMemorySweep().retention_score(ctx)

    def by_age_alone(self) -> bool:
        return False  # the store's size and the other notes' scores

    def evict(self, ctx: ScoringContext) -> np.ndarray:
        n = len(ctx.idx)
        if n <= self.max_notes:
            return np.zeros(n, dtype=bool)
        pinned = (np.asarray(ctx.pinned, dtype=bool) if self.protect_pinned
                  else np.zeros(n, dtype=bool))
        room = max(self.max_notes - int(pinned.sum()), 0)
        score = self._score(ctx)
        age = np.asarray(ctx.age_created[0], dtype=np.float64)
        # best first: pinned, then score desc, then newer, then lower column
        order = np.lexsort((np.arange(n), age, -score, ~pinned))
        keep = np.zeros(n, dtype=bool)
        keep[pinned] = True
        unpinned_order = order[~pinned[order]]
        keep[unpinned_order[:room]] = True
        return ~keep


@register
@dataclass(frozen=True, kw_only=True)
class MemoryBankForgetting(Retention):
    """MemoryBank's forgetting: ``R = exp(-t / S)`` below a threshold, or 1 - R odds.

    A note is forgotten when R falls below ``threshold`` or, with ``mode =
    "probabilistic"``, with probability ``1 - R`` at each sweep.

    Zhong et al., "MemoryBank: Enhancing Large Language Models with Long-Term
    Memory" (AAAI 2024): Ebbinghaus curve ``R = e^(-t/S)``, strength S = 1 at
    first mention, +1 per recall, t (days) reset at each recall (memsim: time
    since the last use, creation if never used; see the ``ebbinghaus`` decay).

    **memsim's design where the paper is silent**: the ``threshold`` (0.05,
    reached 3 days after the last recall for a never-recalled note), the
    sweep cadence (the experiment's ``retention_period_days``; probabilistic
    draws compound over sweeps), and pinned notes never forgotten
    (``protect_pinned``). Draws come from the policy's seeded stream.

    Parameters
    ----------
    strength_days : float > 0
    strength_per_recall : float >= 0
    mode : {"threshold", "probabilistic"}
    threshold : float in [0, 1]
    protect_pinned : bool
    """

    name: ClassVar[str] = "memorybank"
    strength_days: float = 1.0
    strength_per_recall: float = 1.0
    mode: str = "threshold"
    threshold: float = 0.05
    protect_pinned: bool = True
    _constraints: ClassVar[dict] = {
        "strength_days": Interval(0, None, closed="neither"),
        "strength_per_recall": _NON_NEGATIVE,
        "mode": Options(("threshold", "probabilistic")),
        "threshold": Interval(0, 1),
        "protect_pinned": Options((True, False)),
    }

    def retention(self, ctx: ScoringContext) -> np.ndarray:
        """R (L,) of each note at the sweep time."""
        return ebbinghaus_retention(ctx.age_last_access[0], ctx.recalls, self.strength_days,
                                    self.strength_per_recall)

    def by_age_alone(self) -> bool:
        return self.mode == "threshold"  # probabilistic forgetting is a draw

    def evict(self, ctx: ScoringContext) -> np.ndarray:
        r = self.retention(ctx)
        if self.mode == "threshold":
            out = r < self.threshold
        else:
            out = ctx.rng.random(r.shape) < 1.0 - r
        if self.protect_pinned:
            out &= ~np.asarray(ctx.pinned, dtype=bool)
        return out


@register
@dataclass(frozen=True, kw_only=True)
class Invalidation(Retention):
    """Invalidate a note when a newer note supersedes it, as graph memories do.

    A graph memory (e.g. Zep's Graphiti) does not decay a fact: when a new
    fact arrives, a detector (an LLM call) compares it with the stored ones
    and marks those it contradicts invalid (``invalid_at``), keeping them
    for history. memsim models the detector by its error rates against the
    stream's truth (``ctx.superseded_at``, :func:`memsim.evaluation.metrics.supersession_times`):

    * a note superseded at ``s`` is caught with probability ``recall``, and
      then invalidated at the first sweep at or after ``s``; a missed one is
      never caught (the detector looks once, when the newer note arrives);
    * any note is wrongly invalidated with probability
      ``false_positive_rate`` (a newer, merely related note taken for a
      successor), at ``created_at + D``, ``D ~ Exponential(mean
      false_positive_delay_days)``, provided that comes before its true
      supersession (else it is not a false positive).

    Draws are per note and fixed for the run: three uniforms per store row
    from a named child stream (``"invalidation"``) of the arm's own seed
    sequence (``ctx.rng``'s), so every sweep sees the same decisions, a rerun
    gives the same ones, and the arm's other random draws do not move.

    An invalidated note leaves retrieval (the engine treats it as evicted)
    but stays in the store, marked invalid with the sweep time: the store
    frame counts it in ``store_invalid``, ``arms.csv`` in
    ``invalidated_notes`` and ``invalidated_superseded``, and the metrics in
    ``hidden_invalid`` when the oracle would have packed it. Pinned notes
    are not protected (a detector reads content, not pins). Only the
    retention slot is taken: decay stays in the ranker, so "decay alone",
    "invalidation alone" and "both" are three policies.

    **memsim's design**: the detector's error model, the once-only look,
    the false positives' timing and the default 30-day delay are
    assumptions (no system publishes its detector's error rates).

    Parameters
    ----------
    recall : float in [0, 1], default 1.0
        Share of superseded notes the detector catches.
    false_positive_rate : float in [0, 1], default 0.0
        Share of notes it wrongly invalidates (before any true supersession).
    false_positive_delay_days : float > 0, default 30.0
        Mean delay from a note's creation to its false invalidation.
    """

    name: ClassVar[str] = "invalidation"
    invalidates: ClassVar[bool] = True
    needs_truth: ClassVar[bool] = True
    recall: float = 1.0
    false_positive_rate: float = 0.0
    false_positive_delay_days: float = 30.0
    _constraints: ClassVar[dict] = {
        "recall": Interval(0, 1),
        "false_positive_rate": Interval(0, 1),
        "false_positive_delay_days": Interval(0, None, closed="neither"),
    }

    def draws(self, ctx: ScoringContext) -> np.ndarray:
        """The detector's three uniforms (L, 3) of each note of ``ctx``, keyed
        by store row (``ctx.idx``): catch, false positive, its delay."""
        idx = np.asarray(ctx.idx, dtype=np.int64)
        if len(idx) == 0:
            return np.zeros((0, 3))
        rng = child(ctx.rng.bit_generator.seed_seq, "invalidation")
        return rng.random((int(idx.max()) + 1, 3))[idx]

    def invalid_since(self, ctx: ScoringContext) -> np.ndarray:
        """When the detector invalidates each note (L,), days; inf = never."""
        u = self.draws(ctx)
        sup = np.asarray(ctx.superseded_at, dtype=np.float64)
        # creation times from the sweep's ages (the protocol's clock)
        created = ctx.t[0] - np.asarray(ctx.age_created[0], dtype=np.float64)
        caught = np.where(np.isfinite(sup) & (u[:, 0] < self.recall), sup, np.inf)
        fp_at = created - self.false_positive_delay_days * np.log1p(-u[:, 2])
        fp = (u[:, 1] < self.false_positive_rate) & ~(fp_at >= sup)  # NaN sup: never
        return np.minimum(caught, np.where(fp, fp_at, np.inf))

    def evict(self, ctx: ScoringContext) -> np.ndarray:
        return self.invalid_since(ctx) <= ctx.t[0]
