"""Experiment configs: TOML files, dotted keys, overrides, grids and resolution.

One dotted key syntax (``policies.hivemind.decay.half_life_days``) is used in
TOML, in ``--set KEY=VALUE``, in sweep parameter names and in result columns.
Configs are parsed as data (``tomllib``), never evaluated.

An experiment file has these tables::

    [experiment]        name, seed, replicates, description, baseline, budgets,
                        plugins (modules that register components, imported
                        first), and the engine settings of
                        :class:`memsim.engine.SimSettings`
    [workload]          synthetic knobs, or ``source = "DIR"`` to replay a stream
                        (``importer``, ``notes``, ``embedder`` for data imported on load)
                        (``source = "data:locomo"``: a data set from ``memsim data get``)
    [reader]            the reader model (``kind = "positional"`` ...)
    [policies.NAME]     ``preset = "..."`` and/or one entry per slot
    [grid]              "dotted.key" = [values ...]: one run per combination
    [sweep]             an Optuna search (see :mod:`memsim.sweep`)
    [advise]            what ``memsim advise`` tunes (see :mod:`memsim.tuning.advice`)

*Resolution* fills every default so that the resolved table (written as
``config.toml`` in the run folder) reproduces the run exactly.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import numpy as np
import tomli_w

from memsim.data.embed import check_embedder
from memsim.data.datasets import (DATA_PREFIX, DataError, content_hash, dataset as data_set,
                                  resolve as resolve_data)
from memsim.engine import SimSettings
from memsim.engine.settings import splits_ticks
from memsim.data.importers import load_source
from memsim.core.errors import ConfigError, MemsimError
from memsim.core.params import (Interval, Validated, apply_override, as_path, attribute_overrides,
                                 attribution, check_keys, did_you_mean, override_text, toml_plain,
                                 short_repr, split_key)
from memsim.policies import Policy, resolve_policy
from memsim.policies.plugins import check_module_names, import_plugins
from memsim.evaluation.reader import reader_from_config
from memsim.data.workload import SyntheticWorkload, slot_lead_days

__all__ = [
    "Experiment",
    "StreamSource",
    "SOURCE_KEYS",
    "TOP_LEVEL",
    "load_experiment",
    "experiment_from_dict",
    "apply_override",
    "attribute_overrides",
    "parse_override",
    "check_overrides",
    "experiment_with_overrides",
    "did_you_mean",
    "dumps_toml",
    "config_hash",
    "MAX_CONFIG_BYTES",
    "MAX_TOKENS_BUDGET",
    "MAX_CANDIDATES",
    "MAX_NAME_CHARS",
    "max_runs",
    "max_stream_gib",
    "estimate_stream_bytes",
    "import_run_plugins",
]

TOP_LEVEL = ("experiment", "workload", "reader", "policies", "grid", "sweep", "advise")

# --------------------------------------------------------------------------
# Limits: what a config may ask for before anything runs
# --------------------------------------------------------------------------

#: Largest experiment file memsim reads (bytes): a config is a few KiB.
MAX_CONFIG_BYTES = 1 << 20
#: Largest ``experiment.budget_tokens`` and ``experiment.budgets`` entry (2**40).
MAX_TOKENS_BUDGET = 1 << 40
#: Largest ``candidates`` (experiment or policy): the top-C the engine keeps per query.
MAX_CANDIDATES = 1 << 20
#: Longest ``experiment.name`` (it is part of the run folder's name).
MAX_NAME_CHARS = 120
#: Runs a ``[grid]`` may expand to, unless ``MEMSIM_MAX_RUNS`` says otherwise.
DEFAULT_MAX_RUNS = 10_000
#: GiB a synthetic stream may take, unless ``MEMSIM_MAX_STREAM_GB`` says otherwise.
DEFAULT_MAX_STREAM_GIB = 8.0


def _env_limit(name: str, default: float, integer: bool) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected a {'whole ' if integer else ''}number") from None
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"{name}={raw!r}: expected a number > 0")
    return value


def max_runs() -> int:
    """Runs a ``[grid]`` may expand to: ``MEMSIM_MAX_RUNS``, default 10,000."""
    return int(_env_limit("MEMSIM_MAX_RUNS", DEFAULT_MAX_RUNS, integer=True))


def max_stream_gib() -> float:
    """GiB a synthetic stream may take, generated and replayed
    (:func:`estimate_stream_bytes`): ``MEMSIM_MAX_STREAM_GB``, default 8."""
    return float(_env_limit("MEMSIM_MAX_STREAM_GB", DEFAULT_MAX_STREAM_GIB, integer=False))


# --------------------------------------------------------------------------
# Overrides: --set KEY=VALUE
# --------------------------------------------------------------------------

_BARE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/:]*$")


def check_overrides(overrides: Any) -> None:
    """Refuse ``overrides`` that are neither a dict nor a list of ``"KEY=VALUE"``
    strings (the Python API's ``overrides=``, the command line's ``--set``).

    Raises
    ------
    ConfigError
        One string (it would be read character by character, each a
        mistake of its own) or any other type, saying how to write it.
    """
    if overrides is None or isinstance(overrides, dict):
        return
    if isinstance(overrides, str):
        raise ConfigError(f"overrides: a list of 'KEY=VALUE' strings or a dict, not one "
                          f"string: write overrides=[{overrides!r}]")
    if not isinstance(overrides, (list, tuple)):
        raise ConfigError(f"overrides: a list of 'KEY=VALUE' strings or a dict, got "
                          f"{type(overrides).__name__} {short_repr(overrides)}")
    for item in overrides:
        if not isinstance(item, str):
            raise ConfigError(f"overrides: a list of 'KEY=VALUE' strings or a dict, got "
                              f"{short_repr(item)} in the list")


def experiment_with_overrides(exp: Experiment | str | Path,
                              overrides: list[str] | dict | None) -> Experiment:
    """``exp`` with ``overrides`` applied: an experiment file read by
    :func:`load_experiment` (every mistake reported at once), or an
    :class:`Experiment` given (:meth:`Experiment.with_overrides`); the
    overrides checked first (:func:`check_overrides`)."""
    check_overrides(overrides)
    if isinstance(exp, dict):
        raise ConfigError("expected an Experiment or the path of an experiment file, got a "
                          "dict: build the Experiment with experiment_from_dict(table)")
    if not isinstance(exp, Experiment):
        return load_experiment(as_path(exp, "experiment"), overrides)
    if overrides:
        return exp.with_overrides(dict(overrides) if isinstance(overrides, dict)
                                  else dict(parse_override(o) for o in overrides))
    return exp


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``KEY=VALUE``; VALUE is a TOML value, or a bare word taken as a string."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE")
    key, raw = text.split("=", 1)
    key, raw = key.strip(), raw.strip()
    try:
        parts = split_key(key) if key else []
    except ConfigError as exc:
        raise ConfigError(f"--set {exc}") from None
    if not parts or any(not part for part in parts):
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
IMPORTERS = ("locomo", "trace")
IMPORT_NOTES = ("turns", "observations", "summaries")
#: The keys of a ``[workload]`` that replays a stream (``source = ...``).
SOURCE_KEYS = ("source", "source_hash", "importer", "notes", "embedder")


@dataclass(frozen=True)
class StreamSource:
    """Replay a stream from disk instead of generating one: a stream folder,
    or a real trace imported on load (``importer = "locomo"``, with ``notes``
    saying what a note is; ``importer = "trace"``: a memory-layer log in
    memsim's trace format, :mod:`memsim.data.importers.trace`)."""

    path: Path
    importer: str | None = None
    notes: str = "turns"
    #: ``[workload] embedder`` (:mod:`memsim.data.embed`); None: the importer's default
    embedder: str | None = None
    #: ``"data:NAME"`` when the config named a data set (``path`` is its cached file)
    ref: str | None = None

    def to_config(self) -> dict:
        """``source`` (an absolute path, or the ``data:NAME`` it was named by),
        ``source_hash`` (of its content) and the importer's settings.
        :func:`config_hash` hashes the content, not the path, so a stream moved
        or reached from another folder keeps its run hash."""
        out: dict[str, Any] = {"source": self.ref or str(self.path),
                               "source_hash": self.content_hash()}
        if self.importer is not None:
            out["importer"] = self.importer
        if self.importer == "locomo":
            out["notes"] = self.notes
        if self.embedder is not None:
            out["embedder"] = self.embedder
        return out

    def content_hash(self) -> str:
        """``sha256:<hex>`` of the source's bytes (a folder: every file, by
        relative path); cached while no file's size or mtime changes."""
        return _content_hash(Path(self.path))

    def load(self):
        """Read (or import) the stream."""
        return load_source(self.path, self.importer, notes=self.notes, embedder=self.embedder)


def _content_hash(path: Path) -> str:
    try:
        return content_hash(path)
    except OSError as exc:
        raise ConfigError(f"workload.source: {path}: cannot read: {exc.strerror or exc}") from None


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
        When uses are applied, for policies whose ``feedback.timing`` is
        "experiment": after each tick, or before the next query.
    retention_period_days : float
        Period of the retention sweeps.
    save_rankings : bool
        Keep every query's top-C ranking (``rankings.parquet``).
    max_tick_cells : int
        A tick's (query, note) cells replayed at once, about, at most (see
        :class:`~memsim.engine.SimSettings`). Written to the resolved config
        only when not the default.
    plugins : tuple of str
        Modules imported before the rest of the config is validated, so that
        the components they register can be named (``["my_package.my_decays"]``;
        :mod:`memsim.policies.plugins`). Written to the resolved config only
        when not empty.
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
    max_tick_cells: int = SimSettings.max_tick_cells
    plugins: tuple = ()

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
        if len(self.name) > MAX_NAME_CHARS:
            self._fail("name", f"at most {MAX_NAME_CHARS} characters long",
                       f"{self.name[:20]}... ({len(self.name)} characters)")
        for b in self.budgets:
            if not Interval(1, MAX_TOKENS_BUDGET, integer=True).check(b):
                self._fail("budgets", f"a list of ints from 1 to {MAX_TOKENS_BUDGET} (2**40)",
                           list(self.budgets))
        # a budget listed twice makes two arms of the same name and budget,
        # whose queries the reports cannot pair
        if len(set(self.budgets)) != len(self.budgets):
            self._fail("budgets", "a list of distinct budgets (each at most once)",
                       list(self.budgets))
        # built here, so that an invalid engine setting fails on construction
        object.__setattr__(self, "_sim", SimSettings(
            budget_tokens=self.budget_tokens, candidates=self.candidates,
            tick_days=self.tick_days, feedback_mode=self.feedback_mode,
            retention_period_days=self.retention_period_days,
            save_rankings=self.save_rankings, max_tick_cells=self.max_tick_cells))
        # bounded so that token sums stay exact in the engine's float64/int64
        if self.budget_tokens > MAX_TOKENS_BUDGET:
            self._fail("budget_tokens", f"at most {MAX_TOKENS_BUDGET} (2**40)",
                       self.budget_tokens)
        if self.candidates > MAX_CANDIDATES:
            self._fail("candidates", f"at most {MAX_CANDIDATES} (2**20)", self.candidates)

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
        for key, value in kwargs.items():
            # TOML integers are unbounded in tomllib; float() of a huge one overflows
            values = value if isinstance(value, list) else [value]
            if any(isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 2**63
                   for v in values):
                raise ConfigError(f"{where}.{key}: {value!r} is beyond a 64-bit integer")
        if "plugins" in kwargs:
            kwargs["plugins"] = check_module_names(kwargs["plugins"], f"{where}.plugins")
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
    #: the ``[advise]`` table, as written (read by :mod:`memsim.tuning.advice`)
    advise: dict | None = None
    source_file: str = ""
    #: the ``[policies.NAME]`` tables as written (after ``--set``): a grid or
    #: override of a policy's ``preset`` starts from these, not from the
    #: resolved table, whose slots (every one spelled out) would override it
    policy_tables: dict[str, dict] = field(default_factory=dict, repr=False, compare=False)

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
        if self.settings.plugins:
            exp["plugins"] = list(self.settings.plugins)
        else:  # a config without plugins keeps its table (and its hash)
            del exp["plugins"]
        if self.settings.max_tick_cells == SimSettings.max_tick_cells:
            del exp["max_tick_cells"]  # (the same: a default config keeps its hash)
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
        if self.advise is not None:
            out["advise"] = copy.deepcopy(self.advise)
        return out

    def hash8(self) -> str:
        return config_hash(self.to_config())

    def n_runs(self) -> int:
        """How many runs :meth:`expand` makes (the product of the grid's lengths)."""
        return math.prod(len(v) for v in self.grid.values()) if self.grid else 1

    def expand(self, limit: int | None = None) -> list[Experiment]:
        """One experiment per combination of the ``[grid]`` (itself if none);
        the first ``limit`` only when given.

        Raises
        ------
        ConfigError
            A combination's mistakes, each message prefixed with the file
            (:attr:`source_file`) and ``grid:``, as loading the file
            prefixes the first combination's.
        """
        try:
            return self._expand(limit)
        except ConfigError as exc:
            prefix = f"{self.source_file}: grid: " if self.source_file else "grid: "
            raise exc.prefixed(prefix) from None

    def _expand(self, limit: int | None = None) -> list[Experiment]:
        """:meth:`expand`, its errors not prefixed."""
        if not self.grid:
            return [self]
        keys = list(self.grid)
        out = []
        base = self._table_for(keys)
        base.pop("grid", None)
        combos = itertools.product(*(self.grid[k] for k in keys))
        short = _short_keys(keys)
        # every combination's mistakes, each message once (one bad value
        # fails every combination that holds it)
        messages: dict[str, None] = {}
        first: ConfigError | None = None
        for combo in itertools.islice(combos, limit):
            table = copy.deepcopy(base)
            label = []
            try:
                for k, v in zip(keys, combo):
                    _override(table, k, v, "")  # (expand() says "grid: ")
                    label.append(f"{short[k]}={v}")
                table["experiment"]["name"] = _run_name(self.name, "_".join(label))
                out.append(experiment_from_dict(table, base_dir=self.base_dir,
                                                source_file=self.source_file))
            except ConfigError as exc:
                first = first or exc
                messages.update(dict.fromkeys(exc.errors))
                if len(messages) >= _MAX_GRID_MESSAGES:
                    break
        if first is not None:  # one mistake keeps its type (ParameterError ...)
            raise first if list(messages) == first.errors else ConfigError(errors=list(messages))
        return out

    def single(self, command: str, *, same: Callable[[Experiment], Any] | None = None
               ) -> Experiment:
        """The one experiment ``command`` works on: itself without a
        ``[grid]``, else the grid's run when it makes one (a grid narrowed by
        ``--set 'grid."KEY"=[VALUE]'``). A grid of several runs is refused
        (naming the file and its keys), unless ``same`` gives every run
        the same value: what the command reads of them is then the same,
        and the first run is returned.

        Raises
        ------
        ConfigError
            A grid of several runs, or a combination's mistakes (:meth:`expand`).
        """
        if not self.grid:
            return self
        runs = self.expand()
        if len(runs) == 1 or (same is not None
                              and all(same(r) == same(runs[0]) for r in runs[1:])):
            return runs[0]
        prefix = f"{self.source_file}: " if self.source_file else ""
        keys = ", ".join(f'"{k}"' for k in self.grid)
        raise ConfigError(
            f"{prefix}grid: {len(runs)} runs; {command} works on one: choose each key's value "
            f"with --set 'grid.\"KEY\"=[VALUE]' (keys: {keys}), run one of "
            "Experiment.expand()'s experiments, or remove the [grid] table")

    def with_overrides(self, overrides: dict[str, Any]) -> Experiment:
        table = self._table_for(list(overrides))
        for k, v in overrides.items():
            _override(table, k, v, "--set")
        return experiment_from_dict(table, base_dir=self.base_dir, source_file=self.source_file)

    def _table_for(self, keys: list[str]) -> dict:
        """The resolved table to apply overrides of ``keys`` to. A policy whose
        ``preset`` one of them sets keeps its table as written: the preset
        then fills every slot the user did not write, as in a file."""
        table = self.to_config()
        for key in keys:
            name = _preset_key(key)
            written = self._written_policy(name) if name is not None else None
            if written is not None:
                table["policies"][name] = written
        if "experiment.candidates" in keys:
            # a policy without candidates of its own takes the experiment's:
            # the resolved table spells the old value out, which would keep it
            for name, pol in self.policies.items():
                if pol.candidates is None:
                    table["policies"][name].pop("candidates", None)
        return table

    def _written_policy(self, name: str) -> dict | None:
        """A copy of policy ``name``'s table as written, or None when there is
        none or it no longer gives the policy (an experiment whose policies
        were replaced): the resolved table is used then."""
        written = self.policy_tables.get(name)
        pol = self.policies.get(name)
        if not isinstance(written, dict) or pol is None:
            return None
        try:
            same = resolve_policy(written, f"policies.{name}").to_config() == pol.to_config()
        except ConfigError:
            same = False
        return copy.deepcopy(written) if same else None


