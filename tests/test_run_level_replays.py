"""Per-run metrics (``arms.csv``, ``store.parquet``) of replays of one stream.

A fixed stream replayed in every replicate is one observation of its
workload: its per-run values (recall_gini, the final store size ...) get the
mean over the replays and no interval (``ci_over = "stream"``, ``ci_method =
"none"``, ``n = 1``), in summary.csv and in the report, never a zero-width
interval over identical replays. Replicates with streams of their own keep
their interval over replicates.
"""

from __future__ import annotations

import math
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import memsim  # noqa: E402
from memsim.data.stream import write_stream  # noqa: E402
from memsim.data.workload import SyntheticWorkload  # noqa: E402
from memsim.reporting import plots, stats  # noqa: E402
from memsim.reporting.compare import compare, headline_text  # noqa: E402
from memsim.reporting.rundir import load_run, read_run_file  # noqa: E402
from memsim.reporting.stats import (N_BOOT, RUN_METRICS, SEED, bootstrap_mean_ci,  # noqa: E402
                                    mean_ci, summarise)

POLICIES = ("a", "b")


def _queries(reps: int, own_streams: bool, n_queries: int = 30) -> pd.DataFrame:
    """A per-query table of two policies: one stream replayed ``reps`` times
    (the same query ids at the same times), or with ``own_streams`` each
    replicate's queries at other times (synthetic replicates)."""
    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0, 30, n_queries))
    rows = []
    for r in range(reps):
        for pol in POLICIES:
            rows.append(pd.DataFrame({
                "replicate": r, "policy": pol, "budget": 500,
                "query_id": np.arange(n_queries), "t": t + (0.5 * r if own_streams else 0.0),
                "utility": rng.uniform(0, 1, n_queries), "oracle_utility": 1.5}))
    return pd.concat(rows, ignore_index=True)


