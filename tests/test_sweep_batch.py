"""Sweeps that evaluate several trials at once and stop bad ones early
(issue #14, item 4): ``[sweep] batch`` and ``[sweep] pruner``.

A batch simulates its trials as the arms of one replay per replicate; each
trial's values must be bit for bit those of evaluating it alone. A pruner
stops trials between replicates; PRUNED trials never count toward
``trials`` and stay out of the best, the plateau and the robustness check.
Workloads are the tiny ones of ``tests/test_sweep.py`` (a trial takes a
fraction of a second).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from optuna.trial import TrialState

import memsim
from memsim.cli import main
from memsim.core.errors import ConfigError, MemsimError
from memsim.sweep import SweepSpec, TrialEvaluator, run_sweep

from .test_sweep import (HL, _env, _start_and_kill, _study, retention_table, table,
                         write_toml)

RANKER = "policies.p.ranker"


def two_policy_table(**sweep) -> dict:
    """The planted one-policy table plus a randomised policy ``r`` (the
    ``random`` ranker draws from its arm's own stream), three replicates,
    objectives on both policies, run-level ones included."""
    t = table(own=45.0, replicates=3, **sweep)
    t["policies"]["r"] = {"ranker": "random", "packer": "greedy", "candidates": 20}
    t["sweep"]["params"].update({
        "policies.p.packer": {"type": "categorical", "choices": ["skip-fill", "greedy"]},
        "policies.r.candidates": {"type": "int", "low": 5, "high": 40}})
    t["sweep"]["objectives"] = [
        {"metric": "utility", "direction": "maximize", "policy": "p"},
        {"metric": "recall", "direction": "maximize", "policy": "r"},
        {"metric": "utility_share", "direction": "maximize", "policy": "r"},
        {"metric": "store_tokens", "direction": "minimize", "policy": "p"}]
    return t


def ranker_table(replicates=3, **kw) -> dict:
    """One policy whose ranker is swept between a good one (``product``) and
    a hopeless one (``random``): a pruner has something to stop."""
    t = table(own=45.0, replicates=replicates, **kw)
    t["sweep"]["params"][RANKER] = {"type": "categorical", "choices": ["product", "random"]}
    t["sweep"]["sampler"] = "random"
    t["sweep"]["robustness"] = {"replicates": 0}
    return t


# --------------------------------------------------------------------------
# A batch gives each trial exactly its own values
# --------------------------------------------------------------------------


def test_a_batch_gives_each_trial_its_values_alone_bit_for_bit():
    exp = memsim.experiment_from_dict(two_policy_table())
    spec = SweepSpec.from_config(exp.sweep, exp)
    ev = TrialEvaluator(exp, spec)
    rng = np.random.default_rng(3)
    sets = [{HL: float(np.exp(rng.uniform(0.0, 6.9))),
             "policies.p.packer": str(rng.choice(["skip-fill", "greedy"])),
             "policies.r.candidates": int(rng.integers(5, 41))} for _ in range(4)]
    bad = dict(sets[0], **{HL: -3.0})  # does not build: fails alone
    outs = ev.evaluate_batch(sets[:2] + [bad] + sets[2:], names=[10, 11, 12, 13, 14])
    assert "half_life_days" in outs[2].error and outs[2].values == ()
    del outs[2]
    assert len({o.values[1] for o in outs}) > 1  # the random policy's trials differ
    for params, out in zip(sets, outs):
        values, per = ev.evaluate(params)
        assert out.values == tuple(values)  # identical, not approximately equal
        assert out.per_replicate == per
        assert out.error == "" and out.stopped_after is None
    # the same parameters evaluated twice in one batch (distinct arms) agree
    twice = ev.evaluate_batch([sets[0], sets[0]])
    assert twice[0].values == twice[1].values == outs[0].values


def test_replicates_in_worker_processes_give_the_same_values(monkeypatch):
    """``jobs`` > 1 (the robustness check's replicates, after the sweep's
    workers are done) simulates a batch's replicates in worker processes,
    with the values of one process, bit for bit; a trial that does not build
    still fails alone, and a replay that raises in a worker is replayed in
    this process so that its error lands on its trial."""
    exp = memsim.experiment_from_dict(two_policy_table())
    spec = SweepSpec.from_config(exp.sweep, exp)
    sets = [{HL: 30.0, "policies.p.packer": "greedy", "policies.r.candidates": 9},
            {HL: -3.0, "policies.p.packer": "greedy", "policies.r.candidates": 9},
            {HL: 300.0, "policies.p.packer": "skip-fill", "policies.r.candidates": 30}]
    one = TrialEvaluator(exp, spec).evaluate_batch(sets, replicates=[3, 4, 5])
    calls = []
    real = memsim.sweep.evaluate.simulate_replicates

    def spy(*args, **kw):
        calls.append(kw["jobs"])
        return real(*args, **kw)

    monkeypatch.setattr(memsim.sweep.evaluate, "simulate_replicates", spy)
    two = TrialEvaluator(exp, spec, jobs=2).evaluate_batch(sets, replicates=[3, 4, 5])
    assert calls == [2]
    assert [o.values for o in two] == [o.values for o in one] and two[1].error
    assert [o.per_replicate for o in two] == [o.per_replicate for o in one]

    def fails(*args, **kw):
        raise MemsimError("a worker's replay failed")

    monkeypatch.setattr(memsim.sweep.evaluate, "simulate_replicates", fails)
    again = TrialEvaluator(exp, spec, jobs=2).evaluate_batch(sets, replicates=[3, 4, 5])
    assert [o.values for o in again] == [o.values for o in one]


def test_batches_after_the_first_reuse_the_replays_work_with_the_same_values(monkeypatch):
    """An evaluator with a cache (``sweep.cache_mb``) keeps each replicate's
    batches from one batch of trials to the next, so that the next batch
    builds no similarity, with the values of an evaluator without one, bit
    for bit; a trial that does not build still fails alone."""
    from memsim import engine

    exp = memsim.experiment_from_dict(two_policy_table())
    spec = SweepSpec.from_config(exp.sweep, exp)
    rng = np.random.default_rng(8)
    rounds = [[{HL: float(np.exp(rng.uniform(0.0, 6.9))),
                "policies.p.packer": str(rng.choice(["skip-fill", "greedy"])),
                "policies.r.candidates": int(rng.integers(5, 41))} for _ in range(3)]
              for _ in range(3)]
    rounds[1].append(dict(rounds[1][0], **{HL: -3.0}))
    plain, kept = TrialEvaluator(exp, spec), TrialEvaluator(exp, spec, cache_bytes=10**9)
    built = []
    real = engine.Batch.__init__

    def spy(self, *args, **kw):
        built.append(1)
        real(self, *args, **kw)

    for k, sets in enumerate(rounds):
        want = plain.evaluate_batch(sets)
        monkeypatch.setattr(engine.Batch, "__init__", spy)
        built.clear()
        got = kept.evaluate_batch(sets)
        monkeypatch.undo()
        assert [(o.values, o.per_replicate, o.error) for o in got] == \
            [(o.values, o.per_replicate, o.error) for o in want]
        assert (len(built) > 0) == (k == 0)
        assert [bool(o.error) for o in got] == [False] * 3 + [True] * (k == 1)
    assert 0 < kept.cache.nbytes <= 10**9
    assert plain.cache is None


def test_the_cache_budget():
    from memsim.sweep import evaluate

    assert evaluate.cache_budget(0) == 0 and evaluate.cache_budget(3, workers=8) == 3 << 20
    auto = evaluate.cache_budget(None, workers=1)
    assert 0 <= auto <= evaluate.CACHE_MAX
    assert evaluate.cache_budget(None, workers=64) <= max(auto // 16, 1)
    assert evaluate.cache_budget(None, workers=2) == min(evaluate.CACHE_MAX,
                                                         evaluate._memory_bytes() // 8)


def test_a_trial_stopped_after_a_replicate_is_left_out_of_the_rest():
    exp = memsim.experiment_from_dict(two_policy_table())
    spec = SweepSpec.from_config(exp.sweep, exp)
    ev = TrialEvaluator(exp, spec)
    sets = [{HL: 30.0, "policies.p.packer": "greedy", "policies.r.candidates": 9},
            {HL: 300.0, "policies.p.packer": "skip-fill", "policies.r.candidates": 30}]
    seen: list[tuple[int, int, float]] = []

    def stop_the_second(i, step, values):
        seen.append((i, step, values[0]))
        return i == 1

    a, b = ev.evaluate_batch(sets, after_replicate=stop_the_second)
    assert [(i, s) for i, s, _ in seen] == [(0, 1), (1, 1), (0, 2), (0, 3)]
    assert b.stopped_after == 1 and list(b.per_replicate["utility@p"]) == [0]
    assert a.stopped_after is None and a.values == tuple(ev.evaluate(sets[0])[0])
    # the running value is the mean over the replicates done
    per = a.per_replicate["utility@p"]
    assert seen[2][2] == float(np.mean([per[0], per[1]]))
    assert b.values[0] == b.per_replicate["utility@p"][0]


def test_keys_outside_policies_are_evaluated_one_replay_per_experiment(tmp_path):
    t = table(own=45.0, trials=5, batch=4, robustness={"replicates": 0})
    t["sweep"]["params"]["workload.retriever_noise"] = {"type": "float", "low": 0.5,
                                                        "high": 2.0}
    exp = memsim.experiment_from_dict(t)
    spec = SweepSpec.from_config(exp.sweep, exp)
    assert not spec.batchable and spec.unbatchable_keys == ["workload.retriever_noise"]
    ev = TrialEvaluator(exp, spec)
    sets = [{HL: 20.0, "workload.retriever_noise": 0.7},
            {HL: 90.0, "workload.retriever_noise": 1.3}]
    for params, out in zip(sets, ev.evaluate_batch(sets)):
        assert out.values == tuple(ev.evaluate(params)[0])
    res = run_sweep(exp, out=None)
    assert (res.trials["state"] == "COMPLETE").sum() == 5
    assert res.trials["seconds"].notna().all()
    note = "sweep.batch = 4: trials ran one at a time, since workload.retriever_noise"
    assert note in res.summary_text()


# --------------------------------------------------------------------------
# Batched sweeps end with exactly `trials` COMPLETE trials
# --------------------------------------------------------------------------


def test_a_batched_sweep_ends_with_exactly_its_trials_and_their_own_values(tmp_path):
    exp = memsim.experiment_from_dict(table(own=45.0, trials=9, batch=4,
                                            robustness={"replicates": 0}))
    res = run_sweep(exp, out=tmp_path, plots=False, report=False)
    states = res.trials["state"].tolist()
    assert states == ["COMPLETE"] * 9, res.trials
    assert res.trials.loc[0, "origin"] == "experiment" and res.trials.loc[0, HL] == 45.0
    row0_rep0 = res.trials.loc[0, "utility_rep0"]
    ev = TrialEvaluator(exp, res.spec)
    for _, row in res.trials.iloc[[0, 4, 8]].iterrows():
        assert ev.evaluate({HL: row[HL]})[0][0] == row["values_utility"]
    study = res.study
    assert {t.user_attrs.get("batch") for t in study.trials[:8]} == {4}
    # each trial reported its running value after each replicate
    assert study.trials[0].intermediate_values == {1: row0_rep0, 2: res.trials.loc[0, "values_utility"]}
    manifest = json.loads((res.path / "manifest.json").read_text())
    assert manifest["sweep"]["batch"] == 4 and manifest["sweep"]["pruner"] == "none"
    assert manifest["sweep"]["cache_mb"] is None  # automatic
    # the same seed and batch give the same sweep
    again = run_sweep(exp, out=None)
    pd.testing.assert_frame_equal(again.trials[["number", "values_utility", HL]],
                                  res.trials[["number", "values_utility", HL]])


def test_two_workers_with_batches_end_with_exactly_the_trials(tmp_path):
    exp = memsim.experiment_from_dict(table(own=45.0, trials=10, batch=3, replicates=1,
                                            robustness={"replicates": 0}))
    res = run_sweep(exp, out=tmp_path, workers=2, plots=False, report=False)
    study = res.study
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    assert len(complete) == 10
    assert not study.get_trials(deepcopy=False, states=(TrialState.RUNNING,
                                                        TrialState.WAITING))
    # (which worker ran which trial depends on timing: a worker that starts
    # late may find the study complete)


def test_a_two_objective_run_level_sweep_batches(tmp_path):
    exp = memsim.experiment_from_dict(retention_table(trials=6))
    res = run_sweep(exp, out=None, batch=3)
    assert (res.trials["state"] == "COMPLETE").sum() == 6
    ev = TrialEvaluator(exp, res.spec)
    keys = res.spec.keys
    for _, row in res.trials.iterrows():
        values, _ = ev.evaluate({k: row[k] for k in keys})
        assert [row["values_utility_share"], row["values_store_tokens"]] == values


# --------------------------------------------------------------------------
# Pruners
# --------------------------------------------------------------------------


def test_the_median_pruner_stops_hopeless_trials_and_outputs_leave_them_out(tmp_path):
    exp = memsim.experiment_from_dict(ranker_table(trials=14, batch=3, pruner="median"))
    res = run_sweep(exp, out=tmp_path, plots=False)
    tr = res.trials
    pruned = tr[tr["state"] == "PRUNED"]
    assert (tr["state"] == "COMPLETE").sum() == 14
    # the random ranker is hopeless: once the pruner has its 5 COMPLETE trials
    # (from the third batch on) every random-ranked trial is stopped
    late_random = tr[(tr["number"] >= 6) & (tr[RANKER] == "random")]
    assert len(late_random) >= 2 and (late_random["state"] == "PRUNED").all(), tr
    # a pruned trial never ran the last replicate; its value is its running
    # value (the mean over the replicates it ran) when it was stopped
    assert pruned["utility_rep2"].isna().all() and pruned["utility_rep0"].notna().all()
    ran = pruned[["utility_rep0", "utility_rep1"]].mean(axis=1)
    assert np.allclose(pruned["values_utility"], ran, rtol=0, atol=1e-12)
    # left out of the best, the plateau, the robustness check and the summary's count
    assert res.best_number not in set(pruned["number"])
    best = tr[tr["state"] == "COMPLETE"]["values_utility"].max()
    assert res.best_value == best
    assert (res.plateau["n_trials"] == 14).all()
    csv = pd.read_csv(res.path / "sweep" / "trials.csv")
    assert (csv["state"] == "PRUNED").sum() == len(pruned)
    assert (pd.read_csv(res.path / "sweep" / "plateau.csv")["n_trials"] == 14).all()
    assert f"14 COMPLETE trials of {len(tr)} ({len(pruned)} PRUNED)" in res.summary_text()
    assert not set(res.robustness.get("number", [])) & set(pruned["number"])
    report = (res.path / "report.md").read_text(encoding="utf-8")
    assert f"{len(tr)} trials, 14 completed" in report


@pytest.mark.parametrize("pruner", ["successive-halving", "hyperband"])
def test_the_other_pruners_prune_and_the_sweep_still_completes(pruner):
    exp = memsim.experiment_from_dict(ranker_table(trials=10, batch=2, pruner=pruner))
    res = run_sweep(exp, out=None)
    tr = res.trials
    assert (tr["state"] == "COMPLETE").sum() == 10
    assert (tr["state"] == "PRUNED").any(), tr
    assert tr.loc[0, "state"] == "COMPLETE"  # trial 0, the reference, is never pruned


def test_a_pruner_with_one_replicate_warns_instead_of_doing_nothing_silently():
    exp = memsim.experiment_from_dict(ranker_table(trials=3, replicates=1, pruner="median"))
    with pytest.warns(UserWarning, match="prunes nothing with experiment.replicates = 1"):
        res = run_sweep(exp, out=None)
    assert "prunes nothing" in res.summary_text()
    assert (res.trials["state"] == "COMPLETE").all()


# --------------------------------------------------------------------------
# Resuming with batches
# --------------------------------------------------------------------------


def test_ctrl_c_mid_batch_then_resume_completes_exactly(tmp_path, monkeypatch):
    n = 8
    exp = memsim.experiment_from_dict(table(own=45.0, trials=n, batch=3,
                                            robustness={"replicates": 0}))
    calls = {"n": 0}
    real = TrialEvaluator.evaluate_batch

    def interrupted(self, *a, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(self, *a, **kw)

    monkeypatch.setattr(TrialEvaluator, "evaluate_batch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(exp, out=tmp_path, plots=False, report=False)
    monkeypatch.setattr(TrialEvaluator, "evaluate_batch", real)
    journal = next(tmp_path.glob("*/sweep/journal.log"))
    study = _study(journal)
    failed = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    assert len(failed) == 3  # the interrupted batch, given back
    assert len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,))) == 3

    res = run_sweep(exp, out=tmp_path, plots=False, report=False, batch=2)  # another batch
    assert res.path == journal.parents[1]
    trials = _study(journal).get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == n
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    for f in failed:  # each interrupted trial retried once, with its parameters
        retries = [t for t in complete if t.system_attrs.get("failed_trial") == f.number]
        assert len(retries) == 1 and retries[0].params == f.params


def _batch_running(trials) -> bool:
    """A whole batch is running: every RUNNING trial claimed and given its
    parameters, after two COMPLETE trials. (A trial killed between Optuna's
    ask and its claim is reaped only after ``UNCLAIMED_S``: a window of
    microseconds the test avoids so as to stay fast.)"""
    running = [t for t in trials if t.state == TrialState.RUNNING]
    return (sum(t.state == TrialState.COMPLETE for t in trials) >= 2 and len(running) >= 2
            and all(t.params and "worker" in t.user_attrs for t in running))


def test_sigkill_mid_batch_then_the_same_command_completes_exactly(tmp_path):
    n = 9
    f = write_toml(tmp_path / "planted.toml", table(own=400.0, trials=n, replicates=2,
                                                    batch=3, robustness={"replicates": 0}))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "memsim.cli", "sweep", str(f), "--out", str(out), "--quiet",
           "--no-report"]
    killed: list[int] = []
    for _ in range(4):
        killed = _start_and_kill(cmd, out, _batch_running)
        if len(killed) >= 2:
            break
    assert len(killed) >= 2, "no kill landed mid-batch"
    done = subprocess.run(cmd, env=_env(), cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    journal = next(out.glob("*/sweep/journal.log"))
    trials = _study(journal).get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == n
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    for k in killed:  # every trial of the killed batch retried once, with its parameters
        assert trials[k].state == TrialState.FAIL
        assert "died" in trials[k].user_attrs["failed_reason"]
        retries = [t for t in complete if t.system_attrs.get("failed_trial") == k]
        assert len(retries) == 1 and retries[0].params == trials[k].params


# --------------------------------------------------------------------------
# The keys: validation, the resolved table, the study's identity
# --------------------------------------------------------------------------

BAD = [
    ({"batch": 0}, "sweep.batch: expected an integer >= 1"),
    ({"batch": 2.5}, "sweep.batch: expected an integer >= 1"),
    ({"batch": True}, "sweep.batch: expected an integer >= 1"),
    ({"pruner": "medain"}, "sweep.pruner: unknown pruner 'medain' (did you mean 'median'?)"),
    ({"pruner": 3}, "sweep.pruner: unknown pruner 3"),
    ({"pruner": "median", "objectives": ["utility", "recall"]},
     "sweep.pruner: 'median' prunes a single-objective sweep; this one has 2 objectives"),
    ({"pruner": "hyperband", "sampler": "grid",
      "params": {HL: {"type": "float", "low": 5.0, "high": 45.0, "step": 5.0}}},
     "sweep.pruner: the grid sampler runs each point once"),
    ({"batchsize": 4}, "sweep.batchsize: unknown key (did you mean 'batch'?)"),
    ({"cache_mb": -1}, "sweep.cache_mb: expected an integer >= 0"),
    ({"cache_mb": 1.5}, "sweep.cache_mb: expected an integer >= 0"),
    ({"cache_mb": False}, "sweep.cache_mb: expected an integer >= 0"),
    ({"cache_mb": "auto"}, "sweep.cache_mb: expected an integer >= 0"),
]


@pytest.mark.parametrize("change, message", BAD)
def test_bad_batch_and_pruner_values_fail_with_one_clear_line(change, message):
    t = table(own=45.0)
    t["sweep"].update(change)
    exp = memsim.experiment_from_dict(t)
    with pytest.raises(ConfigError) as info:
        SweepSpec.from_config(exp.sweep, exp)
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_cli_batch_and_pruner_options(tmp_path, capsys):
    f = write_toml(tmp_path / "p.toml", ranker_table(trials=4))
    assert main(["sweep", str(f), "--out", str(tmp_path / "o"), "--pruner", "hyperbnd"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # blamed on the option, not on a key of the file
    assert len(err) == 1 and "--pruner: unknown pruner 'hyperbnd' (did you mean " \
        "'hyperband'?)" in err[0] and str(f) not in err[0], err
    assert main(["sweep", str(f), "--out", str(tmp_path / "o"), "--batch", "0"]) == 2
    err = capsys.readouterr().err
    assert "--batch: expected an integer >= 1" in err and str(f) not in err
    assert not (tmp_path / "o").exists()
    assert main(["sweep", str(f), "--out", str(tmp_path / "o"), "--cache-mb", "-5"]) == 2
    err = capsys.readouterr().err
    assert "--cache-mb: expected an integer >= 0" in err and str(f) not in err
    assert not (tmp_path / "o").exists()
    assert main(["sweep", str(f), "--out", str(tmp_path / "o"), "--quiet", "--no-report",
                 "--batch", "2", "--pruner", "median", "--cache-mb", "64"]) == 0
    run = next((tmp_path / "o").iterdir())
    sweep = json.loads((run / "manifest.json").read_text())["sweep"]
    assert (sweep["batch"], sweep["pruner"], sweep["cache_mb"]) == (2, "median", 64)
    config = (run / "config.toml").read_text()
    assert 'batch = 2' in config and 'cache_mb = 64' in config


def test_batch_and_pruner_are_written_back_but_not_part_of_the_identity(tmp_path):
    from memsim.sweep.resume import _identity

    exp = memsim.experiment_from_dict(table(own=45.0))
    spec = SweepSpec.from_config(exp.sweep, exp)
    assert (spec.batch, spec.pruner) == (1, "none")
    assert spec.cache_mb is None and "cache_mb" not in spec.to_config()
    other = memsim.experiment_from_dict(table(own=45.0, batch=8, pruner="median", cache_mb=0))
    ospec = SweepSpec.from_config(other.sweep, other)
    cfg = ospec.to_config()
    assert (cfg["batch"], cfg["pruner"], cfg["cache_mb"]) == (8, "median", 0)
    assert SweepSpec.from_config(cfg, other) == ospec
    assert _identity(exp, spec) == _identity(other, ospec)
    # so the same sweep with another batch size resumes the same folder and study
    exp3 = memsim.experiment_from_dict(table(own=45.0, trials=3, replicates=1,
                                             robustness={"replicates": 0}))
    first = run_sweep(exp3, out=tmp_path, plots=False, report=False)
    with pytest.warns(UserWarning, match="prunes nothing"):  # one replicate
        more = run_sweep(exp3, out=tmp_path, plots=False, report=False, trials=5, batch=2,
                         pruner="median")
    assert more.path == first.path and more.study_name == first.study_name
    assert (more.trials["state"] == "COMPLETE").sum() == 5
