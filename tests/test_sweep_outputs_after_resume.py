"""Sweeps as a user meets them: resuming after an interrupt, reading a run
folder back, the search space's mistakes and the Pareto set's summary.

Workloads are the tiny ones of ``tests/test_sweep.py`` (a trial takes a
fraction of a second).
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

import memsim
from memsim.core.errors import ConfigError
from memsim.sweep import SweepSpec, TrialEvaluator, run_sweep
from memsim.sweep.outputs import SweepResult

from .test_sweep import retention_table, table


def _interrupt_trials(monkeypatch) -> None:
    """Ctrl-C in the first batch of trials the next session evaluates."""
    def interrupted(self, *a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(TrialEvaluator, "evaluate_batch", interrupted)


# --------------------------------------------------------------------------
# Resuming: an interrupted session leaves no earlier session's outputs
# --------------------------------------------------------------------------


def test_an_interrupted_resume_leaves_no_tables_of_an_earlier_study(tmp_path, monkeypatch):
    """A finished sweep extended with --trials and interrupted in its trials:
    the folder must not keep the first session's trials.csv, best.toml,
    plateau, importance, summary and report as if they described the study
    (which has more trials now); what load_sweep reads agrees with it."""
    exp = memsim.experiment_from_dict(table(own=45.0, trials=3,
                                            robustness={"replicates": 0}))
    first = run_sweep(exp, out=tmp_path, plots=False, report=True)
    sdir = first.path / "sweep"
    assert (sdir / "trials.csv").exists() and (first.path / "report.html").exists()

    real = TrialEvaluator.evaluate_batch
    _interrupt_trials(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(exp, out=tmp_path, trials=5, plots=False, report=False)
    monkeypatch.setattr(TrialEvaluator, "evaluate_batch", real)

    run = memsim.load_sweep(first.path)
    assert run.status == "failed"
    assert run.manifest["error"] == "KeyboardInterrupt"  # no dangling ": "
    assert run.manifest["sessions"][-1]["error"] == "KeyboardInterrupt"
    assert "finished_utc" in run.manifest["sessions"][-1]
    # stopped in its first batch: it completed none (the first session, 3)
    assert run.manifest["sessions"][-1]["trials_completed"] == 0
    assert run.manifest["sessions"][0]["trials_completed"] == 3
    n_study = len(run.study().trials)
    assert n_study > 3  # the interrupted trial, failed, and its retry
    for name in ("trials", "plateau", "robustness", "importance"):
        frame = getattr(run, name)
        assert frame.empty, f"{name}.csv of the first session is still there"
    for f in ("best.toml", "summary.txt"):
        assert not (sdir / f).exists(), f
    assert not (first.path / "report.html").exists()

    # resumed to the end: the files are whole and agree with the study
    res = run_sweep(exp, out=tmp_path, trials=5, plots=False, report=False)
    assert res.path == first.path
    run = memsim.load_sweep(first.path)
    assert run.status == "completed"
    assert len(run.trials) == len(run.study().trials) == len(res.trials)
    # the interrupted trial says why it failed; its retry has its parameters
    failed = run.trials[run.trials["state"] == "FAIL"]
    assert failed["error"].tolist() == ["interrupted: KeyboardInterrupt"]
    retry = run.trials[run.trials["retry_of"] == failed["number"].iloc[0]]
    assert len(retry) == 1 and retry["state"].iloc[0] == "COMPLETE"
    assert (run.trials["state"] == "COMPLETE").sum() == 5
    assert run.trials["number"].tolist() == res.trials["number"].tolist()
    assert (sdir / "summary.txt").read_text(encoding="utf-8").strip() == res.summary_text()


def test_a_resumed_multi_objective_sweep_keeps_only_its_pareto_members(tmp_path):
    """pareto/ holds one file per member of the study's Pareto set: a member
    of an earlier session's set that is not one now is removed."""
    exp = memsim.experiment_from_dict(retention_table(trials=3))
    first = run_sweep(exp, out=tmp_path, plots=False, report=False)
    pdir = first.path / "sweep" / "pareto"
    # what an earlier session left: a member since dominated
    (pdir / "trial_999.toml").write_text("# stale\n", encoding="utf-8")
    res = run_sweep(exp, out=tmp_path, trials=4, plots=False, report=False)
    assert res.path == first.path
    files = sorted(p.name for p in pdir.glob("*.toml"))
    assert files == sorted(f"trial_{n}.toml" for n in res.pareto)


