"""Run folders: atomic writes, the manifest, run status and reading a run back.

A run folder (``docs/contracts/run-folder.md``) is ``<out>/<UTC time>_<name>_<hash8>/``:

=================== ============================================================
file                content
=================== ============================================================
config.toml         the resolved experiment: every default, concrete seed
manifest.json       status (running / completed / failed), versions, git commit,
                    argv, timings, error
queries.parquet     one row per (replicate, policy, budget, query): every metric
store.parquet       store size over time per arm
arms.csv            per (replicate, policy, budget): recall_gini, evictions ...
summary.csv         policy x budget x metric: mean, ci_low, ci_high, n
rankings.parquet    top-C rankings, when ``save_rankings = true``
figures/, report.*  the report (memsim report RUN_DIR)
sweep/              a sweep's trials, best configuration and storage
=================== ============================================================

Every file is written to a temporary name and renamed into place
(:func:`write_atomic`), and the manifest says ``completed`` only after all of
them exist: a crashed or killed run never looks complete.

This module sits below the runner, the sweep and the reports: it knows the
folder's files, not how they were produced, so reports and notebooks read a
run (:func:`load_run`) without importing the machinery that ran it.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from memsim.core.params import as_path, did_you_mean, short_repr
from memsim.core.errors import ConfigError
from memsim.core.rng import child_seq, seed_sequence
from memsim.data.datasets import DATA_PREFIX, DataError, content_hash, resolve as resolve_data
from memsim.data.importers import load_source
from memsim.data.stream import export_fingerprint, read_stream
from memsim.evaluation.metrics import MIN_REPLICATES
from .numbers import column_decimals, format_fixed

__all__ = [
    "RunResult",
    "summary_rows",
    "SUMMARY_COLUMNS",
    "RunFolderError",
    "QUERY_KEY_COLUMNS",
    "REQUIRED_COLUMNS",
    "column_problem",
    "read_run_file",
    "Manifest",
    "load_run",
    "run_status",
    "new_run_dir",
    "write_atomic",
    "write_text_atomic",
    "jsonable",
    "pid_alive",
    "proc_start",
    "utc_now",
    "relevant_when_asked",
]

#: Packages whose versions the manifest records.
_VERSIONED = ("memsim", "numpy", "pandas", "scipy", "matplotlib", "optuna", "pyarrow")


# --------------------------------------------------------------------------
# Atomic writes
# --------------------------------------------------------------------------


def write_atomic(path: str | Path, writer: Callable[[Path], None]) -> None:
    """Write ``path`` through ``writer(tmp)``, then rename it into place.

    Parameters
    ----------
    path : path
        The file to write.
    writer : callable
        Called with a temporary path next to ``path``; it writes the whole file.

    Notes
    -----
    The rename is atomic on one file system: a reader sees the old file or the
    new one, never half of it. The temporary name carries the process id so
    that two processes writing the same file do not share a temporary.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        writer(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _export_file(path: Any, what: str) -> Path:
    """The file an export writes, checked before any work: a path, not a
    folder, in a folder that exists (ConfigError naming it, not the
    ``IsADirectoryError`` of the write after the work)."""
    path = as_path(path, f"{what}(path)")
    if path.is_dir():
        raise ConfigError(f"{what}: {path} is a folder; give the file to write")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise ConfigError(f"{what}: {path}: the folder {parent} does not exist (or is a file)")
    return path


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically (see :func:`write_atomic`)."""
    write_atomic(path, lambda p: p.write_text(text, encoding="utf-8"))


# --------------------------------------------------------------------------
# Folders and manifests
# --------------------------------------------------------------------------


def utc_now() -> str:
    """The current UTC time as the manifest writes it (ISO 8601, seconds)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_run_dir(out: str | Path, name: str, hash8: str) -> Path:
    """Create a fresh run folder ``out/<UTC time>_<name>_<hash8>``.

    An existing folder is never reused: a second run in the same second gets
    a ``-2``, ``-3`` ... suffix.

    Raises
    ------
    ConfigError
        If no fresh name could be made.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = f"{stamp}_{name}_{hash8}"
    for k in range(1000):
        path = out / (base if k == 0 else f"{base}-{k + 1}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise ConfigError(f"{out}: could not create a fresh run folder for {base}")


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in _VERSIONED:
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def _git_commit() -> str | None:
    here = Path(__file__).resolve().parent.parent
    try:
        res = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout.strip() or None if res.returncode == 0 else None


def jsonable(x: Any) -> Any:
    """``x`` as strict JSON can hold it (``--json`` outputs): NaN and
    infinities as None, numpy scalars as numbers, frames as lists of records,
    tuples as lists, other objects (paths) as text."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, pd.DataFrame):
        return jsonable(x.to_dict(orient="records"))
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float):
        return x if np.isfinite(x) else None
    if x is None or isinstance(x, (bool, int, str)):
        return x
    return str(x)


class Manifest:
    """The ``manifest.json`` of a run folder, written when created and on each update.

    Parameters
    ----------
    folder : path
        The run folder.
    name : str
        The experiment's name.
    config_hash : str
        The 8 hex digits of the resolved configuration's hash.
    source_file : str
        The experiment file the run came from ("" if none).
    argv : list of str, optional
        The command line (default ``sys.argv``).
    plugins : sequence of str, optional
        The modules the experiment imports to register its components
        (``[experiment] plugins``); recorded as ``plugins`` when not empty.

    Attributes
    ----------
    path : Path
        The run folder.
    data : dict
        The manifest's content; ``status`` starts as ``running``.
    """

    def __init__(self, folder: str | Path, *, name: str, config_hash: str,
                 source_file: str = "", argv: list[str] | None = None,
                 plugins: Sequence[str] = ()):
        self.path = Path(folder)
        self.data: dict[str, Any] = {
            "status": "running",
            "name": name,
            "config_hash": config_hash,
            "source_file": source_file,
            "argv": list(argv if argv is not None else sys.argv),
            "versions": _versions(),
            "git_commit": _git_commit(),
            "started_utc": utc_now(),
            # who is writing: lets a reader tell a live run from a killed one
            "pid": os.getpid(),
            "host": platform.node(),
            "timings_s": {},
        }
        if plugins:
            self.data["plugins"] = list(plugins)
        self.write()

    @property
    def file(self) -> Path:
        """The path of ``manifest.json``."""
        return self.path / "manifest.json"

    def write(self) -> None:
        """Rewrite ``manifest.json`` atomically from :attr:`data`."""
        write_text_atomic(self.file, json.dumps(self.data, indent=2) + "\n")

    def update(self, **kw: Any) -> None:
        """Set keys of the manifest and rewrite it."""
        self.data.update(kw)
        self.write()

    def status_on_disk(self) -> str | None:
        """The ``status`` that ``manifest.json`` holds now (None when it
        cannot be read): what a reader sees, whatever :attr:`data` says (a
        stop may come between setting it and writing it)."""
        try:
            return json.loads(self.file.read_text(encoding="utf-8")).get("status")
        except (OSError, ValueError, AttributeError):
            return None


# --------------------------------------------------------------------------
# Status
# --------------------------------------------------------------------------


