"""Running experiments: replicates, arms and the run folder they write.

:func:`run_experiment` simulates every arm of an experiment on every replicate
and writes a run folder (its files and their atomic writing are described in
:mod:`memsim.rundir`); :func:`run_many` runs a batch or a grid.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import time
from multiprocessing.connection import wait as wait_any
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from .config import Experiment, StreamSource, dumps_toml, load_experiment, parse_override
from .engine import Arm, simulate
from .errors import ConfigError
from .report import build_report
from .rng import child_seq, seed_sequence
# the run-folder names below are also imported from here by older callers
from .rundir import (Manifest, RunResult, load_run, new_run_dir, run_status, utc_now,
                     write_atomic)
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

    config_text = _config_header(exp) + dumps_toml(exp.to_config())
    path = _new_folder(Path(out), exp)
    manifest = _first_manifest(path, exp, argv)
    summary_file = path / "summary.csv"
    try:
        _write(path / "config.toml", lambda p: p.write_text(config_text, encoding="utf-8"))
        frames = simulate_experiment(exp, progress=progress)
        timings["simulate"] = time.perf_counter() - t0
        summary = summarise(frames["queries"], frames["arms"], frames["store"])
        _write(path / "queries.parquet", lambda p: frames["queries"].to_parquet(p))
        _write(path / "store.parquet", lambda p: frames["store"].to_parquet(p))
        _write(path / "arms.csv", lambda p: frames["arms"].to_csv(p, index=False))
        if frames["rankings"] is not None:
            _write(path / "rankings.parquet", lambda p: frames["rankings"].to_parquet(p))
        # summary.csv last: only a run whose data files all exist has one
        _write(summary_file, lambda p: summary.to_csv(p, index=False))
        timings["total_before_report"] = time.perf_counter() - t0
        result = _result(exp, frames, summary, path, timings)
        # The report shows the manifest, so the manifest says completed before
        # it is built; a report that fails (or is interrupted) turns the run
        # back to failed and takes summary.csv away again.
        manifest.update(status="completed", timings_s=timings, finished_utc=utc_now())
        if report:
            t1 = time.perf_counter()
            build_report(path)
            timings["report"] = time.perf_counter() - t1
            manifest.update(timings_s=timings)
        result.manifest = manifest.data
        return result
    except BaseException as exc:
        _mark_failed(manifest, summary_file, exc, timings)
        raise


class RunWriteError(OSError):
    """A file of a run folder could not be written (disk full, read-only,
    file-size limit): an environment fault, not a mistake in the config."""


def _write(path: Path, writer: Callable[[Path], None]) -> None:
    """:func:`write_atomic`, naming ``path`` in the error when the write fails."""
    try:
        write_atomic(path, writer)
    except OSError as exc:
        raise RunWriteError(exc.errno, f"cannot write {path}: "
                            f"{exc.strerror or exc}") from None


def _new_folder(out: Path, exp: Experiment) -> Path:
    """The fresh run folder under ``out``; a ``--out`` that cannot hold one
    (a file, under a file, read-only) is the user's mistake."""
    try:
        return new_run_dir(out, exp.name, exp.hash8())
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot create a run folder there: "
                          f"{exc.strerror or exc}") from None


def _first_manifest(path: Path, exp: Experiment, argv: list[str] | None) -> Manifest:
    """The manifest (status running), written first: a folder whose manifest
    cannot be written is removed again, never left without one."""
    try:
        return experiment_manifest(path, exp, argv)
    except BaseException as exc:
        shutil.rmtree(path, ignore_errors=True)
        if isinstance(exc, OSError):
            raise RunWriteError(exc.errno, f"cannot write {path / 'manifest.json'}: "
                                f"{exc.strerror or exc}") from None
        raise


def _mark_failed(manifest: Manifest, summary_file: Path, exc: BaseException,
                 timings: dict[str, float]) -> None:
    """Mark a run failed; a failed run holds no ``summary.csv``."""
    on_disk = manifest.data.get("status")
    try:
        summary_file.unlink(missing_ok=True)
    except OSError:
        pass
    try:
        manifest.update(status="failed", error=f"{type(exc).__name__}: {exc}",
                        timings_s=timings, finished_utc=utc_now())
    except OSError:
        # nothing more can be written: run_status reads a dead writer as failed,
        # but a manifest left "completed" by the report step must not stay so
        if on_disk == "completed":
            shutil.rmtree(manifest.path, ignore_errors=True)


