"""The search space of a sweep: the ``[sweep]`` table, parsed and validated.

Holds :class:`SweepSpec` (the whole table), :class:`ParamSpec` (one swept
dotted key and its distribution), :class:`Objective` (a metric of one policy
at one budget, and a direction), :class:`RobustnessSpec` (``[sweep.robustness]``)
and :func:`apply_params`, which applies a trial's parameters to an
experiment. Parsing and the checks against the experiment raise one-line
:class:`~memsim.core.errors.ConfigError` messages that name the dotted key at fault.

This is the bottom of :mod:`memsim.sweep`: it needs neither Optuna nor the
runner, so validating a sweep (``memsim audit`` does) stays cheap.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memsim.runs.config import Experiment, did_you_mean
from memsim.core.errors import ConfigError
from memsim.evaluation.metrics import HIGHER_IS_BETTER, METRIC_COLUMNS
from memsim.core.params import check_keys, key_text

#: Samplers by their ``sampler = "..."`` name.
SAMPLERS = ("tpe", "random", "qmc", "cmaes", "nsga2", "grid")
#: Pruners by their ``pruner = "..."`` name (see :class:`SweepSpec`).
PRUNERS = ("none", "median", "hyperband", "successive-halving")
#: Run-level metrics an objective may also name, one value per replicate:
#: ``recall_gini`` and ``evicted_notes`` (the arm's ``arms`` row),
#: ``store_notes`` and ``store_tokens`` (the end-of-run store size after
#: evictions: the last row of the arm's ``store`` frame) and ``utility_share``
#: (sum of utility / sum of oracle utility over the replicate's queries,
#: :func:`memsim.reporting.stats.utility_share_by`). The objective is their mean over
#: replicates. ``tokens_used`` (a query column) is the mean context cost.
RUN_OBJECTIVES = ("recall_gini", "store_tokens", "store_notes", "evicted_notes",
                  "utility_share")
#: Cost objectives without a default direction: a sweep must say whether it
#: wants the store small (``"minimize"``) or, e.g., kept large.
NO_DEFAULT_DIRECTION = ("store_tokens", "store_notes", "evicted_notes")
#: Every metric an objective may name.
OBJECTIVE_METRICS = tuple(METRIC_COLUMNS) + RUN_OBJECTIVES

_SWEEP_KEYS = ("trials", "sampler", "seed", "batch", "pruner", "cache_mb", "objectives",
               "params", "robustness")
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


#: Why a robustness variant may not set a key of :data:`_FROZEN_KEYS`: a
#: variant re-runs the winners on the check's own replicates (the fresh seeds,
#: else the sweep's) under a changed workload or component.
_VARIANT_FROZEN = {
    "experiment.seed": "it would change every replicate's stream, and a variant compares the "
                       "winners on the same seeds under a harder workload; fresh seeds are "
                       "[sweep.robustness] replicates",
    "experiment.replicates": "a variant runs on the robustness check's replicates whatever "
                             "it says, so it would change nothing; set [sweep.robustness] "
                             "replicates instead",
}
_VARIANT_IDENTITY = ("it names the experiment or what it reports, not the workload the "
                     "winners are tested on")
#: Most combinations of a grid that :meth:`SweepSpec.check_against` builds
#: one by one; a larger grid has each parameter's values checked alone, and
#: a point that fails when it runs is reported, never run again.
GRID_CHECK_MAX = 5000


def _is_number(v: Any) -> bool:
    """A finite int or float (a bool is not a number here)."""
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
        Values of a categorical (strings, numbers or booleans; at least two,
        distinct).
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
        """Parse and validate one ``[sweep.params]`` entry (``where``: message prefix)."""
        w = f"{where}.{quote_key(key)}"
        if not isinstance(table, dict):
            raise ConfigError(f"{w}: expected a table like {{ type = \"float\", low = 1, "
                              f"high = 10 }}, got {table!r}")
        kind = table.get("type")
        if kind is None:
            # (the entry's own key: an override that set one field of it is named)
            raise ConfigError(f"{w}: missing type (one of {', '.join(_PARAM_TYPES)}); a "
                              "parameter is a table like { type = \"float\", low = 1, "
                              "high = 10 }")
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
            for i, a in enumerate(choices):
                # 15 and 15.0, or 1 and true: Optuna finds a choice by ==, so it
                # would record one as the other (and a grid never ends its point)
                same = [b for b in choices[:i] if b == a]
                if same:
                    raise ConfigError(f"{w}.choices: {json.dumps(same[0])} and {json.dumps(a)} "
                                      f"are equal as values (a sweep would record one as the "
                                      f"other); give one of them, got {choices!r}")
            if len(choices) < 2:
                raise ConfigError(f"{w}.choices: a categorical needs at least two values to "
                                  f"choose from, got {choices!r}; set the key in the experiment "
                                  "instead of sweeping it")
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

    def as_choice(self, value: Any) -> Any:
        """The choice of a categorical that ``value`` stands for, with its
        TOML type, or None when it is none.

        Values read back from a table are not the choices themselves: pandas
        gives numpy scalars (``numpy.int64``, ``numpy.bool_``), and an integer
        column with a missing value turns into floats (``5.0``). A boolean
        matches only a boolean (``true`` is not the choice ``1``); a number
        matches a number of equal value.
        """
        if hasattr(value, "item") and not isinstance(value, (str, bytes)):
            value = value.item()  # numpy scalar -> its Python value
        for c in self.choices:
            if type(c) is type(value) and c == value:
                return c
        for c in self.choices:
            if _is_number(c) and _is_number(value) and c == value:
                return c
        return None

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


def _flatten(table: dict, where: str) -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (a TOML inline table written with
    bare dotted keys arrives nested); a key spelled twice (``"a.b" = 1`` and
    ``a.b = 2``) is refused, never one of them dropped."""
    items = _flat_items(table, lambda v: isinstance(v, dict))
    _refuse_twice(items, lambda key: f"{where}.{key}")
    return {key: v for key, v, _ in items}


