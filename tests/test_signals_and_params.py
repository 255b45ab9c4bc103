"""What a record says is what happened: the signal that stopped a run or a
sweep, the ``--set`` override behind a ``memsim curves`` error, and a sweep
trial's parameters in MLflow as TOML text."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from memsim.cli import main
from memsim.core.errors import ConfigError
from memsim.reporting.curves import curves_table

from .test_failures import ROOT, SWEEP, tiny

#: Minutes of work per run, so that no run ends before the signal.
LONG = ("--set", "experiment.replicates=400", "--set", "workload.horizon_days=200")


def _start(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "memsim.cli", *map(str, args), *LONG],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_folders(out: Path, n: int = 1, timeout: float = 60.0) -> list[Path]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        folders = [p for p in out.glob("*") if (p / "manifest.json").exists()]
        if len(folders) >= n:
            time.sleep(0.3)  # into the work, past the folder's first writes
            return folders
        time.sleep(0.05)
    raise AssertionError(f"no {n} run folder(s) under {out}")


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------
# SIGTERM is recorded as SIGTERM, and stops as Ctrl-C does
# --------------------------------------------------------------------------


def test_sigterm_and_ctrl_c_are_recorded_as_what_they_were(tmp_path):
    """A run stopped by SIGTERM and one stopped by SIGINT both end failed,
    without summary.csv and with their config.toml (re-runnable), and each
    manifest's error names its own signal."""
    f = tiny(tmp_path)
    procs = {sig: _start("run", f, "--quiet", "--no-report", "--out", tmp_path / sig.name)
             for sig in (signal.SIGTERM, signal.SIGINT)}
    errors = {}
    for sig, proc in procs.items():
        (folder,) = _wait_for_folders(tmp_path / sig.name)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + sig  # 130 for Ctrl-C, 143 for SIGTERM
        assert err.strip() == ("memsim: interrupted" if sig == signal.SIGINT
                               else "memsim: interrupted (SIGTERM)")
        manifest = _manifest(folder)
        assert manifest["status"] == "failed"
        assert not (folder / "summary.csv").exists()
        assert (folder / "config.toml").exists()
        errors[sig] = manifest["error"]
    assert errors[signal.SIGTERM] == "Terminated: SIGTERM", errors
    assert errors[signal.SIGINT].startswith("KeyboardInterrupt"), errors


def test_sigterm_stops_parallel_runs_each_recorded_as_sigterm(tmp_path):
    """`run A B --jobs 2`: each run's worker process, stopped by the SIGTERM
    the interrupted parent sends it, names SIGTERM in its manifest."""
    files = [tiny(tmp_path, f"e{i}.toml", extra=f'description = "{i}"') for i in range(2)]
    out = tmp_path / "out"
    proc = _start("run", *files, "--jobs", "2", "--quiet", "--no-report", "--out", out)
    folders = _wait_for_folders(out, 2)
    time.sleep(0.5)  # past the workers' first steps, into their replays
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode != 0
    for folder in folders:
        manifest = _manifest(folder)
        assert manifest["status"] == "failed"
        assert manifest["error"] == "Terminated: SIGTERM", manifest
        assert not (folder / "summary.csv").exists()


def test_a_sweep_stopped_by_sigterm_says_so_and_can_resume(tmp_path):
    """As on Ctrl-C, the interrupted trial is given back (failed, and queued
    again with its parameters) and the manifest tells how to resume; its
    error names SIGTERM."""
    import optuna

    from memsim.sweep.storage import open_storage

    f = tiny(tmp_path, tail=SWEEP)
    out = tmp_path / "out"
    proc = _start("sweep", f, "--quiet", "--no-report", "--out", out)
    (folder,) = _wait_for_folders(out)
    time.sleep(0.7)  # into the first trial
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    manifest = _manifest(folder)
    assert manifest["status"] == "failed"
    assert manifest["error"] == "Terminated: SIGTERM", manifest
    assert "resume" in manifest["hint"]
    storage = open_storage(f"journal:{folder / 'sweep' / 'journal.log'}")
    study = optuna.load_study(study_name=manifest["sweep"]["study"], storage=storage)
    trials = study.get_trials(deepcopy=False)
    failed = [t for t in trials if t.state.name == "FAIL"]
    waiting = [t for t in trials if t.state.name == "WAITING"]
    assert len(failed) == 1 and [t.params for t in waiting] == [failed[0].params], trials


