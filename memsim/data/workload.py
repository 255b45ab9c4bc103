"""Synthetic workloads with planted truth.

:class:`SyntheticWorkload` turns a handful of knobs and a seed into a
:class:`~memsim.data.stream.Stream`: notes (with creation times, sizes, actors,
tiers), queries (with times and actors), graded ground truth (qrels), optional
organic accesses, and note / query embeddings. Every signal that feeds a
ranking varies (age, size, similarity, actor, tier, use), and the generator
knows, for every query, which notes answer it, which ones are stale and would
mislead, and which are noise. ``docs/guides/workloads.md`` states what is required.

The generative story
--------------------

*Topics.* ``n_topics`` topics with Zipf popularity
``p_k = (k + 1) ** -topic_zipf / sum_j (j + 1) ** -topic_zipf``: topic 0 is the
most popular. Every slot and every distractor draws its topic from ``p``, and
queries ask about slots, so query topics follow ``p`` too.

*Slots.* A slot is one question with one right answer at a time ("the user's
name", "the deadline of the billing project", "the preferred test runner").
Slots are born over time (a Poisson process per note class); each carries a
short sequence of notes written about it. The number of slots is therefore
not a knob: a class with note rate ``r`` and ``m`` notes per slot opens about
``r / m`` slots a day, so each slot holds a few notes and a query's relevant
set stays small (a fixed handful of slots per topic would pile dozens of notes
on each). Slots are personal (owned by one
actor, only that actor writes and asks about them) with probability
``personal_share``, else team slots (any actor writes and asks).

*Note classes.* Each class has its own note share, number of notes per slot,
spacing, lifetime law and size law (see :class:`NoteClasses`):

- evergreen: never stale, askable forever once written;
- project: each note stays valid for a random lifetime (weeks to months;
  LogNormal by default, or Exponential with a half-life of validity:
  ``lifetime_law``);
- scratch: the same with a lifetime of days;
- superseding: versions of a fact; a newer note on the slot ends the validity
  of the older one (the successor's creation time is the predecessor's
  ``valid_until``);
- distractor: no slot, never relevant, but drawn around a topic centroid so
  it competes for similarity.

*Clock.* Notes are created in ``[-backfill_days, horizon_days]``, queries and
their arrivals in ``[0, horizon_days]``, so ages already vary at the first
query. ``age_mode = "zero"`` collapses every creation and query time to 0 (the
benchmark whose every age is 0); supersession then follows creation order
(``note_id``).

*Queries.* A query at time ``t`` from actor ``a`` first picks a note class
with probability proportional to ``query_share`` among the classes that have a
slot *askable* by ``a`` at ``t``, then one such slot uniformly. A slot is
askable while one of its existing notes is valid (evergreen and superseding
slots: forever after their first note; project and scratch slots: while a note
has not expired). A query with nothing askable is kept without qrels
(``note_class = "none"``, ``slot = -1``).

*Ground truth.* For a query at ``t`` about slot ``s``, every note of ``s``
with ``created_at <= t`` gets a gain: the newest valid one (``created_at <= t
< valid_until``, newest by ``note_id``) ``gain_current``, the other valid ones
``gain_valid``, the invalid ones (superseded or expired) ``gain_stale``. No
other note has a qrel. Zero gains are dropped (qrels are non-zero).

*Embeddings.* With topic centroids ``c_k``, slot directions ``u_s`` and noise
``e``, all i.i.d. ``N(0, I / d)``::

    note  = normalise(c_topic + slot_weight * u_slot + retriever_noise * e_note)
    query = normalise(c_topic + slot_weight * u_slot + retriever_noise * e_query)

A distractor gets a direction of its own in place of ``u_slot``. Rows are unit
norm, so cosine = dot product and squared L2 = ``2 - 2 cos``. A query's cosine
to a note is approximately Gaussian with mean ``rho`` and sd ``(1 - rho^2) /
sqrt(d)``, where ``rho = (1 + w^2) / T`` for a note of its own slot, ``1 / T``
for another note or a distractor of its topic and 0 for another topic (``T =
1 + w^2 + s^2``, ``w = slot_weight``, ``s = retriever_noise``, ``d =
embedding_dim``); with ``s = 0`` similarity is perfectly informative.
:meth:`SyntheticWorkload.similarity_model` derives this law;
:meth:`SyntheticWorkload.query_similarity_model` derives the law *within one
query* (given the query's vector), the one a ranking sees, and its slope
``beta``.

*The posterior of the asked note.* Lifetimes are drawn independently of
everything else, so the generative story gives, for each note, the
probability that it is the one a query asks about. Take an expiring class
with ``lifetime_law = "exponential"`` (half-life ``H =
lifetime_median_days``) and one note per slot (``notes_per_slot = 1``): a
slot is askable exactly while its note is valid, and a note of age ``a`` is
still valid with probability ``0.5 ** (a / H)``. A query from actor ``x`` at
``t`` that picked this class (probability ``query_share`` over the classes
with something askable) picks uniformly among the ``N`` slots of the class
askable by ``x`` at ``t``. A note is asked only if it is valid, and then with
probability ``1 / N`` whatever its age, so before looking at similarity

    P(note n is asked | a_n) = 0.5 ** (a_n / H) / N,

proportional to ``0.5 ** (a_n / H)`` among the class's notes visible to
``x`` (``N`` is common to them). Given the asked slot, its note's cosine to
the query follows ``f_on`` and any other note of the topic ``f_same`` (the
Gaussians above, independent of age), so by Bayes

    P(n asked | cos_n, a_n) ~ 0.5 ** (a_n / H) * f_on(cos_n) / f_same(cos_n),

which, with both laws given their pooled variance (the linear-discriminant
approximation of :attr:`SimilarityModel.beta`, on the within-query laws), is
``~ exp(beta * cos_n) * 0.5 ** (a_n / H)``: ranking by it is Bayes-optimal up
to that approximation, and the best half-life of that family is the planted
``H`` (:mod:`memsim.data.planted` builds the full posterior, ``memsim optimum``
reports the optimum, and ``tests/test_optimum.py`` checks that a sweep
recovers it). Notes of other topics have ``f_other``; they rarely compete.
Under the default lognormal law, or with several notes per slot, the prior is
no longer a pure exponential in age, which is why nothing closed-form is
claimed there.

Randomness: every part draws from its own named child stream of the seed
(:func:`memsim.core.rng.child`), e.g. ``("class", "project")``, ``("sizes",
"scratch")``, ``("queries", "arrivals")``, ``("embeddings", "topics")``, so
that a knob of one part does not reshuffle the draws of another.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from memsim.core.errors import ConfigError, ParameterError
from memsim.core.params import Interval, Options, Validated, check_keys, fields_of
from memsim.core.rng import child
from memsim.data.stream import Stream, make_stream

__all__ = [
    "SyntheticWorkload",
    "NoteClasses",
    "EvergreenClass",
    "ProjectClass",
    "ScratchClass",
    "SupersedingClass",
    "DistractorClass",
    "CLASS_NAMES",
    "SLOT_CLASSES",
    "MIN_TOKENS",
    "MAX_TOKENS",
    "VARIANTS",
    "LIFETIME_LAWS",
    "SimilarityModel",
    "planted_superseded_at",
]

#: Note classes in generation order (this order breaks ties of creation time).
CLASS_NAMES = ("evergreen", "project", "scratch", "superseding", "distractor")
#: Classes whose notes sit on slots and can be relevant.
SLOT_CLASSES = CLASS_NAMES[:4]
#: Token sizes are clipped to ``[MIN_TOKENS, MAX_TOKENS]``.
MIN_TOKENS = 8
MAX_TOKENS = 4000

_TIERS = Options(("task", "scratch", "longterm"))
_POSITIVE = Interval(0, None, closed="neither")
_NON_NEGATIVE = Interval(0, None)


# --------------------------------------------------------------------------
# Knob groups
# --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _Knobs(Validated):
    """Validated knob group with nested groups and TOML round-trip.

    ``_nested`` maps a field to the knob group class it must hold.
    """

    _nested: ClassVar[dict[str, type]] = {}

    def __post_init__(self) -> None:
        for name, kind in self._nested.items():
            value = getattr(self, name)
            if not isinstance(value, kind):
                self._fail(name, f"a {kind.__name__}", value)
        super().__post_init__()

    def _fail(self, name: str, allowed: str, value: Any) -> None:
        # Remember which parameter failed, so that from_config can name its
        # dotted key without parsing the message.
        try:
            super()._fail(name, allowed, value)
        except ParameterError as exc:
            exc.parameter = name  # type: ignore[attr-defined]
            raise

    def to_config(self) -> dict[str, Any]:
        """Every knob, resolved (nested groups as nested dicts)."""
        return self.params()

    @classmethod
    def from_config(cls, table: dict, where: str = "workload"):
        """Build from a (partial) TOML table; missing knobs keep their defaults.

        Raises
        ------
        ConfigError
            On an unknown key (with a "did you mean" hint), a nested group that
            is not a table, or a value out of range; the message starts with
            the dotted key, e.g. ``workload.classes.project.share: ...``.
        """
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: expected a table, got {table!r}")
        allowed = list(fields_of(cls))
        check_keys(table, allowed, where)  # every unknown key of the table at once
        kwargs: dict[str, Any] = {}
        for key, value in table.items():
            nested = cls._nested.get(key)
            if nested is not None and not isinstance(value, nested):
                kwargs[key] = nested.from_config(value, f"{where}.{key}")
            else:
                kwargs[key] = value
        try:
            return cls(**kwargs)
        except ParameterError as exc:
            name = getattr(exc, "parameter", None)
            path = f"{where}.{name}" if name in allowed else where
            raise ConfigError(f"{path}: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class _SizedClass(_Knobs):
    """Knobs every note class has: note share, size law and tier.

    Parameters
    ----------
    share : float >= 0
        Relative weight of the class among the notes written: notes arrive
        at ``notes_per_day * share / sum(share)`` a day.
    size_median, size_sigma : float
        Note sizes in tokens: ``LogNormal(ln size_median, size_sigma)``,
        rounded and clipped to ``[MIN_TOKENS, MAX_TOKENS]``.
    tier : {"task", "scratch", "longterm"}
        The tier the class's notes carry (read by tiered decays and
        retentions).
    """

    share: float = 0.2
    size_median: float = 100.0
    size_sigma: float = 1.0
    tier: str = "task"
    _constraints: ClassVar[dict] = {
        "share": _NON_NEGATIVE,
        "size_median": _POSITIVE,
        "size_sigma": _NON_NEGATIVE,
        "tier": _TIERS,
    }


@dataclass(frozen=True, kw_only=True)
class _SlotClass(_SizedClass):
    """Knobs of a class whose notes sit on slots.

    Parameters
    ----------
    query_share : float >= 0
        Relative weight of the class among the questions: a query asks
        about it with probability ``query_share / sum(query_share)`` over
        the classes with a slot the asker may ask about at that time.
    notes_per_slot : float >= 1
        Mean notes per slot, ``1 + Poisson(n - 1)``.
    interval_days : float > 0
        Mean days between the notes of a slot.
    """

    query_share: float = 0.25
    notes_per_slot: float = 1.0
    interval_days: float = 7.0
    _constraints: ClassVar[dict] = {
        "query_share": _NON_NEGATIVE,
        "notes_per_slot": Interval(1, None),
        "interval_days": _POSITIVE,
    }

    #: Whether each note expires after a random lifetime.
    expires: ClassVar[bool] = False


@dataclass(frozen=True, kw_only=True)
class EvergreenClass(_SlotClass):
    """Evergreen facts: never stale, askable forever ("the user's name").

    Parameters
    ----------
    share : float, default 0.15
        Share of notes (normalised over the classes).
    query_share : float, default 0.3
        Weight of this class when a query picks what to ask.
    notes_per_slot : float, default 1.0
        Mean notes per slot, ``1 + Poisson(notes_per_slot - 1)``; extra notes
        are restatements (all valid; the newest gets ``gain_current``).
    interval_days : float, default 90.0
        Mean days between restatements (exponential gaps).
    size_median, size_sigma : float, default 40.0, 0.7
        Tokens ~ ``clip(round(LogNormal(ln size_median, size_sigma)), 8, 4000)``.
    tier : str, default "task"
    """

    share: float = 0.15
    query_share: float = 0.3
    notes_per_slot: float = 1.0
    interval_days: float = 90.0
    size_median: float = 40.0
    size_sigma: float = 0.7


#: Lifetime laws of the expiring classes (see :class:`ProjectClass`).
LIFETIME_LAWS = ("lognormal", "exponential")


@dataclass(frozen=True, kw_only=True)
class _ExpiringClass(_SlotClass):
    """A slot class whose notes expire after a random lifetime.

    ``lifetime_law = "lognormal"``: ``L ~ LogNormal(ln lifetime_median_days,
    lifetime_sigma)``. ``"exponential"``: ``L ~ Exponential(rate = ln 2 /
    lifetime_median_days)``, so ``lifetime_median_days`` is the half-life of
    validity, ``P(valid at age a) = 0.5 ** (a / lifetime_median_days)``, and
    ``lifetime_sigma`` is unused.
    """

    lifetime_law: str = "lognormal"
    lifetime_median_days: float = 60.0
    lifetime_sigma: float = 0.75
    _constraints: ClassVar[dict] = {
        "lifetime_law": Options(LIFETIME_LAWS),
        "lifetime_median_days": _POSITIVE,
        "lifetime_sigma": _NON_NEGATIVE,
    }
    expires: ClassVar[bool] = True


@dataclass(frozen=True, kw_only=True)
class ProjectClass(_ExpiringClass):
    """Project notes: valid for weeks to months, asked about while active.

    Each note is valid on ``[created_at, created_at + L)`` with a random
    lifetime ``L`` (law below); expired notes still on an askable slot are
    stale (``gain_stale``).

    Parameters
    ----------
    share : float, default 0.3
    query_share : float, default 0.3
    notes_per_slot : float, default 4.0
        Mean notes (status updates) per project, ``1 + Poisson(n - 1)``.
    interval_days : float, default 10.0
        Mean days between updates of a project.
    lifetime_law : {"lognormal", "exponential"}, default "lognormal"
        ``"lognormal"``: ``L ~ LogNormal(ln lifetime_median_days,
        lifetime_sigma)``. ``"exponential"``: ``L ~ Exponential(rate = ln 2 /
        lifetime_median_days)``: validity has the half-life
        ``H = lifetime_median_days``, ``P(valid at age a) = 0.5 ** (a / H)``
        (the median is ``H`` under both laws), the law for which the best
        decay is known (module docstring); ``lifetime_sigma`` is then unused.
        Both laws draw from the class's stream at the same point, so adding
        this knob left every lognormal stream bit-identical.
    lifetime_median_days, lifetime_sigma : float, default 60.0, 0.75
        ``P(L > 180 d) = 7 %`` with the defaults (lognormal).
    size_median, size_sigma : float, default 250.0, 1.0
    tier : str, default "task"
    """

    share: float = 0.3
    query_share: float = 0.3
    notes_per_slot: float = 4.0
    interval_days: float = 10.0
    lifetime_median_days: float = 60.0
    lifetime_sigma: float = 0.75
    size_median: float = 250.0
    size_sigma: float = 1.0


@dataclass(frozen=True, kw_only=True)
class ScratchClass(_ExpiringClass):
    """Scratch notes: valid for days (this week's task).

    Parameters
    ----------
    share : float, default 0.2
    query_share : float, default 0.2
    notes_per_slot : float, default 2.0
    interval_days : float, default 1.0
    lifetime_law : {"lognormal", "exponential"}, default "lognormal"
        As in :class:`ProjectClass` (``"exponential"``: half-life
        ``lifetime_median_days``, ``lifetime_sigma`` unused).
    lifetime_median_days, lifetime_sigma : float, default 4.0, 0.5
        A note's lifetime ``L``: its median in days and, for the lognormal
        law, the sd of ``ln L``.
    size_median, size_sigma : float, default 120.0, 1.0
    tier : str, default "scratch"
        Hivemind's short-lived tier, so that tiered decay has a real signal.
    """

    share: float = 0.2
    query_share: float = 0.2
    notes_per_slot: float = 2.0
    interval_days: float = 1.0
    lifetime_median_days: float = 4.0
    lifetime_sigma: float = 0.5
    size_median: float = 120.0
    size_sigma: float = 1.0
    tier: str = "scratch"


@dataclass(frozen=True, kw_only=True)
class SupersedingClass(_SlotClass):
    """Superseding facts: versions of a fact; the newest one is right.

    Version ``i`` of a slot is valid on ``[created_i, created_{i+1})`` (the
    last version forever). All versions of a slot share its embedding
    direction, so stale versions are exactly as similar as the current one.

    Parameters
    ----------
    share : float, default 0.15
    query_share : float, default 0.2
    notes_per_slot : float, default 5.0
        Mean versions per slot, ``1 + Poisson(n - 1)``.
    interval_days : float, default 30.0
        Mean time between versions (exponential gaps).
    size_median, size_sigma : float, default 60.0, 0.8
    tier : str, default "task"
    """

    share: float = 0.15
    query_share: float = 0.2
    notes_per_slot: float = 5.0
    interval_days: float = 30.0
    size_median: float = 60.0
    size_sigma: float = 0.8


@dataclass(frozen=True, kw_only=True)
class DistractorClass(_SizedClass):
    """Distractors: never relevant (no qrels), drawn around topic centroids.

    Parameters
    ----------
    share : float, default 0.2
    size_median, size_sigma : float, default 200.0, 1.2
    tier : str, default "task"
    """

    share: float = 0.2
    size_median: float = 200.0
    size_sigma: float = 1.2


@dataclass(frozen=True, kw_only=True)
class NoteClasses(_Knobs):
    """The mixture of note classes (TOML table ``[workload.classes]``).

    Shares need not sum to 1: class ``c`` gets the note rate
    ``notes_per_day * share_c / sum(share)``. All shares zero is an error, and
    so is a mixture in which no class with notes can be asked about (every
    slot class has ``share = 0`` or ``query_share = 0``).

    Parameters
    ----------
    evergreen : EvergreenClass
    project : ProjectClass
    scratch : ScratchClass
    superseding : SupersedingClass
    distractor : DistractorClass
    """

    evergreen: EvergreenClass = field(default_factory=EvergreenClass)
    project: ProjectClass = field(default_factory=ProjectClass)
    scratch: ScratchClass = field(default_factory=ScratchClass)
    superseding: SupersedingClass = field(default_factory=SupersedingClass)
    distractor: DistractorClass = field(default_factory=DistractorClass)
    _nested: ClassVar[dict[str, type]] = {
        "evergreen": EvergreenClass,
        "project": ProjectClass,
        "scratch": ScratchClass,
        "superseding": SupersedingClass,
        "distractor": DistractorClass,
    }

    def _check(self) -> None:
        total = sum(getattr(self, name).share for name in CLASS_NAMES)
        if total <= 0:
            self._fail("share", "> 0 for at least one class", 0.0)
        # shares are relative weights: a sum that overflows would make every
        # class's share_c / sum 0, a stream with no note
        if not math.isfinite(total):
            self._fail("share", "weights whose sum is finite", total)
        askable = sum(self.spec(n).query_share for n in SLOT_CLASSES if self.spec(n).share > 0)
        if askable <= 0:
            self._fail("query_share", "> 0 for at least one slot class with share > 0", 0.0)
        if not math.isfinite(askable):
            self._fail("query_share", "weights whose sum is finite", askable)

    def spec(self, name: str) -> _SizedClass:
        """The knob group of class ``name``."""
        return getattr(self, name)

    def note_shares(self) -> dict[str, float]:
        """Normalised note shares, ``share_c / sum(share)``."""
        total = sum(self.spec(n).share for n in CLASS_NAMES)
        return {n: self.spec(n).share / total for n in CLASS_NAMES}


# --------------------------------------------------------------------------
# The similarity law
# --------------------------------------------------------------------------


def _cosine_moments(shared: float, total: float, d: int) -> tuple[float, float]:
    """Mean and sd of the cosine of two vectors that share a component.

    Both are ``A + B`` with ``A`` common, ``B`` independent, all coordinates
    centred Gaussian with variance ``shared / d`` (``A``) and ``total / d``
    (``A + B``); see :meth:`SyntheticWorkload.similarity_model`.
    """
    rho = shared / total
    return rho * (1.0 - (1.0 - rho * rho) / (2.0 * d)), (1.0 - rho * rho) / math.sqrt(d)


@dataclass(frozen=True)
class SimilarityModel:
    """Mean and standard deviation of the query-note cosine, per kind of note.

    Returned by :meth:`SyntheticWorkload.similarity_model` (which derives
    them); a plain function of the knobs ``slot_weight``, ``retriever_noise``
    and ``embedding_dim``.

    Attributes
    ----------
    on_slot_mean, on_slot_sd : float
        A note of the asked slot (every note of the slot: current, older
        valid, stale).
    same_topic_mean, same_topic_sd : float
        A note of another slot of the query's topic.
    other_topic_mean, other_topic_sd : float
        A note of another topic (mean 0).
    distractor_mean, distractor_sd : float
        A distractor of the query's topic (the same law as ``same_topic``: a
        distractor is a one-note slot nobody asks about).
    """

    on_slot_mean: float
    on_slot_sd: float
    same_topic_mean: float
    same_topic_sd: float
    other_topic_mean: float
    other_topic_sd: float
    distractor_mean: float
    distractor_sd: float

    @property
    def beta(self) -> float:
        """The linear-discriminant slope of similarity: ``(mu_on - mu_same) / v``.

        ``v = (sd_on^2 + sd_same^2) / 2``. With both cosine laws given their
        pooled variance ``v``, ``log(f_on(cos) / f_same(cos))`` is linear in
        ``cos`` with this slope: the exchange rate between similarity and log
        prior of the best ranking of the form ``exp(beta * cos) * prior``.
        With a prior ``0.5 ** (age / H)`` one unit of cosine is then worth
        ``beta / ln 2`` half-lives. The laws that matter are those *within
        one query* (:meth:`SyntheticWorkload.query_similarity_model`): a
        ranking compares notes of one query, which share its vector. 0 when
        similarity says nothing (``mu_on = mu_same``).
        """
        gap = self.on_slot_mean - self.same_topic_mean
        pooled = (self.on_slot_sd ** 2 + self.same_topic_sd ** 2) / 2.0
        return 0.0 if gap == 0 else gap / pooled

    def log_likelihood_ratio(self, cos) -> np.ndarray:
        """``log(f_on(cos) / f_same(cos))`` under the Gaussian approximation.

        Quadratic in ``cos`` (the two laws have different sds); with their
        pooled variance it would be linear with slope :attr:`beta`.
        Undefined (NaN) when ``on_slot_sd = 0`` (``retriever_noise = 0``).
        """
        c = np.asarray(cos, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            return (np.log(self.same_topic_sd / self.on_slot_sd)
                    - 0.5 * ((c - self.on_slot_mean) / self.on_slot_sd) ** 2
                    + 0.5 * ((c - self.same_topic_mean) / self.same_topic_sd) ** 2)


# --------------------------------------------------------------------------
# The workload
# --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SyntheticWorkload(_Knobs):
    """A synthetic workload with planted truth (TOML table ``[workload]``).

    See the module docstring for the generative story. Every knob below is a
    keyword field; construction validates and never coerces.

    Parameters
    ----------
    horizon_days : float, default 365.0
        Queries happen in ``[0, horizon_days]``; notes keep being written
        until ``horizon_days``.
    backfill_days : float, default 365.0
        Notes are also written in ``[-backfill_days, 0)``, so that ages vary
        from the first query.
    age_mode : {"natural", "zero"}, default "natural"
        ``"zero"`` puts every note and every query at ``t = 0`` (every age is
        0: the benchmark that cannot see a decay bug).
    notes_per_day : float, default 20.0
        Mean note rate over ``[-backfill_days, horizon_days]``, all classes
        together. Slots are born from before the window on, so that the rate
        is flat from the first day; notes that fall outside the window are
        dropped.
    queries_per_day : float, default 20.0
        Mean query rate over ``[0, horizon_days]``; with ``arrival =
        "weekly"``, over each whole week (a horizon that is not a whole
        number of weeks holds another mix of weekdays and weekends: 2 days,
        both weekdays, hold 1.29 times as many).
    arrival : {"steady", "bursty", "weekly"}, default "steady"
        ``"steady"``: a Poisson process. ``"bursty"``: sessions start as a
        Poisson process of rate ``queries_per_day / burst_size``; a session
        has ``1 + Poisson(burst_size - 1)`` queries from one actor, spaced by
        exponential gaps of mean ``burst_gap_days``. ``"weekly"``: day ``d``
        (day 0 is a Monday) has rate ``r * 7 / (5 + 2 * weekend_factor)`` on
        weekdays and ``weekend_factor`` times that on Saturdays and Sundays.
    burst_size : float, default 5.0
        Mean queries per session (``arrival = "bursty"``).
    burst_gap_days : float, default 0.005
        Mean gap between queries of a session (7.2 minutes). A session that
        runs past ``horizon_days`` is cut there: about ``gap (b^2 - 1) /
        (2 b) / horizon_days`` of the queries (``b = burst_size``), which
        must stay within 5% so that ``queries_per_day`` holds.
    weekend_factor : float, default 0.2
        Weekend rate relative to weekdays (``arrival = "weekly"``).
    n_topics : int, default 40
        Topics: each slot has one (drawn by ``topic_zipf``), and its notes'
        and queries' vectors share the topic's centroid.
    topic_zipf : float, default 1.0
        Zipf exponent of topic popularity (0 = uniform).
    n_actors : int, default 5
        Actors are named ``"a0"``, ``"a1"``, ...; queries and sessions pick
        an actor uniformly.
    personal_share : float, default 0.3
        Probability that a slot is personal (written and asked by its owner
        only); other slots are team slots (any actor).
    embedding_dim : int, default 64
        Dimension of the note and query vectors.
    slot_weight : float, default 1.0
        Norm of the slot direction relative to the topic centroid: how well
        similarity separates slots of one topic.
    retriever_noise : float, default 1.35
        Noise scale of note and query vectors (0 = similarity perfectly
        informative). The default is chosen by measurement
        (``benchmarks/default_world.py``) so that retrieval is about as hard
        as a real retriever on real memory: BM25 on LoCoMo packs 0.69 of a
        question's evidence within 1,500 tokens, and a similarity-only store
        (preset ``similarity-only``) on the default workload packs 0.685
        (3 replicates, 1,500 tokens; 0.63-0.73 by age bucket). On slot the
        cosine is 0.52 +- 0.09 against 0.26 +- 0.12 for other notes of the
        topic (:meth:`similarity_model`); all of a query's
        relevant notes are in the cosine top 5 for 0.54 of queries, any of
        them for 0.66 (BM25 on LoCoMo: 0.46, 0.56). The earlier 0.8 made
        similarity nearly an oracle (recall 0.95, 0.99 at ages over a
        year), too easy for decay to matter; 1.2 gives 0.81, 1.6 gives 0.47.
        What then comes out (skip-fill for all, paired 95% intervals): no
        decay has utility 0.378, ``0.95 ** days`` 0.304 (-0.074 [-0.086,
        -0.064]; recall 0 beyond 90 days), a 180-day half-life with floor
        0.35 0.442 (+0.063 [+0.054, +0.072]; it drops stale notes, stale
        rate 0.053 against 0.080, and loses old ones, recall 0.26 at
        180-365 days against 0.73). At 0.8 that half-life lost to no decay
        (-0.015 [-0.023, -0.007]).
    uniform_tokens : int, default 0
        0: sizes follow each class's LogNormal law. Otherwise every note has
        exactly this many tokens (a benchmark-like workload), in [8, 4000].
    accesses_per_day : float, default 0.0
        Rate of organic reads over ``[-backfill_days, horizon_days]``: each
        picks a currently valid slot note uniformly; the reader is the owner
        of a personal note, a uniform actor for a team note. A read drawn
        at a time when no slot note is valid has nothing to read and is
        dropped, so where such times are common (few slot notes, short
        lifetimes) the stream holds fewer reads than the rate.
    gain_current : float, default 1.0
        Gain of the newest valid note of the asked slot.
    gain_valid : float, default 0.5
        Gain of the other valid notes of the asked slot (``<= gain_current``).
    gain_stale : float, default -0.5
        Gain of the asked slot's superseded or expired notes (``<= 0``).
    classes : NoteClasses
        The note-class mixture (shares, laws); see :class:`NoteClasses`.

    Notes
    -----
    Note columns beyond the stream format: ``note_class``, ``topic``,
    ``slot`` (global slot id, -1 for distractors), ``scope``
    (``"personal"``/``"team"``) and ``valid_until`` (inf when never stale).
    Query columns beyond the contract: ``note_class`` (the asked class or
    ``"none"``), ``topic`` and ``slot`` (-1 when nothing was askable).
    ``expires_at`` is NaN: validity is ground truth, not a TTL the store knows.
    """

    horizon_days: float = 365.0
    backfill_days: float = 365.0
    age_mode: str = "natural"
    notes_per_day: float = 20.0
    queries_per_day: float = 20.0
    arrival: str = "steady"
    burst_size: float = 5.0
    burst_gap_days: float = 0.005
    weekend_factor: float = 0.2
    n_topics: int = 40
    topic_zipf: float = 1.0
    n_actors: int = 5
    personal_share: float = 0.3
    embedding_dim: int = 64
    slot_weight: float = 1.0
    retriever_noise: float = 1.35
    uniform_tokens: int = 0
    accesses_per_day: float = 0.0
    gain_current: float = 1.0
    gain_valid: float = 0.5
    gain_stale: float = -0.5
    classes: NoteClasses = field(default_factory=NoteClasses)

    _nested: ClassVar[dict[str, type]] = {"classes": NoteClasses}
    _constraints: ClassVar[dict] = {
        "horizon_days": _POSITIVE,
        "backfill_days": _NON_NEGATIVE,
        "age_mode": Options(("natural", "zero")),
        "notes_per_day": _POSITIVE,
        "queries_per_day": _POSITIVE,
        "arrival": Options(("steady", "bursty", "weekly")),
        "burst_size": Interval(1, None),
        "burst_gap_days": _POSITIVE,
        "weekend_factor": _NON_NEGATIVE,
        "n_topics": Interval(1, None, integer=True),
        "topic_zipf": _NON_NEGATIVE,
        "n_actors": Interval(1, None, integer=True),
        "personal_share": Interval(0, 1),
        "embedding_dim": Interval(2, None, integer=True),
        "slot_weight": _NON_NEGATIVE,
        "retriever_noise": _NON_NEGATIVE,
        "uniform_tokens": (Options((0,)), Interval(MIN_TOKENS, MAX_TOKENS, integer=True)),
        "accesses_per_day": _NON_NEGATIVE,
        "gain_current": _POSITIVE,
        "gain_valid": _NON_NEGATIVE,
        "gain_stale": Interval(None, 0),
    }

    def _check(self) -> None:
        if self.gain_valid > self.gain_current:
            self._fail("gain_valid", f"<= gain_current ({self.gain_current:g})", self.gain_valid)
        if self.arrival == "bursty":
            # A session that runs past the horizon is cut there, so the mean
            # rate holds only while sessions are short next to the horizon:
            # the share cut is about E[query's offset in its session] /
            # horizon = gap (b^2 - 1) / (2 b) / horizon (b: mean session size)
            b = float(self.burst_size)
            cut = self.burst_gap_days * (b * b - 1.0) / (2.0 * b) / float(self.horizon_days)
            if cut > MAX_BURST_CUT:
                self._fail("burst_gap_days", f"such that a session is short next to "
                           f"horizon_days ({self.horizon_days:g}): with burst_size "
                           f"{b:g}, {f'about {cut:.0%} of' if cut < 1 else 'most of'} the "
                           "queries would fall past the horizon and be dropped, not "
                           f"{MAX_BURST_CUT:.0%} at most "
                           "(shorten the gap or the sessions, or lengthen the horizon)",
                           self.burst_gap_days)

    # -- helpers ---------------------------------------------------------------
    def topic_popularity(self) -> np.ndarray:
        """Zipf popularity ``p_k = (k + 1) ** -topic_zipf``, normalised."""
        p = np.power(np.arange(1, self.n_topics + 1, dtype=np.float64), -self.topic_zipf)
        return p / p.sum()

    def actor_names(self) -> list[str]:
        """``["a0", "a1", ...]``."""
        return [f"a{i}" for i in range(self.n_actors)]

    def similarity_model(self) -> SimilarityModel:
        """The law of the query-note cosine, derived from the knobs.

        Returns
        -------
        SimilarityModel
            Mean and sd of the cosine of a query with a note of the asked
            slot, another note of its topic, a note of another topic and a
            distractor of its topic, averaged over queries.

        Notes
        -----
        A note and a query are ``normalise(c + w u + s e)`` with ``c, u, e``
        i.i.d. ``N(0, I / d)`` (``w = slot_weight``, ``s = retriever_noise``,
        ``d = embedding_dim``), the noises ``e`` independent. Before
        normalisation the two vectors ``x``, ``q`` have coordinates that are
        i.i.d. pairs, centred Gaussian with variance ``T / d``, ``T = 1 + w^2
        + s^2``, and covariance ``S / d`` where ``S`` is the variance of the
        part they share: ``S = 1 + w^2`` on the asked slot (``c`` and ``u``),
        ``S = 1`` for another slot or a distractor of the topic (``c``), ``S
        = 0`` for another topic. So ``cos(x, q)`` is the (uncentred) sample
        correlation of ``d`` pairs with correlation ``rho = S / T``.

        Delta method on the ratio ``P / sqrt(X Q)`` (``P = x.q``, ``X =
        |x|^2``, ``Q = |q|^2``, means ``S, T, T``): with ``Var P = (T^2 +
        S^2) / d``, ``Var X = Var Q = 2 T^2 / d``, ``Cov(X, Q) = 2 S^2 / d``
        and ``Cov(P, X) = Cov(P, Q) = 2 S T / d`` (Gaussian fourth moments),
        the linear term ``P / T - rho (X + Q) / (2 T)`` has variance

            ``(1 + rho^2 + rho^2 (1 + rho^2) - 4 rho^2) / d = (1 - rho^2)^2 / d``,

        so ``sd = (1 - rho^2) / sqrt(d)``; the second-order term gives the
        mean ``rho (1 - (1 - rho^2) / (2 d))`` (the familiar small bias of a
        sample correlation). With the defaults (``w = 1, s = 1.35, d = 64``):
        on slot ``0.520 +- 0.091``, same topic and distractors ``0.260 +-
        0.116``, other topics ``0 +- 0.125`` (a ranking sees the narrower
        laws of :meth:`query_similarity_model`).

        The law is the one averaged over the draws of the topic centroids
        ``c``; a stream has one ``c`` per topic, and its popular topics
        weigh most, so the same-topic mean of one stream can sit ~0.02 off
        (``|c|^2`` of its few popular topics). With many equally popular
        topics a stream matches the model's means to ~0.005 and its sds to a
        few percent (``tests/test_workload.py``).
        """
        w2, s2, d = self.slot_weight ** 2, self.retriever_noise ** 2, self.embedding_dim
        total = 1.0 + w2 + s2
        on = _cosine_moments(1.0 + w2, total, d)
        topic = _cosine_moments(1.0, total, d)
        other = _cosine_moments(0.0, total, d)
        return SimilarityModel(on_slot_mean=on[0], on_slot_sd=on[1],
                               same_topic_mean=topic[0], same_topic_sd=topic[1],
                               other_topic_mean=other[0], other_topic_sd=other[1],
                               distractor_mean=topic[0], distractor_sd=topic[1])

    def query_similarity_model(self) -> SimilarityModel:
        """The law of the cosine *within one query*: given the query's vector.

        A ranking compares the notes of one query, which all share that
        query's vector ``q`` (unit norm) and its topic centroid ``c``; what
        varies from note to note is only the note's own slot direction and
        noise. Conditioning on ``q`` (and on ``c`` and the asked slot's
        ``u``) takes the query's own share of the variance out of every law.

        Notes
        -----
        With ``T = 1 + w^2 + s^2`` and, to first order, ``q.c = 1 / sqrt(T)``
        and ``q.u = w / sqrt(T)``, a note ``x = c' + w u' + s e`` has
        ``A = q.x`` and ``B = |x|^2``, and ``cos = A / sqrt(B)``. The delta
        method gives ``mean = E A / sqrt(T)`` and

            ``Var cos = Var A / T + (E A)^2 Var B / (4 T^3) - E A Cov(A, B) / T^2``.

        - another note of the topic (``c' = c``, ``u'`` fresh): ``E A = q.c``,
          ``Var A = (w^2 + s^2) / d``, ``Var B = (2 w^4 + 2 s^4 + 4 w^2 + 4
          s^2 + 4 w^2 s^2) / d``, ``Cov(A, B) = 2 (w^2 + s^2) q.c / d``;
        - a note of the asked slot (``c' = c``, ``u' = u``): ``E A = q.c + w
          q.u``, ``Var A = s^2 / d``, ``Var B = (2 s^4 + 4 s^2 + 4 w^2 s^2) /
          d``, ``Cov(A, B) = 2 s^2 E A / d``;
        - a note of another topic: mean 0, sd ``1 / sqrt(d)``.

        With the defaults (``w = 1, s = 1.35, d = 64``): on slot ``0.523 +-
        0.070``, same topic ``0.262 +- 0.102`` (measured within queries of a
        stream: ``0.255 +- 0.097``), and ``beta = 34.0``. The slope of the
        best ranking ``exp(beta * cos - age / tau)``, fitted by conditional
        logit on the queries of one-note-per-slot streams, was 32.6 (51.1 and
        23.2 at ``s = 1.0`` and ``1.8``, where this model gives 58.6 and
        19.3).
        """
        w, s, d = float(self.slot_weight), float(self.retriever_noise), int(self.embedding_dim)
        w2, s2 = w * w, s * s
        total = 1.0 + w2 + s2
        qc, qu = 1.0 / math.sqrt(total), w / math.sqrt(total)

        def moments(mean_a: float, var_a: float, var_b: float, cov_ab: float):
            var = var_a / total + mean_a ** 2 * var_b / (4 * total ** 3) - mean_a * cov_ab / total ** 2
            return mean_a / math.sqrt(total), math.sqrt(max(var, 0.0))

        same = moments(qc, (w2 + s2) / d, (2 * w2 * w2 + 2 * s2 * s2 + 4 * w2 + 4 * s2
                                           + 4 * w2 * s2) / d, 2 * (w2 + s2) * qc / d)
        on_a = qc + w * qu
        on = moments(on_a, s2 / d, (2 * s2 * s2 + 4 * s2 + 4 * w2 * s2) / d, 2 * s2 * on_a / d)
        other = (0.0, 1.0 / math.sqrt(d))
        return SimilarityModel(on_slot_mean=on[0], on_slot_sd=on[1],
                               same_topic_mean=same[0], same_topic_sd=same[1],
                               other_topic_mean=other[0], other_topic_sd=other[1],
                               distractor_mean=same[0], distractor_sd=same[1])

    # -- generation -------------------------------------------------------------
    def generate(self, seed: np.random.SeedSequence | int) -> Stream:
        """Generate the stream for ``seed`` (identical seeds, identical streams).

        Parameters
        ----------
        seed : SeedSequence or int
            Root of the named child streams of this workload (an int is
            wrapped in a ``SeedSequence``).

        Returns
        -------
        Stream
            Notes sorted by ``note_id`` (creation order), queries by ``t``,
            unit-norm float32 embeddings, ``meta`` with ``name = "synthetic"``,
            ``source = "memsim.data.workload"`` and the resolved ``config``.
        """
        if not isinstance(seed, np.random.SeedSequence):
            # an integer only: int() would take 1.5 or True as the seed 1
            if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) \
                    or seed < 0:
                raise ParameterError(f"generate(seed=): expected a SeedSequence or an integer "
                                     f">= 0, got {seed!r}")
            seed = np.random.SeedSequence(int(seed))
        t0, t1 = -float(self.backfill_days), float(self.horizon_days)
        shares = self.classes.note_shares()
        draws = [
            _draw_class(self, name, self.notes_per_day * shares[name], t0, t1, seed)
            for name in CLASS_NAMES
        ]
        notes = _assemble(draws, zero=self.age_mode == "zero")
        del draws

        q_t, q_actor = _arrivals(self, seed)
        if self.age_mode == "zero":
            q_t = np.zeros_like(q_t)
        intervals = _askable_intervals(notes)
        q_class, q_slot = _choose_slots(self, intervals, q_t, q_actor, seed)
        del intervals
        q_topic = _query_topics(self, notes, q_slot, seed)
        qrels = _qrels(self, notes, q_t, q_slot)
        accesses = _accesses(self, notes, t0, t1, seed)

        centroids = _centroids(self, seed)
        asked = np.unique(q_slot[q_slot >= 0])
        note_emb, asked_dirs = _note_embeddings(self, notes, centroids, asked, seed)
        query_emb = _query_embeddings(self, q_topic, q_slot, centroids, asked, asked_dirs, seed)

        actors = np.array(self.actor_names(), dtype=object)
        class_names = np.array(CLASS_NAMES + ("none",), dtype=object)
        notes_df = _notes_frame(self, notes, actors, class_names)
        del notes
        queries_df = pd.DataFrame({
            "query_id": np.arange(q_t.size, dtype=np.int64),
            "t": q_t,
            "actor": actors[q_actor],
            "note_class": class_names[q_class],
            "topic": q_topic,
            "slot": q_slot,
        })
        if accesses is not None:
            accesses = pd.DataFrame({"t": accesses[0], "note_id": accesses[1],
                                     "actor": actors[accesses[2]]})
        meta = {
            "name": "synthetic",
            "source": "memsim.data.workload",
            "config": self.to_config(),
            # entropy as text: it may exceed 64 bits, which JSON readers mangle
            "seed": {"entropy": str(seed.entropy), "spawn_key": [int(k) for k in seed.spawn_key]},
        }
        return make_stream(notes_df, queries_df, qrels, accesses=accesses,
                           note_embeddings=note_emb, query_embeddings=query_emb, meta=meta,
                           copy=False)


def _notes_frame(wl: SyntheticWorkload, notes: dict, actors: np.ndarray,
                 class_names: np.ndarray) -> pd.DataFrame:
    """The notes table of the stream, built on the arrays of ``notes`` (not copies).

    ``importance``, ``salience``, ``memory_type``, ``pinned`` and
    ``expires_at`` are left to the stream's defaults (1, 1, "episodic",
    false, never): the stream fills them in its own table.
    """
    tiers = np.array([wl.classes.spec(n).tier for n in CLASS_NAMES], dtype=object)
    scopes = np.array(["team", "personal"], dtype=object)
    n = notes["created"].size
    return pd.DataFrame({
        "note_id": np.arange(n, dtype=np.int64),
        "created_at": notes["created"],
        "tokens": notes["tokens"],
        "actor": actors[notes["author"]],
        "tier": tiers[notes["cls"]],
        "note_class": class_names[notes["cls"]],
        "topic": notes["topic"],
        "slot": notes["slot"],
        "scope": scopes[notes["personal"].astype(np.intp)],
        "valid_until": notes["valid_until"],
    }, copy=False)


#: Partial ``[workload]`` tables of named variants, for
#: ``SyntheticWorkload.from_config(VARIANTS[name])``: evergreen facts only (no
#: decay should win), fast superseding versions (short half-lives should win),
#: and a benchmark-like workload (every age 0, every note 200 tokens).
VARIANTS: dict[str, dict] = {
    "evergreen-only": {"classes": {
        "evergreen": {"share": 1.0}, "project": {"share": 0.0}, "scratch": {"share": 0.0},
        "superseding": {"share": 0.0}, "distractor": {"share": 0.0}}},
    "fast-superseding": {"classes": {
        "evergreen": {"share": 0.0}, "project": {"share": 0.0}, "scratch": {"share": 0.0},
        "superseding": {"share": 1.0, "interval_days": 3.0, "notes_per_slot": 10.0},
        "distractor": {"share": 0.0}}},
    "benchmark-like": {"age_mode": "zero", "uniform_tokens": 200},
}


# --------------------------------------------------------------------------
# Notes
# --------------------------------------------------------------------------


def _segment_cumsum(x: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Cumulative sums restarted at each segment (segments of ``counts`` rows)."""
    cs = np.cumsum(x)
    start = np.cumsum(counts) - counts
    return cs - np.repeat(cs[start] - x[start], counts)


