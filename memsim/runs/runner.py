"""Running experiments: replicates, arms and the run folder they write.

:func:`run_experiment` simulates every arm of an experiment on every replicate
and writes a run folder (its files and their atomic writing are described in
:mod:`memsim.reporting.rundir`); :func:`run_many` runs a batch or a grid. ``jobs`` > 1
runs several runs, or a run's replicates (or groups of a replicate's arms,
where a last round of replicates would leave workers idle), in worker
processes, with results identical to one process.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import threading
import time
import traceback
from multiprocessing.connection import wait as wait_any
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from memsim.runs.config import Experiment, StreamSource, dumps_toml, experiment_with_overrides
from memsim.engine import NO_PREFILTER_OVERLAP, Arm, ReplayCache, simulate
from memsim.core import interrupt
from memsim.core.errors import ConfigError, MemsimError, StreamError
from memsim.core.params import Interval, check_callable
from memsim.core.machine import default_jobs
from memsim.reporting.report import build_report
from memsim.core.rng import child_seq, seed_sequence
# the run-folder names below are also imported from here by older callers
from memsim.reporting.rundir import (Manifest, RunResult, load_run, new_run_dir, run_status, utc_now,
                     write_atomic)
from memsim.reporting.stats import summarise
from memsim.data.stream import Stream, export_fingerprint

_log = logging.getLogger(__name__)

__all__ = ["RunResult", "run_experiment", "run_many", "simulate_experiment", "default_jobs",
           "load_stream_for", "replicate_seed", "simulate_replicate", "simulate_replicates",
           "simulate_tasks", "experiment_arms",
           "experiment_manifest", "write_atomic", "load_run", "run_status", "new_run_dir"]


def load_stream_for(exp: Experiment, replicate: int) -> Stream:
    """The stream of one replicate: generated from its named seed, or read.

    Raises
    ------
    StreamError
        A replayed stream that cannot be read; the message names the
        experiment file and ``workload.source`` before the stream's own
        message (which names the file, column and row), as a config
        mistake is named.
    """
    if isinstance(exp.workload, StreamSource):
        try:
            return exp.workload.load()
        except StreamError as exc:
            # the folder came from the config: say which file and key, as
            # every other config mistake does
            where = f"{exp.source_file}: " if exp.source_file else ""
            raise StreamError(f"{where}workload.source: {exc}") from exc
    return exp.workload.generate(child_seq(seed_sequence(exp.seed), "replicate", replicate,
                                           "workload"))


def experiment_arms(exp: Experiment) -> list[Arm]:
    """The arms of ``exp``: every policy at every budget, budget-major."""
    budgets = exp.settings.budgets or (None,)
    return [Arm(name, pol, b) for b in budgets for name, pol in exp.policies.items()]


def _check_jobs(jobs: Any) -> None:
    """Refuse a ``jobs`` that is not a number of worker processes (the
    command line's ``--jobs`` refuses the same): ``jobs=0`` or ``"2"`` is a
    mistake, not a request for one process."""
    if not Interval(1, None, integer=True).check(jobs):
        raise ConfigError(f"jobs: expected an int >= 1 (worker processes), got {jobs!r}")


def simulate_experiment(exp: Experiment, replicates: list[int] | None = None,
                        progress: Callable[[float], None] | None = None,
                        streams: dict[int, Stream] | None = None,
                        jobs: int = 1) -> dict[str, pd.DataFrame]:
    """Simulate every arm on every replicate; return the concatenated frames.

    ``replicates`` defaults to ``range(experiment.replicates)``; a sweep's
    robustness check passes fresh ones. ``streams`` may hold pre-built streams
    by replicate (a sweep reuses them across trials). ``jobs`` > 1 simulates
    up to that many replicates (or groups of a replicate's arms) at once in
    worker processes; every replicate and arm has its own named seed
    streams, so the frames are identical to ``jobs=1``.
    """
    _check_jobs(jobs)
    reps = list(range(exp.settings.replicates)) if replicates is None else list(replicates)
    arms = experiment_arms(exp)
    cached_source: Stream | None = None

    def stream_of(r: int) -> Stream | None:
        nonlocal cached_source
        if streams is not None and r in streams:
            return streams[r]
        if isinstance(exp.workload, StreamSource):
            # a replayed stream is read once and shared by every replicate
            cached_source = cached_source or load_stream_for(exp, r)
            return cached_source
        return None  # generated from the replicate's seed where it is simulated

    per_rep = _replicates(exp, arms, reps, stream_of, progress, jobs)
    parts: dict[str, list[pd.DataFrame]] = {"queries": [], "store": [], "arms": [],
                                            "rankings": []}
    for frames in per_rep:
        for key, df in frames.items():
            if df is not None:
                parts[key].append(df)
    return {k: (pd.concat(v, ignore_index=True) if v else None) for k, v in parts.items()}


def replicate_seed(exp: Experiment, replicate: int):
    """The root of the arms' random streams on one replicate (each arm draws
    its own named child of it, :class:`memsim.engine.Arm`)."""
    return child_seq(seed_sequence(exp.seed), "replicate", replicate, "policies")


def simulate_replicate(exp: Experiment, arms: list[Arm], replicate: int,
                       stream: Stream | None = None, cache: ReplayCache | None = None
                       ) -> dict[str, pd.DataFrame | None]:
    """The frames of one replicate of ``arms`` under ``exp``'s engine settings,
    seeds and reader: what :func:`simulate_experiment` does per replicate, for
    arms the caller builds (a sweep simulates several trials' policies as the
    arms of one replay, each with the random stream it would have alone).

    ``stream`` defaults to the replicate's stream of ``exp``'s workload;
    ``cache`` keeps the work of the stream that does not depend on the arms
    for the next call with the same stream object
    (:class:`~memsim.engine.ReplayCache`; the frames do not depend on it).
    """
    return _simulate_replicate(exp, arms, replicate, stream, None, cache)


def simulate_replicates(exp: Experiment, arms: list[Arm], replicates: list[int],
                        streams: dict[int, Stream] | None = None, jobs: int = 1
                        ) -> list[dict[str, pd.DataFrame | None]]:
    """:func:`simulate_replicate` of several replicates, in order, up to
    ``jobs`` at a time in worker processes (a replicate without a stream in
    ``streams`` generates its own where it runs). The frames do not depend
    on ``jobs``; the error raised is the one of the first failing replicate."""
    return _replicates(exp, arms, list(replicates), (streams or {}).get, None, jobs)


def simulate_tasks(tasks: list[tuple[Experiment, list[Arm], int, Stream | None]],
                   jobs: int = 1, progress: Callable[[float], None] | None = None
                   ) -> list[dict[str, pd.DataFrame | None]]:
    """:func:`simulate_replicate` of each ``(exp, arms, replicate, stream)``
    task, in order, up to ``jobs`` at a time in worker processes: replays of
    different experiments (a sweep's robustness checks, an audit's probe
    points and its use counts) share one pool of workers. A task whose
    stream is None generates it where it runs. The frames do not depend on
    ``jobs``; the error raised is the one of the first failing task in order.
    ``progress`` gets the share of the tasks done."""
    tasks = list(tasks)
    if jobs > 1 and len(tasks) > 1 and not multiprocessing.current_process().daemon:
        return _simulate_parallel(tasks, progress, jobs)
    out = []
    for i, (exp, arms, r, stream) in enumerate(tasks):
        out.append(_simulate_replicate(exp, arms, r, stream, None if progress is None
                                       else (lambda f, i=i: progress((i + f) / len(tasks)))))
    return out


def _replicates(exp: Experiment, arms: list[Arm], reps: list[int],
                stream_of: Callable[[int], Stream | None],
                progress: Callable[[float], None] | None, jobs: int
                ) -> list[dict[str, pd.DataFrame | None]]:
    """The frames of every replicate, in order: ``jobs`` at a time in
    worker processes (not from inside one), else one after the other here.

    Workers that the last round of replicates would leave idle (3
    replicates on 2 workers) take a share of its arms instead:
    each of those replicates runs as groups of consecutive arms
    (:func:`_arm_groups`), whose frames are put back together as one
    replay gives them (:func:`_joined`). Every arm draws its own named
    random streams, so the frames are identical; what a group repeats is
    the work its arms share (generating the stream, the similarity
    products)."""
    if not (jobs > 1 and len(reps) > 1 and not multiprocessing.current_process().daemon):
        return [_simulate_replicate(exp, arms, r, stream_of(r), None if progress is None
                                    else (lambda f, i=i: progress((i + f) / len(reps))))
                for i, r in enumerate(reps)]
    groups = _arm_groups(len(arms), len(reps), jobs)
    tasks, owner = [], []  # owner: each task's position in reps (a replicate may repeat)
    for i, (r, g) in enumerate(zip(reps, groups)):
        for part in _split(arms, g):
            tasks.append((exp, part, r, stream_of(r)))
            owner.append(i)
    failed_at: list[int] = []
    try:
        frames = _simulate_parallel(tasks, progress, jobs, failed_at)
    except Exception:
        i = owner[failed_at[0]] if failed_at else None
        if i is not None and groups[i] > 1:
            # the error one process raises: the replicate's, all arms together
            _simulate_replicate(exp, arms, reps[i], stream_of(reps[i]), None)
        raise
    return [_joined([f for f, o in zip(frames, owner) if o == i]) for i in range(len(reps))]


def _arm_groups(arms: int, reps: int, jobs: int) -> list[int]:
    """How many groups of arms each replicate runs in on ``jobs`` workers:
    one, but the replicates of a last round smaller than ``jobs`` share the
    workers it would leave idle (at most one arm a group)."""
    last = reps % jobs
    if last == 0:
        return [1] * reps
    return [1] * (reps - last) + [min(arms, jobs // last)] * last


def _split(arms: list[Arm], groups: int) -> list[list[Arm]]:
    """``arms`` in ``groups`` runs of consecutive arms, as even as can be."""
    bounds = [len(arms) * k // groups for k in range(groups + 1)]
    return [arms[a:b] for a, b in zip(bounds, bounds[1:])]


def _joined(parts: list[dict[str, pd.DataFrame | None]]) -> dict[str, pd.DataFrame | None]:
    """One replicate's frames from those of its groups of consecutive arms,
    in order: the frames that are arm by arm (queries, arms, rankings) one
    group after the other; the store's, which is sweep by sweep, then arm
    by arm, in a stable order by time (a sweep's rows at one time, group
    after group). A group without an approximate prefilter gets the
    recall-loss columns another group's arms have, as one replay gives them
    (:data:`~memsim.engine.NO_PREFILTER_OVERLAP`)."""
    if len(parts) == 1:
        return parts[0]
    out: dict[str, pd.DataFrame | None] = {}
    for key in parts[0]:
        got = [p[key] for p in parts if p[key] is not None]
        if not got:
            out[key] = None
            continue
        if key == "arms" and any(set(NO_PREFILTER_OVERLAP) <= set(df) for df in got):
            got = [df.assign(**{k: v for k, v in NO_PREFILTER_OVERLAP.items() if k not in df})
                   for df in got]
        df = pd.concat(got, ignore_index=True)
        if key == "store":
            df = df.sort_values("t", kind="stable", ignore_index=True)
        out[key] = df
    return out


def _simulate_replicate(exp: Experiment, arms: list[Arm], r: int, stream: Stream | None,
                        progress: Callable[[float], None] | None,
                        cache: ReplayCache | None = None) -> dict[str, pd.DataFrame | None]:
    """The frames of replicate ``r`` (its ``replicate`` column first)."""
    t0 = time.perf_counter()
    if stream is None:
        stream = load_stream_for(exp, r)
    t1 = time.perf_counter()
    res = simulate(stream, arms, exp.sim, replicate_seed(exp, r), reader=exp.reader,
                   progress=progress, cache=cache)
    # -vv: where a replicate's time goes (a worker process logs to the same stderr)
    _log.debug("replicate %d: %d notes, %d queries (stream %.2f s); %d arm(s) replayed in "
               "%.2f s", r, len(stream.notes), len(stream.queries), t1 - t0, len(arms),
               time.perf_counter() - t1)
    frames: dict[str, pd.DataFrame | None] = {}
    for key in ("queries", "store", "arms", "rankings"):
        df = getattr(res, key)
        if df is not None:
            df.insert(0, "replicate", r)
        frames[key] = df
    return frames


# --------------------------------------------------------------------------
# Replicates in worker processes
# --------------------------------------------------------------------------

_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _replicate_worker(exp: Experiment, arms: list[Arm], r: int, stream: Stream | None,
                      send_progress: bool, parent: int, conn) -> None:
    """A worker process of :func:`simulate_experiment`: one replicate's frames,
    or its exception, sent back. The parent alone handles signals: a worker
    ignores SIGINT (Ctrl-C reaches the whole process group), dies on SIGTERM
    and is killed when the parent stops; it writes no file."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    _watch_parent(parent, lambda: os._exit(1))

    def report(frac: float) -> None:
        if os.getppid() != parent:  # the parent was killed: stop at once
            os._exit(1)
        if send_progress:
            conn.send(("progress", frac))

    try:
        conn.send(("ok", _simulate_replicate(exp, arms, r, stream, report)))
    except BaseException as exc:  # sent to the parent, which raises it
        exc.add_note(f"(in the worker process of replicate {r}:\n"
                     f"{''.join(traceback.format_exception(exc)).rstrip()})")
        try:
            conn.send(("error", exc))
        except Exception:  # an exception that does not pickle, or no parent
            try:
                conn.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}")))
            except Exception:
                pass
    finally:
        conn.close()


