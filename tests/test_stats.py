"""Statistics of reports: intervals, paired tests, Holm, effect sizes, rounding.

Checked against scipy on known inputs, and Holm against a case computed by hand.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from memsim.core.errors import ConfigError
from memsim.reporting.stats import (
    MIN_REPLICATES,
    bootstrap_mean_ci,
    fold_replays,
    column_decimals,
    format_ci,
    format_fixed,
    format_p,
    holm,
    mean_ci,
    paired_tests,
    rank_biserial,
    round_to_ci,
    summarise,
    utility_share,
    utility_share_by,
)


def frame(values: dict[str, np.ndarray], n_rep: int = 1, metric: str = "utility",
          budget: int = 1500, shuffle: int | None = None) -> pd.DataFrame:
    """A per-query table: ``values[policy]`` has n_rep * n_q values, replicate-major."""
    rows = []
    for pol, v in values.items():
        v = np.asarray(v, dtype=float)
        n_q = len(v) // n_rep
        rows.append(pd.DataFrame({
            "replicate": np.repeat(np.arange(n_rep), n_q), "policy": pol, "budget": budget,
            "query_id": np.tile(np.arange(100, 100 + n_q), n_rep), metric: v}))
    df = pd.concat(rows, ignore_index=True)
    if shuffle is not None:  # pairing must come from (replicate, query_id), not row order
        df = df.sample(frac=1.0, random_state=shuffle).reset_index(drop=True)
    return df


# -- Student t ------------------------------------------------------------------


def test_mean_ci_matches_scipy_t_interval():
    x = np.array([0.2, 0.5, 0.9, 0.4, 0.7, np.nan])
    m, lo, hi, n = mean_ci(x)
    v = x[np.isfinite(x)]
    ref = sps.t.interval(0.95, len(v) - 1, loc=v.mean(), scale=sps.sem(v))
    assert n == 5 and m == pytest.approx(v.mean())
    assert (lo, hi) == pytest.approx(ref)


def test_mean_ci_degenerate_inputs():
    assert mean_ci([np.nan])[3] == 0
    m, lo, hi, n = mean_ci([3.0])
    assert (m, n) == (3.0, 1) and math.isnan(lo) and math.isnan(hi)


# -- bootstrap -----------------------------------------------------------------


def test_bootstrap_ci_agrees_with_scipy_percentile_bootstrap():
    rng = np.random.default_rng(3)
    x = rng.lognormal(0.0, 0.8, size=80)
    m, lo, hi, n = bootstrap_mean_ci(x, n_boot=20000, seed=1)
    ref = sps.bootstrap((x,), np.mean, n_resamples=20000, method="percentile",
                        confidence_level=0.95, rng=np.random.default_rng(2))
    width = hi - lo
    assert m == pytest.approx(x.mean()) and n == 80
    # two independent Monte Carlo runs of the same procedure: equal up to noise
    assert lo == pytest.approx(ref.confidence_interval.low, abs=0.03 * width)
    assert hi == pytest.approx(ref.confidence_interval.high, abs=0.03 * width)


def test_bootstrap_is_reproducible_and_seeded():
    x = np.random.default_rng(0).normal(size=40)
    assert bootstrap_mean_ci(x, seed=5) == bootstrap_mean_ci(x, seed=5)
    assert bootstrap_mean_ci(x, seed=5) != bootstrap_mean_ci(x, seed=6)
    # the global random state is neither used nor touched (the legacy API is
    # exactly what this checks, hence the noqa)
    np.random.seed(123)  # noqa: NPY002
    before = np.random.random()  # noqa: NPY002
    np.random.seed(123)  # noqa: NPY002
    bootstrap_mean_ci(x, seed=5)
    assert np.random.random() == before  # noqa: NPY002


def test_bootstrap_degenerate_and_nan():
    m, lo, hi, n = bootstrap_mean_ci([2.0, 2.0, 2.0, np.nan])
    assert (m, lo, hi, n) == (2.0, 2.0, 2.0, 3)
    m, lo, hi, n = bootstrap_mean_ci([7.0])
    assert m == 7.0 and n == 1 and math.isnan(lo) and math.isnan(hi)
    assert bootstrap_mean_ci([np.nan, np.nan])[3] == 0


def test_stratified_bootstrap_estimates_the_mean_of_group_means():
    x = np.array([1.0, 1.0, 1.0, 1.0, 5.0])
    g = np.array([0, 0, 0, 0, 1])
    m, lo, hi, _ = bootstrap_mean_ci(x, strata=g)
    assert m == pytest.approx(3.0)          # (1 + 5) / 2, not the pooled 1.8
    assert lo == hi == pytest.approx(3.0)   # no spread within a stratum


# -- summary ---------------------------------------------------------------------


def test_summarise_unit_switches_at_min_replicates():
    rng = np.random.default_rng(1)
    few = frame({"a": rng.normal(size=3 * 50)}, n_rep=3)
    many = frame({"a": rng.normal(size=MIN_REPLICATES * 50)}, n_rep=MIN_REPLICATES)
    s_few = summarise(few)
    s_many = summarise(many)
    assert list(s_few.columns) == ["policy", "budget", "metric", "mean", "ci_low", "ci_high",
                                   "n", "ci_over", "ci_method"]
    r = s_few[s_few["metric"] == "utility"].iloc[0]
    assert r["ci_over"] == "queries" and r["n"] == 150
    r = s_many[s_many["metric"] == "utility"].iloc[0]
    assert r["ci_over"] == "replicates" and r["n"] == MIN_REPLICATES
    # the point estimate is the mean of the replicates' means either way
    per_rep = many.groupby("replicate")["utility"].mean().mean()
    assert r["mean"] == pytest.approx(per_rep)
    assert r["ci_low"] < r["mean"] < r["ci_high"]


def test_a_summary_row_without_an_interval_has_no_method():
    # no finite value (a bucket no query reaches), one replicate of a run
    # metric: NaN bounds, and ci_method "none", as the contract says
    q = frame({"a": [np.nan] * 6}, n_rep=2)
    arms = pd.DataFrame({"replicate": [0], "policy": "a", "budget": 1500, "recall_gini": [0.4]})
    s = summarise(q, arms).set_index("metric")
    for m in ("utility", "recall_gini"):
        assert np.isnan(s.loc[m, "ci_low"]) and np.isnan(s.loc[m, "ci_high"]), m
        assert s.loc[m, "ci_method"] == "none", m
    assert s.loc["utility", "n"] == 0
    # a store with no row (a run with no tick): its rows are there, empty
    empty = pd.DataFrame(columns=["replicate", "policy", "budget", "t", "store_notes",
                                  "store_tokens"])
    s = summarise(q, arms, empty).set_index("metric")
    for m in ("store_notes", "store_tokens"):
        assert np.isnan(s.loc[m, "mean"]) and s.loc[m, "n"] == 0 and s.loc[m, "ci_method"] == "none"


def test_summarise_keeps_run_level_metrics_with_t_intervals():
    q = frame({"a": [1.0, 2.0, 3.0, 4.0]}, n_rep=2)
    arms = pd.DataFrame({"replicate": [0, 1], "policy": "a", "budget": 1500,
                         "recall_gini": [0.4, 0.6]})
    store = pd.DataFrame({"replicate": [0, 0, 1, 1], "policy": "a", "budget": 1500,
                          "t": [0.0, 1.0, 0.0, 1.0], "store_notes": [5, 9, 5, 11],
                          "store_tokens": [50, 90, 50, 110]})
    s = summarise(q, arms, store).set_index("metric")
    g = s.loc["recall_gini"]
    ref = sps.t.interval(0.95, 1, loc=0.5, scale=sps.sem([0.4, 0.6]))
    assert g["ci_method"] == "t" and g["mean"] == pytest.approx(0.5)
    # (clipped to the values a Gini coefficient takes)
    assert (g["ci_low"], g["ci_high"]) == pytest.approx(tuple(np.clip(ref, 0.0, 1.0)))
    assert s.loc["store_notes", "mean"] == pytest.approx(10.0)  # last store size per replicate


def test_summarise_is_deterministic():
    q = frame({"a": np.random.default_rng(0).normal(size=60),
               "b": np.random.default_rng(1).normal(size=60)}, n_rep=3)
    pd.testing.assert_frame_equal(summarise(q), summarise(q))


# -- Holm ------------------------------------------------------------------------


def test_holm_hand_computed_case():
    # sorted: 0.005 x4 = 0.02; 0.01 x3 = 0.03; 0.03 x2 = 0.06; 0.04 x1 = 0.04 -> max(0.06)
    p = [0.01, 0.04, 0.03, 0.005]
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert list(holm(p) < 0.05) == [True, False, False, True]


def test_holm_caps_at_one_and_skips_nan():
    adj = holm([0.5, np.nan, 0.02, 0.9])
    # m = 3 finite: 0.02 x3 = 0.06; 0.5 x2 = 1.0; 0.9 x1 -> max(1.0, 0.9) = 1.0
    assert adj[2] == pytest.approx(0.06)
    assert adj[0] == 1.0 and adj[3] == 1.0 and math.isnan(adj[1])
    assert holm([]).size == 0


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=12))
def test_holm_properties(p):
    p = np.array(p)
    adj = holm(p)
    assert np.all(adj >= p - 1e-15) and np.all(adj <= 1.0)
    # order-preserving: a smaller raw p never gets a larger adjusted p
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(adj[order]) >= -1e-15)
    assert np.all(adj <= np.minimum(1.0, len(p) * p) + 1e-15)  # never worse than Bonferroni


# -- effect sizes and paired tests ------------------------------------------------


def test_rank_biserial_by_hand_and_against_scipy():
    # |d| ranks 1, 2, 3, 4; W+ = 1 + 3 + 4 = 8, W- = 2 -> (8 - 2) / 10
    assert rank_biserial([1.0, -2.0, 3.0, 4.0, 0.0]) == pytest.approx(0.6)
    assert math.isnan(rank_biserial([0.0, 0.0]))
    d = np.random.default_rng(4).integers(-3, 4, size=60).astype(float)  # ties and zeros
    nz = d[d != 0]
    w_plus = sps.wilcoxon(nz, alternative="greater").statistic
    total = len(nz) * (len(nz) + 1) / 2
    assert rank_biserial(d) == pytest.approx((2 * w_plus - total) / total)


def test_paired_tests_pair_on_replicate_and_query_and_match_scipy():
    rng = np.random.default_rng(7)
    n_rep, n_q = 3, 40
    base = rng.normal(size=n_rep * n_q)
    better = base + rng.normal(0.3, 0.5, size=n_rep * n_q)
    worse = base - np.abs(rng.normal(0.0, 0.2, size=n_rep * n_q))
    worse[::7] = base[::7]  # some exact ties
    q = frame({"base": base, "better": better, "worse": worse}, n_rep=n_rep, shuffle=11)
    t = paired_tests(q, "base", ["utility"]).set_index("policy")
    for pol, x in (("better", better), ("worse", worse)):
        r = t.loc[pol]
        d = x - base
        ref = sps.wilcoxon(x, base, zero_method="wilcox")
        assert r["p_value"] == pytest.approx(ref.pvalue, rel=1e-12)
        assert r["n_pairs"] == n_rep * n_q
        assert r["wins"] == (d > 0).sum() and r["losses"] == (d < 0).sum()
        assert r["ties"] == (d == 0).sum()
        per_rep = d.reshape(n_rep, n_q).mean(axis=1).mean()
        assert r["diff"] == pytest.approx(per_rep)
        assert r["diff_ci_low"] < r["diff"] < r["diff_ci_high"]
        assert r["cohen_dz"] == pytest.approx(d.mean() / d.std(ddof=1))
        assert r["rank_biserial"] == pytest.approx(rank_biserial(d))
        assert r["baseline_mean"] == pytest.approx(base.mean())
    assert t["p_holm"].to_numpy() == pytest.approx(holm(t["p_value"].to_numpy()))
    assert t.loc["better", "direction"] == "better" and t.loc["worse", "direction"] == "worse"


def test_paired_tests_follow_the_metric_direction_and_drop_nan_pairs():
    base = np.array([0.5, 0.4, 0.6, 0.5, 0.3, 0.7, 0.2, 0.5, 0.4, 0.6, np.nan, 0.5])
    lower = base - 0.1
    lower[0] = np.nan
    q = frame({"base": base, "lower": lower}, metric="stale_rate")
    r = paired_tests(q, "base", ["stale_rate"]).iloc[0]
    assert not r["higher_is_better"]
    assert r["n_pairs"] == 10                 # two NaN pairs left out
    assert r["wins"] == 10 and r["losses"] == 0  # lower stale rate is a win
    assert r["diff"] == pytest.approx(-0.1)
    assert r["direction"] == "better"


def test_a_cost_without_direction_counts_higher_as_a_win():
    """tokens_used has no better direction (no mark); its win/tie/loss used
    to count using more tokens as a loss, lower-is-better, in silence."""
    base = np.arange(10, dtype=float) * 100
    more = base + np.r_[np.full(7, 50.0), np.zeros(2), [-50.0]]
    r = paired_tests(frame({"base": base, "more": more}, metric="tokens_used"), "base",
                     ["tokens_used"]).iloc[0]
    assert (r["wins"], r["ties"], r["losses"]) == (7, 2, 1)
    assert r["direction"] == ""


def test_paired_tests_identical_policies_are_not_tested():
    q = frame({"a": [1.0, 2.0, 3.0], "b": [1.0, 2.0, 3.0]})
    r = paired_tests(q, "a", ["utility"]).iloc[0]
    assert math.isnan(r["p_value"]) and math.isnan(r["p_holm"])
    assert (r["wins"], r["ties"], r["losses"]) == (0, 3, 0)
    assert r["direction"] == "" and not r["significant"]


def test_paired_tests_refuse_an_unknown_baseline():
    q = frame({"a": [1.0, 2.0]})
    with pytest.raises(KeyError, match="baseline 'zz'"):
        paired_tests(q, "zz", ["utility"])


def test_paired_tests_are_per_budget():
    a = frame({"a": [1.0, 2.0, 3.0, 4.0], "b": [2.0, 3.0, 4.0, 5.0]}, budget=100)
    b = frame({"a": [1.0, 2.0, 3.0, 4.0], "b": [0.0, 1.0, 2.0, 3.0]}, budget=200)
    t = paired_tests(pd.concat([a, b]), "a", ["utility"]).set_index("budget")
    assert t.loc[100, "diff"] == pytest.approx(1.0)
    assert t.loc[200, "diff"] == pytest.approx(-1.0)


# -- utility_share: a ratio of sums ----------------------------------------------


def share_frame(utility: dict[str, np.ndarray], oracle: np.ndarray, n_rep: int = 1,
                shuffle: int | None = None) -> pd.DataFrame:
    """A per-query table with utility (per policy) and the policy-free oracle."""
    q = frame(utility, n_rep=n_rep, shuffle=shuffle)
    n = len(oracle)
    key = (q["replicate"] * n // n_rep + q["query_id"] - 100).to_numpy()
    q["oracle_utility"] = np.asarray(oracle, dtype=float)[key]
    with np.errstate(divide="ignore", invalid="ignore"):
        q["utility_ratio"] = np.where(q["oracle_utility"] > 0,
                                      q["utility"] / q["oracle_utility"], np.nan)
    return q


def test_utility_share_is_a_ratio_of_sums_over_queries_with_an_oracle():
    # the hivemind-vs-bug pattern: one query packs stale notes (ratio -4), so
    # the mean ratio ranks b first while a gets more of the achievable utility
    oracle = np.array([1.0, 1.0, 1.0, 0.25, 0.0])
    a = np.array([0.95, 0.95, 0.95, -1.0, -0.5])   # ratio of query 3: -4
    b = np.array([0.5, 0.5, 0.5, 0.25, 0.0])
    q = share_frame({"a": a, "b": b}, oracle)
    # query 4 (oracle 0: nothing relevant fits) is left out of the sums
    assert utility_share(q[q["policy"] == "a"]) == pytest.approx((2.85 - 1.0) / 3.25)
    assert utility_share(q[q["policy"] == "b"]) == pytest.approx(1.75 / 3.25)
    means = q.groupby("policy")["utility_ratio"].mean()
    assert means["a"] < means["b"]                   # the mean of ratios says b
    by = utility_share_by(q)
    assert by[("a", 1500)] > by[("b", 1500)]         # the share says a
    assert list(by.index.get_level_values("policy")) == ["a", "b"]
    assert math.isnan(utility_share(q[(q["oracle_utility"] == 0) & (q["policy"] == "a")]))
    with pytest.raises(KeyError, match="oracle_utility"):
        utility_share(q.drop(columns="oracle_utility"))
    # a frame of several policies needs by=: a share pooled over policies means nothing
    with pytest.raises(ValueError, match=r"2 policies; pass by=\['policy'\]"):
        utility_share(q)
    grouped = utility_share(q, by="policy")
    assert grouped["a"] == pytest.approx((2.85 - 1.0) / 3.25)
    assert grouped["b"] == pytest.approx(1.75 / 3.25)
    # by= that leaves budgets mixed pooled them in silence; a typo was a raw KeyError
    two = pd.concat([q, q.assign(budget=300)], ignore_index=True)
    with pytest.raises(ConfigError, match=r"2 budgets; pass by=\['policy', 'budget'\]"):
        utility_share(two, by="policy")
    with pytest.raises(ConfigError, match=r"no column 'polcy' \(did you mean 'policy'\?\)"):
        utility_share(q, by=["polcy"])
    assert utility_share(two, by=["policy", "budget"])[("a", 300)] == grouped["a"]


def test_summarise_gives_the_pooled_share_with_a_bootstrap_interval():
    rng = np.random.default_rng(3)
    for n_rep, unit in ((2, "queries"), (MIN_REPLICATES, "replicates")):
        oracle = rng.uniform(0, 2, size=n_rep * 60)
        oracle[::9] = 0.0                            # nothing fits: left out
        u = oracle * rng.uniform(0.2, 0.8, size=len(oracle)) - rng.uniform(0, 0.2, len(oracle))
        q = share_frame({"a": u}, oracle, n_rep=n_rep, shuffle=5)
        s = summarise(q).set_index("metric")
        assert s.index[0] == "utility_share"         # first, before the query columns
        r = s.loc["utility_share"]
        ok = oracle > 0
        assert r["mean"] == pytest.approx(u[ok].sum() / oracle[ok].sum())
        assert r["ci_over"] == unit and r["ci_method"] == "bootstrap-ratio"
        assert r["n"] == (ok.sum() if unit == "queries" else n_rep)
        assert r["ci_low"] < r["mean"] < r["ci_high"]


def test_paired_share_difference_and_its_delta_method_test():
    rng = np.random.default_rng(4)
    n = 300
    oracle = rng.uniform(0.5, 2.0, size=n)
    base = oracle * rng.uniform(0.2, 0.6, size=n)
    pol = base + oracle * rng.normal(0.05, 0.1, size=n)
    q = share_frame({"base": base, "pol": pol}, oracle, n_rep=3, shuffle=2)
    t = paired_tests(q, "base", ["utility_share", "utility"])
    assert list(t["metric"]) == ["utility_share", "utility"]
    r = t.iloc[0]
    so = oracle.sum()
    sp, sb = pol.sum() / so, base.sum() / so
    assert r["policy_mean"] == pytest.approx(sp) and r["baseline_mean"] == pytest.approx(sb)
    assert r["diff"] == pytest.approx(sp - sb)
    assert r["diff_ci_low"] < r["diff"] < r["diff_ci_high"] and r["ci_over"] == "queries"
    e = (pol - sp * oracle) / so - (base - sb * oracle) / so
    z = (sp - sb) / math.sqrt(n / (n - 1) * (e ** 2).sum())
    assert r["statistic"] == pytest.approx(z)
    assert r["p_value"] == pytest.approx(2 * sps.norm.sf(abs(z)))
    d = pol - base
    assert (r["wins"], r["losses"], r["n_pairs"]) == ((d > 0).sum(), (d < 0).sum(), n)
    # one Holm family with the other metrics
    assert t["p_holm"].to_numpy() == pytest.approx(holm(t["p_value"].to_numpy()))
    assert r["direction"] == "better"
    # the same resampled queries for both policies: identical policies give a
    # zero-width interval and no test
    same = paired_tests(share_frame({"a": base, "b": base}, oracle), "a", ["utility_share"])
    assert same.iloc[0]["diff"] == 0 and same.iloc[0]["diff_ci_low"] == 0
    assert math.isnan(same.iloc[0]["p_value"]) and same.iloc[0]["direction"] == ""


def _swapped_shares_p(u_p, u_b, oracle) -> float:
    """The exact paired randomisation p-value of S_P - S_B, by listing
    every swap of the two policies' utilities (independent of the code)."""
    import itertools

    n = len(oracle)
    obs = abs(sum(u_p) / sum(oracle) - sum(u_b) / sum(oracle))
    hits = 0
    for swap in itertools.product((False, True), repeat=n):
        a = sum(b if s else p for p, b, s in zip(u_p, u_b, swap))
        b = sum(p if s else b for p, b, s in zip(u_p, u_b, swap))
        hits += abs(a / sum(oracle) - b / sum(oracle)) >= obs * (1 - 1e-9)
    return hits / 2 ** n


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 10), st.integers(0, 2 ** 32 - 1))
def test_ratio_p_value_over_few_pairs_is_the_exact_swap_test(n, seed):
    rng = np.random.default_rng(seed)
    oracle = rng.uniform(0.5, 2.0, size=n)
    base = oracle * rng.uniform(0.0, 1.0, size=n)
    # some pairs equal, some utilities on a coarse grid (ties between swaps)
    pol = np.where(rng.random(n) < 0.3, base, np.round(oracle * rng.uniform(0, 1, n), 1))
    r = paired_tests(share_frame({"base": base, "pol": pol}, oracle), "base",
                     ["utility_share"]).iloc[0]
    if r["diff"] == 0:
        assert math.isnan(r["p_value"])
    else:
        assert r["p_value"] == pytest.approx(_swapped_shares_p(pol, base, oracle), abs=1e-12)
        assert r["p_value"] >= 2 / 2 ** n