def _flat_items(table: dict, descend, path: tuple = ()) -> list[tuple[str, Any, tuple]]:
    """(dotted key, value, the key's parts as written) of each entry of a
    nested table, descending into the values ``descend`` accepts."""
    out = []
    for k, v in table.items():
        parts = path + (str(k),)
        if descend(v):
            out.extend(_flat_items(v, descend, parts))
        else:
            out.append((".".join(parts), v, parts))
    return out


def _refuse_twice(items: list[tuple[str, Any, tuple]], name) -> None:
    """Refuse two entries of ``items`` (from :func:`_flat_items`) whose
    spellings name one dotted key: TOML keeps both ``"a.b" = ...`` (one
    quoted key) and ``a.b = ...`` (nested tables), which would silently
    become one. ``name(key)``: the message's prefix."""
    seen: dict[str, tuple] = {}
    for key, _, parts in items:
        if key in seen:
            first = seen[key]
            raise ConfigError(
                f"{name(key)}: given twice, {_spelling(first)} and {_spelling(parts)}; both "
                "name this one key, so write it once")
        seen[key] = parts


def _spelling(parts: tuple) -> str:
    """How a key was written, for a message: ``quoted ("a.b")``, ``dotted
    (a.b)`` or ``partly quoted (a."b.c")``."""
    text = key_text(parts)
    if len(parts) == 1:
        kind = "quoted"
    elif '"' not in text:
        kind = "dotted"
    else:
        kind = "partly quoted"
    return f"{kind} ({text})"


def quote_key(key: str) -> str:
    """A swept dotted key as one quoted TOML key, as ``[sweep.params]`` shows
    it in messages (``"policies.a.decay.floor"``)."""
    return json.dumps(key, ensure_ascii=False)


