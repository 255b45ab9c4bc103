"""Summary statistics, paired tests and rounding for policy comparisons.

Units of uncertainty
--------------------
Replicates are independent streams; queries within a replicate are not
independent of each other (they share a store, and feedback couples them).
So the honest unit of a confidence interval is the replicate:

* with at least :data:`MIN_REPLICATES` replicates, the 95% interval is a
  percentile bootstrap over replicates: each replicate's mean over its queries
  is one observation (``ci_over = "replicates"``);
* with fewer, a bootstrap over three or four values is degenerate (three
  values have only ten distinct resamples), so the queries are resampled
  instead, within each replicate (a stratified bootstrap;
  ``ci_over = "queries"``). This interval ignores the variation between
  workloads and is narrower than the replicate interval would be: a report
  says so next to it.

Either way the point estimate is the same: the mean over replicates of each
replicate's mean over its queries (NaN query values, e.g. recall where a query
has nothing relevant, are left out of their replicate's mean).

Replays of one stream
---------------------
A run over a fixed stream (a trace, a stream folder, LoCoMo) replays the
same queries in every replicate: its replicates differ at most by a
policy's own randomness, not by the workload, and its (replicate, query)
rows are not independent observations. :func:`fold_replays` finds them
(every replicate holds the same ``query_id`` at the same ``t``, with the
same actor, category, relevant count and budget) and folds
them into one replicate, each query's values the mean over its replays;
:func:`summarise` and :func:`paired_tests` resample those queries. So the
intervals and ``n`` of such a run are those of its queries, whatever
``replicates`` is (three replays of a 20-query trace are 20 queries, not
60, and five or more give no interval over identical replicates).

A per-run metric (:data:`RUN_METRICS`: one value per replicate and arm) has
no queries to resample, and its replays are no sample of anything: identical
when the replay is deterministic (an interval over them would have zero
width), else apart only by the policy's own randomness, which is not the
workload's uncertainty an interval claims. So :func:`summarise` gives it the
mean over the replays and no interval (:func:`run_metric_ci`: ``ci_low`` and
``ci_high`` NaN, ``n = 1``, ``ci_over = "stream"``, ``ci_method = "none"``).

Run-level shares
----------------
``utility_share`` (:data:`RATIO_METRICS`) is not a mean of per-query values
but a ratio of sums, ``S = sum_q utility_q / sum_q oracle_utility_q`` over
the queries with ``oracle_utility > 0`` (every replicate pooled; per policy
and budget). A per-query ratio can reach -4 when stale notes are packed, so
the mean of ``utility_ratio`` can rank two policies the other way round from
their summed utility; the share cannot. Its interval is a percentile
bootstrap of the ratio of sums, with the same unit rule as above: with at
least :data:`MIN_REPLICATES` replicates, resample replicates (their sums of
utility and of oracle) and recompute the ratio; with fewer, resample queries
within each replicate, add the sums over replicates, and recompute the ratio.

Every bootstrap draws from an explicit :class:`numpy.random.Generator` built
from a fixed seed and the names of what is resampled (never the global random
state), so a report is reproducible bit for bit.

Paired comparisons
------------------
Every policy of an experiment sees the identical stream of each replicate
(common random numbers), so a query ``(replicate, query_id)`` is a matched
pair across policies. :func:`paired_tests` compares each policy with a
baseline on those pairs:

* ``diff``: mean paired difference ``policy - baseline`` (same estimator as
  above) with its bootstrap interval (same unit rule as above);
* ``p_value``: two-sided Wilcoxon signed-rank test on the per-query pairs
  (:func:`scipy.stats.wilcoxon`, zero differences dropped: ``zero_method =
  "wilcox"``). It treats queries as independent, which the feedback loop makes
  only approximately true; the bootstrap interval over replicates does not
  rely on it;
* ``p_holm``: Holm's step-down adjustment (:func:`holm`) over every comparison
  of the table (each policy x budget x metric), so that "significant" in a
  report controls the family-wise error rate of that report;
* effect sizes: the matched-pairs rank-biserial correlation
  ``r = (W+ - W-) / (W+ + W-)`` (W+ and W- the rank sums of the positive and
  negative differences), Cohen's ``d_z = mean(d) / sd(d)``;
* ``wins``, ``ties``, ``losses``: pairs where the policy is better, equal or
  worse than the baseline, in the metric's direction
  (:data:`memsim.evaluation.metrics.HIGHER_IS_BETTER`); for a metric with
  no better direction (:data:`~memsim.evaluation.metrics.UNDIRECTED_METRICS`,
  such as ``tokens_used``), higher, equal or lower.

For ``utility_share`` the difference is ``S_policy - S_baseline`` over the
queries both policies have with ``oracle_utility > 0``; its interval
resamples the same queries (or replicates) for both policies (common random
numbers), so the shared workload noise cancels. Its p-value is a two-sided
z-test of that difference with the delta-method standard error of a
difference of two ratios of sums on the same query pairs::

    e_q = (u_q^P - S_P o_q^P) / sum o^P - (u_q^B - S_B o_q^B) / sum o^B
    se^2 = n / (n - 1) * sum_q e_q^2,     z = (S_P - S_B) / se

(``u`` utility, ``o`` oracle_utility, n pairs). With 16 pairs or fewer
the normal approximation does not hold (three queries that gain alike would
give se = 0 and p = 0): the p-value is then exact, a paired randomisation
test over all 2^n ways of swapping the two policies' values within pairs
(the share of those whose |S_P - S_B| reaches the observed one), so that
it is never below 2 / 2^n and five pairs or fewer are never significant at
0.05. Like the Wilcoxon test it treats queries as independent; it enters
the same Holm family. Effect sizes and wins/ties/losses of that row are
those of the per-query utility pairs, and ``statistic`` holds z instead of
W+.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from memsim.core.errors import ConfigError
from memsim.core.params import did_you_mean
from memsim.evaluation.metrics import (HIGHER_IS_BETTER, METRIC_COLUMNS,
                                       MIN_REPLICATES, OLD_RECALL_COLUMN, UNDIRECTED_METRICS)
# the printed numbers' rules live in .numbers (the run folder's notebook view
# reads them too); named here as well, where tables import them from
from .numbers import (SHARE_METRICS, column_decimals, format_ci, format_fixed, format_p,
                      round_to_ci)

__all__ = [
    "best_row",
    "ratio_sums",
    "mean_ci",
    "run_metric_ci",
    "summarise",
    "fold_replays",
    "utility_share",
    "utility_share_by",
    "ratio_of_sums",
    "MissingColumnError",
    "RATIO_METRICS",
    "SHARE_METRICS",
    "column_decimals",
    "format_fixed",
    "bootstrap_mean_ci",
    "paired_tests",
    "holm",
    "rank_biserial",
    "round_to_ci",
    "format_ci",
    "format_p",
    "RUN_METRICS",
    "run_metric_range",
    "HEADLINE_METRICS",
    "MIN_REPLICATES",
    "N_BOOT",
    "SEED",
]

#: Per-run metrics (one value per replicate and arm).
RUN_METRICS = ("recall_gini", "store_notes", "store_tokens")

#: Run-level ratios of sums: name -> (numerator column, denominator column).
#: The value is ``sum(num) / sum(den)`` over the queries with ``den > 0``.
RATIO_METRICS = {"utility_share": ("utility", "oracle_utility")}

#: Metrics a report compares by default (the rest stay in ``summary.csv``):
#: the share of the achievable utility first (it, not the mean of
#: ``utility_ratio``, ranks policies), then recall, recall of old notes and
#: the stale notes packed.
HEADLINE_METRICS = ("utility_share", "recall", OLD_RECALL_COLUMN, "harm", "stale_rate",
                    "utility", "tokens_used", "precision", "ndcg@10", "mrr", "answer_prob")

#: Default number of bootstrap resamples and the default seed.
N_BOOT = 1000
SEED = 0

# Largest (resamples x observations) block of bootstrap weights held at once.
_BLOCK = 2_000_000


# --------------------------------------------------------------------------
# Student t (kept for run-level metrics with few replicates)
# --------------------------------------------------------------------------


def mean_ci(values: np.ndarray, level: float = 0.95) -> tuple[float, float, float, int]:
    """Mean and Student-t confidence interval of the finite values.

    Parameters
    ----------
    values : array_like
        Observations; NaN and infinite values are ignored.
    level : float
        Confidence level.

    Returns
    -------
    (mean, lo, hi, n) : tuple
        ``mean +- t_{n-1, (1+level)/2} * sd / sqrt(n)``; the bounds are NaN when
        fewer than two finite values remain.
    """
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


def run_metric_range(metric: str) -> tuple[float, float]:
    """The values a per-run measure can take (of ``summary.csv``,
    ``arms.csv`` or ``store.parquet``): [0, 1] for a Gini coefficient or a
    share, [0, inf) for a count, (-inf, inf) for a name it does not know."""
    if metric in ("recall_gini", "prefilter_overlap") or metric.startswith("superseded_used_"):
        return (0.0, 1.0)
    if (metric in ("store_tokens", "prefilter_sampled", "invalidated_superseded")
            or metric.endswith("_notes")):
        return (0.0, np.inf)
    return (-np.inf, np.inf)


def run_metric_ci(values: np.ndarray, level: float = 0.95, *, replays: bool = False,
                  n_boot: int = N_BOOT, seed: int = SEED,
                  min_replicates: int = MIN_REPLICATES, metric: str = ""
                  ) -> tuple[float, float, float, int, str, str]:
    """Mean of a per-run metric over replicates, its interval and how it was made.

    Parameters
    ----------
    values : array_like
        One value per replicate (of one policy and budget); NaN and infinite
        values are ignored.
    level : float
        Confidence level.
    replays : bool
        Whether the replicates replay one stream (:func:`fold_replays` folded
        their queries): then they are not independent samples, and no
        interval is claimed (module doc).
    n_boot, seed : int
        Bootstrap resamples and seed.
    min_replicates : int
        Fewest finite values for a bootstrap interval (else Student t).
    metric : str
        The measure's name: a Student-t interval is clipped to the values
        it can take (:func:`run_metric_range`: two replicates' Gini
        coefficients of 0.696 and 0.794 give [0.122, 1.368] unclipped,
        [0.122, 1] clipped). A bootstrap interval lies within the values already.

    Returns
    -------
    (mean, lo, hi, n, ci_over, ci_method) : tuple
        Independent replicates: the bootstrap of :func:`bootstrap_mean_ci`
        with at least ``min_replicates`` finite values (``"replicates",
        "bootstrap"``), else the Student-t interval of :func:`mean_ci`
        (``"replicates", "t"``). Replays of one stream: the mean over the
        replays, NaN bounds, ``n = 1`` (0 when no value is finite),
        ``"stream", "none"``.
    """
    v = np.asarray(values, dtype=np.float64)
    finite = v[np.isfinite(v)]
    if replays:
        # one stream is one observation, however often it was replayed
        mean = float(finite.mean()) if len(finite) else np.nan
        return (mean, np.nan, np.nan, min(len(finite), 1), "stream", "none")
    if len(finite) >= min_replicates:
        return (*bootstrap_mean_ci(v, level, n_boot, seed), "replicates", "bootstrap")
    mean, lo, hi, n = mean_ci(v, level)
    low, high = run_metric_range(metric)
    if np.isfinite(lo):  # (NaN bounds stay NaN: no interval)
        lo, hi = float(np.clip(lo, low, high)), float(np.clip(hi, low, high))
    return (mean, lo, hi, n, "replicates", "t")


# --------------------------------------------------------------------------
# Bootstrap machinery
# --------------------------------------------------------------------------


def _rng(seed: int, *names: object) -> np.random.Generator:
    """A generator keyed by ``seed`` and names, independent of call order."""
    keys = [int.from_bytes(hashlib.blake2b(str(n).encode(), digest_size=4).digest(), "little")
            for n in names]
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), *keys])))


def _resample_weights(rng: np.random.Generator, n_boot: int, n: int):
    """Yield blocks of bootstrap weights: counts (b, n) of each observation in
    each resample. Weights instead of index gathers let one matrix product
    resample every metric and every policy at once."""
    step = max(1, _BLOCK // max(n, 1))
    done = 0
    while done < n_boot:
        b = min(step, n_boot - done)
        idx = rng.integers(0, n, size=(b, n))
        flat = (np.arange(b)[:, None] * n + idx).ravel()
        yield np.bincount(flat, minlength=b * n).reshape(b, n).astype(np.float64)
        done += b


def _boot_means(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap means (n_boot, K) of the columns of ``values`` (n, K); NaN
    entries are left out of each resample's mean (NaN if nothing is left)."""
    n, k = values.shape
    finite = np.isfinite(values)
    filled = np.where(finite, values, 0.0)
    fin = finite.astype(np.float64)
    out = np.empty((n_boot, k))
    row = 0
    for w in _resample_weights(rng, n_boot, n):
        s = w @ filled
        c = w @ fin
        with np.errstate(invalid="ignore", divide="ignore"):
            out[row:row + len(w)] = np.where(c > 0, s / np.where(c > 0, c, 1.0), np.nan)
        row += len(w)
    return out