@pytest.mark.parametrize("n, p", [(2, 0.5), (3, 0.25), (5, 0.0625), (6, 0.03125),
                                  (16, 2 / 2 ** 16)])
def test_a_few_queries_that_gain_alike_are_not_certain(n, p):
    # every pair gains the same: the interval has no width and the delta
    # method's se is 0; the exact test gives 2 / 2^n, so 5 pairs or fewer
    # are never significant
    oracle = np.ones(n)
    base = np.full(n, 0.5)
    r = paired_tests(share_frame({"base": base, "pol": base + 0.25}, oracle), "base",
                     ["utility_share"]).iloc[0]
    assert r["diff_ci_low"] == pytest.approx(0.25) and r["diff_ci_high"] == pytest.approx(0.25)
    assert r["p_value"] == pytest.approx(p)
    assert bool(r["significant"]) == (p < 0.05)
    # past 16 pairs the normal approximation's p-value stands
    big = paired_tests(share_frame({"base": np.full(17, 0.5), "pol": np.full(17, 0.75)},
                                   np.ones(17)), "base", ["utility_share"]).iloc[0]
    assert big["p_value"] == 0.0


def test_paired_tests_with_one_policy_are_empty_but_typed():
    t = paired_tests(share_frame({"a": [1.0, 0.5]}, np.array([1.0, 1.0])), "a")
    assert len(t) == 0
    assert t["p_value"].dtype == np.float64 and t["n_pairs"].dtype == np.int64
    assert np.isfinite(t["p_value"]).sum() == 0      # the ufunc that used to raise


