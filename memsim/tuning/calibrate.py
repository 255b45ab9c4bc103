"""Fit decay families to a real forgetting log (flash-card reviews).

A decay policy says how fast a note's weight falls with age. Human memory
offers the one real-world measurement of such a curve: in a spaced-repetition
log, each review says whether a card was still remembered after ``t`` days
without it. This module fits memsim's decay families to such a log by
maximum likelihood and reports how well each one predicts recall, so that an
experiment can use curves with measured, not guessed, parameters.

Data
----
The review log of the py-fsrs test suite (open-spaced-repetition/py-fsrs,
MIT licence; ``tests/review_logs_josh_*.csv``): one user's 12,580 pass/fail
reviews of 1,205 cards over 191 days. Columns ``card_id``, ``review_rating``
(FSRS grades: 1 Again = forgot, 2 Hard, 3 Good, 4 Easy = recalled; this log
holds 1 and 3, and a single 2), ``review_time`` (ISO 8601; without a zone:
UTC, and a file gives every time a zone or none) and
``review_duration`` (ms, unused). Several CSV files may be given as a
folder: cards are then told apart by file.

Observations
------------
For every review of a card after its first, in time order: ``t`` = days since
the card's previous review (of any outcome), ``n_prev`` = number of earlier
reviews of the card, ``n_success`` = how many of them were recalled, and
``y`` = 1 if recalled (rating >= 2), else 0.

Families (``p`` = predicted probability of recall)
--------------------------------------------------
=================== ============================================= ==============================
family              p(t)                                          memsim decay
=================== ============================================= ==============================
``constant``        ``p = mean(y)`` (no time dependence)           ``none`` (the baseline)
``exponential``     ``exp(-t / S)``                                ``half-life``, ``H = S ln 2``
``half-life-floor`` ``floor + (1 - floor) 0.5 ** (t / h)``         ``half-life-floor``
``power-law``       ``(1 + f t / S) ** -d``, ``f = 0.9**(-1/d) - 1`` ``power-law`` (FSRS-4.5+)
``ebbinghaus``      ``exp(-t / (s0 + s1 n_success))``              ``ebbinghaus`` (MemoryBank)
=================== ============================================= ==============================

Each family's curve is the recency of its memsim decay, computed by the
decay class itself (``clock = "last_access"``, the earlier successes as the
note's recalls): :mod:`memsim.policies.decay` is the one home of the
formulas, and a family here only maps its fitted parameters onto the
decay's. The power law is the FSRS form (Ye, Su and Cao, KDD 2022; FSRS-4.5 and later)
in which ``S`` is the stability, the delay at which ``p = 0.9``: with ``f``
tied to ``d`` this way, ``(f, S, d)`` are identifiable (a free ``f`` is not:
only ``f / S`` enters the curve). The Ebbinghaus family with a strength that
grows with each successful recall is MemoryBank's rule (Zhong et al., AAAI
2024), with the slope fitted instead of fixed at 1.

Fitting
-------
Maximum likelihood: minimise the mean Bernoulli log loss

.. math::

    L(\\theta) = -\\frac{1}{n} \\sum_i \\big[ y_i \\ln p_i + (1 - y_i) \\ln(1 - p_i) \\big]

with ``p`` clipped to ``[1e-6, 1 - 1e-6]`` (so that a review at ``t = 0``
cannot make the loss infinite), over log-transformed positive parameters
(and the logit of the floor) with ``scipy.optimize.minimize`` (L-BFGS-B,
box bounds; the gradient from central differences of the decay's curve),
from a fixed grid of starting points; the best optimum is kept.
Deterministic: no random starts.

Which fits are offered
----------------------
A fit is offered as a policy (a table of ``fitted_decay.toml``, and the
``best`` family) only if both hold:

* no parameter ends on a bound of its search box (a half-life of 1e-4 days,
  i.e. nine seconds, is the data pushing the family to a degenerate curve,
  not a measured half-life);
* its log loss is at least :data:`MIN_GAIN` (0.1%) below the constant
  baseline's: a curve that predicts recall no better than its mean rate says
  nothing about decay, whatever its parameters. A relative margin, not a
  likelihood-ratio test: with ten thousand reviews such a test calls a 0.05%
  gain significant, and a decay that moves the log loss that little would not
  change a ranking either.

The printed table marks every other family with the reason; when none
qualifies, ``best`` is ``constant`` and the TOML fragment offers no policy and
says why. Among the offered fits, ``best`` has the fewest parameters of
those within :data:`MIN_GAIN` of the lowest log loss (:func:`best_family`):
every figure is in-sample (the modelled reviews; nothing is held out), where
one more parameter never fits worse.

Metrics per family: log loss; AUC (the Mann-Whitney statistic from average
ranks, so a constant prediction has AUC exactly 0.5); calibration in ten
equal-width bins of ``p`` (count, mean prediction, observed recall rate) and
their expected calibration error ``ECE = sum_b n_b / n |mean p_b - recall_b|``.

Reading the fits on this log (11,375 reviews after a card's first; recall
rate 0.753): 43% of them come within 15 minutes of the previous review
(relearning steps, mostly after a lapse), where recall is ~0.72, not ~1, and
recall then *rises* with the delay up to two weeks (the scheduler only waits
long for well-known cards). Every family but the constant must start at
``p(0) = 1`` and pays for it:

=================== ======== ======= =========================================
family              log loss AUC     parameters
=================== ======== ======= =========================================
constant            0.5588   0.5000  p = 0.753
exponential         1.4252   0.4517  S = 11.9 d
half-life-floor     0.5585   0.4554  h = 1e-4 d (search bound), floor = 0.7525
power-law           0.5823   0.4517  S = 1e-4 d (search bound), d = 0.0198
ebbinghaus          0.9694   0.5537  s0 = 0.0021 d, s1 = 3.32 d per success
=================== ======== ======= =========================================

The half-life with a floor has the lowest log loss by collapsing onto its
floor (a constant, its half-life at the search bound): no family is offered.
With ``min_elapsed_days = 1`` (5,329 reviews, recall 0.792) the FSRS power
law is best and the only family offered (0.5047 against 0.5112 for the
constant; S = 0.32 d, d = 0.053: a slow, long-tailed decline; the half-life
with a floor again sits on its floor, at 0.5112), the exponential reaches S = 31 d (0.5671) and
Ebbinghaus s0 = 9.8 d, s1 = 4.2 d (0.5568, the best AUC, 0.579). On this
log, time since the last use alone predicts recall poorly; the use history
matters (FSRS grows stability with each review for that reason).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import optimize, stats

from memsim.core.errors import ConfigError, StreamError
from memsim.core.params import check_out_folder
from memsim.data.stream import check_csv_shape, csv_line_of, exact_int64

__all__ = [
    "FAMILIES",
    "MIN_GAIN",
    "FamilyFit",
    "CalibrationResult",
    "load_revlog",
    "review_table",
    "predict",
    "fit_family",
    "offer_flags",
    "log_loss",
    "auc",
    "calibration_bins",
    "calibrate_revlog",
    "format_calibration",
    "calibration_toml",
    "plot_calibration",
]

#: Families in report order: the baseline first.
FAMILIES = ("constant", "exponential", "half-life-floor", "power-law", "ebbinghaus")
#: Smallest relative drop of log loss below the constant baseline's for a fit
#: to be offered as a policy (module docstring, "Which fits are offered").
MIN_GAIN = 1e-3

_EPS = 1e-6
_REQUIRED = ("card_id", "review_rating", "review_time")


# ---------------------------------------------------------------------------
# Reading the log
# ---------------------------------------------------------------------------

def _csv_files(path: Path) -> list[Path]:
    if not path.exists():
        raise StreamError(f"review log not found: {path}")
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() == ".csv")
        if not files:
            raise StreamError(f"{path}: no .csv review log in this folder")
        return files
    return [path]


def _cell(raw: pd.Series, row: int) -> object:
    """A cell as a plain Python value, for messages (``1.7``, not ``np.float64(1.7)``)."""
    value = raw.iloc[row]
    return value.item() if isinstance(value, np.generic) else value


def _row(path: Path, row: int) -> str:
    """``row 3 (line 5)``: a data row (0-based) and the file line it starts on."""
    line = csv_line_of(path, row)
    return f"row {row}" + ("" if line is None else f" (line {line})")


def _read_one(path: Path) -> pd.DataFrame:
    # a row with more fields than the header (a trailing comma) would shift
    # pandas' columns into the index: the values then fail under wrong names
    check_csv_shape(path)
    try:
        frame = pd.read_csv(path, index_col=False)
    except (OSError, ValueError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise StreamError(f"{path}: cannot be read as CSV: {exc}") from exc
    missing = [c for c in _REQUIRED if c not in frame.columns]
    if missing:
        raise StreamError(f"{path}: missing column {missing[0]!r} (a review log needs "
                          f"{', '.join(_REQUIRED)})")
    if frame.empty:
        raise StreamError(f"{path}: no reviews")
    card, bad, inexact = exact_int64(frame["card_id"])
    bad |= inexact
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise StreamError(f"{path}: column 'card_id': {_row(path, row)}: expected an integer "
                          f"id (a float only when integral and below 2**53 in magnitude, an "
                          f"int within int64), got {_cell(frame['card_id'], row)!r}")
    rating, bad, inexact = exact_int64(frame["review_rating"])
    bad |= inexact
    bad = bad | ~np.isin(rating, [1, 2, 3, 4])
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise StreamError(f"{path}: column 'review_rating': {_row(path, row)}: expected an "
                          f"FSRS grade 1, 2, 3 or 4, got {_cell(frame['review_rating'], row)!r}")
    when = pd.to_datetime(frame["review_time"], format="ISO8601", utc=True, errors="coerce")
    bad = when.isna().to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise StreamError(f"{path}: column 'review_time': {_row(path, row)}: expected an "
                          f"ISO 8601 time, got {_cell(frame['review_time'], row)!r}")
    # a time without a zone is UTC; beside times with one it is more likely
    # local, and the delays between them would be off by the offset
    zoned = frame["review_time"].astype(str).str.strip().str.slice(10).str.contains(
        r"(?:[Zz]|[+-]\d\d(?::?\d\d)?)$", regex=True).to_numpy()  # (after the date)
    if zoned.any() and not zoned.all():
        row = int(np.flatnonzero(~zoned)[0])
        raise StreamError(f"{path}: column 'review_time': {_row(path, row)}: "
                          f"{_cell(frame['review_time'], row)!r} has no time zone, and "
                          f"{_row(path, int(np.flatnonzero(zoned)[0]))} has one: give every "
                          "time a zone (or none: then all are UTC)")
    # two reviews of a card at one instant: a row written twice, or an order
    # the log cannot give (each would be a review at delay 0 after the
    # other, and the file's order would decide which is which)
    stamp = when.to_numpy()
    twice = np.flatnonzero(pd.DataFrame({"card": card, "when": stamp})
                           .duplicated(keep=False).to_numpy())
    if len(twice):
        first = int(twice[0])
        second = int(twice[(card[twice] == card[first]) & (stamp[twice] == stamp[first])][1])
        raise StreamError(f"{path}: {_row(path, first)} and {_row(path, second)}: card "
                          f"{int(card[first])} is reviewed twice at "
                          f"{when.iloc[first].isoformat()} (a row written "
                          "twice? two reviews of one card need two times)")
    return pd.DataFrame({"source": path.name, "card_id": card, "rating": rating,
                         "review_time": when})


def load_revlog(path_or_folder: str | os.PathLike) -> pd.DataFrame:
    """Read one review-log CSV, or every ``*.csv`` of a folder.

    Returns
    -------
    DataFrame
        ``source`` (file name), ``card_id``, ``rating``, ``review_time``
        (UTC timestamps), in file and row order.

    Raises
    ------
    StreamError
        Missing file, unreadable CSV, missing column, or a bad value (the
        message names the file, the column and the first bad row).
    """
    return pd.concat([_read_one(p) for p in _csv_files(Path(path_or_folder))],
                     ignore_index=True)


def review_table(log: pd.DataFrame) -> pd.DataFrame:
    """The modelled observations: every review after a card's first.

    Parameters
    ----------
    log : DataFrame
        As returned by :func:`load_revlog`.

    Returns
    -------
    DataFrame
        ``source``, ``card_id``, ``review_time``, ``t`` (days since the
        card's previous review), ``n_prev`` (earlier reviews of the card),
        ``n_success`` (earlier reviews recalled), ``y`` (1 recalled, 0
        forgot), sorted by card and time.
    """
    d = log.sort_values(["source", "card_id", "review_time"], kind="stable").reset_index(drop=True)
    y = (d["rating"].to_numpy() >= 2).astype(np.int64)
    card = d.groupby(["source", "card_id"], sort=False)
    n_prev = card.cumcount().to_numpy()
    # successes strictly before this review: cumulative sum minus this one
    n_success = (pd.Series(y).groupby([d["source"], d["card_id"]], sort=False).cumsum()
                 .to_numpy() - y)
    t = card["review_time"].diff().dt.total_seconds().to_numpy() / 86400.0
    out = pd.DataFrame({"source": d["source"], "card_id": d["card_id"],
                        "review_time": d["review_time"], "t": t, "n_prev": n_prev,
                        "n_success": n_success, "y": y})
    return out.loc[n_prev > 0].reset_index(drop=True)


# ---------------------------------------------------------------------------
# Families
# ---------------------------------------------------------------------------
#
# Each family's curve is its decay class's own recency (memsim.policies.decay):
# a family says which registered decay it is and how the decay's parameters
# follow from the fitted ones, never the formula again.


@dataclass(frozen=True)
class _Family:
    """A fitted family: the registered decay whose recency is its curve
    (``kind``, with ``clock = "last_access"``; the fit's ``n_success`` is
    the decay's ``recalls``), how the decay's parameters follow from the
    fitted ones (``to_decay``), and how the fit searches them: unconstrained
    coordinates ``x`` (``to_params``), box bounds on ``x`` and a grid of
    starting points."""

    kind: str
    names: tuple[str, ...]
    to_params: Callable[[np.ndarray], dict]
    to_decay: Callable[[dict], dict]
    bounds: tuple[tuple[float, float], ...]
    starts: tuple[tuple[float, ...], ...]

    def decay(self, params: dict):
        """The decay component of the fitted parameters ``params``."""
        from memsim.policies import REGISTRY  # filled on import of memsim.policies

        return REGISTRY["decay"][self.kind](**self.to_decay(params), clock="last_access")


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def _expit(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


_LOG_DAYS = (math.log(1e-4), math.log(1e5))  # 9 seconds .. 270 years
_STARTS_DAYS = (0.01, 0.1, 1.0, 10.0, 100.0)
_FAMILIES: dict[str, _Family] = {
    "exponential": _Family(
        "half-life", ("S",), lambda x: {"S": math.exp(x[0])},
        lambda p: {"half_life_days": p["S"] * math.log(2.0)}, (_LOG_DAYS,),
        tuple((math.log(s),) for s in _STARTS_DAYS)),
    "half-life-floor": _Family(
        "half-life-floor", ("half_life", "floor"),
        lambda x: {"half_life": math.exp(x[0]), "floor": _expit(x[1])},
        lambda p: {"half_life_days": p["half_life"], "floor": p["floor"]},
        (_LOG_DAYS, (-12.0, 12.0)),
        tuple((math.log(h), _logit(f)) for h in _STARTS_DAYS for f in (0.2, 0.5, 0.8))),
    "power-law": _Family(
        "power-law", ("S", "d"), lambda x: {"S": math.exp(x[0]), "d": math.exp(x[1])},
        lambda p: {"stability_days": p["S"], "decay": p["d"]},
        (_LOG_DAYS, (math.log(1e-3), math.log(1e2))),
        tuple((math.log(s), math.log(d)) for s in _STARTS_DAYS for d in (0.1, 0.5, 2.0))),
    "ebbinghaus": _Family(
        "ebbinghaus", ("s0", "s1"), lambda x: {"s0": math.exp(x[0]), "s1": math.exp(x[1])},
        lambda p: {"strength_days": p["s0"], "strength_per_recall": p["s1"]},
        # s1 >= 0: exp(-25) days per success is 0 for every purpose
        (_LOG_DAYS, (-25.0, math.log(1e5))),
        tuple((math.log(s), math.log(k)) for s in _STARTS_DAYS for k in (0.1, 1.0, 10.0))),
}
#: Which families read the number of earlier successes (as the decay's recalls).
_NEEDS_SUCCESSES = ("ebbinghaus",)


def _reviews_context(t: np.ndarray, n_success: np.ndarray | None):
    """A scoring context of the reviews: one note per review, seen at age
    ``t`` since its last use, with ``n_success`` recalls."""
    from memsim.policies import ArrayContext

    recalls = None if n_success is None else np.asarray(n_success, dtype=np.int64)
    return ArrayContext(t=0.0, created_at=-np.asarray(t, dtype=np.float64), recalls=recalls)


def _curve(family: _Family, params: dict, t: np.ndarray, ctx) -> np.ndarray:
    """The family's recall probability: its decay's recency at the delays."""
    return np.asarray(family.decay(params).recency(t[None, :], ctx), dtype=np.float64)[0]


def predict(family: str, params: dict, t: np.ndarray, n_success: np.ndarray | None = None
            ) -> np.ndarray:
    """Recall probability of a family: its decay's recency (module docstring).

    Parameters
    ----------
    family : str
        One of :data:`FAMILIES`.
    params : dict
        ``constant``: ``p``; ``exponential``: ``S``; ``half-life-floor``:
        ``half_life``, ``floor``; ``power-law``: ``S``, ``d``;
        ``ebbinghaus``: ``s0``, ``s1``.
    t : ndarray
        Days since the previous review (>= 0).
    n_success : ndarray, optional
        Earlier successful reviews (``ebbinghaus`` only).
    """
    t = np.maximum(np.asarray(t, dtype=np.float64), 0.0)
    if family == "constant":
        return np.full(t.shape, float(params["p"]))
    if family not in _FAMILIES:
        raise ConfigError(f"Unknown decay family {family!r}; known: {', '.join(FAMILIES)}")
    if family in _NEEDS_SUCCESSES and n_success is None:
        raise ConfigError(f"predict: the {family!r} family needs n_success")
    spec = _FAMILIES[family]
    return _curve(spec, params, t, _reviews_context(t, n_success))


#: Step (in the fit's coordinates: relative, for a log-scaled parameter) of
#: the central differences that give the curve's derivatives.
_STEP = 1e-6


def _value_and_jac(spec: _Family, x: np.ndarray, t: np.ndarray, ctx
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The curve at ``x`` and its Jacobian ``dp/dx`` by central differences
    (the decay's recency is the only formula; its derivatives are not kept
    a second time)."""
    p = _curve(spec, spec.to_params(x), t, ctx)
    cols = []
    for k in range(len(x)):
        e = np.zeros(len(x))
        e[k] = _STEP
        cols.append((_curve(spec, spec.to_params(x + e), t, ctx)
                     - _curve(spec, spec.to_params(x - e), t, ctx)) / (2.0 * _STEP))
    return p, np.column_stack(cols)


#: Optimiser runs per family: from the best points of the start grid.
_N_RUNS = 3


def _loss_and_grad(spec: _Family, x: np.ndarray, t, ctx, y) -> tuple[float, np.ndarray]:
    """Mean log loss and its gradient in ``x`` (0 where ``p`` is clipped)."""
    p, jac = _value_and_jac(spec, x, t, ctx)
    inside = (p > _EPS) & (p < 1.0 - _EPS)
    pc = np.clip(p, _EPS, 1.0 - _EPS)
    n = len(y)
    loss = -float(np.sum(y * np.log(pc) + (1.0 - y) * np.log1p(-pc))) / n
    dl_dp = np.where(inside, (pc - y) / (pc * (1.0 - pc)), 0.0) / n
    return loss, dl_dp @ jac


def log_loss(y: np.ndarray, p: np.ndarray) -> float:
    """Mean Bernoulli log loss (natural log), ``p`` clipped to ``[1e-6, 1 - 1e-6]``."""
    p = np.clip(np.asarray(p, dtype=np.float64), _EPS, 1.0 - _EPS)
    y = np.asarray(y, dtype=np.float64)
    return float(-np.mean(y * np.log(p) + (1.0 - y) * np.log1p(-p)))


def auc(y: np.ndarray, p: np.ndarray) -> float:
    """Area under the ROC curve by the Mann-Whitney statistic.

    ``AUC = (R_+ - n_+ (n_+ + 1) / 2) / (n_+ n_-)`` with ``R_+`` the sum of
    the average ranks of the positives' predictions; ties count one half, so
    a constant prediction gives exactly 0.5. NaN if a class is absent.
    """
    y = np.asarray(y).astype(bool)
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = stats.rankdata(np.asarray(p, dtype=np.float64))
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def calibration_bins(y: np.ndarray, p: np.ndarray, n_bins: int = 10) -> pd.DataFrame:
    """Reliability table: equal-width bins of the prediction on [0, 1].

    Returns
    -------
    DataFrame
        ``bin_low``, ``bin_high``, ``n``, ``mean_predicted``, ``observed``
        (recall rate), for the non-empty bins.
    """
    p = np.asarray(p, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    b = np.minimum((p * n_bins).astype(np.int64), n_bins - 1)
    n = np.bincount(b, minlength=n_bins)
    sp = np.bincount(b, weights=p, minlength=n_bins)
    sy = np.bincount(b, weights=y, minlength=n_bins)
    keep = n > 0
    edges = np.arange(n_bins + 1) / n_bins
    return pd.DataFrame({"bin_low": edges[:-1][keep], "bin_high": edges[1:][keep],
                         "n": n[keep], "mean_predicted": sp[keep] / n[keep],
                         "observed": sy[keep] / n[keep]})


@dataclass(frozen=True, eq=False)
class FamilyFit:
    """One family fitted to the reviews.

    Attributes
    ----------
    family : str
    params : dict
        Fitted parameters (see :func:`predict`).
    log_loss, auc, ece : float
        On the fitted reviews.
    n_params : int
        Free parameters (1 for ``constant``: its mean).
    bins : DataFrame
        :func:`calibration_bins` of the fit.
    converged : bool
        The optimiser's success flag at the kept optimum.
    at_bound : tuple of str
        Parameters that ended on a bound of the search box (e.g. a
        half-life of 1e-4 days): the data push the family to a degenerate
        curve, read its fit with care.
    """

    family: str
    params: dict
    log_loss: float
    auc: float
    ece: float
    n_params: int
    bins: pd.DataFrame
    converged: bool = True
    at_bound: tuple = ()


def _metrics(family: str, params: dict, t, n_success, y, converged: bool,
             n_params: int, at_bound: tuple = ()) -> FamilyFit:
    p = predict(family, params, t, n_success)
    bins = calibration_bins(y, p)
    ece = float((bins["n"] * (bins["mean_predicted"] - bins["observed"]).abs()).sum() / len(y))
    return FamilyFit(family, params, log_loss(y, p), auc(y, p), ece, n_params, bins, converged,
                     at_bound)


def fit_family(family: str, t: np.ndarray, y: np.ndarray,
               n_success: np.ndarray | None = None) -> FamilyFit:
    """Fit one family by maximum likelihood (see the module docstring).

    Parameters
    ----------
    family : str
        One of :data:`FAMILIES`.
    t : ndarray
        Days since the previous review.
    y : ndarray
        1 recalled, 0 forgot.
    n_success : ndarray, optional
        Earlier successful reviews (needed by ``ebbinghaus``).

    Returns
    -------
    FamilyFit
    """
    t = np.asarray(t, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(t) == 0 or len(t) != len(y):
        raise ConfigError(f"fit_family: need as many outcomes as delays (got {len(t)} and "
                          f"{len(y)}), at least one")
    if not np.all(np.isfinite(t)) or np.any(t < 0):
        raise ConfigError("fit_family: delays must be finite and >= 0")
    if family == "constant":
        # the maximum-likelihood constant is the mean
        return _metrics(family, {"p": float(y.mean())}, t, n_success, y, True, 1)
    if family not in _FAMILIES:
        raise ConfigError(f"Unknown decay family {family!r}; known: {', '.join(FAMILIES)}")
    if family in _NEEDS_SUCCESSES and n_success is None:
        raise ConfigError(f"fit_family: the {family!r} family needs n_success")
    spec = _FAMILIES[family]
    ns = np.zeros(len(t), dtype=np.int64) if n_success is None else np.asarray(n_success)
    ctx = _reviews_context(np.maximum(t, 0.0), ns)

    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        return _loss_and_grad(spec, x, t, ctx, y)

    # Local optima exist (e.g. a short and a long exponential): score the
    # start grid, then optimise from its best few points, in grid order.
    grid = np.array(spec.starts, dtype=np.float64)
    start_loss = np.array([fun(x)[0] for x in grid])
    best = None
    for i in np.argsort(start_loss, kind="stable")[:_N_RUNS]:
        res = optimize.minimize(fun, grid[i], jac=True, method="L-BFGS-B", bounds=spec.bounds)
        # keep the first of equal optima, so the result does not depend on
        # rounding noise between starts
        if best is None or res.fun < best.fun - 1e-12:
            best = res
    params = {k: float(v) for k, v in spec.to_params(best.x).items()}
    return _metrics(family, params, t, ns, y, bool(best.success), len(spec.names),
                    _at_bound(spec, best.x, best.fun, lambda x: fun(x)[0]))


def _at_bound(spec: _Family, x: np.ndarray, loss: float, fun: Callable[[np.ndarray], float]
              ) -> tuple[str, ...]:
    """The parameters at a bound of their search box: there, or where the
    loss at a bound (the others kept) is no higher than the fit's, so the
    optimiser stopped short of a bound the likelihood does not move away
    from (a strength falling towards 0, a flat direction)."""
    at = []
    for k, (name, (lo, hi)) in enumerate(zip(spec.names, spec.bounds)):
        if min(x[k] - lo, hi - x[k]) <= 1e-6 * max(1.0, abs(x[k])):
            at.append(name)
            continue
        for edge in (lo, hi):
            if edge is None or not np.isfinite(edge):
                continue
            moved = x.copy()
            moved[k] = edge
            if fun(moved) <= loss:
                at.append(name)
                break
    return tuple(at)


def best_family(fits: dict, flags: dict[str, str], names: Sequence[str]) -> str:
    """The family to use: among those offered (``flags`` ""), the fewest
    parameters among the fits whose log loss is within :data:`MIN_GAIN`
    (relative) of the lowest, then the lowest log loss, then the order of
    ``names``; ``constant`` when none is offered. An extra parameter must
    earn its place by the margin a family needs over the constant: the
    figures are in-sample, and a fit with one more parameter is never worse
    there."""
    offered = [f for f in names if flags.get(f) == ""]
    if not offered:
        return "constant"
    lowest = min(fits[f].log_loss for f in offered)
    near = [f for f in offered if fits[f].log_loss <= lowest + MIN_GAIN * abs(lowest)]
    return min(near, key=lambda f: (fits[f].n_params, fits[f].log_loss, names.index(f)))


def offer_flags(fits: dict) -> dict[str, str]:
    """Why each fitted family is not offered as a policy ("" when it is).

    Parameters
    ----------
    fits : dict of str to FamilyFit
        With a ``constant`` fit (the baseline).

    Returns
    -------
    dict of str to str
        ``"baseline"`` for ``constant``; for another family the reasons it
        is not offered, joined by "; " (a parameter at a bound of its search
        box; log loss not at least :data:`MIN_GAIN` below the constant's),
        or "" when it is offered.
    """
    base = fits["constant"].log_loss
    out = {}
    for family, fit in fits.items():
        if family == "constant":
            out[family] = "baseline"
            continue
        why = []
        if fit.at_bound:
            why.append(f"{', '.join(fit.at_bound)} at the search bound")
        change = (fit.log_loss - base) / base if base > 0 else 0.0
        if not change <= -MIN_GAIN:  # NaN is no gain
            word = "worse than" if change >= MIN_GAIN else "no better than"
            why.append(f"{word} the constant (log loss {100 * change:+.2f}%)")
        out[family] = "; ".join(why)
    return out


# ---------------------------------------------------------------------------
# The calibration run
# ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class CalibrationResult:
    """Fits of every family to one review log.

    Attributes
    ----------
    source : str
        The file or folder read.
    reviews : DataFrame
        The modelled observations (:func:`review_table`).
    fits : dict of str to FamilyFit
        In :data:`FAMILIES` order.
    summary : DataFrame
        One row per family: ``family``, ``log_loss``, ``auc``, ``ece``,
        ``n_params``, ``converged``, ``at_bound``, ``offered`` (bool),
        ``flag`` (:func:`offer_flags`: ``baseline`` for the constant, else
        why the family is not offered, "" when it is),
        ``params`` (text).
    best : str
        The offered family with the lowest log loss; ``constant`` when no
        family is offered (module docstring, "Which fits are offered").
    toml : str
        The experiment fragment (:func:`calibration_toml`).
    stats : dict
        ``reviews_total``, ``cards``, ``span_days``, ``reviews``,
        ``recall_rate``, ``min_elapsed_days``.
    files : dict of str to Path
        What was written to ``out_dir`` (``plot``, ``toml``, ``summary``,
        ``bins``); empty without ``out_dir``.
    """

    source: str
    reviews: pd.DataFrame
    fits: dict
    summary: pd.DataFrame
    best: str
    toml: str
    stats: dict
    files: dict = field(default_factory=dict)

    @property
    def bins(self) -> pd.DataFrame:
        """Every family's calibration bins, with a ``family`` column."""
        return pd.concat([f.bins.assign(family=name) for name, f in self.fits.items()],
                         ignore_index=True)


def _fmt_params(params: dict) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in params.items())


def calibrate_revlog(path_or_folder: str | os.PathLike, out_dir: str | os.PathLike | None = None,
                     *, min_elapsed_days: float = 0.0,
                     families: Sequence[str] = FAMILIES) -> CalibrationResult:
    """Fit every decay family to a review log and report how each predicts recall.

    Parameters
    ----------
    path_or_folder : str or PathLike
        A review-log CSV or a folder of them (see the module docstring).
    out_dir : str or PathLike, optional
        Where to write ``calibration.png`` (reliability diagram and recall
        against delay), ``fitted_decay.toml`` (the experiment fragment),
        ``calibration_summary.csv`` and ``calibration_bins.csv``; created if
        needed. Nothing is written when None.
    min_elapsed_days : float
        Model only reviews at least this long after the previous one (0:
        every review after the first).
    families : sequence of str
        Families to fit; ``constant`` is always included as the baseline.

    Returns
    -------
    CalibrationResult

    Raises
    ------
    StreamError
        Unreadable or malformed log (the message names the file), or no
        review left to model.
    ConfigError
        Unknown family, a bad ``min_elapsed_days``, or an ``out_dir`` that
        is a file or lies under one, or is the folder of the logs (refused
        before the log is read).
    """
    if not (isinstance(min_elapsed_days, (int, float)) and not isinstance(min_elapsed_days, bool)
            and math.isfinite(min_elapsed_days) and min_elapsed_days >= 0):
        raise ConfigError(f"The 'min_elapsed_days' parameter of calibrate_revlog must be a "
                          f"finite number >= 0. Got {min_elapsed_days!r} instead.")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise ConfigError(f"Unknown decay family {unknown[0]!r}; known: {', '.join(FAMILIES)}")
    if out_dir is not None:
        _check_out_dir(Path(out_dir))  # before the fit, whose work would be lost
        src = Path(path_or_folder)
        if src.is_dir() and Path(out_dir).resolve() == src.resolve():
            # its CSV outputs would be read as review logs the next time
            raise ConfigError(f"--out {out_dir}: the folder of the review logs; give another "
                              "(the outputs are CSV files too)")
    names = [f for f in FAMILIES if f == "constant" or f in families]
    log = load_revlog(path_or_folder)
    reviews = review_table(log)
    reviews = reviews.loc[reviews["t"] >= min_elapsed_days].reset_index(drop=True)
    if reviews.empty:
        raise StreamError(f"{path_or_folder}: no review to model (a card needs two reviews, "
                          f"at least {min_elapsed_days} days apart)")
    if reviews["y"].nunique() < 2:
        # every fit is then perfect (log loss 0, AUC undefined): nothing is measured
        kind = "recalled" if bool(reviews["y"].iloc[0]) else "forgotten"
        raise StreamError(f"{path_or_folder}: every one of the {len(reviews)} review(s) to "
                          f"model was {kind}: a decay needs both outcomes to be fitted")
    t = reviews["t"].to_numpy()
    y = reviews["y"].to_numpy()
    ns = reviews["n_success"].to_numpy()
    fits = {f: fit_family(f, t, y, ns) for f in names}
    flags = offer_flags(fits)
    summary = pd.DataFrame([{"family": f, "log_loss": r.log_loss, "auc": r.auc, "ece": r.ece,
                             "n_params": r.n_params, "converged": r.converged,
                             "at_bound": ",".join(r.at_bound), "offered": flags[f] == "",
                             "flag": flags[f],
                             "params": _fmt_params(r.params)} for f, r in fits.items()])
    best = best_family(fits, flags, names)
    span = (log["review_time"].max() - log["review_time"].min()).total_seconds() / 86400.0
    st = {"reviews_total": int(len(log)),
          "cards": int(log[["source", "card_id"]].drop_duplicates().shape[0]),
          "span_days": float(span), "reviews": int(len(reviews)),
          "recall_rate": float(y.mean()), "min_elapsed_days": float(min_elapsed_days)}
    source = str(path_or_folder)
    toml = calibration_toml(fits, source=Path(source).name, stats=st, best=best)
    result = CalibrationResult(source, reviews, fits, summary, best, toml, st)
    if out_dir is not None:
        result = dataclasses.replace(result, files=_write_outputs(result, Path(out_dir)))
    return result


# ---------------------------------------------------------------------------
# Outputs: TOML fragment, text, figure
# ---------------------------------------------------------------------------

def _toml_float(x: float) -> str:
    # six significant digits, always a TOML float ("20.0", "1e-05")
    return repr(float(f"{x:.6g}"))


def _decay_table(family: str, params: dict) -> tuple[str, dict] | None:
    """memsim decay kind and parameters equivalent to a fitted family."""
    spec = _FAMILIES.get(family)
    return None if spec is None else (spec.kind, spec.to_decay(params))


def _registered(kind: str, keys: Sequence[str]) -> bool:
    """Is ``kind`` a registered decay taking these parameters (and ``clock``)?"""
    from memsim.policies import base  # registry is filled on import of memsim.policies

    cls = base.REGISTRY.get("decay", {}).get(kind)
    if cls is None:
        return False
    names = {f.name for f in dataclasses.fields(cls)}
    return set(keys) <= names and "clock" in names


def calibration_toml(fits: dict, *, source: str = "", stats: dict | None = None,
                     best: str | None = None) -> str:
    """An experiment fragment with one ``[policies.fitted-<family>]`` table per
    offered fit (:func:`offer_flags`).

    Each table has ``ranker = "product"`` (score = similarity x recency) and
    the fitted ``decay`` with ``clock = "last_access"`` (the fit's ``t``
    counts from the previous review, i.e. the last use). Families whose
    memsim kind is not registered (or not with these parameters) are written
    as ``#`` comments; the constant baseline is a comment (it is
    ``decay = "none"``). A fit that is not offered (a parameter at its
    search bound, or no better than the constant) is a comment line saying
    why, without a table; when no fit is offered, a comment near the top says
    so.
    """
    flags = offer_flags(fits)
    lines = [f"# Decay curves fitted by memsim.tuning.calibrate to {source or 'a review log'}",
             "# (maximum likelihood on recall after t days; t = days since the previous review)."]
    if stats:
        lines.append(f"# {stats['reviews']:,} reviews modelled ({stats['reviews_total']:,} in the "
                     f"log, {stats['cards']:,} cards); recall rate {stats['recall_rate']:.3f}.")
    lines.append(f"# A fit is offered only if it lowers the constant's log loss by at least "
                 f"{100 * MIN_GAIN:.1f}%")
    lines.append("# with every parameter inside its search box.")
    if not any(v == "" for v in flags.values()):
        lines += ["# No fitted policy is offered: no family qualifies (reasons below). Recall "
                  "does not fall",
                  "# measurably with the time since the previous review here; keep "
                  "decay = \"none\" or fit other data."]
    else:
        if best and flags.get(best) == "":
            lines.append(f"# Best by log loss: {best} ({fits[best].log_loss:.4f}).")
        lines.append("# Paste the tables into an experiment's policies.")
    for family, fit in fits.items():
        head = (f"# {family}: {_fmt_params(fit.params)}; log loss {fit.log_loss:.4f}, "
                f"AUC {fit.auc:.3f}" + (f" (at the search bound: {', '.join(fit.at_bound)})"
                                        if fit.at_bound else ""))
        spec = _decay_table(family, fit.params)
        lines += ["", head]
        if spec is None:
            lines.append("# (no decay: the same ranking as decay = \"none\")")
            continue
        if flags[family]:
            lines.append(f"# not offered: {flags[family]}")
            continue
        kind, values = spec
        inline = ", ".join([f'kind = "{kind}"']
                           + [f"{k} = {_toml_float(v)}" for k, v in values.items()]
                           + ['clock = "last_access"'])
        table = [f"[policies.fitted-{family}]", 'ranker = "product"', f"decay = {{ {inline} }}"]
        if family == "ebbinghaus":
            lines.append("# memsim counts recalls as uses of a note; the fit counted "
                         "successful reviews.")
        if _registered(kind, list(values)):
            lines += table
        else:
            lines.append(f"# decay kind {kind!r} is not registered in this memsim:")
            lines += ["# " + s for s in table]
    return "\n".join(lines) + "\n"


def format_calibration(result: CalibrationResult) -> str:
    """A plain-text report: data, one line per family, the best family, files."""
    st = result.stats
    out = [f"review-log calibration: {result.source}",
           f"{st['reviews_total']:,} reviews of {st['cards']:,} cards over {st['span_days']:.1f} "
           f"days; {st['reviews']:,} modelled (after each card's first"
           + (f", t >= {st['min_elapsed_days']:g} d" if st["min_elapsed_days"] else "")
           + f"), recall rate {st['recall_rate']:.3f}",
           "in-sample figures: each family fitted and scored on these reviews (nothing held "
           "out)",
           "",
           f"{'family':<16} {'log loss':>9} {'AUC':>7} {'ECE':>7}  {'offered':<8}  parameters"]
    flags = offer_flags(result.fits)
    for f, r in result.fits.items():
        offered = "baseline" if f == "constant" else ("yes" if flags[f] == "" else "NO")
        out.append(f"{f:<16} {r.log_loss:>9.4f} {r.auc:>7.4f} {r.ece:>7.4f}  {offered:<8}  "
                   f"{_fmt_params(r.params)}" + ("" if r.converged else "  (not converged)"))
    refused = {f: why for f, why in flags.items() if f != "constant" and why}
    if refused:
        out += ["", f"not offered as a policy (a fit must lower the constant's log loss by at "
                    f"least {100 * MIN_GAIN:.1f}%, every parameter inside its search box):"]
        out += [f"  {f}: {why}" for f, why in refused.items()]
    base = result.fits["constant"].log_loss
    best = result.fits[result.best]
    if result.best != "constant":
        out += ["", f"best: {result.best} (log loss {best.log_loss:.4f}, "
                    f"{100 * (best.log_loss - base) / base:+.1f}% vs constant)"]
    else:
        out += ["", "best: constant (no decay family qualifies: no fitted policy is offered)"]
        if not result.stats.get("min_elapsed_days"):
            out.append("  (same-session re-drills can hide a decline: try "
                       "--min-elapsed-days 1)")
    for k, p in result.files.items():
        out.append(f"{k}: {p}")
    return "\n".join(out)


def _delay_curve(result: CalibrationResult) -> pd.DataFrame:
    """Observed and predicted recall in log-spaced bins of the delay."""
    r = result.reviews
    t = r["t"].to_numpy()
    edges = np.array([0, 1 / 96, 1 / 24, 0.25, 1, 2, 4, 8, 16, 32, 64, np.inf])
    b = np.digitize(t, edges[1:-1])
    frame = pd.DataFrame({"bin": b, "t": t, "y": r["y"].to_numpy()})
    for f, fit in result.fits.items():
        frame[f] = predict(f, fit.params, t, r["n_success"].to_numpy())
    g = frame.groupby("bin")
    out = g.mean()
    out["n"] = g.size()
    return out[out["n"] > 0]


def plot_calibration(result: CalibrationResult):
    """Figure: reliability diagram (left) and recall against delay (right).

    Data preparation is :attr:`CalibrationResult.bins` and an internal
    delay-binned table; drawing uses an Agg canvas (no pyplot, no global
    backend change).

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fig = Figure(figsize=(11, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot([0, 1], [0, 1], color="0.6", lw=1, ls="--", label="perfect")
    for f, fit in result.fits.items():
        b = fit.bins
        ax1.plot(b["mean_predicted"], b["observed"], marker="o", ms=3,
                 label=f"{f} (LL {fit.log_loss:.3f}, AUC {fit.auc:.2f})")
    ax1.set(xlabel="predicted recall", ylabel="observed recall", xlim=(0, 1), ylim=(0, 1),
            title="Calibration (10 bins of the prediction)")
    ax1.legend(fontsize=7, loc="upper left")
    curve = _delay_curve(result)
    ax2.scatter(curve["t"], curve["y"], s=np.sqrt(curve["n"]) * 3, color="k", zorder=3,
                label="observed (size ~ sqrt n)")
    for f in result.fits:
        ax2.plot(curve["t"], curve[f], marker=".", label=f)
    ax2.set_xscale("log")
    # ticks at 1, 2 and 5 of each decade, as plain numbers: the default
    # labels the minor ticks of a range under a decade on top of each other
    ax2.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax2.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax2.xaxis.set_minor_formatter(NullFormatter())
    ax2.set(xlabel="days since the previous review", ylabel="recall rate", ylim=(0, 1.02),
            title="Recall against delay")
    ax2.legend(fontsize=7, loc="lower left")
    return fig


def _check_out_dir(out_dir: Path) -> None:
    """Refuse an ``out_dir`` that is a file or lies under one (ConfigError
    naming ``--out`` and the file)."""
    check_out_folder(out_dir, "--out")


def _write_outputs(result: CalibrationResult, out_dir: Path) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {"plot": out_dir / "calibration.png", "toml": out_dir / "fitted_decay.toml",
             "summary": out_dir / "calibration_summary.csv",
             "bins": out_dir / "calibration_bins.csv"}
    # each file is written to a temporary name and renamed into place
    def publish(path: Path, write: Callable[[Path], None]) -> None:
        tmp = path.with_name(f".{path.name}.tmp")
        write(tmp)
        os.replace(tmp, path)

    publish(files["plot"], lambda p: plot_calibration(result).savefig(p, dpi=110, format="png"))
    publish(files["toml"], lambda p: p.write_text(result.toml, encoding="utf-8"))
    publish(files["summary"], lambda p: result.summary.to_csv(p, index=False))
    publish(files["bins"], lambda p: result.bins.to_csv(p, index=False))
    return files
