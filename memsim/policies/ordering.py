"""Orderers: the position of each packed note in the context.

Contract (:meth:`memsim.policies.base.Orderer.order`)::

    order(values (Q, C), packed (Q, C) bool) -> position (Q, C) int64

``position`` is 0 for the first note of the context, ``n - 1`` for the last
(``n`` = packed notes of the row) and ``-1`` where a candidate is not packed;
the packed positions of a row are a permutation of ``0..n-1``.

"Best" means candidate rank: candidates arrive sorted best first by the
policy's score, so the k-th packed column is the k-th best packed note. The
``values`` argument is part of the contract but the built-in orderers do not
need it (using the rank keeps them consistent with the ranking even where a
score is NaN or -inf).

Why order at all: "models are worse at the middle of a long context. Packing is
only half the job. Ordering matters too" (seed 000); Liu et al., "Lost in the
Middle: How Language Models Use Long Contexts", TACL 2024 (arXiv 2307.03172).
The reader model (:mod:`memsim.evaluation.reader`) turns positions into use probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .base import Orderer, register

__all__ = ["ByScore", "Reversed", "Edges"]


def _packed_rank(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(k, n, packed): rank ``k`` (0 = best) of each packed candidate among the
    packed ones of its row, and ``n`` (Q, 1) packed per row."""
    packed = np.asarray(packed, dtype=bool)
    k = np.cumsum(packed, axis=1) - 1
    n = packed.sum(axis=1, keepdims=True)
    return k, n, packed


@register
@dataclass(frozen=True, kw_only=True)
class ByScore(Orderer):
    """Best first: packed notes keep their rank order.

    ``position = k`` for the k-th best packed note (0-based). O(C) per query.
    """

    name: ClassVar[str] = "score"

    def order(self, values, packed):
        k, _, packed = _packed_rank(packed)
        return np.where(packed, k, -1).astype(np.int64)


@register
@dataclass(frozen=True, kw_only=True)
class Reversed(Orderer):
    """Best last: the k-th best of ``n`` packed notes goes to ``n - 1 - k``.

    Puts the strongest evidence next to the question when the prompt ends with
    it (recency in the context window). O(C) per query.
    """

    name: ClassVar[str] = "reversed"

    def order(self, values, packed):
        k, n, packed = _packed_rank(packed)
        return np.where(packed, n - 1 - k, -1).astype(np.int64)


@register
@dataclass(frozen=True, kw_only=True)
class Edges(Orderer):
    """Best notes at both edges, weakest in the middle.

    Rule, for the k-th best (0-based) of ``n`` packed notes::

        position = k / 2              if k is even   (ranks 1, 3, 5, ... from the start)
        position = n - 1 - (k - 1)/2  if k is odd    (ranks 2, 4, 6, ... from the end)

    so rank 1 -> first, rank 2 -> last, rank 3 -> second, rank 4 ->
    second-to-last, ...; the weakest land in the middle. Hivemind orders "best
    items at the start and end of the context" (seed 000) because of the
    U-shaped use curve of Liu et al. (TACL 2024). O(C) per query.
    """

    name: ClassVar[str] = "edges"

    def order(self, values, packed):
        k, n, packed = _packed_rank(packed)
        pos = np.where(k % 2 == 0, k // 2, n - 1 - (k - 1) // 2)
        return np.where(packed, pos, -1).astype(np.int64)
