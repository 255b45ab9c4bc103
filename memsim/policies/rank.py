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
product``         follows from a planted workload (memsim.data.planted)
``bayes``         the posterior expected gain under the synthetic workload's
                  own model (memsim.data.planted): the best score-based ranking
``langchain-time- rec + relevance over LangChain's candidates (the store's
weighted``        nearest and the k newest), which it chooses itself
``generative-     0.5 n(0.99 ** rank) + 3 n(rel) + 2 n(importance), the rank
agents-code``     in last-access order                  (Generative Agents' code)
``as-logged``     the production system's logged ranking (a trace's
                  ``retrieved`` events): its scores, else 1 / rank
================= =============================================================

``score_bound`` (on ``product``, ``feather-blend``, ``additive``,
``similarity`` and ``calibrated-product``) bounds a note's score by a
non-decreasing function of its similarity, given bounds of its recency: the
engine then finds the exact top C without scoring every live note.

Rankers with ``set_dependent = True`` score a note relative to the other
candidates of its query (or not from its features at all), so a pairwise
comparison such as :func:`memsim.reporting.curves.curves_table`'s crossover is not
defined for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from memsim.core import jit
from memsim.core.errors import ConfigError
from memsim.core.params import Interval, Options
from .base import Ranker, ScoringContext, register
from .retrieval import Cosine

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
    "AsLogged",
    "live_mask",
    "minmax_normalise",
    "minmax_sum",
]

_NON_NEGATIVE = Interval(0, None)
_UNIT = Interval(0, 1)

#: Relative slack added to score bounds, far above the rounding of the few
#: float64 (or float32) operations of a score.
_SLACK = 1e-5


def _with_slack(bound: np.ndarray, magnitude: np.ndarray) -> np.ndarray:
    """``bound`` raised by a relative slack of the terms' ``magnitude``."""
    return bound + _SLACK * magnitude + 1e-300