def proc_start(pid: int) -> str:
    """Start time of a process (Linux clock ticks since boot), "" if unknown.

    With the pid it tells a live process from a later one that reused its pid.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        # the command name (field 2) may hold spaces and ')': split after the last ')'
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def pid_alive(pid: int, start: str | None = None) -> bool:
    """Whether process ``pid`` of this host still exists.

    Parameters
    ----------
    pid : int
        The process id.
    start : str, optional
        Its :func:`proc_start` when it was recorded: a process with that pid
        but another start time is a later one that reused the pid, and reads
        as gone. None or "" skips this check (as does a host without
        ``/proc``).
    """
    if pid <= 0:  # 0 and negative pids address process groups, never one process
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return False
    return not start or proc_start(pid) in ("", start)


class RunFolderError(ConfigError):
    """A run folder's file is missing, damaged or not what memsim writes.

    The message names the file; the CLI prints it as one line (exit code 2).
    """


def _read_manifest(path: Path) -> dict[str, Any]:
    f = path / "manifest.json"
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: bad JSON or bad UTF-8
        raise RunFolderError(f"{f}: unreadable manifest.json ({exc})") from None
    if not isinstance(data, dict):
        raise RunFolderError(f"{f}: not a run manifest (a JSON {type(data).__name__}, "
                             "not an object)")
    for key, kind in _MANIFEST_SHAPES.items():
        if key in data and data[key] is not None and not isinstance(data[key], kind):
            raise RunFolderError(f"{f}: {key}: expected a JSON {_JSON_NAMES[kind]}, got "
                                 f"{short_repr(data[key])}")
    return data


#: the manifest's keys its readers take apart, and their JSON types
_MANIFEST_SHAPES = {"status": str, "versions": dict, "timings_s": dict, "argv": list,
                    "name": str, "config_hash": str, "error": str, "sweep": dict}
_JSON_NAMES = {str: "string", dict: "object", list: "array"}

#: the tables of a resolved config (``memsim.runs.config.TOP_LEVEL``, which
#: this layer does not import)
_CONFIG_TABLES = ("experiment", "workload", "reader", "policies", "grid", "sweep", "advise")


def _config_problem(config: dict) -> str:
    """What makes a parsed ``config.toml`` no memsim config (a section that
    is not a table), or ``""``."""
    for key in _CONFIG_TABLES:
        if key in config and not isinstance(config[key], dict):
            return f"[{key}]: expected a table, got {short_repr(config[key])}"
    for name, table in (config.get("policies") or {}).items():
        if not isinstance(table, dict):
            return f"policies.{name}: expected a table, got {short_repr(table)}"
    return ""


#: Columns every queries.parquet has: what pairs queries across policies.
QUERY_KEY_COLUMNS = ("replicate", "policy", "budget", "query_id")

#: The metric columns of queries.parquet, as the folder's format has them
#: (:data:`memsim.evaluation.metrics.METRIC_COLUMNS`, named here: this
#: module reads folders without the machinery that fills them).
_QUERY_METRIC_COLUMNS = (
    "utility", "utility_ratio", "oracle_utility", "recall", "precision", "ndcg@10", "mrr",
    "stale_rate", "harm", "tokens_used", "n_packed", "recall_age_0_7", "recall_age_7_30",
    "recall_age_30_90", "recall_age_90_180", "recall_age_180_365", "recall_age_365_inf",
    "recall_age_90_inf", "max_relevant_age", "evicted_relevant", "n_relevant", "answer_prob",
    "abstained", "stale_reinforced", "oracle_notes", "hidden_invalid", "hidden_evicted",
    "hidden_budget", "hidden_age", "hidden_cut")

#: Columns of summary.csv (:func:`memsim.reporting.stats.summarise`), in order.
SUMMARY_COLUMNS = ("policy", "budget", "metric", "mean", "ci_low", "ci_high", "n", "ci_over",
                   "ci_method")

#: The columns of each data file of a run folder that its readers (the
#: report, :func:`memsim.reporting.compare.compare`, :class:`RunResult` and
#: its TREC exports) need, and which every file memsim writes has: a file
#: without one of them, or with a value of one that is not of its type
#: (:func:`column_problem`), is damaged or not memsim's (:func:`load_run`
#: refuses it, naming the file, the column and the row), rather than failing
#: deep in a report, dropping a table or being recomputed in silence.
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "queries.parquet": (*QUERY_KEY_COLUMNS, "t", *_QUERY_METRIC_COLUMNS),
    "store.parquet": ("replicate", "policy", "budget", "t", "store_notes", "store_tokens"),
    "arms.csv": ("replicate", "policy", "budget", "recall_gini", "evicted_notes",
                 "promoted_notes", "invalidated_notes", "invalidated_superseded",
                 "superseded_notes",
                 *(f"superseded_used_{d}d" for d in (0, 1, 7, 30, 90, 180, 365))),
    "rankings.parquet": ("replicate", "policy", "budget", "query_id", "rank", "note_id",
                         "score", "packed", "position"),
    "summary.csv": SUMMARY_COLUMNS,
}

#: Required columns that hold text (any value reads as text); every other
#: required column holds numbers.
_TEXT_COLUMNS = frozenset({"policy", "metric", "ci_over", "ci_method"})
#: Required columns of whole numbers: keys, ids, ranks and counts that are
#: read as integers (a 2.5 would be truncated, a missing one cannot be).
_WHOLE_COLUMNS = frozenset({"replicate", "budget", "query_id", "note_id", "rank", "position",
                            "n"})

#: Optional columns that come with another: a file that has the first needs
#: the second (``prefilter_overlap`` is read over its ``prefilter_sampled``).
_COMPANION_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "arms.csv": (("prefilter_overlap", "prefilter_sampled"),),
}

#: How many missing columns a message names before it counts the rest.
_NAMED_COLUMNS = 4


def read_run_file(f: Path) -> pd.DataFrame | None:
    """Read a run folder's parquet or CSV file; None when it does not exist.

    Raises
    ------
    RunFolderError
        If the file cannot be parsed (truncated, not parquet / CSV) or lacks
        one of its :data:`REQUIRED_COLUMNS`.
    """
    if not f.exists():
        return None
    try:
        df = pd.read_parquet(f) if f.suffix == ".parquet" else pd.read_csv(f)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RunFolderError(f"{f}: unreadable ({msg})") from None
    required = list(REQUIRED_COLUMNS.get(f.name, ()))
    required += [need for has, need in _COMPANION_COLUMNS.get(f.name, ()) if has in df.columns]
    problem = column_problem(df, required)
    if problem is None and f.name == "queries.parquet":
        problem = _infinite_measure(df, ("t", *_QUERY_METRIC_COLUMNS))
    if problem:
        raise RunFolderError(f"{f}: not a memsim {f.name}: {problem}")
    for c in required:
        # numbers stored as text (checked above: each one reads as a number
        # without loss) become numbers, so that readers compute with them
        if c not in _TEXT_COLUMNS and not pd.api.types.is_numeric_dtype(df[c]):
            df[c] = pd.to_numeric(df[c])
    return df


def column_problem(frame: pd.DataFrame, required: Sequence[str]) -> str | None:
    """What makes ``frame`` unreadable as a table with the ``required``
    columns of a run folder's file (:data:`REQUIRED_COLUMNS`); None if nothing.

    Parameters
    ----------
    frame : DataFrame
        The table read.
    required : sequence of str
        The columns its readers need. Those of text (``policy``, ``metric``,
        ``ci_over``, ``ci_method``) may hold anything; the keys, ids, ranks
        and ``n`` must hold whole numbers; every other one numbers (NaN
        allowed: an undefined metric is NaN).

    Returns
    -------
    str or None
        One line for the caller to prefix with the file or argument:
        ``no column 'rank'`` (naming the first few missing columns), or
        ``column 'mean': row 3: 'abc' is not a number`` (rows counted from 0,
        the first data row of a file being row 0).
    """
    missing = [c for c in required if c not in frame.columns]
    if missing:
        named = ", ".join(repr(c) for c in missing[:_NAMED_COLUMNS])
        more = len(missing) - _NAMED_COLUMNS
        return f"no column {named}" + (f" (and {more} more)" if more > 0 else "")
    for c in required:
        if c in _TEXT_COLUMNS:
            continue
        values = frame[c]
        whole = c in _WHOLE_COLUMNS
        kind = values.dtype
        if (pd.api.types.is_integer_dtype(kind) or pd.api.types.is_bool_dtype(kind)
                or (not whole and pd.api.types.is_float_dtype(kind))):
            continue  # what memsim writes: its type says it all, no scan
        num = pd.to_numeric(values, errors="coerce").to_numpy(np.float64, na_value=np.nan)
        if whole:
            bad = ~np.isfinite(num) | (num != np.floor(num))
        else:  # NaN is a value of its own; a value that does not parse is not
            bad = np.isnan(num) & values.notna().to_numpy()
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            value = values.iloc[row]
            value = value.item() if isinstance(value, np.generic) else value
            want = "a whole number" if whole else "a number"
            if pd.isna(value):
                return f"column {c!r}: row {row}: no value, where {want} is needed"
            return f"column {c!r}: row {row}: {value!r} is not {want}"
    return None


def _infinite_measure(frame: pd.DataFrame, columns: Sequence[str]) -> str | None:
    """The first infinite value among ``columns`` of a queries table, as
    :func:`column_problem` words it; None if none. A per-query measure is
    a finite number, or NaN where it is undefined: an infinity is damage,
    which a mean would otherwise skip in silence."""
    for c in columns:
        values = pd.to_numeric(frame[c], errors="coerce").to_numpy(np.float64, na_value=np.nan)
        bad = np.isinf(values)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            return (f"column {c!r}: row {row}: {float(values[row])!r} is not a measure (a finite "
                    "number, or NaN where undefined)")
    return None


def run_status(path: str | Path) -> dict[str, Any]:
    """The manifest of a run folder, with ``status`` corrected for killed runs.

    A run killed with SIGKILL cannot mark itself failed: its manifest still
    says ``running``. When the writing process (same host) no longer exists,
    the status reads ``failed`` with ``error = "interrupted"``; re-run it with
    ``memsim run RUN_DIR/config.toml`` (a new folder, the same numbers).

    Raises
    ------
    ConfigError
        If ``manifest.json`` is missing or not JSON.
    """
    path = Path(path)
    manifest = _read_manifest(path)
    if (manifest.get("status") == "running" and manifest.get("host") == platform.node()
            and isinstance(manifest.get("pid"), int) and not pid_alive(manifest["pid"])):
        manifest["status"] = "failed"
        manifest["error"] = "interrupted (the process that wrote this run is gone)"
    return manifest


def summary_rows(stored: pd.DataFrame | None, queries: pd.DataFrame,
                 metrics: Sequence[str]) -> pd.DataFrame | None:
    """The rows ``summarise(queries, metrics=metrics)`` gives, taken from a
    run folder's summary instead of resampled again.

    ``stored`` is ``summary.csv``, which :func:`memsim.reporting.stats.summarise`
    computed on the run's whole queries table at the default level,
    resamples, seed and fewest replicates; ``queries`` is that table or its
    rows of some budgets, and ``metrics`` columns it has. Every row of a
    (policy, budget, metric) depends on that cell's data and the bootstrap
    stream named by its budget alone, not on which other metrics were
    summarised with it, so these are the rows a new call returns. They come
    in its order (budgets and policies as they first appear, then
    ``metrics``) and with its column types; None when there is no
    ``stored`` (a failed run has no summary.csv) or it lacks one of the
    rows. Columns other than :data:`SUMMARY_COLUMNS` are ignored.

    Raises
    ------
    ConfigError
        If ``stored`` lacks one of :data:`SUMMARY_COLUMNS`, or holds a value
        that is not a number where one is needed (:func:`column_problem`):
        a damaged summary is refused, not replaced in silence by a new one.
    """
    if stored is None:
        return None
    problem = column_problem(stored, SUMMARY_COLUMNS)
    if problem:
        raise ConfigError(f"summary: not a memsim summary.csv: {problem}")
    if not len(queries) or not len(metrics):
        return None
    at = {(str(p), b, str(m)): i for i, (p, b, m) in
          enumerate(zip(stored["policy"], stored["budget"], stored["metric"]))}
    cells = stored[list(SUMMARY_COLUMNS)].to_numpy(object)
    rows = []
    for bud in pd.unique(queries["budget"]):
        sub = queries["policy"][queries["budget"] == bud]
        for pol in (str(p) for p in pd.unique(sub)):
            for m in metrics:
                i = at.get((pol, bud, str(m)))
                if i is None:
                    return None
                mean, lo, hi, n, over, method = cells[i, 3:]
                rows.append((pol, bud, str(m), float(mean), float(lo), float(hi), int(n),
                             str(over), str(method)))
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


# --------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------


@dataclass(kw_only=True)
class RunResult:
    """What a run produced: the frames of its run folder, in memory.

    :func:`memsim.runs.runner.run_experiment` returns one, and :func:`load_run`
    reads one back from a run folder; both give the same attributes.

    Attributes
    ----------
    queries : DataFrame or None
        One row per (replicate, policy, budget, query) with every metric.
    summary : DataFrame or None
        Policy x budget x metric: mean, ci_low, ci_high, n.
    store : DataFrame or None
        Store size over time per arm.
    arms : DataFrame or None
        Per (replicate, policy, budget) measures (recall_gini ...).
    rankings : DataFrame or None
        Top-C rankings, when the experiment saves them.
    path : Path or None
        The run folder (None for a run kept in memory).
    timings : dict
        Seconds per phase.
    config : dict
        The resolved configuration (``config.toml`` as a table; empty if the
        folder has none).
    manifest : dict or None
        The manifest, its status corrected as :func:`run_status` does (None
        for a run kept in memory).
    experiment : Experiment or None
        The :class:`~memsim.runs.config.Experiment` that ran (None when read back
        from a folder: rebuild it with ``memsim.load_experiment(path /
        "config.toml")``).
    """

    queries: pd.DataFrame | None = None
    summary: pd.DataFrame | None = None
    store: pd.DataFrame | None = None
    arms: pd.DataFrame | None = None
    rankings: pd.DataFrame | None = None
    path: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    manifest: dict[str, Any] | None = None
    experiment: Any = None

    #: The summary columns a notebook shows first (:meth:`_repr_html_`).
    _HTML_METRICS = ("utility_share", "recall", "recall_age_90_inf", "harm", "tokens_used")

    def _repr_html_(self) -> str:
        """A notebook's view: what ran, where it is, and its headline means
        with their 95% intervals (``memsim.compare(run)`` has the tests)."""
        import html

        name = self.config.get("experiment", {}).get("name") or (
            self.experiment.name if self.experiment is not None else "run")
        where = f"<code>{html.escape(str(self.path))}</code>" if self.path else "in memory"
        status = (self.manifest or {}).get("status", "completed" if self.summary is not None
                                           else "no summary")
        head = (f"<p><b>memsim run {html.escape(str(name))}</b>: {where}, "
                f"{html.escape(str(status))}</p>")
        s = self.summary
        if s is None or len(s) == 0:
            return head
        s = s[s["metric"].isin(self._HTML_METRICS)]
        dec = {m: column_decimals(m, g["mean"], g["ci_low"], g["ci_high"])
               for m, g in s.groupby("metric", sort=False)}
        # what the report prints: never nan (n/a) nor scientific notation
        cell = [format_fixed(m, lo, hi, dec[k]) for k, m, lo, hi
                in zip(s["metric"], s["mean"], s["ci_low"], s["ci_high"])]
        wide = s.assign(cell=cell).pivot_table(index=["policy", "budget"], columns="metric",
                                               values="cell", aggfunc="first", sort=False)
        wide = wide[[m for m in self._HTML_METRICS if m in wide.columns]]
        wide.columns.name = None
        return head + wide.to_html(escape=True) + (
            "<p>Mean [95% interval]; <code>memsim.compare(run)</code> adds the paired "
            "tests.</p>")

    def metric(self, name: str) -> pd.DataFrame:
        """Summary rows of one metric.

        Raises
        ------
        ConfigError
            If the summary has no such metric (a typo, named with the
            nearest metric it has), or the run has no summary.
        """
        if self.summary is None:
            raise ConfigError(f"{self.path or 'this run'}: has no summary (a failed run has no "
                              "summary.csv)")
        have = list(pd.unique(self.summary["metric"]))
        if name not in have:
            raise ConfigError(f"metric {name!r}: not in the summary{did_you_mean(name, have)} "
                              f"(metrics: {', '.join(map(str, have))})")
        return self.summary[self.summary["metric"] == name].reset_index(drop=True)

    def recall_by_age(self) -> pd.DataFrame:
        """Recall of the relevant notes by their age, as a tidy (long) table.

        One row per policy x budget x age bucket, buckets in age order, so
        that a pandas user filters, pivots or plots without melting the six
        ``recall_age_*`` columns::

            r = run.recall_by_age()
            r.pivot_table(index="bucket", columns="policy", values="recall", sort=False)
            r.query("low_days >= 90 and budget == 1500")

        Returns
        -------
        DataFrame
            ``policy``, ``budget``, ``bucket`` (``"0-7"``, ``"7-30"``,
            ``"30-90"``, ``"90-180"``, ``"180-365"``, ``"365+"``),
            ``low_days``, ``high_days`` (the bucket is ``[low_days,
            high_days)`` of note age when asked about; ``inf`` for the last),
            ``recall`` (mean over the queries with a relevant note of that
            age), ``ci_low``, ``ci_high`` (its 95% interval) and ``n``, as in
            the summary. The rows come from the summary; a run without them
            in its summary (a failed run has no summary.csv) gets them from
            its per-query table as the summary computes them, without
            intervals (NaN): the mean over replicates of each replicate's
            mean (replicates of different sizes weigh the same), and ``n``
            the replicates with a value when there are at least
            :data:`memsim.evaluation.metrics.MIN_REPLICATES` of them, else the
            queries with one. A bucket no query reached has ``n = 0`` and a
            NaN recall. The
            pooled ``recall_age_90_inf`` (every bucket from 90 days) is not
            a row: it overlaps the buckets.

        Raises
        ------
        ValueError
            If the run has neither summary rows nor per-query columns of the
            age buckets.
        """
        s = self.summary
        in_summary = _age_buckets(s["metric"].unique()) if s is not None and len(s) else {}
        in_queries = _age_buckets(self.queries.columns) if self.queries is not None else {}
        if in_summary:
            label = in_summary
            rows = s[s["metric"].isin(list(label))]
            rows = rows[["policy", "budget", "metric", "mean", "ci_low", "ci_high", "n"]]
        elif in_queries:
            label = in_queries
            rows = _replicate_means(self.queries, list(label))
            rows["ci_low"] = rows["ci_high"] = np.nan
        else:
            raise ValueError(f"{self.path or 'the run'}: no recall_age_* rows in its summary "
                             "and no recall_age_* columns in its queries")
        rows = rows.rename(columns={"mean": "recall"})
        rows["low_days"] = rows["metric"].map(lambda m: label[m][0])
        rows["high_days"] = rows["metric"].map(lambda m: label[m][1])
        rows["bucket"] = [_bucket_label(lo, hi) for lo, hi in zip(rows["low_days"],
                                                                  rows["high_days"])]
        order = {c: i for i, c in enumerate(label)}
        policies = {p: i for i, p in enumerate(pd.unique(rows["policy"]))}
        rows = rows.assign(_p=rows["policy"].map(policies), _b=rows["metric"].map(order))
        rows = rows.sort_values(["budget", "_p", "_b"], kind="stable")
        rows["n"] = rows["n"].astype(np.int64)
        return rows[["policy", "budget", "bucket", "low_days", "high_days", "recall", "ci_low",
                     "ci_high", "n"]].reset_index(drop=True)

    @property
    def baseline(self) -> str | None:
        """The experiment's baseline policy (None when it names none)."""
        return (self.config.get("experiment") or {}).get("baseline") or None

    @property
    def policies(self) -> dict[str, Any]:
        """The resolved policy tables, by name (the ``[policies]`` of the config)."""
        return dict(self.config.get("policies") or {})

    # -- out to the IR tools (trec_eval, ir-measures, ranx) -------------------
    def _arm_values(self, col: str) -> list | None:
        """The values of ``col`` the run has: those of its queries, which
        hold every arm (one whose rankings are all empty too), else those of
        its rankings; None when neither has the column."""
        for frame in (self.queries, self.rankings):
            if frame is not None and col in frame.columns:
                return list(pd.unique(frame[col]))
        return None

    def _pick(self, col: str, want: Any) -> Any:
        """``want`` checked against the run's values of ``col`` (the only
        one when ``want`` is None); ``want`` as is when the run has no such
        column."""
        have = self._arm_values(col)
        if have is None:
            return want
        if want is None:
            if len(have) != 1:
                raise ConfigError(f"the run has {len(have)} values of {col} "
                                  f"({', '.join(map(str, have))}): give {col}=")
            return have[0]
        if want not in have:
            raise ConfigError(f"{col} {want!r} is not in the run; it has "
                              f"{', '.join(map(str, have))}")
        return want

    def _one_arm(self, policy: str | None, budget: int | None,
                 replicate: int | None) -> tuple[pd.DataFrame, str, int]:
        """The saved rankings of one (policy, budget, replicate), best first.

        The arms are those of the run's queries: an arm whose rankings are
        all empty has no rows here. Only ranked rows (``rank`` >= 1) are
        kept: ``save_rankings = "hidden"`` adds rows of rank -1 (notes the
        oracle packed that the policy did not rank in its top C), which are
        not part of the ranking.
        """
        r = self.rankings
        if r is None:
            raise ConfigError(f"{self.path or 'the run'}: no rankings: run the experiment with "
                              "[experiment] save_rankings = true")
        self._check_rankings(("query_id", "rank", "note_id"))
        picked = {}
        for col, want in (("policy", policy), ("budget", budget), ("replicate", replicate)):
            want = self._pick(col, want)
            if want is None:
                continue
            if col in r.columns:
                r = r[r[col] == want]
            picked[col] = want
        if "rank" in r.columns:
            r = r[r["rank"] >= 1]
        r = r.sort_values(["query_id", "rank"], kind="stable")
        return r, str(picked.get("policy", "memsim")), int(picked.get("replicate", 0))

    def _check_rankings(self, columns: Sequence[str]) -> None:
        """Refuse rankings without one of ``columns`` an export reads, or
        with a value of one not of its type (:func:`column_problem`). A run
        read from its folder was checked when read; one built in memory is
        checked here."""
        problem = column_problem(self.rankings, columns)
        if problem:
            where = self.path / "rankings.parquet" if self.path is not None else "rankings"
            raise ConfigError(f"{where}: {problem}")

    def _run_frame(self, stream: Any, policy: str | None, budget: int | None,
                   replicate: int | None, scores: str, checked: bool = False
                   ) -> tuple[pd.DataFrame, str, int]:
        """:meth:`trec_run_frame`, the policy's name and the replicate
        (``checked``: ``stream`` is one :meth:`_stream` returned)."""
        if scores not in ("rank", "policy"):
            raise ConfigError(f"scores must be 'rank' or 'policy', got {scores!r}")
        r, name, rep = self._one_arm(policy, budget, replicate)
        if scores == "policy":
            self._check_rankings(("score",))
        note_ids, query_ids = self._export_ids(stream, rep, checked)
        rank = r["rank"].to_numpy(np.int64)
        score = (rank.max(initial=0) + 1 - rank).astype(np.float64) if scores == "rank" \
            else r["score"].to_numpy(np.float64)
        frame = pd.DataFrame({"qid": _texts(r["query_id"], query_ids, "query"),
                              "docno": _texts(r["note_id"], note_ids, "note"),
                              "rank": rank, "score": score})
        return frame.reset_index(drop=True), name, rep

    def trec_run_frame(self, *, policy: str | None = None, budget: int | None = None,
                       replicate: int | None = None, scores: str = "rank",
                       stream: Any = None) -> pd.DataFrame:
        """One arm's rankings as the columns of a TREC run: ``qid``, ``docno``,
        ``rank``, ``score`` (see :meth:`to_trec_run`, whose ids and errors it
        has)."""
        return self._run_frame(stream, policy, budget, replicate, scores)[0]

    def to_trec_run(self, path: str | os.PathLike, *, policy: str | None = None,
                    budget: int | None = None, replicate: int | None = None,
                    scores: str = "rank", tag: str | None = None,
                    stream: Any = None) -> Path:
        """Write one arm's rankings as a TREC run file (trec_eval, ir-measures).

        One line per ranked note, ``QUERY Q0 NOTE RANK SCORE TAG``. What is
        written is the *candidate ranking* (the top-C in score order, the
        rows of ``rankings.parquet`` with ``rank`` >= 1), which memsim's
        ``ndcg@10`` and ``mrr`` measure, not the packed context; the rows
        ``save_rankings = "hidden"`` adds (``rank`` -1: notes outside the
        top C) are not written. A query whose ranking is empty has no line,
        and an arm whose rankings are all empty writes an empty file:
        memsim counts such a query 0 when it has a relevant note, and so do
        ``trec_eval -c``, ir-measures (its pytrec_eval backend) and ranx
        with ``make_comparable=True`` (ranx refuses the pair otherwise).

        The ids are the trace's own when the stream keeps them: an imported
        trace whose ids were renumbered (string ids, or ``note_updated``
        events) has its logged ids in a ``trace_id`` column of its notes
        and/or queries, and those are written (a note's versions share
        one), so the file reads back with the trace, as :meth:`to_trec_qrels`
        writes its qrels. Otherwise the stream's ``query_id`` and ``note_id``
        are written, which are then the trace's.

        Parameters
        ----------
        path : str or PathLike
            The file to write (atomically).
        policy, budget, replicate : optional
            Which arm; needed only when the run has several values of one
            (several policies: ``policy=``). The arms are those of
            ``queries.parquet``.
        scores : {"rank", "policy"}
            ``"rank"`` (default) writes ``C + 1 - rank``, strictly decreasing,
            so every tool, which orders by score, sees memsim's order;
            ``"policy"`` writes the policy's own scores, whose ties the tools
            break their own way (trec_eval: by the note id as a string, the
            docno, descending: "98" before "139").
        tag : str, optional
            The run tag (default: the policy's name).
        stream : Stream or path, optional
            The stream the run replayed, read for its trace ids: a Stream,
            a stream folder (or a copy of it), or the run's source as its
            ``config.toml`` names it (``data:locomo``, a trace file, or a
            copy of that file), read with the run's importer as ``memsim
            run`` reads it. It is checked against what the run recorded
            (see Raises). Default: a run kept in memory reads its
            experiment's stream when it replayed one from disk (a generated
            stream's ids are its own); a run read back from its folder that
            replayed a stream from disk which may keep trace ids (an
            imported trace, or a stream folder with a ``trace_id`` column)
            needs it.

        Raises
        ------
        ConfigError
            If the run saved no rankings (``save_rankings = true``), the arm
            is ambiguous or absent, ``scores`` is neither ``"rank"`` nor
            ``"policy"``, the stream is needed and not given, or it is not
            the one the run replayed: it lacks a note the run ranked or a
            query the run asked, has a query the run did not ask, or one
            asked at another time or with another number of relevant notes
            than the run recorded (its ``t`` and ``n_relevant``); or, given
            as a path, its content is not the source the run hashed
            (``workload.source_hash``: the stream folder it replayed, or
            the file it imported). The message names ``stream`` and what
            differs. Also if a query or note id to write holds whitespace
            (a trace's ``"note 1"``), which the columns of a TREC file
            cannot hold (nothing is written; :meth:`to_ranx` takes such
            ids). A :class:`~memsim.core.errors.ConfigError` is also a
            :class:`ValueError`, which these errors were before.
        """
        path = _export_file(path, "to_trec_run")
        if tag is not None and not isinstance(tag, str):
            raise ConfigError(f"to_trec_run(tag=): expected a name (str), got "
                              f"{type(tag).__name__} {tag!r}")
        frame, name, _ = self._run_frame(stream, policy, budget, replicate, scores)
        _check_trec_ids(frame, path)
        label = "".join(c if c.isalnum() or c in "-_." else "_" for c in (tag or name)) or "memsim"
        lines = [f"{q} Q0 {d} {k} {s!r} {label}\n" for q, d, k, s in
                 zip(frame["qid"], frame["docno"], frame["rank"], frame["score"].tolist())]
        write_text_atomic(path, "".join(lines))
        return Path(path)

    def trec_qrels_frame(self, stream: Any = None, *, replicate: int | None = None,
                         gain_scale: float = 1.0) -> pd.DataFrame:
        """The relevance memsim's ``ndcg@10`` and ``mrr`` are measured
        against, as TREC qrels columns ``qid``, ``docno``, ``grade`` (see
        :meth:`to_trec_qrels`, whose ids and errors it has)."""
        _check_gain_scale(gain_scale)
        if replicate is not None:
            replicate = self._pick("replicate", replicate)
        return self._qrels_frame(self._stream(stream, replicate), gain_scale)

    def _qrels_frame(self, stream: Any, gain_scale: float) -> pd.DataFrame:
        """:meth:`trec_qrels_frame` of a stream :meth:`_stream` returned."""
        qr = stream.qrels
        gain = qr["gain"].to_numpy(np.float64)
        keep, born = relevant_when_asked(stream)
        grade = gain[keep] * gain_scale
        big = grade >= 2.0 ** 63
        if big.any():
            g = float(gain[keep][big].max())
            raise ConfigError(f"gain_scale={gain_scale!r} makes the gain {g!r} a grade of "
                              f"{g * gain_scale:.4g}, beyond a 64-bit integer: give a smaller "
                              "gain_scale")
        if not np.allclose(grade, np.round(grade), rtol=0, atol=1e-9):
            raise ConfigError("TREC grades are integers: these gains are not (pass gain_scale=, "
                              "e.g. 100; nDCG is the same for gains times a constant)")
        zero = np.round(grade) == 0
        if zero.any():
            g = float(gain[keep][zero].min())
            raise ConfigError(f"gain_scale={gain_scale!r} makes the gain {g!r} a grade of 0, "
                              "which TREC reads as not relevant: give a larger gain_scale")
        out = pd.DataFrame({"qid": _texts(qr["query_id"].to_numpy()[keep],
                                          _trace_ids(stream.queries, "query_id"), "query"),
                            "docno": _texts(qr["note_id"].to_numpy()[keep],
                                            _trace_ids(stream.notes, "note_id"), "note"),
                            "grade": np.round(grade).astype(np.int64),
                            "_born": born[keep]})
        # versions of one logged note share its trace id: a query keeps the
        # one it would read back as (the latest created when it is asked)
        out = out.sort_values("_born", kind="stable").drop_duplicates(["qid", "docno"],
                                                                     keep="last")
        out = out.drop(columns="_born")
        return out.sort_values(["qid", "docno"], kind="stable").reset_index(drop=True)

    def to_trec_qrels(self, path: str | os.PathLike, stream: Any = None, *,
                      replicate: int | None = None, gain_scale: float = 1.0) -> Path:
        """Write the qrels of the run's stream as a TREC qrels file.

        ``QUERY 0 NOTE GRADE`` per line: the positive gains of the notes that
        exist when each query is asked (memsim's R+, the ideal of its
        ``ndcg@10``; a note added after the query is not relevant to it).
        Negative gains (misleading notes) are left out: the IR measures treat
        an absent note as not relevant, as ``ndcg@10`` clips gains at 0 (they
        count in memsim's ``harm`` and ``stale_rate``).

        The ids are those :meth:`to_trec_run` writes: the trace's own where
        the stream keeps them (``trace_id``, an imported trace whose ids were
        renumbered), else the stream's. Read back with the trace
        (``import_trace(path, qrels=FILE)``, ``memsim stream import trace
        --qrels``), the judgements land on the notes and queries they came
        from; a logged note id names the version live when the query is
        asked, so of several versions of one note that exist then, the
        latest is written.

        Parameters
        ----------
        path : str or PathLike
        stream : Stream or path, optional
            The stream the run replayed, given and checked as
            :meth:`to_trec_run` takes it (a generated run's: that of
            ``replicate``, else of one of its replicates). Default: the
            stream of ``replicate`` of :attr:`experiment` (a run kept in
            memory), regenerated from its seed or read from its source.
        replicate : int, optional
            One of the run's replicates. Default: the run's only replicate.
        gain_scale : float
            Grades are ``gain * gain_scale`` rounded, which must be integers
            (TREC grades are) of 64 bits, and at least 1 for every positive
            gain (a grade of 0 is not relevant); nDCG does not change when
            every gain is scaled. A finite number > 0.

        Raises
        ------
        ConfigError
            If ``gain_scale`` is not a finite number > 0, a grade is not an
            integer, is 0 for a positive gain or does not fit in 64 bits,
            ``replicate`` is not one of the run's, the run has several
            replicates and neither ``replicate`` nor ``stream`` is given,
            no ``stream`` is given for a run read back from its folder, or
            it is not the one the run replayed (as :meth:`to_trec_run`
            says), or a query or note id holds whitespace (as
            :meth:`to_trec_run` refuses it). A
            :class:`~memsim.core.errors.ConfigError` is also a
            :class:`ValueError`, which these errors were before.
        """
        path = _export_file(path, "to_trec_qrels")
        frame = self.trec_qrels_frame(stream, replicate=replicate, gain_scale=gain_scale)
        _check_trec_ids(frame, path)
        write_text_atomic(path, "".join(f"{q} 0 {d} {g}\n" for q, d, g in
                                        zip(frame["qid"], frame["docno"], frame["grade"])))
        return Path(path)

    def to_ranx(self, stream: Any = None, *, policy: str | None = None,
                budget: int | None = None, replicate: int | None = None,
                gain_scale: float = 1.0) -> tuple[Any, Any]:
        """The arm's rankings and the stream's qrels as ``(ranx.Qrels,
        ranx.Run)``, as :meth:`to_trec_qrels` and :meth:`to_trec_run` write
        them, from the same ``stream``, refused as they refuse it when it is
        not the one the run replayed (needs ``pip install -e ".[ranx]"``)."""
        try:
            import ranx
        except ImportError:
            raise ImportError('to_ranx needs ranx: pip install -e ".[ranx]"') from None
        _, name, rep = self._one_arm(policy, budget, replicate)
        checked = stream is not None or self.experiment is not None
        if checked:
            stream = self._stream(stream, rep)  # read and checked once, for both frames
        run = self._run_frame(stream, policy, budget, replicate, "rank", checked)[0]
        if checked:
            _check_gain_scale(gain_scale)
            qrels = self._qrels_frame(stream, gain_scale)
        else:  # (refused there: a run read back from its folder needs its stream)
            qrels = self.trec_qrels_frame(None, replicate=rep, gain_scale=gain_scale)
        # ranx asks for object (not pandas string) id columns
        run, qrels = (f.astype({"qid": object, "docno": object}) for f in (run, qrels))
        # an arm whose rankings are all empty is an empty run, and a stream
        # without a relevant note (a trace with no used or judgement event)
        # empty qrels, as the TREC files are empty (from_df refuses either)
        return (ranx.Qrels.from_df(qrels, q_id_col="qid", doc_id_col="docno", score_col="grade")
                if len(qrels) else ranx.Qrels(),
                ranx.Run.from_df(run, q_id_col="qid", doc_id_col="docno", score_col="score",
                                 name=name) if len(run) else ranx.Run(name=name))

    def _export_ids(self, stream: Any, replicate: int, checked: bool = False
                    ) -> tuple[pd.Series | None, pd.Series | None]:
        """The trace ids (:func:`_trace_ids`) of the notes and queries of the
        stream a run export writes; ``(None, None)``: the stream's ids are
        the trace's."""
        if stream is None:
            exp = self.experiment
            if exp is None:
                self._check_source_ids()
                return None, None
            if not hasattr(exp.workload, "load"):
                return None, None  # a generated stream: its ids are its own
        if not checked:
            stream = self._stream(stream, replicate)
        return _trace_ids(stream.notes, "note_id"), _trace_ids(stream.queries, "query_id")

    def _check_source_ids(self) -> None:
        """Refuse a run read back from its folder whose stream, from disk,
        may keep trace ids (an imported trace, or a stream folder with a
        ``trace_id`` column): its export needs the stream."""
        wl = self.config.get("workload") or {}
        source = wl.get("source")
        if not source or wl.get("importer") == "locomo":
            return  # a generated stream, or one whose ids are its own
        keeps = True
        if wl.get("importer") is None and Path(source).is_dir():
            cols = [_table_columns(Path(source), t) for t in ("notes", "queries")]
            keeps = any(c is None or "trace_id" in c for c in cols)
        if keeps:
            raise ConfigError(f"{self.path or 'the run'}: give the stream the run replayed "
                              f"(stream=: a Stream, a stream folder, or {source} as its "
                              f"config.toml names it): {source} may keep a trace's own ids, "
                              "which the export writes, and a run read back from its folder "
                              "does not hold them")

    def _stream(self, stream: Any, replicate: int | None) -> Any:
        """The stream an export reads: given (a Stream or a path,
        :meth:`_read_stream_arg`), else the experiment's; refused unless it
        is the one the run replayed (:meth:`_check_stream`)."""
        if stream is None:
            exp = self.experiment
            if exp is None:
                source = (self.config.get("workload") or {}).get("source")
                raise ConfigError("give the stream the run replayed (stream=: a Stream, a stream "
                                  "folder" + (f", or {source} as its config.toml names it"
                                              if source else "")
                                  + "): a run read back from its folder does not hold it")
            if replicate is None:
                reps = pd.unique(self.queries["replicate"]) if self.queries is not None and \
                    "replicate" in self.queries.columns else [0]
                if len(reps) != 1:
                    raise ConfigError(f"the run has {len(reps)} replicates: give replicate=")
                replicate = int(reps[0])
            where = "the experiment's stream"
            if hasattr(exp.workload, "load"):
                got = exp.workload.load()
            else:
                # the replicate's stream, from the seed the runner gives it
                got = exp.workload.generate(child_seq(seed_sequence(exp.seed), "replicate",
                                                      replicate, "workload"))
        elif isinstance(stream, (str, os.PathLike)):
            where = f"stream {os.fspath(stream)}"
            got = self._read_stream_arg(stream, where)
        else:
            where, got = "stream", stream
        self._check_stream(got, replicate, where)
        return got

    def _read_stream_arg(self, stream: str | os.PathLike, where: str) -> Any:
        """A ``stream=`` path read: the run's own source, when its content is
        the one ``workload.source_hash`` recorded (the same file or folder, a
        copy of it elsewhere, or ``data:NAME``), read as ``memsim run`` reads
        it (with the run's importer); else a stream folder (an imported
        trace's, as ``memsim stream import`` writes it), whose content the
        run did not hash: :meth:`_check_stream` compares it with the run."""
        wl = self.config.get("workload") or {}
        text = os.fspath(stream)
        path = Path(text).expanduser()
        if text.startswith(DATA_PREFIX):
            try:
                path = resolve_data(text)
            except DataError as exc:
                raise ConfigError(f"{where}: {exc}") from None
        recorded = wl.get("source_hash")
        if recorded and path.exists():
            try:
                same = content_hash(path) == recorded
            except OSError as exc:
                raise ConfigError(f"{where}: cannot read: {exc.strerror or exc}") from None
            if same:
                return _read_source(path, wl)
            # a stream folder replayed as is, or a file the run imported:
            # another content is another stream (memsim run refuses it too)
            if not wl.get("importer") or not path.is_dir():
                raise ConfigError(f"{where}: not the run's source {wl.get('source')} (its "
                                  "content's sha256 is not the workload.source_hash of the "
                                  "run's config.toml): give the stream the run replayed")
        return read_stream(path)

    def _check_stream(self, stream: Any, replicate: int | None, where: str) -> None:
        """Refuse a stream that is not the one ``replicate`` (None: any of the
        run's replicates) replayed, as the run recorded it: a note it ranked
        or a query it asked that the stream lacks, a query the run did not
        ask, or one asked at another time or with another number of
        relevant notes (``t`` and ``n_relevant`` of its queries, the
        fingerprint :func:`memsim.compare` pairs runs by), or, for a run
        that recorded it (a replayed stream, ``stream_fingerprint`` in
        ``manifest.json``), any other trace ids, creation or query times or
        gains (:func:`~memsim.data.stream.export_fingerprint`). Without the
        check an export of another stream writes its ids and qrels in
        silence."""
        notes = pd.Index(stream.notes["note_id"].to_numpy(np.int64))
        keep, _ = relevant_when_asked(stream)
        asked = pd.DataFrame({"t": stream.queries["t"].to_numpy(np.float64)},
                             index=stream.queries["query_id"].to_numpy(np.int64))
        asked["n_relevant"] = pd.Series(stream.qrels["query_id"].to_numpy(np.int64)[keep]) \
            .value_counts().reindex(asked.index, fill_value=0).to_numpy(np.float64)
        reps = [replicate] if replicate is not None else (self._arm_values("replicate") or [0])
        problems = [self._stream_problem(notes, asked, rep) for rep in reps]
        if all(problems):
            raise ConfigError(f"{where}: {problems[0]}: give the stream the run replayed")
        recorded = (self.manifest or {}).get("stream_fingerprint")
        if isinstance(recorded, dict):
            got = export_fingerprint(stream)
            for table, what in (("notes", "notes (their ids or creation times)"),
                                ("queries", "queries (their ids or times)"),
                                ("qrels", "qrels (which notes are relevant, or their gains)")):
                if table in recorded and recorded[table] != got[table]:
                    raise ConfigError(f"{where}: its {what} are not those of the stream the "
                                      "run replayed (stream_fingerprint in its manifest.json): "
                                      "give the stream the run replayed")

    def _stream_problem(self, notes: pd.Index, asked: pd.DataFrame, rep: int) -> str | None:
        """Why a stream (its note ids; its queries' ``t`` and ``n_relevant``
        by ``query_id``) is not the one replicate ``rep`` replayed; None when
        the run says nothing against it."""
        def of_rep(frame: pd.DataFrame | None) -> pd.DataFrame | None:
            if frame is None or "query_id" not in frame.columns:
                return None
            return frame[frame["replicate"] == rep] if "replicate" in frame.columns else frame

        ranked = of_rep(self.rankings)
        if ranked is not None and "note_id" in ranked.columns:
            ids = pd.Index(pd.unique(ranked["note_id"]))
            lacks = ids[~ids.isin(notes)]
            if len(lacks):
                return f"note {lacks[0]} is not in it (the run ranked it)"
        q = of_rep(self.queries)
        mine = q if q is not None else ranked
        if mine is None:
            return None
        mine = mine.drop_duplicates("query_id").set_index("query_id")
        lacks = mine.index.difference(asked.index)
        if len(lacks):
            return f"query {lacks[0]} is not in it (the run asked it)"
        extra = asked.index.difference(mine.index)
        if q is not None and len(extra):  # the queries hold every query the run asked
            return (f"it has {len(asked):,} queries, the run asked {len(mine):,} (query "
                    f"{extra[0]} is not the run's)")
        theirs = asked.reindex(mine.index)
        for col, say in (("t", "is asked at t = {:g} in it, at t = {:g} in the run"),
                         ("n_relevant", "has other relevant notes when asked: {:g} in it, {:g} "
                                        "in the run (n_relevant)")):
            if col not in mine.columns:
                continue
            a = theirs[col].to_numpy(np.float64)
            b = pd.to_numeric(mine[col], errors="coerce").to_numpy(np.float64)
            differ = ~((a == b) | (np.isnan(a) & np.isnan(b)))
            if differ.any():
                i = int(np.flatnonzero(differ)[0])
                return f"query {mine.index[i]} " + say.format(a[i], b[i])
        return None

    @classmethod
    def load(cls, path: str | Path) -> RunResult:
        """Read a run folder's files.

        Files a run has not written (a failed run, a sweep folder, rankings
        not saved) read as None; a missing summary.csv too, which its
        readers compute again from queries.parquet (the same numbers: the
        summary is a function of the queries). A summary.csv that exists is
        checked like the other files: a damaged one is refused, never
        replaced in silence.

        Raises
        ------
        RunFolderError
            If ``path`` is not a folder or has no ``manifest.json``, or one
            of its files cannot be read: a manifest that is not a JSON
            object, a config.toml that is not TOML, a truncated parquet or
            CSV file, a queries.parquet, store.parquet, arms.csv,
            rankings.parquet or summary.csv without one of its
            :data:`REQUIRED_COLUMNS` or with a value of one that is not of
            its type (:func:`column_problem`), or a completed run (not a
            sweep's folder) without queries.parquet; or if it is the folder
            of ``memsim advise`` (its advice is ``advice.json``). The
            message names the file (and the column and row).
        """
        path = as_path(path, "load_run(path)")
        if not path.is_dir():
            why = "a file, not a folder" if path.exists() else "it does not exist"
            raise RunFolderError(f"{path}: not a run folder ({why})")
        if not (path / "manifest.json").exists():
            raise RunFolderError(f"{path}: not a run folder (no manifest.json)")
        manifest = run_status(path)
        if (path / "advice.json").exists() or manifest.get("kind") == "advise":
            # no queries of its own: a RunResult of it would be all None
            raise RunFolderError(f"{path}: a folder of memsim advise, not a run folder; its "
                                 "advice is advice.json (and advice.md to read)")
        frames: dict[str, pd.DataFrame | None] = {}
        for name in ("queries", "store", "rankings"):
            frames[name] = read_run_file(path / f"{name}.parquet")
        for name in ("summary", "arms"):
            frames[name] = read_run_file(path / f"{name}.csv")
        if (frames["queries"] is None and manifest.get("status") == "completed"
                and manifest.get("kind") != "sweep" and not (path / "sweep").is_dir()):
            # a run writes queries.parquet before it says completed: one
            # without it lost the file (a sweep's folder has none of its own)
            raise RunFolderError(f"{path / 'queries.parquet'}: missing, though the manifest "
                                 "says the run completed (re-run its config.toml)")
        cfg = path / "config.toml"
        try:
            config = tomllib.loads(cfg.read_text(encoding="utf-8")) if cfg.exists() else {}
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise RunFolderError(f"{cfg}: not valid TOML: {exc}") from None
        except OSError as exc:
            raise RunFolderError(f"{cfg}: unreadable ({exc})") from None
        problem = _config_problem(config)
        if problem:
            raise RunFolderError(f"{cfg}: not a memsim config: {problem}")
        timings = manifest.get("timings_s")
        return cls(**frames, path=path, manifest=manifest, config=config,
                   timings=dict(timings) if isinstance(timings, dict) else {})