def _nanmean0(x: np.ndarray) -> np.ndarray:
    """Column means of finite values along axis 0; NaN for an all-NaN column."""
    finite = np.isfinite(x)
    c = finite.sum(axis=0)
    s = np.where(finite, x, 0.0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(c > 0, s / np.where(c > 0, c, 1), np.nan)


def _percentile(boot: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    a = (1.0 - level) / 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns stay NaN
        lo, hi = np.nanquantile(boot, [a, 1.0 - a], axis=0)
    return lo, hi


def _hierarchical(blocks: Sequence[np.ndarray], level: float, n_boot: int, seed: int,
                  names: tuple, min_replicates: int = MIN_REPLICATES):
    """Mean over replicates of per-replicate means, and its bootstrap interval.

    ``blocks[r]`` is an (n_r, K) array of replicate r's observations (K
    quantities resampled together, so their resamples are paired). Returns
    (mean, lo, hi, n, over): arrays of K values and the unit ("replicates" or
    "queries").
    """
    k = blocks[0].shape[1]
    rep_means = np.vstack([_nanmean0(b) for b in blocks])  # (R, K)
    mean = _nanmean0(rep_means)
    r = len(blocks)
    if r >= min_replicates:
        boot = _boot_means(rep_means, n_boot, _rng(seed, *names, "replicates"))
        n = np.isfinite(rep_means).sum(axis=0)
        over = "replicates"
    else:
        acc = np.zeros((n_boot, k))
        cnt = np.zeros((n_boot, k))
        for i, b in enumerate(blocks):
            if len(b) == 0:
                continue
            bm = _boot_means(b, n_boot, _rng(seed, *names, "queries", i))
            ok = np.isfinite(bm)
            acc += np.where(ok, bm, 0.0)
            cnt += ok
        with np.errstate(invalid="ignore", divide="ignore"):
            boot = np.where(cnt > 0, acc / np.where(cnt > 0, cnt, 1), np.nan)
        n = sum(np.isfinite(b).sum(axis=0) for b in blocks)
        over = "queries"
    lo, hi = _percentile(boot, level)
    # a single finite observation gives no interval at all
    few = np.asarray(n) < 2
    lo = np.where(few, np.nan, lo)
    hi = np.where(few, np.nan, hi)
    return mean, lo, hi, np.asarray(n, dtype=np.int64), over


def bootstrap_mean_ci(values: np.ndarray, level: float = 0.95, n_boot: int = N_BOOT,
                      seed: int = SEED, strata: np.ndarray | None = None
                      ) -> tuple[float, float, float, int]:
    """Mean and percentile-bootstrap confidence interval of finite values.

    Parameters
    ----------
    values : array_like
        Observations; NaN and infinite values are ignored.
    level : float
        Confidence level (0.95: the 2.5th and 97.5th percentiles of the
        bootstrap means).
    n_boot : int
        Number of resamples.
    seed : int
        Seed of the resampling generator (a fixed seed: reproducible).
    strata : array_like, optional
        Group labels (e.g. replicates). Values are then resampled within each
        group and the estimate is the mean of the group means.

    Returns
    -------
    (mean, lo, hi, n) : tuple
        The bounds are NaN with fewer than two finite values.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    if strata is None:
        blocks = [v[:, None]]
    else:
        s = np.asarray(strata).ravel()
        if len(s) != len(v):
            raise ValueError(f"strata has {len(s)} labels for {len(v)} values")
        blocks = [v[s == g][:, None] for g in pd.unique(s)]
    if not any(np.isfinite(b).any() for b in blocks):
        return (np.nan, np.nan, np.nan, 0)
    mean, lo, hi, n, _ = _hierarchical(blocks, level, n_boot, seed, ("bootstrap_mean_ci",),
                                       min_replicates=10**9)
    return (float(mean[0]), float(lo[0]), float(hi[0]), int(n[0]))


# --------------------------------------------------------------------------
# Aligning arms on (replicate, query_id)
# --------------------------------------------------------------------------


def fold_replays(queries: pd.DataFrame) -> pd.DataFrame:
    """``queries`` with the replicates of one replayed stream folded into one.

    When there are several replicates and each holds the same queries (the
    same ``query_id`` at the same ``t``, asked by the same ``actor``, of the
    same ``category``, with the same ``n_relevant`` and ``budget_tokens``,
    for every policy and budget: those of these columns the table has),
    they are replays of one stream (module doc): the result has one row per
    (policy, budget, query), replicate 0, each numeric column the mean over
    the replays (NaN left out; NaN where every replay is NaN) and every
    other column its first replay's. Otherwise ``queries`` is returned as it
    is. Synthetic replicates draw their own streams: their query times
    differ, or, where every time is 0 (``age_mode = "zero"``), their
    queries' actors, classes and relevant notes do, so they are not folded
    (two drawn streams that agree on every one of these facts, a few
    queries each, would be).

    Parameters
    ----------
    queries : DataFrame
        One row per (replicate, policy, budget, query).

    Returns
    -------
    DataFrame
        The folded table, or ``queries`` itself.
    """
    need = {"replicate", "policy", "budget", "query_id", "t"}
    if not need <= set(queries.columns) or queries["replicate"].nunique() < 2:
        return queries
    keys = ["policy", "budget", "query_id", "t"]
    # the stream's facts of each query: not the policies' (equal in replays)
    facts = [c for c in ("actor", "category", "n_relevant", "budget_tokens")
             if c in queries.columns]
    reps = [g[keys + facts].sort_values(keys, kind="stable").reset_index(drop=True)
            for _, g in queries.groupby("replicate", sort=True)]
    if any(len(r) != len(reps[0]) or not r.equals(reps[0]) for r in reps[1:]):
        return queries
    group = ["policy", "budget", "query_id"]
    numeric = [c for c in queries.columns
               if c not in group and c not in ("replicate", "t")
               and pd.api.types.is_numeric_dtype(queries[c])
               and not pd.api.types.is_bool_dtype(queries[c])]
    first = queries[queries["replicate"] == queries["replicate"].min()]
    means = queries.groupby(group, sort=False)[numeric].mean()  # (an all-NaN query: NaN)
    for c in numeric:  # counts stay integers where every replay agrees
        if pd.api.types.is_integer_dtype(queries[c]) and (means[c] % 1 == 0).all():
            means[c] = means[c].astype(queries[c].dtype)
    out = first.drop(columns=numeric).join(means, on=group)[list(queries.columns)]
    out["replicate"] = np.zeros(len(out), dtype=queries["replicate"].dtype)
    out.attrs = {**queries.attrs, "folded_replays": int(queries["replicate"].nunique())}
    return out.reset_index(drop=True)


def _policy_order(queries: pd.DataFrame) -> list[str]:
    return [str(p) for p in pd.unique(queries["policy"])]


def _aligned(queries: pd.DataFrame, metrics: list[str], budget) -> tuple[list[str], dict]:
    """Per replicate, an array (n_queries, n_policies, n_metrics) aligned on
    ``query_id`` (NaN where a policy has no row for a query)."""
    sub = queries[queries["budget"] == budget]
    pols = _policy_order(sub)
    out: dict = {}
    for rep, grp in sub.groupby("replicate", sort=True):
        qids = np.sort(pd.unique(grp["query_id"]))
        arr = np.full((len(qids), len(pols), len(metrics)), np.nan)
        for j, pol in enumerate(pols):
            g = grp[grp["policy"] == pol]
            if g["query_id"].duplicated().any():
                raise ValueError(f"policy {pol!r}, budget {budget}, replicate {rep}: "
                                 "duplicate query_id rows; cannot pair queries")
            pos = np.searchsorted(qids, g["query_id"].to_numpy())
            arr[pos, j, :] = g[metrics].to_numpy(np.float64)
        out[rep] = arr
    return pols, out


# --------------------------------------------------------------------------
# Run-level shares (ratios of sums)
# --------------------------------------------------------------------------


def best_row(keys: Sequence[np.ndarray]) -> int:
    """The row largest on ``keys[0]``, ties broken by ``keys[1]``, and so on,
    then the lowest row (each key signed so that larger is better; NaN
    last). With a sweep's objectives as the keys, the best on the first
    objective among the trials tied there is one no other trial dominates,
    the one the sweep names best (a tie broken by row alone could pick a
    dominated trial)."""
    rows = np.arange(len(keys[0]))
    signed = [-np.asarray(k, dtype=np.float64) for k in reversed(keys)]
    return int(np.lexsort([rows, *signed])[0])


def ratio_of_sums(num: np.ndarray, den: np.ndarray) -> float:
    """``sum(num) / sum(den)`` over the pairs with finite values and ``den > 0``.

    NaN when no pair qualifies. This is the pooled estimator of
    :data:`RATIO_METRICS`: each query weighs by its denominator, so a query
    with little to gain cannot swing the value the way a per-query ratio can.
    """
    top, total = ratio_sums(num, den)
    return top / total if total > 0 else float("nan")


def ratio_sums(num: np.ndarray, den: np.ndarray) -> tuple[float, float]:
    """``(sum(num), sum(den))`` over the pairs :func:`ratio_of_sums` counts
    (finite values, ``den > 0``): what a ratio pooled over several parts
    (a sweep's replicates) adds up."""
    n = np.asarray(num, dtype=np.float64)
    d = np.asarray(den, dtype=np.float64)
    ok = _valid_pairs(n, d)
    return float(n[ok].sum()), float(d[ok].sum())


class MissingColumnError(ConfigError, KeyError):
    """A queries table lacks a column a metric needs (:data:`RATIO_METRICS`).

    A :class:`~memsim.core.errors.ConfigError` (a damaged or old run folder:
    the command line prints one line, exit code 2, as it does for a
    :class:`~memsim.reporting.rundir.RunFolderError`) and a :class:`KeyError`,
    which :func:`utility_share` has always raised for a missing column.
    """

    def __str__(self) -> str:
        return Exception.__str__(self)  # the message, not KeyError's quoted repr


def _ratio_columns(name: str, queries: pd.DataFrame) -> tuple[str, str]:
    num, den = RATIO_METRICS[name]
    for c in (num, den):
        if c not in queries.columns:
            raise MissingColumnError(
                f"{name} needs the column {c!r}, which the queries table lacks "
                "(a run folder written before it existed: re-run its config.toml)")
    return num, den


def utility_share(queries: pd.DataFrame, by: Sequence[str] | None = None) -> float | pd.Series:
    """Share of the achievable utility: ``sum(utility) / sum(oracle_utility)``.

    Pooled over every row of ``queries`` with ``oracle_utility > 0``; with
    ``by`` (e.g. ``by="policy"``), one share per group, as
    :func:`utility_share_by`. A frame that holds several policies or budgets
    needs ``by``: a share pooled over different policies means nothing, so it
    is refused rather than computed::

        S = sum_q utility_q / sum_q oracle_utility_q,   q: oracle_utility_q > 0

    1 means every query got the oracle's best packing; negative gains of
    packed stale notes pull it down. NaN when no query has an achievable
    utility.

    Raises
    ------
    MissingColumnError
        If the frame has no ``utility`` or ``oracle_utility`` column (a
        :class:`KeyError`, and a ``ConfigError``).
    ConfigError
        If the frame holds several policies or budgets and ``by`` does not
        group by each of them (a share pooled over budgets means nothing
        either), or ``by`` names a column the frame does not have; a
        :class:`ValueError` too.
    """
    num, den = _ratio_columns("utility_share", queries)
    by = [by] if isinstance(by, str) else (None if by is None else list(by))
    _check_by(queries, by or [])
    mixed = [c for c in ("policy", "budget") if c in queries and queries[c].nunique() > 1
             and c not in (by or ())]
    if mixed:
        counts = ", ".join(f"{queries[c].nunique()} {c}s" if c == "budget"
                           else f"{queries[c].nunique()} policies" for c in mixed)
        raise ConfigError(f"utility_share: the frame holds {counts}; pass "
                          f"by={[*(by or []), *mixed]!r} for one share per group, or select "
                          "one first")
    if by is not None:
        return utility_share_by(queries, by)
    return ratio_of_sums(queries[num].to_numpy(np.float64), queries[den].to_numpy(np.float64))


def utility_share_by(queries: pd.DataFrame, by: Sequence[str] = ("policy", "budget")
                     ) -> pd.Series:
    """:func:`utility_share` of each group (default: per policy and budget).

    ``by=["policy", "budget", "replicate"]`` gives one share per replicate
    (e.g. a sweep objective averaged over replicates). Groups keep the
    order in which they first appear.
    """
    num, den = _ratio_columns("utility_share", queries)
    by = list(by)
    _check_by(queries, by)
    o = queries[den].to_numpy(np.float64)
    u = queries[num].to_numpy(np.float64)
    ok = np.isfinite(u) & np.isfinite(o) & (o > 0)
    part = pd.DataFrame({"u": np.where(ok, u, 0.0), "o": np.where(ok, o, 0.0)})
    for c in by:
        part[c] = queries[c].to_numpy()
    sums = part.groupby(by, sort=False)[["u", "o"]].sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(sums["o"] > 0, sums["u"] / sums["o"].where(sums["o"] > 0, 1.0), np.nan)
    return pd.Series(share, index=sums.index, name="utility_share")


def _check_by(queries: pd.DataFrame, by: list) -> None:
    missing = [c for c in by if c not in queries.columns]
    if missing:
        raise MissingColumnError(f"utility_share: by={by!r}: the frame has no column "
                                 f"{missing[0]!r}{did_you_mean(missing[0], queries.columns)}")


def _valid_pairs(u: np.ndarray, o: np.ndarray) -> np.ndarray:
    return np.isfinite(u) & np.isfinite(o) & (o > 0)


def _boot_sums(blocks: Sequence[np.ndarray], n_boot: int, seed: int, names: tuple,
               min_replicates: int) -> tuple[np.ndarray, np.ndarray, str, int]:
    """Column sums of replicate blocks and their bootstrap resamples.

    ``blocks[r]`` is an (n_r, K) array without NaN (invalid queries already
    zeroed). Returns (sums (K,), bootstrap sums (n_boot, K), unit, n units):
    with at least ``min_replicates`` blocks, whole replicates are resampled
    (their column sums); else queries within each replicate, the resampled
    sums added over replicates. Every column sees the same resample, so
    ratios and differences formed from them are paired.
    """
    k = blocks[0].shape[1]
    per = np.vstack([b.sum(axis=0) for b in blocks])  # (R, K)
    boot = np.zeros((n_boot, k))
    if len(blocks) >= min_replicates:
        row = 0
        for w in _resample_weights(_rng(seed, *names, "replicates"), n_boot, len(blocks)):
            boot[row:row + len(w)] = w @ per
            row += len(w)
        return per.sum(axis=0), boot, "replicates", len(blocks)
    for i, b in enumerate(blocks):
        if len(b) == 0:
            continue
        row = 0
        for w in _resample_weights(_rng(seed, *names, "queries", i), n_boot, len(b)):
            boot[row:row + len(w)] += w @ b
            row += len(w)
    return per.sum(axis=0), boot, "queries", sum(len(b) for b in blocks)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(b > 0, a / np.where(b > 0, b, 1.0), np.nan)


def _ratio_summary(queries: pd.DataFrame, name: str, budget, level: float, n_boot: int,
                   seed: int, min_replicates: int) -> dict[str, tuple]:
    """Per policy at one budget: (share, lo, hi, n, unit) of a ratio metric."""
    num, den = _ratio_columns(name, queries)
    pols, per_rep = _aligned(queries, [num, den], budget)
    blocks, counts = [], np.zeros(len(pols), dtype=np.int64)
    for arr in per_rep.values():
        u, o = arr[:, :, 0], arr[:, :, 1]
        ok = _valid_pairs(u, o)
        counts += ok.sum(axis=0)
        blocks.append(np.concatenate([np.where(ok, u, 0.0), np.where(ok, o, 0.0)], axis=1))
    sums, boot, over, n_units = _boot_sums(blocks, n_boot, seed, ("share", name, budget),
                                           min_replicates)
    p = len(pols)
    share = _div(sums[:p], sums[p:])
    lo, hi = _percentile(_div(boot[:, :p], boot[:, p:]), level)
    out = {}
    for j, pol in enumerate(pols):
        # replicates that contribute (a positive oracle sum), or valid queries
        n = (int(sum((b[:, p + j] > 0).any() for b in blocks)) if over == "replicates"
             else int(counts[j]))
        few = n < 2  # one unit gives no interval
        out[pol] = (float(share[j]), np.nan if few else float(lo[j]),
                    np.nan if few else float(hi[j]), n, over)
    return out


#: pairs up to which a ratio metric's paired p-value is exact
#: (:func:`_swap_p`): 2^16 = 65,536 swaps
EXACT_SWAPS = 16


def _swap_p(x: np.ndarray, diff: float) -> float:
    """Exact two-sided p-value of a difference of ratios of sums ``diff =
    S_P - S_B`` over n pairs ``x`` (n, 4) = (u_P, o_P, u_B, o_B), each o >
    0: the share of the 2^n swaps of the two policies' values within pairs
    whose |S_P - S_B| reaches |diff| (the identity and the swap of all
    included, so it is at least 2 / 2^n). A swap whose difference equals
    the observed one but for the rounding of its sums counts as reaching it."""
    n = len(x)
    swaps = ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1).astype(np.float64)
    up, op, ub, ob = (x[:, k] for k in range(4))
    d = ((up.sum() + swaps @ (ub - up)) / (op.sum() + swaps @ (ob - op))
         - (ub.sum() + swaps @ (up - ub)) / (ob.sum() + swaps @ (op - ob)))
    return float(np.mean(np.abs(d) >= abs(diff) * (1.0 - 1e-9)))


def _ratio_paired(arr_by_rep: dict, b: int, others: list[int], level: float, n_boot: int,
                  seed: int, names: tuple, min_replicates: int) -> list[dict]:
    """Paired difference of a ratio metric between policies ``others`` and ``b``.

    ``arr_by_rep[r]`` is (n_q, P, 2): numerator and denominator per policy.
    """
    blocks = []
    for arr in arr_by_rep.values():
        ub, ob = arr[:, b, 0], arr[:, b, 1]
        cols = []
        for j in others:
            uj, oj = arr[:, j, 0], arr[:, j, 1]
            ok = _valid_pairs(uj, oj) & _valid_pairs(ub, ob)  # the same queries for both
            cols += [np.where(ok, uj, 0.0), np.where(ok, oj, 0.0),
                     np.where(ok, ub, 0.0), np.where(ok, ob, 0.0)]
        blocks.append(np.stack(cols, axis=1))
    sums, boot, over, _ = _boot_sums(blocks, n_boot, seed, names, min_replicates)
    alld = np.concatenate(blocks, axis=0)
    rows = []
    for k in range(len(others)):
        su, so, sbu, sbo = sums[4 * k:4 * k + 4]
        s_p, s_b = _div(su, so), _div(sbu, sbo)
        bt = boot[:, 4 * k:4 * k + 4]
        lo, hi = _percentile((_div(bt[:, 0], bt[:, 1]) - _div(bt[:, 2], bt[:, 3]))[:, None],
                             level)
        x = alld[:, 4 * k:4 * k + 4]
        ok = (x[:, 1] > 0) & (x[:, 3] > 0)
        x = x[ok]
        n = len(x)
        diff = float(s_p - s_b) if n else np.nan
        z = p = np.nan
        if n > 1:
            # delta method: linearised influence of each pair on S_P - S_B
            e = (x[:, 0] - s_p * x[:, 1]) / so - (x[:, 2] - s_b * x[:, 3]) / sbo
            se = math.sqrt(n / (n - 1) * float((e * e).sum()))
            if se > 0:
                z = diff / se
                p = float(2.0 * sps.norm.sf(abs(z)))
            elif diff != 0:  # every pair moves in lockstep
                z, p = math.copysign(np.inf, diff), 0.0
            if n <= EXACT_SWAPS and diff != 0:
                p = _swap_p(x, diff)
        rows.append({"n_pairs": n, "policy_mean": float(s_p), "baseline_mean": float(s_b),
                     "diff": diff, "diff_ci_low": float(lo[0]) if n > 1 else np.nan,
                     "diff_ci_high": float(hi[0]) if n > 1 else np.nan, "ci_over": over,
                     "statistic": z, "p_value": p, "d": x[:, 0] - x[:, 2]})
    return rows


# --------------------------------------------------------------------------
# Summary table
# --------------------------------------------------------------------------


def summarise(queries: pd.DataFrame, arms: pd.DataFrame | None = None,
              store: pd.DataFrame | None = None, level: float = 0.95, *,
              metrics: Iterable[str] | None = None, n_boot: int = N_BOOT, seed: int = SEED,
              min_replicates: int = MIN_REPLICATES) -> pd.DataFrame:
    """Mean and 95% bootstrap interval of every metric, per policy and budget.

    Parameters
    ----------
    queries : DataFrame
        One row per (replicate, policy, budget, query): the run folder's
        ``queries.parquet``.
    arms, store : DataFrame, optional
        ``arms.csv`` and ``store.parquet``: add the per-run metrics
        :data:`RUN_METRICS` (final store size, recall Gini).
    level : float
        Confidence level.
    metrics : iterable of str, optional
        Metrics to summarise: query columns and the run-level ratios of
        :data:`RATIO_METRICS` (default: ``utility_share`` when its columns
        exist, then every column of :data:`memsim.evaluation.metrics.METRIC_COLUMNS`
        present).
    n_boot, seed : int
        Bootstrap resamples and seed.
    min_replicates : int
        Fewest replicates for an interval over replicates (see module doc).

    Returns
    -------
    DataFrame
        Columns ``policy, budget, metric, mean, ci_low, ci_high, n, ci_over,
        ci_method``. ``n`` counts replicates when ``ci_over = "replicates"``,
        finite query values when ``"queries"``, and is 1 when ``"stream"``.
        A ratio metric's ``mean`` is the pooled ratio of sums (module doc)
        and ``n`` counts the replicates or queries with a positive
        denominator; its interval is a bootstrap of the ratio of sums
        (``ci_method = "bootstrap-ratio"``). Per-run
        metrics (:data:`RUN_METRICS`) have no queries to resample: their
        interval is over replicates (:func:`run_metric_ci`), Student t with
        fewer than ``min_replicates`` (``ci_method = "t"``); when the
        queries are replays of one stream (:func:`fold_replays`) they have
        none: the mean over the replays, ``ci_low`` and ``ci_high`` NaN,
        ``n = 1``, ``ci_over = "stream"``, ``ci_method = "none"``. Wherever
        there is no interval (both bounds NaN: no finite value, or one),
        ``ci_method`` is ``"none"``.
    """
    keys = ["policy", "budget", "metric", "mean", "ci_low", "ci_high", "n", "ci_over",
            "ci_method"]
    queries = fold_replays(queries)
    if metrics is None:
        metrics = [*RATIO_METRICS, *METRIC_COLUMNS]
    metrics = [m for m in metrics if _has_metric(queries, m)]
    cols = [m for m in metrics if m not in RATIO_METRICS]
    rows = []
    if len(queries) and metrics:
        for bud in pd.unique(queries["budget"]):
            cells: dict[tuple[str, str], tuple] = {}
            if cols:
                pols, per_rep = _aligned(queries, cols, bud)
                blocks = [a.reshape(len(a), -1) for a in per_rep.values()]
                mean, lo, hi, n, over = _hierarchical(blocks, level, n_boot, seed,
                                                      ("summary", bud), min_replicates)
                for k, (pol, m) in enumerate((p, m) for p in pols for m in cols):
                    cells[pol, m] = (mean[k], lo[k], hi[k], int(n[k]), over, "bootstrap")
            for m in metrics:
                if m in RATIO_METRICS:
                    res = _ratio_summary(queries, m, bud, level, n_boot, seed, min_replicates)
                    for pol, vals in res.items():
                        cells[pol, m] = (*vals, "bootstrap-ratio")
            for pol in _policy_order(queries[queries["budget"] == bud]):
                for m in metrics:
                    if (pol, m) in cells:
                        rows.append((pol, bud, m, *cells[pol, m]))
    replays = bool(queries.attrs.get("folded_replays"))
    run = _run_level(arms, store)
    if run is not None:
        for (pol, bud), grp in run.groupby(["policy", "budget"], sort=False):
            for m in RUN_METRICS:
                if m not in grp:
                    continue
                rows.append((pol, bud, m, *run_metric_ci(
                    grp[m].to_numpy(np.float64), level, replays=replays, n_boot=n_boot,
                    seed=seed + _stable(pol, bud, m), min_replicates=min_replicates,
                    metric=m)))
    out = pd.DataFrame(rows, columns=keys)
    # no interval (no value, or one): no method
    out.loc[out["ci_low"].isna() & out["ci_high"].isna(), "ci_method"] = "none"
    return out


def _has_metric(queries: pd.DataFrame, m: str) -> bool:
    """Whether ``queries`` can give metric ``m`` (a column, or a ratio's columns)."""
    if m in RATIO_METRICS:
        return all(c in queries.columns for c in RATIO_METRICS[m])
    return m in queries.columns


def _stable(*names: object) -> int:
    return int.from_bytes(hashlib.blake2b(repr(names).encode(), digest_size=3).digest(), "little")


def _run_level(arms: pd.DataFrame | None, store: pd.DataFrame | None) -> pd.DataFrame | None:
    if arms is None or len(arms) == 0:
        return None
    out = arms.copy()
    if store is not None and len(store):
        last = store.sort_values("t").groupby(["replicate", "policy", "budget"]).last()
        out = out.merge(last[["store_notes", "store_tokens"]].reset_index(),
                        on=["replicate", "policy", "budget"], how="left")
    elif store is not None:  # a run with no tick to record: its rows say so (NaN, n 0)
        out = out.assign(store_notes=np.nan, store_tokens=np.nan)
    return out


# --------------------------------------------------------------------------
# Paired tests
# --------------------------------------------------------------------------


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values.

    With the m finite p-values sorted ascending, ``p_(1) <= ... <= p_(m)``::

        p~_(i) = max_{j <= i} min(1, (m - j + 1) * p_(j))

    Rejecting where ``p~ < alpha`` controls the family-wise error rate at
    ``alpha`` (Holm 1979). NaN p-values (comparisons that were not tested)
    stay NaN and do not count in m.

    Parameters
    ----------
    pvalues : sequence of float

    Returns
    -------
    ndarray
        Adjusted p-values, in the input order.
    """
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = len(ok)
    if m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled)
    return out


def rank_biserial(d: np.ndarray) -> float:
    """Matched-pairs rank-biserial correlation of paired differences.

    Zero differences are dropped (as in the Wilcoxon test); the absolute
    differences are ranked (ties get average ranks), and
    ``r = (W+ - W-) / (W+ + W-)`` with W+ (W-) the rank sum of the positive
    (negative) differences: +1 when every pair favours the first sample,
    -1 when every pair favours the second. NaN when every difference is 0.
    """
    d = np.asarray(d, dtype=np.float64)
    d = d[np.isfinite(d) & (d != 0)]
    if len(d) == 0:
        return float("nan")
    r = sps.rankdata(np.abs(d))
    wp = r[d > 0].sum()
    wm = r[d < 0].sum()
    return float((wp - wm) / (wp + wm))


def _wilcoxon_p(d: np.ndarray) -> float:
    if not np.any(d != 0):
        return float("nan")  # no non-zero pair: nothing to test
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # normal approximation notes for ties/zeros
        return float(sps.wilcoxon(d, zero_method="wilcox", alternative="two-sided").pvalue)


def paired_tests(queries: pd.DataFrame, baseline: str | None = None,
                 metrics: Iterable[str] | None = None, *, level: float = 0.95,
                 alpha: float = 0.05, n_boot: int = N_BOOT, seed: int = SEED,
                 min_replicates: int = MIN_REPLICATES) -> pd.DataFrame:
    """Paired comparison of each policy with a baseline, per budget and metric.

    Queries are paired on ``(replicate, query_id)`` within a budget; a pair
    where either value is NaN is left out of that metric. The replicates of
    one replayed stream are folded first (:func:`fold_replays`): each query
    is one pair.

    Parameters
    ----------
    queries : DataFrame
        The run's per-query table.
    baseline : str, optional
        Policy to compare against (default: the first policy in the table).
    metrics : iterable of str, optional
        Query columns and ratio metrics (:data:`RATIO_METRICS`); default
        :data:`HEADLINE_METRICS` present in ``queries``.
    level, alpha : float
        Confidence level of the intervals; significance level of ``significant``
        (on the Holm-adjusted p-values).
    n_boot, seed, min_replicates
        As in :func:`summarise`.

    Returns
    -------
    DataFrame
        One row per (budget, policy != baseline, metric): ``budget, policy,
        baseline, metric, higher_is_better, n_pairs, baseline_mean,
        policy_mean, diff, diff_ci_low, diff_ci_high, ci_over, statistic
        (W+; z for a ratio metric), p_value, p_holm, significant, direction
        ("better", "worse" or ""), rank_biserial, cohen_dz, wins, ties,
        losses``. Empty (with these columns) when there is only one policy.
    """
    cols = ["budget", "policy", "baseline", "metric", "higher_is_better", "n_pairs",
            "baseline_mean", "policy_mean", "diff", "diff_ci_low", "diff_ci_high", "ci_over",
            "statistic", "p_value", "p_holm", "significant", "direction", "rank_biserial",
            "cohen_dz", "wins", "ties", "losses"]
    queries = fold_replays(queries)  # a replayed stream's queries are paired once
    if metrics is None:
        metrics = [m for m in HEADLINE_METRICS if _has_metric(queries, m)]
    else:
        metrics = list(metrics)
        missing = [m for m in metrics if not _has_metric(queries, m)]
        if missing:
            raise KeyError(f"no column {missing[0]!r} in the queries table")
    if len(queries) == 0 or not metrics:
        return _typed_tests(pd.DataFrame(columns=cols))
    pols_all = _policy_order(queries)
    if baseline is None:
        baseline = pols_all[0]
    if baseline not in pols_all:
        raise KeyError(f"baseline {baseline!r} is not a policy of the table; "
                       f"policies: {', '.join(pols_all)}")
    cols_m = [m for m in metrics if m not in RATIO_METRICS]
    mpos = {m: i for i, m in enumerate(metrics)}
    rows = []
    for bud in pd.unique(queries["budget"]):
        pols = _policy_order(queries[queries["budget"] == bud])
        if baseline not in pols:
            continue
        b = pols.index(baseline)
        others = [j for j, p in enumerate(pols) if p != baseline]
        if not others:
            continue
        for m in metrics:
            if m in RATIO_METRICS:
                _, rat = _aligned(queries, list(_ratio_columns(m, queries)), bud)
                res = _ratio_paired(rat, b, others, level, n_boot, seed,
                                    ("paired-share", m, bud, baseline), min_replicates)
                for j, r in zip(others, res):
                    rows.append(_paired_row(bud, pols[j], baseline, m, r))
        if not cols_m:
            continue
        _, per_rep = _aligned(queries, cols_m, bud)
        # differences and baseline values per replicate: (n_q, len(others), M)
        diffs, bases, alls = [], [], []
        for arr in per_rep.values():
            base = arr[:, b:b + 1, :]
            other = arr[:, others, :]
            pair_ok = np.isfinite(base) & np.isfinite(other)
            diffs.append(np.where(pair_ok, other - base, np.nan))
            bases.append(np.where(pair_ok, np.broadcast_to(base, other.shape), np.nan))
            alls.append(np.where(pair_ok, other, np.nan))
        k = len(others) * len(cols_m)
        blocks = [np.concatenate([d.reshape(len(d), k), p.reshape(len(p), k),
                                  x.reshape(len(x), k)], axis=1)
                  for d, p, x in zip(diffs, bases, alls)]
        mean, lo, hi, _, over = _hierarchical(blocks, level, n_boot, seed,
                                              ("paired", bud, baseline), min_replicates)
        d_all = np.concatenate(diffs, axis=0)
        for oi, j in enumerate(others):
            for mi, m in enumerate(cols_m):
                kk = oi * len(cols_m) + mi
                d = d_all[:, oi, mi]
                d = d[np.isfinite(d)]
                rows.append(_paired_row(bud, pols[j], baseline, m, {
                    "n_pairs": len(d), "baseline_mean": mean[k + kk],
                    "policy_mean": mean[2 * k + kk], "diff": mean[kk],
                    "diff_ci_low": lo[kk], "diff_ci_high": hi[kk], "ci_over": over,
                    "statistic": _w_plus(d) if len(d) else np.nan,
                    "p_value": _wilcoxon_p(d) if len(d) else np.nan, "d": d}))
    # one order whatever the computation order: budget, policy, metric
    bpos = {bb: i for i, bb in enumerate(pd.unique(queries["budget"]))}
    ppos = {p: i for i, p in enumerate(pols_all)}
    rows.sort(key=lambda r: (bpos[r["budget"]], ppos[r["policy"]], mpos[r["metric"]]))
    out = pd.DataFrame(rows, columns=[c for c in cols if c not in
                                      ("p_holm", "significant", "direction")])
    out = _typed_tests(out)
    out["p_holm"] = holm(out["p_value"].to_numpy(np.float64)) if len(out) else []
    sig = (out["p_holm"] < alpha).to_numpy(bool) if len(out) else np.zeros(0, bool)
    better = np.where(out["higher_is_better"].to_numpy(bool), out["diff"] > 0, out["diff"] < 0) \
        if len(out) else np.zeros(0, bool)
    out["significant"] = sig
    # a cost such as tokens_used is tested but gets no verdict (no ▲ / ▼)
    verdict = sig & ~out["metric"].isin(UNDIRECTED_METRICS).to_numpy(bool) if len(out) else sig
    out["direction"] = np.where(verdict, np.where(better, "better", "worse"), "")
    return _typed_tests(out[cols].copy())


def _paired_row(bud, pol: str, baseline: str, m: str, r: dict) -> dict:
    """A row of :func:`paired_tests`: ``r`` holds the difference, its interval
    and p-value; ``r["d"]`` the per-query differences the effect sizes and
    win/tie/loss counts are computed from."""
    d = r["d"]
    hib = bool(HIGHER_IS_BETTER.get(m, True))
    # a cost with no better direction (tokens used) counts higher as a "win":
    # its default sweep direction (lower) is not a verdict
    sign = 1.0 if hib or m in UNDIRECTED_METRICS else -1.0
    n = len(d)
    sd = d.std(ddof=1) if n > 1 else np.nan
    wins = int((sign * d > 0).sum())
    losses = int((sign * d < 0).sum())
    return {"budget": bud, "policy": pol, "baseline": baseline, "metric": m,
            "higher_is_better": hib, "n_pairs": int(r["n_pairs"]),
            "baseline_mean": r["baseline_mean"], "policy_mean": r["policy_mean"],
            "diff": r["diff"], "diff_ci_low": r["diff_ci_low"],
            "diff_ci_high": r["diff_ci_high"], "ci_over": r["ci_over"],
            "statistic": r["statistic"], "p_value": r["p_value"],
            "rank_biserial": rank_biserial(d),
            "cohen_dz": float(d.mean() / sd) if n > 1 and sd > 0 else np.nan,
            "wins": wins, "ties": n - wins - losses, "losses": losses}


_FLOAT_COLS = ("baseline_mean", "policy_mean", "diff", "diff_ci_low", "diff_ci_high",
               "statistic", "p_value", "p_holm", "rank_biserial", "cohen_dz")
_INT_COLS = ("n_pairs", "wins", "ties", "losses")


def _typed_tests(t: pd.DataFrame) -> pd.DataFrame:
    """Numeric dtypes even when empty (an empty frame's columns are objects,
    and ``np.isfinite`` refuses objects)."""
    for c in _FLOAT_COLS:
        if c in t:
            t[c] = t[c].astype(np.float64)
    for c in _INT_COLS:
        if c in t:
            t[c] = t[c].astype(np.int64)
    for c in ("higher_is_better", "significant"):
        if c in t:
            t[c] = t[c].astype(bool)
    return t


def _w_plus(d: np.ndarray) -> float:
    """Rank sum of the positive differences (zeros dropped, average ranks)."""
    d = d[d != 0]
    if len(d) == 0:
        return float("nan")
    r = sps.rankdata(np.abs(d))
    return float(r[d > 0].sum())
