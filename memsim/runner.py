"""Running experiments: replicates, arms and the run folder they write.

:func:`run_experiment` simulates every arm of an experiment on every replicate
and writes a run folder (its files and their atomic writing are described in
:mod:`memsim.rundir`); :func:`run_many` runs a batch or a grid.
"""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable

import pandas as pd

from .config import Experiment, StreamSource, dumps_toml, load_experiment, parse_override
from .engine import Arm, simulate
from .errors import ConfigError
from .report import build_report
from .rng import child_seq, seed_sequence
# the run-folder names below are also imported from here by older callers
from .rundir import (Manifest, RunResult, load_run, new_run_dir, run_status, utc_now,
                     write_atomic, write_text_atomic)
from .stats import summarise
from .stream import Stream

__all__ = ["RunResult", "run_experiment", "run_many", "simulate_experiment", "load_stream_for",
           "experiment_manifest", "write_atomic", "load_run", "run_status", "new_run_dir"]


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


def experiment_manifest(folder: Path, exp: Experiment, argv: list[str] | None = None
                        ) -> Manifest:
    """Start the manifest (status ``running``) of ``exp``'s run folder ``folder``."""
    return Manifest(folder, name=exp.name, config_hash=exp.hash8(),
                    source_file=exp.source_file, argv=argv)


#: The signature of :func:`experiment_manifest` under the name the sweep imports.
_Manifest = experiment_manifest


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
        return _result(exp, frames, summary, None, timings)

    path = new_run_dir(Path(out), exp.name, exp.hash8())
    write_text_atomic(path / "config.toml", _config_header(exp) + dumps_toml(exp.to_config()))
    manifest = experiment_manifest(path, exp, argv)
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
        result = _result(exp, frames, summary, path, timings)
        if report:
            t1 = time.perf_counter()
            build_report(path)
            timings["report"] = time.perf_counter() - t1
        manifest.update(status="completed", timings_s=timings, finished_utc=utc_now())
        result.manifest = manifest.data
        return result
    except BaseException as exc:
        manifest.update(status="failed", error=f"{type(exc).__name__}: {exc}",
                        timings_s=timings, finished_utc=utc_now())
        raise


def _result(exp: Experiment, frames: dict[str, pd.DataFrame], summary: pd.DataFrame,
            path: Path | None, timings: dict[str, float]) -> RunResult:
    return RunResult(queries=frames["queries"], summary=summary, store=frames["store"],
                     arms=frames["arms"], rankings=frames["rankings"], path=path,
                     timings=timings, config=exp.to_config(), experiment=exp)


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
