"""Sweeps that know when they do not know: the edge warning's slope test and
a plateau whose replicates grow until it is narrow enough, or that says it is
undetermined (memsim.sweep.plateau)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import memsim
from memsim.data.planted import known_optimum
from memsim.sweep import SweepSpec, run_sweep
from memsim.sweep.plateau import (FACTOR, MAX_REPLICATES, edge_slope, grow_plateau,
                                  plateau_lines, plateau_table)
from memsim.data.workload import SyntheticWorkload

HL = "policies.p.decay.half_life_days"


def world(h: float) -> dict:
    """One expiring class, one note per slot, exponential validity of half-life
    ``h``: the calibrated-product ranker at the derived beta is best at ``h``."""
    return {"horizon_days": 60.0, "backfill_days": 4 * h, "queries_per_day": 6.0,
            "notes_per_day": 10.0,
            "classes": {"evergreen": {"share": 0.0}, "scratch": {"share": 0.0},
                        "superseding": {"share": 0.0}, "distractor": {"share": 0.0},
                        "project": {"share": 1.0, "notes_per_slot": 1.0,
                                    "lifetime_law": "exponential", "lifetime_median_days": h}}}


def experiment(h_true: float, low: float, high: float, *, trials: int, replicates: int,
               seed: int = 3) -> memsim.Experiment:
    wl = world(h_true)
    beta = known_optimum(SyntheticWorkload.from_config(wl)).beta
    return memsim.experiment_from_dict({
        "experiment": {"name": "sure", "seed": 5, "replicates": replicates,
                       "budget_tokens": 600, "tick_days": 10.0},
        "workload": wl,
        "policies": {"p": {"ranker": {"kind": "calibrated-product", "beta": beta},
                           "decay": {"kind": "half-life", "half_life_days": 5.0},
                           "packer": "top-k-cutoff"}},
        "sweep": {"trials": trials, "sampler": "random", "seed": seed,
                  "objectives": [{"metric": "utility", "direction": "maximize", "policy": "p"}],
                  "params": {HL: {"type": "float", "low": low, "high": high, "log": True}},
                  "robustness": {"replicates": 0}}})


def synthetic(h, truth, replicates, *, seed=0, shared=0.05, noise=0.01):
    """A trials table: expected objective ``truth(h)``, a replicate effect
    common to every trial and an independent noise per trial and replicate."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    h = np.asarray(h, dtype=float)
    x = (truth(h)[:, None] + rng.normal(0.0, shared, replicates)
         + rng.normal(0.0, noise, (len(h), replicates)))
    df = pd.DataFrame({"number": np.arange(len(h)), "state": "COMPLETE",
                       "values_utility": x.mean(axis=1), HL: h})
    for r in range(replicates):
        df[f"utility_rep{r}"] = x[:, r]
    return df


def spec_over(low, high):
    return SweepSpec.from_config(experiment(30.0, low, high, trials=5, replicates=2).sweep)


# --------------------------------------------------------------------------
# The edge warning: the best need not sit in the outer 5%
# --------------------------------------------------------------------------


def test_a_ten_trial_sweep_below_the_optimum_warns_about_the_edge():
    # the case: 10 trials over [2, 40] days on a workload whose
    # optimum is 70 days; the best trial (29 days) is not in the outer 5% of
    # the range, but the objective still rises towards its top
    res = run_sweep(experiment(70.0, 2.0, 40.0, trials=10, replicates=2),
                    out=None, quiet=True, plots=False, report=False)
    r = res.plateau.iloc[0]
    assert r["position"] < 0.95  # the old rule alone stays silent
    assert r["edge_warning"] and r["edge"] == "high" and r["edge_rule"] == "slope"
    assert r["edge_slope"] > 0 and r["edge_slope_p"] < 0.05
    assert "still improves towards the top of its range [2, 40] (log)" in r["warning"]
    assert any(ln.startswith("WARNING (utility)") for ln in plateau_lines(res.plateau))


def test_the_slope_rule_is_silent_when_the_optimum_is_inside():
    spec = spec_over(2.0, 40.0)
    h = np.geomspace(2.5, 34.0, 10)  # none in the outer 5% of the range

    def peak(at):
        return lambda x: 0.8 - 0.05 * np.log2(x / at) ** 2

    inside = plateau_table(synthetic(h, peak(10.0), 3), spec).iloc[0]
    assert not inside["edge_warning"] and inside["edge_rule"] == ""
    beyond = plateau_table(synthetic(h, peak(70.0), 3), spec).iloc[0]
    assert beyond["edge_warning"] and beyond["edge_rule"] == "slope"
    assert beyond["edge"] == "high"
    below = plateau_table(synthetic(h, peak(0.5), 3), spec).iloc[0]
    assert below["edge"] == "low" and below["edge_rule"] == "slope"
    assert "towards the bottom" in below["warning"]


def test_edge_slope_needs_the_best_among_the_trials_nearest_the_edge():
    u = np.linspace(0.0, 0.9, 10)
    y = u.copy()  # rising towards the top
    assert edge_slope(u, y, best=9)[0] == "high"
    assert edge_slope(u, y, best=2)[0] == ""  # the best elsewhere: no claim
    assert edge_slope(u[:3], y[:3], best=2)[0] == ""  # too few trials to test


# --------------------------------------------------------------------------
# The plateau: more replicates, or "undetermined within xN"
# --------------------------------------------------------------------------


