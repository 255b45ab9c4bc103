"""Optuna sweeps: any dotted parameter, one or several objectives, resumable,
parallel on one machine and distributed through PostgreSQL.

The ``[sweep]`` table
---------------------

::

    [sweep]
    trials = 50                 # COMPLETE trials the study must end with
    sampler = "tpe"             # tpe | random | qmc | cmaes | nsga2 | grid
    seed = 1                    # default: the experiment's seed
    objectives = [{ metric = "utility", direction = "maximize" }]
    #   optional per objective: policy = "NAME" (default: the first policy),
    #   budget = N (required when experiment.budgets lists several)

    [sweep.params]
    "policies.hivemind.decay.task_half_life_days" = {
        type = "float", low = 7, high = 720, log = true }
    "policies.hivemind.packer" = {
        type = "categorical", choices = ["greedy", "greedy-swap", "exact"] }
    "policies.hivemind.candidates" = { type = "int", low = 10, high = 200, step = 10 }

    [sweep.robustness]          # optional
    replicates = 3              # fresh replicate seeds (default: experiment.replicates)
    variants = [{ name = "noisy", "workload.retriever_noise" = 1.2 }]

Every key is validated against the experiment before anything runs: a key
must name a value of the resolved experiment (``memsim sweep`` refuses a key
that would silently add a new policy), its range must build a valid
experiment at both ends, and the experiment's own value must lie in the
range, because it is trial 0.

What a trial is
---------------
A trial applies its parameters to the experiment with
:meth:`~memsim.config.Experiment.with_overrides` (shallower keys first, so a
categorical that switches a component's kind is applied before a parameter of
that component) and simulates it with
:func:`~memsim.runner.simulate_experiment`, the code path of ``memsim run``, on
the experiment's replicate seeds ``0 .. R-1``: every trial sees the identical
streams (common random numbers), so trials differ only by their parameters.
Only the policies (and budgets) the objectives name are simulated; arms never
interact (each has its own state and its own named random stream), so this
changes nothing but the time taken. Streams are generated once per process and
reused across trials; a swept ``workload.*`` key regenerates them (from the
same seeds) for each trial.

The objective of a trial is the mean over replicates of each replicate's mean
of the metric over its queries (NaN values left out), exactly the ``mean`` of
``summary.csv`` (:func:`memsim.stats.summarise`). The per-replicate values are
kept as trial user attributes ``<objective>_rep<r>``. The experiment's own
values are enqueued as trial 0 (user attribute ``origin = "experiment"``).

Storage, resuming and the run folder
------------------------------------
The default storage is an Optuna journal file inside the run folder
(``sweep/journal.log``, :class:`optuna.storages.JournalStorage` over
:class:`optuna.storages.journal.JournalFileBackend`), which several processes
on one machine can share. ``--storage`` also takes Optuna's RDB URLs
(``sqlite:///file.db``, ``postgresql://user:pw@host/db``) or
``journal:PATH``.

The run folder is ``<out>/<UTC time>_<name>_<hash8>/`` where ``hash8`` hashes
the resolved experiment and search space (without ``sweep.trials``, which may
grow) and, when given, the study name. ``sweep/sweep.json``, written once,
records the study name, that identity and the storage. Running the same
command again finds the newest folder under ``--out`` with the same identity
and continues its study, in its storage, until it has ``trials`` COMPLETE
trials (``--trials`` may be raised to extend a finished sweep);
``--resume DIR`` names the folder explicitly (the experiment then defaults to
the folder's ``config.toml``). The study name is ``--study NAME`` or
``<name>-<hash8>``. Changing the experiment or the search space starts a new
folder and a new study.

A trial whose process died is marked FAIL and its parameters are enqueued
again (Optuna's :class:`~optuna.storages.RetryHeartbeatStaleTrialCallback`),
so it is never lost, and a worker only starts a trial while fewer than
``trials`` trials are COMPLETE or running, so none is counted twice. A dead
trial is found two ways: every trial records its worker (``host:pid``), and
any worker on the same host fails the RUNNING trials of processes that no
longer exist; on RDB storages Optuna's heartbeat (every
:data:`HEARTBEAT_S` s, stale after :data:`GRACE_S` s) also catches workers on
other machines.

Parallel and distributed
------------------------
``--workers N`` starts N worker processes (spawned) that share the storage,
each running ``study.optimize`` one trial at a time and stopping when the
study has ``trials`` COMPLETE trials. The same command on another machine,
with the same ``--storage postgresql://...`` and ``--study``, joins the
study; each machine writes its own run folder and, once the study is
complete, the same outputs.

Reproducibility: with one worker on a fresh study, the sampler is seeded
with ``seed`` and the whole sweep (the parameters sampled, the values, the
outputs) is reproducible. With several workers, or on resume, the order in
which trials finish depends on timing, so the set of parameters sampled is
not reproducible (each extra worker seeds its sampler from ``seed``, its host
and its pid so that workers do not propose the same points); what still
holds is that each trial's value is a deterministic function of its
parameters (same seeds, same code path), so any trial can be re-run exactly
from ``best.toml`` or its row of ``trials.csv``.

Outputs (``<run>/sweep/``)
--------------------------
``trials.csv`` (one row per trial: ``number``, ``state``, ``values_<objective>``,
one column per parameter named by its dotted key, ``origin``, ``worker``,
``retry_of``, ``seconds``, ``<objective>_rep<r>``), ``best.toml`` (the resolved
experiment with the best parameters applied, runnable with ``memsim run``;
with several objectives the Pareto member best on the first objective, and
``pareto/trial_<n>.toml`` for every Pareto member), ``robustness.csv`` (see
:func:`robustness_check`), and Optuna's matplotlib plots as PNG
(``history``, ``importance``, ``slice``, ``pareto_front``). The study can be
browsed with optuna-dashboard::

    optuna-dashboard results/<run>/sweep/journal.log     # the default journal
    optuna-dashboard sqlite:///sweep.db
    optuna-dashboard postgresql://memsim:memsim@127.0.0.1:5432/memsim
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import multiprocessing
import os
import re
import socket
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from .config import (Experiment, config_hash, did_you_mean, dumps_toml, experiment_from_dict,
                     load_experiment, parse_override)
from .errors import ConfigError, MemsimError
from .metrics import HIGHER_IS_BETTER, METRIC_COLUMNS
from .params import check_keys
from .runner import _Manifest, load_stream_for, simulate_experiment, write_atomic

__all__ = [
    "SAMPLERS",
    "OBJECTIVE_METRICS",
    "ParamSpec",
    "Objective",
    "RobustnessSpec",
    "SweepSpec",
    "TrialEvaluator",
    "SweepResult",
    "run_sweep",
    "open_storage",
    "trials_table",
    "robustness_check",
    "HEARTBEAT_S",
    "GRACE_S",
]

#: Samplers by their ``sampler = "..."`` name.
SAMPLERS = ("tpe", "random", "qmc", "cmaes", "nsga2", "grid")
#: Per-run metrics an objective may also name (from ``arms``, one value per replicate).
RUN_OBJECTIVES = ("recall_gini",)
#: Every metric an objective may name.
OBJECTIVE_METRICS = tuple(METRIC_COLUMNS) + RUN_OBJECTIVES
#: RDB heartbeat period and the silence after which a trial counts as dead (seconds).
HEARTBEAT_S = 5
GRACE_S = 30
#: Seconds a worker waits before re-checking the study when the last trials
#: are running elsewhere.
POLL_S = 0.5
#: A RUNNING trial that has not even recorded its worker after this long is dead.
UNCLAIMED_S = 120.0

_SWEEP_KEYS = ("trials", "sampler", "seed", "objectives", "params", "robustness")
_PARAM_TYPES = ("float", "int", "categorical")
_PARAM_FIELDS = {
    "float": ("type", "low", "high", "log", "step"),
    "int": ("type", "low", "high", "log", "step"),
    "categorical": ("type", "choices"),
}
_OBJECTIVE_FIELDS = ("metric", "direction", "policy", "budget")
_ROBUSTNESS_FIELDS = ("replicates", "variants")
#: Experiment keys a trial must not change: they define the replicate seeds
#: that make trials comparable, or the identity of the run.
_FROZEN_KEYS = ("experiment.seed", "experiment.replicates", "experiment.name",
                "experiment.budgets", "experiment.baseline", "experiment.description")


# --------------------------------------------------------------------------
# The search space and objectives
# --------------------------------------------------------------------------


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True)
class ParamSpec:
    """One swept parameter: a dotted key and its distribution.

    Parameters
    ----------
    key : str
        Dotted key, used as the Optuna parameter name and the trials column.
    type : {"float", "int", "categorical"}
    low, high : float or int
        Range (both ends included), ``low < high``.
    log : bool
        Sample on a log scale (``low > 0``; no ``step``).
    step : float or int, optional
        Grid spacing (``high - low`` must be a multiple of it).
    choices : tuple
        Values of a categorical (strings, numbers or booleans).
    """

    key: str
    type: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple = ()

    @classmethod
    def from_config(cls, key: str, table: Any, where: str) -> ParamSpec:
        w = f'{where}."{key}"'
        if not isinstance(table, dict):
            raise ConfigError(f"{w}: expected a table like {{ type = \"float\", low = 1, "
                              f"high = 10 }}, got {table!r}")
        kind = table.get("type")
        if kind is None:
            raise ConfigError(f"{w}.type: missing; one of {', '.join(_PARAM_TYPES)}")
        if kind not in _PARAM_TYPES:
            raise ConfigError(f"{w}.type: unknown type {kind!r}{did_you_mean(kind, _PARAM_TYPES)};"
                              f" allowed: {', '.join(_PARAM_TYPES)}")
        for k in table:
            if k not in _PARAM_FIELDS[kind]:
                raise ConfigError(f"{w}.{k}: unknown key for a {kind} parameter"
                                  f"{did_you_mean(k, _PARAM_FIELDS[kind])}; allowed: "
                                  f"{', '.join(_PARAM_FIELDS[kind])}")
        if kind == "categorical":
            choices = table.get("choices")
            if not isinstance(choices, list) or not choices:
                raise ConfigError(f"{w}.choices: expected a non-empty list of values")
            for c in choices:
                if not isinstance(c, (str, bool, int, float)) or (
                        isinstance(c, float) and not math.isfinite(c)):
                    raise ConfigError(f"{w}.choices: {c!r} is not a string, number or boolean")
            if len({json.dumps(c) for c in choices}) != len(choices):
                raise ConfigError(f"{w}.choices: values must be distinct, got {choices!r}")
            return cls(key=key, type=kind, choices=tuple(choices))
        for end in ("low", "high"):
            if end not in table:
                raise ConfigError(f"{w}.{end}: missing")
            v = table[end]
            if not _is_number(v) or (kind == "int" and not isinstance(v, int)):
                what = "an integer" if kind == "int" else "a number"
                raise ConfigError(f"{w}.{end}: expected {what}, got {v!r}")
        low, high = table["low"], table["high"]
        if low >= high:
            raise ConfigError(f"{w}: low ({low!r}) must be < high ({high!r})")
        log = table.get("log", False)
        if not isinstance(log, bool):
            raise ConfigError(f"{w}.log: expected true or false, got {log!r}")
        step = table.get("step")
        if step is not None:
            if not _is_number(step) or step <= 0 or (kind == "int" and not isinstance(step, int)):
                what = "positive integer" if kind == "int" else "positive number"
                raise ConfigError(f"{w}.step: expected a {what}, got {step!r}")
            if log:
                raise ConfigError(f"{w}: a log-scale parameter cannot have a step")
            n = (high - low) / step
            if abs(n - round(n)) > 1e-9 * max(1.0, abs(n)):
                raise ConfigError(f"{w}.step: high - low ({high - low!r}) is not a multiple of "
                                  f"step ({step!r})")
        if log and low <= 0:
            raise ConfigError(f"{w}.low: a log-scale range needs low > 0, got {low!r}")
        if kind == "float":
            low, high = float(low), float(high)
            step = None if step is None else float(step)
        return cls(key=key, type=kind, low=low, high=high, log=log, step=step)

    def to_config(self) -> dict:
        if self.type == "categorical":
            return {"type": "categorical", "choices": list(self.choices)}
        out: dict[str, Any] = {"type": self.type, "low": self.low, "high": self.high}
        if self.log:
            out["log"] = True
        if self.step is not None:
            out["step"] = self.step
        return out

    def suggest(self, trial) -> Any:
        """Ask an Optuna trial for this parameter."""
        if self.type == "categorical":
            return trial.suggest_categorical(self.key, list(self.choices))
        if self.type == "int":
            return trial.suggest_int(self.key, self.low, self.high, step=self.step or 1,
                                     log=self.log)
        return trial.suggest_float(self.key, self.low, self.high, step=self.step, log=self.log)

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is a point of this distribution."""
        if self.type == "categorical":
            return any(type(value) is type(c) and value == c for c in self.choices) or (
                _is_number(value) and any(_is_number(c) and value == c for c in self.choices))
        if not _is_number(value) or (self.type == "int" and not float(value).is_integer()):
            return False
        if not (self.low - 1e-12 * abs(self.low) <= value <= self.high + 1e-12 * abs(self.high)):
            return False
        if self.step is not None:
            n = (value - self.low) / self.step
            return abs(n - round(n)) <= 1e-9 * max(1.0, abs(n))
        return True

    def grid(self) -> list | None:
        """Every point of the distribution, or None when it is continuous."""
        if self.type == "categorical":
            return list(self.choices)
        if self.type == "int":
            return list(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        if self.step is None:
            return None
        n = int(round((self.high - self.low) / self.step))
        return [float(self.low + i * self.step) for i in range(n + 1)]

    def probe_points(self) -> list:
        """Low, middle and high (every choice of a categorical): what the audit
        evaluates and what validation builds."""
        if self.type == "categorical":
            return list(self.choices)
        if self.log:
            mid = math.sqrt(self.low * self.high)
        else:
            mid = (self.low + self.high) / 2
        if self.step is not None:
            mid = self.low + round((mid - self.low) / self.step) * self.step
        if self.type == "int":
            mid = int(round(mid))
            pts = [int(self.low), mid, int(self.high)]
        else:
            pts = [float(self.low), float(mid), float(self.high)]
        return list(dict.fromkeys(pts))


@dataclass(frozen=True)
class Objective:
    """One objective: a metric of one policy (at one budget), and a direction.

    ``label`` names it in columns: the metric, plus ``@policy`` when the
    experiment has several policies, plus ``@budget`` when it runs several
    budgets (so that a label depends on the resolved experiment only).
    """

    metric: str
    direction: str
    policy: str
    budget: int | None = None
    show_policy: bool = False
    show_budget: bool = False

    @property
    def label(self) -> str:
        lab = self.metric
        if self.show_policy:
            lab += f"@{self.policy}"
        if self.show_budget:
            lab += f"@{self.budget}"
        return lab

    def to_config(self) -> dict:
        out: dict[str, Any] = {"metric": self.metric, "direction": self.direction,
                               "policy": self.policy}
        if self.budget is not None:
            out["budget"] = self.budget
        return out


@dataclass(frozen=True)
class RobustnessSpec:
    """``[sweep.robustness]``: fresh replicate seeds and workload variants.

    Parameters
    ----------
    replicates : int
        Fresh replicates ``R .. R + replicates - 1`` (R = the experiment's
        replicates; never used during the sweep). 0 evaluates the variants on
        the sweep's own seeds and skips the fresh-seed check.
    variants : tuple of (name, overrides)
        Each variant is a set of dotted-key overrides (usually ``workload.*``).
    """

    replicates: int
    variants: tuple = ()

    def to_config(self) -> dict:
        vs = []
        for name, ov in self.variants:
            d = {"name": name}
            d.update(ov)
            vs.append(d)
        return {"replicates": self.replicates, "variants": vs}


def _flatten(table: dict, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (a TOML inline table written with
    bare dotted keys arrives nested)."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


@dataclass(frozen=True)
class SweepSpec:
    """A validated ``[sweep]`` table (see the module docstring).

    Build it with :meth:`from_config`; :meth:`check_against` then checks every
    key against an experiment.
    """

    params: tuple[ParamSpec, ...]
    objectives: tuple[Objective, ...]
    trials: int = 50
    sampler: str = "tpe"
    seed: int = 0
    robustness: RobustnessSpec = field(default_factory=lambda: RobustnessSpec(0))

    @property
    def keys(self) -> list[str]:
        return [p.key for p in self.params]

    @property
    def labels(self) -> list[str]:
        return [o.label for o in self.objectives]

    @property
    def directions(self) -> list[str]:
        return [o.direction for o in self.objectives]

    @property
    def multi(self) -> bool:
        return len(self.objectives) > 1

    @classmethod
    def from_config(cls, table: Any, exp: Experiment | None = None, where: str = "sweep",
                    ) -> SweepSpec:
        """Parse and validate a ``[sweep]`` table.

        Parameters
        ----------
        table : dict
            The raw table.
        exp : Experiment, optional
            When given, fill defaults from it (seed, policy, replicates) and
            run :meth:`check_against`.
        where : str
            Prefix of error messages.

        Raises
        ------
        ConfigError
            One line naming the dotted key at fault.
        """
        if table is None:
            raise ConfigError(f"{where}: the experiment has no [sweep] table; add one with "
                              "[sweep.params] and objectives (see memsim.sweep)")
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: expected a table, got {table!r}")
        check_keys(table, _SWEEP_KEYS, where)
        trials = table.get("trials", 50)
        if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
            raise ConfigError(f"{where}.trials: expected an integer >= 1, got {trials!r}")
        sampler = table.get("sampler", "tpe")
        if sampler not in SAMPLERS:
            raise ConfigError(f"{where}.sampler: unknown sampler {sampler!r}"
                              f"{did_you_mean(sampler, SAMPLERS)}; allowed: {', '.join(SAMPLERS)}")
        seed = table.get("seed", exp.seed if exp is not None else 0)
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
            raise ConfigError(f"{where}.seed: expected an integer in [0, 2**32), got {seed!r}")

        params_t = table.get("params")
        if not isinstance(params_t, dict) or not params_t:
            raise ConfigError(f"{where}.params: expected a table of \"dotted.key\" = "
                              "{ type = ..., ... } with at least one parameter")
        params = tuple(ParamSpec.from_config(k, v, f"{where}.params")
                       for k, v in _params_items(params_t))

        objectives = _objectives(table.get("objectives"), exp, f"{where}.objectives")
        if len(objectives) > 1 and sampler == "cmaes":
            raise ConfigError(f"{where}.sampler: 'cmaes' optimises one objective; use 'nsga2' "
                              "or 'tpe' for several")
        if sampler == "grid":
            for p in params:
                if p.grid() is None:
                    raise ConfigError(f'{where}.params."{p.key}": the grid sampler needs a '
                                      "'step' for a float parameter")
            size = int(np.prod([len(p.grid()) for p in params]))
            if "trials" not in table:
                trials = size  # the whole grid
            elif trials > size:
                raise ConfigError(f"{where}.trials: the grid has {size} points; ask for at most "
                                  f"{size} trials")

        rob = table.get("robustness", {})
        if not isinstance(rob, dict):
            raise ConfigError(f"{where}.robustness: expected a table, got {rob!r}")
        check_keys(rob, _ROBUSTNESS_FIELDS, f"{where}.robustness")
        default_reps = exp.settings.replicates if exp is not None else 1
        reps = rob.get("replicates", default_reps)
        if not isinstance(reps, int) or isinstance(reps, bool) or not 0 <= reps <= 10_000:
            raise ConfigError(f"{where}.robustness.replicates: expected an integer >= 0, "
                              f"got {reps!r}")
        variants_t = rob.get("variants", [])
        if not isinstance(variants_t, list):
            raise ConfigError(f"{where}.robustness.variants: expected a list of tables of "
                              "dotted-key overrides")
        variants = []
        for i, v in enumerate(variants_t):
            vw = f"{where}.robustness.variants[{i}]"
            if not isinstance(v, dict) or not v:
                raise ConfigError(f"{vw}: expected a non-empty table of dotted-key overrides, "
                                  f"got {v!r}")
            v = dict(v)
            name = v.pop("name", None)
            if name is not None and not isinstance(name, str):
                raise ConfigError(f"{vw}.name: expected a string, got {name!r}")
            flat = _flatten(v)
            if not flat:
                raise ConfigError(f"{vw}: names no override")
            name = name or ", ".join(f"{k}={_fmt(x)}" for k, x in flat.items())
            variants.append((name, flat))
        if len({n for n, _ in variants}) != len(variants):
            raise ConfigError(f"{where}.robustness.variants: two variants have the same name")
        spec = cls(params=params, objectives=objectives, trials=trials, sampler=sampler,
                   seed=seed, robustness=RobustnessSpec(reps, tuple(variants)))
        if exp is not None:
            spec.check_against(exp, where)
        return spec

    def to_config(self) -> dict:
        """The resolved table (every default filled)."""
        return {
            "trials": self.trials,
            "sampler": self.sampler,
            "seed": self.seed,
            "objectives": [o.to_config() for o in self.objectives],
            "params": {p.key: p.to_config() for p in self.params},
            "robustness": self.robustness.to_config(),
        }

    def with_trials(self, trials: int) -> SweepSpec:
        if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
            raise ConfigError(f"--trials: expected an integer >= 1, got {trials!r}")
        if self.sampler == "grid" and trials > _grid_size(self):
            raise ConfigError(f"--trials: the grid has {_grid_size(self)} points; ask for at "
                              "most that many trials")
        return dataclasses.replace(self, trials=trials)

    # -- checks against the experiment ---------------------------------------
    def check_against(self, exp: Experiment, where: str = "sweep") -> None:
        """Check that every key names a value of ``exp`` and every range builds.

        Each end of each range (and each choice) is applied alone, the other
        parameters at the experiment's values, and the experiment is built;
        the experiment's own values must lie in the search space (trial 0).
        """
        if exp.grid:
            raise ConfigError(f"{where}: an experiment with a [grid] cannot be swept; remove the "
                              "[grid] table (a grid is a sweep with sampler = \"grid\")")
        resolved = exp.to_config()
        resolved.pop("sweep", None)
        leaves = _leaf_keys(resolved)
        for p in self.params:
            w = f'{where}.params."{p.key}"'
            if p.key.split(".")[0] in ("sweep", "grid"):
                raise ConfigError(f"{w}: cannot sweep the sweep or grid settings")
            if p.key in _FROZEN_KEYS:
                raise ConfigError(f"{w}: cannot be swept: every trial must keep the experiment's "
                                  "seed, replicates and identity")
            found, own = _lookup(resolved, p.key)
            if not found:
                raise ConfigError(f"{w}: names nothing in the resolved experiment"
                                  f"{did_you_mean(p.key, leaves)}; sweep a key that "
                                  "`memsim run --set` accepts and that the experiment has")
            if isinstance(own, dict) and p.type != "categorical":
                raise ConfigError(f"{w}: is a component table; sweep one of its parameters, or "
                                  "its kind with a categorical")
            for value in p.probe_points():
                try:
                    apply_params(exp, {p.key: value})
                except ConfigError as exc:
                    raise ConfigError(f"{w}: the value {_fmt(value)} does not give a valid "
                                      f"experiment: {exc}") from None
            own_v = own.get("kind") if isinstance(own, dict) else own
            if not p.contains(own_v):
                raise ConfigError(
                    f"{w}: the experiment's own value {_fmt(own_v)} is outside the search "
                    f"space {_describe(p)}; trial 0 runs the experiment as it is, so widen the "
                    "range or change the experiment")
        for i, (_name, ov) in enumerate(self.robustness.variants):
            vw = f"{where}.robustness.variants[{i}]"
            for key in ov:
                if not _lookup(resolved, key)[0]:
                    raise ConfigError(f"{vw}.{key}: names nothing in the resolved experiment"
                                      f"{did_you_mean(key, leaves)}")
                if key in self.keys:
                    raise ConfigError(f"{vw}.{key}: is a swept parameter; a variant changes "
                                      "what the parameters are tested on, not the parameters")
            try:
                exp.with_overrides(ov)
            except ConfigError as exc:
                raise ConfigError(f"{vw}: {exc}") from None

    def own_params(self, exp: Experiment) -> dict[str, Any]:
        """The experiment's own value of every swept key (trial 0)."""
        resolved = exp.to_config()
        out = {}
        for p in self.params:
            _, v = _lookup(resolved, p.key)
            v = v.get("kind") if isinstance(v, dict) else v
            if p.type == "float" and _is_number(v):
                v = float(v)
            out[p.key] = v
        return out


def _params_items(table: dict) -> list[tuple[str, Any]]:
    """Parameter entries; a key written unquoted in TOML (``a.b = {...}``)
    arrives as nested tables, so descend until a table with ``type``."""
    out = []
    for k, v in table.items():
        if isinstance(v, dict) and "type" not in v and v and all(
                isinstance(x, dict) for x in v.values()):
            out.extend((f"{k}.{kk}", vv) for kk, vv in _params_items(v))
        else:
            out.append((k, v))
    return out


def _objectives(raw: Any, exp: Experiment | None, where: str) -> tuple[Objective, ...]:
    if raw is None:
        raw = [{"metric": "utility"}]
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: expected a list of {{ metric = \"...\", direction = "
                          "\"maximize\" }} tables")
    policies = list(exp.policies) if exp is not None else []
    budgets = list(exp.settings.budgets) if exp is not None else []
    out = []
    for i, o in enumerate(raw):
        w = f"{where}[{i}]"
        if isinstance(o, str):
            o = {"metric": o}
        if not isinstance(o, dict):
            raise ConfigError(f"{w}: expected a table like {{ metric = \"utility\" }}, got {o!r}")
        check_keys(o, _OBJECTIVE_FIELDS, w)
        metric = o.get("metric")
        if metric not in OBJECTIVE_METRICS:
            raise ConfigError(f"{w}.metric: unknown metric {metric!r}"
                              f"{did_you_mean(metric, OBJECTIVE_METRICS)}; allowed: "
                              f"{', '.join(OBJECTIVE_METRICS)}")
        default_dir = "maximize" if HIGHER_IS_BETTER.get(metric, False) else "minimize"
        direction = o.get("direction", default_dir)
        if direction not in ("maximize", "minimize"):
            raise ConfigError(f"{w}.direction: expected 'maximize' or 'minimize', got "
                              f"{direction!r}")
        policy = o.get("policy", policies[0] if policies else "")
        if not isinstance(policy, str):
            raise ConfigError(f"{w}.policy: expected a policy name, got {policy!r}")
        if exp is not None and policy not in exp.policies:
            raise ConfigError(f"{w}.policy: {policy!r} is not a policy of this experiment"
                              f"{did_you_mean(policy, policies)}; policies: {', '.join(policies)}")
        budget = o.get("budget")
        if budget is not None:
            if not isinstance(budget, int) or isinstance(budget, bool):
                raise ConfigError(f"{w}.budget: expected an integer, got {budget!r}")
            if exp is not None and not budgets:
                raise ConfigError(f"{w}.budget: the experiment has no experiment.budgets; its "
                                  "budget is experiment.budget_tokens (sweep that key instead)")
            if exp is not None and budget not in budgets:
                raise ConfigError(f"{w}.budget: {budget} is not one of experiment.budgets "
                                  f"{budgets}")
        elif len(budgets) > 1:
            raise ConfigError(f"{w}.budget: the experiment runs budgets {budgets}; say which "
                              "one this objective uses")
        elif len(budgets) == 1:
            budget = budgets[0]
        # a budget is named in the label only when the experiment has several
        out.append(Objective(metric, direction, policy, budget,
                             show_policy=len(policies) > 1, show_budget=len(budgets) > 1))
    labels = [o.label for o in out]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"{where}: two objectives measure the same metric of the same policy")
    return tuple(out)


def _leaf_keys(table: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in table.items():
        key = f"{prefix}.{k}" if prefix else k
        out.append(key)
        if isinstance(v, dict):
            out.extend(_leaf_keys(v, key))
    return out


def _lookup(table: dict, key: str) -> tuple[bool, Any]:
    node: Any = table
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return json.dumps(v) if isinstance(v, str) else str(v)


def _describe(p: ParamSpec) -> str:
    if p.type == "categorical":
        return "{" + ", ".join(_fmt(c) for c in p.choices) + "}"
    s = f"[{_fmt(p.low)}, {_fmt(p.high)}]"
    if p.step is not None:
        s += f" step {_fmt(p.step)}"
    if p.log:
        s += " (log)"
    return s


def apply_params(exp: Experiment, params: dict[str, Any]) -> Experiment:
    """``exp`` with a trial's parameters applied through
    :meth:`Experiment.with_overrides`.

    Shallower keys go first, so that a categorical switching a component
    (``policies.p.decay = "half-life"``) is applied before a parameter of it
    (``policies.p.decay.half_life_days``). A categorical that names the kind
    the component already has leaves the component (and its parameters) as
    they are, so trial 0 is exactly the experiment.
    """
    if not params:
        return exp
    resolved = exp.to_config()
    ordered: dict[str, Any] = {}
    for key in sorted(params, key=lambda k: k.count(".")):
        value = params[key]
        found, cur = _lookup(resolved, key)
        if found and isinstance(cur, dict) and cur.get("kind") == value:
            continue
        ordered[key] = value
    return exp.with_overrides(ordered) if ordered else exp


# --------------------------------------------------------------------------
# Evaluating a trial
# --------------------------------------------------------------------------


class TrialEvaluator:
    """Evaluates parameter sets on fixed replicate seeds (common random numbers).

    Streams are generated once per (workload, seed, replicate) and kept for
    the life of the evaluator, so that trials only pay for the simulation.

    Parameters
    ----------
    exp : Experiment
        The experiment (its [sweep] table is not read; pass ``spec``).
    spec : SweepSpec
    """

    #: streams kept per evaluator (a swept workload key would otherwise grow it)
    MAX_STREAMS = 64

    def __init__(self, exp: Experiment, spec: SweepSpec):
        self.exp = exp
        self.spec = spec
        self._streams: dict[tuple, Any] = {}
        self.policies = list(dict.fromkeys(o.policy for o in spec.objectives))
        self.budgets = tuple(dict.fromkeys(o.budget for o in spec.objectives
                                           if o.budget is not None))

    def trial_experiment(self, params: dict[str, Any],
                         variant: dict[str, Any] | None = None) -> Experiment:
        """The experiment a trial simulates (all policies, as ``memsim run`` would)."""
        e = apply_params(self.exp, params)
        if variant:
            e = e.with_overrides(variant)
        return e

    def _restricted(self, e: Experiment) -> Experiment:
        # Arms do not interact (own state, own named random stream), so
        # simulating only the objectives' arms leaves their values unchanged.
        pols = {n: e.policies[n] for n in self.policies}
        settings = e.settings
        if self.budgets and settings.budgets:
            settings = dataclasses.replace(settings, budgets=self.budgets)
        return dataclasses.replace(e, policies=pols, settings=settings)

    def streams_for(self, e: Experiment, replicates: Sequence[int]) -> dict[int, Any]:
        wl = config_hash(e.workload.to_config())
        out = {}
        for r in replicates:
            key = (wl, e.seed, r)
            if key not in self._streams:
                if len(self._streams) >= self.MAX_STREAMS:
                    self._streams.pop(next(iter(self._streams)))
                self._streams[key] = load_stream_for(e, r)
            out[r] = self._streams[key]
        return out

    def evaluate(self, params: dict[str, Any], replicates: Sequence[int] | None = None,
                 variant: dict[str, Any] | None = None,
                 ) -> tuple[list[float], dict[str, dict[int, float]]]:
        """Objective values and per-replicate values of one parameter set.

        Returns
        -------
        values : list of float
            One per objective: mean over replicates of the per-replicate means.
        per_replicate : dict
            objective label -> {replicate: value}.
        """
        e = self.trial_experiment(params, variant)
        reps = list(range(e.settings.replicates)) if replicates is None else list(replicates)
        sim = self._restricted(e)
        frames = simulate_experiment(sim, replicates=reps, streams=self.streams_for(e, reps))
        q, arms = frames["queries"], frames["arms"]
        values, per = [], {}
        for o in self.spec.objectives:
            budget = o.budget if o.budget is not None else e.sim.budget_tokens
            if o.metric in RUN_OBJECTIVES:
                sub = arms[(arms["policy"] == o.policy) & (arms["budget"] == budget)]
            else:
                sub = q[(q["policy"] == o.policy) & (q["budget"] == budget)]
            by_rep = {}
            for r in reps:
                v = sub.loc[sub["replicate"] == r, o.metric].to_numpy(np.float64)
                v = v[np.isfinite(v)]
                by_rep[r] = float(v.mean()) if v.size else math.nan
            fin = [v for v in by_rep.values() if math.isfinite(v)]
            values.append(float(np.mean(fin)) if fin else math.nan)
            per[o.label] = by_rep
        return values, per


# --------------------------------------------------------------------------
# Storage
# --------------------------------------------------------------------------


@contextlib.contextmanager
def _quiet_optuna():
    """Optuna warns about experimental features memsim uses on purpose
    (heartbeats, retries, metric names, plots); keep them off the console."""
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", FutureWarning)
        warnings.filterwarnings("ignore", message=".*computes the importances of params to "
                                "achieve low `target` values")
        yield


def _mask_url(url: str) -> str:
    """A storage URL without its password (for files and messages)."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def _storage_spec(storage: str | None, run_dir: Path | None) -> str:
    """Normalise ``--storage`` to a string every worker can open."""
    if storage is None:
        if run_dir is None:
            return "memory"
        return f"journal:{(run_dir / 'sweep' / 'journal.log').resolve()}"
    if not isinstance(storage, str) or not storage:
        raise ConfigError(f"--storage: expected a URL, got {storage!r}")
    if storage.startswith("journal:"):
        path = Path(storage[len("journal:"):]).expanduser()
        return f"journal:{path.resolve()}"
    if re.match(r"^(sqlite|postgresql|postgres|mysql)(\+\w+)?://", storage):
        return storage
    if storage.endswith((".log", ".jsonl", ".journal")):
        return f"journal:{Path(storage).expanduser().resolve()}"
    raise ConfigError(f"--storage: {_mask_url(storage)!r} is not a storage URL; expected "
                      "sqlite:///FILE.db, postgresql://USER:PASSWORD@HOST/DB or journal:FILE.log")


def open_storage(spec: str):
    """Open an Optuna storage from a normalised ``--storage`` string.

    ``journal:PATH`` is a :class:`~optuna.storages.JournalStorage` over a
    :class:`~optuna.storages.journal.JournalFileBackend`; an RDB URL is an
    :class:`~optuna.storages.RDBStorage` with a heartbeat and a retry of
    stale trials; ``memory`` is an in-memory storage (one process).
    """
    import optuna
    from optuna.storages import RetryHeartbeatStaleTrialCallback

    if spec == "memory":
        return optuna.storages.InMemoryStorage()
    if spec.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend

        path = Path(spec[len("journal:"):])
        path.parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    if re.match(r"^postgres(ql)?://", spec):
        spec = _pg_driver(spec)
    kwargs: dict[str, Any] = {}
    if spec.startswith("sqlite"):
        # several local workers write to one file: wait for the lock, do not fail
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 120}}
    try:
        with _quiet_optuna():
            return optuna.storages.RDBStorage(
                spec, heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S,
                heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(), **kwargs)
    except ImportError as exc:
        raise ConfigError(f"--storage: {_mask_url(spec)}: a driver is missing: {exc}") from None
    except Exception as exc:  # sqlalchemy errors: bad URL, refused connection ...
        msg = " ".join(str(exc).split())[:300]
        raise ConfigError(f"--storage: cannot open {_mask_url(spec)}: "
                          f"{type(exc).__name__}: {_mask_url(msg)}") from None


def _pg_driver(url: str) -> str:
    """Name the installed PostgreSQL driver in a driver-less URL.

    SQLAlchemy 2.1 reads ``postgresql://`` as psycopg 3, while memsim's
    ``postgres`` extra installs psycopg2: use whichever is there.
    """
    import importlib.util

    rest = url.split("://", 1)[1]
    for module, dialect in (("psycopg", "psycopg"), ("psycopg2", "psycopg2")):
        if importlib.util.find_spec(module) is not None:
            return f"postgresql+{dialect}://{rest}"
    raise ConfigError("--storage: a PostgreSQL storage needs a driver: pip install "
                      "psycopg2-binary (memsim[postgres])")


def _make_sampler(spec: SweepSpec, seed: int):
    import optuna

    with _quiet_optuna():
        if spec.sampler == "tpe":
            return optuna.samplers.TPESampler(seed=seed)
        if spec.sampler == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if spec.sampler == "qmc":
            return optuna.samplers.QMCSampler(seed=seed, scramble=True)
        if spec.sampler == "nsga2":
            return optuna.samplers.NSGAIISampler(seed=seed)
        if spec.sampler == "cmaes":
            try:
                import cmaes  # noqa: F401
            except ImportError:
                raise ConfigError("sweep.sampler: 'cmaes' needs the cmaes package "
                                  "(pip install cmaes)") from None
            return optuna.samplers.CmaEsSampler(seed=seed)
        space = {p.key: p.grid() for p in spec.params}
        return optuna.samplers.GridSampler(space, seed=seed)


# --------------------------------------------------------------------------
# Workers
# --------------------------------------------------------------------------


def _proc_start(pid: int) -> str:
    """Start time of a process (Linux clock ticks), to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _host() -> str:
    return socket.gethostname()


def _worker_id() -> str:
    return f"{_host()}:{os.getpid()}"


def _alive(pid: int, start: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return not start or _proc_start(pid) in ("", start)


class _Surplus(Exception):
    """The study already has enough trials COMPLETE or under way."""


class _TrialFailed(MemsimError):
    """A trial's parameters gave an invalid experiment or a NaN objective."""


def _states():
    from optuna.trial import TrialState

    return TrialState


def _reap(study, now: float | None = None) -> int:
    """Fail the RUNNING trials of dead local workers and enqueue them again.

    Returns the number of trials reaped. Optuna's own heartbeat does the same
    for RDB storages (and for workers on other machines); the journal has no
    heartbeat, so the pid of the worker that claimed a trial is checked.
    """
    from optuna.exceptions import UpdateFinishedTrialError

    TrialState = _states()
    now = time.time() if now is None else now
    host = _host()
    reaped = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        ua = t.user_attrs
        dead = False
        reason = ""
        if ua.get("worker_trial") == t.number and isinstance(ua.get("worker"), str):
            whost, _, pid = ua["worker"].rpartition(":")
            if whost == host and pid.isdigit() and not _alive(int(pid), ua.get("worker_start",
                                                                                "")):
                dead, reason = True, f"worker {ua['worker']} died"
        elif t.datetime_start is not None:
            age = now - t.datetime_start.timestamp()
            if age > UNCLAIMED_S:
                dead, reason = True, "never claimed by a worker"
        if not dead:
            continue
        storage = study._storage
        try:
            storage.set_trial_user_attr(t._trial_id, "failed_reason", reason)
            if not storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL):
                continue
        except UpdateFinishedTrialError:
            continue  # another worker reaped it first
        failed = storage.get_trial(t._trial_id)
        _retry(study, failed)
        reaped += 1
    return reaped


_WORKER_ATTRS = ("worker", "worker_start", "worker_trial", "seconds", "failed_reason",
                 "error")


def _retry(study, failed) -> None:
    """Enqueue the parameters of a failed trial again (Optuna's retry callback),
    without the dead worker's claim."""
    from optuna.storages import RetryHeartbeatStaleTrialCallback

    clean = copy.deepcopy(failed)
    clean.user_attrs = {k: v for k, v in failed.user_attrs.items() if k not in _WORKER_ATTRS
                        and "_rep" not in k}
    with _quiet_optuna():
        RetryHeartbeatStaleTrialCallback()(study, clean)


class _TrialObjective:
    """The function Optuna calls: claim, check for surplus, evaluate, record."""

    def __init__(self, evaluator: TrialEvaluator, spec: SweepSpec):
        self.evaluator = evaluator
        self.spec = spec
        self.worker = _worker_id()
        self.start = _proc_start(os.getpid())
        #: number of the trial being evaluated (None between trials)
        self.current: int | None = None

    def __call__(self, trial):
        TrialState = _states()
        self.current = trial.number
        # claim first: a reaper must be able to tell whose trial this is
        trial.set_user_attr("worker", self.worker)
        trial.set_user_attr("worker_start", self.start)
        trial.set_user_attr("worker_trial", trial.number)
        # Surplus check by trial number: the set of trials numbered below this
        # one only grows, so two workers racing for the last slot agree on
        # which of them is surplus.
        ahead = sum(1 for t in trial.study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING))
            if t.number < trial.number)
        if ahead >= self.spec.trials:
            trial.set_user_attr("surplus", True)
            raise _Surplus()
        params = {p.key: p.suggest(trial) for p in self.spec.params}
        t0 = time.perf_counter()
        try:
            values, per = self.evaluator.evaluate(params)
        except MemsimError as exc:
            trial.set_user_attr("error", str(exc)[:500])
            raise _TrialFailed(str(exc)) from None
        trial.set_user_attr("seconds", round(time.perf_counter() - t0, 4))
        for label, reps in per.items():
            for r, v in reps.items():
                trial.set_user_attr(f"{label}_rep{r}", v)
        bad = [lab for lab, v in zip(self.spec.labels, values) if not math.isfinite(v)]
        if bad:
            msg = f"objective {bad[0]} is NaN for every replicate"
            trial.set_user_attr("error", msg)
            raise _TrialFailed(msg)
        return values[0] if len(values) == 1 else values


@dataclass
class _WorkerJob:
    """Everything a worker process needs (picklable for spawn)."""

    config: dict
    base_dir: str
    source_file: str
    storage: str
    study_name: str
    trials: int
    seed: int | None  # None: derive from the spec's seed, the host and the pid
    index: int = 0


def _worker_seed(spec_seed: int) -> int:
    ss = np.random.SeedSequence([spec_seed, int.from_bytes(_host().encode()[:8], "little"),
                                 os.getpid()])
    return int(ss.generate_state(1)[0])


def _work(job: _WorkerJob, exp: Experiment | None = None, spec: SweepSpec | None = None,
          storage=None, progress: Callable[[float], None] | None = None) -> int:
    """Run trials until the study has ``job.trials`` COMPLETE trials.

    Returns the number of trials this worker completed.
    """
    import optuna

    TrialState = _states()
    if exp is None:
        exp = experiment_from_dict(copy.deepcopy(job.config), base_dir=job.base_dir,
                                   source_file=job.source_file)
    if spec is None:
        spec = SweepSpec.from_config(exp.sweep, exp)
    spec = spec.with_trials(job.trials)
    storage = storage if storage is not None else open_storage(job.storage)
    seed = job.seed if job.seed is not None else _worker_seed(spec.seed)
    with _quiet_optuna():
        study = optuna.load_study(study_name=job.study_name, storage=storage,
                                  sampler=_make_sampler(spec, seed))
    objective = _TrialObjective(TrialEvaluator(exp, spec), spec)
    done = failures = 0
    last_error = ""
    while True:
        _reap(study)
        trials = study.get_trials(deepcopy=False)
        n_complete = sum(t.state == TrialState.COMPLETE for t in trials)
        if progress is not None:
            progress(min(1.0, n_complete / spec.trials))
        if n_complete >= spec.trials:
            return done
        n_running = sum(t.state == TrialState.RUNNING for t in trials)
        n_waiting = sum(t.state == TrialState.WAITING for t in trials)
        if n_complete + n_running >= spec.trials and not n_waiting:
            time.sleep(POLL_S)  # the last trials run elsewhere; wait for them or their death
            continue
        if spec.sampler == "grid" and _grid_exhausted(study, spec) and not n_waiting:
            raise ConfigError(f"sweep.trials: the grid has only {_grid_size(spec)} points and "
                              f"{n_complete} trials completed; ask for at most that many")
        objective.current = None
        try:
            with _quiet_optuna():
                study.optimize(objective, n_trials=1, catch=(_Surplus, _TrialFailed),
                               gc_after_trial=False)
        except KeyboardInterrupt:
            # Optuna marked the interrupted trial FAIL; give its parameters back
            if objective.current is not None:
                t = study.trials[objective.current]
                if t.state == TrialState.FAIL:
                    _retry(study, t)
            raise
        last = _last_trial_of(study, objective.worker)
        if last is None:
            continue
        if last.state == TrialState.COMPLETE:
            done += 1
        elif last.state == TrialState.FAIL and not last.user_attrs.get("surplus"):
            failures += 1
            last_error = last.user_attrs.get("error", "the trial failed")
            if failures > max(10, spec.trials):
                raise ConfigError(f"sweep: {failures} trials failed in this worker; the last "
                                  f"one: {last_error}")


def _last_trial_of(study, worker: str):
    mine = [t for t in study.get_trials(deepcopy=False)
            if t.user_attrs.get("worker") == worker and t.user_attrs.get("worker_trial")
            == t.number]
    return max(mine, key=lambda t: t.datetime_start or datetime.min) if mine else None


def _grid_size(spec: SweepSpec) -> int:
    return int(np.prod([len(p.grid()) for p in spec.params]))


def _grid_exhausted(study, spec: SweepSpec) -> bool:
    TrialState = _states()
    seen = {json.dumps([t.params.get(k) for k in spec.keys])
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,
                                                                TrialState.RUNNING))}
    return len(seen) >= _grid_size(spec)


