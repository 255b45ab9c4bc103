"""Orderers: the position of each packed note in the context."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .base import Orderer, register

__all__ = ["ByScore"]


@register
@dataclass(frozen=True, kw_only=True)
class ByScore(Orderer):
    """Best first: packed notes keep their rank order."""

    name: ClassVar[str] = "score"

    def order(self, values, packed):
        pos = np.cumsum(packed, axis=1) - 1
        return np.where(packed, pos, -1).astype(np.int64)