def _fake(truth, h, *, seed=1, shared=0.05, noise=0.01):
    """An evaluator of trials ``numbers`` on new replicates, like the sweep's:
    each replicate has an effect common to all trials."""
    calls = []

    def evaluate(numbers, reps):
        calls.append((list(numbers), list(reps)))
        out = {}
        for r in reps:
            g = np.random.default_rng([seed, r])
            common = g.normal(0.0, shared)
            eps = g.normal(0.0, noise, len(h))
            for n in numbers:
                out.setdefault(n, {"utility": {}})["utility"][r] = float(
                    truth(h[n]) + common + eps[n])
        return out

    return evaluate, calls


def test_a_two_replicate_plateau_too_wide_grows_its_replicates_until_determined():
    spec = spec_over(1.0, 1000.0)
    h = np.geomspace(1.0, 1000.0, 41)

    def peak(x):
        return 0.8 - 0.08 * np.log2(x / 40.0) ** 2

    tr = synthetic(h, peak, 2, noise=0.02, seed=1)
    before = plateau_table(tr, spec).iloc[0]
    assert not before["determined"] and before["width"] > FACTOR
    assert f"undetermined within x{FACTOR:g}" in before["note"]
    evaluate, calls = _fake(peak, h, noise=0.02, seed=11)
    pl, aug = grow_plateau(tr, spec, evaluate, first_replicate=2)
    r = pl.iloc[0]
    assert calls and calls[0][1] == [2, 3]  # doubled: fresh replicates after the sweep's
    assert set(calls[0][0]) <= set(range(41)) and len(calls[0][0]) == before["n_plateau"]
    assert r["n_replicates"] > 2
    assert r["determined"] and r["width"] <= FACTOR and r["low"] <= 40.0 <= r["high"]
    assert "undetermined" not in r["note"]
    assert r["n_trials"] == 41 and r["best"] == before["best"]  # the sweep's
    assert f"utility_rep{r['n_replicates'] - 1 + 0}" in aug.columns


def test_a_plateau_still_wide_at_the_cap_says_undetermined():
    spec = spec_over(1.0, 1000.0)
    h = np.geomspace(1.0, 1000.0, 41)

    def flat(x):  # flat over a factor of 4: no number of replicates narrows it to 2
        return 0.8 - 0.3 * np.maximum(np.log10(np.maximum(20.0 / x, x / 80.0)), 0.0)

    tr = synthetic(h, flat, 2)
    evaluate, calls = _fake(flat, h)
    pl, _ = grow_plateau(tr, spec, evaluate, first_replicate=2)
    r = pl.iloc[0]
    assert r["n_replicates"] == MAX_REPLICATES and [len(c[1]) for c in calls] == [2, 4]
    assert not r["determined"] and r["width"] > FACTOR
    assert f"undetermined within x{FACTOR:g}" in r["note"] and "(the cap)" in r["note"]
    line = next(ln for ln in plateau_lines(pl) if ln.startswith("plateau of"))
    assert f"undetermined within x{FACTOR:g}" in line


@pytest.mark.parametrize("replicates", [2])
def test_run_sweep_grows_a_wide_two_replicate_plateau(replicates):
    exp = experiment(30.0, 1.0, 1000.0, trials=12, replicates=replicates, seed=4)
    res = run_sweep(exp, out=None, quiet=True, plots=False, report=False)
    r = res.plateau.iloc[0]
    # the sweep's own trials table keeps its two replicates ...
    assert not any(c.startswith("utility_rep2") for c in res.trials.columns)
    # ... and the plateau either narrowed with more replicates or says it did not
    grown = r["n_replicates"] > replicates
    assert grown or r["determined"], r.to_dict()
    if grown:
        assert r["determined"] or (
            r["n_replicates"] == MAX_REPLICATES and "undetermined within x2" in r["note"])
    assert math.isfinite(r["width"])


def test_a_tie_on_the_first_objective_is_broken_as_the_sweep_breaks_it():
    """Two objectives; trials 0 and 1 tie on utility, and trial 1 stores fewer
    tokens (it dominates trial 0). The plateau table and the slice plot
    named trial 0 (the lower number) best, beside best.toml's trial 1."""
    import pandas as pd

    from memsim.reporting.plots import slice_data
    from memsim.sweep import SweepSpec

    table = experiment(30.0, 1.0, 100.0, trials=5, replicates=2).sweep
    table = {**table, "objectives": [
        {"metric": "utility", "direction": "maximize", "policy": "p"},
        {"metric": "store_tokens", "direction": "minimize", "policy": "p"}]}
    spec = SweepSpec.from_config(table)
    lab_u, lab_s = spec.labels
    trials = pd.DataFrame({"number": [0, 1, 2], "state": "COMPLETE", HL: [5.0, 20.0, 60.0],
                           f"values_{lab_u}": [0.8, 0.8, 0.7],
                           f"values_{lab_s}": [1900.0, 1700.0, 1500.0]})
    for lab, reps in ((lab_u, [[0.8, 0.8], [0.8, 0.8], [0.7, 0.7]]),
                      (lab_s, [[1900.0] * 2, [1700.0] * 2, [1500.0] * 2])):
        for r in range(2):
            trials[f"{lab}_rep{r}"] = [x[r] for x in reps]
    rows = plateau_table(trials, spec).set_index("objective")
    assert rows.loc[lab_u, "best"] == 20.0
    assert rows.loc[lab_s, "best"] == 60.0
    data = slice_data(trials, f"values_{lab_u}", [HL], direction="maximize",
                      others=[(f"values_{lab_s}", "minimize")])
    assert data.loc[data["best"], "number"].tolist() == [1]
