"""Rankers: combine relevance and recency into one score."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .base import Ranker, ScoringContext, register

__all__ = ["Product", "SimilarityOnly"]


@register
@dataclass(frozen=True, kw_only=True)
class Product(Ranker):
    """``score = relevance * recency`` (Hivemind, seed 000)."""

    name: ClassVar[str] = "product"

    def combine(self, rel: np.ndarray, rec: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        return rel * rec


@register
@dataclass(frozen=True, kw_only=True)
class SimilarityOnly(Ranker):
    """``score = relevance``: a static vector store; age and use are ignored."""

    name: ClassVar[str] = "similarity"
    uses_recency: ClassVar[bool] = False

    def combine(self, rel: np.ndarray, rec: np.ndarray | None, ctx: ScoringContext) -> np.ndarray:
        return rel