def _token_sizes(spec: _SizedClass, n: int, uniform: int, rng: np.random.Generator) -> np.ndarray:
    """``clip(round(median * exp(sigma * z)), 8, 4000)``, or ``uniform`` if set."""
    z = rng.standard_normal(n)  # drawn either way: uniform_tokens leaves other draws alone
    if uniform:
        return np.full(n, uniform, dtype=np.int64)
    # a wide law (size_sigma of tens) overflows exp to inf, which the clip
    # takes to MAX_TOKENS: the value is right, the warning only noise
    with np.errstate(over="ignore"):
        raw = np.rint(spec.size_median * np.exp(spec.size_sigma * z))
    return np.clip(raw, MIN_TOKENS, MAX_TOKENS).astype(np.int64)


def slot_lead_days(spec: Any) -> float:
    """How many days before the window a note class's slots start being
    born: ``(m - 1) g + 4 g sqrt(2 (m - 1))`` (``m = notes_per_slot``, ``g =
    interval_days``), the mean plus 4 standard deviations of a chain's span.
    Chains born before the window still write notes inside it; starting
    births that early keeps the note density flat from its first day. The
    notes such chains write before the window are drawn, then dropped: the
    generator draws ``rate x (window + lead)`` notes of the class."""
    m = float(getattr(spec, "notes_per_slot", 1.0))
    gap = float(getattr(spec, "interval_days", 1.0))
    # chain span D = the sum of Poisson(m - 1) Exp(gap) gaps:
    # E[D] = (m - 1) gap, Var[D] = 2 (m - 1) gap^2
    return (m - 1.0) * gap + 4.0 * gap * math.sqrt(2.0 * (m - 1.0))


