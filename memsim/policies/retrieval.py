"""Retrievers: the similarity between a query and each note."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .base import Retriever, ScoringContext, register

__all__ = ["Cosine", "InverseSquaredL2"]


@register
@dataclass(frozen=True, kw_only=True)
class Cosine(Retriever):
    """Cosine similarity, ``q . n / (|q| |n|)``, in [-1, 1].

    The usual dense-retriever score; zero vectors get similarity 0.
    """

    name: ClassVar[str] = "cosine"

    def similarity(self, ctx: ScoringContext) -> np.ndarray:
        def inv(norm2):
            with np.errstate(divide="ignore"):
                return np.where(norm2 > 0, 1.0 / np.sqrt(norm2), 0.0)

        # scale rows and columns instead of dividing a (Q, L) matrix
        sim = ctx.dots * inv(ctx.qnorm2)[:, None].astype(np.float32)
        sim *= inv(ctx.nnorm2)[None, :].astype(np.float32)
        return sim


@register
@dataclass(frozen=True, kw_only=True)
class InverseSquaredL2(Retriever):
    """Feather DB's similarity ``1 / (1 + d)``, ``d`` the **squared** L2 distance.

    ``d = |q|^2 + |n|^2 - 2 q . n`` (Feather DB ``include/scoring.h``).

    Computed in float32, as the engine does; ``d`` is clamped at 0 against
    rounding.
    """

    name: ClassVar[str] = "inverse-sq-l2"

    def similarity(self, ctx: ScoringContext) -> np.ndarray:
        d = (ctx.qnorm2[:, None].astype(np.float32) + ctx.nnorm2[None, :].astype(np.float32)
             - np.float32(2.0) * ctx.dots.astype(np.float32))
        np.maximum(d, np.float32(0.0), out=d)
        return np.float32(1.0) / (np.float32(1.0) + d)