def _texts(ids, trace: pd.Series | None = None, what: str = "id") -> np.ndarray:
    """Ids as text (the id type of TREC files): their trace ids when
    ``trace`` (:func:`_trace_ids`) is given.

    Raises
    ------
    ConfigError
        If an id is not in ``trace`` (a stream other than the run's).
    """
    ids = np.asarray(ids).tolist()
    if trace is None:
        return np.asarray([str(x) for x in ids], dtype=object)
    mapped = trace.reindex(ids)
    if mapped.isna().any():
        miss = ids[int(np.flatnonzero(mapped.isna().to_numpy())[0])]
        raise ConfigError(f"stream: {what} {miss} is not in it: give the stream the run "
                          "replayed")
    return mapped.to_numpy(dtype=object)


def _check_trec_ids(frame: pd.DataFrame, path: str | os.PathLike) -> None:
    """Refuse ids a TREC file cannot hold: its columns are separated by
    whitespace (trec_eval, ir-measures), so an id holding any (a trace's
    ``"note 1"``), or an empty one, would shift the columns after it.

    Raises
    ------
    ConfigError
        Naming the file, the id and its query.
    """
    for col, what in (("qid", "query"), ("docno", "note")):
        ids = pd.unique(frame[col])
        if any(str(x) == "" for x in ids):
            raise ConfigError(f"{os.fspath(path)}: a {what} id is empty (a stream folder's "
                              "trace_id column), which a TREC file cannot hold (its columns "
                              "are separated by whitespace): give every row an id, or use "
                              "to_ranx()")
        bad = [x for x in ids if any(c.isspace() for c in str(x))]
        if bad:
            raise ConfigError(f"{os.fspath(path)}: {what} id {str(bad[0])!r} holds whitespace, "
                              "which a TREC file cannot hold (its columns are separated by "
                              "whitespace): log ids without whitespace, or use to_ranx()")


