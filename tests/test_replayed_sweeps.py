"""Sweeps, audits and reports of a replayed stream (a trace, a stream folder).

A stream from disk is the same set of queries in every replicate: its
replicates are replays, not independent samples. A deterministic policy gives
the same value on every replay, so an interval over replicates has zero width
and would call any difference significant. The robustness re-check and the
audit pair such a run's queries instead (each once), an objective measured
once per run gets no interval and no verdict, the plateau is not measured,
and the report counts the stream once. Synthetic replicates (streams of their
own) keep their intervals over replicates, number for number.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

import memsim
from memsim.data.stream import write_stream
from memsim.data.workload import SyntheticWorkload
from memsim.reporting.stats import mean_ci
from memsim.sweep import SweepSpec, TrialEvaluator, robustness_check, run_sweep
from memsim.sweep.outputs import _paired_lines
from memsim.sweep.plateau import plateau_table
from memsim.sweep.robustness import REPLAYED_SEEDS_NOTE
from memsim.tuning.audit import audit

HL = "policies.p.decay.half_life_days"
#: The documented verdict of a per-run objective on a replayed stream.
NO_INTERVAL = "no interval: one replayed stream"


@pytest.fixture(scope="module")
def stream_dir(tmp_path_factory):
    """A small stream folder: 76 queries over 30 days."""
    path = tmp_path_factory.mktemp("replayed") / "stream"
    stream = SyntheticWorkload(horizon_days=30, backfill_days=30, notes_per_day=6,
                               queries_per_day=3).generate(3)
    write_stream(stream, path)
    return path


def _table(workload: dict, replicates: int = 2, **sweep) -> dict:
    """One policy (product ranker, half-life decay, skip-fill) swept over
    its half-life, with utility and recall_gini (a per-run metric) as
    objectives."""
    return {
        "experiment": {"name": "replayed", "seed": 7, "replicates": replicates,
                       "budget_tokens": 600, "tick_days": 10.0},
        "workload": workload,
        "policies": {"p": {"ranker": "product", "packer": "skip-fill",
                           "decay": {"kind": "half-life", "half_life_days": 400.0}}},
        "sweep": {"trials": 8, "seed": 1,
                  "objectives": [{"metric": "utility", "direction": "maximize"},
                                 {"metric": "recall_gini"}],
                  "params": {HL: {"type": "float", "low": 1.0, "high": 1000.0, "log": True}},
                  **sweep}}


SYNTHETIC = {"horizon_days": 30, "backfill_days": 30, "notes_per_day": 6.0,
             "queries_per_day": 3.0}


def _vs_preset(exp, winner_hl: float, jobs: int = 1):
    """The ``vs-experiment`` row of a winner at ``winner_hl`` against the
    preset (400 days) on the fresh seeds, replayed ``jobs`` at a time."""
    spec = SweepSpec.from_config(exp.sweep, exp)
    win = {"number": 5, "role": "best", "params": {HL: winner_hl}, "values": [math.nan] * 2}
    pre = {"number": 0, "role": "experiment", "params": {HL: 400.0}, "values": [math.nan] * 2}
    rob = robustness_check(TrialEvaluator(exp, spec, jobs=jobs), spec, [win, pre])
    return rob[rob["check"] == "vs-experiment"].iloc[0], rob, spec


# -- the robustness re-check ----------------------------------------------------------


def test_vs_preset_on_a_replayed_stream_pairs_its_queries(stream_dir):
    exp = memsim.experiment_from_dict(_table({"source": str(stream_dir)},
                                             robustness={"replicates": 3}))
    row, rob, spec = _vs_preset(exp, 40.0)
    # deterministic replays: the same difference on every fresh seed
    per = json.loads(row["per_replicate_utility"])
    assert len(per) == 3 and len(set(per)) == 1 and per[0] > 0
    # the interval is over the stream's queries: it has a width and holds 0
    assert row["diff_utility"] == pytest.approx(per[0])
    assert row["diff_ci_low_utility"] < 0 < row["diff_ci_high_utility"]
    assert not row["excludes_0_utility"]
    assert row["verdict_utility"] == "no difference shown"
    assert row["ci_over_utility"] == "queries"
    # a per-run objective: no queries to resample, so no interval and no verdict
    assert math.isnan(row["diff_ci_low_recall_gini"])
    assert math.isnan(row["diff_ci_high_recall_gini"])
    assert row["verdict_recall_gini"] == NO_INTERVAL
    assert row["ci_over_recall_gini"] == "stream"
    assert row["diff_recall_gini"] == pytest.approx(
        np.mean(json.loads(row["per_replicate_recall_gini"])))
    assert "in-sample" in row["note"]
    # the fresh seeds replay the winner's own queries: their change says nothing
    fresh = rob[rob["check"] == "fresh-seeds"]
    assert len(fresh) == 2 and (fresh["note"] == REPLAYED_SEEDS_NOTE).all()
    lines = [ln for ln in _paired_lines(rob, spec) if ln.startswith("vs preset")]
    assert "bootstrap interval over the replayed stream's queries" in lines[0]
    assert "t-interval" not in " ".join(lines) and "no verdict" in lines[1]
    # replays in worker processes (what memsim sweep does): the same row
    pooled, _, _ = _vs_preset(exp, 40.0, jobs=2)
    assert pooled.equals(row)


def test_a_real_difference_on_a_replayed_stream_still_gets_its_verdict(stream_dir):
    # a one-day half-life forgets everything: far worse on the stream's queries
    exp = memsim.experiment_from_dict(_table({"source": str(stream_dir)},
                                             robustness={"replicates": 2}))
    row, _, _ = _vs_preset(exp, 1.0)
    assert row["diff_ci_low_utility"] < row["diff_utility"] < row["diff_ci_high_utility"] < 0
    assert row["verdict_utility"] == "worse"
    assert row["ci_over_utility"] == "queries"


def test_vs_preset_on_synthetic_replicates_keeps_its_t_interval_and_says_so():
    """Streams of their own: the t-interval over replicates of before, number
    for number, now with its unit (``ci_over_<objective>``)."""
    exp = memsim.experiment_from_dict(_table(SYNTHETIC, robustness={"replicates": 3}))
    row, rob, _ = _vs_preset(exp, 40.0)
    for lab in ("utility", "recall_gini"):
        d = json.loads(row[f"per_replicate_{lab}"])
        assert len(set(d)) == 3  # streams of their own: the differences vary
        mean, lo, hi, _ = mean_ci(np.array(d))
        assert (row[f"diff_{lab}"], row[f"diff_ci_low_{lab}"],
                row[f"diff_ci_high_{lab}"]) == (mean, lo, hi)
        assert row[f"ci_over_{lab}"] == "replicates"
    assert "replay" not in row["note"] and "in-sample" not in row["note"]
    assert rob.loc[rob["check"] == "fresh-seeds", "note"].isna().all()


# -- the plateau --------------------------------------------------------------------


def test_the_plateau_of_a_replayed_stream_is_not_measured(stream_dir):
    exp = memsim.experiment_from_dict(_table({"source": str(stream_dir)},
                                             robustness={"replicates": 0}))
    res = run_sweep(exp, out=None, quiet=True)
    # identical replays: a bootstrap over them would put only the best on it
    reps = res.trials[[c for c in res.trials if c.startswith("utility_rep")]]
    assert (reps.nunique(axis=1) == 1).all()
    pl = res.plateau
    assert pl["n_plateau"].isna().all() and pl["low"].isna().all()
    assert pl["note"].str.startswith("plateau not measured: the replicates replay one "
                                     "stream").all()
    assert (pl["n_replicates"] == 2).all()  # no replays added
    # the best value stands
    best = res.trials.loc[res.trials["values_utility"].idxmax(), HL]
    assert pl.set_index("objective").loc["utility", "best"] == pytest.approx(best)
    # the same trials taken for independent replicates: a plateau (of ties)
    assert plateau_table(res.trials, res.spec)["n_plateau"].notna().all()


# -- the audit ----------------------------------------------------------------------


def test_audit_effects_on_a_replayed_stream_are_paired_over_its_queries(stream_dir):
    t = _table({"source": str(stream_dir)}, replicates=3)
    t["sweep"]["params"][HL].update(low=100.0)
    exp = memsim.experiment_from_dict(t)
    rep = audit(exp, max_queries=40)
    rows = rep.params.set_index("objective")
    u = rows.loc["utility"]
    assert u["moves"] and u["effect_lo"] < u["effect_hi"]  # replays gave a zero-width one
    assert u["within_noise"] and not u["testable"]
    assert u["ci_over"] == "queries"
    assert "over the stream's 76 queries" in u["reason"]
    g = rows.loc["recall_gini"]
    assert g["ci_over"] == "stream" and math.isnan(g["effect_lo"]) and g["within_noise"]
    assert "measured once per run" in g["reason"]
    assert "replays of one stream" in rep.to_text()
    # the probe replays in worker processes: the same table
    assert audit(exp, max_queries=40, jobs=2).params.equals(rep.params)


# -- the report and a notebook's view of a replayed run --------------------------------


@pytest.fixture(scope="module")
def replayed_run(stream_dir, tmp_path_factory):
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "replayed", "replicates": 3, "seed": 5},
        "workload": {"source": str(stream_dir)},
        "policies": {"hivemind": {"preset": "hivemind"},
                     "similarity-only": {"preset": "similarity-only"}}})
    return memsim.run_experiment(exp, out=tmp_path_factory.mktemp("runs"))


def test_the_report_counts_a_replayed_stream_once(replayed_run, tmp_path):
    md = (replayed_run.path / "report.md").read_text(encoding="utf-8")
    assert "2 policies, one stream replayed in each of 3 replicates" in md
    assert "76 queries," in md
    assert "replicate stream(s)" not in md and "228 queries" not in md
    # synthetic replicates: the sentence of before
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "synthetic", "replicates": 2, "seed": 5},
        "workload": {"horizon_days": 10, "backfill_days": 10, "queries_per_day": 3.0},
        "policies": {"hivemind": {"preset": "hivemind"},
                     "similarity-only": {"preset": "similarity-only"}}})
    run = memsim.run_experiment(exp, out=tmp_path)
    n = run.queries.groupby("replicate")["query_id"].nunique().sum()
    md = (run.path / "report.md").read_text(encoding="utf-8")
    assert (f"2 policies, 2 replicate stream(s) (every policy sees the same stream: common "
            f"random numbers), {n} queries in all, budget ") in md


def test_a_notebook_shows_a_missing_mean_as_n_a(replayed_run):
    s = replayed_run.summary.set_index(["policy", "metric"])["mean"]
    assert math.isnan(s[("hivemind", "recall_age_90_inf")])  # no note is 90 days old
    page = replayed_run._repr_html_()
    assert "n/a" in page and not re.search(r"\bnan\b", page, re.IGNORECASE)
