"""Stickiness: how use slows ageing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import Stickiness, register

__all__ = ["NoStickiness"]


@register
@dataclass(frozen=True, kw_only=True)
class NoStickiness(Stickiness):
    """Use changes nothing: effective age = age, no access term."""

    name: ClassVar[str] = "none"
