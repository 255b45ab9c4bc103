"""Summary statistics with confidence intervals.

Replicates are independent streams, so the unit of the confidence interval is
the replicate: each replicate's mean over its queries is one observation and
the 95% interval is Student's t over those. With a single replicate the queries
are the only spread available; the interval is then over queries (normal
approximation), and the ``ci_over`` column says so.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps

from .metrics import METRIC_COLUMNS

__all__ = ["mean_ci", "summarise", "RUN_METRICS"]

#: Per-run metrics (one value per replicate and arm).
RUN_METRICS = ("recall_gini", "store_notes", "store_tokens")


def mean_ci(values: np.ndarray, level: float = 0.95) -> tuple[float, float, float, int]:
    """Mean and Student-t confidence interval of finite values: (mean, lo, hi, n)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    n = len(v)
    if n == 0:
        return (np.nan, np.nan, np.nan, 0)
    m = float(v.mean())
    if n == 1:
        return (m, np.nan, np.nan, 1)
    se = float(v.std(ddof=1)) / np.sqrt(n)
    h = float(sps.t.ppf(0.5 + level / 2, n - 1)) * se
    return (m, m - h, m + h, n)


def summarise(queries: pd.DataFrame, arms: pd.DataFrame | None = None,
              store: pd.DataFrame | None = None, level: float = 0.95) -> pd.DataFrame:
    """policy x budget x metric: mean, ci_low, ci_high, n, ci_over."""
    keys = ["policy", "budget"]
    metrics = [m for m in METRIC_COLUMNS if m in queries.columns]
    per_rep = queries.groupby(keys + ["replicate"], sort=False)[metrics].mean()
    n_rep = queries["replicate"].nunique() if len(queries) else 0
    rows = []
    for (pol, bud), grp in per_rep.groupby(level=[0, 1], sort=False):
        for m in metrics:
            if n_rep >= 2:
                mean, lo, hi, n = mean_ci(grp[m].to_numpy(), level)
                over = "replicates"
            else:
                v = queries.loc[(queries["policy"] == pol) & (queries["budget"] == bud), m]
                mean, lo, hi, n = _normal_ci(v.to_numpy(np.float64), level)
                over = "queries"
            rows.append((pol, bud, m, mean, lo, hi, n, over))
    run = _run_level(arms, store)
    if run is not None:
        for (pol, bud), grp in run.groupby(keys, sort=False):
            for m in RUN_METRICS:
                if m in grp:
                    mean, lo, hi, n = mean_ci(grp[m].to_numpy(), level)
                    rows.append((pol, bud, m, mean, lo, hi, n, "replicates"))
    return pd.DataFrame(rows, columns=keys + ["metric", "mean", "ci_low", "ci_high", "n",
                                              "ci_over"])


def _normal_ci(v: np.ndarray, level: float) -> tuple[float, float, float, int]:
    v = v[np.isfinite(v)]
    n = len(v)
    if n == 0:
        return (np.nan, np.nan, np.nan, 0)
    m = float(v.mean())
    if n == 1:
        return (m, np.nan, np.nan, 1)
    h = float(sps.norm.ppf(0.5 + level / 2)) * float(v.std(ddof=1)) / np.sqrt(n)
    return (m, m - h, m + h, n)


def _run_level(arms: pd.DataFrame | None, store: pd.DataFrame | None) -> pd.DataFrame | None:
    if arms is None or len(arms) == 0:
        return None
    out = arms.copy()
    if store is not None and len(store):
        last = store.sort_values("t").groupby(["replicate", "policy", "budget"]).last()
        out = out.merge(last[["store_notes", "store_tokens"]].reset_index(),
                        on=["replicate", "policy", "budget"], how="left")
    return out
