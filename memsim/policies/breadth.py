"""Breadth: reward for notes used by many distinct actors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import Breadth, register

__all__ = ["NoBreadth"]


@register
@dataclass(frozen=True, kw_only=True)
class NoBreadth(Breadth):
    """Distinct actors change nothing (factor 1)."""

    name: ClassVar[str] = "none"
