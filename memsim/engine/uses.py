"""The uses an arm's answers make (its feedback's ``touch``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .topc import nonzero2

if TYPE_CHECKING:
    from .arms import _Packed
    from .batch import Batch
    from .state import PolicyState


def _feedback(fb, st: PolicyState, batch: Batch, mask: np.ndarray | None,
              pk: _Packed) -> None:
    """Record the uses the batch's answers make (the feedback's ``touch``;
    ``mask``: the prefilter)."""
    uses = _feedback_uses(fb, batch, mask, pk)
    if uses is not None:
        st.touch(*uses, fb)


def _feedback_uses(fb, batch: Batch, mask: np.ndarray | None, pk: _Packed
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The uses :func:`_feedback` records, as (note rows, actors, times) in
    the order of the batch's queries; None for uses made before scoring."""
    if fb.touches_before_scoring:
        return None
    qi, used = _answer_uses(fb, batch, pk, mask)
    return used, batch.actors[qi], batch.t[qi]


def _reads_packing(fb) -> bool:
    """Whether the answers' uses depend on what was packed (``touch =
    "packed"``), not on the candidates alone (:func:`_chosen`)."""
    return fb.touch == "packed"


def _chosen(fb, pk: _Packed, rows: slice | np.ndarray = slice(None)) -> np.ndarray | None:
    """(R, C) bool: the candidates the answers of the queries ``rows`` use
    (``touch = "packed"``: those packed; ``"returned"``: the top k, as a
    search API returns them); None when the answers choose none
    (``"prefilter"``, ``"none"``)."""
    if _reads_packing(fb):
        return pk.packed[rows]
    if fb.touch == "returned":
        return pk.cand_ok[rows] & (np.arange(pk.cand_ok.shape[1]) < fb.k)
    return None


def _answer_uses(fb, batch: Batch, pk: _Packed, mask: np.ndarray | None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(query, note row) of every use the answers in ``pk`` make, by query
    (``mask``: the prefilter, what a ``"prefilter"`` touch uses)."""
    if fb.touch == "prefilter":
        qi, li = nonzero2(mask)
        return qi, batch.idx[li]
    target = _chosen(fb, pk)
    if target is None:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    qi, ci = nonzero2(target)
    return qi, pk.cand_rows[qi, ci]


def _used_candidates(fb, pk: _Packed) -> np.ndarray:
    """(Q, C) bool: the candidates the answers use (the feedback's touch;
    ``"prefilter"``: every candidate, ``"none"``: none)."""
    chosen = _chosen(fb, pk)
    if chosen is not None:
        return chosen
    return pk.cand_ok if fb.touch == "prefilter" else np.zeros_like(pk.cand_ok)


def _record_uses(st: PolicyState, fb, uses: list) -> None:
    """Record a tick's uses, made part by part (each part's as
    :func:`_feedback_uses` gives them, in the order of its queries), as one
    batch of uses: what the whole tick records."""
    got = [u for u in uses if u is not None]
    if got:
        st.touch(*(np.concatenate(col) for col in zip(*got)), fb)
