"""memsim audit: a test can only catch a bug its data can express (seed 000).

The audit must flag the decay parameters as untestable on a workload whose
every age is 0, and as testable on quickstart, where ages vary.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

import memsim
from memsim.audit import audit, param_signals
from memsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "experiments" / "quickstart.toml"
FIX = "half-life-180-floor"
DECAY = f"policies.{FIX}.decay.half_life_days"
FLOOR = f"policies.{FIX}.decay.floor"
PACKER = f"policies.{FIX}.packer"

# quickstart, smaller (ages still span a year), with a sweep of the fix's
# decay and packer
SMALL = {
    "experiment.replicates": 1,
    "workload.queries_per_day": 2.0,
    "workload.notes_per_day": 6.0,
    "workload.horizon_days": 90,
    "workload.backfill_days": 270,
    "sweep.objectives": [{"metric": "utility", "policy": FIX}],
    "sweep.params": {
        DECAY: {"type": "float", "low": 7.0, "high": 720.0, "log": True},
        FLOOR: {"type": "float", "low": 0.0, "high": 0.9},
        PACKER: {"type": "categorical", "choices": ["skip-fill", "greedy"]},
    },
}


def quickstart(**overrides):
    return memsim.load_experiment(QUICKSTART, {**SMALL, **overrides})


def rows(report, param):
    return report.params[report.params["param"] == param]


@pytest.fixture(scope="module")
def natural():
    return audit(quickstart(), max_queries=120)


@pytest.fixture(scope="module")
def all_ages_zero():
    # the benchmark of seed 000: every note written at t = 0, notes of one size
    return audit(quickstart(**{"workload.age_mode": "zero", "workload.uniform_tokens": 150}),
                 max_queries=120)


def test_decay_parameters_are_testable_on_quickstart(natural):
    for key in (DECAY, FLOOR):
        r = rows(natural, key)
        assert len(r) == 1 and bool(r["testable"].iloc[0]), natural.to_text()
        assert bool(r["moves"].iloc[0]) and r["spread"].iloc[0] > 0.005
    sig = natural.signals.set_index(["signal", "policy"])
    assert not sig.loc[("age", ""), "constant"]
    assert sig.loc[("age", ""), "varies_within"] == 1.0
    assert sig.loc[("age", ""), "p95"] > 180  # a year of backfill shows
    assert not sig.loc[("tokens", ""), "constant"]
    assert bool(rows(natural, PACKER)["testable"].iloc[0])
    # the fix's feedback touches packed notes: recall counts vary
    assert not sig.loc[("recall_count", FIX), "constant"]


def test_decay_parameters_are_untestable_when_every_age_is_zero(all_ages_zero):
    rep = all_ages_zero
    for key in (DECAY, FLOOR):
        r = rows(rep, key).iloc[0]
        assert not r["testable"] and not r["moves"] and not r["signal_varies"]
        assert "same age (always 0)" in r["reason"], r["reason"]
    assert set(rep.untestable()) == {DECAY, FLOOR, PACKER}  # packers too: one size
    assert "same size in tokens (always 150)" in rows(rep, PACKER)["reason"].iloc[0]
    text = rep.to_text()
    assert f"untestable: {DECAY}" in text
    assert "constant signal: age is the same for every note a query scores (always 0)" in text
    sig = rep.signals.set_index(["signal", "policy"])
    assert sig.loc[("age", ""), "constant"] and sig.loc[("tokens", ""), "constant"]


def test_constant_signals_are_flagged_even_without_a_sweep():
    exp = dataclasses.replace(quickstart(), sweep=None)
    rep = audit(exp, max_queries=60)
    assert len(rep.params) == 0
    # synthetic notes all have importance and salience 1: nothing can rank on them
    assert any(f.startswith("constant signal: importance") for f in rep.flags)
    assert any(f.startswith("constant signal: salience") for f in rep.flags)
    assert "No [sweep.params]" in rep.to_text()
    assert set(rep.signals["policy"]) == {"", "bug-5pct-per-day", FIX}


def test_breadth_weight_is_untestable_with_a_single_actor():
    table = {
        "experiment": {"name": "breadth", "seed": 3, "replicates": 1, "tick_days": 5.0},
        "workload": {"horizon_days": 60, "backfill_days": 60, "notes_per_day": 5.0,
                     "queries_per_day": 3.0, "n_actors": 1, "accesses_per_day": 5.0},
        "policies": {"aim": {"preset": "ai-memory-breadth"}},
        "sweep": {"params": {"policies.aim.retention.breadth_weight": {
            "type": "float", "low": 0.0, "high": 3.0}}},
    }
    rep = audit(memsim.experiment_from_dict(table), max_queries=40)
    r = rows(rep, "policies.aim.retention.breadth_weight").iloc[0]
    assert r["signals"] == "distinct_actors"
    assert not r["testable"] and "distinct actors" in r["reason"], r["reason"]
    sig = rep.signals.set_index(["signal", "policy"])
    assert sig.loc[("distinct_actors", "aim"), "constant"]
    assert not sig.loc[("recall_count", "aim"), "constant"]  # uses do happen


def test_param_signals_map_keys_to_what_they_act_on():
    exp = memsim.load_experiment(ROOT / "experiments" / "presets.toml")
    assert param_signals("policies.hivemind.decay.task_half_life_days", exp) == (
        ["age"], "task", "")
    assert param_signals("policies.feather.stickiness.weight", exp)[0] == ["recall_count"]
    assert param_signals("policies.hivemind.packer", exp)[0] == ["tokens"]
    assert param_signals("policies.ai-memory-breadth.retention.breadth_weight", exp)[0] == [
        "distinct_actors"]
    # a decay under a ranker that ignores recency cannot matter, whatever the data
    sig, _, why = param_signals("policies.similarity-only.decay.half_life_days", exp)
    assert sig == ["age"] and "does not use recency" in why
    assert param_signals("workload.retriever_noise", exp) == ([], None, "")


def test_cli_audit_prints_the_report_and_saves_it(tmp_path, capsys):
    f = tmp_path / "zero.toml"
    f.write_text(QUICKSTART.read_text())
    code = main(["audit", str(f), "--quiet", "--no-params", "--queries", "40",
                 "--set", "workload.age_mode=zero", "--set", "experiment.replicates=1",
                 "--set", "workload.notes_per_day=4.0", "--set", "workload.queries_per_day=1.0",
                 "--out", str(tmp_path / "audit")])
    assert code == 0
    out = capsys.readouterr().out
    assert "constant signal: age" in out
    assert out.strip().splitlines()[-1] == str(tmp_path / "audit")
    sig = pd.read_csv(tmp_path / "audit" / "signals.csv")
    assert set(sig["signal"]) >= {"age", "recall_count", "distinct_actors", "tokens",
                                  "importance", "salience"}
    assert (tmp_path / "audit" / "audit.txt").read_text().startswith("memsim audit")
