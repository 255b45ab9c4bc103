"""Stickiness: how use slows ageing.

Two mechanisms, one per source system, plus the neutral element:

============== ================================================================
name           effect
============== ================================================================
``none``       nothing
``log-recall`` Feather DB: ``effective_age = age / (1 + ln(1 + recalls))``
``access-term`` ai-memory: adds ``sigma * ln(1 + n) * exp(-mu * days_since_access)``
               to the recency (times the breadth's ``on_access`` factor)
============== ================================================================

Both can only raise a note's recency: effective age <= age, access term >= 0.
Tier promotion ("earned permanence", Hivemind) is the feedback's
``promote_after`` together with the ``per-tier`` decay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from memsim.core.params import Interval
from .base import ScoringContext, Stickiness, register

__all__ = ["NoStickiness", "LogRecall", "AccessTerm", "log_recall_factor", "ai_memory_access_term"]

_NON_NEGATIVE = Interval(0, None)


@register
@dataclass(frozen=True, kw_only=True)
class NoStickiness(Stickiness):
    """Use changes nothing: effective age = age, no access term."""

    name: ClassVar[str] = "none"


def log_recall_factor(recalls, weight: float = 1.0) -> np.ndarray:
    """Feather DB's stickiness ``1 + weight * ln(1 + recall_count)`` (weight 1
    in Feather)."""
    return 1.0 + weight * np.log1p(np.asarray(recalls, dtype=np.float64))


@register
@dataclass(frozen=True, kw_only=True)
class LogRecall(Stickiness):
    """Feather DB's adaptive stickiness: recalls slow ageing logarithmically.

    Source: Feather DB ``include/scoring.h`` (``Scorer::calculate_score``)::

        stickiness         = 1 + ln(1 + recall_count)
        effective_age_days = age_days / stickiness

    Seed 002's table (recall 5 -> stickiness 1.79, ...) does not follow this
    formula; its worked example and the code do (``docs/contracts/policies.md``). A note
    recalled 45 times ages 4.83 times slower. ``weight`` scales the log term
    (1 in Feather; 0 disables stickiness).

    Parameters
    ----------
    weight : float >= 0
    """

    name: ClassVar[str] = "log-recall"
    weight: float = 1.0
    _constraints: ClassVar[dict] = {"weight": _NON_NEGATIVE}

    def effective_age(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        return np.asarray(age, dtype=np.float64) / log_recall_factor(ctx.recalls, self.weight)


def ai_memory_access_term(access_count, days_since_access, sigma: float,
                          mu: float) -> np.ndarray:
    """ai-memory's access term before breadth: ``sigma * ln(1 + access_count) *
    exp(-mu * days_since_access)``, 0 where never accessed
    (``days_since_access`` NaN, ``None`` in ai-memory); a negative elapsed
    time clamps to 0 as in ``sweep.rs``."""
    d = np.asarray(days_since_access, dtype=np.float64)
    n = np.asarray(access_count, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        term = sigma * np.log1p(n) * np.exp(-mu * np.maximum(d, 0.0))
    return np.where(np.isnan(d), 0.0, term)


@register
@dataclass(frozen=True, kw_only=True)
class AccessTerm(Stickiness):
    """ai-memory's access reinforcement, added to the recency.

    Source: ``crates/ai-memory-store/src/decay.rs``
    (``retention_score_with_breadth``), seed 001::

        access_term = 0                                            if never accessed
                    = sigma * ln(1 + access_count)
                            * exp(-mu * days_since_access) * breadth   otherwise

    defaults ``sigma = 0.6``, ``mu = 0.04``/day. The breadth factor is the
    breadth component's ``on_access`` (``log-actors``). ``access_count`` is
    the note's recall count in this policy's state; ``days_since_access`` is
    the time since its last use. ai-memory uses this in its eviction sweep
    (``retention = "ai-memory"``), not in ranking.

    Parameters
    ----------
    sigma : float >= 0
        Magnitude of the boost.
    mu_per_day : float >= 0
        Decay rate of the boost with the time since the last access.
    """

    name: ClassVar[str] = "access-term"
    sigma: float = 0.6
    mu_per_day: float = 0.04
    _constraints: ClassVar[dict] = {"sigma": _NON_NEGATIVE, "mu_per_day": _NON_NEGATIVE}

    def access_term(self, ctx: ScoringContext) -> np.ndarray:
        return ai_memory_access_term(ctx.recalls, ctx.since_access, self.sigma, self.mu_per_day)