def _check_gain_scale(gain_scale: Any) -> None:
    """Refuse a ``gain_scale`` that is not a finite number > 0."""
    if isinstance(gain_scale, bool) or not isinstance(gain_scale, (int, float, np.integer,
                                                                    np.floating)) \
            or not (np.isfinite(gain_scale) and gain_scale > 0):
        raise ConfigError(f"gain_scale must be a finite number > 0, got {gain_scale!r}: "
                          "grades are gain * gain_scale, and only positive gains are "
                          "relevant")


def relevant_when_asked(stream: Any) -> tuple[np.ndarray, np.ndarray]:
    """Which of the stream's qrels rows are in R+ (a positive gain of a note
    that exists when the query is asked: memsim's ``n_relevant``), and each
    row's note creation time."""
    created = pd.Series(stream.notes["created_at"].to_numpy(np.float64),
                        index=stream.notes["note_id"].to_numpy(np.int64))
    asked = pd.Series(stream.queries["t"].to_numpy(np.float64),
                      index=stream.queries["query_id"].to_numpy(np.int64))
    qr = stream.qrels
    born = created.reindex(qr["note_id"]).to_numpy()
    keep = (qr["gain"].to_numpy(np.float64) > 0) & \
        (born <= asked.reindex(qr["query_id"]).to_numpy())
    return keep, born


