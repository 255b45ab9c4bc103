"""Experiment configs: TOML files, dotted keys, overrides, grids and resolution.

One dotted key syntax (``policies.hivemind.decay.half_life_days``) is used in
TOML, in ``--set KEY=VALUE``, in sweep parameter names and in result columns.
Configs are parsed as data (``tomllib``), never evaluated.

An experiment file has these tables::

    [experiment]        name, seed, replicates, description, baseline, budgets,
                        and the engine settings of :class:`memsim.engine.SimSettings`
    [workload]          synthetic knobs, or ``source = "DIR"`` to replay a stream
    [reader]            the reader model (``kind = "positional"`` ...)
    [policies.NAME]     ``preset = "..."`` and/or one entry per slot
    [grid]              "dotted.key" = [values ...]: one run per combination
    [sweep]             an Optuna search (see :mod:`memsim.sweep`)

*Resolution* fills every default so that the resolved table (written as
``config.toml`` in the run folder) reproduces the run exactly.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .engine import SimSettings
from .errors import ConfigError, MemsimError
from .params import Interval, Validated, apply_override, check_keys, did_you_mean
from .policies import Policy, resolve_policy

__all__ = [
    "Experiment",
    "StreamSource",
    "load_experiment",
    "experiment_from_dict",
    "apply_override",
    "parse_override",
    "did_you_mean",
    "dumps_toml",
    "config_hash",
]

TOP_LEVEL = ("experiment", "workload", "reader", "policies", "grid", "sweep")


# --------------------------------------------------------------------------
# Overrides: --set KEY=VALUE
# --------------------------------------------------------------------------

_BARE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/:]*$")


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``KEY=VALUE``; VALUE is a TOML value, or a bare word taken as a string."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE")
    key, raw = text.split("=", 1)
    key, raw = key.strip(), raw.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set {text!r}: empty key")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        if raw in ("true", "false") or not _BARE.match(raw) or raw.lower() in ("nan", "inf"):
            raise ConfigError(f"--set {key}: cannot read {raw!r} as a value") from None
        value = raw
    return key, value


# --------------------------------------------------------------------------
# The experiment object
# --------------------------------------------------------------------------


#: Real-trace importers a workload can name (``importer = "locomo"``).
IMPORTERS = ("locomo",)
IMPORT_NOTES = ("turns", "observations", "summaries")


@dataclass(frozen=True)
class StreamSource:
    """Replay a stream from disk instead of generating one: a stream folder,
    or a real trace imported on load (``importer = "locomo"``, with ``notes``
    saying what a note is)."""

    path: Path
    importer: str | None = None
    notes: str = "turns"

    def to_config(self) -> dict:
        if self.importer is None:
            return {"source": str(self.path)}
        return {"source": str(self.path), "importer": self.importer, "notes": self.notes}

    def load(self):
        """Read (or import) the stream."""
        if self.importer == "locomo":
            from .importers.locomo import import_locomo

            return import_locomo(self.path, notes=self.notes)
        from .stream import read_stream

        return read_stream(self.path)


@dataclass(frozen=True, kw_only=True)
class ExperimentSettings(Validated):
    """The ``[experiment]`` table: the run's settings and the engine's.

    The engine's share is :attr:`sim`, a :class:`memsim.engine.SimSettings`
    built from the fields of the same names; its defaults are the engine's.

    Parameters
    ----------
    name : str
        Used in the run folder's name.
    seed : int
        The one seed of the experiment; every random stream derives from it.
    replicates : int
        Independent replicate streams (common random numbers across policies).
    description : str
        Free text for reports.
    baseline : str
        Policy the reports compare the others against ("" = the first).
    budgets : tuple of int
        Budget curve: run every policy at each of these budgets (() = only
        ``budget_tokens``).
    budget_tokens : int
        Token budget of each context (see :class:`~memsim.engine.SimSettings`).
    candidates : int
        Default top-C: packers work on the C best-scored notes.
    tick_days : float
        Length of a tick.
    feedback_mode : {"per-tick", "per-query"}
        When uses are applied: after each tick, or after each query.
    retention_period_days : float
        Period of the retention sweeps.
    save_rankings : bool
        Keep every query's top-C ranking (``rankings.parquet``).
    """

    name: str = "experiment"
    seed: int = 0
    replicates: int = 3
    description: str = ""
    baseline: str = ""
    budgets: tuple = ()
    # the engine's settings, with the engine's defaults (validated by SimSettings)
    budget_tokens: int = SimSettings.budget_tokens
    candidates: int = SimSettings.candidates
    tick_days: float = SimSettings.tick_days
    feedback_mode: str = SimSettings.feedback_mode
    retention_period_days: float = SimSettings.retention_period_days
    save_rankings: bool = SimSettings.save_rankings

    _constraints = {
        "seed": Interval(0, 2**63 - 1, integer=True),
        "replicates": Interval(1, 10_000, integer=True),
    }

    def _check(self) -> None:
        for name in ("name", "description", "baseline"):
            if not isinstance(getattr(self, name), str):
                self._fail(name, "a string", getattr(self, name))
        if not re.match(r"^[A-Za-z0-9_.\-]+$", self.name):
            self._fail("name", "letters, digits, '_', '-' or '.'", self.name)
        for b in self.budgets:
            if not Interval(1, None, integer=True).check(b):
                self._fail("budgets", "a list of ints >= 1", list(self.budgets))
        # built here, so that an invalid engine setting fails on construction
        object.__setattr__(self, "_sim", SimSettings(
            budget_tokens=self.budget_tokens, candidates=self.candidates,
            tick_days=self.tick_days, feedback_mode=self.feedback_mode,
            retention_period_days=self.retention_period_days,
            save_rankings=self.save_rankings))

    @property
    def sim(self) -> SimSettings:
        """The engine's settings."""
        return self._sim

    @classmethod
    def from_table(cls, table: dict, where: str = "experiment") -> ExperimentSettings:
        """Validate an ``[experiment]`` table (unknown keys, types, ranges).

        Raises
        ------
        ConfigError
            One line naming ``where.KEY``.
        """
        check_keys(table, sorted(f.name for f in fields(cls)), where)
        kwargs = dict(table)
        if "budgets" in kwargs:
            if not isinstance(kwargs["budgets"], list):
                raise ConfigError(f"{where}.budgets: expected a list of ints, got "
                                  f"{kwargs['budgets']!r}")
            kwargs["budgets"] = tuple(kwargs["budgets"])
        return _build(cls, kwargs, where)