def _worker_main(job: _WorkerJob) -> None:
    """Entry point of a spawned worker process."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        _work(job)
    except KeyboardInterrupt:
        sys.exit(130)
    except MemsimError as exc:
        print(f"memsim: sweep worker {job.index}: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except BaseException:
        traceback.print_exc()
        sys.exit(1)


# --------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------


def trials_table(study, spec: SweepSpec) -> pd.DataFrame:
    """One row per trial: number, state, ``values_<objective>``, one column per
    parameter (its dotted key), then the user attributes."""
    rows = []
    rep_cols: list[str] = []
    for t in study.get_trials(deepcopy=False):
        row: dict[str, Any] = {"number": t.number, "state": t.state.name}
        vals = t.values if t.values is not None else [math.nan] * len(spec.objectives)
        for lab, v in zip(spec.labels, vals):
            row[f"values_{lab}"] = v
        for k in spec.keys:
            row[k] = t.params.get(k)
        ua = t.user_attrs
        row["origin"] = ua.get("origin", "retry" if "failed_trial" in t.system_attrs
                               else "sampler")
        row["retry_of"] = t.system_attrs.get("failed_trial")
        row["worker"] = ua.get("worker")
        row["seconds"] = ua.get("seconds")
        row["datetime_start"] = t.datetime_start.isoformat() if t.datetime_start else None
        row["datetime_complete"] = (t.datetime_complete.isoformat() if t.datetime_complete
                                    else None)
        row["error"] = ua.get("error") or ua.get("failed_reason") or (
            "surplus" if ua.get("surplus") else None)
        for k, v in ua.items():
            if re.search(r"_rep\d+$", k):
                row[k] = v
                if k not in rep_cols:
                    rep_cols.append(k)
        rows.append(row)
    base = (["number", "state"] + [f"values_{lab}" for lab in spec.labels] + spec.keys
            + ["origin", "retry_of", "worker", "seconds", "datetime_start", "datetime_complete",
               "error"])
    df = pd.DataFrame(rows, columns=base + sorted(rep_cols, key=_rep_sort))
    if len(df):
        df["retry_of"] = df["retry_of"].astype("Int64")
    return df.sort_values("number").reset_index(drop=True)


def _rep_sort(col: str):
    m = re.match(r"^(.*)_rep(\d+)$", col)
    return (m.group(1), int(m.group(2))) if m else (col, 0)


def _best_trials(study, spec: SweepSpec) -> list:
    """The best COMPLETE trial (one objective) or the Pareto set, best first
    on the first objective."""
    TrialState = _states()
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not done:
        return []
    sign = [1.0 if d == "maximize" else -1.0 for d in spec.directions]
    if not spec.multi:
        # ties go to the lower trial number (trial 0, the experiment, first)
        return [max(done, key=lambda t: (sign[0] * t.values[0], -t.number))]
    pts = np.array([[s * v for s, v in zip(sign, t.values)] for t in done])
    front = []
    for i, p in enumerate(pts):
        dominated = np.any(np.all(pts >= p, axis=1) & np.any(pts > p, axis=1))
        if not dominated:
            front.append(done[i])
    front.sort(key=lambda t: (-sign[0] * t.values[0], t.number))
    return front


def robustness_check(evaluator: TrialEvaluator, spec: SweepSpec, candidates: list[dict],
                     ) -> pd.DataFrame:
    """Re-evaluate parameter sets on fresh seeds and on workload variants.

    Parameters
    ----------
    evaluator : TrialEvaluator
    spec : SweepSpec
    candidates : list of dict
        Each with ``number``, ``role`` (``best``, ``pareto`` or
        ``experiment``), ``params`` and ``values`` (the sweep's values).

    Returns
    -------
    DataFrame
        One row per (candidate, check): ``number, role, check, variant,
        replicates``, then per objective ``values_<objective>`` (mean over the
        check's replicates), ``change_<objective>`` (minus the sweep's value:
        a large drop on fresh seeds is overfitting to the seeds, on a variant
        overfitting to the workload) and ``per_replicate_<objective>`` (JSON).
        ``check`` is ``sweep`` (the trial's own values, replicates 0..R-1),
        ``fresh-seeds`` (replicates R..R+K-1, never used by the sweep) or
        ``variant``.
    """
    R = evaluator.exp.settings.replicates
    K = spec.robustness.replicates
    fresh = list(range(R, R + K))
    checks: list[tuple[str, str, dict | None, list[int]]] = []
    if fresh:
        checks.append(("fresh-seeds", "", None, fresh))
    for name, ov in spec.robustness.variants:
        checks.append(("variant", name, ov, fresh or list(range(R))))
    rows = []
    for c in candidates:
        base = {"number": c["number"], "role": c["role"]}
        row = dict(base, check="sweep", variant="", replicates=_reps_text(range(R)))
        for lab, v in zip(spec.labels, c["values"]):
            row[f"values_{lab}"] = v
            row[f"change_{lab}"] = 0.0
            row[f"per_replicate_{lab}"] = json.dumps(c.get("per_replicate", {}).get(lab, []))
        rows.append(row)
        for check, name, ov, reps in checks:
            values, per = evaluator.evaluate(c["params"], replicates=reps, variant=ov)
            row = dict(base, check=check, variant=name, replicates=_reps_text(reps))
            for lab, v, v0 in zip(spec.labels, values, c["values"]):
                row[f"values_{lab}"] = v
                row[f"change_{lab}"] = v - v0
                row[f"per_replicate_{lab}"] = json.dumps([per[lab][r] for r in reps])
            rows.append(row)
    cols = ["number", "role", "check", "variant", "replicates"]
    for lab in spec.labels:
        cols += [f"values_{lab}", f"change_{lab}", f"per_replicate_{lab}"]
    return pd.DataFrame(rows, columns=cols)


def _reps_text(reps) -> str:
    reps = list(reps)
    if reps and reps == list(range(reps[0], reps[-1] + 1)):
        return f"{reps[0]}-{reps[-1]}" if len(reps) > 1 else str(reps[0])
    return " ".join(str(r) for r in reps)


def _write_plots(study, spec: SweepSpec, sdir: Path) -> dict[str, str]:
    """Optuna's matplotlib plots as PNG; returns name -> "written" or why skipped."""
    import matplotlib

    import optuna.visualization.matplotlib as ovm

    status: dict[str, str] = {}
    jobs: list[tuple[str, Callable]] = []
    if spec.multi:
        for i, lab in enumerate(spec.labels):
            def tgt(t, i=i):
                return t.values[i]
            safe = re.sub(r"[^A-Za-z0-9_.@-]+", "-", lab)
            jobs.append((f"history_{safe}", lambda tgt=tgt, lab=lab: ovm.plot_optimization_history(
                study, target=tgt, target_name=lab)))
            # Optuna's importance evaluator ranks parameters by how they reach
            # *low* target values: negate a maximised objective
            def low(t, i=i, sgn=(-1.0 if spec.directions[i] == "maximize" else 1.0)):
                return sgn * t.values[i]
            jobs.append((f"importance_{safe}", lambda low=low, lab=lab: ovm.plot_param_importances(
                study, target=low, target_name=lab)))
            jobs.append((f"slice_{safe}", lambda tgt=tgt, lab=lab: ovm.plot_slice(
                study, target=tgt, target_name=lab)))
        if len(spec.objectives) in (2, 3):
            jobs.append(("pareto_front", lambda: ovm.plot_pareto_front(
                study, target_names=spec.labels)))
    else:
        lab = spec.labels[0]
        jobs.append(("history", lambda: ovm.plot_optimization_history(study, target_name=lab)))
        jobs.append(("importance", lambda: ovm.plot_param_importances(study)))
        jobs.append(("slice", lambda: ovm.plot_slice(study, target_name=lab)))
    import matplotlib.pyplot as plt

    with matplotlib.rc_context({"figure.max_open_warning": 0}):
        for name, make in jobs:
            try:
                with _quiet_optuna():
                    ax = make()
                first = np.asarray(ax, dtype=object).ravel()[0]
                fig = first.figure
                fig.set_size_inches(max(fig.get_size_inches()[0], 6.4),
                                    max(fig.get_size_inches()[1], 4.2))
                write_atomic(sdir / f"{name}.png",
                             lambda p, fig=fig: fig.savefig(p, format="png", dpi=110,
                                                            bbox_inches="tight"))
                plt.close(fig)
                status[name] = "written"
            except Exception as exc:  # a plot Optuna cannot make must not fail the sweep
                status[name] = f"skipped: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
                plt.close("all")
    return status


# --------------------------------------------------------------------------
# The run folder
# --------------------------------------------------------------------------


#: Written once in ``<run>/sweep/``: the study, its identity and its storage.
_IDENT = "sweep.json"


def _identity(exp: Experiment, spec: SweepSpec) -> str:
    """hash8 of a sweep whatever its number of trials (which may grow)."""
    table = exp.to_config()
    sweep = spec.to_config()
    sweep.pop("trials")
    table["sweep"] = sweep
    return config_hash(table)


def _find_run_dir(out: Path, name: str, hash8: str) -> Path | None:
    """The newest ``<out>/*_<name>_<hash8>*`` folder holding this sweep."""
    if not out.is_dir():
        return None
    found = []
    for d in out.glob(f"*_{name}_{hash8}*"):
        f = d / "sweep" / _IDENT
        try:
            if json.loads(f.read_text()).get("identity") == hash8:
                found.append(d)
        except (OSError, ValueError):
            continue
    return sorted(found)[-1] if found else None


def _load_resume_dir(path: Path) -> tuple[dict, Path]:
    f = path / "sweep" / _IDENT
    if not f.exists() or not (path / "config.toml").exists():
        raise ConfigError(f"--resume {path}: not a sweep run folder (no config.toml and "
                          f"sweep/{_IDENT})")
    try:
        return json.loads(f.read_text()), path / "config.toml"
    except ValueError:
        raise ConfigError(f"--resume {path}: sweep/{_IDENT} is not valid JSON") from None


def _header(exp: Experiment, what: str) -> str:
    return (f"# {what} of {exp.name} (every default filled in).\n"
            f"# Sweep again with: memsim sweep config.toml   (or run once: memsim run FILE)\n")


# --------------------------------------------------------------------------
# The API
# --------------------------------------------------------------------------


@dataclass
class SweepResult:
    """What a sweep produced; the frames are also in ``<path>/sweep/``.

    Attributes
    ----------
    trials : DataFrame
        :func:`trials_table` of the study.
    best_params : dict
        Dotted key -> value of the best trial (with several objectives, the
        Pareto member best on the first objective).
    best_values : dict
        Objective label -> value of that trial.
    best_number : int
    pareto : list of int
        Trial numbers of the Pareto set (the best trial alone with one objective).
    robustness : DataFrame
        :func:`robustness_check` of the best trial(s) and the experiment.
    study : optuna.Study
    path : Path or None
        The run folder.
    plots : dict
        Plot name -> "written" or the reason it was skipped.
    """

    experiment: Experiment
    spec: SweepSpec
    study: Any
    trials: pd.DataFrame
    best_params: dict
    best_values: dict
    best_number: int | None
    pareto: list[int]
    robustness: pd.DataFrame
    path: Path | None = None
    study_name: str = ""
    storage: str = ""
    plots: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)

    @property
    def best_value(self) -> float:
        """Value of the first objective for the best trial."""
        return next(iter(self.best_values.values())) if self.best_values else math.nan

    def summary_text(self) -> str:
        """A few lines for the console: best trial, Pareto set, robustness."""
        n_done = int((self.trials["state"] == "COMPLETE").sum()) if len(self.trials) else 0
        lines = [f"study {self.study_name}: {n_done} COMPLETE trials of {len(self.trials)}"]
        if self.best_number is not None:
            vals = ", ".join(f"{k} = {v:.4g}" for k, v in self.best_values.items())
            lines.append(f"best: trial {self.best_number} ({vals})")
            for k, v in self.best_params.items():
                lines.append(f"  {k} = {_fmt(v)}")
        if len(self.pareto) > 1:
            lines.append(f"Pareto set: trials {', '.join(map(str, self.pareto))}")
        if len(self.robustness):
            lab = self.spec.labels[0]
            for _, r in self.robustness.iterrows():
                if r["check"] == "sweep":
                    continue
                what = "fresh seeds" if r["check"] == "fresh-seeds" else f"variant {r['variant']}"
                lines.append(f"robustness: trial {r['number']} ({r['role']}) on {what} "
                             f"(replicates {r['replicates']}): {lab} = "
                             f"{r[f'values_{lab}']:.4g} ({r[f'change_{lab}']:+.4g})")
        return "\n".join(lines)

    def best_experiment(self) -> Experiment:
        """The experiment with the best parameters applied (sweep table removed)."""
        e = apply_params(self.experiment, self.best_params)
        return dataclasses.replace(e, sweep=None)


def _coerce_overrides(overrides) -> dict:
    if overrides is None:
        return {}
    if isinstance(overrides, dict):
        return dict(overrides)
    return dict(parse_override(o) for o in overrides)


def run_sweep(exp_or_path: Experiment | str | Path | None, *, trials: int | None = None,
              storage: str | None = None, study_name: str | None = None, workers: int = 1,
              out: str | Path | None = "results", overrides: list[str] | dict | None = None,
              quiet: bool = True, resume: str | Path | None = None,
              progress: Callable[[float], None] | None = None,
              plots: bool = True, report: bool = True,
              argv: list[str] | None = None) -> SweepResult:
    """Run (or resume, or join) an Optuna sweep of an experiment.

    Parameters
    ----------
    exp_or_path : Experiment, path or None
        The experiment or its TOML file (with a ``[sweep]`` table); None with
        ``resume`` reads the run folder's ``config.toml``.
    trials : int, optional
        COMPLETE trials the study must end with (default ``sweep.trials``).
    storage : str, optional
        ``sqlite:///...``, ``postgresql://...`` or ``journal:PATH``; default a
        journal file in the run folder (in memory when ``out`` is None).
    study_name : str, optional
        Default ``<name>-<hash8>``.
    workers : int
        Worker processes on this machine (1: in this process).
    out : path or None
        Parent of the run folder; None keeps everything in memory (no plots,
        no files; ``workers > 1`` then needs ``storage``).
    overrides : list of "KEY=VALUE" or dict, optional
        Dotted-key overrides, applied before validation (``sweep.*`` too).
    quiet : bool
        Keep Optuna's per-trial log lines off stderr.
    resume : path, optional
        A sweep run folder to continue (otherwise found from ``out``, the
        experiment and the study name).
    progress : callable, optional
        Called with the fraction of COMPLETE trials.
    plots : bool
        Write Optuna's plots (a few seconds).
    report : bool
        Build the run folder's ``report.html`` (:func:`memsim.report.build_report`).

    Returns
    -------
    SweepResult
    """
    import optuna

    t_start = time.perf_counter()
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ConfigError(f"--workers: expected an integer >= 1, got {workers!r}")
    ov = _coerce_overrides(overrides)
    ident: dict | None = None  # sweep/sweep.json of the folder resumed
    resume_dir: Path | None = None
    if resume is not None:
        resume_dir = Path(resume)
        ident, cfg_file = _load_resume_dir(resume_dir)
        if exp_or_path is None:
            exp_or_path = cfg_file
    if exp_or_path is None:
        raise ConfigError("memsim sweep: give an EXPERIMENT.toml or --resume RUN_DIR")
    if isinstance(exp_or_path, Experiment):
        exp = exp_or_path.with_overrides(ov) if ov else exp_or_path
    else:
        exp = load_experiment(exp_or_path, ov)
    spec = SweepSpec.from_config(exp.sweep, exp)
    if trials is not None:
        spec = spec.with_trials(trials)
    # the resolved experiment, with the resolved sweep table, is what runs
    exp = dataclasses.replace(exp, sweep=spec.to_config())
    hash8 = _identity(exp, spec)
    study_name = study_name or (ident or {}).get("study") or f"{exp.name}-{hash8}"
    if not re.match(r"^[A-Za-z0-9_.\-]+$", study_name):
        raise ConfigError(f"--study: {study_name!r}: use letters, digits, '_', '-' or '.'")
    if study_name != f"{exp.name}-{hash8}":
        hash8 = config_hash({"identity": hash8, "study": study_name})

    run_dir: Path | None = None
    if resume_dir is not None:
        if ident.get("identity") != hash8:
            raise ConfigError(f"--resume {resume_dir}: the experiment, its search space or the "
                              "study name differ from the ones this folder swept")
        run_dir = resume_dir
    elif out is not None:
        run_dir = _find_run_dir(Path(out), exp.name, hash8)
        if run_dir is not None:
            ident = json.loads((run_dir / "sweep" / _IDENT).read_text())
    recorded = (ident or {}).get("storage")
    if recorded is not None:
        if recorded.startswith("journal:"):
            # recorded relative to the run folder, so that a moved folder still resumes
            jpath = Path(recorded[len("journal:"):])
            jpath = jpath if jpath.is_absolute() else run_dir / jpath
            recorded_spec = f"journal:{jpath.resolve()}"
        else:
            recorded_spec = recorded
        if storage is None:
            if "***" in recorded:
                raise ConfigError(f"{run_dir}: this sweep's study lives in {recorded}; pass "
                                  "--storage with the full URL to resume it")
            storage = recorded_spec
        elif _mask_url(_storage_spec(storage, run_dir)) != _mask_url(recorded_spec):
            raise ConfigError(f"--storage: {run_dir} keeps its study in {recorded}, not in "
                              f"{_mask_url(storage)}; resume with the same storage or pick "
                              "another --study or --out")
    if run_dir is None and out is not None:
        from .runner import new_run_dir

        run_dir = new_run_dir(Path(out), exp.name, hash8)
    storage_spec = _storage_spec(storage, run_dir)
    if storage_spec == "memory" and workers > 1:
        raise ConfigError("--workers: several workers need a storage they share; pass --storage "
                          "or an output folder")
    if run_dir is not None and ident is None:
        # written once: how the same command finds this folder and its study again
        (run_dir / "sweep").mkdir(exist_ok=True)
        ident = {"study": study_name, "identity": hash8,
                 "storage": _recorded_storage(storage_spec, run_dir)}
        write_atomic(run_dir / "sweep" / _IDENT,
                     lambda p: p.write_text(json.dumps(ident, indent=2) + "\n"))
    prior = {}
    if run_dir is not None and (run_dir / "manifest.json").exists():
        try:
            prior = json.loads((run_dir / "manifest.json").read_text())
        except ValueError:
            prior = {}

    verbosity = optuna.logging.get_verbosity()
    # quiet: failed trials are in trials.csv (column error), no need for their tracebacks
    optuna.logging.set_verbosity(optuna.logging.ERROR if quiet else optuna.logging.INFO)
    manifest = None
    if run_dir is not None:
        write_atomic(run_dir / "config.toml", lambda p: p.write_text(
            _header(exp, "Resolved sweep configuration") + dumps_toml(exp.to_config()),
            encoding="utf-8"))
        manifest = _Manifest(run_dir, exp, argv)
        sessions = list(prior.get("sessions", []))
        session = {"started_utc": manifest.data["started_utc"], "host": _host(),
                   "pid": os.getpid(), "workers": workers, "argv": manifest.data["argv"]}
        sessions.append(session)
        manifest.update(kind="sweep", sessions=sessions, sweep={
            "study": study_name, "identity": hash8, "storage": _recorded_storage(storage_spec,
                                                                                   run_dir),
            "trials": spec.trials, "sampler": spec.sampler, "seed": spec.seed,
            "objectives": spec.labels, "directions": spec.directions, "params": spec.keys,
            "workers": workers})
    timings: dict[str, float] = {}
    try:
        storage_obj = open_storage(storage_spec)
        study, fresh = _open_study(storage_obj, study_name, exp, spec, hash8)
        n_before = _n_complete(study)
        t0 = time.perf_counter()
        job = _WorkerJob(config=exp.to_config(), base_dir=str(exp.base_dir),
                         source_file=exp.source_file, storage=storage_spec,
                         study_name=study_name, trials=spec.trials,
                         seed=spec.seed if (workers == 1 and fresh) else None)
        if workers == 1:
            _work(job, exp=exp, spec=spec, storage=storage_obj, progress=progress)
        else:
            _run_workers(job, workers, study, spec, progress)
        timings["trials"] = time.perf_counter() - t0
        n_after = _n_complete(study)
        if n_after < spec.trials:
            raise MemsimError(f"sweep: the study has {n_after} of {spec.trials} COMPLETE trials "
                              "(workers stopped early); run the same command again to resume")
        result = _finish(study, exp, spec, run_dir, timings, quiet, plots)
        result.study_name, result.storage = study_name, _mask_url(storage_spec)
        if run_dir is not None and report:
            t1 = time.perf_counter()
            try:
                from .report import build_report

                build_report(run_dir)
            except Exception as exc:  # the sweep's results stand without a report
                warnings.warn(f"memsim sweep: report.html failed: {type(exc).__name__}: {exc}",
                              stacklevel=2)
            timings["report"] = time.perf_counter() - t1
        timings["total"] = time.perf_counter() - t_start
        if manifest is not None:
            sessions[-1].update(trials_completed=n_after - n_before,
                                finished_utc=_now())
            manifest.update(status="completed", timings_s=timings, finished_utc=_now(),
                            sessions=sessions, plots=result.plots,
                            best={"number": result.best_number, "values": result.best_values,
                                  "params": result.best_params})
        return result
    except BaseException as exc:
        if manifest is not None:
            manifest.update(status="failed", error=f"{type(exc).__name__}: {exc}",
                            timings_s=timings, finished_utc=_now(),
                            hint="run the same command again to resume the sweep")
        raise
    finally:
        optuna.logging.set_verbosity(verbosity)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _recorded_storage(spec: str, run_dir: Path | None) -> str:
    if spec.startswith("journal:") and run_dir is not None:
        path = Path(spec[len("journal:"):])
        try:
            return f"journal:{path.relative_to(run_dir.resolve())}"
        except ValueError:
            return spec
    return _mask_url(spec)


def _n_complete(study) -> int:
    TrialState = _states()
    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


def _open_study(storage, study_name: str, exp: Experiment, spec: SweepSpec, hash8: str):
    """Create or load the study; enqueue trial 0 on a fresh one.

    Returns (study, fresh): fresh when the study had no trial yet.
    """
    import optuna

    directions = spec.directions
    with _quiet_optuna():
        study = optuna.create_study(storage=storage, study_name=study_name,
                                    directions=directions, load_if_exists=True)
        got = [d.name.lower() for d in study.directions]
        if got != directions:
            raise ConfigError(f"--study {study_name}: the study exists with directions {got}, "
                              f"this sweep has {directions}; pick another --study name")
        attrs = study.user_attrs
        if "memsim_identity" in attrs and attrs["memsim_identity"] != hash8:
            raise ConfigError(f"--study {study_name}: the study belongs to another experiment or "
                              "search space; pick another --study name")
        if "memsim_identity" not in attrs:
            study.set_user_attr("memsim_identity", hash8)
            study.set_user_attr("memsim_objectives", spec.labels)
            study.set_metric_names(spec.labels)
        fresh = len(study.get_trials(deepcopy=False)) == 0
        if fresh:
            study.enqueue_trial(spec.own_params(exp), user_attrs={"origin": "experiment"},
                                skip_if_exists=True)
    return study, fresh


def _run_workers(job: _WorkerJob, workers: int, study, spec: SweepSpec,
                 progress: Callable[[float], None] | None) -> None:
    """Spawn ``workers`` processes and wait for them, reporting progress."""
    ctx = multiprocessing.get_context("spawn")
    procs = []
    for i in range(workers):
        j = dataclasses.replace(job, index=i, seed=None)
        p = ctx.Process(target=_worker_main, args=(j,), name=f"memsim-sweep-{i}")
        p.start()
        procs.append(p)
    try:
        while any(p.is_alive() for p in procs):
            if progress is not None:
                progress(min(1.0, _n_complete(study) / spec.trials))
            for p in procs:
                p.join(timeout=0.5 / len(procs))
    except BaseException:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=10)
        raise
    codes = [p.exitcode for p in procs]
    if any(c == 2 for c in codes) and _n_complete(study) < spec.trials:
        raise ConfigError("sweep: a worker stopped on an error in the experiment (see above)")
    if progress is not None:
        progress(min(1.0, _n_complete(study) / spec.trials))