def test_outputs_without_importance_remove_an_earlier_importance_csv(tmp_path):
    """write_outputs with no importance (one COMPLETE trial) leaves no
    importance.csv of another study behind."""
    from memsim.sweep.outputs import best_trials, trials_table, write_outputs

    exp = memsim.experiment_from_dict(table(own=45.0, trials=1,
                                            robustness={"replicates": 0}))
    res = run_sweep(exp, out=None)
    sdir = tmp_path / "sweep"
    sdir.mkdir()
    (sdir / "importance.csv").write_text("objective,param,importance\nutility,x,1\n",
                                         encoding="utf-8")
    _, imp = write_outputs(res.study, res.experiment, res.spec, trials_table(res.study, res.spec),
                           pd.DataFrame(), best_trials(res.study, res.spec), sdir, {},
                           True, False)
    assert imp.empty
    assert not (sdir / "importance.csv").exists()


# --------------------------------------------------------------------------
# The search space: one clear line naming the key, before any trial
# --------------------------------------------------------------------------


def test_a_categorical_with_one_choice_is_refused_naming_the_key(tmp_path):
    t = table(own=45.0)
    t["sweep"]["params"]["policies.p.packer"] = {"type": "categorical",
                                                 "choices": ["skip-fill"]}
    exp = memsim.experiment_from_dict(t)
    with pytest.raises(ConfigError) as err:
        SweepSpec.from_config(exp.sweep, exp)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith('sweep.params."policies.p.packer".choices: a categorical needs at '
                          "least two values"), msg
    with pytest.raises(ConfigError, match="at least two values"):
        run_sweep(exp, out=tmp_path)
    assert not list(tmp_path.iterdir())  # refused before any folder or trial


# --------------------------------------------------------------------------
# Several objectives: what the summary says of the Pareto set
# --------------------------------------------------------------------------


def _result(values: dict[int, tuple[float, float]], pareto: list[int]) -> SweepResult:
    exp = memsim.experiment_from_dict(retention_table())
    spec = SweepSpec.from_config(exp.sweep, exp)
    trials = pd.DataFrame([{"number": n, "state": "COMPLETE",
                            **{f"values_{lab}": v for lab, v in zip(spec.labels, vs)}}
                           for n, vs in values.items()])
    return SweepResult(experiment=exp, spec=spec, study=None, trials=trials,
                       best_params={}, best_values=dict(zip(spec.labels, values[pareto[0]])),
                       best_number=pareto[0], pareto=pareto, robustness=pd.DataFrame())


def test_a_pareto_set_of_one_is_a_single_best_not_a_trade_off():
    text = _result({0: (0.9, 100.0), 1: (0.95, 80.0)}, [1]).summary_text()
    assert "no single best" not in text and "trade off" not in text, text
    assert "Pareto set (1 trial: at least as good as every other trial" in text
    assert "trial 1: utility_share = 0.95, store_tokens = 80" in text


def test_a_pareto_set_of_tied_trials_is_not_a_trade_off():
    text = _result({0: (0.9, 100.0), 1: (0.9, 100.0), 2: (0.5, 200.0)}, [0, 1]).summary_text()
    assert "trade off" not in text, text
    assert "Pareto set (2 trials, tied" in text


def test_a_real_pareto_front_still_says_the_objectives_trade_off():
    text = _result({0: (0.9, 100.0), 1: (0.95, 180.0)}, [1, 0]).summary_text()
    assert "Pareto set (2 trials; no single best, the objectives trade off):" in text


def test_the_manifest_of_a_completed_multi_objective_sweep_agrees_with_its_summary(tmp_path):
    exp = memsim.experiment_from_dict(retention_table(trials=3))
    res = run_sweep(exp, out=tmp_path, plots=False, report=False)
    manifest = json.loads((res.path / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["best"]["number"] == res.pareto[0]
    text = (res.path / "sweep" / "summary.txt").read_text(encoding="utf-8")
    for n in res.pareto:
        assert f"  trial {n}: " in text


# --------------------------------------------------------------------------
# memsim audit --out: a folder that cannot be one is refused before the work
# --------------------------------------------------------------------------


def test_audit_out_on_a_file_is_one_line_naming_the_option_before_any_work(
        tmp_path, capsys, monkeypatch):
    from pathlib import Path

    import memsim.tuning.audit as audit_mod
    from memsim.cli import main

    def no_work(*a, **kw):
        raise AssertionError("the audit ran before --out was checked")

    monkeypatch.setattr(audit_mod, "audit", no_work)
    exp = Path(__file__).resolve().parents[1] / "experiments" / "sweep_hivemind.toml"
    a_file = tmp_path / "taken.txt"
    a_file.write_text("x\n", encoding="utf-8")
    for out, why in ((a_file, "is a file, not a folder"),
                     (a_file / "sub", f"{a_file} is a file, not a folder")):
        assert main(["audit", str(exp), "--quiet", "--no-params", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (f"memsim: error: --out {out}: {why}; give a folder to save the "
                       "audit in"), err