def _draw_class(wl: SyntheticWorkload, name: str, rate: float, t0: float, t1: float,
                seed: np.random.SeedSequence) -> dict[str, np.ndarray]:
    """Draw the notes of one class in natural time.

    Slots are born uniformly on ``[t0 - lead, t1]`` with
    ``lead = (m - 1) g + 4 g sqrt(2 (m - 1))`` (``m = notes_per_slot``,
    ``g = interval_days``: the mean plus 4 standard deviations of a slot's
    span); their number is ``Poisson(rate * (t1 - t0 + lead) / m)``, so notes
    fall on ``[t0, t1]`` at ``rate`` per day in expectation. Slot ``s`` has
    ``1 + Poisson(m - 1)`` notes at ``birth_s + cumsum(gaps)``, gaps
    ``Exp(interval_days)`` after a first gap of 0. Notes outside ``[t0, t1]``
    are dropped, and so are slots left empty. A distractor is a one-note slot.

    Returns per-note arrays ``created`` (natural), ``slot`` (dense, class
    local), ``topic``, ``lifetime`` (inf unless the class expires),
    ``tokens``, ``author`` and ``personal``, plus ``n_slots``.
    """
    spec = wl.classes.spec(name)
    rng = child(seed, "class", name)
    m = float(getattr(spec, "notes_per_slot", 1.0))
    gap = float(getattr(spec, "interval_days", 1.0))
    lead = slot_lead_days(spec)
    n_slots = int(rng.poisson(rate * (t1 - t0 + lead) / m)) if rate > 0 else 0
    birth = rng.uniform(t0 - lead, t1, n_slots)
    slot_topic = rng.choice(wl.n_topics, size=n_slots, p=wl.topic_popularity())
    counts = 1 + rng.poisson(m - 1.0, n_slots)
    slot = np.repeat(np.arange(n_slots), counts)
    gaps = rng.exponential(gap, slot.size)
    gaps[np.cumsum(counts) - counts] = 0.0
    created = birth[slot] + _segment_cumsum(gaps, counts)
    if getattr(spec, "expires", False):
        # one draw per note from the class stream under either law, so the
        # lognormal draws are those of a workload without the law knob
        if spec.lifetime_law == "exponential":
            lifetime = rng.exponential(spec.lifetime_median_days / math.log(2.0), slot.size)
        else:
            lifetime = rng.lognormal(math.log(spec.lifetime_median_days), spec.lifetime_sigma,
                                     slot.size)
    else:
        lifetime = np.full(slot.size, np.inf)

    tokens = _token_sizes(spec, slot.size, wl.uniform_tokens, child(seed, "sizes", name))

    arng = child(seed, "actors", name)
    personal = arng.random(n_slots) < wl.personal_share
    owner = arng.integers(0, wl.n_actors, n_slots)
    writer = arng.integers(0, wl.n_actors, slot.size)
    author = np.where(personal[slot], owner[slot], writer)

    keep = (created >= t0) & (created <= t1)
    kept_slots, dense = np.unique(slot[keep], return_inverse=True)
    return {
        "created": created[keep],
        "slot": dense.astype(np.int64),
        "topic": slot_topic[slot[keep]].astype(np.int64),
        "lifetime": lifetime[keep],
        "tokens": tokens[keep],
        "author": author[keep].astype(np.int64),
        "personal": personal[slot[keep]],
        "n_slots": np.int64(kept_slots.size),
    }