def _simulate_parallel(tasks: list[tuple[Experiment, list[Arm], int, Stream | None]],
                       progress: Callable[[float], None] | None,
                       jobs: int, failed_at: list[int] | None = None
                       ) -> list[dict[str, pd.DataFrame | None]]:
    """The frames of every ``(exp, arms, replicate, stream)`` task, in order,
    ``jobs`` tasks at a time.

    The error raised is the one ``jobs=1`` would raise: that of the first
    failing task in order (later ones are stopped, earlier ones finish);
    its position is appended to ``failed_at`` when given.
    """
    ctx = multiprocessing.get_context()
    done: dict[int, dict[str, pd.DataFrame | None]] = {}
    reps = [r for _, _, r, _ in tasks]
    frac = [0.0] * len(tasks)
    running: dict[int, tuple[Any, Any]] = {}  # position -> (process, parent end of its pipe)
    failed: tuple[int, BaseException] | None = None
    queue = list(range(len(tasks)))
    try:
        while queue or running:
            while queue and failed is None and len(running) < jobs:
                i = queue.pop(0)
                running[i] = _start_worker(ctx, (*tasks[i], progress is not None,
                                                 os.getpid()))
            if not running:
                break
            ready = wait_any([conn for _, conn in running.values()]
                             + [proc.sentinel for proc, _ in running.values()])
            for i, (proc, conn) in list(running.items()):
                if i not in running or (conn not in ready and proc.sentinel not in ready):
                    continue
                outcome = _drain(conn, lambda f, i=i: frac.__setitem__(i, f))
                if outcome is None and proc.sentinel in ready:
                    proc.join()
                    outcome = ("error", RuntimeError(
                        f"replicate {reps[i]}: the worker process died (exit code "
                        f"{proc.exitcode})"))
                if outcome is None:  # still running; it reported progress
                    if progress is not None:
                        progress(sum(frac) / len(reps))
                    continue
                proc.join()
                conn.close()
                del running[i]
                if outcome[0] == "ok":
                    done[i] = outcome[1]
                    frac[i] = 1.0
                    if progress is not None:
                        progress(sum(frac) / len(reps))
                elif failed is None or i < failed[0]:
                    failed = (i, outcome[1])
                    queue.clear()
                    # replicates after the failing one would not have run
                    _stop_workers({k: w for k, w in running.items() if k > i})
                    for k in [k for k in running if k > i]:
                        del running[k]
    except BaseException:
        _stop_workers(running)
        raise
    if failed is not None:
        if failed_at is not None:
            failed_at.append(failed[0])
        raise failed[1]
    return [done[i] for i in range(len(tasks))]


