"""Experiment tracking: export memsim runs and sweeps to MLflow (optional, off by default).

Nothing is sent anywhere unless asked: ``memsim run --mlflow [URI]`` and
``memsim sweep --mlflow [URI]``, or :func:`log_run` / :func:`log_sweep` from
Python, after the run folder is complete. ``URI`` is an MLflow tracking URI
(``sqlite:///mlflow.db``, ``http://host:5000``, or a local folder
``file:///path/mlruns``, for which MLflow 3 asks ``MLFLOW_ALLOW_FILE_STORE=true``);
without one, MLflow's own default (``MLFLOW_TRACKING_URI``, else its local
store). Needs the ``[mlflow]`` extra (``mlflow-skinny``).

What is logged
--------------
A **run** (:func:`log_run`) becomes one MLflow run in the MLflow experiment
named after the memsim experiment (``experiment.name``), run name = the run
folder's name:

- params: every key of the resolved ``config.toml``, dotted
  (``policies.hivemind.decay.half_life_days``), values as TOML text
  (:func:`flatten_config`: ``"x"``, ``true``, ``30.0``, ``[100, 200]``, inline
  tables), cut to MLflow's 6,000 characters;
- metrics: each ``mean`` of ``summary.csv`` as ``<metric>/<policy>`` (and
  ``/<budget>`` when the run has several budgets);
- tags: ``memsim.config_hash``, ``memsim.status``, ``memsim.run_dir``;
- artifacts: ``report.html``, ``config.toml``, ``summary.csv`` and
  ``manifest.json`` (the report is the run's record).

A **sweep** (:func:`log_sweep`) becomes a parent run (params of the sweep's
``config.toml``, the best trial's values as metrics ``best/<objective>``,
the report and the ``sweep/`` tables as artifacts) with one nested run per
finished trial in the layout of Optuna's ``MLflowCallback`` (run name = the
trial number; the trial's parameters, as TOML text as a run's are; its
objective values under their memsim labels; tags ``number``, ``state``,
``direction`` and the user attributes, e.g. the per-replicate values). The callback itself is not used:
optuna-integration deprecated it in 4.9 (to be removed in 6.0), and it
writes user-attribute names such as ``utility@p_rep0`` as tags, which MLflow
refuses. Names
are made valid for MLflow (``@`` and other characters become ``_``:
``utility@p`` is logged as ``utility_p``). Trials are exported after the
sweep, by the process that runs ``memsim sweep``, so distributed workers
need no MLflow access; exporting a resumed sweep again logs a new parent run
with every trial as it then stands.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import tomllib
from pathlib import Path
from typing import Any
from unittest import mock

import pandas as pd

from memsim.core.errors import ConfigError, MemsimError
from memsim.reporting.rundir import RunFolderError, read_run_file

__all__ = ["log_run", "log_sweep", "flatten_config", "require"]

#: MLflow's limit on a param value (characters).
_PARAM_CHARS = 6000
_RUN_FILES = ("report.html", "config.toml", "summary.csv", "manifest.json")


def _mlflow():
    try:
        import mlflow
    except ImportError:
        raise ConfigError("--mlflow needs MLflow, which is not installed: "
                          "pip install -e \".[mlflow]\" (from the repository)") from None
    return mlflow


def require(tracking_uri: str | None = None) -> None:
    """Raise the one-line ConfigError now, before a long run and not after
    it, when MLflow is missing or its tracking store (``tracking_uri``,
    default MLflow's) cannot be reached (an unknown scheme, a server that
    does not answer: asked once, for at most :data:`CHECK_TIMEOUT_S`)."""
    mlflow = _mlflow()
    uri = tracking_uri or mlflow.get_tracking_uri()
    # one quick try: MLflow's own retries with back-off take minutes
    quick = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
             "MLFLOW_HTTP_REQUEST_TIMEOUT": str(CHECK_TIMEOUT_S)}
    try:
        with mock.patch.dict(os.environ, quick):  # restored after, whatever happens
            mlflow.tracking.MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except Exception as exc:  # MLflow's own types for a bad URI, store or server
        raise ConfigError(f"--mlflow: cannot reach the MLflow tracking store at {uri}: "
                          f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
                          ) from None


def quiet() -> None:
    """MLflow's (and its database migrations') INFO lines off: the command
    line's stderr holds memsim's lines only (``--progress json``: one JSON
    object a line); warnings still show."""
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


#: Seconds :func:`require` waits for a tracking server's answer.
CHECK_TIMEOUT_S = 10


def flatten_config(table: dict, prefix: str = "") -> dict[str, str]:
    """Dotted keys of a config table, values as TOML text.

    Each value is written as it would stand after ``key = `` in
    ``config.toml`` (``tomllib.loads("x = " + value)`` reads it back):
    strings quoted (``"x"``), booleans ``true`` / ``false``, numbers as
    ``3`` or ``30.0`` (``inf``, ``nan``), arrays ``[100, 200]`` and tables
    inside arrays as inline tables (``[{ metric = "utility" }]``), so that a
    logged param pastes back into a config or a ``--set``. Tables become
    dotted keys."""
    out: dict[str, str] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten_config(value, name + "."))
        else:
            out[name] = _toml_value(value)
    return out


def _toml_value(value: Any) -> str:
    """``value`` as TOML text on one line: what follows ``key = `` (arrays
    and tables inline)."""
    if isinstance(value, dict):
        items = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    from memsim.runs.config import dumps_toml  # the config writer (tomli-w), when needed

    return dumps_toml({"v": value})[len("v = "):].rstrip("\n")


def _toml_key(key: Any) -> str:
    """A TOML key: bare when it can be, else quoted."""
    from memsim.runs.config import dumps_toml

    return dumps_toml({str(key): 0})[:-len(" = 0\n")]


def _key(*parts: Any) -> str:
    """An MLflow metric or param name: letters, digits and ``_-./ `` only."""
    return re.sub(r"[^A-Za-z0-9_\-./ ]", "_", "/".join(str(p) for p in parts))


def _start(mlflow, tracking_uri: str | None, experiment: str):
    if tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
    try:
        return mlflow.set_experiment(experiment)
    except Exception as exc:  # MLflow raises its own types for a bad URI or store
        raise MemsimError(f"--mlflow: cannot open the MLflow experiment {experiment!r} at "
                          f"{tracking_uri or mlflow.get_tracking_uri()}: "
                          f"{str(exc).splitlines()[0]}") from None


def _log_params(mlflow, params: dict[str, str]) -> None:
    items = [(k[:250], v if len(v) <= _PARAM_CHARS else v[:_PARAM_CHARS - 3] + "...")
             for k, v in params.items()]
    for i in range(0, len(items), 100):  # MLflow takes 100 params a call
        mlflow.log_params(dict(items[i:i + 100]))


def _read_run(run_dir: Path) -> tuple[dict, dict]:
    cfg_file, man_file = run_dir / "config.toml", run_dir / "manifest.json"
    if not cfg_file.is_file():
        raise MemsimError(f"--mlflow: {run_dir} is not a run folder (no config.toml)")
    try:
        config = tomllib.loads(cfg_file.read_text(encoding="utf-8"))
        manifest = json.loads(man_file.read_text(encoding="utf-8")) if man_file.is_file() else {}
    except (OSError, ValueError) as exc:
        raise MemsimError(f"--mlflow: {run_dir}: cannot read the run folder: {exc}") from None
    return config, manifest


def _read_summary(path: Path) -> pd.DataFrame:
    """A run folder's ``summary.csv``, refused in one line (naming the file,
    the column and the row) when it is not one, as ``memsim report`` refuses
    it (:func:`memsim.reporting.rundir.read_run_file`)."""
    try:
        return read_run_file(path)
    except RunFolderError as exc:
        raise MemsimError(f"--mlflow: {exc}") from None


def _summary_metrics(summary: pd.DataFrame) -> dict[str, float]:
    several = summary["budget"].nunique() > 1 if "budget" in summary else False
    out = {}
    for row in summary.itertuples(index=False):
        value = float(row.mean)
        if not math.isfinite(value):
            continue  # MLflow stores NaN, but a metric that is not there reads better
        parts = [row.metric, row.policy] + ([row.budget] if several else [])
        out[_key(*parts)] = value
    return out


def _one_line(mlflow, exc: Exception, what: str) -> MemsimError:
    uri = mlflow.get_tracking_uri()
    return MemsimError(f"--mlflow: cannot export {what} to {uri}: "
                       f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}")


def log_run(run_dir: str | Path, *, tracking_uri: str | None = None,
            experiment: str | None = None) -> str:
    """Export a completed run folder to MLflow; returns the MLflow run id.

    Parameters
    ----------
    run_dir : path
        A run folder of ``memsim run`` (``config.toml``, ``summary.csv``...).
    tracking_uri : str, optional
        Default: MLflow's (``MLFLOW_TRACKING_URI``).
    experiment : str, optional
        The MLflow experiment; default the memsim experiment's name.
    """
    mlflow = _mlflow()
    run_dir = Path(run_dir)
    config, manifest = _read_run(run_dir)
    name = experiment or (config.get("experiment") or {}).get("name") or run_dir.name
    _start(mlflow, tracking_uri, str(name))
    try:
        return _log_run(mlflow, run_dir, config, manifest)
    except (OSError, mlflow.exceptions.MlflowException) as exc:
        raise _one_line(mlflow, exc, str(run_dir)) from None


def _log_run(mlflow, run_dir: Path, config: dict, manifest: dict) -> str:
    # read before the run starts: a damaged folder leaves no half-logged run
    summary_file = run_dir / "summary.csv"
    metrics = _summary_metrics(_read_summary(summary_file)) if summary_file.is_file() else {}
    with mlflow.start_run(run_name=run_dir.name) as run:
        _log_params(mlflow, flatten_config(config))
        if metrics:
            mlflow.log_metrics(metrics)
        mlflow.set_tags({"memsim.config_hash": str(manifest.get("config_hash", "")),
                         "memsim.status": str(manifest.get("status", "")),
                         "memsim.run_dir": str(run_dir.resolve())})
        for f in _RUN_FILES:
            if (run_dir / f).is_file():
                mlflow.log_artifact(str(run_dir / f))
        return run.info.run_id


def _log_trial(mlflow, trial, labels: list[str], directions: list[str]) -> None:
    """One nested run per trial, laid out as Optuna's ``MLflowCallback`` lays
    it out (run name = trial number; params; values under the objective
    labels; tags ``number``, ``state``, ``direction``, the datetimes and
    the user attributes), with names made valid for MLflow."""
    with mlflow.start_run(run_name=str(trial.number), nested=True):
        if trial.values is not None:
            mlflow.log_metrics({lab: float(v) for lab, v in zip(labels, trial.values)
                                if v is not None and math.isfinite(float(v))})
        # as TOML text, as a run's params are: a logged value pastes back into a --set
        _log_params(mlflow, flatten_config(trial.params))
        tags = {"number": str(trial.number), "state": trial.state.name,
                "direction": directions[0] if len(directions) == 1 else str(directions),
                "datetime_start": str(trial.datetime_start),
                "datetime_complete": str(trial.datetime_complete)}
        tags.update({_key(k): str(v)[:5000] for k, v in trial.user_attrs.items()})
        mlflow.set_tags(tags)


def log_sweep(result: Any, *, tracking_uri: str | None = None,
              experiment: str | None = None) -> str:
    """Export a finished sweep (a :class:`memsim.sweep.SweepResult`) to MLflow:
    a parent run and one nested run per finished trial. Returns the parent
    run's id."""
    mlflow = _mlflow()
    run_dir = None if result.path is None else Path(result.path)
    config = _read_run(run_dir)[0] if run_dir is not None else {}
    name = experiment or result.experiment.name
    _start(mlflow, tracking_uri, str(name))
    try:
        return _log_sweep(mlflow, result, run_dir, config)
    except (OSError, mlflow.exceptions.MlflowException) as exc:
        raise _one_line(mlflow, exc, f"the sweep {result.study_name}") from None


def _log_sweep(mlflow, result: Any, run_dir: Path | None, config: dict) -> str:
    study, spec = result.study, result.spec
    labels = [_key(lab) for lab in spec.labels]
    directions = [d.name.lower() for d in study.directions]
    with mlflow.start_run(run_name=run_dir.name if run_dir is not None else result.study_name) \
            as parent:
        _log_params(mlflow, flatten_config(config))
        mlflow.log_metrics({_key("best", k): float(v) for k, v in result.best_values.items()
                            if isinstance(v, (int, float)) and math.isfinite(v)})
        mlflow.set_tags({"memsim.study": result.study_name, "memsim.kind": "sweep",
                         "memsim.best_trial": str(result.best_number)})
        if run_dir is not None:
            for f in _RUN_FILES:
                if (run_dir / f).is_file():
                    mlflow.log_artifact(str(run_dir / f))
            if (run_dir / "sweep").is_dir():
                mlflow.log_artifacts(str(run_dir / "sweep"), artifact_path="sweep")
        for trial in study.get_trials(deepcopy=False):
            if trial.state.is_finished():
                _log_trial(mlflow, trial, labels, directions)
        return parent.info.run_id
