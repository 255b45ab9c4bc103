"""Retention: periodic eviction sweeps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import Retention, register

__all__ = ["KeepAll"]


@register
@dataclass(frozen=True, kw_only=True)
class KeepAll(Retention):
    """Never evicts (TTL expiry still applies: the engine enforces ``expires_at``)."""

    name: ClassVar[str] = "none"