def _preset_key(key: str) -> str | None:
    """The policy name of a ``policies.NAME.preset`` key, else None."""
    parts = split_key(key)
    if len(parts) == 3 and parts[0] == "policies" and parts[2] == "preset":
        return parts[1]
    return None


#: the most distinct mistakes a grid's combinations report at once
_MAX_GRID_MESSAGES = 20

#: the longest experiment name (a part of the run folder's name)
MAX_NAME = 120


def _name_text(text: str) -> str:
    """``text`` with each run of characters a folder name should not hold as ``-``."""
    return re.sub(r"[^A-Za-z0-9_.\-]+", "-", text)


def _safe_name(text: str) -> str:
    return _name_text(text)[:MAX_NAME]


def _short_keys(keys: list[str]) -> dict[str, str]:
    """Each grid key's label: the fewest last parts of it that no other grid
    key ends with (``half_life_days``; ``a.decay.half_life_days`` beside
    ``b.decay.half_life_days``)."""
    parts = {k: split_key(k) for k in keys}
    out = {}
    for k, p in parts.items():
        n = 1
        while n < len(p) and any(q[-n:] == p[-n:] for o, q in parts.items() if o != k):
            n += 1
        out[k] = ".".join(p[-n:])
    return out


def _run_name(name: str, label: str) -> str:
    """A grid run's name: ``NAME_LABEL``; past :data:`MAX_NAME` characters
    the experiment's name is cut first (the label tells the runs apart),
    and a cut name ends with 8 hex digits of the whole one, so that no two
    combinations share a name."""
    full = _name_text(f"{name}_{label}")
    if len(full) <= MAX_NAME:
        return full
    tag = "-" + hashlib.sha256(full.encode()).hexdigest()[:8]
    room = MAX_NAME - len(tag)
    cut_label = _name_text(label)
    head = full[:max(0, room - len(cut_label) - 1)]
    return ((f"{head}_{cut_label}" if head else cut_label)[:room]) + tag


