"""The planted model: what a synthetic workload knows, as a posterior.

:class:`PlantedModel` turns the knobs of a
:class:`~memsim.data.workload.SyntheticWorkload` into the posterior expected gain
of a note for a query, given only what a ranker could see: the note's cosine
to the query, its age, its class, and whether its author is the asking actor.
The ``bayes`` ranker (:class:`memsim.policies.rank.BayesRanker`) scores with
it: it is the best any score-based policy can do on that workload, as the
``oracle`` (which sees the qrels) is the best any policy can do.

Derivation
----------
A query at time ``t`` from actor ``a`` asks about one slot (module docstring
of :mod:`memsim.data.workload`): it picks class ``c`` with probability
``w_c = query_share_c / sum_c' query_share_c'`` (over the classes with notes),
then one of the ``N_c(t)`` slots of ``c`` askable by ``a`` uniformly. For a note
``i`` of class ``c``, age ``x`` and cosine ``s`` to the query:

*Prior.* The note's slot is the asked one with probability

    pi_i = w_c * v_i * A_c(x) / N_c(t)

where ``A_c(x)`` is the probability that the slot is askable when its note is
``x`` days old and ``v_i`` the probability that ``a`` may ask about it: 1 for
the author's own notes; ``1 - personal_share`` for another actor's (a personal
slot is written and asked by its owner only). ``N_c(t)`` is the expected
number of slots of ``c`` askable by one actor: the slot birth rate
``rho_c = notes_per_day * share_c / sum(share) / notes_per_slot`` times the
expected askable span (Little's law; the elapsed window ``t + backfill_days``
for classes whose slots never close), times ``1 - personal_share +
personal_share / n_actors``.

*Likelihood.* Cosines within one query are Gaussian
(:meth:`SyntheticWorkload.query_similarity_model`: a ranking compares notes of
one query, which share its vector):
``f_on = N(mu_on, sd_on^2)`` for a note of the asked slot; for any other note a
mixture ``f_off = p f_same + (1 - p) f_other`` with ``p = sum_k p_k^2``, the
chance that two notes drawn by topic popularity share a topic. The posterior
that ``i`` is on the asked slot is ``pi LR / (pi LR + 1 - pi)`` with
``LR = f_on(s) / f_off(s)``.

*Gain given the slot.* Expected gain of a note of the asked slot, by class
(``g_c``, ``g_v``, ``g_s`` = ``gain_current``, ``gain_valid``, ``gain_stale``;
``P_new(x) = 1/m + (1 - 1/m) exp(-x / interval_days)`` is the probability
that no newer note of the slot has been written, ``m = notes_per_slot``):

- evergreen: ``P_new g_c + (1 - P_new) g_v`` (every note stays valid);
- superseding: ``P_new g_c + (1 - P_new) g_s`` (a newer version ends validity);
- project, scratch: valid with the survival ``S(x)`` of the lifetime law, when
  the newest note gets ``g_c`` and older ones ``g_v``; expired notes are
  asked about only while a newer note keeps the slot askable, with
  probability ``B(x) = (1 - 1/m) S(max(x - interval_days, 0))``, and then
  count ``g_s``. So ``A_c(x) = S(x) + (1 - S(x)) B(x)``.

Under ``age_mode = "zero"`` every note of the window exists at ``t = 0``
and none has expired, so ``N_c`` counts every slot of the window,
``rho_c (horizon_days + backfill_days)``, for every class.

The score is ``P(on slot | s, x, c) * E[gain | on slot, x, c]``, for one
note per slot; for chains of several notes a documented approximation, whose
exact posterior depends on the other notes of the slot. Distractors have
prior 0. Its *ranking* within a query is what the known optimum rests on;
its *values* are not calibrated probabilities: the laws take each query's
projections on its topic and slot at their means, while a query's own noise
moves them (the on-slot cosine is ``0.516 +- 0.092`` over the queries of a
stream against the law's ``0.523 +- 0.070``). Binned against the gains that
come true (the ``planted.toml`` world, one note per slot), notes it scores
0.05-0.2 gain 0.065 on average at the default ``retriever_noise`` (0.098
predicted), and at ``retriever_noise = 0.8`` notes it scores 0.001-0.01
gain 0.064 (0.004 predicted). A packer that weighs values (``greedy``,
``exact``) therefore sees the ``bayes`` ranker's scores as a ranking with
approximate magnitudes, not as expected gains.

*The known optimum.* With one expiring class, one note per slot and the
exponential law of half-life ``H``, ``A(x) = 0.5 ** (x / H)`` and every asked
note is valid, so the Bayes ranking is by ``log LR(s) - x ln 2 / H``. If
``log LR`` were linear with slope ``beta`` the family ``exp(beta (cos - 1)) *
0.5 ** (age / h)`` would rank exactly so at ``h = H``; only ``beta * h`` is
identifiable from a ranking. ``log LR`` is quadratic (the two laws have
different sds), so :func:`known_optimum` reports ``beta`` as the
linear-discriminant slope of the within-query laws, ``(mu_on - mu_same) /
((sd_on^2 + sd_same^2) / 2)`` (:attr:`memsim.data.workload.SimilarityModel.beta`):
the slope ``log LR`` has when both laws get their pooled variance. The asked
note's rivals are the notes of its own topic; notes of other topics sit about
``mu_on / sd_other`` sds lower. At that ``beta`` the optimal half-life is
``H``.

*How close.* Both statements rest on Gaussian approximations of the cosine
laws, and measured they hold to within a few percent, not exactly: a 60-trial
sweep of the family recovers ``H`` within 25% for ``H`` = 8, 20 and 40 days
(``tests/test_optimum.py``), and on a 10-point grid at ``H = 30`` (6
replicates, 7,244 queries) the family's utility is flat within 0.003 from
``h = 27`` to ``42``, with the ``bayes`` ranker 0.003 below the grid's best
(0.815 against 0.818). A conditional-logit fit of ``exp(beta cos - gamma
age)`` on the queries of such streams gives ``gamma = ln 2 / H`` to 5% and a
``beta`` within 5-17% of the model's over ``retriever_noise`` 1.0-1.8.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from scipy.special import ndtr

from memsim.core.errors import ConfigError
from memsim.data.workload import CLASS_NAMES, SLOT_CLASSES, SimilarityModel, SyntheticWorkload

__all__ = ["PlantedModel", "Optimum", "known_optimum", "survival"]


def survival(spec, x: np.ndarray) -> np.ndarray:
    """``P(lifetime > x)`` of an expiring class's lifetime law (1 if it never expires)."""
    if not getattr(spec, "expires", False):
        return np.ones_like(x, dtype=np.float64)
    h = float(spec.lifetime_median_days)
    if spec.lifetime_law == "exponential":
        return np.exp2(-np.maximum(x, 0.0) / h)
    sigma = float(spec.lifetime_sigma)
    with np.errstate(divide="ignore"):
        z = (np.log(np.maximum(x, 0.0)) - math.log(h)) / sigma if sigma > 0 else None
    if z is None:  # a point mass at the median
        return (x < h).astype(np.float64)
    return 1.0 - ndtr(z)