@dataclass(frozen=True)
class Experiment:
    """A loaded, validated experiment: everything a run needs."""

    settings: ExperimentSettings
    workload: Any  # SyntheticWorkload | StreamSource
    policies: dict[str, Policy]
    reader: Any
    grid: dict[str, list] = field(default_factory=dict)
    sweep: dict | None = None
    base_dir: Path = Path(".")
    source_file: str = ""

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def seed(self) -> int:
        return self.settings.seed

    @property
    def sim(self) -> SimSettings:
        """The engine's settings (part of :attr:`settings`)."""
        return self.settings.sim

    def to_config(self) -> dict:
        """The resolved table: every default filled, concrete seed."""
        exp = {f.name: getattr(self.settings, f.name) for f in fields(self.settings)}
        exp["budgets"] = list(self.settings.budgets)
        policies = {}
        for name, pol in self.policies.items():
            table = pol.to_config()
            table.setdefault("candidates", self.sim.candidates)
            policies[name] = table
        out = {"experiment": exp, "workload": self.workload.to_config(),
               "reader": self.reader.to_config(), "policies": policies}
        if self.grid:
            out["grid"] = copy.deepcopy(self.grid)
        if self.sweep is not None:
            out["sweep"] = copy.deepcopy(self.sweep)
        return out

    def hash8(self) -> str:
        return config_hash(self.to_config())

    def expand(self) -> list[Experiment]:
        """One experiment per combination of the ``[grid]`` (itself if none)."""
        if not self.grid:
            return [self]
        keys = list(self.grid)
        out = []
        base = self.to_config()
        base.pop("grid", None)
        for combo in itertools.product(*(self.grid[k] for k in keys)):
            table = copy.deepcopy(base)
            label = []
            for k, v in zip(keys, combo):
                apply_override(table, k, v)
                label.append(f"{k.split('.')[-1]}={v}")
            table["experiment"]["name"] = _safe_name(
                f"{self.name}_{'_'.join(str(x) for x in label)}")
            out.append(experiment_from_dict(table, base_dir=self.base_dir,
                                            source_file=self.source_file))
        return out

    def with_overrides(self, overrides: dict[str, Any]) -> Experiment:
        table = self.to_config()
        for k, v in overrides.items():
            apply_override(table, k, v)
        return experiment_from_dict(table, base_dir=self.base_dir, source_file=self.source_file)


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]+", "-", text)[:120]


def config_hash(table: dict) -> str:
    """First 8 hex digits of the SHA-256 of the canonical JSON of a table."""
    blob = json.dumps(table, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:8]


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------