def config_hash(table: dict) -> str:
    """First 8 hex digits of the SHA-256 of the canonical JSON of a table.

    A replayed stream counts by its content: when ``workload`` holds a
    ``source_hash``, its ``source`` path is left out of the hash.
    """
    wl = table.get("workload") if isinstance(table, dict) else None
    if isinstance(wl, dict) and "source_hash" in wl:
        table = {**table, "workload": {k: v for k, v in wl.items() if k != "source"}}
    blob = json.dumps(table, sort_keys=True, default=_hash_value).encode()
    return hashlib.sha256(blob).hexdigest()[:8]


def _hash_value(v: Any) -> Any:
    """A value JSON cannot write, as :func:`config_hash` hashes it: a numpy
    scalar as the Python number it is (as ``config.toml`` writes it, so a
    config given with ``np.int64(800)`` hashes as the ``800`` it re-runs
    from), anything else as its text (a path)."""
    if isinstance(v, np.generic):
        return v.item()
    return str(v)


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------


def load_experiment(path: str | Path, overrides: list[str] | dict | None = None) -> Experiment:
    """Read an experiment TOML file, apply ``--set`` overrides and validate.

    Raises :class:`ConfigError` with one line naming the file and the key.
    """
    path = as_path(path, "load_experiment(path)")
    text = read_config_file(path)
    if not text.strip():
        raise ConfigError(f"{path}: the experiment file is empty")
    try:
        table = tomllib.loads(text.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    if not isinstance(table.get("experiment", {}), dict):
        raise ConfigError(f"{path}: experiment: expected a table, got "
                          f"{short_repr(table['experiment'])}")
    table.setdefault("experiment", {}).setdefault("name", _safe_name(path.stem))
    # every override that reads and applies is kept; the others are reported
    # with the file's own mistakes
    check_overrides(overrides)
    errors = _Errors()
    applied: list[tuple[str, str]] = []  # (key, "KEY=VALUE" as given)
    if isinstance(overrides, dict):
        items: list = [((k, v), f"{k}={override_text(v)}") for k, v in overrides.items()]
    else:
        items = [(None, text) for text in overrides or []]
    for kv, text in items:  # in the order given, so that the messages are too
        if kv is None:
            kv, text = errors.run(parse_override, text), text.strip()
        if kv is not _FAILED and errors.run(_override, table, *kv, "--set") is not _FAILED:
            applied.append((kv[0], text))
    for key, text in applied:
        errors.run(_check_not_gridded, key, text, table.get("grid"))
    # the overrides' own mistakes name the file, as the file's do
    errors.caught = [exc.with_messages([m if m.startswith(f"{path}: ") else f"{path}: {m}"
                                        for m in exc.errors]) for exc in errors.caught]
    try:
        # relative paths in the file (workload.source) are relative to the file
        exp = experiment_from_dict(table, base_dir=path.absolute().parent,
                                   source_file=str(path))
    except ConfigError as exc:
        errors.caught.append(exc.with_messages(
            [f"{path}: {m}{attribution(m, applied)}" for m in exc.errors]))
    else:
        if not errors.caught:
            return exp
    errors.raise_if_any()
    raise AssertionError("unreachable")  # raise_if_any raised


def _check_not_gridded(key: str, text: str, grid: Any) -> None:
    """Refuse a ``--set`` of a key that ``[grid]`` also sets (that key, a
    table holding it, or a key inside it): the grid sets its values in every
    run, so the override would change nothing."""
    if not isinstance(grid, dict):
        return
    parts = split_key(key)
    if parts[0] == "grid":
        return
    for g in grid:
        try:
            gp = split_key(g)
        except ConfigError:
            continue  # the grid's own check names it
        n = min(len(parts), len(gp))
        if parts[:n] == gp[:n]:
            raise ConfigError(f"--set {text}: {g} is also in [grid], which sets it in every "
                              "run, so this would change nothing; give the grid the values "
                              f"instead (--set 'grid.\"{g}\"=[...]')")


def import_run_plugins(run_dir: str | Path) -> None:
    """Import the modules of a run folder's ``[experiment] plugins`` (its
    ``config.toml``), so that the components its policies name are
    registered before the folder's policies are rebuilt (``memsim report``).
    A folder without a readable config has none.

    Raises
    ------
    ConfigError
        One line naming the config file, the key and the module.
    """
    cfg = Path(run_dir) / "config.toml"
    try:
        table = tomllib.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return  # reading the run reports what is wrong with the folder
    plugins = (table.get("experiment") or {}).get("plugins") if isinstance(
        table.get("experiment"), dict) else None
    if plugins:
        try:
            import_plugins(plugins)
        except ConfigError as exc:
            raise ConfigError(f"{cfg}: {exc}") from None


def read_config_file(path: Path, what: str = "experiment file") -> bytes:
    """The bytes of a config file (``what`` names its kind in messages): a
    regular file of at most :data:`MAX_CONFIG_BYTES` (a device or a FIFO
    would never end)."""
    try:
        if not path.exists():
            raise ConfigError(f"{path}: no such {what}")
        if path.is_dir():
            raise ConfigError(f"{path}: is a folder, not {_article(what)}")
        if not path.is_file():
            raise ConfigError(f"{path}: not a regular file (a device or a pipe?), "
                              f"not {_article(what)}")
        with open(path, "rb") as f:
            text = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_CONFIG_BYTES // 1024} KiB; "
                          f"not {_article(what)}")
    return text