def test_column_decimals_and_format_fixed():
    assert column_decimals("recall", [0.5], [0.4], [0.6]) == 3
    # the coarsest place any row's interval supports
    assert column_decimals("tokens_used", [1141.1, 1493.7], [1136.2, 1493.6],
                           [1146.2, 1493.7]) == 1
    assert column_decimals("utility", [0.3, 0.4], [0.2, 0.39], [0.4, 0.41]) == 2
    assert format_fixed(0.5, 0.41234, 0.6, 3) == "0.500 [0.412, 0.600]"
    assert format_fixed(-0.0001, np.nan, np.nan, 3, signed=True) == "+0.000"
    assert format_fixed(np.nan) == "n/a"


# -- rounding ----------------------------------------------------------------------


@pytest.mark.parametrize("args, expected", [
    ((0.53412, 0.52113, 0.54721), (0.534, 0.521, 0.547, 3)),      # h = 0.013
    ((1234.5, 1112.0, 1357.0), (1230.0, 1110.0, 1360.0, -1)),   # h = 122
    ((0.5, 0.1, 0.9), (0.50, 0.10, 0.90, 2)),                    # h = 0.4
    ((-0.0123, -0.0456, 0.0210), (-0.012, -0.046, 0.021, 3)),    # h = 0.033
    ((12.3456, 12.3400, 12.3512), (12.3456, 12.34, 12.3512, 4)),  # h = 0.0056
])
def test_round_to_ci(args, expected):
    got = round_to_ci(*args)
    assert got[3] == expected[3]
    assert got[:3] == pytest.approx(expected[:3])