#: seconds between a worker's checks that its parent is alive
PARENT_POLL_S = 0.5


def _watch_parent(parent: int, on_orphaned: Callable[[], None]) -> None:
    """Call ``on_orphaned`` (in a daemon thread) once the process ``parent``
    is no longer this one's parent: killed without a chance to stop its
    workers (SIGKILL). A worker blocked in a computation, or in sending a
    result no one will read (its pipe's read end is held open by its
    siblings, which inherited it), would otherwise run on for good."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        on_orphaned()

    threading.Thread(target=watch, name="memsim-parent-watch", daemon=True).start()


def _start_worker(ctx, args: tuple) -> tuple[Any, Any]:
    """Start a replicate worker with SIGINT/SIGTERM blocked until it has set
    its own handlers (a signal cannot reach it while it holds the parent's)."""
    recv, send = ctx.Pipe(duplex=False)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        proc = ctx.Process(target=_replicate_worker, args=(*args, send), daemon=True)
        proc.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        send.close()
    return proc, recv


def _drain(conn, on_progress: Callable[[float], None]) -> tuple | None:
    """Read what a worker sent: its outcome, or None while it is still running
    (or when it died without sending one)."""
    try:
        while conn.poll():
            msg = conn.recv()
            if msg[0] != "progress":
                return msg
            on_progress(msg[1])
    except (EOFError, OSError):
        return None
    except Exception as exc:  # an error that pickled but does not unpickle
        return ("error", RuntimeError(f"a worker's error could not be read back: {exc}"))
    return None


def _stop_workers(running: dict) -> None:
    """Kill replicate workers (they write nothing) and wait for them."""
    for proc, _ in running.values():
        if proc.is_alive():
            proc.kill()
    for proc, conn in running.values():
        proc.join()
        conn.close()


# --------------------------------------------------------------------------
# Run folders
# --------------------------------------------------------------------------


def experiment_manifest(folder: Path, exp: Experiment, argv: list[str] | None = None
                        ) -> Manifest:
    """Start the manifest (status ``running``) of ``exp``'s run folder ``folder``."""
    return Manifest(folder, name=exp.name, config_hash=exp.hash8(),
                    source_file=exp.source_file, argv=argv, plugins=exp.settings.plugins)


#: The signature of :func:`experiment_manifest` under the name the sweep imports.
_Manifest = experiment_manifest


def run_experiment(exp: Experiment | str | Path, *, overrides: list[str] | dict | None = None,
                   out: str | Path | None = "results", report: bool = True,
                   progress: Callable[[float], None] | None = None,
                   argv: list[str] | None = None, jobs: int = 1,
                   report_progress: Callable[[float], None] | None = None) -> RunResult:
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
    jobs : int
        Replicates simulated at once in worker processes (default 1: all in
        this process). Any ``jobs`` gives identical results.
    progress, report_progress : callable, optional
        Called with the share done (0 to 1) of the simulation, and of the
        report (:func:`memsim.reporting.report.build_report`).
    """
    check_callable(progress, "run_experiment(progress=)")
    check_callable(report_progress, "run_experiment(report_progress=)")
    exp = experiment_with_overrides(exp, overrides)
    if exp.grid:
        raise ConfigError(f"{exp.name}: has a [grid]; run it with run_many() or `memsim run`")
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    _check_jobs(jobs)
    # read and checked before the run folder exists: a stream that cannot be
    # read, or that lacks what a policy needs, leaves no half-written folder
    streams = _checked_streams(exp)
    if out is None:
        frames = simulate_experiment(exp, progress=progress, jobs=jobs, streams=streams)
        timings["simulate"] = time.perf_counter() - t0
        summary = summarise(frames["queries"], frames["arms"], frames["store"])
        return _result(exp, frames, summary, None, timings)

    config_text = _config_header(exp) + dumps_toml(exp.to_config())
    path = _new_folder(Path(out), exp)
    manifest = _first_manifest(path, exp, argv)
    summary_file = path / "summary.csv"
    try:
        if streams:
            # what the run's exports write from its stream: a stream given
            # to them later is refused unless it is this one
            manifest.update(stream_fingerprint=export_fingerprint(streams[0]))
        _write(path / "config.toml", lambda p: p.write_text(config_text, encoding="utf-8"))
        frames = simulate_experiment(exp, progress=progress, jobs=jobs, streams=streams)
        timings["simulate"] = time.perf_counter() - t0
        summary = summarise(frames["queries"], frames["arms"], frames["store"])
        _write(path / "queries.parquet", lambda p: frames["queries"].to_parquet(p))
        _write(path / "store.parquet", lambda p: frames["store"].to_parquet(p))
        _write(path / "arms.csv", lambda p: frames["arms"].to_csv(p, index=False))
        if frames["rankings"] is not None:
            _write(path / "rankings.parquet", lambda p: frames["rankings"].to_parquet(p))
        interrupt.raise_if_asked()  # a run asked to stop is not completed
        # summary.csv last: only a run whose data files all exist has one
        _write(summary_file, lambda p: summary.to_csv(p, index=False))
        timings["total_before_report"] = time.perf_counter() - t0
        _log.info("%s: %d replicate(s) simulated and written in %.1f s", path,
                  exp.settings.replicates, timings["total_before_report"])
        result = _result(exp, frames, summary, path, timings)
        # The report shows the manifest, so the manifest says completed before
        # it is built; a report that fails (or is interrupted) turns the run
        # back to failed and takes summary.csv away again.
        manifest.update(status="completed", timings_s=timings, finished_utc=utc_now())
        if report:
            t1 = time.perf_counter()
            build_report(path, progress=report_progress)
            timings["report"] = time.perf_counter() - t1
            _log.info("%s: report built in %.1f s", path, timings["report"])
            manifest.update(timings_s=timings)
        result.manifest = manifest.data
        return result
    except BaseException as exc:
        stop = interrupt.asked()
        if stop is not None and not isinstance(exc, KeyboardInterrupt):
            # the stop surfaced wrapped (numba's dispatcher turns an exception
            # raised during its call into a SystemError): it is what happened
            _mark_failed(manifest, summary_file, stop, timings)
            raise stop from exc
        _mark_failed(manifest, summary_file, exc, timings)
        raise


def _checked_streams(exp: Experiment) -> dict[int, Stream] | None:
    """The replayed stream of every replicate (read once: they share it), or
    None for a synthetic workload (generated where each replicate is
    simulated), after refusing a policy the workload cannot serve.

    Raises
    ------
    ConfigError
        A policy whose ranker replays logged rankings (``as-logged``) on a
        workload without them, naming the file and the policy's key.
    MemsimError
        The stream cannot be read (an empty trace, a malformed stream).
    """
    stream = load_stream_for(exp, 0) if isinstance(exp.workload, StreamSource) else None
    # only a trace with 'retrieved' events logs rankings; a generated stream never does
    logged = stream is not None and getattr(stream, "retrieved", None) is not None
    for name, pol in exp.policies.items():
        if pol.ranker.needs_logged and not logged:
            where = f"{exp.source_file}: " if exp.source_file else ""
            raise ConfigError(
                f"{where}policies.{name}.ranker: {pol.ranker.name!r} replays the rankings a "
                "production system logged, and this workload has none (a trace with "
                "'retrieved' events has them)")
    if stream is None:
        return None
    return dict.fromkeys(range(exp.settings.replicates), stream)


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


def _child(exp: Experiment, out, report: bool, argv, conn, jobs: int = 1,
           parent: int | None = None) -> None:
    """A worker process of :func:`run_many`: one run (its replicates ``jobs``
    at a time), its outcome sent back. Orphaned (its parent killed), it
    stops as on SIGTERM: its folder is marked failed."""
    interrupt.install(interrupt.once_on_signal)
    if parent is not None:
        def orphaned() -> None:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(60.0)  # time to mark its folder failed; then stop regardless
            os._exit(1)
        _watch_parent(parent, orphaned)
    try:
        res = run_experiment(exp, out=out, report=report, argv=argv, jobs=jobs)
        conn.send(("ok", str(res.path)))
    except BaseException as exc:  # sent to the parent, which raises it
        try:
            conn.send(("error", exc))
        except Exception:  # an exception that does not pickle
            conn.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}")))
    finally:
        conn.close()


def run_many(experiments: list[Experiment | str | Path], *, out: str | Path = "results",
             jobs: int = 1, report: bool = True, progress: Callable[[float], None] | None = None,
             argv: list[str] | None = None,
             report_progress: Callable[[int], Callable[[float], None]] | None = None
             ) -> list[Path]:
    """Run several experiments (grids expanded), ``jobs`` at a time in worker processes.

    ``experiments`` are :class:`Experiment` objects or the paths of their
    files; ``out`` is the folder the run folders go under (never None: use
    :func:`run_experiment` with ``out=None`` to keep results in memory).

    ``jobs`` worker processes in all: a single run simulates its replicates
    ``jobs`` at a time; several runs run ``jobs`` at a time, each simulating
    its replicates in ``jobs // runs`` processes when there are cores to spare
    (4 jobs, 2 runs: 2 replicates at a time in each), one at a time otherwise.
    Results never depend on ``jobs``.

    The first failure stops the queue (running jobs finish) and is raised;
    a :class:`~memsim.core.errors.MemsimError` then carries the folders of
    the runs completed before it (``completed``: complete, and kept). An
    interrupt (SIGINT, or SIGTERM where the CLI turns it into a
    :class:`~memsim.core.errors.Terminated`) stops the queue at once: no
    further run starts and every running one is stopped and marks its
    folder failed.

    ``report_progress(i)``, when given, returns the progress callable of run
    ``i``'s report (runs one at a time only: parallel runs build their
    reports in their worker processes, and ``progress`` counts whole runs).
    """
    _check_jobs(jobs)
    if isinstance(experiments, (Experiment, str, os.PathLike)) or not hasattr(experiments,
                                                                                 "__iter__"):
        raise ConfigError(f"run_many: expected a list of experiments (or of their files), got "
                          f"{type(experiments).__name__}; one experiment runs with "
                          "run_experiment()")
    if out is None:  # every run folder would be lost: run_experiment(out=None) keeps frames
        raise ConfigError("run_many: out=None would keep no result (run_many returns the run "
                          "folders); give a folder, or use run_experiment(exp, out=None)")
    experiments = [experiment_with_overrides(e, None) for e in experiments]
    expanded = [e for exp in experiments for e in exp.expand()]
    done: dict[int, Path] = {}  # the runs completed, by index
    try:
        if jobs > 1 and len(expanded) > 1:
            return _run_parallel(expanded, out, jobs, report, progress, argv, done)
        for i, e in enumerate(expanded):
            sub = None if progress is None else (
                lambda f, i=i: progress((i + f) / len(expanded)))
            done[i] = run_experiment(
                e, out=out, report=report, progress=sub, argv=argv, jobs=jobs,
                report_progress=None if report_progress is None else report_progress(i)).path
        return [done[i] for i in range(len(expanded))]
    except MemsimError as exc:
        # the folders completed before the failure are whole: say where they are
        if done and not getattr(exc, "completed", None):
            exc.completed = [done[i] for i in sorted(done)]
        raise


def _run_parallel(expanded: list[Experiment], out, jobs: int, report: bool,
                  progress: Callable[[float], None] | None, argv,
                  results: dict[int, Path]) -> list[Path]:
    """:func:`run_many` in worker processes; ``results`` gets each run's
    folder as it completes."""
    ctx = multiprocessing.get_context()
    running: dict[int, tuple[Any, Any]] = {}  # index -> (process, parent end of its pipe)
    error: BaseException | None = None
    queue = list(range(len(expanded)))
    try:
        while queue or running:
            while queue and error is None and len(running) < jobs:
                i = queue.pop(0)
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, args=(expanded[i], out, report, argv, send,
                                                        max(1, jobs // len(expanded)),
                                                        os.getpid()),
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
                    results[i] = Path(outcome[1])
                    if progress is not None:
                        progress(len(results) / len(expanded))
                elif error is None:
                    error = outcome[1]
    except BaseException:
        _stop_children(running)
        raise
    if error is not None:
        raise error
    return [results[i] for i in range(len(expanded))]


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