def _article(what: str) -> str:
    return f"{'an' if what[0] in 'aeiou' else 'a'} {what}"


def _at(where: str, key: str) -> str:
    """``--set KEY``, or the key alone where the caller names what set it."""
    return f"{where} {key}" if where else key


def _override(table: dict, key: str, value: Any, where: str) -> None:
    """:func:`apply_override`, refusing a key that runs through a value."""
    node: Any = table
    parts = split_key(key)  # a quoted part is one name: policies."v1.2".decay
    pols = table.get("policies")
    if (parts[0] == "policies" and len(parts) >= 2 and isinstance(pols, dict)
            and parts[1] not in pols and not (len(parts) == 2 and isinstance(value, dict))):
        # a key into a policy the experiment does not have would make a new,
        # half-defined one; a whole table (policies.NAME = {...}) adds one
        raise ConfigError(f"{_at(where, key)}: no policy {parts[1]!r}"
                          f"{did_you_mean(parts[1], pols)} (policies: {', '.join(pols)})")
    for i, part in enumerate(parts[:-1]):
        if not isinstance(node, dict):
            break
        node = node.get(part)
        if node is not None and not isinstance(node, (dict, str)):
            raise ConfigError(f"{_at(where, key)}: {'.'.join(parts[:i + 1])} is "
                              f"{short_repr(node)}, not a table")
    try:
        apply_override(table, key, value)
    except (AttributeError, TypeError):
        raise ConfigError(f"{_at(where, key)}: a part of this key is a value, not a table") from None
    if _preset_key(key) is not None:
        _check_preset_counts(table, key, where)
    if key == "experiment.candidates" and isinstance(pols, dict) and pols and all(
            isinstance(p, dict) and "candidates" in p for p in pols.values()):
        # every policy sets its own top-C (a resolved config.toml spells it
        # out): the experiment's would reach none of them
        raise ConfigError(f"{_at(where, key)}: every policy sets its own candidates (as a resolved "
                          "config.toml does), so this would change nothing; set "
                          "policies.NAME.candidates instead")


