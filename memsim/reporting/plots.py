"""Figures of a policy comparison: data preparation, then drawing.

Every figure comes in two parts (Optuna's pattern):

* a ``*_data`` function turns run files (the per-query table, arms, store,
  rankings, sweep trials) into a small tidy frame, one row per plotted point;
* a ``plot_*`` function draws that frame on an optional ``ax`` and returns the
  :class:`matplotlib.axes.Axes`.

So a notebook can inspect or reshape the numbers behind a figure, and a
report can draw them without recomputing anything. Colours follow the order
of the policies (pass ``colors=policy_colors(names)`` to keep them the same
across figures).

==================================== ==========================================
data                                 drawing
==================================== ==========================================
:func:`recency_curve_data`           :func:`plot_recency_curves`
:func:`age_recall_data`              :func:`plot_age_recall`
:func:`budget_curve_data`            :func:`plot_budget_curve`
:func:`distribution_data`            :func:`plot_distribution`
:func:`win_tie_loss_data`            :func:`plot_win_tie_loss`
:func:`over_time_data`               :func:`plot_over_time`
:func:`concentration_data`           :func:`plot_concentration`
:func:`run_metric_data`              :func:`plot_run_metric`
:func:`store_size_data`              :func:`plot_store_size`
:func:`hidden_data`                  (a table: "what your decay hid")
:func:`superseded_use_data`          :func:`plot_superseded_use`
:func:`sweep_history_data`           :func:`plot_sweep_history`
``sweep/importance.csv``             :func:`plot_param_importance`
:func:`slice_data`                   :func:`plot_slice`
:func:`pareto_data`                  :func:`plot_pareto_front`
==================================== ==========================================

The parameter importance is Optuna's fANOVA, computed by the sweep from the
study itself (:func:`memsim.sweep.outputs.importance_table`) and read back from
``sweep/importance.csv``: this module draws it, it does not estimate one.

Text is never smaller than :data:`SMALLEST_PT` points, so that a figure
shown at the report's narrowest width (540 CSS px for a 7.5-inch figure)
keeps its text at 9 px or more.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from memsim.reporting.curves import recency_curve
from memsim.core.errors import ReportWarning
from memsim.evaluation.metrics import (AGE_BUCKET_COLUMNS, AGE_BUCKETS, HIDDEN_COLUMNS, HIGHER_IS_BETTER,
                      SUPERSEDED_USE_COLUMNS, SUPERSEDED_USE_DAYS, gini)
from memsim.policies import Policy, resolve_policy
from memsim.reporting.rundir import summary_rows
from memsim.reporting.stats import N_BOOT, SEED, best_row, run_metric_ci, summarise

__all__ = [
    "policy_colors",
    "recency_curve_data", "plot_recency_curves",
    "age_recall_data", "plot_age_recall",
    "budget_curve_data", "plot_budget_curve",
    "distribution_data", "plot_distribution",
    "win_tie_loss_data", "plot_win_tie_loss",
    "over_time_data", "plot_over_time",
    "concentration_data", "plot_concentration",
    "run_metric_data", "plot_run_metric",
    "store_size_data", "plot_store_size",
    "hidden_data", "superseded_use_data", "plot_superseded_use",
    "trial_columns", "sweep_history_data", "plot_sweep_history",
    "plot_param_importance", "slice_data", "plot_slice",
    "pareto_data", "plot_pareto_front", "SMALLEST_PT",
]

#: The smallest text of any figure, in points.
SMALLEST_PT = 9

_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf")


def policy_colors(policies: Iterable[str]) -> dict[str, Any]:
    """One colour per policy, in order: ten distinct colours, or twenty (in
    lighter/darker pairs) when there are more than ten policies."""
    names = list(dict.fromkeys(policies))
    if len(names) <= len(_PALETTE):
        return {p: _PALETTE[i] for i, p in enumerate(names)}
    from matplotlib import colormaps

    pal = colormaps["tab20"].colors
    return {p: pal[i % len(pal)] for i, p in enumerate(names)}


def _legend(ax, n: int, **kw) -> None:
    """A legend inside the axes for a few entries, to the right of it for many."""
    if n > 6:
        ax.legend(fontsize=SMALLEST_PT, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  borderaxespad=0)
    else:
        ax.legend(fontsize=SMALLEST_PT, **kw)


def _ax(ax):
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(7, 4))
    return ax


def _colors(df: pd.DataFrame, colors: Mapping[str, Any] | None) -> dict[str, Any]:
    names = list(pd.unique(df["policy"])) if "policy" in df and len(df) else []
    if not colors:
        return policy_colors(names)
    out = dict(colors)
    extra = policy_colors(list(colors) + [p for p in names if p not in colors])
    for p in names:  # policies the caller did not colour
        out.setdefault(p, extra[p])
    return out


def _wrap(label: str, width: int) -> str:
    """``label`` on lines of at most about ``width`` characters, broken after
    a ``.``, ``-`` or space (a dotted key, a policy name), after a ``_`` only
    where a piece is still too long, never inside a word."""
    parts = re.findall(r"[^.\- ]+[.\- ]?", label) or [label]
    if any(len(part) > width for part in parts):
        parts = re.findall(r"[^.\-_ ]+[.\-_ ]?", label) or [label]
    lines, cur = [], ""
    for part in parts:
        if cur and len(cur) + len(part) > width:
            lines.append(cur)
            cur = ""
        cur += part
    lines.append(cur)
    return "\n".join(line.rstrip(" ") for line in lines)


def _empty(ax, text: str):
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])
    return ax


def _pick_budget(queries: pd.DataFrame, budget) -> Any:
    if budget is not None:
        return budget
    budgets = sorted(pd.unique(queries["budget"]))
    return budgets[len(budgets) // 2] if budgets else None


# --------------------------------------------------------------------------
# Recency curves: "same ages, both curves"
# --------------------------------------------------------------------------


def _policies_from(source: Any) -> dict[str, Any]:
    """name -> Policy, from an Experiment, a resolved config table, a
    load_run() dict or a mapping of Policy objects / policy tables (a table
    may name a preset)."""
    if hasattr(source, "policies") and isinstance(source.policies, dict):
        source = source.policies
    elif isinstance(source, Mapping) and "config" in source and isinstance(source["config"],
                                                                          Mapping):
        source = source["config"].get("policies", {})
    elif isinstance(source, Mapping) and "policies" in source and isinstance(
            source["policies"], Mapping):
        source = source["policies"]
    out = {}
    for name, pol in dict(source).items():
        if isinstance(pol, Policy):
            out[str(name)] = pol
        elif isinstance(pol, Mapping):
            if "preset" in pol:
                out[str(name)] = resolve_policy(dict(pol), f"policies.{name}")
            else:
                out[str(name)] = Policy.from_config(dict(pol), f"policies.{name}")
        else:
            raise TypeError(f"policy {name!r}: expected a Policy or a table, got "
                            f"{type(pol).__name__}")
    return out


def recency_curve_data(source: Any, ages: Sequence[float] | None = None,
                       max_age: float = 730.0) -> pd.DataFrame:
    """Recency multiplier of each policy at the same ages.

    For a note that was never used (no recalls, ``task`` tier), the
    multiplier a policy's ranking applies at each age: the decay of the
    stickiness' effective age. A policy whose ranker ignores age gets 1 at
    every age.

    Parameters
    ----------
    source : Experiment, dict or mapping
        An :class:`~memsim.runs.config.Experiment`, its resolved config table
        (``config.toml`` as a dict), a :func:`~memsim.runs.runner.load_run` dict,
        or a mapping ``name -> Policy`` (or policy table).
    ages : sequence of float, optional
        Ages in days (default: 0 to ``max_age`` by 1 day).
    max_age : float
        Last age of the default grid.

    Returns
    -------
    DataFrame
        ``policy, age_days, recency, half_life_days, decay`` (the decay's
        registry name).
    """
    ages_arr = np.arange(0.0, float(max_age) + 1.0) if ages is None else np.asarray(
        ages, dtype=np.float64)
    rows = []
    for name, pol in _policies_from(source).items():
        if not pol.ranker.uses_recency:
            rec = np.ones_like(ages_arr)
        else:
            try:
                rec = np.asarray(recency_curve(pol, ages_arr), dtype=np.float64).reshape(-1)
            except (AttributeError, TypeError, ValueError, IndexError) as exc:
                warnings.warn(f"policy {name!r}: cannot draw the recency curve of "
                              f"{pol.decay.name!r} ({exc})", ReportWarning, stacklevel=2)
                continue
        hl = pol.decay.half_life() if pol.ranker.uses_recency else math.inf
        rows.append(pd.DataFrame({"policy": name, "age_days": ages_arr, "recency": rec,
                                  "half_life_days": hl, "decay": pol.decay.name
                                  if pol.ranker.uses_recency else "(ignores age)"}))
    if not rows:
        return pd.DataFrame(columns=["policy", "age_days", "recency", "half_life_days", "decay"])
    return pd.concat(rows, ignore_index=True)


def _short(x: float) -> str:
    if not math.isfinite(x):
        return "n/a"
    if x == 0:
        return "0"
    if abs(x) >= 0.01:
        return f"{x:.2f}"
    return f"{x:.0e}"


def plot_recency_curves(df: pd.DataFrame, ax=None, colors: Mapping[str, str] | None = None,
                        mark_ages: Sequence[float] = (30, 180, 365), log: bool = False):
    """The policies' recency multipliers over the same ages.

    The legend gives each curve's value at ``mark_ages`` (dotted lines), so
    that "a year-old note keeps about half its weight" can be read off.
    ``log=True`` draws the multiplier on a log scale (to see how many orders
    of magnitude a steep decay loses).
    """
    ax = _ax(ax)
    if len(df) == 0:
        return _empty(ax, "no policy with a recency curve")
    cols = _colors(df, colors)
    top = float(df["age_days"].max())
    marks = [a for a in mark_ages if a <= top]
    for pol, g in df.groupby("policy", sort=False):
        g = g.sort_values("age_days")
        vals = [np.interp(a, g["age_days"], g["recency"]) for a in marks]
        label = str(pol)
        if marks:
            label += "  (" + ", ".join(f"{int(a)} d: {_short(v)}" for a, v in zip(marks, vals)) \
                + ")"
        ax.plot(g["age_days"], g["recency"], color=cols[pol], lw=2, label=label)
    for a in marks:
        ax.axvline(a, color="0.6", lw=0.8, ls=":")
    if log:
        ax.set_yscale("log")
    else:
        ax.set_ylim(0, max(1.05, float(df["recency"].max()) * 1.05))
    ax.set_xlim(0, top)
    ax.set_xlabel("age of the note (days)")
    ax.set_ylabel("recency multiplier")
    ax.set_title("Same ages, every curve: what age costs a note")
    _legend(ax, df["policy"].nunique(), loc="best")
    ax.grid(alpha=0.3)
    return ax


# --------------------------------------------------------------------------
# Recall by age bucket
# --------------------------------------------------------------------------


def _bucket_label(lo: float, hi: float) -> str:
    return f"{int(lo)}+ d" if not math.isfinite(hi) else f"{int(lo)}-{int(hi)} d"


def age_recall_data(queries: pd.DataFrame, budget: Any = None, *, level: float = 0.95,
                    n_boot: int = N_BOOT, seed: int = SEED,
                    summary: pd.DataFrame | None = None) -> pd.DataFrame:
    """Recall of the relevant notes of each age bucket, per policy, with CIs.

    Parameters
    ----------
    queries : DataFrame
        The per-query table (``recall_age_*`` columns).
    budget : int, optional
        Budget to show (default: the middle budget of the table).
    summary : DataFrame, optional
        The run folder's ``summary.csv``: its rows are taken at the default
        ``level``, ``n_boot`` and ``seed`` (:func:`memsim.reporting.rundir.summary_rows`)
        instead of resampling again.

    Returns
    -------
    DataFrame
        ``policy, budget, bucket, bucket_index, mean, ci_low, ci_high, n,
        ci_over``; buckets where no query had a relevant note of that age are
        left out.
    """
    cols = [c for c in AGE_BUCKET_COLUMNS if c in queries.columns]
    if not cols or len(queries) == 0:
        return pd.DataFrame(columns=["policy", "budget", "bucket", "bucket_index", "mean",
                                     "ci_low", "ci_high", "n", "ci_over"])
    budget = _pick_budget(queries, budget)
    sub = queries[queries["budget"] == budget]
    s = summary_rows(summary, sub, cols) if (level, n_boot, seed) == (0.95, N_BOOT, SEED) \
        else None
    if s is None:
        s = summarise(sub, level=level, metrics=cols, n_boot=n_boot, seed=seed)
    labels = {c: (i, _bucket_label(*AGE_BUCKETS[AGE_BUCKET_COLUMNS.index(c)]))
              for i, c in enumerate(AGE_BUCKET_COLUMNS)}
    s["bucket_index"] = s["metric"].map(lambda m: labels[m][0])
    s["bucket"] = s["metric"].map(lambda m: labels[m][1])
    s = s[s["n"] > 0]
    return s[["policy", "budget", "bucket", "bucket_index", "mean", "ci_low", "ci_high", "n",
              "ci_over"]].reset_index(drop=True)


def plot_age_recall(df: pd.DataFrame, ax=None, colors: Mapping[str, str] | None = None):
    """Recall by age of the relevant note: one marker per policy and bucket,
    with its 95% interval. A decay that is too steep shows as recall falling
    to zero in the older buckets."""
    ax = _ax(ax)
    if len(df) == 0:
        return _empty(ax, "no relevant notes to bucket by age")
    cols = _colors(df, colors)
    pols = list(pd.unique(df["policy"]))
    buckets = df[["bucket_index", "bucket"]].drop_duplicates().sort_values("bucket_index")
    xpos = {b: i for i, b in enumerate(buckets["bucket_index"])}
    width = 0.7 / max(len(pols), 1)
    for k, pol in enumerate(pols):
        g = df[df["policy"] == pol].sort_values("bucket_index")
        x = np.array([xpos[b] for b in g["bucket_index"]]) + (k - (len(pols) - 1) / 2) * width
        y = g["mean"].to_numpy(float)
        lo = np.clip(y - g["ci_low"].to_numpy(float), 0, None)
        hi = np.clip(g["ci_high"].to_numpy(float) - y, 0, None)
        err = np.vstack([np.nan_to_num(lo), np.nan_to_num(hi)])
        ax.errorbar(x, y, yerr=err, fmt="o-", color=cols[pol], label=str(pol), capsize=3,
                    lw=1.2, ms=5)
    ax.set_xticks(range(len(buckets)))
    ax.set_xticklabels(buckets["bucket"])
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("age of the relevant note when asked about")
    ax.set_ylabel("recall (share of relevant notes packed)")
    ax.set_title("Recall by age of the relevant note (95% CI)")
    _legend(ax, len(pols))
    ax.grid(alpha=0.3, axis="y")
    return ax


# --------------------------------------------------------------------------
# Budget curve
# --------------------------------------------------------------------------


def budget_curve_data(queries: pd.DataFrame, metric: str = "utility", *, level: float = 0.95,
                      n_boot: int = N_BOOT, seed: int = SEED) -> pd.DataFrame:
    """A metric's mean and interval at each token budget, per policy.

    Returns
    -------
    DataFrame
        ``policy, budget, metric, mean, ci_low, ci_high, n, ci_over``,
        sorted by budget.
    """
    if metric not in queries.columns:
        raise KeyError(f"no metric column {metric!r} in the queries table")
    s = summarise(queries, level=level, metrics=[metric], n_boot=n_boot, seed=seed)
    return s.drop(columns="ci_method").sort_values(["budget"], kind="stable").reset_index(
        drop=True)


def plot_budget_curve(df: pd.DataFrame, ax=None, colors: Mapping[str, str] | None = None):
    """A metric against the token budget, with 95% bands: where packing
    matters, and where more budget stops paying."""
    ax = _ax(ax)
    if len(df) == 0:
        return _empty(ax, "no budgets")
    cols = _colors(df, colors)
    for pol, g in df.groupby("policy", sort=False):
        g = g.sort_values("budget")
        x = g["budget"].to_numpy(float)
        ax.plot(x, g["mean"], "o-", color=cols[pol], label=str(pol), lw=1.8, ms=4)
        ax.fill_between(x, g["ci_low"].to_numpy(float), g["ci_high"].to_numpy(float),
                        color=cols[pol], alpha=0.18, lw=0)
    b = df["budget"].to_numpy(float)
    if len(b) and b.min() > 0 and b.max() / b.min() >= 8:
        ax.set_xscale("log")
    metric = str(df["metric"].iloc[0]) if "metric" in df else "metric"
    ax.set_xlabel("token budget")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} against the token budget (95% CI)")
    _legend(ax, df["policy"].nunique())
    ax.grid(alpha=0.3)
    return ax


# --------------------------------------------------------------------------
# Per-query distributions
# --------------------------------------------------------------------------


def distribution_data(queries: pd.DataFrame, metric: str = "utility",
                      budget: Any = None) -> pd.DataFrame:
    """The per-query values of one metric (finite only), per policy.

    Returns
    -------
    DataFrame
        ``policy, budget, metric, value``.
    """
    if metric not in queries.columns:
        raise KeyError(f"no metric column {metric!r} in the queries table")
    budget = _pick_budget(queries, budget)
    sub = queries[queries["budget"] == budget]
    v = sub[metric].to_numpy(np.float64)
    ok = np.isfinite(v)
    return pd.DataFrame({"policy": sub["policy"].to_numpy()[ok], "budget": budget,
                         "metric": metric, "value": v[ok]})


def plot_distribution(df: pd.DataFrame, ax=None, colors: Mapping[str, str] | None = None):
    """Empirical CDF of a per-query metric per policy; the mean is marked.

    A curve further right (for a higher-is-better metric) is better at every
    quantile; crossing curves mean the policy wins some queries and loses
    others.
    """
    ax = _ax(ax)
    if len(df) == 0:
        return _empty(ax, "no finite values")
    cols = _colors(df, colors)
    for pol, g in df.groupby("policy", sort=False):
        v = np.sort(g["value"].to_numpy(float))
        y = np.arange(1, len(v) + 1) / len(v)
        ax.step(v, y, where="post", color=cols[pol], lw=1.6,
                label=f"{pol} (mean {v.mean():.3g}, n={len(v)})")
        ax.axvline(v.mean(), color=cols[pol], lw=0.8, ls="--")
    metric = str(df["metric"].iloc[0])
    ax.set_xlabel(f"{metric} per query")
    ax.set_ylabel("share of queries at or below")
    ax.set_ylim(0, 1.01)
    ax.set_title(f"Distribution of {metric} over queries")
    _legend(ax, df["policy"].nunique(),
            loc="lower right" if HIGHER_IS_BETTER.get(metric, True) else "upper left")
    ax.grid(alpha=0.3)
    return ax


# --------------------------------------------------------------------------
# Wins, ties and losses against the baseline
# --------------------------------------------------------------------------


def win_tie_loss_data(tests: pd.DataFrame, budget: Any = None) -> pd.DataFrame:
    """Shares of queries each policy wins, ties and loses against the baseline.

    Parameters
    ----------
    tests : DataFrame
        :func:`memsim.reporting.stats.paired_tests` output (or ``Comparison.tests``).

    Returns
    -------
    DataFrame
        ``policy, metric, baseline, win, tie, loss`` (shares of the pairs),
        ``n_pairs`` and ``direction`` (``better``/``worse``/"").
    """
    cols = ["policy", "metric", "baseline", "win", "tie", "loss", "n_pairs", "direction"]
    if len(tests) == 0:
        return pd.DataFrame(columns=cols)
    t = tests if budget is None else tests[tests["budget"] == budget]
    if budget is None and t["budget"].nunique() > 1:
        t = t[t["budget"] == _pick_budget(t, None)]
    n = t["n_pairs"].to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = pd.DataFrame({
            "policy": t["policy"].to_numpy(), "metric": t["metric"].to_numpy(),
            "baseline": t["baseline"].to_numpy(),
            "win": t["wins"].to_numpy(float) / n, "tie": t["ties"].to_numpy(float) / n,
            "loss": t["losses"].to_numpy(float) / n, "n_pairs": t["n_pairs"].to_numpy(),
            "direction": t["direction"].to_numpy(),
        })
    return out[out["n_pairs"] > 0].reset_index(drop=True)


def plot_win_tie_loss(df: pd.DataFrame, ax=None):
    """Stacked bars: for each policy and metric, the share of queries where it
    beats, ties or loses to the baseline; ▲/▼ marks a significant difference
    (Holm-adjusted)."""
    ax = _ax(ax)
    if len(df) == 0:
        return _empty(ax, "no comparison with a baseline")
    labels = [f"{p} · {m}" for p, m in zip(df["policy"], df["metric"])]
    y = np.arange(len(df))[::-1]
    win, tie, loss = (df[c].to_numpy(float) for c in ("win", "tie", "loss"))
    ax.barh(y, win, color="#2ca02c", label="wins")
    ax.barh(y, tie, left=win, color="#c7c7c7", label="ties")
    ax.barh(y, loss, left=win + tie, color="#d62728", label="losses")
    for yi, d in zip(y, df["direction"]):
        mark = {"better": "▲", "worse": "▼"}.get(str(d), "")
        if mark:
            ax.text(1.01, yi, mark, va="center", ha="left",
                    color="#2ca02c" if d == "better" else "#d62728", fontsize=10,
                    transform=ax.get_yaxis_transform())
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=SMALLEST_PT)
    ax.set_xlim(0, 1)
    ax.axvline(0.5, color="k", lw=0.6, ls=":")
    ax.set_xlabel(f"share of paired queries (vs baseline '{df['baseline'].iloc[0]}')")
    # the legend sits between the title and the bars (pads in points, so it
    # stays put whatever the figure's height)
    ax.set_title("Wins, ties and losses against the baseline", pad=20)
    ax.legend(fontsize=SMALLEST_PT, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=3,
              frameon=False, borderaxespad=0.1)
    return ax


# --------------------------------------------------------------------------
# Metrics over time
# --------------------------------------------------------------------------


def over_time_data(queries: pd.DataFrame, metric: str = "recall", window_days: float = 30.0,
                   budget: Any = None) -> pd.DataFrame:
    """A metric averaged over windows of simulated time, per policy.

    Each replicate's queries are averaged per window; the plotted value is the
    mean over replicates, and ``low``/``high`` the range of the replicates'
    window means (the spread between workloads, not a confidence interval).

    Returns
    -------
    DataFrame
        ``policy, budget, metric, t, mean, low, high, n_queries``; ``t`` is the
        middle of the part of the window that the queries span (from the first
        query's time to the last one's, over every policy and replicate at this
        budget): the middle of the window for a whole one, but within the data
        for the first and last windows, which the run may cover only in part
        (a 365-day run's last 7-day window, days 364 to 371, is placed
        between day 364 and the last query, not at day 367.5, past the
        horizon).
    """
    if metric not in queries.columns:
        raise KeyError(f"no metric column {metric!r} in the queries table")
    if len(queries) == 0:
        return pd.DataFrame(columns=["policy", "budget", "metric", "t", "mean", "low", "high",
                                     "n_queries"])
    budget = _pick_budget(queries, budget)
    sub = queries[queries["budget"] == budget]
    t = sub["t"].to_numpy(float)
    w = np.floor(t / window_days)
    frame = pd.DataFrame({"policy": sub["policy"].to_numpy(), "replicate": sub["replicate"],
                          "w": w, "v": sub[metric].to_numpy(float)})
    per = frame.groupby(["policy", "w", "replicate"], sort=False)["v"].agg(["mean", "count"])
    agg = per.groupby(level=[0, 1], sort=False).agg(mean=("mean", "mean"), low=("mean", "min"),
                                                    high=("mean", "max"),
                                                    n_queries=("count", "sum")).reset_index()
    # the window clipped to the span of the queries: a partial first or last
    # window is drawn inside the data it averages, never past the horizon
    first, last = (float(np.nanmin(t)), float(np.nanmax(t))) if np.isfinite(t).any() \
        else (-np.inf, np.inf)
    start = np.maximum(agg["w"].to_numpy(float) * window_days, first)
    end = np.minimum((agg["w"].to_numpy(float) + 1.0) * window_days, last)
    agg["t"] = (start + np.maximum(end, start)) / 2.0
    agg["budget"] = budget
    agg["metric"] = metric
    order = {p: i for i, p in enumerate(pd.unique(sub["policy"]))}
    agg = agg.sort_values(["policy", "t"], key=lambda c: c.map(order) if c.name == "policy"
                          else c, kind="stable")
    return agg[["policy", "budget", "metric", "t", "mean", "low", "high", "n_queries"]
               ].reset_index(drop=True)


def plot_over_time(df: pd.DataFrame, ax=None, colors: Mapping[str, str] | None = None):
    """A windowed metric over simulated time; the band spans the replicates.

    Each window is marked by a point, so that a window with a value between
    windows without one (no query, or a metric that is n/a there), which a
    line alone would draw with no length, still shows.
    """
    ax = _ax(ax)
    if len(df) == 0:
        return _empty(ax, "no queries")
    cols = _colors(df, colors)
    for pol, g in df.groupby("policy", sort=False):
        ax.plot(g["t"], g["mean"], "-o", ms=3, color=cols[pol], lw=1.8, label=str(pol))
        ax.fill_between(g["t"].to_numpy(float), g["low"].to_numpy(float),
                        g["high"].to_numpy(float), color=cols[pol], alpha=0.15, lw=0)
    metric = str(df["metric"].iloc[0])
    ax.set_xlabel("simulated time (days)")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} over time (band: range over replicates)")
    _legend(ax, df["policy"].nunique())
    ax.grid(alpha=0.3)
    return ax


# --------------------------------------------------------------------------
# The feedback loop: concentration of use
# --------------------------------------------------------------------------


def concentration_data(rankings: pd.DataFrame, queries: pd.DataFrame,
                       store: pd.DataFrame | None = None, *, window_days: float = 30.0,
                       top: int = 10, budget: Any = None) -> pd.DataFrame:
    """How concentrated the use of notes becomes over time, per policy.

    From the saved rankings, a note is *used* each time it is packed into a
    context. For each window of simulated time:

    * ``top_share``: the share of the window's packed slots taken by the
      ``top`` notes that had been packed most often *before* the window. It
      rises towards 1 when the feedback loop locks in on a few notes.
    * ``gini``: Gini coefficient of the cumulative use counts at the end of
      the window. With ``store`` (``store.parquet``), notes of the store that
      were never used count as zeros (comparable with ``recall_gini`` in
      ``arms.csv``, which also counts organic accesses); without it, only
      notes used at least once count.

    Parameters
    ----------
    rankings : DataFrame
        ``rankings.parquet`` (``replicate, policy, budget, query_id,
        note_id, packed``).
    queries : DataFrame
        The per-query table, for the query times.
    store : DataFrame, optional
        ``store.parquet``.

    Returns
    -------
    DataFrame
        ``policy, budget, replicate, t, top_share, gini, gini_over,
        packed_slots``; ``t`` is the end of the window.
    """
    cols = ["policy", "budget", "replicate", "t", "top_share", "gini", "gini_over",
            "packed_slots"]
    if rankings is None or len(rankings) == 0:
        return pd.DataFrame(columns=cols)
    budget = _pick_budget(rankings, budget)
    r = rankings[(rankings["budget"] == budget) & rankings["packed"].astype(bool)]
    qt = queries[queries["budget"] == budget][["replicate", "policy", "query_id", "t"]]
    r = r.merge(qt, on=["replicate", "policy", "query_id"], how="left")
    rows = []
    for (pol, rep), g in r.groupby(["policy", "replicate"], sort=False):
        g = g.sort_values("t", kind="stable")
        codes, uniq = pd.factorize(g["note_id"])
        counts = np.zeros(len(uniq), dtype=np.int64)
        w = np.floor(g["t"].to_numpy(float) / window_days).astype(np.int64)
        st = None
        if store is not None and len(store):
            st = store[(store["policy"] == pol) & (store["replicate"] == rep)
                       & (store["budget"] == budget)].sort_values("t")
        for wi in np.unique(w):
            sel = codes[w == wi]
            used_before = np.flatnonzero(counts > 0)
            if len(used_before):
                k = min(top, len(used_before))
                # ties broken by the lower code (first used), deterministic
                order = used_before[np.lexsort((used_before, -counts[used_before]))][:k]
                share = float(np.isin(sel, order).mean())
            else:
                share = np.nan
            counts += np.bincount(sel, minlength=len(counts))
            t_end = float((wi + 1) * window_days)
            used = counts[counts > 0]
            over = "used notes"
            if st is not None and len(st):
                n_store = int(np.interp(t_end, st["t"], st["store_notes"]))
                if n_store > len(used):
                    used = np.concatenate([used, np.zeros(n_store - len(used), np.int64)])
                    over = "store"
            rows.append((pol, budget, rep, t_end, share, gini(used), over, int(len(sel))))
    out = pd.DataFrame(rows, columns=cols)
    return out


def plot_concentration(df: pd.DataFrame, ax=None, colors: Mapping[str, str] | None = None,
                       y: str = "top_share", top: int | None = None):
    """The feedback loop over time: ``top_share`` (share of the contexts taken
    by the most-used notes so far) or ``gini`` (concentration of use counts).
    Lines are means over replicates; the band spans them."""
    ax = _ax(ax)
    if len(df) == 0:
        return _empty(ax, "no saved rankings (set save_rankings = true)")
    cols = _colors(df, colors)
    for pol, g in df.groupby("policy", sort=False):
        a = g.groupby("t")[y].agg(["mean", "min", "max"]).reset_index()
        ax.plot(a["t"], a["mean"], "-o", ms=3, color=cols[pol], lw=1.8, label=str(pol))
        ax.fill_between(a["t"].to_numpy(float), a["min"].to_numpy(float),
                        a["max"].to_numpy(float), color=cols[pol], alpha=0.15, lw=0)
    hi = float(np.nanmax(df[y].to_numpy(float))) if df[y].notna().any() else 1.0
    ax.set_ylim(0, min(1.02, max(0.05, hi * 1.15)))  # small shares stay readable
    ax.set_xlabel("simulated time (days)")
    if y == "top_share":
        who = f"the {top} most-used notes" if top else "the most-used notes"
        ax.set_ylabel(f"share of packed slots taken by\n{who} so far")
        ax.set_title("Feedback loop: do the same notes keep winning?")
    else:
        ax.set_ylabel("Gini of use counts")
        ax.set_title("Feedback loop: concentration of use")
    _legend(ax, df["policy"].nunique())
    ax.grid(alpha=0.3)
    return ax


def run_metric_data(arms: pd.DataFrame, metric: str = "recall_gini",
                    level: float = 0.95, *, replays: bool = False) -> pd.DataFrame:
    """A per-run metric (``arms.csv``: ``recall_gini``, ``evicted_notes`` ...)
    per policy and budget: mean over replicates and its interval
    (:func:`memsim.reporting.stats.run_metric_ci`).

    ``replays``: the replicates replay one stream (``Comparison.replays``):
    the mean over the replays, with no interval (``ci_over = "stream"``).

    Returns
    -------
    DataFrame
        ``policy, budget, metric, mean, ci_low, ci_high, n, ci_method, ci_over``.
    """
    rows = []
    if arms is not None and metric in arms.columns:
        for (pol, bud), g in arms.groupby(["policy", "budget"], sort=False):
            m, lo, hi, n, over, method = run_metric_ci(g[metric].to_numpy(float), level,
                                                       replays=replays, metric=metric)
            rows.append((pol, bud, metric, m, lo, hi, n, method, over))
    return pd.DataFrame(rows, columns=["policy", "budget", "metric", "mean", "ci_low", "ci_high",
                                       "n", "ci_method", "ci_over"])


def plot_run_metric(df: pd.DataFrame, ax=None, colors: Mapping[str, str] | None = None):
    """Bars of a per-run metric per policy, with its interval over replicates."""
    ax = _ax(ax)
    if len(df) == 0:
        return _empty(ax, "no per-run values")
    cols = _colors(df, colors)
    at = ""
    if df["budget"].nunique() > 1:
        # one budget's bars only, and the title says which
        picked = _pick_budget(df, None)
        df, at = df[df["budget"] == picked], f" at {picked} tokens"
    x = np.arange(len(df))
    y = df["mean"].to_numpy(float)
    lo = np.nan_to_num(np.clip(y - df["ci_low"].to_numpy(float), 0, None))
    hi = np.nan_to_num(np.clip(df["ci_high"].to_numpy(float) - y, 0, None))
    # without any interval (one replayed stream) no caps: they would read as a zero-width one
    has_ci = np.isfinite(df["ci_low"].to_numpy(float)).any()
    ax.bar(x, y, color=[cols[p] for p in df["policy"]],
           yerr=np.vstack([lo, hi]) if has_ci else None, capsize=4)
    ax.set_xticks(x)
    # long names are wrapped at their dashes and, when many, turned about
    # their anchor so that the layout engine keeps them inside the figure
    names = [_wrap(str(p), 18) for p in df["policy"]]
    if len(df) <= 4:
        ax.set_xticklabels(names, fontsize=SMALLEST_PT)
    else:
        ax.set_xticklabels(names, rotation=30, ha="right", rotation_mode="anchor",
                           fontsize=SMALLEST_PT)
    metric = str(df["metric"].iloc[0])
    ax.set_ylabel(metric)
    if (df["ci_method"] == "none").all():
        ax.set_title(f"{metric} at the end of the run{at} (one replayed stream: no interval)")
    elif not has_ci:
        why = "one replicate: " if (df["n"].to_numpy(float) <= 1).all() else ""
        ax.set_title(f"{metric} at the end of the run{at} ({why}no interval)")
    else:
        method = "Student t" if (df["ci_method"] == "t").any() else "bootstrap"
        ax.set_title(f"{metric} at the end of the run{at} (95% CI, {method}, over replicates)")
    ax.grid(alpha=0.3, axis="y")
    return ax


def store_size_data(store: pd.DataFrame, budget: Any = None) -> pd.DataFrame:
    """Live notes in the store over time, per policy: the mean over replicates
    on a common daily grid.

    ``store.parquet`` holds a store size at each query's time, and each
    replicate draws its queries on days of its own, so the replicates are put
    on one grid before they are averaged: on day ``d``, a replicate's size is
    the last one measured by the end of day ``d``, carried forward over days
    without a query. A policy's grid runs day by day from the first day on
    which every replicate has a measurement to the last day any replicate has
    one, so every point is a mean over all of its replicates, never over a
    subset that changes from day to day.

    Returns
    -------
    DataFrame
        ``policy, budget, t, store_notes, store_tokens, n_replicates``, in
        time order within each policy; ``t`` is the day (whole days of
        simulated time).
    """
    cols = ["policy", "budget", "t", "store_notes", "store_tokens", "n_replicates"]
    if store is None or len(store) == 0:
        return pd.DataFrame(columns=cols)
    budget = _pick_budget(store, budget)
    s = store[store["budget"] == budget]
    frame = pd.DataFrame({"policy": s["policy"].to_numpy(),
                          "replicate": s["replicate"].to_numpy(),
                          "t": s["t"].to_numpy(float),
                          "day": np.floor(s["t"].to_numpy(float)),
                          "store_notes": s["store_notes"].to_numpy(float),
                          "store_tokens": s["store_tokens"].to_numpy(float)})
    frame = frame[np.isfinite(frame["t"].to_numpy())].sort_values("t", kind="stable")
    # each replicate's size at the end of each day it was measured on
    daily = frame.groupby(["policy", "day", "replicate"], sort=False)[
        ["store_notes", "store_tokens"]].last()
    parts = []
    for pol in pd.unique(frame["policy"]):  # a few policies: the days are vectorised
        wide = daily.xs(pol, level="policy").unstack("replicate").sort_index()
        days = np.arange(wide.index.min(), wide.index.max() + 1.0)
        wide = wide.reindex(days).ffill()  # carried forward over days without a query
        notes, tokens = wide["store_notes"], wide["store_tokens"]
        full = notes.notna().all(axis=1).to_numpy()  # every replicate measured by then
        parts.append(pd.DataFrame({"policy": pol, "budget": budget, "t": days[full],
                                   "store_notes": notes.to_numpy()[full].mean(axis=1),
                                   "store_tokens": tokens.to_numpy()[full].mean(axis=1),
                                   "n_replicates": notes.shape[1]}))
    if not parts:
        return pd.DataFrame(columns=cols)
    return pd.concat(parts, ignore_index=True)[cols]


def plot_store_size(df: pd.DataFrame, ax=None, colors: Mapping[str, str] | None = None):
    """Store size over time: eviction policies show as lines that level off.

    ``df`` is :func:`store_size_data`'s: each replicate's size carried forward
    to every day, then averaged over the replicates.
    """
    ax = _ax(ax)
    if len(df) == 0:
        return _empty(ax, "no store sizes")
    cols = _colors(df, colors)
    for pol, g in df.groupby("policy", sort=False):
        g = g.sort_values("t", kind="stable")
        # a lone day (a run of one day) would be a line of no length: mark it
        ax.plot(g["t"], g["store_notes"], "-o" if len(g) == 1 else "-", ms=3,
                color=cols[pol], lw=1.6, label=str(pol))
    ax.set_xlabel("simulated time (days)")
    ax.set_ylabel("live notes in the store")
    ax.set_title("Store size over time (mean over replicates, each carried forward to "
                 "every day)")
    _legend(ax, df["policy"].nunique())
    ax.grid(alpha=0.3)
    return ax


def hidden_data(queries: pd.DataFrame, budget: Any = None) -> pd.DataFrame:
    """What each policy left out of the oracle's packed set, and why.

    Over every query (all replicates) at one budget: the notes the oracle
    packs (``oracle_notes``) and, per reason (:data:`memsim.evaluation.metrics.HIDDEN_REASONS`),
    the share of them the policy hid for that reason (sum of ``hidden_REASON``
    over sum of ``oracle_notes``).

    Returns
    -------
    DataFrame
        ``policy, budget, oracle_per_query, hidden`` (the share hidden, all
        reasons) and one ``hidden_REASON`` share column per reason; empty when
        the queries have no ``hidden_*`` columns.
    """
    cols = ["policy", "budget", "oracle_per_query", "hidden", *HIDDEN_COLUMNS]
    if queries is None or not len(queries) or not set(HIDDEN_COLUMNS) <= set(queries.columns):
        return pd.DataFrame(columns=cols)
    budget = _pick_budget(queries, budget)
    q = queries[queries["budget"] == budget]
    g = q.groupby("policy", sort=False)
    sums = g[["oracle_notes", *HIDDEN_COLUMNS]].sum()
    den = sums["oracle_notes"].to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = pd.DataFrame({c: np.where(den > 0, sums[c].to_numpy(float) / den, np.nan)
                            for c in HIDDEN_COLUMNS}, index=sums.index)
    out.insert(0, "hidden", out[list(HIDDEN_COLUMNS)].sum(axis=1, min_count=1))
    out.insert(0, "oracle_per_query", g["oracle_notes"].mean())
    out.insert(0, "budget", budget)
    return out.reset_index()[cols]


def superseded_use_data(arms: pd.DataFrame, budget: Any = None,
                        level: float = 0.95, *, replays: bool = False) -> pd.DataFrame:
    """How long superseded notes keep being used (``arms.csv``'s
    ``superseded_used_Dd``): per policy and D, the mean over replicates and
    its interval (Student t with fewer than
    :data:`~memsim.reporting.stats.MIN_REPLICATES`;
    :func:`memsim.reporting.stats.run_metric_ci`).

    ``replays``: the replicates replay one stream (``Comparison.replays``):
    the mean over the replays, with no interval (``ci_over = "stream"``).

    Returns
    -------
    DataFrame
        ``policy, budget, days, mean, ci_low, ci_high, n, ci_over``; empty
        when the run has no superseded note.
    """
    cols = ["policy", "budget", "days", "mean", "ci_low", "ci_high", "n", "ci_over"]
    if (arms is None or not len(arms) or "superseded_notes" not in arms
            or not (arms["superseded_notes"] > 0).any()):
        return pd.DataFrame(columns=cols)
    budget = _pick_budget(arms, budget)
    a = arms[arms["budget"] == budget]
    rows = []
    for pol, g in a.groupby("policy", sort=False):
        for d, c in zip(SUPERSEDED_USE_DAYS, SUPERSEDED_USE_COLUMNS):
            if c not in g:
                continue
            v = g[c].to_numpy(float)
            if not np.isfinite(v).any():
                continue
            m, lo, hi, n, over, _ = run_metric_ci(v, level, replays=replays, metric=c)
            rows.append((pol, budget, d, m, lo, hi, n, over))
    return pd.DataFrame(rows, columns=cols)


def plot_superseded_use(df: pd.DataFrame, ax=None, colors: Mapping[str, str] | None = None):
    """Share of superseded notes still used at least D days after they became
    wrong, against D: the feedback loop entrenching wrong notes."""
    ax = _ax(ax)
    if len(df) == 0:
        return _empty(ax, "no superseded notes")
    cols = _colors(df, colors)
    days = sorted(df["days"].unique())
    x_of = {d: i for i, d in enumerate(days)}
    for pol, g in df.groupby("policy", sort=False):
        x = np.array([x_of[d] for d in g["days"]])
        ax.plot(x, g["mean"], marker="o", color=cols[pol], lw=1.6, label=str(pol))
        lo, hi = g["ci_low"].to_numpy(float), g["ci_high"].to_numpy(float)
        if np.isfinite(lo).any():
            ax.fill_between(x, lo, hi, color=cols[pol], alpha=0.15, lw=0)
    ax.set_xticks(range(len(days)))
    ax.set_xticklabels([f"{d:g}" for d in days], fontsize=SMALLEST_PT)
    ax.set_xlabel("days after the note was superseded")
    ax.set_ylabel("share still used")
    ax.set_ylim(-0.02, 1.02)
    if (df["ci_over"] == "stream").all():
        ax.set_title("Superseded notes still used D days after (one replayed stream: "
                     "no interval)")
    else:
        ax.set_title("Superseded notes still used D days after (95% CI over replicates)")
    _legend(ax, df["policy"].nunique())
    ax.grid(alpha=0.3)
    return ax


# --------------------------------------------------------------------------
# Sweeps (from sweep/trials.csv)
# --------------------------------------------------------------------------


#: Columns of a trials table that are neither objectives nor parameters.
_TRIAL_META = {"number", "state", "origin", "retry_of", "worker", "seconds", "duration",
               "datetime_start", "datetime_complete", "error"}


def trial_columns(trials: pd.DataFrame, params: Sequence[str] | None = None
                  ) -> tuple[list[str], list[str]]:
    """(objective columns, parameter columns) of a trials table.

    Objectives are ``value`` or the ``values_*`` columns. Parameters are
    ``params`` when given (e.g. the sweep manifest's list), else the
    ``params_*`` columns (``study.trials_dataframe()``'s naming), else every
    other column that is not bookkeeping (``number``, ``state``, ``worker``
    ...) or a per-replicate value (``*_rep<r>``), which is the layout of
    ``memsim sweep``'s ``trials.csv`` (parameters named by their dotted keys).
    """
    cols = [str(c) for c in trials.columns]
    objs = ["value"] if "value" in cols else [c for c in cols if c.startswith("values_")]
    if params is not None:
        pars = [p for p in params if p in cols]
    elif any(c.startswith("params_") for c in cols):
        pars = [c for c in cols if c.startswith("params_")]
    else:
        pars = [c for c in cols if c not in _TRIAL_META and c not in objs
                and not c.startswith(("user_attrs_", "system_attrs_"))
                and not re.search(r"_rep\d+$", c)]
    return objs, pars


def _complete(trials: pd.DataFrame) -> pd.DataFrame:
    if "state" in trials.columns:
        trials = trials[trials["state"].astype(str).str.upper().str.endswith("COMPLETE")]
    return trials


def sweep_history_data(trials: pd.DataFrame, objective: str | None = None,
                       direction: str = "maximize") -> pd.DataFrame:
    """Objective of each completed trial and the best so far.

    Returns
    -------
    DataFrame
        ``number, value, best``.
    """
    objs, _ = trial_columns(trials)
    objective = objective or (objs[0] if objs else None)
    if objective is None or objective not in trials.columns:
        return pd.DataFrame(columns=["number", "value", "best"])
    t = _complete(trials)
    num = t["number"] if "number" in t.columns else pd.Series(np.arange(len(t)), index=t.index)
    out = pd.DataFrame({"number": num.to_numpy(), "value": t[objective].to_numpy(float)})
    out = out[np.isfinite(out["value"])].sort_values("number").reset_index(drop=True)
    acc = np.maximum.accumulate if direction.startswith("max") else np.minimum.accumulate
    out["best"] = acc(out["value"].to_numpy(float)) if len(out) else []
    out.attrs["objective"] = objective
    return out


def plot_sweep_history(df: pd.DataFrame, ax=None, label: str | None = None):
    """Objective value of each trial (dots) and the best so far (line)."""
    ax = _ax(ax)
    if len(df) == 0:
        return _empty(ax, "no completed trials")
    ax.plot(df["number"], df["value"], "o", ms=4, color="#1f77b4", alpha=0.6, label="trial")
    ax.step(df["number"], df["best"], where="post", color="#d62728", lw=1.8, label="best so far")
    ax.set_xlabel("trial")
    ax.set_ylabel(label or df.attrs.get("objective", "objective"))
    ax.set_title("Sweep history")
    ax.legend(fontsize=SMALLEST_PT)
    ax.grid(alpha=0.3)
    return ax


def plot_param_importance(df: pd.DataFrame, ax=None):
    """Horizontal bars of a parameter importance table (``param``,
    ``importance``; ``sweep/importance.csv`` of one objective).

    The sweep fills the table with Optuna's fANOVA importance
    (:func:`memsim.sweep.outputs.importance_table`): the share of the objective's
    variance, over the completed trials, that a random forest fitted to
    them attributes to each parameter alone (normalised to sum to 1).
    """
    ax = _ax(ax)
    if len(df) == 0:
        return _empty(ax, "no parameter importance")
    df = df.sort_values("importance", ascending=False, kind="stable")
    y = np.arange(len(df))[::-1]
    ax.barh(y, df["importance"], color="#1f77b4")
    for yi, v in zip(y, df["importance"].to_numpy(float)):
        ax.text(v, yi, f" {v:.2f}", va="center", ha="left", fontsize=SMALLEST_PT)
    ax.set_yticks(y)
    ax.set_yticklabels([_wrap(str(p), 28) for p in df["param"]], fontsize=SMALLEST_PT)
    ax.set_xlim(0, max(1.0, float(df["importance"].max()) * 1.15))
    ax.set_xlabel("share of the objective's variance (fANOVA, normalised to sum to 1)")
    ax.set_title("Parameter importance (Optuna fANOVA)")
    ax.grid(alpha=0.3, axis="x")
    return ax


def slice_data(trials: pd.DataFrame, objective: str | None = None,
               params: Sequence[str] | None = None, log: Mapping[str, bool] | None = None,
               direction: str = "maximize",
               others: Sequence[tuple[str, str]] = ()) -> pd.DataFrame:
    """Each completed trial's objective against each parameter (a slice plot).

    Parameters
    ----------
    log : dict, optional
        Parameter -> whether its range is searched on a log scale (the
        ``log = true`` of the ``[sweep]`` table); drawn on a log axis.
    others : sequence of (column, direction), optional
        The sweep's other objectives, which break a tie on this one as the
        sweep breaks it (:func:`~memsim.reporting.stats.best_row`).

    Returns
    -------
    DataFrame
        ``param, value, objective, number, best`` (one row per trial and
        parameter; ``best``: the trial is the best on the objective);
        ``attrs`` holds the objective's name and, per parameter, ``log`` and
        ``kind`` (numeric or categorical).
    """
    objs, params = trial_columns(trials, params)
    objective = objective or (objs[0] if objs else None)
    cols = ["param", "value", "objective", "number", "best"]
    if objective is None or objective not in trials.columns or not params:
        return pd.DataFrame(columns=cols)
    t = _complete(trials)
    y = t[objective].to_numpy(float)
    ok = np.isfinite(y)
    t, y = t[ok], y[ok]
    num = (t["number"].to_numpy() if "number" in t.columns else np.arange(len(t)))
    best = np.zeros(len(t), dtype=bool)
    if len(t):
        def signed(col: str, d: str) -> np.ndarray:
            v = pd.to_numeric(t[col], errors="coerce").to_numpy(np.float64)
            return v if d.startswith("max") else -v
        best[best_row([signed(objective, direction),
                       *(signed(c, d) for c, d in others if c in t.columns)])] = True
    rows, kinds, logs = [], {}, {}
    for p in params:
        name = p.removeprefix("params_")
        x = t[p]
        numeric = pd.to_numeric(x, errors="coerce")
        kinds[name] = "numeric" if numeric.notna().all() and x.notna().all() else "categorical"
        logs[name] = bool((log or {}).get(name, (log or {}).get(p, False)))
        rows.append(pd.DataFrame({"param": name, "value": x.to_numpy(dtype=object),
                                  "objective": y, "number": num, "best": best}))
    out = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=cols)
    out.attrs.update({"objective": objective.removeprefix("values_"), "kind": kinds,
                      "log": logs})
    return out


def _nice_log_ticks(lo: float, hi: float) -> list[float]:
    """At most about six tick values between ``lo`` and ``hi`` (> 0) on a
    log axis: 1-2-5 steps per decade, thinned to decades on a wide range."""
    if not (lo > 0 and hi > lo):
        return [lo] if lo > 0 else []
    for mults in ((1, 2, 5), (1, 3), (1,)):
        ticks = [m * 10.0 ** k for k in range(math.floor(math.log10(lo)),
                                             math.ceil(math.log10(hi)) + 1)
                 for m in mults if lo <= m * 10.0 ** k <= hi]
        if len(ticks) <= 6:
            break
    if len(ticks) > 6:  # many decades: every other one
        ticks = ticks[::2]
    if len(ticks) < 2:  # less than a decade: the ends and a middle value
        mid = math.sqrt(lo * hi)
        ticks = sorted({float(f"{v:.2g}") for v in (lo, mid, hi)})
    return ticks


def _tick_label(v: float) -> str:
    """A short tick label: 7, 20, 0.5, 1e+04 (never 2x10^1 overlapping 3x10^1)."""
    if v == 0:
        return "0"
    if 1 <= abs(v) < 1e5 and float(v).is_integer():
        return f"{v:.0f}"
    if 1e-3 <= abs(v) < 1e5:
        return f"{v:.3g}"
    return f"{v:.0e}"


def plot_slice(df: pd.DataFrame, fig=None, label: str | None = None) -> list:
    """One panel per parameter: each trial's objective against the
    parameter's value (colour: trial number; red ring: the best trial).

    Log-scale parameters get a log axis with a few plain-number ticks; long
    dotted keys are wrapped at their dots; categories are spread over their
    column. Draws on ``fig`` (a new figure when None) two panels a row, one
    on a figure narrower than 6 in, and returns the list of Axes.
    """
    params = list(dict.fromkeys(df["param"])) if len(df) else []
    ncols = max(1, min(2 if fig is None or fig.get_figwidth() >= 6 else 1, len(params)))
    nrows = max(1, math.ceil(len(params) / ncols))
    if fig is None:
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=(7.5, 3.2 * nrows), layout="constrained")
    axes = list(np.asarray(fig.subplots(nrows, ncols, squeeze=False)).ravel())
    for ax in axes[len(params):]:
        ax.set_visible(False)
    if not params:
        _empty(axes[0], "no completed trials")
        axes[0].set_visible(True)
        return axes[:1]
    label = label or df.attrs.get("objective", "objective")
    kinds, logs = df.attrs.get("kind", {}), df.attrs.get("log", {})
    n_max = max(float(df["number"].max()), 1.0)
    from matplotlib import colormaps
    from matplotlib.colors import ListedColormap

    # the light end of "Blues" is left out: the first trials stay visible
    cmap = ListedColormap(colormaps["Blues"](np.linspace(0.25, 1.0, 256)))
    sc = None
    for i, (ax, p) in enumerate(zip(axes, params)):
        g = df[df["param"] == p]
        yv = g["objective"].to_numpy(float)
        if kinds.get(p) == "categorical":
            cats = sorted(pd.unique(g["value"].astype(str)))
            pos = {c: j for j, c in enumerate(cats)}
            x = np.array([pos[str(v)] for v in g["value"]], dtype=float)
            # spread the points of one category evenly over its column
            rank = pd.Series(x).groupby(x).cumcount().to_numpy(float)
            size = pd.Series(x).groupby(x).transform("size").to_numpy(float)
            x = x + 0.5 * ((rank + 0.5) / size - 0.5)
            ax.set_xticks(range(len(cats)))
            ax.set_xticklabels([_wrap(c, 14) for c in cats], fontsize=SMALLEST_PT)
            ax.set_xlim(-0.6, len(cats) - 0.4)
        else:
            x = g["value"].to_numpy(float)
            if logs.get(p) and np.all(x > 0):
                ax.set_xscale("log")
                lo, hi = float(x.min()), float(x.max())
                ticks = _nice_log_ticks(lo, hi)
                ax.set_xticks(ticks)
                ax.set_xticklabels([_tick_label(v) for v in ticks])
                ax.xaxis.set_minor_formatter(_null_formatter())
            else:
                from matplotlib.ticker import MaxNLocator

                ax.xaxis.set_major_locator(MaxNLocator(5))
        sc = ax.scatter(x, yv, c=g["number"].to_numpy(float), cmap=cmap, vmin=0, vmax=n_max,
                        s=22, edgecolors="0.3", linewidths=0.4)
        b = g["best"].to_numpy(bool)
        if b.any():
            ax.scatter(x[b], yv[b], s=90, facecolors="none", edgecolors="#d62728",
                       linewidths=1.6, label="best trial")
        ax.set_xlabel(_wrap(p, 34) + (" (log)" if logs.get(p) else ""), fontsize=SMALLEST_PT + 1)
        if i % ncols == 0:
            ax.set_ylabel(label)
        ax.tick_params(labelsize=SMALLEST_PT)
        ax.grid(alpha=0.3)
    if sc is not None:
        cb = fig.colorbar(sc, ax=axes[:len(params)], shrink=0.9, pad=0.02)
        cb.set_label("trial", fontsize=SMALLEST_PT)
        cb.ax.tick_params(labelsize=SMALLEST_PT)
    fig.suptitle(f"Slice plot: {label} against each parameter", fontsize=11)
    return axes[:len(params)]


def _null_formatter():
    from matplotlib.ticker import NullFormatter

    return NullFormatter()


def pareto_data(trials: pd.DataFrame, objectives: Sequence[str] | None = None,
                directions: Sequence[str] | None = None) -> pd.DataFrame:
    """Completed trials on two objectives, with their Pareto-front membership.

    Parameters
    ----------
    objectives : two column names, optional
        Default: the first two objective columns.
    directions : two of "maximize" / "minimize", optional
        Default: maximize both.

    Returns
    -------
    DataFrame
        ``number, x, y, on_front``; ``attrs`` holds the objective names.
    """
    objs, _ = trial_columns(trials)
    objectives = list(objectives or objs[:2])
    if len(objectives) < 2:
        return pd.DataFrame(columns=["number", "x", "y", "on_front"])
    directions = list(directions or ["maximize", "maximize"])
    t = _complete(trials)
    num = t["number"] if "number" in t.columns else pd.Series(np.arange(len(t)), index=t.index)
    x = t[objectives[0]].to_numpy(float)
    y = t[objectives[1]].to_numpy(float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y, num = x[ok], y[ok], num.to_numpy()[ok]
    # flip to "larger is better" on both axes, then find the non-dominated
    sx = 1.0 if directions[0].startswith("max") else -1.0
    sy = 1.0 if directions[1].startswith("max") else -1.0
    a, b = sx * x, sy * y
    dominated = np.zeros(len(a), dtype=bool)
    for i in range(len(a)):  # trials are few (hundreds)
        better_eq = (a >= a[i]) & (b >= b[i])
        strictly = (a > a[i]) | (b > b[i])
        dominated[i] = bool(np.any(better_eq & strictly))
    out = pd.DataFrame({"number": num, "x": x, "y": y, "on_front": ~dominated})
    out.attrs.update({"x": objectives[0], "y": objectives[1], "directions": directions})
    return out


def plot_pareto_front(df: pd.DataFrame, ax=None):
    """Trials on two objectives; the Pareto front is highlighted and joined."""
    ax = _ax(ax)
    if len(df) == 0:
        return _empty(ax, "needs a sweep with two objectives")
    off = df[~df["on_front"]]
    on = df[df["on_front"]].sort_values("x")
    ax.scatter(off["x"], off["y"], s=14, color="0.6", alpha=0.7, label="dominated")
    ax.plot(on["x"], on["y"], "-o", color="#d62728", ms=5, lw=1.4, label="Pareto front")
    dirs = df.attrs.get("directions", ["maximize", "maximize"])
    ax.set_xlabel(f"{df.attrs.get('x', 'objective 0')} ({dirs[0]})")
    ax.set_ylabel(f"{df.attrs.get('y', 'objective 1')} ({dirs[1]})")
    ax.set_title("Pareto front of the sweep")
    ax.legend(fontsize=SMALLEST_PT)
    ax.grid(alpha=0.3)
    return ax