def test_round_to_ci_without_an_interval_keeps_three_significant_digits():
    m, lo, hi, dec = round_to_ci(0.0123456, np.nan, np.nan)
    assert (m, dec) == (0.0123, 4) and math.isnan(lo)
    assert round_to_ci(2.0, 2.0, 2.0)[:3] == (2.0, 2.0, 2.0)
    assert round_to_ci(0.0, 0.0, 0.0)[3] == 0


def test_format_ci_and_p():
    assert format_ci(0.53412, 0.52113, 0.54721) == "0.534 [0.521, 0.547]"
    assert format_ci(0.0101, -0.0021, 0.0299, signed=True) == "+0.010 [-0.002, +0.030]"
    assert format_ci(1234.5, 1112.0, 1357.0) == "1230 [1110, 1360]"
    assert format_ci(0.5, np.nan, np.nan) == "0.500"
    assert format_ci(np.nan, np.nan, np.nan) == "n/a"
    assert format_ci(-0.0001, -0.0004, 0.0002) == "-0.00010 [-0.00040, 0.00020]"
    assert format_p(0.0004) == "<0.001" and format_p(0.0123) == "0.012"
    assert format_p(0.5) == "0.50" and format_p(np.nan) == "n/a"
    from memsim.reporting.numbers import p_phrase
    assert (p_phrase(0.0004), p_phrase(0.25), p_phrase(None)) == ("p < 0.001", "p = 0.25",
                                                                  "p n/a")