def _check_preset_counts(table: dict, key: str, where: str) -> None:
    """Refuse a ``policies.NAME.preset`` override that would change nothing:
    the policy's table spells out every slot (a resolved ``config.toml``
    does), and the table's keys override its preset. Ignoring the preset
    silently would run the old policy under the new preset's name."""
    name = split_key(key)[1]
    ptable = table["policies"][name]
    preset = ptable.get("preset") if isinstance(ptable, dict) else None
    if not isinstance(preset, str):
        return  # not a preset name: the validation says so
    slots = {k: v for k, v in ptable.items() if k != "preset"}
    try:
        ignored = (resolve_policy(ptable, key).to_config()
                   == resolve_policy(slots, key).to_config())
        # (a preset that is the defaults cannot be told apart; none is)
        ignored = ignored and (resolve_policy({"preset": preset}, key).to_config()
                               != resolve_policy({}, key).to_config())
    except ConfigError:
        return  # the validation names the mistake
    if ignored:
        whole = (f"--set 'policies.{name}={{preset = \"{preset}\"}}'" if where == "--set"
                 else f'"policies.{name}" = [{{preset = "{preset}"}}, ...]')
        raise ConfigError(
            f"{_at(where, key)}: policies.{name} spells out every slot the preset fills (as a "
            f"resolved config.toml does), so preset {preset!r} would change nothing; "
            f"replace the whole table instead: {whole}")


class _Errors:
    """Collects the :class:`ConfigError` of each independent part of a config,
    so that one run reports every mistake; a part that failed yields
    :data:`_FAILED` and the checks that depend on it are skipped (no
    follow-on errors)."""

    def __init__(self) -> None:
        self.caught: list[ConfigError] = []

    def run(self, fn, *args, **kwargs) -> Any:
        try:
            return fn(*args, **kwargs)
        except ConfigError as exc:
            self.caught.append(exc)
            return _FAILED

    def raise_if_any(self) -> None:
        if len(self.caught) == 1:
            raise self.caught[0]  # one mistake keeps its type (ParameterError ...)
        if self.caught:
            raise ConfigError(errors=[m for exc in self.caught for m in exc.errors])


_FAILED = object()


