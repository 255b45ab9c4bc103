"""MLflow export of runs and sweeps (memsim.adapters.tracking), against a local file
store in tmp_path. Skips without the ``[mlflow]`` extra."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from memsim.cli import main
from memsim.runs.config import dumps_toml
from memsim.core.errors import ConfigError
from memsim.adapters.tracking import flatten_config

HL = "policies.p.decay.half_life_days"


def _experiment(path: Path, sweep: bool = False) -> Path:
    t = {
        "experiment": {"name": "tracked", "seed": 3, "replicates": 1, "budget_tokens": 600,
                       "tick_days": 10.0},
        "workload": {"horizon_days": 30, "backfill_days": 30, "notes_per_day": 4.0,
                     "queries_per_day": 2.0, "n_topics": 8},
        "policies": {"p": {"ranker": "product",
                           "decay": {"kind": "half-life", "half_life_days": 30.0},
                           "packer": "skip-fill"},
                     "similarity-only": {"preset": "similarity-only"}},
    }
    if sweep:
        t["sweep"] = {"trials": 3, "seed": 1, "sampler": "random",
                      "objectives": [{"metric": "utility", "direction": "maximize",
                                      "policy": "p"}],
                      "params": {HL: {"type": "float", "low": 5.0, "high": 300.0, "log": True}}}
    path.write_text(dumps_toml(t), encoding="utf-8")
    return path


@pytest.fixture
def store(tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason="the [mlflow] extra (mlflow-skinny) is not installed")
    # MLflow 3 keeps its folder store behind this switch
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)  # nothing lands in the working folder
    return (tmp_path / "mlruns").as_uri()


def _runs(uri: str, name: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(name)
    assert exp is not None, f"no MLflow experiment {name!r}"
    return client, client.search_runs([exp.experiment_id])


def test_flatten_config_gives_dotted_keys():
    flat = flatten_config({"experiment": {"seed": 3, "name": "x"},
                           "policies": {"p": {"decay": {"half_life_days": 30.0}}},
                           "experiment2": {"budgets": [100, 200]}})
    assert flat == {"experiment.seed": "3", "experiment.name": '"x"',
                    "policies.p.decay.half_life_days": "30.0",
                    "experiment2.budgets": "[100, 200]"}


def test_flatten_config_values_are_toml_text_that_reads_back():
    """Each param is the value's TOML text: booleans ``true`` / ``false``,
    arrays and tables in arrays inline, strings quoted; pasted after
    ``key = `` it reads back as the value."""
    import tomllib

    table = {"experiment": {"save_rankings": True, "name": 'say "hi"\n', "budgets": [],
                            "ratio": float("inf")},
             "policies": {"p": {"feedback": {"before_scoring": False}}},
             "sweep": {"objectives": [{"metric": "utility", "direction": "maximize",
                                       "weights": [1, 0.5], "odd key": True}],
                       "grid": [[1, 2], ["a", "b"]]}}
    flat = flatten_config(table)
    assert flat["experiment.save_rankings"] == "true"
    assert flat["policies.p.feedback.before_scoring"] == "false"
    assert flat["sweep.objectives"] == ('[{ metric = "utility", direction = "maximize", '
                                        'weights = [1, 0.5], "odd key" = true }]')
    assert flat["sweep.grid"] == '[[1, 2], ["a", "b"]]'
    assert flat["experiment.ratio"] == "inf" and flat["experiment.budgets"] == "[]"
    for key, text in flat.items():
        section, *rest = key.split(".")
        want = table[section]
        for part in rest:
            want = want[part]
        assert tomllib.loads(f"x = {text}")["x"] == want, key


@pytest.mark.slow
def test_run_is_off_by_default_and_exported_with_the_flag(tmp_path, store, capsys,
                                                          monkeypatch):
    exp = _experiment(tmp_path / "e.toml")
    assert main(["run", str(exp), "--out", str(tmp_path / "plain"), "--quiet"]) == 0
    assert not (tmp_path / "mlruns").exists()  # off by default
    capsys.readouterr()
    assert main(["run", str(exp), "--out", str(tmp_path / "out"), "--quiet",
                 "--mlflow", store]) == 0
    run_dir = Path(capsys.readouterr().out.strip().splitlines()[-1])
    client, runs = _runs(store, "tracked")
    assert len(runs) == 1
    r = runs[0]
    assert r.info.run_name == run_dir.name
    assert r.data.params["experiment.seed"] == "3"
    assert r.data.params[HL] == "30.0"
    summary = pd.read_csv(run_dir / "summary.csv")
    want = summary[(summary["metric"] == "utility") & (summary["policy"] == "p")]["mean"].iloc[0]
    assert r.data.metrics["utility/p"] == pytest.approx(want)
    assert "utility/similarity-only" in r.data.metrics
    assert r.data.tags["memsim.status"] == "completed"
    arts = {a.path for a in client.list_artifacts(r.info.run_id)}
    assert {"report.html", "config.toml", "summary.csv", "manifest.json"} <= arts
    # a store MLflow refuses: one line naming the URI, no traceback
    from memsim.adapters import tracking
    from memsim.core.errors import MemsimError

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    with pytest.raises(MemsimError, match=r"--mlflow: cannot open the MLflow experiment "
                                          r"'tracked' at file:"):
        tracking.log_run(run_dir, tracking_uri=(tmp_path / "other").as_uri())


def test_a_grids_runs_go_to_one_experiment_and_stderr_holds_json_only(tmp_path, store,
                                                                       capsys):
    exp = _experiment(tmp_path / "e.toml")
    with open(exp, "a", encoding="utf-8") as fh:
        fh.write('\n[grid]\n"experiment.budget_tokens" = [300, 600]\n')
    assert main(["run", str(exp), "--out", str(tmp_path / "out"), "--quiet", "--no-report",
                 "--progress", "json", "--mlflow", store]) == 0
    err = capsys.readouterr().err
    for line in err.splitlines():  # MLflow's own INFO lines are kept off
        assert line.startswith("{") or line.startswith("memsim: warning: "), line
    _, runs = _runs(store, "tracked")  # the file's experiment name, not each run's
    assert sorted(r.data.params["experiment.budget_tokens"] for r in runs) == ["300", "600"]
    assert sorted(r.data.params["experiment.name"] for r in runs) == [  # (TOML text)
        '"tracked_budget_tokens-300"', '"tracked_budget_tokens-600"']


def test_sweep_logs_a_parent_run_and_one_run_per_trial(tmp_path, store, capsys):
    exp = _experiment(tmp_path / "s.toml", sweep=True)
    assert main(["sweep", str(exp), "--out", str(tmp_path / "out"), "--quiet", "--no-report",
                 "--mlflow", store]) == 0
    run_dir = Path(capsys.readouterr().out.strip().splitlines()[-1])
    client, runs = _runs(store, "tracked")
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    trials = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
    assert len(parents) == 1 and parents[0].info.run_name == run_dir.name
    assert {r.data.tags["mlflow.parentRunId"] for r in trials} == {parents[0].info.run_id}
    table = pd.read_csv(run_dir / "sweep" / "trials.csv")
    done = table[table["state"] == "COMPLETE"]
    assert len(trials) == len(table) >= 3
    # each trial's parameter and value, as the study has them
    got = {int(r.data.tags["number"]): (float(r.data.params[HL]), r.data.metrics["utility_p"])
           for r in trials}
    assert len(done) >= 3
    for number, value, hl in zip(done["number"], done["values_utility@p"], done[HL]):
        assert math.isclose(got[int(number)][0], float(hl))
        assert got[int(number)][1] == pytest.approx(value)
    # the user attributes (per-replicate values) as tags, with MLflow-valid names
    assert all("utility_p_rep0" in r.data.tags for r in trials)
    best = parents[0].data.metrics
    assert best["best/utility_p"] == pytest.approx(max(v for _, v in got.values()))
    arts = {a.path for a in client.list_artifacts(parents[0].info.run_id)}
    assert {"config.toml", "manifest.json", "sweep"} <= arts


def test_missing_mlflow_is_one_line_before_the_run(tmp_path, monkeypatch, capsys):
    import builtins

    real = builtins.__import__

    def no_mlflow(name, *args, **kwargs):
        if name == "mlflow" or name.startswith("mlflow."):
            raise ImportError("no mlflow")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mlflow)
    exp = _experiment(tmp_path / "e.toml")
    assert main(["run", str(exp), "--out", str(tmp_path / "out"), "--mlflow"]) == 2
    assert "pip install -e \".[mlflow]\"" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before running
    from memsim.adapters import tracking

    with pytest.raises(ConfigError, match=r"\[mlflow\]"):
        tracking.log_run(tmp_path)


@pytest.mark.parametrize("damage, said", [
    (lambda s: s.drop(columns="mean"), "no column 'mean'"),
    (lambda s: s.assign(mean=s["mean"].astype(object).where(s.index != 1, "abc")),
     "column 'mean': row 1: 'abc' is not a number"),
])
def test_a_damaged_summary_is_refused_in_one_line(tmp_path, store, capsys, damage, said):
    """A run folder whose summary.csv lost a column or holds text in a
    measure is refused naming the file, the column and the row, before
    anything is logged."""
    from memsim.adapters import tracking
    from memsim.core.errors import MemsimError

    exp = _experiment(tmp_path / "e.toml")
    assert main(["run", str(exp), "--out", str(tmp_path / "out"), "--quiet",
                 "--no-report"]) == 0
    run_dir = Path(capsys.readouterr().out.strip().splitlines()[-1])
    path = run_dir / "summary.csv"
    damage(pd.read_csv(path)).to_csv(path, index=False)
    with pytest.raises(MemsimError, match=rf"--mlflow: .*summary\.csv: not a memsim "
                                          rf"summary\.csv: {said}"):
        tracking.log_run(run_dir, tracking_uri=store)
    _, runs = _runs(store, "tracked")
    assert len(runs) == 0


@pytest.mark.parametrize("uri", ["bogus://x", "http://127.0.0.1:1"])
def test_an_unreachable_store_is_refused_before_the_run(tmp_path, capsys, uri):
    """A bad --mlflow URI was found only after the whole run (or sweep), which
    then printed no folder; a server that does not answer hung for minutes
    in MLflow's retries. Now one line before any work, within seconds."""
    import time

    exp = _experiment(tmp_path / "e.toml")
    t0 = time.monotonic()
    assert main(["run", str(exp), "--out", str(tmp_path / "out"), "--quiet",
                 "--mlflow", uri]) == 2
    assert time.monotonic() - t0 < 60
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"memsim: error: --mlflow: cannot reach the MLflow tracking store at {uri}: "), err
    assert not (tmp_path / "out").exists()


def test_a_failed_export_names_the_completed_run(tmp_path, store, capsys, monkeypatch):
    from memsim.adapters import tracking
    from memsim.core.errors import MemsimError

    def refuse(*args, **kwargs):
        raise MemsimError("--mlflow: cannot export it: the server went away")

    monkeypatch.setattr(tracking, "log_run", refuse)
    exp = _experiment(tmp_path / "e.toml")
    assert main(["run", str(exp), "--out", str(tmp_path / "out"), "--quiet", "--no-report",
                 "--mlflow", store]) == 2
    err = capsys.readouterr().err
    (folder,) = (tmp_path / "out").iterdir()
    assert f"memsim: completed before the error: {folder}" in err