def _assemble(draws: list[dict], zero: bool) -> dict[str, np.ndarray]:
    """Merge the classes, number notes in creation order, derive validity.

    ``note_id`` follows natural creation time (ties: class order, then draw
    order), also in ``age_mode = "zero"``, where ``created`` then becomes 0.
    Slot ids become global: class offset + class-local slot (distractors -1);
    ``slot_start`` holds each class's offset. ``valid_until`` is ``created +
    lifetime`` (inf for never-expiring notes); for superseding notes it is the
    creation time of the next note of the slot (inf for the last one).

    Each per-note array of ``draws`` is moved (popped) into its place in a
    preallocated array of the merged order, class by class, so that the
    classes' draws and the merged notes are never held twice over.
    """
    sizes = [d["created"].size for d in draws]
    n = sum(sizes)
    starts = np.cumsum([0] + sizes)
    offsets = np.cumsum([0] + [int(d["n_slots"]) for d in draws[:-1]])
    created = np.concatenate([d.pop("created") for d in draws])
    cls = np.repeat(np.arange(len(draws), dtype=np.int64), sizes)
    local = np.concatenate([np.arange(k) for k in sizes])  # row within its class draw
    order = np.lexsort((local, cls, created))
    notes: dict = {"created": created[order], "cls": cls[order], "local": local[order]}
    del created, cls, local
    dest = np.empty(n, dtype=np.int64)  # row of the merged order of each class-draw row
    dest[order] = np.arange(n)
    del order
    for key in ("slot", "topic", "lifetime", "tokens", "author", "personal"):
        out = np.empty(n, dtype=np.result_type(*[d[key] for d in draws]))
        for code, (name, d) in enumerate(zip(CLASS_NAMES, draws)):
            values = d.pop(key)
            if key == "slot":
                values = values + offsets[code] if name in SLOT_CLASSES else -1
            out[dest[starts[code]:starts[code + 1]]] = values
        notes[key] = out
    del dest
    notes["slot_start"] = offsets
    notes["n_slots"] = int(sum(int(d["n_slots"]) for name, d in zip(CLASS_NAMES, draws)
                               if name in SLOT_CLASSES))
    if zero:
        notes["created"] = np.zeros_like(notes["created"])
    notes["valid_until"] = notes["created"] + notes["lifetime"]
    _supersede(notes)
    _slot_table(notes)
    return notes


