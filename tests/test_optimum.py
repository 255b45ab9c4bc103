"""The planted optimum: a known law of validity, the Bayes ranker, and a sweep
that recovers the derived optimum (memsim.planted, memsim.optimum)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import memsim
from memsim.cli import main
from memsim.errors import ConfigError
from memsim.optimum import optimum
from memsim.planted import PlantedModel, known_optimum
from memsim.sweep import run_sweep
from memsim.workload import CLASS_NAMES, SyntheticWorkload

HL = "policies.p.decay.half_life_days"


def exponential_world(h: float, **extra) -> dict:
    """One expiring class, one note per slot, validity with half-life ``h``:
    a slot is askable exactly while its note is valid, so no stale gains."""
    table = {
        "horizon_days": 60.0, "backfill_days": 4 * h, "queries_per_day": 20.0,
        "notes_per_day": 20.0, "uniform_tokens": 100,
        "classes": {"evergreen": {"share": 0.0}, "scratch": {"share": 0.0},
                    "superseding": {"share": 0.0}, "distractor": {"share": 0.0},
                    "project": {"share": 1.0, "notes_per_slot": 1.0,
                                "lifetime_law": "exponential", "lifetime_median_days": h}},
    }
    table.update(extra)
    return table


def test_the_optimum_is_derived_only_where_the_age_prior_is_one_exponential():
    opt = known_optimum(SyntheticWorkload.from_config(exponential_world(25.0)))
    assert opt.solvable and opt.half_life_days == 25.0
    # beta: the linear-discriminant slope of the within-query similarity law
    assert opt.beta == pytest.approx(SyntheticWorkload().query_similarity_model().beta)
    default = known_optimum(SyntheticWorkload())
    assert not default.solvable and "notes_per_slot" in default.reason
    evergreen = SyntheticWorkload.from_config({"classes": {
        "evergreen": {"share": 1.0}, "project": {"share": 0.0}, "scratch": {"share": 0.0},
        "superseding": {"share": 0.0}, "distractor": {"share": 0.0}}})
    assert math.isinf(known_optimum(evergreen).half_life_days)
    lognormal = exponential_world(25.0)
    lognormal["classes"]["project"]["lifetime_law"] = "lognormal"
    assert "exponential" in known_optimum(SyntheticWorkload.from_config(lognormal)).reason


def test_the_planted_posterior_orders_by_similarity_and_by_the_age_prior():
    model = PlantedModel.from_workload(SyntheticWorkload.from_config(exponential_world(30.0)))
    project = CLASS_NAMES.index("project")
    cos = np.array([[0.3, 0.5, 0.6, 0.6, 0.6]])
    age = np.array([[0.0, 0.0, 0.0, 30.0, 60.0]])
    g = model.expected_gain(cos, age, np.full(5, project), np.array([10.0]))[0]
    assert g[0] < g[1] < g[2]  # more similar, more likely the asked note
    assert g[2] > g[3] > g[4] > 0  # older, less likely still valid
    # one note per slot, exponential law: the log odds of being the asked
    # note fall by ln 2 per half-life (prior odds ~ prior: it is small)
    odds = g / (1 - g)  # gain_current = 1, so g is the posterior itself
    assert math.log(odds[2] / odds[3]) == pytest.approx(math.log(2), rel=0.02)
    assert math.log(odds[3] / odds[4]) == pytest.approx(math.log(2), rel=0.02)
    # a class nobody asks about, or an unknown class, is worth nothing
    assert model.expected_gain(cos, age, np.full(5, -1), np.array([10.0])).max() == 0.0


def test_bayes_needs_a_planted_model():
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "b", "replicates": 1},
        "workload": {"horizon_days": 5.0, "backfill_days": 5.0},
        "policies": {"b": {"ranker": "bayes"}}})
    res = memsim.run_experiment(exp, out=None, report=False)
    assert res.queries["utility"].notna().all()
    from memsim.planted import PlantedModel as PM  # the stream without its workload
    with pytest.raises(ConfigError, match="synthetic workload"):
        PM.from_config(None)


def test_memsim_optimum_derives_the_family_and_runs_the_bayes_twin(tmp_path, capsys):
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "o", "replicates": 1, "budget_tokens": 500},
        "workload": exponential_world(20.0, horizon_days=20.0, queries_per_day=10.0),
        "policies": {
            "p": {"ranker": {"kind": "calibrated-product", "beta": 17.0},
                  "decay": {"kind": "half-life", "half_life_days": 60.0},
                  "packer": "top-k-cutoff"},
            "bug": {"preset": "hivemind-2025-bug"}}})
    rep = optimum(exp)
    row = rep.table.set_index("policy").loc["p"]
    assert row["solvable"] and row["half_life_opt"] == 20.0
    # only beta x h is identifiable: at half the slope, twice the half-life
    assert row["half_life_at_beta"] == pytest.approx(20.0 * row["beta_opt"] / 17.0)
    bug = rep.table.set_index("policy").loc["bug"]
    assert not bug["solvable"] and "calibrated-product" in bug["reason"]
    # the planted posterior packs more of the answer than the 5%-a-day bug
    assert bug["bayes_utility"] > bug["utility"]
    assert 0 < row["bayes_utility_share"] <= 1


def test_optimum_cli(tmp_path, capsys):
    path = tmp_path / "exp.toml"
    path.write_text(
        '[experiment]\nname = "o"\nreplicates = 1\nbudget_tokens = 500\n'
        '[workload]\nhorizon_days = 10.0\nbackfill_days = 40.0\nuniform_tokens = 100\n'
        '[workload.classes.project]\nshare = 1.0\nnotes_per_slot = 1.0\n'
        'lifetime_law = "exponential"\nlifetime_median_days = 10.0\n'
        '[workload.classes.evergreen]\nshare = 0.0\n[workload.classes.scratch]\nshare = 0.0\n'
        '[workload.classes.superseding]\nshare = 0.0\n[workload.classes.distractor]\nshare = 0.0\n'
        '[policies.p]\nranker = { kind = "calibrated-product" }\n'
        'decay = { kind = "half-life", half_life_days = 30.0 }\n')
    assert main(["optimum", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["policies"][0]["half_life_opt"] == 10.0
    assert main(["optimum", str(path), "--no-simulate"]) == 0
    assert "derived from the planted truth" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("h", [8.0, 20.0, 40.0])
def test_a_sweep_of_the_family_recovers_the_planted_half_life(h):
    """60 TPE trials over [1, 1000] days (log), beta fixed at the derived
    slope: the best half-life is within 25% of the planted H, and the
    sweep's plateau (values within replicate noise of the best) holds H."""
    wl = SyntheticWorkload.from_config(exponential_world(h))
    opt = known_optimum(wl)
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "recover", "seed": 11, "replicates": 2, "budget_tokens": 500},
        "workload": exponential_world(h),
        "policies": {"p": {"ranker": {"kind": "calibrated-product", "beta": opt.beta},
                           "decay": {"kind": "half-life", "half_life_days": 300.0},
                           "packer": "top-k-cutoff"}},
        "sweep": {"trials": 60, "sampler": "tpe", "seed": 3,
                  "objectives": [{"metric": "utility", "direction": "maximize", "policy": "p"}],
                  "params": {HL: {"type": "float", "low": 1.0, "high": 1000.0, "log": True}},
                  "robustness": {"replicates": 0}}})
    res = run_sweep(exp, out=None, quiet=True, plots=False, report=False)
    best = res.best_params[HL]
    assert abs(best / h - 1) <= 0.25, (h, best)
    plateau = res.plateau.set_index("param").loc[HL]
    assert plateau["low"] <= h <= plateau["high"], (h, plateau["low"], plateau["high"])