def _result(exp: Experiment, frames: dict[str, pd.DataFrame], summary: pd.DataFrame,
            path: Path | None, timings: dict[str, float]) -> RunResult:
    return RunResult(queries=frames["queries"], summary=summary, store=frames["store"],
                     arms=frames["arms"], rankings=frames["rankings"], path=path,
                     timings=timings, config=exp.to_config(), experiment=exp)


def _config_header(exp: Experiment) -> str:
    return (f"# Resolved configuration of {exp.name} (every default filled in).\n"
            f"# Re-run exactly with: memsim run config.toml\n")


def _stop_on_signal(signum, frame):
    # the first SIGINT/SIGTERM unwinds the run (its folder is marked failed);
    # later ones are ignored so that they cannot cut that bookkeeping short
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def _child(exp: Experiment, out, report: bool, argv, conn) -> None:
    """A worker process of :func:`run_many`: one run, its outcome sent back."""
    signal.signal(signal.SIGINT, _stop_on_signal)
    signal.signal(signal.SIGTERM, _stop_on_signal)
    try:
        res = run_experiment(exp, out=out, report=report, argv=argv)
        conn.send(("ok", str(res.path)))
    except BaseException as exc:  # sent to the parent, which raises it
        try:
            conn.send(("error", exc))
        except Exception:  # an exception that does not pickle
            conn.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}")))
    finally:
        conn.close()


def run_many(experiments: list[Experiment], *, out: str | Path = "results", jobs: int = 1,
             report: bool = True, progress: Callable[[float], None] | None = None,
             argv: list[str] | None = None) -> list[Path]:
    """Run several experiments (grids expanded), ``jobs`` at a time in worker processes.

    The first failure stops the queue (running jobs finish) and is raised. An
    interrupt (SIGINT, or SIGTERM where the CLI turns it into one) stops the
    queue at once: no further run starts and every running one is stopped
    and marks its folder failed.
    """
    expanded = [e for exp in experiments for e in exp.expand()]
    if jobs <= 1 or len(expanded) == 1:
        paths = []
        for i, e in enumerate(expanded):
            sub = None if progress is None else (
                lambda f, i=i: progress((i + f) / len(expanded)))
            paths.append(run_experiment(e, out=out, report=report, progress=sub,
                                        argv=argv).path)
        return paths
    return _run_parallel(expanded, out, jobs, report, progress, argv)


def _run_parallel(expanded: list[Experiment], out, jobs: int, report: bool,
                  progress: Callable[[float], None] | None, argv) -> list[Path]:
    ctx = multiprocessing.get_context()
    results: dict[int, str] = {}
    running: dict[int, tuple[Any, Any]] = {}  # index -> (process, parent end of its pipe)
    error: BaseException | None = None
    queue = list(range(len(expanded)))
    try:
        while queue or running:
            while queue and error is None and len(running) < jobs:
                i = queue.pop(0)
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, args=(expanded[i], out, report, argv, send),
                                   daemon=False)
                proc.start()
                send.close()
                running[i] = (proc, recv)
            if error is not None:
                queue.clear()
            if not running:
                break
            ready = wait_any([conn for _, conn in running.values()]
                             + [proc.sentinel for proc, _ in running.values()])
            for i, (proc, conn) in list(running.items()):
                if conn not in ready and proc.sentinel not in ready:
                    continue
                outcome = _receive(conn)
                proc.join()
                conn.close()
                del running[i]
                if outcome is None:
                    outcome = ("error", RuntimeError(
                        f"{expanded[i].name}: the worker process died (exit code "
                        f"{proc.exitcode})"))
                if outcome[0] == "ok":
                    results[i] = outcome[1]
                    if progress is not None:
                        progress(len(results) / len(expanded))
                elif error is None:
                    error = outcome[1]
    except BaseException:
        _stop_children(running)
        raise
    if error is not None:
        raise error
    return [Path(results[i]) for i in range(len(expanded))]


def _receive(conn) -> tuple | None:
    """The outcome a worker sent, or None if it died without sending one."""
    try:
        return conn.recv() if conn.poll() else None
    except (EOFError, OSError):
        return None


def _stop_children(running: dict, timeout: float = 60.0) -> None:
    """Stop running workers (SIGTERM: each marks its folder failed) and wait."""
    for proc, _ in running.values():
        if proc.is_alive():
            try:
                os.kill(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout
    for proc, conn in running.values():
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():  # its manifest then reads failed (its writer is gone)
            proc.kill()
            proc.join()
        conn.close()