def load_experiment(path: str | Path, overrides: list[str] | dict | None = None) -> Experiment:
    """Read an experiment TOML file, apply ``--set`` overrides and validate.

    Raises :class:`ConfigError` with one line naming the file and the key.
    """
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such experiment file")
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder, not an experiment file")
    text = path.read_bytes()
    if not text.strip():
        raise ConfigError(f"{path}: the experiment file is empty")
    try:
        table = tomllib.loads(text.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    table.setdefault("experiment", {}).setdefault("name", _safe_name(path.stem))
    if isinstance(overrides, dict):
        items = list(overrides.items())
    else:
        items = [parse_override(o) for o in (overrides or [])]
    for k, v in items:
        apply_override(table, k, v)
    try:
        return experiment_from_dict(table, base_dir=path.parent, source_file=str(path))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def experiment_from_dict(table: dict, *, base_dir: str | Path = ".",
                         source_file: str = "") -> Experiment:
    """Validate a config table and build the :class:`Experiment`."""
    from .reader import reader_from_config
    from .workload import SyntheticWorkload

    if not isinstance(table, dict):
        raise ConfigError("the config must be a table")
    check_keys(table, TOP_LEVEL, "")
    settings = ExperimentSettings.from_table(_table(table, "experiment"))

    wl = _table(table, "workload")
    if "source" in wl:
        extra = [k for k in wl if k not in ("source", "importer", "notes")]
        if extra:
            raise ConfigError(f"workload.{extra[0]}: a workload with 'source' replays a stream "
                              "and takes no generator knobs")
        if not isinstance(wl["source"], str) or not wl["source"]:
            raise ConfigError(f"workload.source: expected a folder path, got {wl['source']!r}")
        importer = wl.get("importer")
        if importer is not None and importer not in IMPORTERS:
            raise ConfigError(f"workload.importer: unknown importer {importer!r}; "
                              f"allowed: {', '.join(IMPORTERS)}")
        notes = wl.get("notes", "turns")
        if notes not in IMPORT_NOTES or ("notes" in wl and importer is None):
            raise ConfigError(f"workload.notes: must be one of {', '.join(IMPORT_NOTES)}, "
                              f"with an importer; got {notes!r}")
        src = Path(wl["source"])
        workload: Any = StreamSource(src if src.is_absolute() else (Path(base_dir) / src),
                                     importer, notes)
    else:
        workload = SyntheticWorkload.from_config(wl, "workload")

    reader = reader_from_config(_table(table, "reader"), "reader")

    pols_table = _table(table, "policies")
    if not pols_table:
        raise ConfigError("policies: an experiment needs at least one [policies.NAME] table")
    policies: dict[str, Policy] = {}
    for name, ptable in pols_table.items():
        where = f"policies.{name}"
        if not re.match(r"^[A-Za-z0-9_\-]+$", name):
            raise ConfigError(f"{where}: policy names use letters, digits, '_' or '-' "
                              "(a '.' would split the dotted key)")
        if not isinstance(ptable, dict):
            raise ConfigError(f"{where}: expected a table, got {ptable!r}")
        policies[name] = resolve_policy(ptable, where)
    if settings.baseline and settings.baseline not in policies:
        raise ConfigError(f"experiment.baseline: {settings.baseline!r} is not a policy of this "
                          f"experiment{did_you_mean(settings.baseline, policies)}; "
                          f"policies: {', '.join(policies)}")

    grid = _table(table, "grid")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"grid.{key}: expected a non-empty list of values")
    sweep = table.get("sweep")
    if sweep is not None and not isinstance(sweep, dict):
        raise ConfigError("sweep: expected a table")
    exp = Experiment(settings=settings, workload=workload, policies=policies,
                     reader=reader, grid=dict(grid), sweep=copy.deepcopy(sweep),
                     base_dir=Path(base_dir), source_file=source_file)
    # A grid key must name something real: try the first combination now.
    if grid:
        try:
            exp.expand()[0]
        except ConfigError as exc:
            raise ConfigError(f"grid: {exc}") from None
    return exp


def _table(table: dict, key: str) -> dict:
    value = table.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a table, got {value!r}")
    return value


def _build(cls, kwargs: dict, where: str):
    try:
        return cls(**kwargs)
    except MemsimError as exc:
        m = re.search(r"The '(\w+)' parameter", str(exc))
        key = f"{where}.{m.group(1)}" if m else where
        raise ConfigError(f"{key}: {exc}") from None
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from None


# --------------------------------------------------------------------------
# A small TOML writer for resolved configs (nested tables of scalars/lists)
# --------------------------------------------------------------------------


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, Path):
        return json.dumps(str(v), ensure_ascii=False)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    if hasattr(v, "item"):  # numpy scalar
        return _toml_value(v.item())
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _toml_key(k: str) -> str:
    return k if re.match(r"^[A-Za-z0-9_\-]+$", k) else json.dumps(k)


def dumps_toml(table: dict) -> str:
    """Serialise nested dicts of scalars and lists to TOML (round-trips with tomllib)."""
    lines: list[str] = []

    def emit(prefix: list[str], node: dict) -> None:
        scalars = {k: v for k, v in node.items() if not isinstance(v, dict)}
        tables = {k: v for k, v in node.items() if isinstance(v, dict)}
        # small component tables (with 'kind') read better inline
        inline = {k: v for k, v in tables.items()
                  if "kind" in v and not any(isinstance(x, dict) for x in v.values())}
        if prefix and (scalars or inline or not tables):
            lines.append(f"\n[{'.'.join(_toml_key(p) for p in prefix)}]")
        for k, v in scalars.items():
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
        for k, v in inline.items():
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
        for k, v in tables.items():
            if k not in inline:
                emit(prefix + [k], v)

    emit([], table)
    return "\n".join(lines).lstrip("\n") + "\n"