@dataclass(frozen=True)
class SweepSpec:
    """A validated ``[sweep]`` table (see the module docstring).

    Build it with :meth:`from_config`; :meth:`check_against` then checks every
    key against an experiment.

    Three keys change how trials are run, never what a trial means (so none
    is part of the sweep's identity: a study may be resumed with others):

    ``batch`` (int >= 1, default 1)
        Trials a worker asks Optuna for at once and simulates as the arms of
        one replay per replicate, sharing the stream and the similarity
        product (their values are bit for bit those of one trial at a
        time). Only possible when every swept key is under ``policies.``
        (:attr:`batchable`); otherwise trials run one at a time and the
        sweep's summary says so.
    ``pruner`` (one of :data:`PRUNERS`, default ``"none"``)
        Stops unpromising trials after a replicate (state PRUNED; they do
        not count toward ``trials``). After each replicate a trial reports
        its running objective (the mean over the replicates done, as the
        final value) and the pruner compares it with the other trials at
        the same number of replicates: ``median`` (Optuna's MedianPruner:
        prune a trial below the median of the COMPLETE trials once 5 are
        COMPLETE), ``successive-halving`` (asynchronous successive halving:
        at 1, 2, 4... replicates keep the better half of the trials that got
        there) or ``hyperband`` (several successive-halving brackets of
        different aggressiveness, up to the experiment's replicates). One
        objective only (Optuna cannot prune several); it needs at least 2
        replicates, and trial 0 (the experiment's own parameters) is never
        pruned: it is the reference of the robustness check.
    ``cache_mb`` (int >= 0, default None: automatic)
        Megabytes of arrays a worker keeps from one batch to the next: the
        work of its replays that does not depend on the trials (each tick's
        similarity, its levels; :class:`~memsim.engine.ReplayCache`), so
        that later batches skip it. 0 keeps nothing. The default is a
        quarter of the machine's memory shared among the workers, at most
        2048 (:func:`~memsim.sweep.evaluate.cache_budget`). Values do not
        depend on it.
    """

    params: tuple[ParamSpec, ...]
    objectives: tuple[Objective, ...]
    trials: int = 50
    sampler: str = "tpe"
    seed: int = 0
    robustness: RobustnessSpec = field(default_factory=lambda: RobustnessSpec(0))
    batch: int = 1
    pruner: str = "none"
    cache_mb: int | None = None

    def __post_init__(self) -> None:
        # one column per parameter in trials.csv, one Optuna parameter per key:
        # a key twice would sample it once and break every table built on it
        seen: set[str] = set()
        for p in self.params:
            if p.key in seen:
                raise ConfigError(f"sweep.params.{quote_key(p.key)}: given twice; a parameter "
                                  "is swept once")
            seen.add(p.key)

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

    @property
    def batchable(self) -> bool:
        """Whether trials can be simulated as arms of one replay: every swept
        key is under ``policies.``, so trials differ only in their policies."""
        return all(k.startswith("policies.") for k in self.keys)

    @property
    def unbatchable_keys(self) -> list[str]:
        """The swept keys that keep trials from sharing a replay."""
        return [k for k in self.keys if not k.startswith("policies.")]

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
        trials, sampler, seed = _settings(table, exp, where)
        batch, pruner = _batch_pruner(table, where)
        params = _params(table.get("params"), where)
        objectives = _objectives(table.get("objectives"), exp, f"{where}.objectives")
        if len(objectives) > 1 and sampler == "cmaes":
            raise ConfigError(f"{where}.sampler: 'cmaes' optimises one objective; use 'nsga2' "
                              "or 'tpe' for several")
        if len(objectives) > 1 and pruner != "none":
            raise ConfigError(f"{where}.pruner: {pruner!r} prunes a single-objective sweep; "
                              f"this one has {len(objectives)} objectives (Optuna cannot prune "
                              "several): use pruner = \"none\"")
        if sampler == "grid" and pruner != "none":
            raise ConfigError(f"{where}.pruner: the grid sampler runs each point once, so a "
                              "pruned point would never complete; use pruner = \"none\" with "
                              "sampler = \"grid\"")
        if sampler == "grid":
            trials = _grid_trials(params, trials if "trials" in table else None, where)
        spec = cls(params=params, objectives=objectives, trials=trials, sampler=sampler,
                   seed=seed, robustness=_robustness(table.get("robustness", {}), exp, where),
                   batch=batch, pruner=pruner, cache_mb=_cache_mb(table, where))
        if exp is not None:
            spec.check_against(exp, where)
        return spec

    def to_config(self) -> dict:
        """The resolved table (every default filled)."""
        out = {
            "trials": self.trials,
            "sampler": self.sampler,
            "seed": self.seed,
            "batch": self.batch,
            "pruner": self.pruner,
            "objectives": [o.to_config() for o in self.objectives],
            "params": {p.key: p.to_config() for p in self.params},
            "robustness": self.robustness.to_config(),
        }
        if self.cache_mb is not None:  # absent: automatic (TOML has no null)
            out["cache_mb"] = self.cache_mb
        return out

    def with_trials(self, trials: int) -> SweepSpec:
        """This spec with ``trials`` (``--trials``), checked against a grid's size."""
        if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
            raise ConfigError(f"--trials: expected an integer >= 1, got {trials!r}")
        if self.sampler == "grid" and trials > grid_size(self):
            raise ConfigError(f"--trials: the grid has {grid_size(self)} points; ask for at "
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
            w = f"{where}.params.{quote_key(p.key)}"
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
                    raise ConfigError(f"{w}: the value {format_value(value)} does not give a valid "
                                      f"experiment: {exc}") from None
            own_v = own.get("kind") if isinstance(own, dict) else own
            if not p.contains(own_v):
                raise ConfigError(
                    f"{w}: the experiment's own value {format_value(own_v)} is outside the search "
                    f"space {describe_space(p)}; trial 0 runs the experiment as it is, so widen the "
                    "range or change the experiment")
        if self.sampler == "grid":
            self._check_grid_points(exp, where)
        for i, (_name, ov) in enumerate(self.robustness.variants):
            vw = f"{where}.robustness.variants[{i}]"
            for key in ov:
                if not _lookup(resolved, key)[0]:
                    raise ConfigError(f"{vw}.{key}: names nothing in the resolved experiment"
                                      f"{did_you_mean(key, leaves)}")
                if key in self.keys:
                    raise ConfigError(f"{vw}.{key}: is a swept parameter; a variant changes "
                                      "what the parameters are tested on, not the parameters")
                if key in _FROZEN_KEYS:
                    raise ConfigError(f"{vw}.{key}: a variant cannot set it: "
                                      f"{_VARIANT_FROZEN.get(key, _VARIANT_IDENTITY)}")
            try:
                exp.with_overrides(ov)
            except ConfigError as exc:
                raise ConfigError(f"{vw}: {exc}") from None

    def _check_grid_points(self, exp: Experiment, where: str) -> None:
        """Build every point of a grid sweep (up to :data:`GRID_CHECK_MAX`
        points; a larger grid has every value of each parameter built alone,
        the others at the experiment's values).

        :meth:`check_against` builds each parameter's probe points (its ends
        and middle), but another value may not build (``uniform_tokens``
        takes 0 or 8 to 4000), nor a combination: a categorical that
        switches a component's kind and a parameter the other kind lacks
        (``exp-rate`` has no ``half_life_days``). A grid runs each point
        once, so such a point would only fail; it is refused here, naming
        it, before any trial.
        """
        keys = self.keys
        if grid_size(self) > GRID_CHECK_MAX:
            points = [{p.key: v} for p in self.params for v in p.grid()]
        else:
            points = [dict(zip(keys, point))
                      for point in itertools.product(*(p.grid() for p in self.params))]
        for point in points:
            try:
                apply_params(exp, point)
            except ConfigError as exc:
                combo = point_text(point)
                why = "; ".join(e.rstrip(".") for e in exc.errors)
                hint = ("a grid runs each of its values, so give only values that build"
                        if len(point) == 1 else "a grid runs every combination of its values, "
                        "so sweep what only one kind has in a sweep of its own")
                raise ConfigError(f"{where}.params: the grid point {combo} does not give a valid "
                                  f"experiment: {why}; {hint}") from None

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


def _settings(table: dict, exp: Experiment | None, where: str) -> tuple[int, str, int]:
    """``trials``, ``sampler`` and ``seed`` of a ``[sweep]`` table, checked."""
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
    return trials, sampler, seed


def _batch_pruner(table: dict, where: str) -> tuple[int, str]:
    """``batch`` and ``pruner`` of a ``[sweep]`` table, checked."""
    batch = table.get("batch", 1)
    if not isinstance(batch, int) or isinstance(batch, bool) or not 1 <= batch <= 10_000:
        raise ConfigError(f"{where}.batch: expected an integer >= 1 (trials simulated together), "
                          f"got {batch!r}")
    pruner = table.get("pruner", "none")
    if pruner not in PRUNERS:
        raise ConfigError(f"{where}.pruner: unknown pruner {pruner!r}"
                          f"{did_you_mean(pruner, PRUNERS)}; allowed: {', '.join(PRUNERS)}")
    return batch, pruner


def _cache_mb(table: dict, where: str) -> int | None:
    """``cache_mb`` of a ``[sweep]`` table, checked (None: automatic)."""
    mb = table.get("cache_mb")
    if mb is not None and (not isinstance(mb, int) or isinstance(mb, bool) or mb < 0):
        raise ConfigError(f"{where}.cache_mb: expected an integer >= 0 (megabytes a worker keeps "
                          f"between batches; 0 keeps nothing), got {mb!r}")
    return mb


def _params(params_t: Any, where: str) -> tuple[ParamSpec, ...]:
    """The ``[sweep.params]`` table as parameter specs, in table order."""
    if not isinstance(params_t, dict) or not params_t:
        raise ConfigError(f"{where}.params: expected a table of \"dotted.key\" = "
                          "{ type = ..., ... } with at least one parameter")
    items = _params_items(params_t)
    _refuse_twice(items, lambda key: f"{where}.params.{quote_key(key)}")
    return tuple(ParamSpec.from_config(k, v, f"{where}.params") for k, v, _ in items)


def _grid_trials(params: tuple[ParamSpec, ...], trials: int | None, where: str) -> int:
    """Trials of a grid sweep: the whole grid unless ``trials`` (given) asks
    for fewer; every parameter must be discrete."""
    for p in params:
        if p.grid() is None:
            raise ConfigError(f"{where}.params.{quote_key(p.key)}: the grid sampler needs a "
                              "'step' for a float parameter")
    size = int(np.prod([len(p.grid()) for p in params]))
    if trials is None:
        return size  # the whole grid
    if trials > size:
        raise ConfigError(f"{where}.trials: the grid has {size} points; ask for at most "
                          f"{size} trials")
    return trials


def _robustness(rob: Any, exp: Experiment | None, where: str) -> RobustnessSpec:
    """``[sweep.robustness]``: fresh replicates and named workload variants."""
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
    variants = [_variant(v, f"{where}.robustness.variants[{i}]")
                for i, v in enumerate(variants_t)]
    if len({n for n, _ in variants}) != len(variants):
        raise ConfigError(f"{where}.robustness.variants: two variants have the same name")
    return RobustnessSpec(reps, tuple(variants))


def _variant(v: Any, vw: str) -> tuple[str, dict[str, Any]]:
    """One robustness variant as (name, flat dotted-key overrides); the name
    defaults to the overrides themselves."""
    if not isinstance(v, dict) or not v:
        raise ConfigError(f"{vw}: expected a non-empty table of dotted-key overrides, "
                          f"got {v!r}")
    v = dict(v)
    name = v.pop("name", None)
    if name is not None and not isinstance(name, str):
        raise ConfigError(f"{vw}.name: expected a string, got {name!r}")
    flat = _flatten(v, vw)
    if not flat:
        raise ConfigError(f"{vw}: names no override")
    # (a bool as Python writes it, as before format_value wrote TOML's
    # true: the name is part of the sweep's identity, which must not move)
    name = name or ", ".join(f"{k}={x if isinstance(x, bool) else format_value(x)}"
                             for k, x in flat.items())
    return name, flat


def _params_items(table: dict) -> list[tuple[str, Any, tuple]]:
    """Parameter entries as (dotted key, table, the key's parts as written);
    a key written unquoted in TOML (``a.b = {...}``) arrives as nested
    tables, so descend until a table with ``type``."""
    return _flat_items(table, lambda v: isinstance(v, dict) and "type" not in v and bool(v)
                       and all(isinstance(x, dict) for x in v.values()))


def _objectives(raw: Any, exp: Experiment | None, where: str) -> tuple[Objective, ...]:
    """``sweep.objectives`` (a list of tables, one table or metric names) as
    objectives, their policy and budget filled in from ``exp``."""
    if raw is None:
        raw = [{"metric": "utility"}]
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: expected a list of {{ metric = \"...\", direction = "
                          "\"maximize\" } tables")
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
        if metric in NO_DEFAULT_DIRECTION and "direction" not in o:
            raise ConfigError(f"{w}.direction: missing; {metric} has no default direction: "
                              "say \"minimize\" (a smaller store is better) or \"maximize\"")
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
    """Every dotted key of a nested table (tables too), for did-you-mean hints."""
    out = []
    for k, v in table.items():
        key = f"{prefix}.{k}" if prefix else k
        out.append(key)
        if isinstance(v, dict):
            out.extend(_leaf_keys(v, key))
    return out


def _lookup(table: dict, key: str) -> tuple[bool, Any]:
    """(found, value) of a dotted key in a nested table."""
    node: Any = table
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def point_text(params: dict) -> str:
    """Parameters as ``key = value, ...`` (:func:`format_value`'s values)."""
    return ", ".join(f"{k} = {format_value(v)}" for k, v in params.items())


def format_value(v: Any) -> str:
    """A value as messages and file comments show it (strings quoted)."""
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()  # a numpy scalar from a table: shown as its Python value
    if isinstance(v, bool):  # as TOML writes it (a choice of a categorical)
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    return json.dumps(v) if isinstance(v, str) else str(v)


def describe_space(p: ParamSpec) -> str:
    """A parameter's search space in words, for error messages."""
    if p.type == "categorical":
        return "{" + ", ".join(format_value(c) for c in p.choices) + "}"
    s = f"[{format_value(p.low)}, {format_value(p.high)}]"
    if p.step is not None:
        s += f" step {format_value(p.step)}"
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



def grid_size(spec: SweepSpec) -> int:
    """Number of points of a grid sweep's search space."""
    return int(np.prod([len(p.grid()) for p in spec.params]))