@given(st.floats(0.001, 1.0), st.sampled_from([0.01, 0.05, 0.1]))
def test_a_printed_p_value_never_crosses_the_threshold(p, alpha):
    """0.0496 printed 0.05 beside 'significant (p < 0.05)': rounding down
    keeps the printed value on the side of a two-digit threshold p is on."""
    printed = float(format_p(p))
    assert (printed < alpha) == (p < alpha)
    assert printed <= p and p - printed < 0.1 * p + 0.01


# -- compare(): the user's mistakes -----------------------------------------------

def _cmp_frame() -> pd.DataFrame:
    rng = np.random.default_rng(5)
    return frame({"a": rng.random(30), "b": rng.random(30)})


@pytest.mark.parametrize("kwargs, match", [
    ({"baseline": "zz"}, r"baseline 'zz' is not a policy of the run; policies: a, b"),
    ({"metrics": ["recal"]}, r"metrics: no metric column 'recal'"),
])
def test_compare_refuses_an_unknown_name_as_a_memsim_error_and_a_key_error(kwargs, match):
    from memsim.core.errors import ConfigError
    from memsim.reporting.compare import compare
    with pytest.raises(ConfigError, match=match) as info:
        compare(_cmp_frame(), metrics=kwargs.pop("metrics", ["utility"]), **kwargs)
    assert isinstance(info.value, KeyError)            # what it raised before
    assert str(info.value).startswith("compare(): ")   # the message, not KeyError's repr