def experiment_from_dict(table: dict, *, base_dir: str | Path = ".",
                         source_file: str = "") -> Experiment:
    """Validate a config table and build the :class:`Experiment`.

    Each independent part (the top-level keys, ``[experiment]``,
    ``[workload]``, ``[reader]``, each policy, the baseline, ``[grid]``,
    the types of ``[sweep]`` and ``[advise]``) is validated even when an
    earlier one failed; a check that needs an earlier part runs only when
    that part is valid. The plugins are imported first, and a plugin that
    fails to import stops the validation at once (the rest would only report
    the components it registers as unknown).

    Raises
    ------
    ConfigError
        Every mistake found, one message each (:attr:`ConfigError.errors`).
    """
    if not isinstance(table, dict):
        raise ConfigError("the config must be a table")
    errors = _Errors()
    for key in table:
        errors.run(check_keys, (key,), TOP_LEVEL, "")
    # the plugins first: the rest of the config may name their components
    exp_table = errors.run(_table, table, "experiment")
    plugins = exp_table.get("plugins") if exp_table is not _FAILED else None
    if plugins is not None:
        if errors.run(lambda: import_plugins(check_module_names(plugins, "experiment.plugins"))
                      ) is _FAILED:
            errors.raise_if_any()
    settings = (errors.run(ExperimentSettings.from_table, exp_table)
                if exp_table is not _FAILED else _FAILED)
    wl = errors.run(_table, table, "workload")
    cells = (settings.max_tick_cells if settings is not _FAILED
             else SimSettings.max_tick_cells)
    workload = (errors.run(_workload_from, wl, base_dir, cells) if wl is not _FAILED
                else _FAILED)
    reader = errors.run(lambda: reader_from_config(_table(table, "reader"), "reader"))

    pols_table = errors.run(_table, table, "policies")
    policies: dict[str, Any] = {}
    if pols_table is not _FAILED:
        if not pols_table:
            errors.run(_raise, "policies: an experiment needs at least one [policies.NAME] table")
        for name, ptable in pols_table.items():
            policies[name] = errors.run(_policy_from, name, ptable)
    # the baseline is checked against the policy names even when a policy
    # failed; a baseline of the wrong type is the [experiment] check's error
    baseline = exp_table.get("baseline") if exp_table is not _FAILED else None
    if isinstance(baseline, str) and pols_table is not _FAILED and pols_table:
        errors.run(_check_baseline, baseline, pols_table)

    if isinstance(workload, SyntheticWorkload) and settings is not _FAILED:
        # a policy that cannot take a tick in parts: the replay holds whole ticks
        whole = [name for name, p in policies.items() if isinstance(p, Policy)
                 and not splits_ticks(p, settings.sim)]
        if whole:
            errors.run(_check_stream_size, workload, whole[0])
    grid = errors.run(_grid_from, table)
    sweep = table.get("sweep")
    if sweep is not None and not isinstance(sweep, dict):
        errors.run(_raise, "sweep: expected a table")
    advise = table.get("advise")
    if advise is not None and not isinstance(advise, dict):
        errors.run(_raise, "advise: expected a table")
    errors.raise_if_any()
    exp = Experiment(settings=settings, workload=workload, policies=policies,
                     reader=reader, grid=dict(grid), sweep=copy.deepcopy(sweep),
                     base_dir=Path(base_dir), source_file=source_file,
                     advise=copy.deepcopy(advise), policy_tables=copy.deepcopy(pols_table))
    # A grid key must name something real: try the first combination now
    # (the caller names the file; expand() names it for the others).
    if grid:
        try:
            exp._expand(limit=1)
        except ConfigError as exc:
            raise exc.prefixed("grid: ") from None
    return exp


def _raise(message: str) -> None:
    raise ConfigError(message)


def _workload_from(wl: dict, base_dir: str | Path,
                   max_tick_cells: int = SimSettings.max_tick_cells) -> Any:
    """The ``[workload]`` table: a :class:`StreamSource` or a synthetic
    workload (its memory checked for policies that update per query: ticks
    in parts of about ``max_tick_cells``)."""
    if "source" not in wl:
        workload = SyntheticWorkload.from_config(wl, "workload")
        _check_stream_size(workload, max_tick_cells=max_tick_cells)
        return workload
    extra = [k for k in wl if k not in SOURCE_KEYS]
    if extra:
        # named by the table: the mistake is either key, 'source' or a knob
        raise ConfigError(f"workload: a workload with 'source' replays a stream and takes no "
                          f"generator knobs ({', '.join(extra)}): give one or the other")
    if not isinstance(wl["source"], str) or not wl["source"]:
        raise ConfigError(f"workload.source: expected a folder path, got {wl['source']!r}")
    importer = wl.get("importer")
    ref = wl["source"] if wl["source"].startswith(DATA_PREFIX) else None
    if ref is not None:
        # a data set fetched by `memsim data get`: its cached file, and its importer
        try:
            importer = importer if "importer" in wl else data_set(ref[len(DATA_PREFIX):]).importer
            data_path = resolve_data(ref)
        except DataError as exc:
            raise ConfigError(f"workload.source: {exc}") from None
        if importer is None:
            raise ConfigError(f"workload.source: {ref} is not a stream (it is a file for "
                              "memsim calibrate); give a stream folder, a trace or data:locomo")
    if importer is not None and importer not in IMPORTERS:
        raise ConfigError(f"workload.importer: unknown importer {importer!r}; "
                          f"allowed: {', '.join(IMPORTERS)}")
    notes = wl.get("notes", "turns")
    if notes not in IMPORT_NOTES or ("notes" in wl and importer != "locomo"):
        raise ConfigError(f"workload.notes: must be one of {', '.join(IMPORT_NOTES)}, "
                          f"with importer = \"locomo\"; got {notes!r}")
    embedder = wl.get("embedder")
    if embedder is not None:
        check_embedder(embedder, "workload.embedder")
        if importer is None or (importer == "locomo" and embedder == "vectors"):
            raise ConfigError("workload.embedder: only for data imported on load: 'bm25' or "
                              "'wordllama' with importer = \"locomo\", any with importer = "
                              f"\"trace\"; got {embedder!r}"
                              + (" without an importer" if importer is None else ""))
    src = data_path if ref is not None else Path(wl["source"]).expanduser()
    src = src if src.is_absolute() else Path(base_dir).absolute() / src
    if not src.exists():
        raise ConfigError(f"workload.source: {src}: no such file or folder")
    workload = StreamSource(src, importer, notes, embedder=embedder, ref=ref)
    if "source_hash" in wl and wl["source_hash"] != workload.content_hash():
        raise ConfigError(f"workload.source_hash: the content of {src} changed since this "
                          "config was written (it would not reproduce the run); remove "
                          "source_hash to run on the new content")
    return workload


