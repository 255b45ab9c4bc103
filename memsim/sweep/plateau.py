"""How sure a sweep is of its best value: the plateau and the edge warning.

A sweep's best trial is the argmax of noisy values: other parameter values
whose objective lies within the replicate noise of the best are as good, as
far as the sweep can tell. :func:`plateau_table` gives, for each objective
and each swept parameter, the best value, the **plateau** (the parameter
values of the trials not significantly worse than the best, from a paired
bootstrap over replicates) and an **edge warning** when the best value lies
in the outer :data:`EDGE` of the search range, where the true optimum may lie
beyond the range (``sweep/plateau.csv``).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np
import pandas as pd

from memsim.rng import child, seed_sequence

from .space import ParamSpec, SweepSpec, _describe, _fmt

#: Share of a search range, at each end, where a best value draws a warning.
EDGE = 0.05
#: Bootstrap resamples of the replicates.
N_BOOT = 2000
#: Confidence level of the paired comparison with the best trial.
LEVEL = 0.95

#: Columns of :func:`plateau_table`.
PLATEAU_COLUMNS = ("objective", "param", "type", "best", "low", "high", "choices",
                   "n_trials", "n_plateau", "n_replicates", "range_low", "range_high", "log",
                   "position", "edge", "edge_warning", "warning", "note")


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
    return (f"best {p.key} = {_fmt(value)} lies in the {where} {edge:.0%} of its range "
            f"{_describe(p)}: the optimum may lie beyond it; widen the range")


def _rep_matrix(done: pd.DataFrame, label: str) -> np.ndarray:
    """(trials, replicates) array of ``<label>_rep<r>`` values, replicates in order."""
    pat = re.compile(rf"^{re.escape(label)}_rep(\d+)$")
    cols = sorted((int(m.group(1)), c) for c in done.columns if (m := pat.match(str(c))))
    if not cols:
        return np.empty((len(done), 0))
    return np.column_stack([pd.to_numeric(done[c], errors="coerce").to_numpy(np.float64)
                            for _, c in cols])


def as_good_share(x: np.ndarray, best: int, sign: float, n_boot: int = N_BOOT,
                  rng: np.random.Generator | None = None) -> np.ndarray:
    """Share of paired bootstrap resamples in which each trial is at least as
    good as trial ``best``.

    Parameters
    ----------
    x : ndarray, shape (T, R)
        ``x[t, r]``: trial t's objective on replicate r (NaN where missing).
    best : int
        Row of the best trial.
    sign : float
        +1 for a maximised objective, -1 for a minimised one.
    n_boot : int
        Resamples B.
    rng : numpy.random.Generator
        The resampling stream (a named child stream; never global state).

    Returns
    -------
    ndarray, shape (T,)
        :math:`p_t = \\frac{1}{B} \\sum_b \\mathbf{1}[g_{b,t} \\le 0]`, with the
        gap :math:`g_{b,t} = s\\,(m_{b,t^*} - m_{b,t})` and the resampled mean
        :math:`m_{b,t} = \\sum_r w_{b,r} x_{t,r} / \\sum_r w_{b,r}` over finite
        :math:`x_{t,r}`, where :math:`w_{b,r}` counts the draws of replicate r
        in resample b, the same for every trial (paired: the trials share
        their replicate seeds, so what is common to all trials on a replicate
        cancels in the gap). A gap that is NaN (nothing finite drawn) counts
        as worse.
    """
    x = np.asarray(x, dtype=np.float64)
    T, R = x.shape
    rng = rng if rng is not None else child(seed_sequence(0), "sweep", "plateau")
    idx = rng.integers(0, R, size=(n_boot, R))
    # counts of each replicate in each resample: one matrix product then
    # resamples every trial at once
    flat = (np.arange(n_boot)[:, None] * R + idx).ravel()
    w = np.bincount(flat, minlength=n_boot * R).reshape(n_boot, R).astype(np.float64)
    fin = np.isfinite(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = (w @ np.where(fin, x, 0.0).T) / (w @ fin.T.astype(np.float64))
        gap = sign * (m[:, [best]] - m)
    # trials with the best's exact values (same parameters, common random
    # numbers) must tie, whatever the rounding of the resampled means
    tol = 1e-12 * max(1.0, float(np.nanmax(np.abs(x))) if np.isfinite(x).any() else 1.0)
    return (gap <= tol).mean(axis=0)


def plateau_table(trials: pd.DataFrame, spec: SweepSpec, *, level: float = LEVEL,
                  n_boot: int = N_BOOT, seed: int | None = None,
                  edge: float = EDGE) -> pd.DataFrame:
    """The best value, plateau and edge warning of each swept parameter.

    For each objective (with several objectives, each on its own: the best
    trial on that objective, not a Pareto compromise) and each parameter.

    Plateau. Let :math:`x_{t,r}` be trial t's objective on replicate r (the
    ``<objective>_rep<r>`` columns of the trials table), :math:`s = +1` to
    maximise and :math:`-1` to minimise, and :math:`t^*` the best COMPLETE
    trial (largest :math:`s\\,m_t`, :math:`m_t` the mean over replicates;
    ties to the lowest number, as the sweep picks it). Trial t is **on the
    plateau** when its paired gap to the best is not significantly above 0:

    .. math::

        p_t = \\frac{1}{B}\\sum_{b=1}^{B} \\mathbf{1}\\left[s\\,(m_{b,t^*} - m_{b,t})
        \\le 0\\right] \\ \\ge\\ \\frac{\\alpha}{2}, \\qquad \\alpha = 1 - \\text{level},

    with :math:`m_{b,t}` the mean of resample b of the replicates, the same
    resample for every trial (:func:`as_good_share`); equivalently, the
    two-sided ``level`` percentile interval of the gap reaches 0. The
    plateau of a numeric parameter is :math:`[\\min, \\max]` of its values over
    the plateau's trials; of a categorical one, the choices they use. It
    always contains the best value (:math:`p_{t^*} = 1`).

    Why this rule and not "best in at least 5% of resamples": the argmax
    share is split among all the trials that sampled the flat region, so it
    would shrink as a sampler concentrates trials near the optimum (the
    better explored, the narrower). The paired gap compares each trial with
    the best alone, whatever the number of its neighbours.

    Reading it: the interval is the range of values seen among trials as good
    as the best, not a promise that every value inside is (a multimodal
    objective can dip in between); in a sweep of several parameters, a
    parameter's plateau is the projection of the trials on the joint plateau.
    The best is chosen on the same replicates (winner's curse), which widens
    the gaps a little, so the plateau errs on the narrow side; with few
    replicates it errs on the wide side: with R <= 3 a resample drawing one
    replicate R times has probability :math:`R^{1-R} \\ge 1/9`, so a trial
    that matches the best on any one replicate is on the plateau. With one
    replicate the noise cannot be measured: ``low``, ``high``, ``choices``
    and ``n_plateau`` are NaN and ``note`` says why.

    Edge warning. ``edge_warning`` is true when the best value lies in the
    outer ``edge`` share of a numeric range (:func:`range_position`, on a log
    scale for a log parameter; int ranges alike): ``position <= edge`` or
    ``>= 1 - edge``. ``edge`` is then ``"low"`` or ``"high"`` and ``warning``
    says so in a sentence.

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
    alpha = 1.0 - level
    root = seed_sequence(spec.seed if seed is None else seed)
    rows: list[dict] = []
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
        for p in spec.params:
            rows.append(_row(done, lab, sign, vcol, p, alpha, n_boot, root, edge))
    return pd.DataFrame(rows, columns=list(PLATEAU_COLUMNS))


def _row(done: pd.DataFrame, lab: str, sign: float, vcol: str, p: ParamSpec, alpha: float,
         n_boot: int, root, edge: float) -> dict:
    """One row of :func:`plateau_table`."""
    numeric = p.type != "categorical"
    row: dict[str, Any] = {
        "objective": lab, "param": p.key, "type": p.type, "best": None,
        "low": math.nan, "high": math.nan, "choices": math.nan, "n_trials": len(done),
        "n_plateau": math.nan, "n_replicates": 0,
        "range_low": p.low if numeric else math.nan, "range_high": p.high if numeric else math.nan,
        "log": bool(p.log), "position": math.nan, "edge": "", "edge_warning": False,
        "warning": "", "note": ""}
    if not len(done) or p.key not in done:
        row["note"] = "no COMPLETE trial with a value" if not len(done) else \
            f"the trials table has no column {p.key!r}"
        return row
    vals = pd.to_numeric(done[vcol], errors="coerce").to_numpy(np.float64)
    # max of s * value, ties to the first (lowest trial number), as the sweep picks it
    best = int(np.argmax(sign * vals))
    bval = done[p.key].iloc[best]
    row["best"] = float(bval) if numeric and bval is not None else bval
    notes = []
    if numeric:
        row["position"] = range_position(p, bval)
        row["edge"] = edge_of(p, bval, edge)
        row["edge_warning"] = bool(row["edge"])
        row["warning"] = edge_message(p, bval, edge)
    x = _rep_matrix(done, lab)
    R = x.shape[1]
    row["n_replicates"] = R
    if R < 2:
        notes.append("plateau not measured: the sweep has one replicate, so the replicate "
                     "noise cannot be measured (set experiment.replicates >= 2)")
        row["note"] = "; ".join(notes)
        return row
    rng = child(root, "sweep", "plateau", lab)
    share = as_good_share(x, best, sign, n_boot, rng)
    on = share >= alpha / 2
    on[best] = True  # p = 1 for the best itself; kept explicit for NaN-only replicates
    row["n_plateau"] = int(on.sum())
    pv = done[p.key].to_numpy()[on]
    if numeric:
        num = pd.to_numeric(pd.Series(pv), errors="coerce").to_numpy(np.float64)
        row["low"], row["high"] = float(np.nanmin(num)), float(np.nanmax(num))
        reach = [s for s, v in (("bottom", row["low"]), ("top", row["high"]))
                 if edge_of(p, v, edge) == ("low" if s == "bottom" else "high")]
        if len(reach) == 2:
            notes.append("the plateau spans the range: the objective hardly depends on "
                         "this parameter within the replicate noise")
        elif reach:
            notes.append(f"the plateau reaches the {reach[0]} {edge:.0%} of the range")
    else:
        seen = {json.dumps(v) for v in pv if v is not None}
        row["choices"] = json.dumps([c for c in p.choices if json.dumps(c) in seen])
    row["note"] = "; ".join(notes)
    return row


def plateau_lines(plateau: pd.DataFrame) -> list[str]:
    """Console lines of a :func:`plateau_table`: one per (objective,
    parameter), then one ``WARNING`` line per best value at an edge."""
    lines: list[str] = []
    if plateau is None or not len(plateau):
        return lines
    for _, r in plateau.iterrows():
        head = f"plateau of {r['param']} ({r['objective']}): best {_fmt(r['best'])}"
        n_plat = r["n_plateau"]
        if pd.isna(n_plat):
            lines.append(f"{head}; {r['note'] or 'plateau not measured'}")
            continue
        if r["type"] == "categorical":
            what = "choices " + ", ".join(_fmt(c) for c in json.loads(r["choices"]))
        else:
            what = f"[{_fmt(float(r['low']))}, {_fmt(float(r['high']))}]"
        note = f"; {r['note']}" if isinstance(r["note"], str) and r["note"] else ""
        lines.append(f"{head}, plateau {what} ({int(n_plat)} of {int(r['n_trials'])} trials "
                     f"within the noise of {int(r['n_replicates'])} replicates){note}")
    for _, r in plateau.iterrows():
        if bool(r["edge_warning"]):
            lines.append(f"WARNING ({r['objective']}): {r['warning']}")
    return lines