def _finish(study, exp: Experiment, spec: SweepSpec, run_dir: Path | None,
            timings: dict, quiet: bool, want_plots: bool = True) -> SweepResult:
    """Trials table, best configuration, robustness check and plots."""
    TrialState = _states()
    t0 = time.perf_counter()
    table = trials_table(study, spec)
    best = _best_trials(study, spec)
    best_params = dict(best[0].params) if best else {}
    best_values = dict(zip(spec.labels, best[0].values)) if best else {}
    evaluator = TrialEvaluator(exp, spec)
    cands = []
    for t in best[:10]:
        cands.append({"number": t.number, "role": "pareto" if spec.multi else "best",
                      "params": dict(t.params), "values": list(t.values),
                      "per_replicate": _per_rep(t, spec, exp.settings.replicates)})
    zero = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.user_attrs.get("origin") == "experiment"]
    if zero and zero[0].number not in {c["number"] for c in cands}:
        t = zero[0]
        cands.append({"number": t.number, "role": "experiment", "params": dict(t.params),
                      "values": list(t.values),
                      "per_replicate": _per_rep(t, spec, exp.settings.replicates)})
    robust = robustness_check(evaluator, spec, cands) if cands else pd.DataFrame()
    timings["robustness"] = time.perf_counter() - t0
    plots: dict[str, str] = {}
    if run_dir is not None:
        sdir = run_dir / "sweep"
        sdir.mkdir(exist_ok=True)
        write_atomic(sdir / "trials.csv", lambda p: table.to_csv(p, index=False))
        write_atomic(sdir / "robustness.csv", lambda p: robust.to_csv(p, index=False))
        if best:
            _write_best(exp, spec, best, sdir)
        t1 = time.perf_counter()
        plots = _write_plots(study, spec, sdir) if want_plots else {}
        timings["plots"] = time.perf_counter() - t1
        skipped = {k: v for k, v in plots.items() if v != "written"}
        if skipped and not quiet:
            for k, v in skipped.items():
                print(f"memsim sweep: plot {k} {v}", file=sys.stderr)
    return SweepResult(experiment=exp, spec=spec, study=study, trials=table,
                       best_params=best_params, best_values=best_values,
                       best_number=best[0].number if best else None,
                       pareto=[t.number for t in best], robustness=robust, path=run_dir,
                       plots=plots, timings=timings)


