"""memsim audit: a test can only catch a bug its data can express (seed 000).

The audit must flag the decay parameters as untestable on a workload whose
every age is 0, and as testable on quickstart, where ages vary; flag a floor,
a promotion or an eviction threshold the workload never reaches; and flag an
effect that replicates cannot tell from noise.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

import memsim
from memsim.tuning.audit import _effect, audit, param_signals, regime_kind
from memsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "experiments" / "quickstart.toml"
FIX = "half-life-180-floor"
DECAY = f"policies.{FIX}.decay.half_life_days"
FLOOR = f"policies.{FIX}.decay.floor"
PACKER = f"policies.{FIX}.packer"

# quickstart, smaller (ages still span two years, so that a floor is
# reached), with a sweep of the fix's decay and packer. The fix's decay is set
# to a 30-day half-life without floor here: with a 0.35 floor, half-lives of 2
# to 720 days move utility by less than three replicates can tell apart.
SMALL = {
    "experiment.replicates": 1,
    "workload.queries_per_day": 10.0,
    "workload.notes_per_day": 3.0,
    "workload.horizon_days": 60,
    "workload.backfill_days": 640,
    f"policies.{FIX}.decay.half_life_days": 30.0,
    f"policies.{FIX}.decay.floor": 0.0,
    "sweep.objectives": [{"metric": "utility", "policy": FIX}],
    "sweep.params": {
        DECAY: {"type": "float", "low": 2.0, "high": 720.0, "log": True},
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
    # a half-life swept from 2 to 720 days has a clear effect: its 95%
    # interval over 3 paired replicates excludes 0
    r = rows(natural, DECAY)
    assert len(r) == 1 and bool(r["testable"].iloc[0]), natural.to_text()
    r = r.iloc[0]
    assert r["moves"] and not r["within_noise"] and r["replicates"] == 3
    assert r["effect_lo"] > 0.05 and r["effect_hi"] >= r["effect"] >= r["effect_lo"]
    assert r["worst"] == "2"  # a 2-day half-life forgets the evergreen facts
    # two-year-old notes bring the multiplier to its floor
    f = rows(natural, FLOOR).iloc[0]
    assert f["regime"] == "floor" and f["reached"] and f["reach"] <= 0.1
    assert f["moves"] and f["spread"] > 0.005
    assert "within 10%" not in f["reason"]
    reach = natural.reach.set_index("param")
    assert reach.loc[FLOOR, "swept"] and reach.loc[FLOOR, "reached"]
    sig = natural.signals.set_index(["signal", "policy"])
    assert not sig.loc[("age", ""), "constant"]
    assert sig.loc[("age", ""), "varies_within"] == 1.0
    assert sig.loc[("age", ""), "p95"] > 180  # two years of backfill show
    assert not sig.loc[("tokens", ""), "constant"]
    p = rows(natural, PACKER).iloc[0]
    assert p["moves"] and p["signal_varies"]
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
    assert set(rep.signals["policy"]) == {"", "bug-5pct-per-day", FIX, "no-decay"}


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
    reach = pd.read_csv(tmp_path / "audit" / "reach.csv")
    assert list(reach.columns) == ["param", "policy", "kind", "swept", "values",
                                   "measure_name", "measure", "reached", "reason"]


# --------------------------------------------------------------------------
# Reach: does the workload get into the regime a parameter controls?
# --------------------------------------------------------------------------

TASK_FLOOR = "policies.hivemind.decay.task_floor"


def tiny(policy, params, *, backfill, horizon, queries_per_day=2.0):
    """A small experiment of one policy ``hivemind`` (whatever it is) and a sweep."""
    return memsim.experiment_from_dict({
        "experiment": {"name": "reach", "seed": 7, "replicates": 1},
        "workload": {"horizon_days": horizon, "backfill_days": backfill,
                     "notes_per_day": 3.0, "queries_per_day": queries_per_day},
        "policies": {"hivemind": policy},
        "sweep": {"objectives": [{"metric": "utility", "policy": "hivemind"}],
                  "params": params},
    })


FLOOR_SWEEP = {TASK_FLOOR: {"type": "float", "low": 0.0, "high": 0.9}}


def test_task_floor_is_unreachable_when_no_note_is_older_than_30_days():
    # seed 000's new pitfall: the floor is swept, utility wiggles, but no task
    # note ever gets old enough for its multiplier to approach the floor
    rep = audit(tiny({"preset": "hivemind"}, FLOOR_SWEEP, backfill=0, horizon=30),
                max_queries=60)
    r = rows(rep, TASK_FLOOR).iloc[0]
    assert r["regime"] == "floor" and not r["reached"] and not r["testable"]
    # 0.5 ** (30 / 180) = 0.89: the part above the floor never falls below 89%
    assert 0.85 < r["reach"] < 0.95
    assert "never comes within 10% of task_floor = 0 .. 0.9" in r["reason"], r["reason"]
    assert "oldest task-tier note scored" in r["reason"]
    assert f"untestable: {TASK_FLOOR}" in rep.to_text()
    reach = rep.reach.set_index("param")
    assert reach.loc[TASK_FLOOR, "values"] == "0, 0.45, 0.9"
    # the scratch floor is not swept: it is still reported, as unreached
    assert not reach.loc["policies.hivemind.decay.scratch_floor", "swept"]
    assert any(f.startswith("unreached: policies.hivemind.decay.scratch_floor = 0.05 "
                            "(not swept)") for f in rep.flags)


def test_task_floor_is_reached_with_year_old_notes():
    rep = audit(tiny({"preset": "hivemind"}, FLOOR_SWEEP, backfill=700, horizon=30),
                max_queries=60, params=False)
    reach = rep.reach.set_index("param")
    assert reach.loc[TASK_FLOOR, "reached"], rep.to_text()
    # a 700-day-old task note: 0.5 ** (700 / 180) = 0.07 of the range is left
    assert reach.loc[TASK_FLOOR, "measure"] <= 0.1
    assert reach.loc[TASK_FLOOR, "reason"] == ""
    assert not any(TASK_FLOOR in f for f in rep.flags)


def test_a_significant_effect_is_testable_whatever_the_reach_rule_says():
    # a floor under a 10-day half-life on a 30-day workload: the multiplier
    # never falls within 10% of the floor (0.5 ** 3 = 0.125 of its range is
    # left), yet the floor measurably moves utility; the audit must not call
    # it untestable against its own estimate (it once did)
    key = "policies.hivemind.decay.floor"
    policy = {"retriever": "cosine", "ranker": "product", "packer": "skip-fill",
              "decay": {"kind": "half-life-floor", "half_life_days": 10.0, "floor": 0.0}}
    rep = audit(tiny(policy, {key: {"type": "float", "low": 0.0, "high": 0.9}},
                     backfill=0, horizon=30, queries_per_day=8.0),
                max_queries=60, replicates=6)
    r = rows(rep, key).iloc[0]
    assert r["regime"] == "floor" and not r["reached"] and 0.1 < r["reach"] < 0.2
    assert not r["within_noise"] and r["effect_lo"] > 0, r.to_dict()
    assert r["testable"] and r["reason"] == ""
    assert "significant effect" in r["note"] and "never comes within 10%" in r["note"]
    assert key not in rep.untestable()
    assert not any(f.startswith(f"untestable: {key}") for f in rep.flags)
    assert any(f.startswith(f"note: {key}") for f in rep.flags)


def test_an_unreached_floor_explains_a_null_effect():
    # the same floor under a 180-day half-life: nothing moves, and the reach
    # rule is given as the reason why
    rep = audit(tiny({"preset": "hivemind"}, FLOOR_SWEEP, backfill=0, horizon=30),
                max_queries=40, replicates=3)
    r = rows(rep, TASK_FLOOR).iloc[0]
    assert not r["testable"] and r["note"] == ""
    assert "so its effect is nil" in r["reason"], r["reason"]


def test_promotion_threshold_above_any_use_count_is_flagged():
    policy = {"preset": "hivemind",
              "feedback": {"kind": "default", "touch": "packed", "promote_after": 500}}
    key = "policies.hivemind.feedback.promote_after"
    rep = audit(tiny(policy, {key: {"type": "int", "low": 500, "high": 1000}},
                     backfill=0, horizon=30), max_queries=40)
    r = rows(rep, key).iloc[0]
    assert r["regime"] == "promotion" and not r["reached"] and not r["testable"]
    assert 0 < r["reach"] < 500  # the most used note's count
    assert f"no note is used more than {int(r['reach'])} times" in r["reason"]
    assert "no note is ever promoted" in r["reason"]
    # Hivemind's own threshold (5 uses) is reached on the same workload
    rep5 = audit(tiny({"preset": "hivemind"}, FLOOR_SWEEP, backfill=0, horizon=30),
                 max_queries=40, params=False)
    got = rep5.reach.set_index("param").loc[key]
    assert got["reached"] and got["measure"] >= 5 and not got["swept"]


def test_eviction_threshold_reach():
    key = "policies.hivemind.retention.cold_threshold"
    sweep = {key: {"type": "float", "low": 0.05, "high": 0.3}}
    aim = {"preset": "ai-memory"}
    # a note at most 30 days old keeps exp(-0.02 * 30) = 0.55 > 0.3: never evicted
    young = audit(tiny(aim, sweep, backfill=0, horizon=30), max_queries=40, params=False)
    r = young.reach.set_index("param").loc[key]
    assert r["kind"] == "eviction" and not r["reached"] and r["measure"] == 0.0
    assert "the rule never evicts" in r["reason"]
    old = audit(tiny(aim, sweep, backfill=300, horizon=30), max_queries=40, params=False)
    r = old.reach.set_index("param").loc[key]
    assert r["reached"] and 0 < r["measure"] <= 1


def test_regime_kind():
    exp = memsim.load_experiment(ROOT / "experiments" / "presets.toml")
    assert regime_kind("policies.hivemind.decay.task_floor", exp) == "floor"
    assert regime_kind("policies.hivemind.decay.task_half_life_days", exp) is None
    assert regime_kind("policies.hivemind.feedback.promote_after", exp) == "promotion"
    assert regime_kind("policies.ai-memory.retention.cold_threshold", exp) == "eviction"
    assert regime_kind("workload.backfill_days", exp) is None


# --------------------------------------------------------------------------
# Noise: is the effect larger than what replicates disagree by?
# --------------------------------------------------------------------------


def test_effect_within_noise_is_flagged():
    # the scratch half-life nudged from 19 to 23 days: the notes it acts on
    # exist and age, the objective moves, but not consistently across replicates
    # (without the preset's relevance cut, under which it does not move at all)
    key = "policies.hivemind.decay.scratch_half_life_days"
    uncut = {"preset": "hivemind", "packer": {"min_relative_score": 0.0}}
    rep = audit(tiny(uncut, {key: {"type": "float", "low": 19, "high": 23}},
                     backfill=60, horizon=60), max_queries=40)
    r = rows(rep, key).iloc[0]
    assert r["moves"] and r["signal_varies"] and r["reached"] and r["regime"] == ""
    assert r["within_noise"] and not r["testable"] and r["replicates"] == 3
    assert r["effect_lo"] <= 0 <= r["effect_hi"]
    assert r["reason"].startswith("effect within noise: utility of "), r["reason"]
    assert "95% CI" in r["reason"] and "over 3 replicates includes 0" in r["reason"]


def test_effect_rule_is_paired_and_directed():
    # common random numbers: replicates differ a lot, the difference does not
    low = {0: 0.2, 1: 0.5, 2: 0.8}
    high = {0: 0.21, 1: 0.512, 2: 0.811}
    clear = _effect([low, high], "maximize")
    assert clear["best"] == 1 and clear["worst"] == 0 and not clear["within_noise"]
    assert clear["effect"] == pytest.approx(0.011)
    assert 0 < clear["effect_lo"] < clear["effect"] < clear["effect_hi"]
    mini = _effect([low, high], "minimize")
    assert mini["best"] == 0 and mini["effect"] == pytest.approx(0.011)
    noisy = _effect([low, {0: 0.25, 1: 0.45, 2: 0.81}], "maximize")
    assert noisy["within_noise"] and noisy["effect_lo"] < 0 < noisy["effect_hi"]
    # identical values: no effect at all, and nothing to tell it from
    assert _effect([low, dict(low)], "maximize")["within_noise"]
    # one replicate: no interval, so no claim of an effect
    assert _effect([{0: 0.1}, {0: 0.9}], "maximize")["within_noise"]


def test_replicates_must_allow_an_interval():
    exp = tiny({"preset": "hivemind"}, FLOOR_SWEEP, backfill=0, horizon=10)
    with pytest.raises(memsim.ConfigError, match="replicates .*expected an integer >= 2"):
        audit(exp, replicates=1)


def test_probe_points_simulated_together_give_each_point_its_own_values(monkeypatch):
    """The audit simulates every probe point as the arms of one replay per
    replicate; each point's values, and so the whole parameter table, are
    those of evaluating it alone; a point that fails raises its own error."""
    from memsim.sweep import TrialEvaluator

    exp = quickstart(**{"workload.horizon_days": 20, "workload.backfill_days": 200})
    together = audit(exp, max_queries=60, replicates=2)
    calls = []

    def alone(self, param_sets, names=None, replicates=None, after_replicate=None,
              variant=None):
        from memsim.sweep.evaluate import TrialOutcome

        calls.append(len(param_sets))
        outs = []
        for params in param_sets:
            values, per = self.evaluate(params, replicates=replicates)
            outs.append(TrialOutcome(values=tuple(values), per_replicate=per))
        return outs

    monkeypatch.setattr(TrialEvaluator, "evaluate_batch", alone)
    reference = audit(exp, max_queries=60, replicates=2)
    assert calls == [8]  # 3 + 3 probe values and 2 packers, at once
    pd.testing.assert_frame_equal(together.params, reference.params, check_exact=True)
    monkeypatch.undo()

    def fails(*args, **kw):
        raise memsim.core.errors.MemsimError("the replay failed")

    monkeypatch.setattr(memsim.sweep.evaluate, "simulate_replicate", fails)
    with pytest.raises(memsim.core.errors.MemsimError, match="the replay failed"):
        audit(exp, max_queries=30, replicates=2)


def test_audit_progress_times_the_probe_replays_on_their_own(tmp_path):
    """The probe replays take nearly all of an audit's time: they are a phase
    of their own, counted in replicates, so the time left printed after the
    first one is measured on a probe replay, not on the fast signal phase."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-m", "memsim.cli", "audit", str(root / "experiments" /
                                                         "sweep_hivemind.toml"),
         "--queries", "30", "--param-replicates", "2", "--jobs", "1",
         "--set", "experiment.replicates=1", "--set", "workload.horizon_days=8",
         "--set", "workload.backfill_days=8"],
        capture_output=True, text=True, cwd=root, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    probe = [ln for ln in lines if "replicate" in ln and "done" in ln]
    assert [ln.split(" (")[0] for ln in probe] == ["memsim audit: replicate 1/2 done",
                                                   "memsim audit: replicate 2/2 done"]
    assert "about" in probe[0] and "s left" in probe[0]