def _read_source(path: Path, wl: dict) -> Any:
    """The stream of a run's source at ``path``, read as its ``[workload]``
    table says, as ``memsim run`` reads it (:func:`load_source`)."""
    return load_source(path, wl.get("importer"), notes=wl.get("notes", "turns"),
                       embedder=wl.get("embedder"))


def _trace_ids(table: pd.DataFrame, key: str) -> pd.Series | None:
    """A stream table's ids as the trace logged them, by its ``key`` column
    (``note_id``, ``query_id``): its ``trace_id`` (an imported trace whose
    ids were renumbered keeps the logged id there; a row without one keeps
    its own id); None when the table has no ``trace_id`` (its ids are the
    trace's)."""
    if "trace_id" not in table.columns:
        return None
    ids = table[key].to_numpy().tolist()
    text = [str(i) if pd.isna(t) else str(t) for i, t in zip(ids, table["trace_id"].tolist())]
    return pd.Series(text, index=ids, dtype=object)


def _table_columns(folder: Path, table: str) -> list[str] | None:
    """The columns of a stream folder's table (``.parquet`` or ``.csv``),
    read from its header; None when it cannot be read."""
    try:
        if (folder / f"{table}.parquet").is_file():
            import pyarrow.parquet as pq

            return list(pq.read_schema(folder / f"{table}.parquet").names)
        if (folder / f"{table}.csv").is_file():
            return list(pd.read_csv(folder / f"{table}.csv", nrows=0).columns)
    except (OSError, ValueError):
        return None
    return None