def _importance_range(ctx: ScoringContext) -> tuple[float, float]:
    imp = np.asarray(ctx.importance, dtype=np.float64)
    if imp.size == 0:
        return 0.0, 0.0
    return float(imp.min()), float(imp.max())


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

    def score_bound(self, rel, rec_lo, rec_hi, ctx):
        """``rel * rec_hi`` where ``rel >= 0``, ``rel * rec_lo`` below (needs
        ``0 <= rec_lo``)."""
        if rec_lo is None or rec_hi is None or rec_lo < 0:
            return None
        rel = np.asarray(rel, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            b = np.where(rel >= 0, rel * rec_hi, rel * rec_lo)
        return _with_slack(b, np.abs(b))

    def similarity_needed(self, score, rec_lo, rec_hi, ctx):
        """``score / rec_hi`` where ``score > 0`` (a note with ``rel <= 0``
        scores <= 0 there; needs ``0 <= rec_lo``), ``-inf`` elsewhere."""
        if rec_lo is None or rec_lo < 0:
            return None
        score = np.asarray(score, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            need = score / (np.asarray(rec_hi, dtype=np.float64) * (1.0 + _SLACK))
        return np.where(score > 0, need, -np.inf)

    def reads_uses(self) -> bool:
        return False


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

    def score_bound(self, rel, rec_lo, rec_hi, ctx):
        """``((1 - w) rel + w max(rec_hi, min_weight)) * importance``, the
        largest importance where that is >= 0, the smallest below."""
        if rec_hi is None:
            return None
        lo, hi = _importance_range(ctx)
        if lo < 0:
            return None
        rel = np.asarray(rel, dtype=np.float64)
        w = self.time_weight
        r = max(rec_hi, self.min_weight)
        term = (1.0 - w) * rel + w * r
        b = np.where(term >= 0, term * hi, term * lo)
        return _with_slack(b, ((1.0 - w) * np.abs(rel) + w * abs(r)) * hi)

    def recency_floor(self) -> float:
        return self.min_weight

    def reads_uses(self) -> bool:
        return False


def _as_shape(x, shape: tuple, dtype=None) -> np.ndarray:
    """``x`` as an array of ``shape``: itself when it has that shape, else
    broadcast to it (a read-only view); neither is written to."""
    x = np.asarray(x, dtype=dtype)
    return x if x.shape == shape else np.broadcast_to(x, shape)


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
    ``x - min`` is taken as ``(x - min) + 0.0``, so that a zero comes out
    +0.0 whichever of 0.0 and -0.0 the row's minimum is.
    """
    x = np.asarray(x, dtype=np.float64)
    dead = (np.zeros(x.shape, dtype=bool) if live is None
            else ~np.broadcast_to(live, x.shape))
    # in one (Q, L) array: a pass per step, no temporaries of that size. The
    # row's extremes over the live columns, the others set to the
    # reduction's identity (a reduction's where= is several times slower);
    # initial=: a batch over an empty store has rows of no columns
    out = np.where(dead, np.inf, x)
    lo = out.min(axis=1, keepdims=True, initial=np.inf)
    np.copyto(out, -np.inf, where=dead)
    hi = out.max(axis=1, keepdims=True, initial=-np.inf)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        rng = hi - lo  # inf - inf: NaN, no spread
        spread = rng > 0
        np.subtract(x, lo, out=out)
        out += 0.0
        out /= np.where(spread, rng, 1.0)
    out[~spread[:, 0]] = 0.5
    np.copyto(out, 0.0, where=dead)
    return out


def minmax_sum(terms: list[tuple[float, np.ndarray]], live: np.ndarray | None) -> np.ndarray:
    """``w1 * minmax_normalise(x1, live) + w2 * minmax_normalise(x2, live) +
    ...``, added left to right, for ``(w, x)`` in ``terms`` (each x (Q, L) or
    broadcast to it); compiled in one pass per row where numba is on (the
    same float operations: the same values bit for bit)."""
    shape = np.broadcast_shapes(*(np.shape(x) for _, x in terms))
    xs = [_as_shape(x, shape, np.float64) for _, x in terms]
    if jit.enabled() and len(terms) == 3 and len(shape) == 2:
        alive = (np.ones(shape, dtype=bool) if live is None
                 else _as_shape(live, shape, bool))
        (w1, _), (w2, _), (w3, _) = terms
        return _minmax_sum3_rows(float(w1), xs[0], float(w2), xs[1], float(w3), xs[2], alive)
    out = terms[0][0] * minmax_normalise(xs[0], live)
    for (w, _), x in zip(terms[1:], xs[1:]):
        out = out + w * minmax_normalise(x, live)
    return out


@jit.kernel
def _minmax_sum3_rows(w1, x1, w2, x2, w3, x3, live):
    """:func:`minmax_sum` of three terms one row at a time (compiled by
    :func:`memsim.core.jit.kernel`): the three terms' extremes over the row's
    live columns in one pass (a live NaN: no spread), then per element the
    same subtraction, ``+ 0.0`` and division as :func:`minmax_normalise`, the
    terms weighted and added left to right. The second pass has no branch
    (each term's choice between its quotient and 0.5 is the row's), so it
    runs in vector instructions."""
    q, n = x1.shape
    out = np.empty((q, n))
    dead = w1 * 0.0 + w2 * 0.0 + w3 * 0.0  # a column not live: 0 in every term
    for r in range(q):
        lo1 = lo2 = lo3 = np.inf
        hi1 = hi2 = hi3 = -np.inf
        nan1 = nan2 = nan3 = False
        for j in range(n):
            if live[r, j]:
                v1, v2, v3 = x1[r, j], x2[r, j], x3[r, j]
                nan1 |= v1 != v1
                nan2 |= v2 != v2
                nan3 |= v3 != v3
                lo1 = v1 if v1 < lo1 else lo1
                hi1 = v1 if v1 > hi1 else hi1
                lo2 = v2 if v2 < lo2 else lo2
                hi2 = v2 if v2 > hi2 else hi2
                lo3 = v3 if v3 < lo3 else lo3
                hi3 = v3 if v3 > hi3 else hi3
        s1 = hi1 - lo1 > 0 and not nan1
        s2 = hi2 - lo2 > 0 and not nan2
        s3 = hi3 - lo3 > 0 and not nan3
        # a row without spread divides by 1 (never by 0) and takes 0.5
        d1 = hi1 - lo1 if s1 else 1.0
        d2 = hi2 - lo2 if s2 else 1.0
        d3 = hi3 - lo3 if s3 else 1.0
        for j in range(n):
            a = ((x1[r, j] - lo1) + 0.0) / d1
            b = ((x2[r, j] - lo2) + 0.0) / d2
            c = ((x3[r, j] - lo3) + 0.0) / d3
            v = w1 * (a if s1 else 0.5) + w2 * (b if s2 else 0.5) + w3 * (c if s3 else 0.5)
            out[r, j] = v if live[r, j] else dead
    return out


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
        return minmax_sum([(self.w_recency, rec), (self.w_importance, ctx.importance),
                           (self.w_relevance, rel)], live_mask(ctx))

    def minmax_weights(self) -> tuple[float, float, float]:
        return self.w_recency, self.w_importance, self.w_relevance

    def reads_uses(self) -> bool:
        return False


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

    def score_bound(self, rel, rec_lo, rec_hi, ctx):
        """``rel + rec_hi (+ c * max importance)``."""
        if rec_hi is None:
            return None
        rel = np.asarray(rel, dtype=np.float64)
        extra = self.importance_weight * _importance_range(ctx)[1] if self.importance_weight \
            else 0.0
        return _with_slack(rel + rec_hi + extra, np.abs(rel) + abs(rec_hi) + abs(extra))

    def reads_uses(self) -> bool:
        return False


@register
@dataclass(frozen=True, kw_only=True)
class SimilarityOnly(Ranker):
    """``score = relevance``: a static vector store; age and use are ignored."""

    name: ClassVar[str] = "similarity"
    uses_recency: ClassVar[bool] = False
    set_dependent: ClassVar[bool] = False

    def combine(self, rel: np.ndarray, rec: np.ndarray | None, ctx: ScoringContext) -> np.ndarray:
        return rel

    def score_bound(self, rel, rec_lo, rec_hi, ctx):
        """The similarity itself."""
        return np.asarray(rel, dtype=np.float64)

    def reads_uses(self) -> bool:
        return False


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

    def reads_uses(self) -> bool:
        return False


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

    def reads_uses(self) -> bool:
        return False


@register
@dataclass(frozen=True, kw_only=True)
class CalibratedProduct(Ranker):
    """``score = exp(beta * (rel - 1)) * rec``: a product calibrated on similarity.

    With a cosine retriever and ``decay = {kind = "half-life"}`` the ranking is
    by ``beta * cos - age * ln 2 / h``, the form of the Bayes-optimal ranking
    on a workload whose validity has one exponential law (module docstring of
    :mod:`memsim.data.planted`): there the optimum is ``h = H`` at ``beta`` = the
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

    def score_bound(self, rel, rec_lo, rec_hi, ctx):
        """``exp(beta (rel - 1)) * rec_hi`` (needs ``0 <= rec_lo``)."""
        if rec_lo is None or rec_hi is None or rec_lo < 0:
            return None
        with np.errstate(over="ignore"):
            b = np.exp(self.beta * (np.asarray(rel, dtype=np.float64) - 1.0)) * rec_hi
        return _with_slack(b, b)

    def reads_uses(self) -> bool:
        return False


@register
@dataclass(frozen=True, kw_only=True)
class Bayes(Ranker):
    """The posterior expected gain under the planted model: a reference near the best.

    ``score = P(on the asked slot | cos, age, class, author) * E[gain | on
    the slot, age, class]``, computed by
    :meth:`memsim.data.planted.PlantedModel.expected_gain` from the knobs of the
    synthetic workload that generated the stream (derivation in
    :mod:`memsim.data.planted`). The cosine is computed from the embeddings
    whatever the policy's retriever. It reads hidden labels (the planted
    model), so it is a reference, not a policy a system can run; its ranking
    has the form of the best one for one note per slot, but its cosine laws
    take each query's projections at their means, so it is near the best
    ranking, not exactly it, and its values are not calibrated probabilities
    (:mod:`memsim.data.planted` gives the measured gap). ``oracle`` (the true
    gains) bounds every policy. It runs only on streams generated by memsim
    (a ConfigError otherwise) and ignores the decay pipeline.
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

    def reads_uses(self) -> bool:
        return False


@register
@dataclass(frozen=True, kw_only=True)
class AsLogged(Ranker):
    """What the production system returned: its order, its scores if logged.

    Reads the stream's logged rankings (the optional ``retrieved`` table, from
    a trace's ``retrieved`` events, :mod:`memsim.data.importers.trace`) through
    ``ctx.logged_rank`` (Q, L: the rank from 1, ``inf`` where the system did
    not return the note) and ``ctx.logged_score`` (Q, L: NaN where not
    logged). It declares ``needs_logged``: the engine then lets it rank only
    the notes the system returned for each query.

    ``score`` = the logged score when ``use_scores`` and the query's
    returned notes all have one and they do not increase down the list;
    otherwise ``1 / rank``. Either way the order is the logged order (ties
    of equal logged scores go to the lower ``note_id``, as everywhere in the
    engine); value-based packers see the logged scores. Notes the system did
    not return score 0 (the engine leaves them out).

    Parameters
    ----------
    use_scores : bool
        Use the logged scores where possible (default True); False ranks by
        ``1 / rank`` only.
    """

    name: ClassVar[str] = "as-logged"
    uses_recency: ClassVar[bool] = False
    set_dependent: ClassVar[bool] = True  # the score comes from the log, not the note
    #: reads ``ctx.logged_rank`` / ``ctx.logged_score``: the engine restricts
    #: the live notes of each query to the ones the system returned
    needs_logged: ClassVar[bool] = True
    use_scores: bool = True

    def combine(self, rel: np.ndarray, rec: np.ndarray | None, ctx: ScoringContext) -> np.ndarray:
        shape = np.shape(rel)
        rank = getattr(ctx, "logged_rank", None)
        if rank is None:  # a context without logged rankings: nothing was returned
            return np.zeros(shape)
        rank = np.broadcast_to(np.asarray(rank, dtype=np.float64), shape)
        returned = np.isfinite(rank)
        with np.errstate(divide="ignore"):
            out = np.where(returned, 1.0 / np.where(returned, rank, 1.0), 0.0)
        score = getattr(ctx, "logged_score", None)
        if not self.use_scores or score is None:
            return out
        score = np.broadcast_to(np.asarray(score, dtype=np.float64), shape)
        # per query: every returned note has a finite score, non-increasing in rank
        have = np.where(returned, np.isfinite(score), True).all(axis=1)
        order = np.argsort(np.where(returned, rank, np.inf), axis=1, kind="stable")
        s_sorted = np.take_along_axis(np.where(returned, score, -np.inf), order, axis=1)
        r_sorted = np.take_along_axis(returned, order, axis=1)
        with np.errstate(invalid="ignore"):
            rising = (np.diff(s_sorted, axis=1) > 0) & r_sorted[:, 1:]
        ok = have & ~rising.any(axis=1) & returned.any(axis=1)
        return np.where(ok[:, None] & returned, np.where(returned, score, 0.0), out)


# --------------------------------------------------------------------------
# LangChain's time-weighted retriever, whole (candidates and score)
# --------------------------------------------------------------------------

#: The store normalisations of :class:`LangChainTimeWeighted` (``relevance``).
LANGCHAIN_RELEVANCE = ("cosine", "l2", "inner-product")


#: the cosine of LangChain's ``"cosine"`` relevance
_COSINE = Cosine()


def _index_score_and_relevance(ctx: ScoringContext, relevance: str
                               ) -> tuple[np.ndarray, np.ndarray]:
    """The vector store's search order (higher first) and LangChain's relevance
    (Q, L), both float32 as FAISS computes them.

    ``cosine``: inner product of L2-normalised vectors, relevance = the cosine;
    ``l2``: squared L2 distance ``d``, relevance ``1 - d / sqrt(2)``;
    ``inner-product``: inner product ``s``, relevance ``1 - s`` if ``s > 0``
    else ``-s`` (``VectorStore._max_inner_product_relevance_score_fn``).
    """
    f32 = np.float32
    if relevance == "cosine":
        # the cosine retriever's: (q . n * 1/|q|) * 1/|n| in float32, as
        # FAISS's inner product of normalised vectors (an engine context
        # shares it with every arm of the batch and every query of it)
        cos = np.asarray(ctx.similarity(_COSINE), dtype=f32)
        return cos, cos
    dots = np.asarray(ctx.dots, dtype=f32)
    qn2 = np.asarray(ctx.qnorm2, dtype=np.float64)
    nn2 = np.asarray(ctx.nnorm2, dtype=np.float64)
    if relevance == "l2":
        d = qn2[:, None].astype(f32) + nn2[None, :].astype(f32) - f32(2.0) * dots
        np.maximum(d, f32(0.0), out=d)
        return -d, f32(1.0) - d / f32(np.sqrt(2.0))
    rel = np.where(dots > 0, f32(1.0) - dots, -dots).astype(f32)
    return dots, rel


def _top_by_row(score: np.ndarray, allowed: np.ndarray, m: int) -> np.ndarray:
    """(Q, L) bool: the ``m`` highest ``score`` per row among ``allowed``
    (ties by lower column)."""
    s = np.where(allowed, np.asarray(score, dtype=np.float64), -np.inf)
    return _first_by_row(-s, m, lambda r, c: (-s[r, c],)) & allowed


def _first_by_row(primary: np.ndarray, m: int, keys) -> np.ndarray:
    """(Q, L) bool: each row's first ``m`` columns (every column when
    ``m >= L``, none when ``m <= 0``) in the order of
    ``np.lexsort(keys(r, c))`` over the row's columns, an order that sorts
    by ``primary`` ascending first wherever two values differ; ``keys(r,
    c)``: the sort keys of columns ``c`` of row ``r``, the last the primary
    one, as :func:`numpy.lexsort` takes them.

    The same columns as sorting each row, without the sort: the ``m``-th
    smallest primary value ``v`` (a partition) leaves every column below
    ``v`` in and every one above it out, and only the columns at ``v`` (a
    tie at the boundary: rare, and few) are ordered by ``keys``."""
    q, n = primary.shape
    if m <= 0 or m >= n:
        return np.full((q, n), m > 0)
    v = _mth_smallest(primary, m)
    cand = primary <= v  # every column of the first m, and those tied with the m-th
    count = cand.sum(axis=1)
    out = cand
    # rows with more candidates than m (ties at v): ordered on their
    # candidates; rows with a NaN primary value: in full (a loop over
    # queries, not notes)
    nan = np.isnan(primary).any(axis=1)
    for r in np.flatnonzero((count != m) | nan).tolist():
        c = np.arange(n) if nan[r] else np.flatnonzero(cand[r])
        first = c[np.lexsort(keys(r, c))[:m]]
        out[r] = False
        out[r, first] = True
    return out


def _mth_smallest(x: np.ndarray, m: int) -> np.ndarray:
    """Each row's ``m``-th smallest value (Q, 1), ``1 <= m <= L``, as
    ``np.partition`` finds it (any value for a row with a NaN): compiled,
    one pass that keeps the row's ``m`` smallest in a heap (:func:`_mth_smallest_rows`),
    several times faster than numpy's introselect on one 15k-note row."""
    if jit.enabled():
        return _mth_smallest_rows(np.ascontiguousarray(x, dtype=np.float64), m)[:, None]
    return np.partition(x, m - 1, axis=1)[:, m - 1:m]


@jit.kernel
def _mth_smallest_rows(x, m):
    """:func:`_mth_smallest` one row at a time (compiled by
    :func:`memsim.core.jit.kernel`): a max-heap of the row's ``m`` smallest
    values so far, its root replaced by any smaller value; comparisons
    only, so the root at the end is the m-th smallest itself, whatever the
    order the row is read in. It is read from its end: the engine's columns
    are in creation order, so ages since creation come smallest first and
    the heap, full of them, rarely changes after."""
    q, n = x.shape
    out = np.empty(q)
    heap = np.empty(m)
    for r in range(q):
        for jj in range(n):
            v = x[r, n - 1 - jj]
            if jj < m:  # the first m: sifted up into the heap
                i = jj
                while i > 0 and heap[(i - 1) // 2] < v:
                    heap[i] = heap[(i - 1) // 2]
                    i = (i - 1) // 2
                heap[i] = v
            elif v < heap[0]:  # below the largest kept: it replaces it
                i = 0
                while 2 * i + 1 < m:
                    c = 2 * i + 1
                    if c + 1 < m and heap[c + 1] > heap[c]:
                        c += 1
                    if not heap[c] > v:
                        break
                    heap[i] = heap[c]
                    i = c
                heap[i] = v
        out[r] = heap[0]
    return out


@register
@dataclass(frozen=True, kw_only=True)
class LangChainTimeWeighted(Ranker):
    """LangChain's ``TimeWeightedVectorStoreRetriever``: its candidates and its score.

    Source: ``langchain_classic/retrievers/time_weighted_retriever.py``
    (langchain-classic 1.0.8; ``langchain/retrievers/...`` before LangChain
    1.x). A query's candidates are

    * the ``k`` most recently *added* documents (``memory_stream[-k:]``),
      with relevance ``default_salience`` (LangChain's None adds nothing,
      which is ``default_salience = 0`` here), and
    * the vector store's ``search_k`` nearest (``search_kwargs["k"]``, 100),
      with the store's relevance; a document in both keeps the store's
      relevance (``docs_and_scores.update(...)``).

    Each is scored ``(1 - decay_rate) ** hours_since_last_access`` (the
    ``langchain`` decay, the ``rec`` given here) ``+ importance_weight *
    importance`` (``other_score_keys = ["importance"]`` with weight 1) ``+
    relevance``; the list is sorted by score (Python's stable sort) and the
    top ``k`` are returned (the engine's ``candidates``; the preset's
    feedback resets their last access).

    The relevance is the store's normalisation of its raw score, computed in
    float32 as FAISS does (``relevance``): ``"cosine"`` (default of the
    preset): an inner-product index over L2-normalised vectors whose
    relevance is the cosine itself; ``"l2"`` (FAISS's default
    ``EUCLIDEAN_DISTANCE``): ``1 - d / sqrt(2)`` with ``d`` the *squared* L2
    distance FAISS returns; ``"inner-product"`` (``MAX_INNER_PRODUCT``):
    ``1 - s`` for an inner product ``s > 0``, else ``-s``, LangChain's rule
    (the nearest by inner product are searched, whatever their relevance).
    The score of a store candidate is float32 (the float32 relevance added to
    a Python float), that of a recent-only one float64, as in LangChain.

    The ranker computes the relevance itself from the context (the policy's
    retriever is not read; leave it without a prefilter), and it chooses the
    candidates: the engine keeps only the notes :meth:`candidate_mask` marks.
    Those sets depend on the batch and its live notes only, not on the decay
    or the uses: an engine context shares them between the arms of a batch
    with the same live notes, and a context of chosen cells (``ctx.whole``)
    reads them on its whole context (``scores_cells``), so that the engine
    scores a query's candidates alone. A use changes the score of the used
    note alone (``sets_read_uses`` False): per-query feedback is corrected
    note by note from one scoring of the tick.
    "Added" order is creation order, ties by the lower ``note_id`` first.
    Exact score ties (rare) go to the lower ``note_id``, where LangChain
    keeps its candidate order.

    Parameters
    ----------
    relevance : {"cosine", "l2", "inner-product"}
    search_k : int >= 1
        ``search_kwargs["k"]``.
    k : int >= 0
        The retriever's ``k``: the recent window (and the number returned,
        set by the preset's ``candidates`` and ``feedback.k``).
    default_salience : float
        Relevance of a recent document the store did not return.
    importance_weight : float >= 0
    """

    name: ClassVar[str] = "langchain-time-weighted"
    set_dependent: ClassVar[bool] = True  # the candidates depend on the other notes
    uses_similarity: ClassVar[bool] = False  # its own relevance (the cosine, or ctx.dots)
    scores_cells: ClassVar[bool] = True  # its sets read on ctx.whole
    sets_read_uses: ClassVar[bool] = False  # nearest and newest by creation
    relevance: str = "cosine"
    search_k: int = 100
    k: int = 4
    default_salience: float = 0.0
    importance_weight: float = 0.0
    _constraints: ClassVar[dict] = {
        "relevance": Options(LANGCHAIN_RELEVANCE),
        "search_k": Interval(1, None, integer=True),
        "k": Interval(0, None, integer=True),
        "default_salience": Interval(None, None),
        "importance_weight": _NON_NEGATIVE,
    }

    def _sets(self, ctx: ScoringContext) -> _CandidateSets:
        """The store's results (with their relevance) and the recent window
        of the context's queries, as cells.

        A context of chosen cells (``ctx.whole``) reads them on the whole
        context. They depend only on the batch and on which notes are live,
        not on the arm's decay or uses: an engine context keeps them in the
        cache every arm of its batch shares (``ctx.shared``), under the
        live mask itself, so arms with the same live notes compute them once."""
        whole = getattr(ctx, "whole", None)
        if whole is not None:
            return self._sets(whole[0])
        live = live_mask(ctx)
        shared = getattr(ctx, "shared", None)
        if shared is None:
            return self._find_sets(ctx, live)
        key = ("langchain-sets", self.relevance, self.search_k, self.k,
               None if live is None else (live.shape, np.packbits(live).tobytes()))
        return shared(key, lambda: self._find_sets(ctx, live))

    def _find_sets(self, ctx: ScoringContext, live: np.ndarray | None) -> _CandidateSets:
        order, rel = _index_score_and_relevance(ctx, self.relevance)
        q, n = np.shape(order)
        allowed = np.ones((q, n), dtype=bool) if live is None else _as_shape(live, (q, n))
        store = np.flatnonzero(_top_by_row(order, allowed, self.search_k))
        # the k newest allowed notes by insertion: the smallest age since
        # creation, ties by the higher note row (added later)
        age = _as_shape(ctx.age_created, (q, n), np.float64)
        idx = np.broadcast_to(np.asarray(ctx.idx), (q, n))
        # sorted by (not allowed, age, -idx): by the age where allowed first
        # (an allowed note never sorts after one that is not)
        recent = _first_by_row(np.where(allowed, age, np.inf), self.k,
                               lambda r, c: (-idx[r, c], age[r, c], ~allowed[r, c])) & allowed
        return _CandidateSets((q, n), store, np.asarray(rel).reshape(-1)[store],
                              np.flatnonzero(recent))

    def candidate_mask(self, ctx: ScoringContext) -> np.ndarray:
        """(Q, L) bool: the notes LangChain scores for each query (the store's
        ``search_k`` nearest and the ``k`` newest); the engine drops the others."""
        sets = self._sets(ctx)
        flat = _cells_of(ctx)
        return sets.holds(sets.store, flat) | sets.holds(sets.recent, flat)

    def combine(self, rel: np.ndarray | None, rec: np.ndarray, ctx: ScoringContext
                ) -> np.ndarray:
        sets = self._sets(ctx)
        flat = _cells_of(ctx)
        store, relevance = sets.store_at(flat)
        base = np.broadcast_to(np.asarray(rec, dtype=np.float64), store.shape)
        if self.importance_weight:
            base = base + self.importance_weight * np.asarray(ctx.importance, dtype=np.float64)
        with np.errstate(over="ignore"):
            scored = (base.astype(np.float32) + relevance).astype(np.float64)
        return np.where(store, scored, base + self.default_salience)


def _cells_of(ctx: ScoringContext) -> np.ndarray | None:
    """The context's cells as flat (row-major) indices into the (Q, L)
    matrices of the context they were chosen from (``ctx.whole``); None for
    a whole context (every cell)."""
    whole = getattr(ctx, "whole", None)
    return None if whole is None else np.asarray(whole[1])


@dataclass(frozen=True)
class _CandidateSets:
    """LangChain's candidates of a (Q, L) context as flat (row-major) cell
    indices, ascending: the store's results and their relevance, and the
    recent window. A few hundred cells per query, where (Q, L) masks would
    be most of a batch's memory."""

    shape: tuple[int, int]
    store: np.ndarray
    relevance: np.ndarray
    recent: np.ndarray

    def holds(self, cells: np.ndarray, flat: np.ndarray | None) -> np.ndarray:
        """Whether each cell of ``flat`` (every cell of the context, (Q, L),
        when None) is among ``cells``."""
        if flat is None:
            out = np.zeros(self.shape, dtype=bool)
            out.reshape(-1)[cells] = True
            return out
        return _find(cells, flat) >= 0

    def store_at(self, flat: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """(in the store's results, their relevance; 0 elsewhere) at ``flat``."""
        if flat is None:
            rel = np.zeros(self.shape, dtype=np.float32)
            rel.reshape(-1)[self.store] = self.relevance
            return self.holds(self.store, None), rel
        at = _find(self.store, flat)
        inside = at >= 0
        rel = np.zeros(flat.shape, dtype=np.float32)
        rel[inside] = self.relevance[at[inside]]
        return inside, rel


def _find(cells: np.ndarray, flat: np.ndarray) -> np.ndarray:
    """Each of ``flat``'s position in ``cells`` (ascending), -1 where absent."""
    if len(cells) == 0:
        return np.full(np.shape(flat), -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(cells, flat), len(cells) - 1)
    return np.where(cells[at] == flat, at, -1)


def lexicographic_rank(first: np.ndarray, key: np.ndarray, then: np.ndarray,
                       order: np.ndarray | None = None) -> np.ndarray:
    """Each element's 1-based rank (Q, L) in its row's order by ``first``
    (bool, False first), then ``key`` (float; NaN last, NaNs equal), then the
    row's order ``then`` (a permutation of each row: its tie-break, e.g. a
    ``lexsort`` of further keys): ``np.lexsort((..., key, first))``'s ranks.

    The row's distinct ``key`` values are numbered along a permutation that
    sorts it: ``order`` (L,) when given (one that sorts every row, ties in
    any order: the ranks do not depend on which), else one quicksort of
    each row; then, without numba, the unique integer ``(first, number, place
    in then)`` is sorted (unique keys make the unstable sort's order the
    stable one), and with numba a counting pass hands out the ranks instead
    (:func:`_count_ranks`). On a row of 14,403 last-access times with ties:
    0.47 ms (numpy) and 0.20 ms (numba), against 0.81 ms for ``lexsort``."""
    q, n = key.shape
    order = np.argsort(key, axis=1) if order is None else \
        np.ascontiguousarray(np.broadcast_to(order, (q, n)))
    first = _as_shape(first, (q, n), bool)
    then = _as_shape(then, (q, n))
    if jit.enabled():
        return _count_ranks(order, np.ascontiguousarray(key), np.ascontiguousarray(first),
                            np.ascontiguousarray(then, dtype=np.int64))
    at = np.arange(q)[:, None] * n  # each row's start in the flat arrays

    def scatter(order: np.ndarray, values: np.ndarray) -> np.ndarray:
        # out[r, order[r, j]] = values[r, j], by flat indices (put_along_axis
        # costs more than the sort on one row)
        out = np.empty(q * n, dtype=values.dtype)
        out[(order + at).ravel()] = values.ravel()
        return out.reshape(q, n)

    ks = np.take(key, order + at)
    step = ks[:, 1:] != ks[:, :-1]
    step &= ~(np.isnan(ks[:, 1:]) & np.isnan(ks[:, :-1]))
    number = np.zeros((q, n), dtype=np.int64)
    np.cumsum(step, axis=1, out=number[:, 1:])
    composite = scatter(order, number)
    composite += first.astype(np.int64) * n  # numbers are < n
    composite *= n
    composite += scatter(then, np.broadcast_to(np.arange(n), (q, n)))
    return scatter(np.argsort(composite, axis=1), np.broadcast_to(np.arange(1, n + 1), (q, n)))


@jit.kernel
def _count_ranks(order, key, first, then):
    """:func:`lexicographic_rank` one row at a time (compiled by
    :func:`memsim.core.jit.kernel`), from ``order`` (each row's argsort of
    ``key``): the elements are put in groups ``(first, number of their key
    value)``, a group's ranks start after the elements of the groups before
    it, and a pass in ``then`` order hands out each group's ranks in turn,
    so ties keep the tie-break's order. Integers only: the same ranks as the
    numpy version."""
    q, n = key.shape
    ranks = np.empty((q, n), dtype=np.int64)
    group = np.empty(n, dtype=np.int64)
    for r in range(q):
        # number the distinct values in sorted order (NaN last, NaNs equal)
        groups = 0
        for j in range(n):
            c = order[r, j]
            if j > 0:
                a, b = key[r, order[r, j - 1]], key[r, c]
                if a != b and not (a != a and b != b):
                    groups += 1
            group[c] = groups
        groups += 1
        # (first, number) -> one group id; then each group's next rank
        nxt = np.zeros(2 * groups + 1, dtype=np.int64)
        for c in range(n):
            if first[r, c]:
                group[c] += groups
            nxt[group[c] + 1] += 1
        for g in range(2 * groups):
            nxt[g + 1] += nxt[g]
        for j in range(n):
            c = then[r, j]
            nxt[group[c]] += 1
            ranks[r, c] = nxt[group[c]]
    return ranks


# --------------------------------------------------------------------------
# Generative Agents as released (retrieve.py)
# --------------------------------------------------------------------------


@register
@dataclass(frozen=True, kw_only=True)
class GenerativeAgentsCode(Ranker):
    """Generative Agents' released retrieval: rank-based recency, weights 0.5 / 3 / 2.

    Source: ``joonspk-research/generative_agents``,
    ``reverie/backend_server/persona/cognitive_modules/retrieve.py``
    (``new_retrieve``, ``extract_recency``, ``normalize_dict_floats``)::

        nodes = sorted(nodes, key=lambda x: x[0])        # by last_accessed, ascending
        recency_vals = [recency_decay ** i for i in range(1, len(nodes) + 1)]
        # each of recency, importance, relevance min-max normalised to [0, 1]
        gw = [0.5, 3, 2]
        score = 0.5 * recency + 3 * relevance + 2 * importance

    with ``recency_decay = 0.99`` and ``recency_w = relevance_w =
    importance_w = 1`` (``scratch.py``); relevance is the cosine similarity;
    the top ``n_count = 30`` are returned and their ``last_accessed`` set to
    now. The rank is taken over every memory (here: every note live at the
    query), so the recency is not a function of a note's age alone, and,
    as coded, the list is sorted oldest access first, so the memory accessed
    longest ago gets ``0.99 ** 1``, the largest recency (``rank_from =
    "least-recent"``); ``rank_from = "most-recent"`` ranks the other way
    (the most recently accessed first), as the paper's intent reads.
    Notes never accessed count from their creation. Equal last accesses keep
    the code's list order (events newest first): the more recently created
    first, then the higher ``note_id``. A row whose values are all equal
    normalises to 0.5 (``normalize_dict_floats``).

    The ranker computes its own recency (``uses_recency = False``: the
    policy's decay is not used).

    Parameters
    ----------
    recency_decay : float in (0, 1]
    w_recency, w_relevance, w_importance : float >= 0
    rank_from : {"least-recent", "most-recent"}
    """

    name: ClassVar[str] = "generative-agents-code"
    uses_recency: ClassVar[bool] = False
    set_dependent: ClassVar[bool] = True
    recency_decay: float = 0.99
    w_recency: float = 0.5
    w_relevance: float = 3.0
    w_importance: float = 2.0
    rank_from: str = "least-recent"
    _constraints: ClassVar[dict] = {
        "recency_decay": Interval(0, 1, closed="right"),
        "w_recency": _NON_NEGATIVE, "w_relevance": _NON_NEGATIVE,
        "w_importance": _NON_NEGATIVE,
        "rank_from": Options(("least-recent", "most-recent")),
    }

    def rank_recency(self, ctx: ScoringContext) -> np.ndarray:
        """``recency_decay ** rank`` (Q, L), rank 1.. over each query's live
        notes in the code's last-access order (0 where not live)."""
        age = np.asarray(ctx.age_last_access, dtype=np.float64)
        q, n = age.shape
        live = live_mask(ctx)
        allowed = np.ones((q, n), dtype=bool) if live is None else _as_shape(live, (q, n))
        created_age = _as_shape(ctx.age_created, (q, n), np.float64)
        idx = np.broadcast_to(np.asarray(ctx.idx), (q, n))
        # ascending last access = descending age since last access; ties: newer
        # created first (smaller creation age), then the higher note row
        key_access = -age if self.rank_from == "least-recent" else age
        # the context's columns by last access sort every row's key (its
        # age is t - last access, rounded monotonically): no sort per row
        order = getattr(ctx, "access_order", lambda: None)()
        if order is not None and len(order) != n:  # not this context's columns
            order = None
        if order is not None and self.rank_from == "most-recent":
            order = order[::-1]
        rank = lexicographic_rank(~allowed, key_access, np.lexsort((-idx, created_age), axis=1),
                                  order)
        return np.where(allowed, np.exp(rank * np.log(self.recency_decay)), 0.0)

    def combine(self, rel: np.ndarray, rec: np.ndarray | None, ctx: ScoringContext) -> np.ndarray:
        return minmax_sum([(self.w_recency, self.rank_recency(ctx)), (self.w_relevance, rel),
                           (self.w_importance, ctx.importance)], live_mask(ctx))