@pytest.mark.parametrize("kwargs, match", [
    ({"budget": 999}, r"budget: no rows at budget 999; the run has budgets 1500"),
    ({"level": 1.5}, r"level must be a number strictly between 0 and 1, got 1.5"),
    ({"level": 0}, r"level must be"),
    ({"level": float("nan")}, r"level must be"),
    ({"alpha": -1}, r"alpha must be a number strictly between 0 and 1, got -1"),
    ({"alpha": 1}, r"alpha must be"),
    ({"alpha": "0.05"}, r"alpha must be"),
    ({"n_boot": 0}, r"n_boot \(bootstrap resamples\) must be an integer >= 1, got 0"),
    ({"n_boot": 10.5}, r"n_boot"),
    ({"n_boot": True}, r"n_boot"),
    ({"labels": ["x", "y"]}, r"labels name the runs of a list of runs; data is one run"),
    ({"labels": ["x"]}, r"labels=\['x'\] would be ignored"),
    ({"metrics": "utility"}, r"metrics is a list of metric names, not one string"),
    # a numpy ValueError before; a query's key or time compared as if a measure
    ({"seed": -1}, r"seed must be an integer >= 0, got -1"),
    ({"metrics": ["policy"]}, r"'policy' is a column that names or times a query"),
    ({"metrics": ["utility", "t"]}, r"'t' is a column that names or times a query"),
    ({"metrics": ["query_id"]}, r"'query_id' is a column"),
])
def test_compare_validates_its_arguments_up_front(kwargs, match):
    from memsim.core.errors import ConfigError, MemsimError
    from memsim.reporting.compare import compare
    q = _cmp_frame()
    kwargs.setdefault("metrics", ["utility"])
    with pytest.raises(ConfigError, match=match) as info:
        compare(q, **kwargs)
    assert isinstance(info.value, (MemsimError, ValueError))