def _slot_table(notes: dict[str, np.ndarray]) -> None:
    """Per-slot arrays (indexed by global slot id): class, topic, personal, owner."""
    n_slots = notes["n_slots"]
    on = notes["slot"] >= 0
    s = notes["slot"][on]
    for key, src, fill in (("slot_class", notes["cls"], -1), ("slot_topic", notes["topic"], -1),
                           ("slot_owner", np.where(notes["personal"], notes["author"], -1), -1)):
        arr = np.full(n_slots, fill, dtype=np.int64)
        arr[s] = src[on]
        notes[key] = arr
    personal = np.zeros(n_slots, dtype=bool)
    personal[s] = notes["personal"][on]
    notes["slot_personal"] = personal


def _supersede(notes: dict[str, np.ndarray]) -> None:
    """Set ``valid_until`` of superseded notes to their successor's creation."""
    code = CLASS_NAMES.index("superseding")
    idx = np.flatnonzero(notes["cls"] == code)
    idx = idx[np.argsort(notes["slot"][idx], kind="stable")]  # by slot, then note_id
    if idx.size < 2:
        return
    same = notes["slot"][idx[1:]] == notes["slot"][idx[:-1]]
    notes["valid_until"][idx[:-1][same]] = notes["created"][idx[1:][same]]


