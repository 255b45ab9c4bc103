"""Running experiments: replicates, arms, the run folder and its manifest.

A run folder (DESIGN.md section 6) is ``<out>/<UTC time>_<name>_<hash8>/``:

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
=================== ============================================================

Every file is written to a temporary name and renamed into place, and the
manifest says ``completed`` only after all of them exist: a crashed or killed
run never looks complete.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from .config import Experiment, StreamSource, dumps_toml, load_experiment, parse_override
from .engine import Arm, simulate
from .errors import ConfigError
from .rng import child_seq, seed_sequence
from .stats import summarise
from .stream import Stream

__all__ = ["RunResult", "run_experiment", "run_many", "simulate_experiment", "load_stream_for",
           "write_atomic", "load_run", "run_status"]


@dataclass
class RunResult:
    """What a run produced; the frames are also in the run folder (if any)."""

    experiment: Experiment
    queries: pd.DataFrame
    summary: pd.DataFrame
    store: pd.DataFrame
    arms: pd.DataFrame
    rankings: pd.DataFrame | None = None
    path: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def metric(self, name: str) -> pd.DataFrame:
        """Summary rows of one metric."""
        return self.summary[self.summary["metric"] == name].reset_index(drop=True)


def load_stream_for(exp: Experiment, replicate: int) -> Stream:
    """The stream of one replicate: generated from its named seed, or read."""
    if isinstance(exp.workload, StreamSource):
        return exp.workload.load()
    return exp.workload.generate(child_seq(seed_sequence(exp.seed), "replicate", replicate,
                                           "workload"))


def _arms(exp: Experiment) -> list[Arm]:
    budgets = exp.settings.budgets or (None,)
    return [Arm(name, pol, b) for b in budgets for name, pol in exp.policies.items()]


def simulate_experiment(exp: Experiment, replicates: list[int] | None = None,
                        progress: Callable[[float], None] | None = None,
                        streams: dict[int, Stream] | None = None) -> dict[str, pd.DataFrame]:
    """Simulate every arm on every replicate; return the concatenated frames.

    ``replicates`` defaults to ``range(experiment.replicates)``; a sweep's
    robustness check passes fresh ones. ``streams`` may hold pre-built streams
    by replicate (a sweep reuses them across trials).
    """
    reps = list(range(exp.settings.replicates)) if replicates is None else list(replicates)
    arms = _arms(exp)
    parts: dict[str, list[pd.DataFrame]] = {"queries": [], "store": [], "arms": [],
                                            "rankings": []}
    cached_source: Stream | None = None
    for i, r in enumerate(reps):
        if streams is not None and r in streams:
            stream = streams[r]
        elif isinstance(exp.workload, StreamSource):
            cached_source = cached_source or load_stream_for(exp, r)
            stream = cached_source
        else:
            stream = load_stream_for(exp, r)
        sub = None if progress is None else (
            lambda f, i=i: progress((i + f) / len(reps)))
        res = simulate(stream, arms, exp.sim,
                       child_seq(seed_sequence(exp.seed), "replicate", r, "policies"),
                       reader=exp.reader, progress=sub)
        for key in ("queries", "store", "arms"):
            df = getattr(res, key)
            df.insert(0, "replicate", r)
            parts[key].append(df)
        if res.rankings is not None:
            res.rankings.insert(0, "replicate", r)
            parts["rankings"].append(res.rankings)
    return {k: (pd.concat(v, ignore_index=True) if v else None) for k, v in parts.items()}


# --------------------------------------------------------------------------
# Run folders
# --------------------------------------------------------------------------


def write_atomic(path: Path, writer: Callable[[Path], None]) -> None:
    """Write ``path`` through ``writer(tmp)`` then rename: never half-written."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        writer(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _write_text(path: Path, text: str) -> None:
    write_atomic(path, lambda p: p.write_text(text, encoding="utf-8"))


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ("memsim", "numpy", "pandas", "scipy", "matplotlib", "optuna", "pyarrow"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
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


def new_run_dir(out: Path, name: str, hash8: str) -> Path:
    """Create a fresh run folder; never reuse an existing one."""
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


class _Manifest:
    def __init__(self, path: Path, exp: Experiment, argv: list[str] | None):
        self.path = path
        self.data: dict[str, Any] = {
            "status": "running",
            "name": exp.name,
            "config_hash": exp.hash8(),
            "source_file": exp.source_file,
            "argv": list(argv if argv is not None else sys.argv),
            "versions": _versions(),
            "git_commit": _git_commit(),
            "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            # who is writing: lets a reader tell a live run from a killed one
            "pid": os.getpid(),
            "host": platform.node(),
            "timings_s": {},
        }
        self.write()

    def write(self) -> None:
        _write_text(self.path / "manifest.json", json.dumps(self.data, indent=2) + "\n")

    def update(self, **kw: Any) -> None:
        self.data.update(kw)
        self.write()


def run_experiment(exp: Experiment | str | Path, *, overrides: list[str] | dict | None = None,
                   out: str | Path | None = "results", report: bool = True,
                   progress: Callable[[float], None] | None = None,
                   argv: list[str] | None = None) -> RunResult:
    """Run one experiment and (unless ``out`` is None) write its run folder.

    Parameters
    ----------
    exp : Experiment or path
        The experiment, or its TOML file.
    overrides : list of "KEY=VALUE" or dict, optional
        Dotted-key overrides applied before validation.
    out : path or None
        Parent folder of the run folder; None keeps everything in memory.
    report : bool
        Build ``report.html`` at the end.
    """
    if not isinstance(exp, Experiment):
        exp = load_experiment(exp, overrides)
    elif overrides:
        exp = exp.with_overrides(dict(overrides) if isinstance(overrides, dict)
                                 else dict(parse_override(o) for o in overrides))
    if exp.grid:
        raise ConfigError(f"{exp.name}: has a [grid]; run it with run_many() or `memsim run`")
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    if out is None:
        frames = simulate_experiment(exp, progress=progress)
        timings["simulate"] = time.perf_counter() - t0
        summary = summarise(frames["queries"], frames["arms"], frames["store"])
        return RunResult(exp, frames["queries"], summary, frames["store"], frames["arms"],
                         frames["rankings"], None, timings)

    path = new_run_dir(Path(out), exp.name, exp.hash8())
    _write_text(path / "config.toml", _config_header(exp) + dumps_toml(exp.to_config()))
    manifest = _Manifest(path, exp, argv)
    try:
        frames = simulate_experiment(exp, progress=progress)
        timings["simulate"] = time.perf_counter() - t0
        summary = summarise(frames["queries"], frames["arms"], frames["store"])
        write_atomic(path / "queries.parquet", lambda p: frames["queries"].to_parquet(p))
        write_atomic(path / "store.parquet", lambda p: frames["store"].to_parquet(p))
        write_atomic(path / "arms.csv", lambda p: frames["arms"].to_csv(p, index=False))
        write_atomic(path / "summary.csv", lambda p: summary.to_csv(p, index=False))
        if frames["rankings"] is not None:
            write_atomic(path / "rankings.parquet", lambda p: frames["rankings"].to_parquet(p))
        timings["total_before_report"] = time.perf_counter() - t0
        result = RunResult(exp, frames["queries"], summary, frames["store"], frames["arms"],
                           frames["rankings"], path, timings)
        if report:
            t1 = time.perf_counter()
            from .report import build_report

            build_report(path)
            timings["report"] = time.perf_counter() - t1
        manifest.update(status="completed", timings_s=timings,
                        finished_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        return result
    except BaseException as exc:
        manifest.update(status="failed", error=f"{type(exc).__name__}: {exc}",
                        timings_s=timings,
                        finished_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        raise


def _config_header(exp: Experiment) -> str:
    return (f"# Resolved configuration of {exp.name} (every default filled in).\n"
            f"# Re-run exactly with: memsim run config.toml\n")


def _run_one(args) -> str:
    exp, out, report = args
    return str(run_experiment(exp, out=out, report=report).path)


def run_many(experiments: list[Experiment], *, out: str | Path = "results", jobs: int = 1,
             report: bool = True, progress: Callable[[float], None] | None = None,
             argv: list[str] | None = None) -> list[Path]:
    """Run several experiments (grids expanded), ``jobs`` at a time in worker processes."""
    expanded = [e for exp in experiments for e in exp.expand()]
    if jobs <= 1 or len(expanded) == 1:
        paths = []
        for i, e in enumerate(expanded):
            sub = None if progress is None else (
                lambda f, i=i: progress((i + f) / len(expanded)))
            paths.append(run_experiment(e, out=out, report=report, progress=sub,
                                        argv=argv).path)
        return paths
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        done = []
        for i, p in enumerate(pool.map(_run_one, [(e, out, report) for e in expanded])):
            done.append(Path(p))
            if progress is not None:
                progress((i + 1) / len(expanded))
    return done


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def run_status(path: str | Path) -> dict[str, Any]:
    """The manifest of a run folder, with ``status`` corrected for killed runs.

    A run killed with SIGKILL cannot mark itself failed: its manifest still
    says ``running``. When the writing process (same host) no longer exists,
    the status reads ``failed`` with ``error = "interrupted"``; re-run it with
    ``memsim run RUN_DIR/config.toml`` (a new folder, the same numbers).
    """
    path = Path(path)
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: unreadable manifest.json ({exc})") from None
    if (manifest.get("status") == "running" and manifest.get("host") == platform.node()
            and isinstance(manifest.get("pid"), int) and not _alive(manifest["pid"])):
        manifest["status"] = "failed"
        manifest["error"] = "interrupted (the process that wrote this run is gone)"
    return manifest


def load_run(path: str | Path) -> dict[str, Any]:
    """Read a run folder's files (for reports and notebooks)."""
    path = Path(path)
    if not (path / "manifest.json").exists():
        raise ConfigError(f"{path}: not a run folder (no manifest.json)")
    out: dict[str, Any] = {"path": path, "manifest": run_status(path)}
    for name in ("queries", "store", "rankings"):
        f = path / f"{name}.parquet"
        out[name] = pd.read_parquet(f) if f.exists() else None
    for name in ("summary", "arms"):
        f = path / f"{name}.csv"
        out[name] = pd.read_csv(f) if f.exists() else None
    cfg = path / "config.toml"
    if cfg.exists():
        import tomllib

        out["config"] = tomllib.loads(cfg.read_text())
    return out