_AGE_COLUMN = re.compile(r"recall_age_(\d+)_(\d+|inf)")


def _replicate_means(queries: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """``policy``, ``budget``, ``metric``, ``mean``, ``n`` of ``cols`` as
    :func:`memsim.reporting.stats.summarise` has them: per (policy, budget),
    the mean over replicates of each replicate's mean of the finite values
    (a replicate without one does not count); ``n`` the replicates with a
    mean when the budget has at least ``MIN_REPLICATES`` replicates, else
    the finite values. A frame without ``replicate`` is one replicate."""
    q = queries if "replicate" in queries.columns else queries.assign(replicate=0)
    long = q.melt(id_vars=["policy", "budget", "replicate"], value_vars=cols,
                  var_name="metric", value_name="value")
    value = long["value"].astype(np.float64)
    long["value"] = value.where(np.isfinite(value))
    per = long.groupby(["policy", "budget", "metric", "replicate"], sort=False)["value"] \
        .agg(rep_mean="mean", values="count").reset_index()
    n_reps = q.groupby("budget", sort=False)["replicate"].nunique()
    g = per.groupby(["policy", "budget", "metric"], sort=False)
    rows = g.agg(mean=("rep_mean", "mean"), reps=("rep_mean", "count"),
                 values=("values", "sum")).reset_index()
    by_reps = rows["budget"].map(n_reps).to_numpy() >= MIN_REPLICATES
    rows["n"] = np.where(by_reps, rows["reps"], rows["values"])
    return rows[["policy", "budget", "metric", "mean", "n"]]


def _age_buckets(names) -> dict[str, tuple[float, float]]:
    """The ``recall_age_A_B`` names that partition note age from 0, in age
    order, with their ``[A, B)`` in days; the pooled ``recall_age_90_inf``,
    which overlaps ``recall_age_90_180``, is left out."""
    spans = {}
    for name in names:
        m = _AGE_COLUMN.fullmatch(str(name))
        if m:
            spans[str(name)] = (float(m.group(1)), float(m.group(2)))  # float("inf") parses
    out: dict[str, tuple[float, float]] = {}
    low = 0.0
    while True:
        nxt = [(hi, name) for name, (lo, hi) in spans.items() if lo == low]
        if not nxt:
            return out
        hi, name = min(nxt)  # the narrowest bucket from here
        out[name] = (low, hi)
        if np.isinf(hi):
            return out
        low = hi


def _bucket_label(lo: float, hi: float) -> str:
    return f"{int(lo)}+" if np.isinf(hi) else f"{int(lo)}-{int(hi)}"


def load_run(path: str | Path) -> RunResult:
    """Read a run folder (for reports and notebooks): :meth:`RunResult.load`."""
    return RunResult.load(path)
