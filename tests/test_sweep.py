"""Optuna sweeps (issue #5): validation, trial 0, planted optima, outputs,
resume after SIGKILL, and two workers on PostgreSQL.

Workloads are small (60 + 60 days, 6 notes and 3 queries a day, 10-day
ticks) so that a trial takes a fraction of a second; the planted truth does
not need more.
"""

from __future__ import annotations

import ast
import json
import math
import os
import signal
import subprocess
import sys
import time
import tomllib
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import memsim
from memsim.cli import main
from memsim.core.errors import ConfigError
from memsim.sweep import SweepSpec, TrialEvaluator, apply_params, open_storage, run_sweep

ROOT = Path(__file__).resolve().parents[1]
ONLY = {"share": 0.0}
HL = "policies.p.decay.half_life_days"
PROJECT_30 = {"evergreen": ONLY, "project": {"share": 1.0, "lifetime_median_days": 30.0,
                                             "lifetime_sigma": 0.0},
              "scratch": ONLY, "superseding": ONLY, "distractor": {"share": 0.3}}
EVERGREEN = {"evergreen": {"share": 1.0}, "project": ONLY, "scratch": ONLY,
             "superseding": ONLY, "distractor": {"share": 0.3}}


def table(classes=PROJECT_30, *, own=400.0, low=1.0, high=1000.0, trials=6, replicates=2,
          **sweep):
    """A one-policy experiment (product ranker, half-life decay, skip-fill)
    whose own half-life is ``own``, swept over [low, high] on a log scale."""
    return {
        "experiment": {"name": "planted", "seed": 7, "replicates": replicates,
                       "budget_tokens": 600, "tick_days": 10.0},
        "workload": {"horizon_days": 60, "backfill_days": 60, "notes_per_day": 6.0,
                     "queries_per_day": 3.0, "n_topics": 10, "classes": classes},
        "policies": {"p": {"ranker": "product",
                           "decay": {"kind": "half-life", "half_life_days": own},
                           "packer": "skip-fill"}},
        "sweep": {"trials": trials, "seed": 1,
                  "objectives": [{"metric": "utility", "direction": "maximize"}],
                  "params": {HL: {"type": "float", "low": low, "high": high, "log": True}},
                  **sweep},
    }


def experiment(**kw):
    return memsim.experiment_from_dict(table(**kw))


def write_toml(path: Path, t: dict) -> Path:
    from memsim.runs.config import dumps_toml

    path.write_text(dumps_toml(t), encoding="utf-8")
    return path


# --------------------------------------------------------------------------
# Validation: one clear line naming the dotted key
# --------------------------------------------------------------------------


def _mut(fn):
    t = table()
    fn(t)
    return t


BAD = [
    (lambda t: t["sweep"].update(trail=3), "sweep.trail: unknown key (did you mean 'trials'?)"),
    (lambda t: t["sweep"].update(sampler="tpee"), "sweep.sampler: unknown sampler 'tpee' "
                                                  "(did you mean 'tpe'?)"),
    (lambda t: t["sweep"].update(objectives=[{"metric": "utilty"}]),
     "sweep.objectives[0].metric: unknown metric 'utilty' (did you mean 'utility'?)"),
    (lambda t: t["sweep"].update(objectives=[{"metric": "utility", "direction": "up"}]),
     "sweep.objectives[0].direction: expected 'maximize' or 'minimize'"),
    (lambda t: t["sweep"].update(objectives=[{"metric": "utility", "policy": "q"}]),
     "sweep.objectives[0].policy: 'q' is not a policy of this experiment"),
    (lambda t: t["sweep"]["params"][HL].update(low=2000.0),
     f'sweep.params."{HL}": low (2000.0) must be < high (1000.0)'),
    (lambda t: t["sweep"]["params"][HL].update(type="flaot"),
     f'sweep.params."{HL}".type: unknown type \'flaot\' (did you mean \'float\'?)'),
    (lambda t: t["sweep"]["params"][HL].update(low=0.0),
     f'sweep.params."{HL}".low: a log-scale range needs low > 0'),
    (lambda t: t["sweep"]["params"][HL].update(lo=1.0), f'sweep.params."{HL}".lo: unknown key'),
    (lambda t: t["sweep"]["params"].update(
        {"policies.p.decay.half_lif_days": {"type": "float", "low": 1.0, "high": 9.0}}),
     "names nothing in the resolved experiment (did you mean "
     "'policies.p.decay.half_life_days'?)"),
    (lambda t: t["sweep"]["params"].update(
        {"policies.q.decay.half_life_days": {"type": "float", "low": 1.0, "high": 9.0}}),
     'sweep.params."policies.q.decay.half_life_days": names nothing'),
    (lambda t: t["sweep"]["params"].update(
        {"policies.p.packer": {"type": "categorical", "choices": ["skip-fill", "greddy"]}}),
     'sweep.params."policies.p.packer": the value "greddy" does not give a valid experiment'),
    (lambda t: t["sweep"]["params"].update(
        {"policies.p.candidates": {"type": "int", "low": 10.5, "high": 60}}),
     'sweep.params."policies.p.candidates".low: expected an integer'),
    (lambda t: t["sweep"]["params"].update(
        {"policies.p.candidates": {"type": "int", "low": 10, "high": 45, "step": 10}}),
     "is not a multiple of step"),
    (lambda t: t["sweep"]["params"][HL].update(high=300.0),
     "the experiment's own value 400 is outside the search space [1, 300] (log)"),
    (lambda t: t["sweep"]["params"].update(
        {"experiment.seed": {"type": "int", "low": 1, "high": 9}}),
     'sweep.params."experiment.seed": cannot be swept'),
    (lambda t: t["sweep"].update(robustness={"variants": [{"workload.retriever_nose": 1.2}]}),
     "sweep.robustness.variants[0].workload.retriever_nose: names nothing in the resolved "
     "experiment (did you mean 'workload.retriever_noise'?)"),
    (lambda t: t["sweep"].update(sampler="grid"), "the grid sampler needs a 'step'"),
    (lambda t: t["sweep"].update(sampler="grid", trials=20, params={HL: {
        "type": "float", "low": 100.0, "high": 1000.0, "step": 100.0}}),
     "sweep.trials: the grid has 10 points; ask for at most 10 trials"),
    (lambda t: t.pop("sweep"), "sweep: the experiment has no [sweep] table"),
]


@pytest.mark.parametrize("mutate, message", BAD)
def test_invalid_sweep_tables_fail_with_one_clear_line(mutate, message):
    t = _mut(mutate)
    exp = memsim.experiment_from_dict(t)  # the [sweep] table is checked by the sweep
    with pytest.raises(ConfigError) as info:
        SweepSpec.from_config(exp.sweep, exp)
    text = str(info.value)
    assert message in text, text
    assert "\n" not in text