def test_the_sigterm_exception_is_a_keyboard_interrupt_that_crosses_a_pipe():
    """Every Ctrl-C handler catches it; a run_many worker sends it back
    to its parent through a pipe."""
    import multiprocessing

    from memsim.core.errors import Terminated

    recv, send = multiprocessing.Pipe(duplex=False)
    send.send(Terminated(signal.SIGTERM))
    exc = recv.recv()
    assert isinstance(exc, KeyboardInterrupt) and exc.signum == signal.SIGTERM
    assert f"{type(exc).__name__}: {exc}" == "Terminated: SIGTERM"


# --------------------------------------------------------------------------
# memsim curves: a mistake an override made says so
# --------------------------------------------------------------------------


def _curve_errors(overrides: dict, presets=("hivemind", "similarity-only")) -> list[str]:
    with pytest.raises(ConfigError) as info:
        curves_table(list(presets), overrides=overrides)
    return info.value.errors


@pytest.mark.parametrize("overrides, key", [
    # shared by every preset; a parameter out of its range
    ({"decay.task_floor": 2}, "decay.task_floor=2"),
    # shared; an unknown parameter
    ({"decay.half_life_days": -1.5}, "decay.half_life_days=-1.5"),
    # one preset's parameter
    ({"policies.hivemind.decay.task_floor": 2.0}, "policies.hivemind.decay.task_floor=2.0"),
    # one preset's slot, set to a kind that does not exist
    ({"policies.hivemind.decay": "nope"}, 'policies.hivemind.decay="nope"'),
])
def test_a_curves_error_names_the_override_that_made_it(overrides, key):
    (error,) = _curve_errors(overrides)
    assert error.startswith("hivemind.decay"), error
    assert error.endswith(f"(from --set {key})"), error


@pytest.mark.parametrize("overrides, said", [
    ({"decay": "none", "decay.x": 1}, '(from --set decay="none", --set decay.x=1)'),
    ({"policies.hivemind.candidates": 3, "policies.hivemind.candidates.x": 1},
     "(from --set policies.hivemind.candidates=3, --set policies.hivemind.candidates.x=1)"),
])
def test_a_key_set_below_a_value_names_both_overrides(overrides, said):
    (error,) = _curve_errors(overrides)
    assert "is a value, not a table" in error and error.endswith(said), error


def test_a_curves_error_of_no_override_is_not_attributed():
    # the preset name is the mistake, not the (valid) shared override: the
    # message reads as it does without the override, naming no --set
    presets = ("hivemind-2025",)
    (error,) = _curve_errors({"decay.half_life_days": 30.0}, presets=presets)
    assert "unknown preset" in error and error == _curve_errors({}, presets=presets)[0], error


def test_curves_prints_each_attributed_mistake_on_its_line(capsys):
    assert main(["curves", "hivemind", "--set", "decay.task_floor=2",
                 "--set", "ranker.nope=1"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("memsim: error: hivemind.decay")
    assert lines[0].endswith("(from --set decay.task_floor=2)"), lines
    assert lines[1].startswith("memsim: error: hivemind.ranker.nope")
    assert lines[1].endswith("(from --set ranker.nope=1)"), lines


# --------------------------------------------------------------------------
# MLflow: a trial's parameters as TOML text, as a run's are
# --------------------------------------------------------------------------


def test_trial_params_are_logged_as_toml_text(tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason="the [mlflow] extra (mlflow-skinny) is not installed")
    from mlflow.tracking import MlflowClient

    from memsim.adapters.tracking import log_sweep
    from memsim.sweep import run_sweep

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    uri = (tmp_path / "mlruns").as_uri()
    sweep = SWEEP.replace(
        '"policies.a.candidates" = { type = "int", low = 10, high = 30 }',
        '"policies.a.candidates" = { type = "int", low = 10, high = 30 }\n'
        '"policies.a.packer" = { type = "categorical", choices = ["top-k-cutoff", "skip-fill"] }\n'
        '"policies.a.feedback.before_scoring" = { type = "categorical", '
        'choices = [false, true] }')
    res = run_sweep(tiny(tmp_path, tail=sweep), out=tmp_path / "out", plots=False,
                    report=False)
    log_sweep(res, tracking_uri=uri)
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("tiny")
    trials = [r for r in client.search_runs([exp.experiment_id])
              if r.data.tags.get("mlflow.parentRunId")]
    assert trials
    for run in trials:
        params = run.data.params
        number = int(run.data.tags["number"])
        study_params = res.study.trials[number].params
        # quoted string, lowercase bool: each reads back as TOML to the study's value
        assert params["policies.a.packer"] in ('"top-k-cutoff"', '"skip-fill"'), params
        assert params["policies.a.feedback.before_scoring"] in ("true", "false"), params
        for key, value in study_params.items():
            assert tomllib.loads(f"v = {params[key]}")["v"] == value, (key, params)