def test_param_replicates_with_no_params_is_refused(capsys):
    """--param-replicates sets the replicates of the probes --no-params
    skips: the two together are refused (it was silently ignored and still
    reported as the audit's replicates)."""
    from memsim.cli import main

    exp = Path(__file__).resolve().parents[1] / "experiments" / "sweep_hivemind.toml"
    assert main(["audit", str(exp), "--no-params", "--param-replicates", "5"]) == 2
    assert ("memsim: error: --param-replicates: the replicates of the parameter probes, which "
            "--no-params skips" in capsys.readouterr().err)


def test_a_promotion_range_from_0_is_reached_at_its_least_positive_threshold():
    """promote_after = 0 .. 30 probes 0 (off), 15 and 30: with 14 uses at most
    the range was called never reached, though 1 .. 14 promote."""
    from memsim.sweep.space import ParamSpec
    from memsim.tuning.audit import _least_positive
    key = "policies.hivemind.feedback.promote_after"
    assert _least_positive(ParamSpec(key, "int", 0, 30), [0, 15, 30]) == 1
    assert _least_positive(ParamSpec(key, "int", 0, 30, step=4), [0, 16, 28]) == 4
    assert _least_positive(ParamSpec(key, "int", -5, 30, step=3), [-5, 13, 28]) == 1
    assert _least_positive(ParamSpec(key, "int", 7, 30), [7, 18, 30]) == 7
    assert _least_positive(ParamSpec(key, "int", -3, 0), [-3, 0]) is None
    assert _least_positive(ParamSpec(key, "categorical", choices=(0, 9, 3)), [0, 9, 3]) == 3
    assert _least_positive(None, [5]) == 5 and _least_positive(None, [0]) is None
    policy = {"preset": "hivemind"}
    rep = audit(tiny(policy, {key: {"type": "int", "low": 0, "high": 500}},
                     backfill=0, horizon=30), max_queries=40, params=False)
    got = rep.reach.set_index("param").loc[key]
    assert 1 <= got["measure"] < 250  # the probes 250 and 500 are above every use count
    assert got["reached"] and got["reason"] == ""