def test_cli_user_mistake_exits_2_with_one_line(tmp_path, capsys):
    t = table()
    t["sweep"]["objectives"] = [{"metric": "recal"}]
    f = write_toml(tmp_path / "bad.toml", t)
    assert main(["sweep", str(f), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did you mean 'recall'?" in err[0], err
    assert not (tmp_path / "out").exists()  # nothing is created for a bad config
    assert main(["sweep", str(f), "--storage", "ftp://nowhere", "--set",
                 "sweep.objectives=[{metric='recall'}]", "--out", str(tmp_path / "o")]) == 2
    assert "is not a storage URL" in capsys.readouterr().err


def test_parameter_keys_written_unquoted_in_toml_are_read_as_dotted_keys(tmp_path):
    text = """
[experiment]
name = "unquoted"
[policies.p]
decay = { kind = "half-life", half_life_days = 30.0 }
[sweep.params]
policies.p.decay.half_life_days = { type = "float", low = 5, high = 90 }
[sweep.robustness]
variants = [{ workload.retriever_noise = 1.2 }]
"""
    (tmp_path / "u.toml").write_text(text)
    exp = memsim.load_experiment(tmp_path / "u.toml")
    spec = SweepSpec.from_config(exp.sweep, exp)
    assert spec.keys == [HL]
    assert spec.robustness.variants == (("workload.retriever_noise=1.2",
                                         {"workload.retriever_noise": 1.2}),)
    assert spec.seed == exp.seed and spec.trials == 50 and spec.sampler == "tpe"
    assert spec.own_params(exp) == {HL: 30.0}


# --------------------------------------------------------------------------
# Trial 0 and the code path
# --------------------------------------------------------------------------


def test_trial_zero_is_the_experiment_and_matches_a_plain_run():
    exp = experiment(own=45.0, trials=3)
    res = run_sweep(exp, out=None)
    t0 = res.trials.iloc[0]
    assert t0["number"] == 0 and t0["origin"] == "experiment" and t0[HL] == 45.0
    plain = memsim.run_experiment(exp, out=None)
    m = plain.metric("utility")
    assert math.isclose(t0["values_utility"], float(m["mean"].iloc[0]), rel_tol=1e-12)
    # per-replicate values are kept, and they are the per-replicate means
    q = plain.queries
    for r in range(2):
        mean_r = q.loc[q["replicate"] == r, "utility"].mean()
        assert math.isclose(t0[f"utility_rep{r}"], mean_r, rel_tol=1e-12)
    assert (res.trials["state"] == "COMPLETE").sum() == 3
    # every trial differs from the others only by its parameter (common random
    # numbers): the same half-life gives the same value whatever the trial
    ev = TrialEvaluator(exp, res.spec)
    for _, row in res.trials.iterrows():
        assert ev.evaluate({HL: row[HL]})[0][0] == row["values_utility"]


def test_a_categorical_naming_the_current_kind_keeps_the_component_as_it_is():
    t = table(own=45.0)
    t["policies"]["p"]["packer"] = {"kind": "greedy-swap", "max_swaps": 2}
    t["sweep"]["params"]["policies.p.packer"] = {
        "type": "categorical", "choices": ["greedy-swap", "exact"]}
    exp = memsim.experiment_from_dict(t)
    spec = SweepSpec.from_config(exp.sweep, exp)
    own = spec.own_params(exp)
    assert own["policies.p.packer"] == "greedy-swap"
    same = apply_params(exp, own)
    assert same.to_config() == exp.to_config()
    other = apply_params(exp, {"policies.p.packer": "exact", HL: 12.0})
    assert other.policies["p"].packer.name == "exact"
    assert other.policies["p"].decay.half_life_days == 12.0


# --------------------------------------------------------------------------
# Planted optima
# --------------------------------------------------------------------------


@pytest.mark.slow
def test_a_utility_share_objective_is_the_run_summarys_pooled_share(tmp_path):
    """summary.csv pools utility_share over replicates (one ratio of sums); a
    trial averaged the replicates' own shares, so the sweep's 0.697631 read
    0.696 when its trial config was run. Now the objective is the pooled
    share, and each replicate's own share stays a user attribute."""
    exp = experiment(trials=3, replicates=3,
                     objectives=[{"metric": "utility_share", "direction": "maximize"}])
    res = run_sweep(exp, out=tmp_path, quiet=True)
    best = memsim.load_experiment(res.path / "sweep" / "best.toml")
    rerun = memsim.run_experiment(best, out=None, report=False)
    pooled = float(rerun.metric("utility_share")["mean"].iloc[0])
    assert res.best_value == pytest.approx(pooled, rel=1e-12, abs=1e-15)
    row = res.trials.loc[res.trials["number"] == res.best_number].iloc[0]
    reps = [row[f"utility_share_rep{r}"] for r in range(3)]
    q = rerun.queries
    for r in range(3):  # each replicate's own ratio of sums
        part = q[(q["replicate"] == r) & (q["oracle_utility"] > 0)]
        assert reps[r] == pytest.approx(part["utility"].sum() / part["oracle_utility"].sum(),
                                        rel=1e-12)
    assert abs(np.mean(reps) - pooled) > 1e-9  # the two definitions differ here


def test_planted_optimum_and_the_sweep_folder(tmp_path):
    """Project notes valid for exactly 30 days, then stale (gain -0.5): the
    best half-life is in the tens of days. A 50-trial TPE sweep over
    [1, 1000] days, started from a poor 400 days (trial 0), finds a best
    half-life within a factor of 2 of the best of a fine grid (25 points,
    factor 1.33 apart) evaluated with the same code. The same run checks the
    run folder's outputs."""
    exp = experiment(own=400.0, trials=50, robustness={
        "replicates": 2, "variants": [{"name": "noisy", "workload.retriever_noise": 1.2}]})
    res = run_sweep(exp, out=tmp_path, quiet=True)
    ev = TrialEvaluator(exp, res.spec)
    grid = np.geomspace(1.0, 1000.0, 25)
    values = [ev.evaluate({HL: float(h)})[0][0] for h in grid]
    h_grid = float(grid[int(np.argmax(values))])
    h_sweep = res.best_params[HL]
    assert 10.0 <= h_grid <= 150.0, (h_grid, values)  # the truth is planted where claimed
    assert abs(math.log2(h_sweep / h_grid)) <= 1.0, (h_sweep, h_grid)
    assert res.best_value >= max(values) - 0.05
    assert res.best_value > res.trials.loc[0, "values_utility"] + 0.1  # it beat trial 0

    sdir = res.path / "sweep"
    trials = pd.read_csv(sdir / "trials.csv")
    assert (trials["state"] == "COMPLETE").sum() == 50
    for col in ("number", "state", "values_utility", HL, "utility_rep0", "utility_rep1",
                "origin", "worker"):
        assert col in trials.columns, col
    # best.toml is a runnable, resolved experiment with the best value applied
    best = tomllib.loads((sdir / "best.toml").read_text())
    assert "sweep" not in best
    assert best["policies"]["p"]["decay"]["half_life_days"] == pytest.approx(h_sweep)
    rerun = memsim.run_experiment(memsim.load_experiment(sdir / "best.toml"), out=None)
    assert float(rerun.metric("utility")["mean"].iloc[0]) == pytest.approx(res.best_value,
                                                                          rel=1e-12)
    rob = pd.read_csv(sdir / "robustness.csv")
    fresh = rob[(rob["role"] == "best") & (rob["check"] == "fresh-seeds")]
    assert len(fresh) == 1 and fresh["replicates"].iloc[0] == "2-3"
    assert set(rob["check"]) == {"sweep", "fresh-seeds", "variant", "vs-experiment"}
    # best minus the experiment's own parameters, on the fresh seeds and on the
    # variant (two replicates: a t interval with 1 degree of freedom may well
    # include 0, and then the verdict says so)
    paired = rob[rob["check"] == "vs-experiment"]
    assert list(paired["variant"].fillna("")) == ["", "noisy"]
    assert (paired["diff_utility"] > 0).all()
    for _, r in paired.iterrows():
        assert r["verdict_utility"] == ("better" if r["excludes_0_utility"]
                                        else "no difference shown")
    # the plateau holds the best and the best of the fine grid (the optimum of
    # a log range that contains it), inside the range: no edge warning
    pl = pd.read_csv(sdir / "plateau.csv")
    assert pl["low"].iloc[0] <= h_sweep <= pl["high"].iloc[0]
    assert pl["low"].iloc[0] <= h_grid <= pl["high"].iloc[0], (h_grid, pl.iloc[0].to_dict())
    assert res.plateau["best"].iloc[0] == pytest.approx(h_sweep)
    assert not pl["edge_warning"].iloc[0]
    assert set(rob["role"]) == {"best", "experiment"}
    assert np.isfinite(rob.loc[rob["check"] != "vs-experiment", "values_utility"]).all()
    for name in ("history", "importance", "slice"):
        assert name in res.plots
    assert (sdir / "history.png").read_bytes()[:4] == b"\x89PNG"
    manifest = json.loads((res.path / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["sweep"]["storage"] == "journal:sweep/journal.log"
    assert json.loads((sdir / "sweep.json").read_text())["study"] == res.study_name
    assert (sdir / "journal.log").exists() and (res.path / "config.toml").exists()


def test_one_worker_is_reproducible_from_the_seed():
    exp = experiment(own=45.0, trials=5, replicates=1, robustness={"replicates": 0})
    a, b = run_sweep(exp, out=None), run_sweep(exp, out=None)
    cols = ["number", "state", "values_utility", HL]
    pd.testing.assert_frame_equal(a.trials[cols], b.trials[cols])
    other = run_sweep(experiment(own=45.0, trials=5, replicates=1, seed=2,
                                 robustness={"replicates": 0}), out=None)
    assert list(other.trials[HL])[1:] != list(a.trials[HL])[1:]  # the seed matters


def test_evergreen_only_drives_the_half_life_to_the_top_of_its_range():
    """Evergreen notes never go stale: any decay only hurts, so the sweep
    pushes the half-life up. The range tops at 365 days (ages reach 120
    days); the best trial lies within a factor of 2 of the top and is as good
    as the top itself. 20 trials suffice for a monotone objective."""
    exp = experiment(classes=EVERGREEN, own=10.0, low=1.0, high=365.0, trials=20,
                     replicates=1, robustness={"replicates": 0})
    res = run_sweep(exp, out=None)
    assert res.best_params[HL] >= 365.0 / 2, res.best_params
    top = TrialEvaluator(exp, res.spec).evaluate({HL: 365.0})[0][0]
    assert res.best_value >= top - 1e-9
    assert len(res.robustness) == 2 and set(res.robustness["check"]) == {"sweep"}


def test_several_objectives_give_a_pareto_set(tmp_path):
    exp = experiment(own=45.0, trials=6, replicates=1, sampler="nsga2",
                     objectives=[{"metric": "utility"},
                                 {"metric": "stale_rate", "direction": "minimize"}],
                     robustness={"replicates": 1})
    res = run_sweep(exp, out=tmp_path, plots=False)
    assert {"values_utility", "values_stale_rate"} <= set(res.trials.columns)
    assert res.pareto and res.best_number == res.pareto[0]
    pareto_files = sorted((res.path / "sweep" / "pareto").glob("trial_*.toml"))
    assert len(pareto_files) == len(res.pareto)
    assert set(res.robustness["role"]) <= {"pareto", "experiment"}
    # a plateau per objective, each from its own best trial; one replicate: not measured
    pl = pd.read_csv(res.path / "sweep" / "plateau.csv")
    assert list(pl["objective"]) == ["utility", "stale_rate"] and list(pl["param"]) == [HL] * 2
    assert pl["low"].isna().all() and pl["note"].str.contains("one replicate").all()
    # the least stale_rate; among trials tied there, the most utility (the
    # one not dominated), then the lowest number
    tr = res.trials[res.trials["state"] == "COMPLETE"]
    best_stale = tr.sort_values(["values_stale_rate", "values_utility", "number"],
                                ascending=[True, False, True])[HL].iloc[0]
    assert pl["best"].iloc[1] == pytest.approx(best_stale)


# --------------------------------------------------------------------------
# How sure a sweep is: plateau, edge warning, best against the preset
# --------------------------------------------------------------------------


def synthetic_trials(h, truth, *, replicates=4, noise=0.005, shared=0.05, seed=0, label="utility",
                     key=HL, extra=None):
    """A trials table for parameter values ``h`` with expected objective
    ``truth(h)``: each replicate adds an effect common to every trial (what
    common random numbers share, sd ``shared``) and a small independent
    noise per trial and replicate (sd ``noise``)."""
    rng = np.random.default_rng(seed)
    h = np.asarray(h, dtype=float)
    x = (np.asarray(truth(h), dtype=float)[:, None] + rng.normal(0.0, shared, replicates)
         + rng.normal(0.0, noise, (len(h), replicates)))
    df = pd.DataFrame({"number": np.arange(len(h)), "state": "COMPLETE",
                       f"values_{label}": x.mean(axis=1), key: h})
    for k, v in (extra or {}).items():
        df[k] = v
    for r in range(replicates):
        df[f"{label}_rep{r}"] = x[:, r]
    return df


def flat_20_80(h):
    """1 on [20, 80] days, falling by 0.3 per decade outside it."""
    out = np.log10(np.maximum(20.0 / h, h / 80.0))
    return 1.0 - 0.3 * np.maximum(out, 0.0)


def test_plateau_covers_a_known_flat_region_and_excludes_clearly_worse_values():
    from memsim.sweep import plateau_table

    spec = SweepSpec.from_config(experiment().sweep, experiment())
    h = np.geomspace(1.0, 1000.0, 61)  # 8 points per factor of 10
    tr = synthetic_trials(h, flat_20_80)
    pl = plateau_table(tr, spec)
    assert list(pl.columns[:6]) == ["objective", "param", "type", "best", "low", "high"]
    row = pl.iloc[0]
    assert row["objective"] == "utility" and row["param"] == HL
    assert 20.0 <= row["best"] <= 80.0
    assert row["low"] <= row["best"] <= row["high"]  # the plateau contains the best
    flat = h[(h >= 20.0) & (h <= 80.0)]
    # the flat region is covered up to one grid step at each end ...
    assert row["low"] <= flat[1] and row["high"] >= flat[-2], (row["low"], row["high"])
    # ... and values 0.06 worse (a factor of 1.6 outside it) are not on it
    assert row["low"] > 20.0 / 1.6 and row["high"] < 80.0 * 1.6, (row["low"], row["high"])
    assert row["n_plateau"] < row["n_trials"] == 61 and row["n_replicates"] == 4
    assert not row["edge_warning"]
    # flat over a factor of 4: the optimum cannot be told within a factor of 2
    assert not row["determined"] and row["width"] == pytest.approx(row["high"] / row["low"])
    assert row["note"].startswith("undetermined within x2: the plateau spans x")
    # deterministic: a named child stream of the sweep's seed
    pd.testing.assert_frame_equal(pl, plateau_table(tr, spec))
    # minimising the negated objective gives the same plateau
    neg = tr.copy()
    for c in [c for c in tr.columns if c.startswith(("values_", "utility_rep"))]:
        neg[c] = -tr[c]
    spec_min = SweepSpec.from_config(
        experiment(objectives=[{"metric": "utility", "direction": "minimize"}]).sweep,
        experiment())
    low_high = plateau_table(neg, spec_min).iloc[0][["low", "high"]]
    assert tuple(low_high) == (row["low"], row["high"])


def test_plateau_contains_the_truly_best_trial_despite_the_winners_curse():
    """Many trials near a smooth optimum: the best observed trial is a lucky
    one; the plateau still holds the trial with the best expected value."""
    from memsim.sweep import plateau_table

    spec = SweepSpec.from_config(experiment().sweep, experiment())
    h = np.geomspace(20.0, 80.0, 40)

    def peak(x):
        return 1.0 - 0.05 * np.log2(x / 40.0) ** 2

    for seed in range(5):
        tr = synthetic_trials(h, peak, replicates=3, noise=0.01, seed=seed)
        row = plateau_table(tr, spec).iloc[0]
        assert row["low"] <= 40.0 <= row["high"], (seed, row["low"], row["high"])


def test_one_replicate_gives_no_plateau_and_says_why():
    from memsim.sweep import plateau_table

    spec = SweepSpec.from_config(experiment().sweep, experiment())
    tr = synthetic_trials(np.geomspace(1.0, 1000.0, 20), flat_20_80, replicates=1)
    row = plateau_table(tr, spec).iloc[0]
    assert math.isnan(row["low"]) and math.isnan(row["high"]) and math.isnan(row["n_plateau"])
    assert "one replicate" in row["note"]
    assert 20.0 <= row["best"] <= 80.0


def test_categorical_plateau_lists_its_choices():
    from memsim.sweep import plateau_table

    exp = memsim.experiment_from_dict(_mut(lambda t: t["sweep"]["params"].update(
        {"policies.p.packer": {"type": "categorical",
                               "choices": ["skip-fill", "greedy", "exact"]}})))
    spec = SweepSpec.from_config(exp.sweep, exp)
    packers = np.array(["skip-fill", "greedy", "exact"] * 10)
    h = np.full(30, 40.0)
    gain = {"skip-fill": 1.0, "greedy": 1.0, "exact": 0.5}
    tr = synthetic_trials(h, lambda x: np.array([gain[k] for k in packers]),
                          extra={"policies.p.packer": packers})
    pl = plateau_table(tr, spec).set_index("param")
    assert json.loads(pl.loc["policies.p.packer", "choices"]) == ["skip-fill", "greedy"]
    assert not pl.loc["policies.p.packer", "edge_warning"]


def test_edge_warning_at_the_top_of_a_log_range_and_not_inside():
    from memsim.sweep import EDGE, ParamSpec, plateau_table, range_position
    from memsim.sweep.plateau import plateau_lines

    log = ParamSpec.from_config(HL, {"type": "float", "low": 1.0, "high": 1000.0,
                                     "log": True}, "sweep.params")
    lin = ParamSpec.from_config(HL, {"type": "float", "low": 1.0, "high": 1000.0},
                                "sweep.params")
    ints = ParamSpec.from_config("policies.p.candidates",
                                 {"type": "int", "low": 10, "high": 200, "step": 10},
                                 "sweep.params")
    assert EDGE == 0.05
    # 750 is at 96% of [1, 1000] on a log scale, 75% on a linear one
    assert range_position(log, 750.0) == pytest.approx(math.log(750) / math.log(1000))
    assert range_position(log, 750.0) >= 0.95 > range_position(lin, 750.0)
    assert range_position(ints, 200) == 1.0 and range_position(ints, 190) < 0.95

    spec = SweepSpec.from_config(experiment().sweep, experiment())
    h = np.geomspace(1.0, 1000.0, 30)
    top = plateau_table(synthetic_trials(h, lambda x: np.log(x)), spec)
    r = top.iloc[0]
    assert r["best"] == pytest.approx(1000.0) and r["edge_warning"] and r["edge"] == "high"
    assert "top 5% of its range [1, 1000] (log)" in r["warning"]
    assert "the plateau reaches the top 5% of the range" in r["note"]
    lines = plateau_lines(top)
    assert any(ln.startswith("WARNING (utility): best " + HL) for ln in lines), lines
    inside = plateau_table(synthetic_trials(h, flat_20_80), spec).iloc[0]
    assert not inside["edge_warning"] and inside["edge"] == "" and inside["warning"] == ""
    assert not any(ln.startswith("WARNING") for ln in plateau_lines(
        plateau_table(synthetic_trials(h, flat_20_80), spec)))
    bottom = plateau_table(synthetic_trials(h, lambda x: -np.log(x)), spec).iloc[0]
    assert bottom["edge"] == "low" and "bottom 5%" in bottom["warning"]


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_paired_difference_with_the_preset_has_the_right_sign(direction):
    """Half-life 40 days is far better than 1 day on the planted workload
    (utility about 0.85 against 0.2); the paired interval over three fresh
    replicates excludes 0 with the sign of the difference, and the verdict
    follows the objective's direction."""
    from memsim.sweep import robustness_check

    exp = experiment(robustness={"replicates": 3},
                     objectives=[{"metric": "utility", "direction": direction}])
    spec = SweepSpec.from_config(exp.sweep, exp)
    ev = TrialEvaluator(exp, spec)
    good = {"number": 5, "role": "best", "params": {HL: 40.0}, "values": [math.nan]}
    poor = {"number": 0, "role": "experiment", "params": {HL: 1.0}, "values": [math.nan]}
    rob = robustness_check(ev, spec, [good, poor])
    row = rob[rob["check"] == "vs-experiment"]
    assert len(row) == 1
    row = row.iloc[0]
    assert row["number"] == 5 and row["replicates"] == "2-4" and row["variant"] == ""
    fresh = rob[rob["check"] == "fresh-seeds"].set_index("number")["values_utility"]
    assert row["diff_utility"] == pytest.approx(fresh[5] - fresh[0], rel=1e-12)
    per = json.loads(row["per_replicate_utility"])
    assert len(per) == 3 and all(d > 0.3 for d in per)
    assert 0 < row["diff_ci_low_utility"] < row["diff_utility"] < row["diff_ci_high_utility"]
    assert row["excludes_0_utility"]
    assert row["verdict_utility"] == ("better" if direction == "maximize" else "worse")
    # the other way round: the sweep's "best" is the poorer one
    swapped = robustness_check(ev, spec, [dict(poor, role="best", number=7),
                                          dict(good, role="experiment", number=0)])
    srow = swapped[swapped["check"] == "vs-experiment"].iloc[0]
    assert srow["diff_ci_high_utility"] < 0 and srow["excludes_0_utility"]
    assert srow["verdict_utility"] == ("worse" if direction == "maximize" else "better")


def test_a_preset_that_wins_is_compared_with_itself():
    from memsim.sweep import robustness_check

    exp = experiment(robustness={"replicates": 2})
    spec = SweepSpec.from_config(exp.sweep, exp)
    own = {"number": 0, "role": "best", "params": {HL: 40.0}, "values": [math.nan],
           "experiment": True}
    rob = robustness_check(TrialEvaluator(exp, spec), spec, [own])
    row = rob[rob["check"] == "vs-experiment"].iloc[0]
    assert row["diff_utility"] == 0.0 and not row["excludes_0_utility"]
    assert row["verdict_utility"] == "no difference shown"
    assert "own parameters" in row["note"]


def test_memsim_sweep_prints_and_writes_plateau_edge_and_preset_lines(tmp_path, capsys):
    """End to end on a tiny sweep: evergreen notes (decay only hurts) with a
    half-life range topping at 120 days, so the best lies at its top."""
    t = table(EVERGREEN, own=10.0, low=1.0, high=120.0, trials=6, replicates=2,
              sampler="grid", robustness={"replicates": 2})
    t["sweep"]["params"][HL] = {"type": "float", "low": 10.0, "high": 120.0, "step": 10.0}
    t["sweep"]["trials"] = 12
    f = write_toml(tmp_path / "e.toml", t)
    assert main(["sweep", str(f), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    run = Path(out.strip().splitlines()[-1])
    sdir = run / "sweep"
    pl = pd.read_csv(sdir / "plateau.csv")
    # every grid point ran once; the plateau's replicates grew past the sweep's 2
    trials_ = pd.read_csv(sdir / "trials.csv")
    assert sorted(trials_[HL]) == [10.0 * i for i in range(1, 13)]
    assert list(pl["param"]) == [HL] and pl["n_replicates"].iloc[0] >= 2
    r = pl.iloc[0]
    assert r["low"] <= r["best"] <= r["high"]
    assert r["best"] == 120.0 and bool(r["edge_warning"]) and r["edge"] == "high"
    rob = pd.read_csv(sdir / "robustness.csv")
    paired = rob[rob["check"] == "vs-experiment"]
    assert len(paired) == 1 and paired["replicates"].iloc[0] == "2-3"
    assert paired["diff_utility"].iloc[0] > 0  # 120 days beat the preset's 10
    summary = (sdir / "summary.txt").read_text()
    for text in (out, summary):
        assert f"plateau of {HL} (utility): best 120, plateau [" in text, text
        assert f"WARNING (utility): best {HL} = 120 lies in the top 5% of its range" in text
        assert "vs preset: trial" in text and "95% paired t-interval" in text
    report = (run / "report.html").read_text()
    assert "plateau" in report and "lies in the top 5% of its range" in report
    assert "best - preset [95% CI]" in report


# --------------------------------------------------------------------------
# Resume after SIGKILL: none lost, none counted twice
# --------------------------------------------------------------------------


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _study(journal: Path):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=None, storage=open_storage(f"journal:{journal}"))


def _after_two_complete(trials) -> bool:
    """Two trials COMPLETE and one RUNNING with its parameters."""
    from optuna.trial import TrialState

    n_done = sum(t.state == TrialState.COMPLETE for t in trials)
    return n_done >= 2 and any(t.state == TrialState.RUNNING and t.params for t in trials)


def _start_and_kill(cmd, out: Path, ready=_after_two_complete) -> list[int]:
    """Start the sweep, SIGKILL it as soon as ``ready(trials)`` holds (by
    default: a trial with parameters is running after two completed); return
    the trials left RUNNING."""
    from optuna.trial import TrialState

    proc = subprocess.Popen(cmd, env=_env(), cwd=out.parent, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    killed = False
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            journals = list(out.glob("*/sweep/journal.log"))
            if journals:
                try:
                    trials = _study(journals[0]).get_trials(deepcopy=False)
                except ValueError:  # the journal exists before its study is created
                    time.sleep(0.01)
                    continue
                if ready(trials):
                    os.kill(proc.pid, signal.SIGKILL)
                    killed = True
                    break
            time.sleep(0.01)
    finally:
        if proc.poll() is None and not killed:
            proc.kill()
        proc.wait(timeout=30)
    assert killed, proc.stderr.read().decode()[-2000:]
    journal = next(out.glob("*/sweep/journal.log"))
    return [t.number for t in _study(journal).get_trials(deepcopy=False)
            if t.state == TrialState.RUNNING]


def test_sigkill_midway_then_the_same_command_completes_exactly(tmp_path):
    from optuna.trial import TrialState

    n = 10
    f = write_toml(tmp_path / "planted.toml", table(own=400.0, trials=n, replicates=2,
                                                    robustness={"replicates": 0}))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "memsim.cli", "sweep", str(f), "--out", str(out), "--quiet",
           "--no-report"]
    # The trial seen running may finish in the instant before the kill lands;
    # then kill the resumed sweep again (each start resumes the same study).
    killed_running: list[int] = []
    for _ in range(4):
        killed_running = _start_and_kill(cmd, out)
        if killed_running:
            break
    assert killed_running, "no kill landed mid-trial"
    journal = next(out.glob("*/sweep/journal.log"))
    assert json.loads((journal.parents[1] / "manifest.json").read_text())["status"] == "running"

    done = subprocess.run(cmd, env=_env(), cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert Path(done.stdout.strip().splitlines()[-1]) == journal.parents[1]  # same folder

    trials = _study(journal).get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == n
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    killed = trials[killed_running[0]]
    assert killed.state == TrialState.FAIL and "died" in killed.user_attrs["failed_reason"]
    retries = [t for t in complete if t.system_attrs.get("failed_trial") == killed.number]
    assert len(retries) == 1 and retries[0].params == killed.params  # retried, once
    # nothing counted twice: each completed parameter set appears once, except
    # by chance of the sampler (continuous values never repeat)
    assert len({json.dumps(t.params, sort_keys=True) for t in complete}) == n
    table_ = pd.read_csv(journal.parent / "trials.csv")
    assert (table_["state"] == "COMPLETE").sum() == n
    assert json.loads((journal.parents[1] / "manifest.json").read_text())["status"] == \
        "completed"

    # asking for more trials later continues the same study in the same folder
    more = subprocess.run(cmd + ["--trials", str(n + 2)], env=_env(), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert more.returncode == 0, more.stderr[-2000:]
    assert len(list((tmp_path / "out").iterdir())) == 1
    assert len(_study(journal).get_trials(deepcopy=False,
                                          states=(TrialState.COMPLETE,))) == n + 2


# --------------------------------------------------------------------------
# PostgreSQL: two worker processes, one study
# --------------------------------------------------------------------------


@pytest.mark.postgres
def test_two_workers_on_postgresql_share_one_study(tmp_path):
    url = os.environ.get("MEMSIM_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("MEMSIM_TEST_POSTGRES_URL is not set (bash .ci/run sets it)")
    pytest.importorskip("psycopg2")
    import optuna
    from optuna.trial import TrialState

    n = 8
    study = f"memsim-test-{uuid.uuid4().hex[:12]}"
    f = write_toml(tmp_path / "planted.toml", table(own=400.0, trials=n, replicates=2,
                                                    robustness={"replicates": 0}))
    done = subprocess.run([sys.executable, "-m", "memsim.cli", "sweep", str(f), "--out",
                           str(tmp_path / "out"), "--quiet", "--no-report", "--workers", "2",
                           "--storage", url,
                           "--study", study], env=_env(), cwd=tmp_path, capture_output=True,
                          text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    st = optuna.load_study(study_name=study, storage=open_storage(url))
    complete = st.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    assert len(complete) == n
    workers = {t.user_attrs["worker"] for t in complete}
    assert len(workers) == 2, workers  # both processes' trials landed in the one study
    manifest = json.loads(next((tmp_path / "out").glob("*/manifest.json")).read_text())
    assert "memsim:***@" in manifest["sweep"]["storage"]  # no password in files
    optuna.delete_study(study_name=study, storage=open_storage(url))


# --------------------------------------------------------------------------
# One journal file, two sweep commands at the same time
# --------------------------------------------------------------------------


def test_two_sweeps_on_one_journal_file_lose_no_trial(tmp_path):
    from optuna.trial import TrialState

    n = 12
    journal = tmp_path / "shared-journal.log"
    f = write_toml(tmp_path / "planted.toml", table(own=400.0, trials=n, replicates=1,
                                                    robustness={"replicates": 0}))
    cmd = [sys.executable, "-m", "memsim.cli", "sweep", str(f), "--quiet", "--no-report",
           "--storage", f"journal:{journal}", "--study", "shared"]
    procs = [subprocess.Popen(cmd + ["--out", str(tmp_path / f"out{i}")], env=_env(),
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for i in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=400)
        assert p.returncode == 0, err[-3000:]
    study = _study(journal)
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    # exactly the requested number finished, each trial number once
    assert len(complete) == n
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers))
    # both commands worked on the study
    assert len({t.user_attrs["worker"] for t in complete}) == 2


# --------------------------------------------------------------------------
# The package: one concern per module, lower modules never import higher ones
# --------------------------------------------------------------------------

#: memsim.sweep's modules from the bottom up, as its docstring lists them.
SWEEP_LAYERS = ("space", "evaluate", "study", "storage", "liveness", "workers", "robustness",
                "plateau", "outputs", "resume", "run", "load")


def _sweep_imports(tree: ast.Module) -> set[str]:
    """The memsim.sweep modules a module imports ("" for the package itself)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                out.update([node.module] if node.module else [a.name for a in node.names])
            elif node.level == 0 and (node.module or "").startswith("memsim.sweep"):
                out.add(node.module.removeprefix("memsim.sweep").lstrip("."))
        elif isinstance(node, ast.Import):
            out.update(a.name.removeprefix("memsim.sweep").lstrip(".") for a in node.names
                       if a.name.startswith("memsim.sweep"))
    return out


def test_sweep_modules_import_only_modules_below_them():
    pkg = ROOT / "memsim" / "sweep"
    assert {p.stem for p in pkg.glob("*.py")} == set(SWEEP_LAYERS) | {"__init__"}
    for i, name in enumerate(SWEEP_LAYERS):
        imported = _sweep_imports(ast.parse((pkg / f"{name}.py").read_text()))
        assert imported <= set(SWEEP_LAYERS[:i]), f"memsim.sweep.{name} imports {imported}"


def test_the_package_exports_its_public_api():
    for name in memsim.sweep.__all__:
        assert getattr(memsim.sweep, name) is not None, name
    assert memsim.run_sweep is run_sweep and memsim.SweepResult is memsim.sweep.SweepResult


# --------------------------------------------------------------------------
# Opening the study, the folder's hash, the one importance measure
# --------------------------------------------------------------------------


def _access_lines(summary: str) -> tuple[str, str]:
    """(storage given to optuna-dashboard, the Python expression) of a summary."""
    import shlex

    dash = [ln for ln in summary.splitlines() if ln.startswith("open the study: optuna-dashboard ")]
    py = [ln for ln in summary.splitlines() if ln.startswith("in Python: optuna.load_study(")]
    assert len(dash) == 1 and len(py) == 1, summary
    command = shlex.split(dash[0].removeprefix("open the study: ").split("   (")[0])
    assert command[0] == "optuna-dashboard" and len(command) == 2, command
    return command[1], py[0].removeprefix("in Python: ")


def test_summary_prints_an_optuna_dashboard_command_that_opens_the_journal(tmp_path):
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from memsim.sweep.outputs import importance_table

    exp = experiment(own=45.0, trials=4, replicates=1, robustness={"replicates": 0})
    res = run_sweep(exp, out=tmp_path, plots=False)
    sdir = res.path / "sweep"
    summary = (sdir / "summary.txt").read_text()
    assert summary.rstrip("\n") == res.summary_text()
    path, expr = _access_lines(summary)
    # optuna-dashboard opens a journal by the path of the file (sweep.json's
    # "journal:sweep/journal.log" is memsim's own form, which it cannot open)
    assert Path(path) == (sdir / "journal.log").resolve() and Path(path).is_absolute()
    study = optuna.load_study(study_name=res.study_name,
                              storage=JournalStorage(JournalFileBackend(path)))
    assert len(study.get_trials()) == 4
    assert len(eval(expr, {"optuna": optuna}).get_trials()) == 4  # the printed Python works
    report = (res.path / "report.md").read_text()
    assert f"optuna-dashboard {path}" in report

    # the report, the manifest, the folder and the study share one hash
    hash8 = res.path.name.rsplit("_", 1)[-1]
    manifest = json.loads((res.path / "manifest.json").read_text())
    assert manifest["config_hash"] == hash8 == manifest["sweep"]["identity"]
    assert study.user_attrs["memsim_identity"] == hash8
    assert f"| config_hash | {hash8} |" in report
    assert res.study_name.endswith(hash8)
    # the report says what the manifest says: completed, with the report's time
    assert manifest["status"] == "completed" and "| status | completed |" in report
    assert "report" in manifest["timings_s"]

    # one importance measure: Optuna's fANOVA, seeded, in importance.csv and the report
    pytest.importorskip("sklearn")
    imp = pd.read_csv(sdir / "importance.csv")
    assert list(imp.columns) == ["objective", "param", "importance"]
    assert list(imp["param"]) == [HL] and imp["importance"].sum() == pytest.approx(1.0)
    again = importance_table(study, res.spec)
    assert np.allclose(again["importance"], imp["importance"])
    assert "fANOVA" in report and "Spearman" not in report
    assert "importance (fANOVA, utility): " in summary


def test_sqlite_storage_prints_an_absolute_url_that_loads_the_study(tmp_path, monkeypatch):
    import optuna

    monkeypatch.chdir(tmp_path)
    exp = experiment(own=45.0, trials=2, replicates=1, robustness={"replicates": 0})
    res = run_sweep(exp, out=tmp_path / "out", storage="sqlite:///rel.db", plots=False,
                    report=False)
    url, expr = _access_lines(res.summary_text())
    assert url == f"sqlite:///{(tmp_path / 'rel.db').absolute()}"
    monkeypatch.chdir(ROOT)  # the URL opens from anywhere
    study = optuna.load_study(study_name=res.study_name, storage=url)
    assert len(study.get_trials()) == 2
    assert len(eval(expr, {"optuna": optuna}).get_trials()) == 2


def test_study_access_lines_mask_a_password_and_say_so():
    from memsim.reporting.report import study_access_lines

    lines = study_access_lines("postgresql://memsim:***@db:5432/memsim", "s")
    assert lines[0].startswith("open the study: optuna-dashboard "
                               "'postgresql://memsim:***@db:5432/memsim'")
    assert "put it in place of ***" in lines[-1]
    assert "nothing to open" in study_access_lines("memory", "s")[0]


# --------------------------------------------------------------------------
# Cost objectives: store size, evictions, pooled utility share; Pareto front
# --------------------------------------------------------------------------

RETENTION = "policies.aim.retention"


def retention_table(trials=8):
    """ai-memory's eviction sweep on a tiny workload, two objectives."""
    return {
        "experiment": {"name": "retention", "seed": 3, "replicates": 1, "budget_tokens": 600,
                       "tick_days": 5.0},
        "workload": {"horizon_days": 40, "backfill_days": 40, "notes_per_day": 6.0,
                     "queries_per_day": 3.0, "n_topics": 10, "n_actors": 2},
        "policies": {"aim": {"preset": "ai-memory"}},
        "sweep": {"trials": trials, "seed": 1, "sampler": "random",
                  "objectives": [{"metric": "utility_share", "direction": "maximize"},
                                 {"metric": "store_tokens", "direction": "minimize"}],
                  "params": {f"{RETENTION}.cold_threshold": {"type": "float", "low": 0.0,
                                                             "high": 0.8},
                             f"{RETENTION}.lambda_per_day": {"type": "float", "low": 0.002,
                                                             "high": 0.3, "log": True}},
                  "robustness": {"replicates": 0}},
    }


def test_a_cost_objective_needs_its_direction():
    t = retention_table()
    t["sweep"]["objectives"][1].pop("direction")
    exp = memsim.experiment_from_dict(t)  # the [sweep] table is checked by the sweep
    with pytest.raises(ConfigError, match=r"objectives\[1\]\.direction: missing; store_tokens"):
        SweepSpec.from_config(exp.sweep, exp)
    for metric in ("store_notes", "evicted_notes"):
        t["sweep"]["objectives"][1] = {"metric": metric}
        exp = memsim.experiment_from_dict(t)
        with pytest.raises(ConfigError, match="has no default direction"):
            SweepSpec.from_config(exp.sweep, exp)


def test_run_level_objectives_match_the_run_frames():
    """Each run-level objective is the per-replicate value of the run's own
    frames: the last store row, the arms row, the pooled utility share."""
    t = retention_table()
    t["experiment"]["replicates"] = 2
    t["sweep"]["objectives"] = [
        {"metric": "utility_share", "direction": "maximize"},
        {"metric": "store_tokens", "direction": "minimize"},
        {"metric": "store_notes", "direction": "minimize"},
        {"metric": "evicted_notes", "direction": "minimize"},
        {"metric": "tokens_used", "direction": "minimize"}]
    exp = memsim.experiment_from_dict(t)
    spec = SweepSpec.from_config(t["sweep"], exp)
    params = {f"{RETENTION}.cold_threshold": 0.4, f"{RETENTION}.lambda_per_day": 0.05}
    values, per = TrialEvaluator(exp, spec).evaluate(params)
    from memsim.runs.runner import simulate_experiment
    from memsim.reporting.stats import utility_share

    frames = simulate_experiment(apply_params(exp, params))
    q, st, arms = frames["queries"], frames["store"], frames["arms"]
    for r in (0, 1):
        last = st[st["replicate"] == r].sort_values("t").iloc[-1]
        assert per["store_tokens"][r] == last["store_tokens"]
        assert per["store_notes"][r] == last["store_notes"]
        assert per["evicted_notes"][r] == arms.loc[arms["replicate"] == r, "evicted_notes"].item()
        assert per["utility_share"][r] == pytest.approx(utility_share(q[q["replicate"] == r]))
        assert per["tokens_used"][r] == pytest.approx(q.loc[q["replicate"] == r,
                                                            "tokens_used"].mean())
    assert values[1] == pytest.approx(np.mean(list(per["store_tokens"].values())))
    assert per["evicted_notes"][0] > 0  # the threshold evicts: the objective measures it


def test_two_objective_retention_sweep_gives_a_front_and_its_report_section(tmp_path):
    res = run_sweep(memsim.experiment_from_dict(retention_table()), out=tmp_path, plots=False)
    assert len(res.pareto) >= 2, res.trials
    front = res.trials[res.trials["number"].isin(res.pareto)]
    # along the front, more utility costs more storage
    front = front.sort_values("values_store_tokens")
    assert front["values_utility_share"].is_monotonic_increasing
    report = (res.path / "report.md").read_text(encoding="utf-8")
    assert (f"Pareto set on utility_share and store_tokens: the {len(res.pareto)} "
            "non-dominated trials") in report
    assert "Pareto front: utility_share against store_tokens" in report
    assert (res.path / "figures" / "sweep_pareto.png").stat().st_size > 1000
    # the console names the trade-off, not a "best" trial, and writes token counts whole
    text = res.summary_text()
    assert "no single best" in text and "best: trial" not in text
    assert "e+0" not in text and f"  trial {res.pareto[0]}: utility_share = " in text


def test_the_retention_example_is_a_valid_two_objective_sweep():
    exp = memsim.load_experiment(ROOT / "experiments" / "sweep_retention.toml")
    spec = SweepSpec.from_config(exp.to_config()["sweep"], exp)
    assert [(o.metric, o.direction) for o in spec.objectives] == [
        ("utility_share", "maximize"), ("store_tokens", "minimize")]


def test_the_robustness_recheck_shows_its_progress(tmp_path):
    """After the trials, the re-check on fresh seeds is a phase of its own on
    stderr, one line per replicate replay, not minutes of silence."""
    exp = ROOT / "experiments" / "sweep_hivemind.toml"
    proc = subprocess.run(
        [sys.executable, "-m", "memsim.cli", "sweep", str(exp), "--trials", "3", "--out",
         str(tmp_path), "--no-report", "--set", "experiment.replicates=1",
         "--set", "workload.horizon_days=8", "--set", "workload.backfill_days=8",
         "--set", "sweep.robustness.replicates=2"],
        capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln.split(" (")[0] for ln in proc.stderr.splitlines()]
    replays = [ln for ln in lines if ln.startswith("memsim sweep: replay ")]
    # 2 fresh seeds, then 2 replicates for each of the experiment's variants
    n = 2 + 2 * len(tomllib.loads(exp.read_text())["sweep"]["robustness"].get("variants", []))
    assert replays == [f"memsim sweep: replay {k}/{n} done" for k in range(1, n + 1)]
    assert lines.index(replays[0]) > lines.index("memsim sweep: trial 3/3 done")


# --------------------------------------------------------------------------
# Storage, options and the grid: mistakes found before any folder exists
# --------------------------------------------------------------------------


def _tiny(tmp_path: Path, **kw) -> Path:
    """A sweep file of 2 quick trials (one replicate, no re-check)."""
    t = table(own=45.0, trials=2, replicates=1, robustness={"replicates": 0}, **kw)
    t["workload"].update(horizon_days=20, backfill_days=20)
    return write_toml(tmp_path / "tiny.toml", t)


def test_a_storage_that_cannot_be_opened_leaves_no_folder_to_retry(tmp_path, capsys):
    f = _tiny(tmp_path)
    out = tmp_path / "out"
    bad = f"sqlite:///{tmp_path / 'nonexist' / 'dir' / 'x.db'}"
    assert main(["sweep", str(f), "--out", str(out), "-q", "--no-report",
                 "--storage", bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--storage: cannot open" in err[0], err
    assert not out.exists() or not list(out.iterdir())
    # so the plain command starts afresh in its own journal
    assert main(["sweep", str(f), "--out", str(out), "-q", "--no-report"]) == 0
    (run,) = out.iterdir()
    assert json.loads((run / "sweep" / "sweep.json").read_text())["storage"] == \
        "journal:sweep/journal.log"


def test_a_relative_sqlite_url_is_recorded_absolute_and_resumes_from_elsewhere(
        tmp_path, monkeypatch):
    a, b = tmp_path / "A", tmp_path / "B"
    a.mkdir()
    b.mkdir()
    monkeypatch.chdir(a)
    exp = experiment(own=45.0, trials=2, replicates=1, robustness={"replicates": 0})
    first = run_sweep(exp, out=tmp_path / "rs", storage="sqlite:///rel.db", plots=False,
                      report=False)
    url = f"sqlite:///{a / 'rel.db'}"
    assert json.loads((first.path / "sweep" / "sweep.json").read_text())["storage"] == url
    assert json.loads((first.path / "manifest.json").read_text())["sweep"]["storage"] == url
    monkeypatch.chdir(b)
    more = run_sweep(None, resume=first.path, trials=3, plots=False, report=False)
    assert more.path == first.path and (more.trials["state"] == "COMPLETE").sum() == 3
    assert not (b / "rel.db").exists()


def _grid_table(trials: int | None = None) -> dict:
    t = table(own=20.0, replicates=1, sampler="grid", robustness={"replicates": 0})
    t["workload"].update(horizon_days=20, backfill_days=20)
    t["sweep"]["params"][HL] = {"type": "float", "low": 10.0, "high": 40.0, "step": 10.0}
    if trials is None:
        del t["sweep"]["trials"]
    else:
        t["sweep"]["trials"] = trials
    return t


def _points(res) -> list[float]:
    done = res.trials[res.trials["state"] == "COMPLETE"]
    return sorted(done[HL].tolist())


def test_the_grid_sampler_runs_every_point_once_trial_zero_included(tmp_path):
    exp = memsim.experiment_from_dict(_grid_table())
    res = run_sweep(exp, out=None, plots=False, report=False)
    assert _points(res) == [10.0, 20.0, 30.0, 40.0]
    assert res.trials.loc[res.trials["number"] == 0, "origin"].iloc[0] == "experiment"
    # a grid sweep grown session by session still runs each point once
    part = run_sweep(exp, out=tmp_path, trials=2, plots=False, report=False)
    assert 20.0 in _points(part) and len(set(_points(part))) == 2
    whole = run_sweep(exp, out=tmp_path, trials=4, plots=False, report=False)
    assert whole.path == part.path and _points(whole) == [10.0, 20.0, 30.0, 40.0]


def test_trials_option_replaces_a_grid_files_trials_before_the_grid_check(tmp_path):
    from memsim.sweep.run import _load_sweep

    f = write_toml(tmp_path / "grid.toml", _grid_table(trials=10))
    with pytest.raises(ConfigError, match="sweep.trials: the grid has 4 points"):
        _load_sweep(f, None, None, None)
    _, spec, _, _ = _load_sweep(f, None, 3, None)
    assert spec.trials == 3
    with pytest.raises(ConfigError, match=r"^--trials: the grid has 4 points"):
        _load_sweep(f, None, 5, None)


@pytest.mark.parametrize("option, value, message", [
    ("--batch", "0", "--batch: expected an integer >= 1"),
    ("--pruner", "medain", "--pruner: unknown pruner 'medain' (did you mean 'median'?)"),
    ("--cache-mb", "-5", "--cache-mb: expected an integer >= 0"),
])
def test_a_bad_option_is_blamed_on_the_option_not_the_file(tmp_path, capsys, option, value,
                                                            message):
    f = _tiny(tmp_path)
    assert main(["sweep", str(f), "--out", str(tmp_path / "o"), option, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and str(f) not in err[0], err
    assert not (tmp_path / "o").exists()


def test_an_empty_study_name_is_refused(tmp_path, capsys):
    f = _tiny(tmp_path)
    assert main(["sweep", str(f), "--out", str(tmp_path / "o"), "--study", ""]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--study: ''" in err[0], err
    assert not (tmp_path / "o").exists()


def test_a_file_that_is_no_journal_is_refused_not_rewritten(tmp_path, capsys):
    f = _tiny(tmp_path)
    log = tmp_path / "app.log"
    log.write_text("2024-01-01 started\n2024-01-01 stopped\n")
    for storage, message in ((f"journal:{log}", "is not an Optuna journal"),
                             (str(log), "is not a storage URL")):
        assert main(["sweep", str(f), "--out", str(tmp_path / "o"), "--storage", storage]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"--storage {storage}" in err[0] or "--storage: " in err[0]
        assert message in err[0], err
    assert log.read_text() == "2024-01-01 started\n2024-01-01 stopped\n"
    assert [p.name for p in tmp_path.glob("app.log*")] == ["app.log"]
    assert not (tmp_path / "o").exists()
    # a bare FILE.log is not a storage (--storage takes journal:FILE): the line says so
    assert main(["sweep", str(f), "--out", str(tmp_path / "o"), "--storage",
                 str(tmp_path / "new.log")]) == 2
    err = capsys.readouterr().err
    assert f"journal:{tmp_path / 'new.log'}" in err and not (tmp_path / "new.log").exists()


def test_load_sweep_reads_a_killed_sweep_as_failed(tmp_path):
    import platform

    f = _tiny(tmp_path)
    res = run_sweep(f, out=tmp_path / "o", plots=False, report=False)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    manifest = json.loads((res.path / "manifest.json").read_text())
    manifest.update(status="running", host=platform.node(), pid=gone.pid)
    (res.path / "manifest.json").write_text(json.dumps(manifest))
    run = memsim.load_sweep(res.path)
    assert run.status == "failed" and "interrupted" in run.manifest["error"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_workers_give_their_trials_back_when_the_sweep_is_stopped(tmp_path, sig):
    """``--workers 2`` stopped by SIGTERM (or SIGINT) to the sweep: each
    worker marks its running trial FAIL, naming the interruption, and
    enqueues its parameters again, as one worker does; nothing is left
    RUNNING (before: the workers died with their trials RUNNING, found only
    by the reaper of a later session), and no worker prints a traceback."""
    from optuna.trial import TrialState

    f = write_toml(tmp_path / "planted.toml", table(own=400.0, trials=30, replicates=2,
                                                    robustness={"replicates": 0}))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "memsim.cli", "sweep", str(f), "--out",
                             str(out), "--quiet", "--no-report", "--workers", "2"],
                            env=_env(), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        running: list = []
        while time.monotonic() < deadline and proc.poll() is None and not running:
            journals = list(out.glob("*/sweep/journal.log"))
            try:
                trials = _study(journals[0]).get_trials(deepcopy=False) if journals else []
            except ValueError:  # the journal exists before its study is created
                trials = []
            running = [t for t in trials if t.state == TrialState.RUNNING and t.params]
            time.sleep(0.05)
        assert running, "no trial was seen running"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + sig, err[-2000:]
    assert "Traceback" not in err, err[-3000:]
    trials = _study(next(out.glob("*/sweep/journal.log"))).get_trials(deepcopy=False)
    assert not [t.number for t in trials if t.state == TrialState.RUNNING]
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert failed and all(t.user_attrs.get("error", "").startswith("interrupted: ")
                          for t in failed)
    waiting = [t for t in trials if t.state == TrialState.WAITING]
    assert sorted(json.dumps(t.params, sort_keys=True) for t in waiting) == \
        sorted(json.dumps(t.params, sort_keys=True) for t in failed)
