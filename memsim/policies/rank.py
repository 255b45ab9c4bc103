"""Rankers: combine relevance and recency into one score.

``combine(rel, rec, ctx)`` gets the retriever's similarity ``rel`` (Q, L) and
the recency ``rec`` (Q, L) (decay after stickiness, plus any access term;
``None`` when the ranker declares ``uses_recency = False``) and returns the
score (Q, L) used for ranking and packing.

================= =============================================================
name              score
================= =============================================================
``product``       rel * rec                                       (Hivemind)
``feather-blend`` ((1 - w) rel + w max(min_weight, rec)) * importance, float32
``weighted-sum``  a_rec n(rec) + a_imp n(importance) + a_rel n(rel), n = min-max
                  per query                                       (Generative Agents)
``additive``      rel + rec (+ c * importance)                    (LangChain)
``similarity``    rel
``recency``       rec
``random``        uniform [0, 1) from the policy's seeded stream
``oracle``        the true gains (the engine then packs by them)
``calibrated-     exp(beta (rel - 1)) * rec: the product family whose optimum
product``         follows from a planted workload (memsim.planted)
``bayes``         the posterior expected gain under the synthetic workload's
                  own model (memsim.planted): the best score-based ranking
================= =============================================================

Rankers with ``set_dependent = True`` score a note relative to the other
candidates of its query (or not from its features at all), so a pairwise
comparison such as :func:`memsim.curves.curves_table`'s crossover is not
defined for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from memsim.errors import ConfigError
from memsim.params import Interval
from .base import Ranker, ScoringContext, register

__all__ = [
    "Product",
    "FeatherBlend",
    "WeightedSum",
    "Additive",
    "SimilarityOnly",
    "RecencyOnly",
    "RandomRanker",
    "Oracle",
    "CalibratedProduct",
    "Bayes",
    "live_mask",
    "minmax_normalise",
]

_NON_NEGATIVE = Interval(0, None)
_UNIT = Interval(0, 1)


@register
@dataclass(frozen=True, kw_only=True)
class Product(Ranker):
    """``score = relevance * recency`` (Hivemind, seed 000).

    The recency multiplier applied to the match score.
    """

    name: ClassVar[str] = "product"
    set_dependent: ClassVar[bool] = False

    def combine(self, rel: np.ndarray, rec: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        return rel * rec


@register
@dataclass(frozen=True, kw_only=True)
class FeatherBlend(Ranker):
    """Feather DB's blend, in float32 as the engine computes it.

    Source: Feather DB ``include/scoring.h`` (``Scorer::calculate_score``)::

        if (recency < min_weight) recency = min_weight;
        final_score = ((1 - time_weight) * similarity
                       + time_weight * recency) * importance;

    every quantity a C++ ``float``. Defaults ``time_weight = 0.3``,
    ``min_weight = 0`` (``ScoringConfig``). ``similarity`` is the retriever's
    (Feather: ``1 / (1 + squared L2)``, retriever ``inverse-sq-l2``),
    ``recency`` the decay's (Feather: ``half-life`` 30 days after the
    ``log-recall`` stickiness), ``importance`` the note's (default 1.0).

    Parameters
    ----------
    time_weight : float in [0, 1]
        0 = similarity only, 1 = recency only.
    min_weight : float in [0, 1]
        Floor on the recency term.
    """

    name: ClassVar[str] = "feather-blend"
    set_dependent: ClassVar[bool] = False
    time_weight: float = 0.3
    min_weight: float = 0.0
    _constraints: ClassVar[dict] = {"time_weight": _UNIT, "min_weight": _UNIT}

    def combine(self, rel: np.ndarray, rec: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        f32 = np.float32
        tw = f32(self.time_weight)
        rec32 = np.maximum(np.asarray(rec, dtype=f32), f32(self.min_weight))
        sim32 = np.asarray(rel, dtype=f32)
        imp32 = np.asarray(ctx.importance, dtype=f32)
        return ((f32(1.0) - tw) * sim32 + tw * rec32) * imp32

    def recency_floor(self) -> float:
        return self.min_weight


def live_mask(ctx: ScoringContext) -> np.ndarray | None:
    """(Q, L) bool: the notes a query can see (existing, not expired, not
    evicted, inside the retriever's prefilter); None when the context does not
    say (then all count)."""
    live = ctx.live
    return None if live is None else np.asarray(live, dtype=bool)


def minmax_normalise(x: np.ndarray, live: np.ndarray | None) -> np.ndarray:
    """Min-max normalise each row to [0, 1] over its live columns.

    As Generative Agents' ``normalize_dict_floats(d, 0, 1)``: ``(x - min) /
    (max - min)``; a row whose live values are all equal gets 0.5 everywhere.
    Columns that are not live get 0 (they are masked by the engine anyway).
    """
    x = np.asarray(x, dtype=np.float64)
    if live is None:
        live = np.ones(x.shape, dtype=bool)
    live = np.broadcast_to(live, x.shape)
    lo = np.min(np.where(live, x, np.inf), axis=1, keepdims=True)
    hi = np.max(np.where(live, x, -np.inf), axis=1, keepdims=True)
    rng = hi - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(rng > 0, (x - lo) / np.where(rng > 0, rng, 1.0), 0.5)
    return np.where(live, out, 0.0)


@register
@dataclass(frozen=True, kw_only=True)
class WeightedSum(Ranker):
    """Generative Agents' score: weighted sum of min-max-normalised terms.

    Recency, importance and relevance, each normalised per query.

    Park et al., "Generative Agents" (UIST 2023), section 4.1::

        score = a_recency * recency + a_importance * importance
                + a_relevance * relevance

    each term min-max normalised to [0, 1] over the candidate memories (all
    equal -> 0.5, as ``normalize_dict_floats`` in the released code), "all
    alphas set to 1" in the paper. memsim normalises per query over the notes
    live at the query's time. The released code weighs recency, relevance and
    importance 0.5, 3 and 2 (``gw = [0.5, 3, 2]`` in ``retrieve.py``): set
    ``w_recency = 0.5, w_relevance = 3, w_importance = 2`` for it.
    ``importance`` is the note's importance column (the paper's 1-10
    poignancy; only its rank within the query matters).

    Parameters
    ----------
    w_recency, w_importance, w_relevance : float >= 0
    """

    name: ClassVar[str] = "weighted-sum"
    set_dependent: ClassVar[bool] = True  # min-max over the live notes
    w_recency: float = 1.0
    w_importance: float = 1.0
    w_relevance: float = 1.0
    _constraints: ClassVar[dict] = {"w_recency": _NON_NEGATIVE, "w_importance": _NON_NEGATIVE,
                                    "w_relevance": _NON_NEGATIVE}

    def combine(self, rel: np.ndarray, rec: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        rel = np.asarray(rel, dtype=np.float64)
        live = live_mask(ctx)
        imp = np.broadcast_to(np.asarray(ctx.importance, dtype=np.float64), rel.shape)
        rec = np.broadcast_to(np.asarray(rec, dtype=np.float64), rel.shape)
        return (self.w_recency * minmax_normalise(rec, live)
                + self.w_importance * minmax_normalise(imp, live)
                + self.w_relevance * minmax_normalise(rel, live))


@register
@dataclass(frozen=True, kw_only=True)
class Additive(Ranker):
    """LangChain's time-weighted score: ``score = similarity + recency``.

    Source: ``langchain/retrievers/time_weighted_retriever.py``
    (``_get_combined_score``: ``score = (1 - decay_rate) ** hours_passed``,
    ``+ metadata[key]`` for each of ``other_score_keys``, ``+
    vector_relevance``). ``importance_weight`` adds ``c * importance``, as
    ``other_score_keys = ["importance"]`` does with ``c = 1`` (default 0: no
    other keys, LangChain's default).

    Parameters
    ----------
    importance_weight : float >= 0
    """

    name: ClassVar[str] = "additive"
    set_dependent: ClassVar[bool] = False
    importance_weight: float = 0.0
    _constraints: ClassVar[dict] = {"importance_weight": _NON_NEGATIVE}

    def combine(self, rel: np.ndarray, rec: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        score = rel + rec
        if self.importance_weight:
            score = score + self.importance_weight * np.asarray(ctx.importance, dtype=np.float64)
        return score


@register
@dataclass(frozen=True, kw_only=True)
class SimilarityOnly(Ranker):
    """``score = relevance``: a static vector store; age and use are ignored."""

    name: ClassVar[str] = "similarity"
    uses_recency: ClassVar[bool] = False
    set_dependent: ClassVar[bool] = False

    def combine(self, rel: np.ndarray, rec: np.ndarray | None, ctx: ScoringContext) -> np.ndarray:
        return rel


@register
@dataclass(frozen=True, kw_only=True)
class RecencyOnly(Ranker):
    """``score = recency``: the newest notes first, whatever the query.

    A baseline ("just send the latest notes"). Ties go to the lower ``note_id``.
    """

    name: ClassVar[str] = "recency"
    set_dependent: ClassVar[bool] = False

    def combine(self, rel: np.ndarray, rec: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        return np.broadcast_to(np.asarray(rec, dtype=np.float64), np.shape(rel)).copy()


@register
@dataclass(frozen=True, kw_only=True)
class RandomRanker(Ranker):
    """Uniform random scores in [0, 1): the floor any policy must beat.

    Drawn from the policy's own random stream (``ctx.rng``, a named child of
    the experiment's seed), so a run is reproducible for a seed and the draws
    of one arm never shift another's.
    """

    name: ClassVar[str] = "random"
    uses_recency: ClassVar[bool] = False
    set_dependent: ClassVar[bool] = True

    def combine(self, rel: np.ndarray, rec: np.ndarray | None, ctx: ScoringContext) -> np.ndarray:
        return ctx.rng.random(np.shape(rel))


@register
@dataclass(frozen=True, kw_only=True)
class Oracle(Ranker):
    """The ground truth: ``score = gain`` of the query's qrels (0 if none).

    The upper bound for regret. It declares ``needs_truth``, so the engine
    gives the packer the true gains as values; with the ``exact`` packer the
    context is the best subset of the top-C by gain (the ``oracle`` preset).
    Only a ranker that declares ``needs_truth`` may read ``ctx.gains``.
    """

    name: ClassVar[str] = "oracle"
    uses_recency: ClassVar[bool] = False
    set_dependent: ClassVar[bool] = True
    needs_truth: ClassVar[bool] = True

    def combine(self, rel: np.ndarray, rec: np.ndarray | None, ctx: ScoringContext) -> np.ndarray:
        return np.asarray(ctx.gains, dtype=np.float64)


@register
@dataclass(frozen=True, kw_only=True)
class CalibratedProduct(Ranker):
    """``score = exp(beta * (rel - 1)) * rec``: a product calibrated on similarity.

    With a cosine retriever and ``decay = {kind = "half-life"}`` the ranking is
    by ``beta * cos - age * ln 2 / h``, the form of the Bayes-optimal ranking
    on a workload whose validity has one exponential law (module docstring of
    :mod:`memsim.planted`): there the optimum is ``h = H`` at ``beta`` = the
    likelihood-ratio slope of the similarity model, and ``memsim optimum``
    derives both. Only ``beta * h`` is identifiable from a ranking.
    memsim's design.

    Parameters
    ----------
    beta : float, default 20.0
        Log-likelihood-ratio slope of similarity (per unit of cosine). The
        default is about the slope of memsim's default workload (19.2).
    """

    name: ClassVar[str] = "calibrated-product"
    beta: float = 20.0
    _constraints: ClassVar[dict] = {"beta": Interval(0, 1e4, closed="neither")}

    def combine(self, rel: np.ndarray, rec: np.ndarray, ctx: ScoringContext) -> np.ndarray:
        return np.exp(self.beta * (np.asarray(rel, dtype=np.float64) - 1.0)) * rec


@register
@dataclass(frozen=True, kw_only=True)
class Bayes(Ranker):
    """The posterior expected gain under the planted model: an upper bound.

    ``score = P(on the asked slot | cos, age, class, author) * E[gain | on
    the slot, age, class]``, computed by
    :meth:`memsim.planted.PlantedModel.expected_gain` from the knobs of the
    synthetic workload that generated the stream (derivation in
    :mod:`memsim.planted`). The cosine is computed from the embeddings
    whatever the policy's retriever. No score-based policy ranks better on
    that workload (exactly so for one note per slot; chains of notes use a
    documented approximation), as ``oracle`` bounds every policy. It runs only
    on streams generated by memsim (a ConfigError otherwise) and ignores the
    decay pipeline.
    """

    name: ClassVar[str] = "bayes"
    uses_recency: ClassVar[bool] = False
    needs_planted: ClassVar[bool] = True

    def combine(self, rel: np.ndarray, rec: np.ndarray | None, ctx: ScoringContext) -> np.ndarray:
        model = ctx.planted
        if model is None:
            raise ConfigError("ranker 'bayes' needs a stream generated by memsim's synthetic "
                              "workload (this stream has no planted model)")
        denom = np.sqrt(np.asarray(ctx.qnorm2, dtype=np.float64)[:, None]
                        * np.asarray(ctx.nnorm2, dtype=np.float64)[None, :])
        with np.errstate(invalid="ignore", divide="ignore"):
            cos = np.where(denom > 0, np.asarray(ctx.dots, dtype=np.float64) / denom, 0.0)
        same = np.asarray(ctx.note_actor)[None, :] == np.asarray(ctx.query_actor)[:, None]
        return model.expected_gain(cos, ctx.age("created"), np.asarray(ctx.note_class),
                                   np.asarray(ctx.t), same)
