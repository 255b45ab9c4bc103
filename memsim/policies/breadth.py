"""Breadth: reward for notes used by many distinct actors."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from memsim.core.params import Interval, Options
from .base import Breadth, ScoringContext, register

__all__ = ["NoBreadth", "LogActors", "breadth_factor", "ai_memory_coerce_weight"]


@register
@dataclass(frozen=True, kw_only=True)
class NoBreadth(Breadth):
    """Distinct actors change nothing (factor 1)."""

    name: ClassVar[str] = "none"


def breadth_factor(distinct_actors, weight: float) -> np.ndarray:
    """``1 + weight * ln(max(distinct_actors, 1))``, written as ai-memory does:
    ``1 + w * ln_1p(max(actors, 1) - 1)`` (0 and 1 actors give exactly 1)."""
    a = np.maximum(np.asarray(distinct_actors, dtype=np.float64), 1.0)
    return 1.0 + weight * np.log1p(a - 1.0)


def ai_memory_coerce_weight(weight: float) -> float:
    """What ai-memory does with an invalid breadth weight: NaN, infinite or
    negative silently become 0.0 (``retention_score_with_breadth``: "protect
    against invalid configuration", seed 001).

    memsim never does this to its own parameters (``LogActors(weight=nan)``
    is refused); the function exists to model ai-memory's behaviour in the
    golden tests and in the ``ai-memory`` preset's documentation.
    """
    w = float(weight)
    return w if math.isfinite(w) and w >= 0.0 else 0.0


@register
@dataclass(frozen=True, kw_only=True)
class LogActors(Breadth):
    """ai-memory's breadth term: ``breadth = 1 + w * ln(max(distinct_actors, 1))``.

    Source: ``crates/ai-memory-store/src/decay.rs``
    (``retention_score_with_breadth``: ``1.0 + breadth_weight *
    (f64::from(distinct_actors.max(1)) - 1.0).ln_1p()``), seed 001. 0 or 1
    actors give 1; growth is sublinear (10 actors at ``w = 1.5``: 4.45; 4
    actors: 3.08). The factor is >= 1 for every ``w >= 0``.

    ``apply`` chooses where it acts:

    * ``"access"`` (ai-memory): multiplies the stickiness's access term
      (``access-term``); with another stickiness it changes nothing;
    * ``"score"`` (memsim's extension, for any ranker): multiplies the final
      score. For a ranker whose scores can be negative (cosine), a factor > 1
      pushes a negative score further down.

    Default weight. ai-memory's own default (``decay_breadth_weight``) is 0.0,
    the identity; its test suite checks only that (``access_breadth.rs``,
    ``breadth_is_identity_at_the_default_weight``). Seed 001 says that suite
    "suggests evaluating 1.0 to 2.0", but the test it quotes never uses a
    nonzero weight, so no published source recommends a value: the seed's
    worked examples use 1.5 and 1.0. memsim's component defaults to 1.0, an
    **assumption**: choosing ``log-actors`` should change something (0 would
    make it :class:`NoBreadth`), and 1.0 is the smaller of the seed's example
    weights (10 actors: 3.3x). The ``ai-memory`` preset keeps ai-memory's 0.0.
    Invalid weights are refused, never coerced (see
    :func:`ai_memory_coerce_weight`).

    Parameters
    ----------
    weight : float >= 0
    apply : {"access", "score"}
    """

    name: ClassVar[str] = "log-actors"
    weight: float = 1.0
    apply: str = "access"
    _constraints: ClassVar[dict] = {"weight": Interval(0, None),
                                    "apply": Options(("access", "score"))}

    def _factor(self, ctx: ScoringContext) -> np.ndarray:
        return breadth_factor(ctx.distinct_actors, self.weight)

    def on_access(self, ctx: ScoringContext) -> np.ndarray | float:
        return self._factor(ctx) if self.apply == "access" else 1.0

    def on_score(self, ctx: ScoringContext) -> np.ndarray | float:
        return self._factor(ctx) if self.apply == "score" else 1.0