def test_compare_refuses_an_empty_list_and_a_summary_it_would_ignore():
    from memsim.core.errors import ConfigError
    from memsim.reporting.compare import compare
    with pytest.raises(ConfigError, match=r"compare\(\): data: an empty list of runs"):
        compare([])
    q = _cmp_frame()
    with pytest.raises(ConfigError, match="summary is one run's summary.csv"):
        compare([q, q], summary=pd.DataFrame(), metrics=["utility"])
    # the bounds themselves are fine
    cmp = compare(q, metrics=["utility"], alpha=0.5, level=0.5, n_boot=1)
    assert cmp.alpha == 0.5 and cmp.level == 0.5


def _replayed(n_queries: int, reps: int, seed: int = 0, noise: float = 0.0) -> pd.DataFrame:
    """A per-query table of two policies over one stream replayed ``reps``
    times (the same query ids at the same times), a policy's values moved by
    ``noise`` from one replay to the next."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0, 30, n_queries))
    base = {"a": rng.uniform(0, 1, n_queries), "b": rng.uniform(0.2, 1.2, n_queries)}
    rows = []
    for r in range(reps):
        for pol, v in base.items():
            rows.append(pd.DataFrame({
                "replicate": r, "policy": pol, "budget": 500, "query_id": np.arange(n_queries),
                "t": t, "utility": v + noise * rng.standard_normal(n_queries),
                "oracle_utility": 1.5, "tokens_used": 400}))
    return pd.concat(rows, ignore_index=True)


@pytest.mark.parametrize("reps", [3, 6])
def test_replays_of_one_stream_count_its_queries_once(reps):
    """A fixed stream replayed in every replicate: the summary and the
    paired tests are those of its queries (n = queries, not replicates x
    queries; with 5 or more replays, no interval over identical replicates)."""
    one = _replayed(40, 1)
    many = _replayed(40, reps)
    cols = ["policy", "metric", "mean", "ci_low", "ci_high", "n", "ci_over"]
    got, want = summarise(many)[cols], summarise(one)[cols]
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True))
    assert (summarise(many).query("metric == 'utility'")["n"] == 40).all()
    pt = paired_tests(many, baseline="a", metrics=["utility"])
    assert pt["n_pairs"].tolist() == [40]
    assert pt["diff_ci_low"].iloc[0] < pt["diff_ci_high"].iloc[0]


def test_replays_that_differ_by_a_policys_randomness_average_each_query():
    """A policy whose values vary between the replays of one stream: each
    query counts once, with its mean over the replays."""
    many = _replayed(30, 4, noise=0.1)
    folded = fold_replays(many)
    assert folded["replicate"].unique().tolist() == [0] and len(folded) == 60
    want = many.groupby(["policy", "query_id"])["utility"].mean()
    got = folded.set_index(["policy", "query_id"])["utility"]
    np.testing.assert_allclose(got.loc[want.index].to_numpy(), want.to_numpy())
    assert folded["tokens_used"].dtype == many["tokens_used"].dtype
    s = summarise(many).query("policy == 'a' and metric == 'utility'").iloc[0]
    assert s["n"] == 30 and s["ci_over"] == "queries"


def test_independent_replicates_are_not_folded():
    """Synthetic replicates draw their own streams (other query times): they
    stay replicates."""
    many = _replayed(30, 3)
    many.loc[many["replicate"] == 1, "t"] += 0.5
    assert fold_replays(many) is many
    assert (summarise(many).query("metric == 'utility'")["n"] == 90).all()


def test_drawn_streams_whose_times_are_all_0_are_not_folded():
    """Under age_mode = "zero" every query time is 0 and ids restart at 0 in
    each replicate: two drawn streams of as many queries looked like replays
    of one stream (one stream's queries, no interval over replicates)."""
    from memsim.runs.config import experiment_from_dict
    from memsim.runs.runner import run_experiment
    exp = experiment_from_dict({
        "experiment": {"name": "z", "seed": 18, "replicates": 2},
        "workload": {"horizon_days": 2, "backfill_days": 10, "notes_per_day": 5,
                     "queries_per_day": 5, "age_mode": "zero"},
        "policies": {"a": {"preset": "hivemind-2025-bug"}}})
    run = run_experiment(exp)
    q = run.queries
    by = [g.set_index("query_id").sort_index() for _, g in q.groupby("replicate")]
    assert (by[0].index == by[1].index).all() and (q["t"] == 0).all()  # the lookalike
    assert not by[0]["category"].equals(by[1]["category"])
    assert fold_replays(q) is q
    s = run.summary.set_index("metric")
    assert s.loc["utility", "n"] == len(q) and s.loc["recall_gini", "ci_over"] == "replicates"
    # the same facts in every replicate: replays of one stream
    same = q.copy()
    for col in ("category", "actor", "n_relevant", "budget_tokens"):
        same[col] = same.loc[same["replicate"] == 0, col].tolist() * 2
    assert fold_replays(same)["replicate"].unique().tolist() == [0]


def test_a_comparison_of_replays_says_its_queries_count_once():
    from memsim.reporting.compare import compare

    many = compare(_replayed(30, 3), baseline="a", metrics=["utility"])
    assert many.replays == 3
    assert "One stream is replayed in each of the 3 replicates" in many.legend()
    assert many.tests["n_pairs"].tolist() == [30]
    other = _replayed(30, 3)
    other.loc[other["replicate"] == 2, "t"] += 1.0
    assert compare(other, baseline="a", metrics=["utility"]).replays == 0


def test_a_student_t_interval_of_a_run_measure_stays_within_its_values():
    """Two replicates' Gini coefficients 0.696 and 0.794 gave [0.122, 1.368];
    a store of 31,056 tokens on average [-46,573, 108,684]."""
    from memsim.reporting.stats import run_metric_ci, run_metric_range
    v = np.array([0.696, 0.794])
    mean, lo, hi, n, over, method = run_metric_ci(v, metric="recall_gini")
    assert method == "t" and n == 2 and mean == pytest.approx(0.745)
    assert lo == pytest.approx(0.745 - sps.t.ppf(0.975, 1) * v.std(ddof=1) / np.sqrt(2))
    assert hi == 1.0
    _, lo, hi, *_ = run_metric_ci(np.array([1000.0, 61112.0]), metric="store_tokens")
    assert lo == 0.0 and hi > 61112.0
    # a name it does not know, or none: the interval as Student t gives it
    _, lo, _, *_ = run_metric_ci(np.array([1000.0, 61112.0]))
    assert lo < 0
    assert run_metric_range("superseded_used_30d") == (0.0, 1.0)
    assert run_metric_range("evicted_notes") == (0.0, np.inf)
    # summary.csv clips too
    arms = pd.DataFrame({"replicate": [0, 1], "policy": "a", "budget": 100,
                         "recall_gini": v})
    q = pd.DataFrame({"replicate": [0, 1], "policy": "a", "budget": 100, "query_id": [0, 0],
                      "t": [0.5, 1.5], "utility": [1.0, 0.0], "oracle_utility": [1.0, 1.0]})
    row = summarise(q, metrics=["utility"], arms=arms).set_index("metric").loc["recall_gini"]
    assert row["ci_high"] == 1.0
