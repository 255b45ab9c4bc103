"""Packers: choose which top-C candidates go into the token budget.

All packers receive candidates sorted best first and never exceed the budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .base import Packer, register

__all__ = ["TopKCutoff", "SkipFill"]


@register
@dataclass(frozen=True, kw_only=True)
class TopKCutoff(Packer):
    """Sort by score and fill from the top; stop at the first note that does not
    fit (Hivemind's original packing, seed 000: "top-k with a cutoff").
    """

    name: ClassVar[str] = "top-k-cutoff"

    def pack(self, values, tokens, valid, budget):
        used = np.cumsum(np.where(valid, tokens, 0), axis=1)
        # cumsum is non-decreasing, so "fits so far" is a prefix of each row.
        return valid & (used <= budget[:, None])


@register
@dataclass(frozen=True, kw_only=True)
class SkipFill(Packer):
    """Sort by score; add each note that still fits, skipping those that do not."""

    name: ClassVar[str] = "skip-fill"

    def pack(self, values, tokens, valid, budget):
        q, c = tokens.shape
        packed = np.zeros((q, c), dtype=bool)
        used = np.zeros(q, dtype=np.int64)
        for j in range(c):  # loop over candidate ranks (C), vectorised over queries
            take = valid[:, j] & (used + tokens[:, j] <= budget)
            packed[:, j] = take
            used += np.where(take, tokens[:, j], 0)
        return packed