def _mean_lifetime(spec) -> float:
    h = float(spec.lifetime_median_days)
    if spec.lifetime_law == "exponential":
        return h / math.log(2.0)
    return h * math.exp(float(spec.lifetime_sigma) ** 2 / 2.0)


#: Smallest standard deviation given to a cosine law. ``retriever_noise = 0``
#: makes the on-slot law a point mass (sd 0), and ``slot_weight = 0`` as well
#: the same-topic one, whose log densities are then undefined; the cosines a
#: ranker sees are float32 dot products, exact to about ``1e-6``, so a law
#: narrower than this cannot be told from a point mass. Any sd the knobs give
#: otherwise is far above it (``(1 - rho^2) / sqrt(d)``).
MIN_COSINE_SD = 1e-5


def _log_normal_pdf(x: np.ndarray, mean: float, sd: float) -> np.ndarray:
    sd = max(float(sd), MIN_COSINE_SD)
    return -0.5 * ((x - mean) / sd) ** 2 - math.log(sd) - 0.5 * math.log(2.0 * math.pi)


@dataclass(frozen=True, eq=False)
class PlantedModel:
    """Posterior expected gain of notes under a synthetic workload's own model.

    Build it with :meth:`from_workload`; see the module docstring for the
    derivation.

    Attributes
    ----------
    workload : SyntheticWorkload
        The knobs the stream was generated from.
    similarity : SimilarityModel
        Its cosine law within one query.
    """

    workload: SyntheticWorkload
    similarity: SimilarityModel
    #: the note classes in code order: :meth:`expected_gain` reads a note's
    #: class as an index into it (a stream's ``note_class`` column names them)
    class_names: ClassVar[tuple[str, ...]] = CLASS_NAMES

    @classmethod
    def from_workload(cls, workload: SyntheticWorkload) -> PlantedModel:
        return cls(workload=workload, similarity=workload.query_similarity_model())

    @classmethod
    def from_config(cls, config: dict | None, where: str = "stream") -> PlantedModel:
        """From a stream's ``meta["config"]`` (the resolved ``[workload]`` table).

        Raises
        ------
        ConfigError
            When the stream carries no workload config (it was not generated
            by memsim, e.g. an imported trace): there is no planted model.
        """
        if not isinstance(config, dict):
            raise ConfigError(f"{where}: the 'bayes' ranker needs a synthetic workload "
                              "(a stream generated by memsim); this stream has no planted model")
        return cls.from_workload(SyntheticWorkload.from_config(config))

    # -- pieces ----------------------------------------------------------------
    def log_likelihood_ratio(self, cos: np.ndarray) -> np.ndarray:
        """``log f_on(cos) - log f_off(cos)`` (module docstring)."""
        m = self.similarity
        p = float(np.sum(self.workload.topic_popularity() ** 2))
        on = _log_normal_pdf(cos, m.on_slot_mean, m.on_slot_sd)
        same = _log_normal_pdf(cos, m.same_topic_mean, m.same_topic_sd) + math.log(p)
        other = (_log_normal_pdf(cos, m.other_topic_mean, m.other_topic_sd) + math.log1p(-p)
                 if p < 1.0 else np.full_like(cos, -np.inf))
        return on - np.logaddexp(same, other)

    def askable_slots(self, name: str, t: np.ndarray | float) -> np.ndarray:
        """Expected number of slots of class ``name`` askable by one actor at
        each time of ``t`` (an array of the same shape)."""
        wl = self.workload
        spec = wl.classes.spec(name)
        m = float(spec.notes_per_slot)
        rho = wl.notes_per_day * wl.classes.note_shares()[name] / m
        t = np.asarray(t, dtype=np.float64)
        elapsed = np.maximum(t + float(wl.backfill_days), 1e-9)
        if wl.age_mode == "zero":
            # every note of the window exists at t = 0 and none has expired
            # (its lifetime is positive): every slot of the window is askable
            elapsed = np.full_like(t, float(wl.horizon_days) + float(wl.backfill_days))
            return np.maximum(rho * elapsed * self._visible(), 1e-12)
        span = elapsed
        if getattr(spec, "expires", False):
            span = np.minimum(elapsed, (m - 1.0) * float(spec.interval_days)
                              + _mean_lifetime(spec))
        return np.maximum(rho * span * self._visible(), 1e-12)

    def _visible(self) -> float:
        """Share of the slots one actor may ask about (team slots and its own)."""
        wl = self.workload
        return 1.0 - wl.personal_share + wl.personal_share / wl.n_actors

    def _class_terms(self, name: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(A_c(x), E[gain | on slot, x, c] * A_c(x))`` for class ``name``."""
        wl = self.workload
        spec = wl.classes.spec(name)
        m = float(spec.notes_per_slot)
        gap = float(spec.interval_days)
        p_new = 1.0 / m + (1.0 - 1.0 / m) * np.exp(-x / gap)
        gc, gv, gs = wl.gain_current, wl.gain_valid, wl.gain_stale
        if name == "evergreen":
            return np.ones_like(x), p_new * gc + (1.0 - p_new) * gv
        if name == "superseding":
            return np.ones_like(x), p_new * gc + (1.0 - p_new) * gs
        s = survival(spec, x)
        b = (1.0 - 1.0 / m) * survival(spec, np.maximum(x - gap, 0.0))
        stale = (1.0 - s) * b
        return s + stale, s * (p_new * gc + (1.0 - p_new) * gv) + stale * gs

    # -- the posterior -------------------------------------------------------------
    def expected_gain(self, cos: np.ndarray, age: np.ndarray, note_class: np.ndarray,
                      t: np.ndarray, same_actor: np.ndarray | None = None) -> np.ndarray:
        """Posterior expected gain, shape of ``cos`` (``(Q, L)``).

        Parameters
        ----------
        cos : (Q, L) array
            Cosine of each note to each query.
        age : (Q, L) or (L,) array
            Days since creation.
        note_class : (L,) int array
            Index into :data:`memsim.data.workload.CLASS_NAMES` (anything else:
            never relevant).
        t : (Q,) array
            Query times.
        same_actor : (Q, L) bool array, optional
            Whether the note's author is the asking actor (``None``: unknown,
            the average visibility is used).
        """
        wl = self.workload
        cos = np.asarray(cos, dtype=np.float64)
        age = np.broadcast_to(np.asarray(age, dtype=np.float64), cos.shape)
        q_w = {n: wl.classes.spec(n).query_share for n in SLOT_CLASSES
               if wl.classes.spec(n).share > 0}
        total_w = sum(q_w.values())
        ps = wl.personal_share
        if same_actor is None:
            visible = np.full(cos.shape, 1.0 - ps + ps / wl.n_actors)
        else:
            visible = np.where(same_actor, 1.0, 1.0 - ps)
        prior = np.zeros(cos.shape)
        gain_mass = np.zeros(cos.shape)
        for name, w in q_w.items():
            cols = np.flatnonzero(note_class == CLASS_NAMES.index(name))
            if cols.size == 0 or w <= 0:
                continue
            n_slots = self.askable_slots(name, np.atleast_1d(t))
            a, g = self._class_terms(name, age[:, cols])
            base = (w / total_w) / n_slots[:, None] * visible[:, cols]
            prior[:, cols] = np.minimum(base * a, 1.0 - 1e-12)
            gain_mass[:, cols] = base * g
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            odds = prior / (1.0 - prior) * np.exp(self.log_likelihood_ratio(cos))
            # narrow cosine laws (a large embedding_dim, a small retriever_noise)
            # overflow the odds of an on-slot cosine: it is then on the slot
            # for sure, not NaN (inf / inf); a note with prior 0 never is
            p_on = np.where(prior > 0, np.where(np.isinf(odds), 1.0, odds / (1.0 + odds)), 0.0)
            cond_gain = np.where(prior > 0, gain_mass / np.where(prior > 0, prior, 1.0), 0.0)
        return p_on * cond_gain


@dataclass(frozen=True)
class Optimum:
    """The optimal ``(beta, half_life_days)`` of the calibrated-product family.

    ``solvable`` is False (and ``reason`` says why) when the workload's age
    law is not one exponential: the family then has no optimum that follows
    from the planted truth alone.
    """

    solvable: bool
    beta: float
    half_life_days: float
    reason: str = ""


def known_optimum(workload: SyntheticWorkload) -> Optimum:
    """The planted optimum of ``exp(beta (cos - 1)) * 0.5 ** (age / h)``.

    Solvable when every askable slot class (share and query_share > 0) is an
    expiring class with one note per slot and the exponential lifetime law,
    all with one half-life ``H`` (then ``h = H``), or when every one is
    evergreen with one note per slot (then ``h = inf``: no decay). ``beta``
    is the linear-discriminant slope of the within-query similarity law
    (:attr:`memsim.data.workload.SimilarityModel.beta`); see the module docstring.
    Not solvable when that slope is 0 (``slot_weight = 0``): the derivation
    takes the asked note's rivals to be its topic's notes, and those then tie
    with it. The approximation weakens as ``slot_weight`` falls toward it.
    """
    beta = float(workload.query_similarity_model().beta)
    askable = [n for n in SLOT_CLASSES
               if workload.classes.spec(n).share > 0 and workload.classes.spec(n).query_share > 0]
    specs = [workload.classes.spec(n) for n in askable]
    if workload.age_mode == "zero":
        return Optimum(True, beta, math.inf, "every age is 0: age carries no information")
    if beta == 0.0:
        # the derivation ranks the asked note against its topic's other
        # notes; with no slot signal those tie with it, and its rivals are
        # the other topics' notes, which similarity still separates (an
        # exchange rate the family's one beta does not have)
        return Optimum(False, beta, math.nan,
                       "similarity does not tell the asked note from its topic's other notes "
                       "(slot_weight = 0): the ranking's rivals are other topics' notes, which "
                       "the derivation leaves out")
    if any(float(s.notes_per_slot) != 1.0 for s in specs):
        return Optimum(False, beta, math.nan,
                       "a class with notes_per_slot > 1: the age prior is not one exponential")
    if all(n == "evergreen" for n in askable):
        return Optimum(True, beta, math.inf, "")
    halves = set()
    for n, s in zip(askable, specs):
        if not getattr(s, "expires", False) or s.lifetime_law != "exponential":
            return Optimum(False, beta, math.nan,
                           f"class {n!r} has no exponential lifetime law: the age prior "
                           "is not one exponential")
        halves.add(float(s.lifetime_median_days))
    if len(halves) > 1:
        return Optimum(False, beta, math.nan,
                       "expiring classes with different half-lives: the age prior is a mixture")
    return Optimum(True, beta, halves.pop(), "")