def planted_superseded_at(notes: pd.DataFrame) -> np.ndarray | None:
    """When each note of a stream memsim generated was superseded (days;
    NaN = never), in row order: a superseding-class note's ``valid_until``,
    the creation of its slot's next version (the expiry of project and
    scratch notes is not supersession: no newer note replaces them). None
    for a stream without the ``note_class`` and ``valid_until`` columns."""
    if "note_class" not in notes or "valid_until" not in notes:
        return None
    until = notes["valid_until"].to_numpy(np.float64)
    sup = (notes["note_class"].astype(str).to_numpy() == "superseding") & np.isfinite(until)
    return np.where(sup, until, np.nan)


# --------------------------------------------------------------------------
# Embeddings
# --------------------------------------------------------------------------


def _gauss(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """``n`` float32 rows of ``N(0, I / d)`` (expected squared norm 1)."""
    x = rng.standard_normal((n, d), dtype=np.float32)
    x *= np.float32(1.0 / math.sqrt(d))
    return x


def _mix(wl: SyntheticWorkload, centroid: np.ndarray, direction: np.ndarray,
         noise: np.ndarray) -> np.ndarray:
    """Unit rows of ``centroid + slot_weight * direction + retriever_noise * noise``."""
    x = centroid
    x += np.float32(wl.slot_weight) * direction
    x += np.float32(wl.retriever_noise) * noise
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), np.float32(1e-12))
    return x