def _policy_from(name: str, ptable: Any) -> Policy:
    """One ``[policies.NAME]`` table, resolved over its preset."""
    where = f"policies.{name}"
    if not isinstance(name, str):  # (a dict built in Python: TOML keys are text)
        raise ConfigError(f"{where}: a policy name is text, got {type(name).__name__} "
                          f"{name!r}")
    if not re.match(r"^[A-Za-z0-9_\-]+$", name):
        raise ConfigError(f"{where}: policy names use letters, digits, '_' or '-' "
                          "(a '.' would split the dotted key)")
    if not isinstance(ptable, dict):
        raise ConfigError(f"{where}: expected a table, got {ptable!r}")
    policy = resolve_policy(ptable, where)
    cands = getattr(policy, "candidates", None)
    if cands is not None and cands > MAX_CANDIDATES:
        raise ConfigError(f"{where}.candidates: must be at most {MAX_CANDIDATES} (2**20); "
                          f"got {cands}")
    return policy


def _check_baseline(baseline: str, policies: dict) -> None:
    if baseline and baseline not in policies:
        names = [str(p) for p in policies]
        raise ConfigError(f"experiment.baseline: {baseline!r} is not a policy of this "
                          f"experiment{did_you_mean(baseline, names)}; "
                          f"policies: {', '.join(names)}")


_NONE = object()