def _per_rep(t, spec: SweepSpec, R: int) -> dict[str, list[float]]:
    return {lab: [t.user_attrs.get(f"{lab}_rep{r}", math.nan) for r in range(R)]
            for lab in spec.labels}


def _write_best(exp: Experiment, spec: SweepSpec, best: list, sdir: Path) -> None:
    def config_of(t) -> str:
        e = apply_params(exp, dict(t.params))
        table = e.to_config()
        table.pop("sweep", None)
        vals = ", ".join(f"{lab} = {v:.6g}" for lab, v in zip(spec.labels, t.values))
        params = "\n".join(f"#   {k} = {_fmt(v)}" for k, v in t.params.items())
        head = (f"# Best configuration of the sweep of {exp.name}: trial {t.number} "
                f"({vals}).\n# Parameters:\n{params}\n# Run it with: memsim run best.toml\n")
        return head + dumps_toml(table)

    write_atomic(sdir / "best.toml", lambda p: p.write_text(config_of(best[0]),
                                                            encoding="utf-8"))
    if spec.multi:
        pdir = sdir / "pareto"
        pdir.mkdir(exist_ok=True)
        for t in best:
            write_atomic(pdir / f"trial_{t.number}.toml",
                         lambda p, t=t: p.write_text(config_of(t), encoding="utf-8"))