def _centroids(wl: SyntheticWorkload, seed) -> np.ndarray:
    d = wl.embedding_dim
    return _gauss(child(seed, "embeddings", "topics"), wl.n_topics, d)


#: Bytes of one ``rows x embedding_dim`` float32 block of the note-embedding
#: pass: the pass holds a few such blocks besides the final array, whatever
#: the number of notes. The stream does not depend on it (each draw is made
#: in order, a block after the other, and every other step is row by row).
CHUNK_BYTES = 1 << 24


def _chunk_rows(d: int) -> int:
    return max(1, CHUNK_BYTES // (4 * d))


def _note_embeddings(wl: SyntheticWorkload, notes: dict, centroids: np.ndarray,
                     asked: np.ndarray, seed) -> tuple[np.ndarray, np.ndarray]:
    """``normalise(c_topic + w * u_slot + s * e)``; a distractor's ``u`` is its own.

    Each class is walked in its draw order (slot by slot), a block of
    :data:`CHUNK_BYTES` at a time, and its rows written into their places of
    the preallocated result: the class's noise ``e`` (stream ``("embeddings",
    "notes", class)``), its slot directions ``u`` (``("embeddings", "slots",
    class)``, one per class-local slot in slot order) and the distractors' own
    directions (``("embeddings", "distractors")``) are each drawn in order, a
    block after the other, which gives the numbers of one draw of them all:
    another class's knobs cannot shift them.

    Returns the note embeddings and the slot directions of the global slots
    ``asked`` (sorted, unique), which the queries reuse.
    """
    d = wl.embedding_dim
    n = notes["created"].size
    out = np.empty((n, d), dtype=np.float32)
    asked_dirs = np.empty((asked.size, d), dtype=np.float32)
    step = _chunk_rows(d)
    for code, name in enumerate(CLASS_NAMES):
        rows = np.flatnonzero(notes["cls"] == code)
        where = np.empty_like(rows)  # the note row of each class-draw row
        where[notes["local"][rows]] = rows
        del rows
        noise_rng = child(seed, "embeddings", "notes", name)
        on_slot = name in SLOT_CLASSES
        dir_rng = child(seed, "embeddings", *(("slots", name) if on_slot else ("distractors",)))
        start = int(notes["slot_start"][code])
        # directions of the class-local slots [lo, hi): draw order is slot order,
        # so a block needs the last slot of the previous block and new ones only
        lo, hi, dirs = 0, 0, np.empty((0, d), dtype=np.float32)
        for a in range(0, where.size, step):
            rows = where[a:a + step]
            if on_slot:
                local = notes["slot"][rows] - start
                new = _gauss(dir_rng, int(local[-1]) + 1 - hi, d)
                i, j = np.searchsorted(asked, (start + hi, start + hi + len(new)))
                asked_dirs[i:j] = new[asked[i:j] - start - hi]
                first = int(local[0])
                dirs = np.concatenate([dirs[first - lo:], new])
                lo, hi = first, hi + len(new)
                direction = dirs[local - lo]
            else:
                direction = _gauss(dir_rng, rows.size, d)
            noise = _gauss(noise_rng, rows.size, d)
            out[rows] = _mix(wl, centroids[notes["topic"][rows]], direction, noise)
    return out, asked_dirs


def _query_embeddings(wl: SyntheticWorkload, q_topic: np.ndarray, q_slot: np.ndarray,
                      centroids: np.ndarray, asked: np.ndarray, asked_dirs: np.ndarray,
                      seed) -> np.ndarray:
    """Like a note of the asked slot; an unanswerable query gets a fresh direction.

    ``asked_dirs`` holds the directions of the slots ``asked`` (sorted).
    """
    d = wl.embedding_dim
    n = q_topic.size
    answerable = q_slot >= 0
    direction = np.empty((n, d), dtype=np.float32)
    direction[answerable] = asked_dirs[np.searchsorted(asked, q_slot[answerable])]
    direction[~answerable] = _gauss(child(seed, "embeddings", "unanswerable"),
                                    int((~answerable).sum()), d)
    noise = _gauss(child(seed, "embeddings", "queries"), n, d)
    return _mix(wl, centroids[q_topic], direction, noise)


# --------------------------------------------------------------------------
# Queries
# --------------------------------------------------------------------------


#: Most share of a bursty workload's queries its sessions may run past the
#: horizon (they are dropped, and ``queries_per_day`` would not hold)
MAX_BURST_CUT = 0.05


def _arrivals(wl: SyntheticWorkload, seed) -> tuple[np.ndarray, np.ndarray]:
    """Query times in ``[0, horizon_days]`` (sorted) and actor codes."""
    rng = child(seed, "queries", "arrivals")
    arng = child(seed, "queries", "actors")
    horizon, rate = float(wl.horizon_days), float(wl.queries_per_day)
    if wl.arrival == "bursty":
        n_sessions = int(rng.poisson(rate * horizon / wl.burst_size))
        start = rng.uniform(0.0, horizon, n_sessions)
        size = 1 + rng.poisson(wl.burst_size - 1.0, n_sessions)
        gaps = rng.exponential(wl.burst_gap_days, int(size.sum()))
        gaps[np.cumsum(size) - size] = 0.0
        t = np.repeat(start, size) + _segment_cumsum(gaps, size)
        actor = np.repeat(arng.integers(0, wl.n_actors, n_sessions), size)
        keep = t <= horizon  # a session running past the horizon is cut there
        t, actor = t[keep], actor[keep]
    else:
        if wl.arrival == "weekly":
            t = _weekly_times(rate, horizon, wl.weekend_factor, rng)
        else:
            t = rng.uniform(0.0, horizon, int(rng.poisson(rate * horizon)))
        actor = arng.integers(0, wl.n_actors, t.size)
    order = np.argsort(t, kind="stable")
    return t[order], actor[order].astype(np.int64)


def _weekly_times(rate: float, horizon: float, weekend_factor: float,
                  rng: np.random.Generator) -> np.ndarray:
    """Day ``d`` (``d % 7`` in 5, 6 is a weekend) gets ``Poisson(r_d * length_d)``
    uniform times, ``r_d = rate * 7 / (5 + 2 f)`` times ``f`` on weekends, so the
    weekly mean rate is ``rate``."""
    days = np.arange(int(math.ceil(horizon)))
    length = np.minimum(days + 1.0, horizon) - days
    span = 5.0 + 2.0 * weekend_factor
    base = rate * 7.0 / span
    # a factor so large that 2 f overflows: the week's reads all on weekends
    weekend = base * weekend_factor if math.isfinite(span) else rate * 3.5
    day_rate = np.where(days % 7 >= 5, weekend, base)
    counts = rng.poisson(day_rate * length)
    return np.repeat(days, counts) + rng.random(int(counts.sum())) * np.repeat(length, counts)


def _merge_intervals(slot: np.ndarray, start: np.ndarray, end: np.ndarray):
    """Union of ``[start, end)`` intervals per slot (touching ones merge)."""
    df = pd.DataFrame({"slot": slot, "start": start, "end": end}).sort_values(
        ["slot", "start"], kind="stable")
    reach = df.groupby("slot", sort=False)["end"].cummax()
    prev = reach.groupby(df["slot"], sort=False).shift()
    new = prev.isna().to_numpy() | (df["start"].to_numpy() > prev.to_numpy())
    run = np.cumsum(new)
    merged = df.groupby(run, sort=False).agg(slot=("slot", "first"), start=("start", "min"),
                                             end=("end", "max"))
    return (merged["slot"].to_numpy(np.int64), merged["start"].to_numpy(np.float64),
            merged["end"].to_numpy(np.float64))


def _askable_intervals(notes: dict) -> dict[str, np.ndarray]:
    """When each slot can be asked: the union of its notes' validity windows.

    For evergreen and superseding slots that is ``[first note, inf)``; for
    project and scratch slots a union of ``[created_at, valid_until)``.
    """
    on = notes["slot"] >= 0
    slot, start, end = _merge_intervals(notes["slot"][on], notes["created"][on],
                                        notes["valid_until"][on])
    return {"slot": slot, "start": start, "end": end, "cls": notes["slot_class"][slot],
            "personal": notes["slot_personal"][slot], "owner": notes["slot_owner"][slot]}


def _count_active(start: np.ndarray, end: np.ndarray, times: np.ndarray) -> np.ndarray:
    """``#{i : start_i <= t < end_i}`` for each ``t`` (requires ``start <= end``)."""
    return (np.searchsorted(np.sort(start), times, side="right")
            - np.searchsorted(np.sort(end), times, side="right"))


def _pick_active(start: np.ndarray, end: np.ndarray, times: np.ndarray,
                 rng: np.random.Generator, rounds: int = 64) -> np.ndarray:
    """For each ``t``, an index ``i`` with ``start_i <= t < end_i`` drawn uniformly
    (-1 when none).

    Open-ended intervals (``end = inf``) active at ``t`` are a prefix of them
    sorted by start, so one of them is one integer draw. Finite ones are drawn
    by rejection from the window ``start in (t - max_length, t]``, which holds
    every active one; the few left after ``rounds`` rounds are drawn exactly.
    The two parts are chosen in proportion to their active counts.
    """
    out = np.full(times.size, -1, dtype=np.int64)
    if start.size == 0 or times.size == 0:
        return out
    is_open = np.isinf(end)
    open_idx = np.flatnonzero(is_open)
    open_idx = open_idx[np.argsort(start[open_idx], kind="stable")]
    fin_idx = np.flatnonzero(~is_open)
    fin_idx = fin_idx[np.argsort(start[fin_idx], kind="stable")]
    n_open = np.searchsorted(start[open_idx], times, side="right")
    n_fin = _count_active(start[fin_idx], end[fin_idx], times)
    total = n_open + n_fin
    pick_open = rng.random(times.size) * total < n_open
    sel = np.flatnonzero(pick_open)
    if sel.size:
        out[sel] = open_idx[rng.integers(0, n_open[sel])]
    sel = np.flatnonzero(~pick_open & (total > 0))
    if sel.size:
        out[sel] = fin_idx[_pick_finite(start[fin_idx], end[fin_idx], times[sel], rng, rounds)]
    return out


def _pick_finite(start: np.ndarray, end: np.ndarray, times: np.ndarray,
                 rng: np.random.Generator, rounds: int) -> np.ndarray:
    """Uniform active interval per time; ``start`` sorted, each time has one."""
    longest = float(np.max(end - start))
    hi = np.searchsorted(start, times, side="right")
    # a margin keeps rounding from cutting an active interval out of the window
    lo = np.searchsorted(start, times - longest - 1e-6 * (1.0 + longest), side="left")
    res = np.full(times.size, -1, dtype=np.int64)
    pending = np.arange(times.size)
    for _ in range(rounds):
        if pending.size == 0:
            break
        k = rng.integers(lo[pending], hi[pending])
        ok = end[k] > times[pending]
        res[pending[ok]] = k[ok]
        pending = pending[~ok]
    for i in pending:  # rare: exact draw among the window's active intervals
        cand = np.arange(lo[i], hi[i])
        cand = cand[end[cand] > times[i]]
        res[i] = cand[rng.integers(cand.size)]
    return res


def _choose_slots(wl: SyntheticWorkload, iv: dict, q_t: np.ndarray, q_actor: np.ndarray,
                  seed) -> tuple[np.ndarray, np.ndarray]:
    """The asked class and slot of each query.

    Class ``c`` is drawn with probability ``query_share_c * [n_c > 0] /
    sum(...)``, ``n_c`` the slots of class ``c`` askable by the query's actor
    at its time; then one of those slots uniformly. Returns class codes
    (``len(CLASS_NAMES)`` = "none") and global slot ids (-1 = none).
    """
    n_q = q_t.size
    codes = [CLASS_NAMES.index(c) for c in SLOT_CLASSES]
    weight = np.array([wl.classes.spec(c).query_share for c in SLOT_CLASSES])
    # the actors who ask, in order (one who asks nothing adds no count and
    # draws nothing); each one's visible slots made in turn, not all at
    # once: n_actors x slots booleans would outgrow the stream itself
    askers = np.unique(q_actor)

    def visible(a) -> np.ndarray:
        return ~iv["personal"] | (iv["owner"] == a)

    counts = np.zeros((n_q, len(codes)), dtype=np.int64)
    for a in askers:
        rows = np.flatnonzero(q_actor == a)
        seen = visible(a)
        for j, code in enumerate(codes):
            m = seen & (iv["cls"] == code)
            counts[rows, j] = _count_active(iv["start"][m], iv["end"][m], q_t[rows])
    w = np.where(counts > 0, weight[None, :], 0.0)
    cum = np.cumsum(w, axis=1)
    u = child(seed, "queries", "classes").random(n_q) * cum[:, -1]
    # the first class whose cumulative weight exceeds u (one of positive
    # weight); u may round up to the total (a subnormal share): the last
    # class of positive weight
    j = (u[:, None] >= cum).sum(axis=1)
    last = len(codes) - 1 - np.argmax(w[:, ::-1] > 0, axis=1)
    j = np.where(j == len(codes), last, j)
    answerable = cum[:, -1] > 0
    q_class = np.where(answerable, np.array(codes)[j], len(CLASS_NAMES))
    q_slot = np.full(n_q, -1, dtype=np.int64)
    rng = child(seed, "queries", "slots")
    for a in askers:
        seen = visible(a)
        for code in codes:
            rows = np.flatnonzero((q_actor == a) & (q_class == code))
            if rows.size == 0:
                continue
            m = np.flatnonzero(seen & (iv["cls"] == code))
            pick = _pick_active(iv["start"][m], iv["end"][m], q_t[rows], rng)
            q_slot[rows] = iv["slot"][m[pick]]
    return q_class.astype(np.int64), q_slot


def _query_topics(wl: SyntheticWorkload, notes: dict, q_slot: np.ndarray, seed) -> np.ndarray:
    """The asked slot's topic; a Zipf draw for a query with nothing to ask."""
    topic = np.empty(q_slot.size, dtype=np.int64)
    answerable = q_slot >= 0
    topic[answerable] = notes["slot_topic"][q_slot[answerable]]
    topic[~answerable] = child(seed, "queries", "unanswerable").choice(
        wl.n_topics, size=int((~answerable).sum()), p=wl.topic_popularity())
    return topic


# --------------------------------------------------------------------------
# Ground truth and accesses
# --------------------------------------------------------------------------


def _qrels(wl: SyntheticWorkload, notes: dict, q_t: np.ndarray, q_slot: np.ndarray) -> pd.DataFrame:
    """Graded gains of the asked slot's existing notes (see the module docstring).

    Queries are numbered in time order, so row ``i`` is ``query_id = i``.
    """
    on = np.flatnonzero(notes["slot"] >= 0)
    by_slot = on[np.argsort(notes["slot"][on], kind="stable")]  # by slot, then note_id
    ptr = np.searchsorted(notes["slot"][by_slot], np.arange(notes["n_slots"] + 1))
    asked = np.flatnonzero(q_slot >= 0)
    first = ptr[q_slot[asked]]
    size = ptr[q_slot[asked] + 1] - first
    query = np.repeat(asked, size)
    within = np.arange(query.size) - np.repeat(np.cumsum(size) - size, size)
    note = by_slot[np.repeat(first, size) + within]
    t = q_t[query]
    exists = notes["created"][note] <= t
    query, note, t = query[exists], note[exists], t[exists]
    valid = notes["valid_until"][note] > t
    gain = np.where(valid, wl.gain_valid, wl.gain_stale)
    # pairs run by query, then note_id: the last valid pair of a query is its newest valid note
    vi = np.flatnonzero(valid)
    if vi.size:
        last = vi[np.r_[query[vi][1:] != query[vi][:-1], True]]
        gain[last] = wl.gain_current
    keep = gain != 0
    return pd.DataFrame({"query_id": query[keep].astype(np.int64),
                         "note_id": note[keep].astype(np.int64), "gain": gain[keep]})


def _accesses(wl: SyntheticWorkload, notes: dict, t0: float, t1: float, seed):
    """Organic reads ``(t, note_id, actor code)``, or None when the rate is 0.

    Times are a Poisson process on ``[t0, t1]`` (all 0 in ``age_mode =
    "zero"``); each read picks uniformly a slot note valid at its time.
    """
    if wl.accesses_per_day <= 0:
        return None
    rng = child(seed, "accesses")
    t = np.sort(rng.uniform(t0, t1, int(rng.poisson(wl.accesses_per_day * (t1 - t0)))))
    if wl.age_mode == "zero":
        t = np.zeros_like(t)
    on = np.flatnonzero(notes["slot"] >= 0)
    pick = _pick_active(notes["created"][on], notes["valid_until"][on], t, rng)
    hit = pick >= 0
    t, note = t[hit], on[pick[hit]]
    reader = np.where(notes["personal"][note], notes["author"][note],
                      rng.integers(0, wl.n_actors, note.size))
    return t, note.astype(np.int64), reader.astype(np.int64)
