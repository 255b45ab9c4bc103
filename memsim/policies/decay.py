"""Decay families: the recency multiplier as a function of (effective) age.

Every family maps age in days (>= 0) to a multiplier; negative ages (a note
scored before its creation time, which the engine never does) are clamped to 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..params import Interval
from .base import Decay, ScoringContext, register

__all__ = ["NoDecay", "PerDayRate", "HalfLife", "HalfLifeFloor"]


@register
@dataclass(frozen=True, kw_only=True)
class NoDecay(Decay):
    """No decay: ``recency = 1`` at every age (a static vector store)."""

    name: ClassVar[str] = "none"

    def recency(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        return np.ones_like(age, dtype=np.float64)

    def half_life(self) -> float:
        return math.inf


@register
@dataclass(frozen=True, kw_only=True)
class PerDayRate(Decay):
    """A fixed share lost per day: ``recency = (1 - rate) ** days``.

    Hivemind's original multiplier was ``0.95 ** days`` (rate 0.05; seed 000,
    "5% a Day Sounds Gentle"): a half-life of ``ln 2 / -ln(0.95) = 13.5`` days,
    1e-4 after six months.
    """

    name: ClassVar[str] = "per-day"
    rate: float = 0.05
    _constraints: ClassVar[dict] = {"rate": Interval(0, 1, closed="left")}

    def recency(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        # exp(age * ln(1 - rate)): the same value, several times faster than power
        return np.exp(np.maximum(age, 0.0) * np.log1p(-self.rate))

    def half_life(self) -> float:
        return math.inf if self.rate == 0 else math.log(2) / -math.log1p(-self.rate)


@register
@dataclass(frozen=True, kw_only=True)
class HalfLife(Decay):
    """Exponential decay by half-life: ``recency = 0.5 ** (days / half_life)``.

    Feather DB's recency term (``include/scoring.h``) before its floor.
    """

    name: ClassVar[str] = "half-life"
    half_life_days: float = 30.0
    _constraints: ClassVar[dict] = {"half_life_days": Interval(0, None, closed="neither")}

    def recency(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        return np.exp2(-np.maximum(age, 0.0) / self.half_life_days)

    def half_life(self) -> float:
        return self.half_life_days


@register
@dataclass(frozen=True, kw_only=True)
class HalfLifeFloor(Decay):
    """Half-life with a floor:
    ``recency = floor + (1 - floor) * 0.5 ** (days / half_life)``.

    Hivemind's fix (seed 000): half-life 180 days, floor 0.35, so that "age
    can never push a note below" the floor; a year-old note keeps about half
    its weight (0.35 + 0.65 * 0.5 ** (365/180) = 0.51).
    """

    name: ClassVar[str] = "half-life-floor"
    half_life_days: float = 180.0
    floor: float = 0.35
    _constraints: ClassVar[dict] = {
        "half_life_days": Interval(0, None, closed="neither"),
        "floor": Interval(0, 1, closed="left"),
    }

    def recency(self, age: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        return self.floor + (1.0 - self.floor) * np.exp2(-np.maximum(age, 0.0) / self.half_life_days)

    def half_life(self) -> float:
        return self.half_life_days