def _arms_and_store(reps: int, spread: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``arms.csv`` and ``store.parquet`` of the two policies; ``spread`` moves
    each replicate's values (0: identical replays)."""
    arms, store = [], []
    for r in range(reps):
        for k, pol in enumerate(POLICIES):
            arms.append({"replicate": r, "policy": pol, "budget": 500,
                         "recall_gini": 0.4 + 0.1 * k + spread * r})
            for t, notes in ((0.0, 50), (30.0, 80 + 10 * k + round(10 * spread * r))):
                store.append({"replicate": r, "policy": pol, "budget": 500, "t": t,
                              "store_notes": notes, "store_tokens": 10 * notes})
    return pd.DataFrame(arms), pd.DataFrame(store)


def _run_rows(summary: pd.DataFrame) -> pd.DataFrame:
    return summary[summary["metric"].isin(RUN_METRICS)].reset_index(drop=True)


# -- summarise ---------------------------------------------------------------------


@pytest.mark.parametrize("reps", [3, 6])  # below and above MIN_REPLICATES
@pytest.mark.parametrize("spread", [0.0, 0.01])  # deterministic replays, a policy's randomness
def test_run_level_metrics_of_replays_claim_no_interval(reps, spread):
    q = _queries(reps, own_streams=False)
    arms, store = _arms_and_store(reps, spread)
    got = _run_rows(summarise(q, arms, store))
    assert sorted(got["metric"].unique()) == sorted(RUN_METRICS)
    assert len(got) == len(POLICIES) * len(RUN_METRICS)
    assert got["ci_low"].isna().all() and got["ci_high"].isna().all()
    assert (got["n"] == 1).all()
    assert (got["ci_over"] == "stream").all() and (got["ci_method"] == "none").all()
    # the value is the mean over the replays
    g = got.set_index(["policy", "metric"])
    for pol in POLICIES:
        want = arms.loc[arms["policy"] == pol, "recall_gini"].mean()
        assert g.loc[(pol, "recall_gini"), "mean"] == pytest.approx(want)
        last = store[(store["policy"] == pol) & (store["t"] == 30.0)]["store_notes"].mean()
        assert g.loc[(pol, "store_notes"), "mean"] == pytest.approx(last)
    # the query metrics keep their interval over the stream's queries
    u = summarise(q, arms, store).query("metric == 'utility'")
    assert (u["ci_over"] == "queries").all() and (u["ci_low"] < u["ci_high"]).all()


@pytest.mark.parametrize("reps", [3, 6])
def test_run_level_metrics_of_independent_replicates_keep_their_interval(reps):
    """Synthetic replicates (their own streams, never folded): the interval
    over replicates of before, bit for bit."""
    q = _queries(reps, own_streams=True)
    arms, store = _arms_and_store(reps, spread=0.01)
    got = _run_rows(summarise(q, arms, store)).set_index(["policy", "metric"])
    assert (got["ci_over"] == "replicates").all() and (got["n"] == reps).all()
    for pol in POLICIES:
        v = arms.loc[arms["policy"] == pol, "recall_gini"].to_numpy(np.float64)
        r = got.loc[(pol, "recall_gini")]
        if reps < stats.MIN_REPLICATES:
            want, method = mean_ci(v), "t"
        else:
            want = bootstrap_mean_ci(v, 0.95, N_BOOT, SEED + stats._stable(pol, 500,
                                                                           "recall_gini"))
            method = "bootstrap"
        assert r["ci_method"] == method
        assert (r["mean"], r["ci_low"], r["ci_high"], r["n"]) == want
        assert r["ci_low"] < r["mean"] < r["ci_high"]


# -- plots of the report ------------------------------------------------------------


def test_report_plots_of_replays_show_the_mean_without_an_interval():
    arms, _ = _arms_and_store(3, spread=0.0)
    d = plots.run_metric_data(arms, "recall_gini", replays=True)
    assert d["ci_low"].isna().all() and (d["n"] == 1).all()
    assert (d["ci_over"] == "stream").all() and (d["ci_method"] == "none").all()
    fig, ax = plt.subplots()
    try:
        plots.plot_run_metric(d, ax)
        assert "no interval" in ax.get_title() and "CI" not in ax.get_title()
        assert ax.containers[0].errorbar is None  # no caps of a zero-width interval
    finally:
        plt.close(fig)
    # independent replicates: the interval over replicates, as before
    d = plots.run_metric_data(arms.assign(recall_gini=arms["recall_gini"]
                                          + 0.01 * arms["replicate"]), "recall_gini")
    assert (d["ci_over"] == "replicates").all() and (d["ci_method"] == "t").all()
    assert (d["ci_low"] < d["ci_high"]).all()
    sup = arms.assign(superseded_notes=4, superseded_used_0d=0.5, superseded_used_30d=0.25)
    s = plots.superseded_use_data(sup, replays=True)
    assert len(s) and s["ci_low"].isna().all() and (s["ci_over"] == "stream").all()
    fig, ax = plt.subplots()
    try:
        plots.plot_superseded_use(s, ax)
        assert "no interval" in ax.get_title()
    finally:
        plt.close(fig)


# -- a run folder of a replayed stream, read back ------------------------------------


@pytest.fixture(scope="module")
def replayed_run(tmp_path_factory):
    """A small stream folder replayed in 3 replicates (the runner writes
    summary.csv and the report)."""
    tmp = tmp_path_factory.mktemp("replayed")
    stream = SyntheticWorkload(horizon_days=20, backfill_days=20, notes_per_day=8,
                               queries_per_day=4).generate(3)
    write_stream(stream, tmp / "stream")
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "replayed", "replicates": 3, "seed": 5},
        "workload": {"source": str(tmp / "stream")},
        "policies": {"hivemind": {"preset": "hivemind"},
                     "similarity-only": {"preset": "similarity-only"}}})
    return memsim.run_experiment(exp, out=tmp / "runs")


_NAN = re.compile(r"\bnan\b", re.IGNORECASE)
_ZERO_WIDTH = re.compile(r"(-?[\d.]+) \[\1, \1\]")


def test_a_replayed_run_folder_reads_back_and_reports_its_run_level_rows(replayed_run):
    path = replayed_run.path
    # summary.csv passes the run folder's checks and holds the new values
    stored = read_run_file(path / "summary.csv")
    run = load_run(path)
    for s in (stored, run.summary):
        rows = _run_rows(s)
        assert len(rows) == 2 * len(RUN_METRICS)
        assert (rows["ci_over"] == "stream").all() and (rows["ci_method"] == "none").all()
        assert (rows["n"] == 1).all() and rows["ci_low"].isna().all()
        assert rows["mean"].map(math.isfinite).all()
    # the report's per-run measures: the mean, no interval, said so, no "nan"
    md = (path / "report.md").read_text(encoding="utf-8")
    section = md.split("## Per-run measures", 1)[1].split("\n## ", 1)[0]
    assert "no interval" in section and "Intervals over replicates" not in section
    assert not _NAN.search(section) and not _ZERO_WIDTH.search(section), section
    assert "recall_gini" in section
    # the readers of the folder take it
    assert compare(path).replays == 3
    assert not _NAN.search(headline_text(path))