def _equal_values(a: Any, b: Any) -> bool:
    """Whether two TOML values are equal as values (``500`` and ``500.0``,
    ``1`` and ``true``: one run each way; two NaNs too)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - values that cannot be compared differ
        return False


def _grid_from(table: dict) -> dict:
    """The ``[grid]`` table: non-empty lists, at most :func:`max_runs` combinations."""
    grid = _table(table, "grid")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"grid.{key}: expected a non-empty list of values")
        seen: list = []
        for v in values:
            same = next((w for w in seen if _equal_values(v, w)), _NONE)
            if same is not _NONE:
                again = (f"{short_repr(v)} is given twice" if type(v) is type(same) else
                         f"{short_repr(v)} equals {short_repr(same)}, given before")
                raise ConfigError(f"grid.{key}: {again} (each value at most once: the same "
                                  "run would run twice, a whole number being its float)")
            seen.append(v)
    n_runs = math.prod(len(v) for v in grid.values()) if grid else 1
    if n_runs > max_runs():
        raise ConfigError(f"grid: {n_runs:,} combinations, more than the limit of "
                          f"{max_runs():,} runs (set MEMSIM_MAX_RUNS to allow more)")
    return grid


#: Memory of a Python process with memsim's libraries loaded, before any stream.
PROCESS_BYTES = 256 * 2**20
#: Bytes per note of a generated stream besides its embedding: the notes table
#: (16 columns; 155 bytes measured at 5 actors) and the note's share of the qrels.
STREAM_BYTES_PER_NOTE = 168
#: Bytes per query besides its embedding: the queries table, qrels, actor codes.
STREAM_BYTES_PER_QUERY = 256
#: Bytes per note the generator holds besides the stream at its peak: the
#: notes table it hands over while the stream's own copy is checked and built
#: (101 measured at 10M notes).
GENERATION_BYTES_PER_NOTE = 120
#: Bytes per note the generator draws and then drops: the notes a class's
#: chains write before the window (``memsim.data.workload.slot_lead_days``;
#: 57 measured with 9M of them).
DRAWN_BYTES_PER_NOTE = 64
#: Bytes per day of ``horizon_days`` that ``arrival = "weekly"`` draws
#: (each day's rate and count: 40 measured).
WEEKLY_BYTES_PER_DAY = 48
#: Bytes per note of the replay's own per-note state (codes, times, norms,
#: decay and use state of one arm): 141 measured at 3M notes with one arm
#: (Hivemind's preset with ai-memory retention, a 3-query tick's cells
#: included).
REPLAY_BYTES_PER_NOTE = 150
#: Bytes per (query, live note) cell of the tick being replayed: its dense
#: query x note matrices (products, similarity, validity and the packer's
#: float64 copy of the similarity), measured at 1M notes as the rise of the
#: peak from a 4-query to a 46-query tick (21 bytes per cell).
REPLAY_BYTES_PER_CELL = 21


def _largest_tick(wl: Any) -> float:
    """Queries of the busiest one-day tick: its mean plus 3 standard deviations
    (a horizon under a day: all its queries)."""
    total = float(wl.queries_per_day) * float(wl.horizon_days)
    if getattr(wl, "age_mode", "natural") == "zero":
        return total  # every query at t = 0: one tick
    rate = float(wl.queries_per_day)
    arrival = getattr(wl, "arrival", "steady")
    if arrival == "weekly":
        rate *= 7.0 / (5.0 + 2.0 * min(float(wl.weekend_factor), 1.0))
    mean = min(rate, total)
    spread = mean * float(wl.burst_size) if arrival == "bursty" else mean
    return mean + 3.0 * math.sqrt(spread) + 1.0


def estimate_stream_bytes(wl: Any, parts: bool = True,
                          max_tick_cells: int = SimSettings.max_tick_cells) -> float:
    """Rough peak memory (bytes) of generating ``wl``'s synthetic stream and replaying it.

    With ``N ~ notes_per_day x (horizon_days + backfill_days)`` notes, ``Q ~
    queries_per_day x horizon_days`` queries and ``E = 4 x embedding_dim``
    bytes of float32 embedding per row, the stream takes ``S = N (E +``
    :data:`STREAM_BYTES_PER_NOTE` ``) + Q (E +`` :data:`STREAM_BYTES_PER_QUERY`
    ``)`` plus 48 bytes per organic access. Generating it holds ``S + N x``
    :data:`GENERATION_BYTES_PER_NOTE` at most (the generator writes into the
    stream's final arrays, a block of rows at a time), plus
    :data:`DRAWN_BYTES_PER_NOTE` per note its classes' chains draw before the
    window and drop (:func:`_dropped_notes`) and :data:`WEEKLY_BYTES_PER_DAY`
    per day of a weekly arrival's horizon; replaying it holds ``S
    + N x`` :data:`REPLAY_BYTES_PER_NOTE` ``+ K x`` :data:`REPLAY_BYTES_PER_CELL`,
    ``K`` the (query, note) cells of its largest batch, every note counted
    live: ``B x N``, ``B`` the queries of the busiest one-day tick (mean + 3
    sd; all queries under ``age_mode = "zero"``), or, with ``parts`` (every
    policy can take a tick in parts: :func:`memsim.engine.batch.replay_batches`),
    at most ``max_tick_cells`` (or 3 queries' cells when that is more). The
    estimate is :data:`PROCESS_BYTES` plus the larger of the two, plus
    ``n_topics`` centroids and ``n_actors`` names. Computed in floats, so
    absurd knobs give a huge number, never an error.
    """
    span = float(wl.horizon_days) + float(wl.backfill_days)
    notes = float(wl.notes_per_day) * span
    queries = float(wl.queries_per_day) * float(wl.horizon_days)
    accesses = float(getattr(wl, "accesses_per_day", 0.0)) * span
    vec = 4.0 * float(wl.embedding_dim)
    stream = (notes * (vec + STREAM_BYTES_PER_NOTE) + queries * (vec + STREAM_BYTES_PER_QUERY)
              + accesses * 48)
    generation = (notes * GENERATION_BYTES_PER_NOTE
                  + sum(_dropped_notes(wl).values()) * DRAWN_BYTES_PER_NOTE
                  + _weekly_days(wl) * WEEKLY_BYTES_PER_DAY)
    cells = notes * _largest_tick(wl)
    if parts:
        cells = min(cells, max(float(max_tick_cells), 3.0 * notes))
    replay = notes * REPLAY_BYTES_PER_NOTE + cells * REPLAY_BYTES_PER_CELL
    return (PROCESS_BYTES + stream + max(generation, replay)
            + float(wl.n_topics) * (vec + 16) + float(wl.n_actors) * 128)


def _weekly_days(wl: Any) -> float:
    """The days ``arrival = "weekly"`` draws a count for (every day of the
    horizon); none for another arrival."""
    if getattr(wl, "arrival", "") != "weekly":
        return 0.0
    horizon = float(wl.horizon_days)
    return math.ceil(horizon) if math.isfinite(horizon) else math.inf


def _dropped_notes(wl: Any) -> dict[str, float]:
    """The notes the generator draws before the window and drops, in
    expectation, per note class: ``notes_per_day x share_c x lead_c``
    (``memsim.data.workload.slot_lead_days``); none for a workload without
    classes."""
    classes = getattr(wl, "classes", None)
    if classes is None:
        return {}
    shares = classes.note_shares()
    return {c: float(wl.notes_per_day) * shares[c] * slot_lead_days(classes.spec(c))
            for c in shares}


def _check_stream_size(wl: Any, whole: str | None = None,
                       max_tick_cells: int = SimSettings.max_tick_cells) -> None:
    """Refuse a workload whose stream would not fit :func:`max_stream_gib`,
    replayed in ticks in parts of about ``max_tick_cells``, or, with
    ``whole`` (the name of a policy that cannot take a tick in parts:
    :func:`memsim.engine.settings.splits_ticks`), whole ticks at once."""
    est = estimate_stream_bytes(wl, parts=whole is None, max_tick_cells=max_tick_cells)
    limit = max_stream_gib()
    if not est <= limit * 2**30:
        span = float(wl.horizon_days) + float(wl.backfill_days)
        why = ("" if whole is None else
               f"; policy {whole!r} keeps whole ticks (its ranker keeps per-note state, or "
               "its uses come before scoring per tick), so a replay holds every query of a "
               "tick at once (other policies take a tick in parts of [experiment] "
               "max_tick_cells)")
        dropped = _dropped_notes(wl)
        if sum(dropped.values()) * DRAWN_BYTES_PER_NOTE > limit * 2**30 / 2:
            # most of it is chains drawn before the window: name their knob
            worst = max(dropped, key=dropped.__getitem__)
            spec = wl.classes.spec(worst)
            why += (f"; ~{sum(dropped.values()):.3g} notes are drawn before the window and "
                    f"dropped, most of them by workload.classes.{worst} (interval_days "
                    f"{spec.interval_days:g} x notes_per_slot {spec.notes_per_slot:g}: its "
                    "chains start that long before the window)")
        if _weekly_days(wl) * WEEKLY_BYTES_PER_DAY > limit * 2**30 / 2:
            why += (f"; arrival 'weekly' draws a count for each of the "
                    f"~{_weekly_days(wl):.3g} days of horizon_days")
        raise ConfigError(
            f"workload: the stream would take about {est / 2**30:.3g} GiB of memory, "
            f"generated and replayed (~{float(wl.notes_per_day) * span:.3g} notes, "
            f"~{float(wl.queries_per_day) * float(wl.horizon_days):.3g} queries, "
            f"~{_largest_tick(wl):.3g} of them in the busiest day, "
            f"embedding_dim {wl.embedding_dim}, n_topics {wl.n_topics}, n_actors "
            f"{wl.n_actors}{why}); the limit is {limit:g} GiB "
            "(set MEMSIM_MAX_STREAM_GB to raise it)")


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
# Writing resolved configs (tomli-w)
# --------------------------------------------------------------------------


def dumps_toml(table: dict) -> str:
    """Serialise nested dicts of scalars and lists to TOML with ``tomli-w``
    (any string, control characters included, reads back equal with tomllib)."""
    return tomli_w.dumps(toml_plain(table))
