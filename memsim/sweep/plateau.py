"""How sure a sweep is of its best value: the plateau and the edge warning.

A sweep's best trial is the argmax of noisy values: other parameter values
whose objective lies within the replicate noise of the best are as good, as
far as the sweep can tell. :func:`plateau_table` gives, for each objective
and each swept parameter, the best value, the **plateau** (the parameter
values of the trials not significantly worse than the best, from a paired
bootstrap over replicates) and an **edge warning** where the true optimum may
lie beyond the range: when the best value lies in the outer :data:`EDGE` of
the search range, or when the objective is still improving towards an edge
(a one-sided slope test over the trials nearest it, :func:`edge_slope`)
(``sweep/plateau.csv``).

A plateau measured on few replicates can be wide for want of replicates
alone. :func:`grow_plateau` (what ``memsim sweep`` runs) evaluates the
plateau's trials on more replicates, doubling their number up to
:data:`MAX_REPLICATES`, until every numeric parameter's plateau is narrower
than :data:`FACTOR` (``high / low`` on a log scale; on a linear scale a
:data:`SHARE` of the range); a plateau still wider at the cap is reported as
"undetermined within xN".

A sweep over a replayed stream (a trace, a stream folder, LoCoMo) has no
replicate noise to measure a plateau by: its replicates replay the same
queries (identical for a deterministic policy, where a bootstrap over them
would put only the best trial's ties on the plateau). Its plateau is not
measured (:data:`REPLAY_NOTE`; ``replays=True``), and no replicates are
added; the best value and the edge warning stand.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from typing import Any, Callable

import numpy as np
import pandas as pd

from memsim.reporting.stats import best_row
from memsim.core.rng import child, seed_sequence

from .space import ParamSpec, SweepSpec, describe_space, format_value

#: Share of a search range, at each end, where a best value draws a warning.
EDGE = 0.05
#: Bootstrap resamples of the replicates.
N_BOOT = 2000
#: Confidence level of the paired comparison with the best trial.
LEVEL = 0.95
#: A plateau of a log-scaled parameter is *determined* when ``high / low``
#: is at most this factor.
FACTOR = 2.0
#: A plateau of a linear parameter is *determined* when ``high - low`` is at
#: most this share of the search range.
SHARE = 0.2
#: Most replicates :func:`grow_plateau` evaluates the plateau's trials on.
MAX_REPLICATES = 8
#: One-sided significance level of the edge slope test.
SLOPE_ALPHA = 0.05

#: ``note`` of a plateau not measured because the replicates replay one stream.
REPLAY_NOTE = ("plateau not measured: the replicates replay one stream, so the trials' "
               "differences across them are no replicate noise (more replays would not help)")

#: Columns of :func:`plateau_table`.
PLATEAU_COLUMNS = ("objective", "param", "type", "best", "low", "high", "choices",
                   "n_trials", "n_plateau", "n_replicates", "range_low", "range_high", "log",
                   "position", "edge", "edge_warning", "warning", "note", "edge_rule",
                   "edge_slope", "edge_slope_p", "width", "determined")


def range_position(p: ParamSpec, value: Any) -> float:
    """Where ``value`` lies in the range of a numeric parameter, from 0 to 1.

    .. math::

        u(v) = \\frac{v - \\mathrm{low}}{\\mathrm{high} - \\mathrm{low}}
        \\quad\\text{or, on a log scale,}\\quad
        u(v) = \\frac{\\ln v - \\ln \\mathrm{low}}{\\ln \\mathrm{high} - \\ln \\mathrm{low}}

    The log form is used where the parameter is sampled on a log scale, so
    that "the outer 5%" means the same share of what the sampler explores.
    NaN for a categorical parameter or a value that is not a finite number.
    """
    if p.type == "categorical":
        return math.nan
    try:
        v = float(value)
    except (TypeError, ValueError):
        return math.nan
    if not math.isfinite(v):
        return math.nan
    if p.log:
        if v <= 0:
            return math.nan
        return (math.log(v) - math.log(p.low)) / (math.log(p.high) - math.log(p.low))
    return (v - p.low) / (p.high - p.low)


def edge_of(p: ParamSpec, value: Any, edge: float = EDGE) -> str:
    """``"low"`` or ``"high"`` when ``value`` lies in the outer ``edge`` share
    of the range (:func:`range_position` ``<= edge`` or ``>= 1 - edge``), else ``""``."""
    u = range_position(p, value)
    if not math.isfinite(u):
        return ""
    if u <= edge:
        return "low"
    if u >= 1.0 - edge:
        return "high"
    return ""


def edge_message(p: ParamSpec, value: Any, edge: float = EDGE) -> str:
    """The warning sentence for a best value at an edge of its range, or ``""``."""
    side = edge_of(p, value, edge)
    if not side:
        return ""
    where = "top" if side == "high" else "bottom"
    return (f"best {p.key} = {format_value(value)} lies in the {where} {edge:.0%} of its range "
            f"{describe_space(p)}: the optimum may lie beyond it; widen the range")


def edge_slope(u: np.ndarray, y: np.ndarray, best: int, *, alpha: float = SLOPE_ALPHA
               ) -> tuple[str, float, float, int]:
    """Is the objective still improving towards an edge of the range?

    Parameters
    ----------
    u : ndarray, shape (T,)
        :func:`range_position` of each trial's value (NaN: left out).
    y : ndarray, shape (T,)
        ``s * value``: each trial's objective, larger is better.
    best : int
        Index of the best trial.
    alpha : float
        One-sided significance level.

    Returns
    -------
    (side, slope, p, k)
        ``side`` ``"high"`` or ``"low"`` (``""`` when neither edge draws the
        warning), the least-squares slope of ``y`` on the distance travelled
        towards that edge (objective per range width), its one-sided p-value
        and the number ``k`` of trials in the test.

    Notes
    -----
    For each edge, the ``k = max(4, ceil(T / 3))`` trials nearest it (T:
    trials with a position) are taken when the best trial is among them; the
    slope of ``y`` on ``d`` (``d = u`` towards the top, ``-u`` towards the
    bottom) is ``b = S_dy / S_dd`` with standard error ``sqrt(RSS / (k - 2) /
    S_dd)``, and the edge draws the warning when ``b > 0`` with ``P(t_{k-2}
    >= b / se) < alpha``. Trials share their replicate seeds (common random
    numbers), so their differences, which the slope reads, carry little of
    the replicate noise. Fewer than 4 trials, or fewer than 3 distinct
    positions in the group, test nothing.
    """
    from scipy import stats as sps

    u = np.asarray(u, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    ok = np.flatnonzero(np.isfinite(u) & np.isfinite(y))
    k = max(4, math.ceil(len(ok) / 3))
    if len(ok) < 4:
        return "", math.nan, math.nan, 0
    for side in ("high", "low"):
        d = u if side == "high" else -u
        grp = ok[np.argsort(-d[ok], kind="stable")[:k]]
        if best not in grp or np.unique(d[grp]).size < 3:
            continue
        x, yy = d[grp], y[grp]
        xc = x - x.mean()
        sxx = float(xc @ xc)
        b = float(xc @ (yy - yy.mean())) / sxx
        rss = float(np.sum((yy - yy.mean() - b * xc) ** 2))
        se = math.sqrt(rss / (len(grp) - 2) / sxx)
        if se > 0:
            pval = float(sps.t.sf(b / se, len(grp) - 2))
        else:
            pval = 0.0 if b > 0 else 1.0
        if b > 0 and pval < alpha:
            return side, b, pval, len(grp)
    return "", math.nan, math.nan, 0


def slope_message(p: ParamSpec, side: str, slope: float, pval: float, k: int) -> str:
    """The warning sentence of :func:`edge_slope`, or ``""``."""
    if not side:
        return ""
    where = "top" if side == "high" else "bottom"
    return (f"{p.key}: the objective still improves towards the {where} of its range "
            f"{describe_space(p)} (slope {slope:+.3g} per range width over the {k} trials "
            f"nearest it, one-sided p = {pval:.2g}): the optimum may lie beyond it; "
            "widen the range")


def _rep_matrix(done: pd.DataFrame, label: str) -> np.ndarray:
    """(trials, replicates) array of ``<label>_rep<r>`` values, replicates in order."""
    pat = re.compile(rf"^{re.escape(label)}_rep(\d+)$")
    cols = sorted((int(m.group(1)), c) for c in done.columns if (m := pat.match(str(c))))
    if not cols:
        return np.empty((len(done), 0))
    return np.column_stack([pd.to_numeric(done[c], errors="coerce").to_numpy(np.float64)
                            for _, c in cols])


# Over 80 lines only through its docstring, which states the rule exactly.
def plateau_members(x: np.ndarray, sign: float, *, level: float = LEVEL, n_boot: int = N_BOOT,
                    rng: np.random.Generator | None = None,
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which trials are not significantly worse than the best, from a paired
    bootstrap over replicates that accounts for the best being selected.

    Parameters
    ----------
    x : ndarray, shape (T, R)
        ``x[t, r]``: trial t's objective on replicate r (NaN where missing),
        R >= 2.
    sign : float
        +1 for a maximised objective, -1 for a minimised one.
    level : float
        Confidence level.
    n_boot : int
        Resamples B.
    rng : numpy.random.Generator
        The resampling stream (a named child stream; never global state).

    Returns
    -------
    on : ndarray of bool, shape (T,)
        :math:`L_t \\le c_t`: trial t is on the plateau.
    lead : ndarray, shape (T,)
        :math:`L_t = \\max_u s\\,m_u - s\\,m_t`, how far the best is ahead of t.
    threshold : ndarray, shape (T,)
        :math:`c_t`.

    Notes
    -----
    With :math:`m_t` the mean of trial t's finite replicate values and
    :math:`m_{b,t} = \\sum_r w_{b,r} x_{t,r} / \\sum_r w_{b,r}` (finite
    :math:`x_{t,r}` only) its mean in resample b, where :math:`w_{b,r}` counts
    the draws of replicate r and is the same for every trial (paired: trials
    share their replicate seeds, so what is common to all trials on a
    replicate cancels), the centred deviations are

    .. math::

        \\delta_{b,t} = s\\,(m_{b,t} - m_t)\\,\\sqrt{R/(R-1)}

    (the factor undoes the plug-in bootstrap's variance divisor R instead of
    R - 1, which matters at the 2-5 replicates sweeps use), and

    .. math::

        c_t = Q_{\\text{level}}\\Big(\\max_u \\delta_{b,u} - \\delta_{b,t}\\Big)
        \\quad\\text{over } b = 1..B.

    This is Gupta's subset selection (multiple comparisons with the best) with
    bootstrap critical values. If trial k has the best expected value
    :math:`\\mu_k`, its lead is :math:`L_k = \\max_u [s(\\mu_u - \\mu_k) +
    s(e_u - e_k)] \\le \\max_u s(e_u - e_k)` (:math:`e = m - \\mu`, the
    replicate noise), whose distribution the bootstrap approximates by that
    of :math:`\\max_u \\delta_{b,u} - \\delta_{b,k}`: the plateau contains the
    truly best trial with probability about ``level``. The best observed
    trial always belongs (:math:`L = 0 \\le c`).
    """
    x = np.asarray(x, dtype=np.float64)
    T, R = x.shape
    if R < 2:
        raise ValueError(f"plateau_members needs at least 2 replicates. Got {R} instead.")
    rng = rng if rng is not None else child(seed_sequence(0), "sweep", "plateau")
    idx = rng.integers(0, R, size=(n_boot, R))
    # counts of each replicate in each resample: one matrix product then
    # resamples every trial at once
    flat = (np.arange(n_boot)[:, None] * R + idx).ravel()
    w = np.bincount(flat, minlength=n_boot * R).reshape(n_boot, R).astype(np.float64)
    fin = np.isfinite(x)
    xs = np.where(fin, x, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = xs.sum(axis=1) / fin.sum(axis=1)
        mb = (w @ xs.T) / (w @ fin.T.astype(np.float64))
    delta = sign * (mb - m) * math.sqrt(R / (R - 1))
    with warnings.catch_warnings():
        # a resample that drew only a trial's NaN replicates leaves NaN: skipped
        warnings.simplefilter("ignore", RuntimeWarning)
        top = np.nanmax(delta, axis=1, keepdims=True)
        threshold = np.nanquantile(top - delta, level, axis=0)
    lead = np.nanmax(sign * m) - sign * m
    # ties with the best (same parameters under common random numbers) must
    # stay ties whatever the rounding of the means
    tol = 1e-12 * max(1.0, float(np.nanmax(np.abs(m))))
    on = lead <= np.nan_to_num(threshold, nan=0.0) + tol
    return on, lead, threshold


# Over 80 lines only through its docstring, which states the rule exactly.
def plateau_table(trials: pd.DataFrame, spec: SweepSpec, *, level: float = LEVEL,
                  n_boot: int = N_BOOT, seed: int | None = None,
                  edge: float = EDGE, factor: float = FACTOR, share: float = SHARE,
                  cap: int | None = None, replays: bool = False) -> pd.DataFrame:
    """The best value, plateau and edge warning of each swept parameter.

    For each objective (with several objectives, each on its own: the best
    trial on that objective, not a Pareto compromise) and each parameter.

    Plateau. Let :math:`x_{t,r}` be trial t's objective on replicate r (the
    ``<objective>_rep<r>`` columns of the trials table), :math:`s = +1` to
    maximise and :math:`-1` to minimise, and the best trial the COMPLETE one
    with the largest :math:`s\\,m_t` (:math:`m_t` the mean over replicates;
    ties to the lowest number, as the sweep picks it). A trial is **on the
    plateau** when the best's lead over it, :math:`L_t = \\max_u s\\,m_u -
    s\\,m_t`, is within what replicate noise alone could produce:
    :math:`L_t \\le c_t`, with :math:`c_t` the ``level`` quantile, over paired
    bootstrap resamples of the replicates (the same resample for every trial:
    common random numbers), of the largest amount by which any trial's
    resampled mean moves ahead of t's (:func:`plateau_members` gives the
    formula). The plateau of a numeric parameter is :math:`[\\min, \\max]` of
    its values over the plateau's trials; of a categorical one, the choices
    they use. It always contains the best value.

    Why this rule. The best trial is the maximum of many noisy values, and a
    plain paired interval of each trial's difference to it ignores that
    selection: on a small workload (180 queries per replicate, 3 replicates,
    60 trials) the best trial had beaten its neighbours on every replicate by
    luck, and that interval excluded the half-lives that were best on fresh
    seeds. Taking the maximum over all trials in each resample (the argmax
    recomputed) makes the plateau contain the truly best trial with
    probability about ``level``, whatever the number of trials. The other
    usual rule, "best in at least 5% of resamples", splits that share among
    all the trials of a flat region, so its plateau would shrink as a sampler
    concentrates trials near the optimum.

    Reading it: the interval is the range of values seen among trials as good
    as the best, not a promise that every value inside is (a multimodal
    objective can dip in between); in a sweep of several parameters, a
    parameter's plateau is the projection of the trials on the joint plateau.
    The maximum runs over every trial, hopeless ones too, so the plateau errs
    on the wide side. With one replicate the noise cannot be measured:
    ``low``, ``high``, ``choices`` and ``n_plateau`` are NaN and ``note``
    says why; so too when the replicates replay one stream (``replays``,
    :data:`REPLAY_NOTE`).

    Edge warning. ``edge_warning`` is true when the best value lies in the
    outer ``edge`` share of a numeric range (:func:`range_position`, on a log
    scale for a log parameter; int ranges alike): ``position <= edge`` or
    ``>= 1 - edge`` (``edge_rule`` ``"outer"``), or, when it does not, when
    the objective is still improving towards an edge over the trials nearest
    it (:func:`edge_slope`; ``edge_rule`` ``"slope"``, with ``edge_slope``
    and ``edge_slope_p``). ``edge`` is then ``"low"`` or ``"high"`` and
    ``warning`` says so in a sentence.

    Width. ``width`` is ``high / low`` for a log-scaled parameter and ``(high
    - low) / (range_high - range_low)`` for a linear one; ``determined`` is
    ``width <= factor`` (log) or ``width <= share`` (linear). An undetermined
    plateau's ``note`` says "undetermined within xN" (see
    :func:`grow_plateau`, which adds replicates first).

    Parameters
    ----------
    trials : DataFrame
        :func:`~memsim.sweep.trials_table` (or ``sweep/trials.csv``).
    spec : SweepSpec
        Supplies the parameters' ranges and the objectives' directions.
    level : float
        Confidence level of the paired comparison.
    n_boot : int
        Bootstrap resamples.
    seed : int, optional
        Seed of the resampling streams (default ``spec.seed``); each objective
        has its own named child stream.
    edge : float
        Share of the range at each end that draws the edge warning.
    factor, share : float
        Widest determined plateau: ``high / low`` of a log-scaled parameter,
        share of the range of a linear one.
    cap : int, optional
        The replicate cap of :func:`grow_plateau`, named in the note of a
        plateau still undetermined at it.
    replays : bool
        Whether the replicates replay one stream (the experiment's workload
        is a stream from disk): then the plateau is not measured.

    Returns
    -------
    DataFrame
        One row per (objective, parameter), columns :data:`PLATEAU_COLUMNS`:
        ``best`` (the best trial's value), ``low``/``high`` (the plateau of a
        numeric parameter), ``choices`` (JSON list: the plateau's choices of a
        categorical), ``n_trials`` (COMPLETE trials with a value),
        ``n_plateau`` (trials on the plateau), ``n_replicates``,
        ``range_low``/``range_high``/``log`` (the search range),
        ``position`` (:func:`range_position` of the best), ``edge``,
        ``edge_warning``, ``warning`` (the sentence, or empty) and ``note``
        (why the plateau is not measured, or where it reaches an end of the
        range).
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"The 'level' parameter of plateau_table must be in (0, 1). "
                         f"Got {level!r} instead.")
    rows: list[dict] = []
    signs = {lab: 1.0 if d == "maximize" else -1.0 for lab, d in zip(spec.labels,
                                                                       spec.directions)}
    for lab, sign, done, x, on in _memberships(trials, spec, level, n_boot, seed, replays):
        # ties on this objective broken by the others, as the sweep breaks them
        ties = [signs[o] * pd.to_numeric(done[f"values_{o}"], errors="coerce")
                .to_numpy(np.float64) for o in spec.labels
                if o != lab and f"values_{o}" in done]
        for p in spec.params:
            rows.append(_row(done, lab, sign, f"values_{lab}", p, x.shape[1], on, edge,
                             factor, share, cap, replays, ties))
    return pd.DataFrame(rows, columns=list(PLATEAU_COLUMNS))


def _memberships(trials: pd.DataFrame, spec: SweepSpec, level: float, n_boot: int,
                 seed: int | None, replays: bool = False) -> list[tuple]:
    """Per objective: ``(label, sign, done, x, on)``: the COMPLETE trials with
    a value (by number), their (trials, replicates) matrix and which are on
    the plateau (None when it cannot be measured: one replicate, or
    ``replays`` of one stream)."""
    root = seed_sequence(spec.seed if seed is None else seed)
    out = []
    state = trials["state"] if "state" in trials else pd.Series("COMPLETE", index=trials.index)
    for lab, direction in zip(spec.labels, spec.directions):
        sign = 1.0 if direction == "maximize" else -1.0
        vcol = f"values_{lab}"
        done = trials[(state == "COMPLETE").to_numpy()]
        if vcol in done:
            done = done[np.isfinite(pd.to_numeric(done[vcol], errors="coerce")
                                    .to_numpy(np.float64))]
        else:
            done = done.iloc[0:0]
        done = done.sort_values("number") if "number" in done else done
        x = _rep_matrix(done, lab)
        on = None  # one bootstrap per objective, shared by its parameters
        if len(done) and x.shape[1] >= 2 and not replays:
            on, _, _ = plateau_members(x, sign, level=level, n_boot=n_boot,
                                       rng=child(root, "sweep", "plateau", lab))
        out.append((lab, sign, done, x, on))
    return out


def _row(done: pd.DataFrame, lab: str, sign: float, vcol: str, p: ParamSpec, R: int,
         on: np.ndarray | None, edge: float, factor: float = FACTOR, share: float = SHARE,
         cap: int | None = None, replays: bool = False,
         ties: list[np.ndarray] | None = None) -> dict:
    """One row of :func:`plateau_table` (``on``: the plateau's trials, None
    when not measured; ``ties``: the other objectives' signed values, which
    break a tie on this one)."""
    numeric = p.type != "categorical"
    row: dict[str, Any] = {
        "objective": lab, "param": p.key, "type": p.type, "best": None,
        "low": math.nan, "high": math.nan, "choices": math.nan, "n_trials": len(done),
        "n_plateau": math.nan, "n_replicates": 0,
        "range_low": p.low if numeric else math.nan, "range_high": p.high if numeric else math.nan,
        "log": bool(p.log), "position": math.nan, "edge": "", "edge_warning": False,
        "warning": "", "note": "", "edge_rule": "", "edge_slope": math.nan,
        "edge_slope_p": math.nan, "width": math.nan, "determined": math.nan}
    if not len(done) or p.key not in done:
        row["note"] = "no COMPLETE trial with a value" if not len(done) else \
            f"the trials table has no column {p.key!r}"
        return row
    vals = pd.to_numeric(done[vcol], errors="coerce").to_numpy(np.float64)
    # max of s * value, ties by the other objectives, then to the lowest trial
    # number, as the sweep picks it
    best = best_row([sign * vals, *(ties or [])])
    bval = done[p.key].iloc[best]
    # a categorical's best is the choice itself (its TOML type), not the
    # numpy scalar a table column holds
    row["best"] = (float(bval) if bval is not None else bval) if numeric else p.as_choice(bval)
    notes = []
    if numeric:
        row["position"] = range_position(p, bval)
        row["edge"] = edge_of(p, bval, edge)
        row["warning"] = edge_message(p, bval, edge)
        if row["edge"]:
            row["edge_rule"] = "outer"
        else:
            u = np.array([range_position(p, v) for v in done[p.key]], dtype=np.float64)
            side, slope, pval, k = edge_slope(u, sign * vals, best)
            if side:
                row.update(edge=side, edge_rule="slope", edge_slope=slope, edge_slope_p=pval,
                           warning=slope_message(p, side, slope, pval, k))
        row["edge_warning"] = bool(row["edge"])
    row["n_replicates"] = R
    if on is None:
        notes.append(f"plateau not measured: the trials table has no {lab}_rep<r> columns"
                     if R == 0 else REPLAY_NOTE if replays else
                     "plateau not measured: the sweep has one replicate, so the replicate "
                     "noise cannot be measured (set experiment.replicates >= 2)")
        row["note"] = "; ".join(notes)
        return row
    on = on.copy()
    on[best] = True  # L = 0 <= c for the best; explicit for a trial with NaN replicates
    row["n_plateau"] = int(on.sum())
    pv = done[p.key].to_numpy()[on]
    if numeric:
        num = pd.to_numeric(pd.Series(pv), errors="coerce").to_numpy(np.float64)
        row["low"], row["high"] = float(np.nanmin(num)), float(np.nanmax(num))
        row["width"], row["determined"], why = _width(p, row["low"], row["high"], factor, share)
        if not row["determined"]:
            at = " (the cap)" if cap is not None and R >= cap else ""
            notes.append(f"undetermined within {_limit(p, factor, share)}: the plateau spans "
                         f"{why} after {R} replicates{at}")
        reach = [s for s, v in (("bottom", row["low"]), ("top", row["high"]))
                 if edge_of(p, v, edge) == ("low" if s == "bottom" else "high")]
        if len(reach) == 2:
            notes.append("the plateau spans the range: the objective hardly depends on "
                         "this parameter within the replicate noise")
        elif reach:
            notes.append(f"the plateau reaches the {reach[0]} {edge:.0%} of the range")
    else:
        # the column holds numpy scalars (int64, bool_), which json cannot
        # write: each value is mapped back to the choice it is, by value and
        # kind (a bool is no int), so the list keeps the choices' TOML types
        seen = {json.dumps(c) for c in map(p.as_choice, pv) if c is not None}
        row["choices"] = json.dumps([c for c in p.choices if json.dumps(c) in seen])
    row["note"] = "; ".join(notes)
    return row


def _width(p: ParamSpec, low: float, high: float, factor: float, share: float
           ) -> tuple[float, bool, str]:
    """(width, determined, width in words) of a numeric plateau [low, high]."""
    if p.log:
        w = high / low if low > 0 else math.inf
        return w, bool(w <= factor), f"x{w:.3g}"
    w = (high - low) / (p.high - p.low)
    return w, bool(w <= share), f"{w:.0%} of the range"


def _limit(p: ParamSpec, factor: float, share: float) -> str:
    return f"x{factor:g}" if p.log else f"{share:.0%} of the range"


def undetermined(plateau: pd.DataFrame) -> pd.DataFrame:
    """The rows of a :func:`plateau_table` whose numeric plateau is measured
    and wider than the limit."""
    if plateau is None or not len(plateau):
        return plateau
    # (all NaN, a float column, when every parameter is categorical: no
    # fillna with a bool, which pandas refuses to put in a float column)
    wide = [pd.notna(v) and not bool(v) for v in plateau["determined"]]
    return plateau[np.array(wide, dtype=bool)]


# Over 80 lines only through its docstring, which states the rule exactly.
def grow_plateau(trials: pd.DataFrame, spec: SweepSpec,
                 evaluate: Callable[[list[int], list[int]], dict[int, dict[str, dict]]], *,
                 first_replicate: int, cap: int = MAX_REPLICATES, factor: float = FACTOR,
                 share: float = SHARE, level: float = LEVEL, n_boot: int = N_BOOT,
                 seed: int | None = None, edge: float = EDGE, replays: bool = False
                 ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The plateau table, after adding replicates until every plateau is determined.

    Rule. Measure the plateaus (:func:`plateau_table`). While some numeric
    parameter's plateau is wider than ``factor`` (log scale; ``share`` of the
    range on a linear one) and the replicates are fewer than ``cap``,
    evaluate every trial on the plateau of any objective on new replicates,
    doubling their number (R -> min(2R, cap)), and measure the plateau again
    among those trials alone, on all their replicates (the trials off the
    plateau were already significantly worse; kept in with fewer replicates,
    their noisier resampled means would widen every trial's threshold). A
    plateau still wider at the cap is "undetermined within xN" (the row's
    note and ``determined``). The best trial, ``n_trials`` and the edge
    warning stay the sweep's (they read every trial, on the sweep's
    replicates).

    Parameters
    ----------
    trials : DataFrame
        The sweep's trials table (``<objective>_rep<r>`` columns).
    spec : SweepSpec
    evaluate : callable
        ``evaluate(numbers, replicates)``: trial number -> objective label ->
        {replicate: value}, for the trials ``numbers`` on ``replicates``
        (a trial that fails is left out).
    first_replicate : int
        The first replicate index to add: past every replicate the sweep and
        its robustness check use, so that the new seeds are fresh.
    cap : int
        Most replicates per trial.
    replays : bool
        Whether the replicates replay one stream: the plateau is not
        measured (:func:`plateau_table`), and replays are not added (they
        hold no new queries).

    Returns
    -------
    (plateau, trials)
        The final :func:`plateau_table` and the grown trials (those on the
        last plateau measured) with the added ``<objective>_rep<r>`` columns.
    """
    kw = dict(level=level, n_boot=n_boot, seed=seed, edge=edge, factor=factor, share=share,
              cap=cap, replays=replays)
    full = plateau_table(trials, spec, **kw)
    sub, plateau = trials.copy(), full
    nxt = first_replicate
    while True:
        reps = int(plateau["n_replicates"].max()) if len(plateau) else 0
        # replays of one stream hold no new queries: adding them cannot help
        if replays or reps < 2 or reps >= cap or not len(undetermined(plateau)):
            break
        numbers: set[int] = set()
        for _lab, _sign, done, _x, on in _memberships(sub, spec, level, n_boot, seed):
            if on is not None and "number" in done:
                numbers.update(int(n) for n in done["number"].to_numpy()[on])
        new = list(range(nxt, nxt + min(2 * reps, cap) - reps))
        nxt += len(new)
        got = evaluate(sorted(numbers), new)
        sub = sub[sub["number"].isin(numbers).to_numpy()]
        cols = {f"{lab}_rep{r}": [got.get(int(n), {}).get(lab, {}).get(r, math.nan)
                                  for n in sub["number"]]
                for lab in spec.labels for r in new}
        sub = pd.concat([sub, pd.DataFrame(cols, index=sub.index)], axis=1)
        plateau = plateau_table(sub, spec, **kw)
    if plateau is full:
        return full, sub
    # the plateau as measured among the grown trials; the best, the trial
    # count and the edge warning (which read every trial) as the sweep had them
    out = full.copy()
    grown = ["low", "high", "choices", "n_plateau", "n_replicates", "width", "determined",
             "note"]
    out[grown] = plateau[grown].to_numpy()
    return out, sub


def plateau_lines(plateau: pd.DataFrame) -> list[str]:
    """Console lines of a :func:`plateau_table`: one per (objective,
    parameter), then one ``WARNING`` line per best value at an edge."""
    lines: list[str] = []
    if plateau is None or not len(plateau):
        return lines
    for _, r in plateau.iterrows():
        head = f"plateau of {r['param']} ({r['objective']}): best {format_value(r['best'])}"
        n_plat = r["n_plateau"]
        if pd.isna(n_plat):
            lines.append(f"{head}; {r['note'] or 'plateau not measured'}")
            continue
        if r["type"] == "categorical":
            what = "choices " + ", ".join(format_value(c) for c in json.loads(r["choices"]))
        else:
            what = f"[{format_value(float(r['low']))}, {format_value(float(r['high']))}]"
        note = f"; {r['note']}" if isinstance(r["note"], str) and r["note"] else ""
        lines.append(f"{head}, plateau {what} ({int(n_plat)} of {int(r['n_trials'])} trials "
                     f"within the noise of {int(r['n_replicates'])} replicates){note}")
    for _, r in plateau.iterrows():
        if bool(r["edge_warning"]):
            lines.append(f"WARNING ({r['objective']}): {r['warning']}")
    return lines
