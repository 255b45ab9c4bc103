"""Running a sweep: :func:`run_sweep` and its steps.

:func:`run_sweep` loads the experiment and its ``[sweep]`` table, settles the
study's identity, run folder and storage (:mod:`memsim.sweep.resume`), writes
``config.toml`` and the manifest, runs the trials in this process or in
worker processes (:mod:`memsim.sweep.workers`) until the study has
``trials`` COMPLETE trials, then re-checks the winners
(:mod:`memsim.sweep.robustness`), measures each parameter's plateau
(:mod:`memsim.sweep.plateau`), writes the outputs
(:mod:`memsim.sweep.outputs`) and the run folder's ``report.html``. The
manifest records every session that worked on the folder; a failure marks
it failed with the hint to run the same command again. The summary notes a
``sweep.batch`` that could not batch (a swept key outside ``policies.``) and
a ``sweep.pruner`` that cannot prune (one replicate; also a warning).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import time
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import optuna
import pandas as pd
from optuna.trial import TrialState

from memsim.runs.config import (Experiment, attribute_overrides, check_overrides, dumps_toml,
                           load_experiment, parse_override)
from memsim.core.errors import ConfigError, MemsimError, SweepWarning
from memsim.core.machine import default_jobs
from memsim.core.paths import file_in_the_way
from memsim.reporting.report import build_report
from memsim.reporting.rundir import new_run_dir, write_atomic
from memsim.runs.runner import experiment_manifest

from .evaluate import TrialEvaluator, replays_one_stream
from .liveness import host_name, reap_dead_workers
from .outputs import (IMPORTANCE_COLUMNS, SweepResult, best_trials, clear_outputs, trials_table,
                      write_outputs)
from .plateau import grow_plateau
from .resume import (config_header, load_resume_dir, locate_run_dir, prior_manifest,
                     resume_storage, study_identity, write_ident)
from .robustness import robustness_candidates, robustness_check, robustness_replays
from .space import SweepSpec, grid_size, point_text
from .storage import mask_url, recorded_storage, normalise_storage, open_storage
from .study import (check_study, count_complete, grid_points, open_study, require_sampler,
                    session_seed)
from .workers import run_workers, run_worker, WorkerJob


@dataclass
class _Plan:
    """What :func:`run_sweep` settles before any trial runs."""

    exp: Experiment
    spec: SweepSpec
    hash8: str
    study_name: str
    run_dir: Path | None
    storage_spec: str
    workers: int
    #: the opened Optuna storage (:func:`memsim.sweep.storage.open_storage`)
    storage: Any = None


def run_sweep(exp_or_path: Experiment | str | Path | None, *, trials: int | None = None,
              storage: str | None = None, study_name: str | None = None, workers: int = 1,
              out: str | Path | None = "results", overrides: list[str] | dict | None = None,
              quiet: bool = True, resume: str | Path | None = None,
              progress: Callable[[float], None] | None = None,
              plots: bool = True, report: bool = True,
              argv: list[str] | None = None, batch: int | None = None,
              pruner: str | None = None, cache_mb: int | None = None) -> SweepResult:
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
        Build the run folder's ``report.html`` (:func:`memsim.reporting.report.build_report`).
    batch, pruner, cache_mb : optional
        ``sweep.batch``, ``sweep.pruner`` and ``sweep.cache_mb`` for this
        session (``--batch``, ``--pruner``, ``--cache-mb``); none changes the
        study's identity, so a sweep may be resumed with others.

    Returns
    -------
    SweepResult
    """
    t_start = time.perf_counter()
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ConfigError(f"--workers: expected an integer >= 1, got {workers!r}")
    options = {k: v for k, v in (("batch", batch), ("pruner", pruner), ("cache_mb", cache_mb))
               if v is not None}
    exp, spec, resume_dir, ident = _load_sweep(exp_or_path, overrides, trials, resume, options)
    notes = _run_notes(exp, spec)
    hash8, study_name = study_identity(exp, spec, study_name, ident)
    plan = _place(exp, spec, hash8, study_name, storage, out, resume_dir, ident, workers)
    prior = prior_manifest(plan.run_dir)

    verbosity = optuna.logging.get_verbosity()
    # quiet: failed trials are in trials.csv (column error), no need for their tracebacks
    optuna.logging.set_verbosity(optuna.logging.ERROR if quiet else optuna.logging.INFO)
    manifest, sessions = _start_manifest(plan, prior, argv)
    timings: dict[str, float] = {}
    try:
        if plan.run_dir is not None:
            # an earlier session's tables describe the study before this one changes it
            clear_outputs(plan.run_dir)
        study, n_done = _run_trials(plan, progress, timings)
        notes = notes + _more_than_asked(study, spec, n_done) + _grid_notes(study, spec)
        result = _finish(study, exp, spec, plan.run_dir, timings, quiet, plots,
                         jobs=plan.workers, progress=progress)
        result.notes = notes
        result.study_name = study_name
        result.storage = mask_url(plan.storage_spec)
        if plan.run_dir is not None:
            # what `memsim sweep` prints, kept with the files it describes
            write_atomic(plan.run_dir / "sweep" / "summary.txt", lambda p: p.write_text(
                result.summary_text() + "\n", encoding="utf-8"))
        timings["total"] = time.perf_counter() - t_start
        # The report shows the manifest, so the manifest says completed before
        # the report is built (as `memsim run` does); the report's time is
        # added to the completed manifest afterwards.
        if manifest is not None:
            _complete_manifest(manifest, sessions, result, timings, n_done)
        if plan.run_dir is not None and report:
            _write_report(plan.run_dir, timings)
            if manifest is not None:
                manifest.update(timings_s=timings)
        return result
    except BaseException as exc:
        if manifest is not None:
            error = _error_text(exc)
            sessions[-1].update(finished_utc=_now(), error=error)
            if hasattr(exc, "trials_completed"):  # (stopped while its trials ran)
                sessions[-1]["trials_completed"] = exc.trials_completed
            manifest.update(status="failed", error=error, timings_s=timings,
                            finished_utc=_now(), sessions=sessions,
                            hint="run the same command again to resume the sweep")
        raise
    finally:
        optuna.logging.set_verbosity(verbosity)


def _coerce_overrides(overrides) -> dict:
    """``--set`` overrides as a dict (from a dict or "KEY=VALUE" strings)."""
    check_overrides(overrides)
    if overrides is None:
        return {}
    if isinstance(overrides, dict):
        return dict(overrides)
    return dict(parse_override(o) for o in overrides)


def _run_notes(exp: Experiment, spec: SweepSpec) -> list[str]:
    """What the summary says about how the trials run: a ``batch`` that
    cannot batch, a ``pruner`` that cannot prune (also a warning)."""
    notes = []
    if spec.batch > 1 and not spec.batchable:
        notes.append(f"sweep.batch = {spec.batch}: trials ran one at a time, since "
                     f"{', '.join(spec.unbatchable_keys)} (not under policies.) changes what "
                     "trials would share in one replay")
    if spec.pruner != "none" and exp.settings.replicates < 2:
        msg = (f"sweep.pruner = {spec.pruner!r} prunes nothing with experiment.replicates = "
               f"{exp.settings.replicates}: a trial can only be stopped between replicates")
        # stacklevel 3: the caller of run_sweep, whose call the warning is about
        warnings.warn(f"memsim sweep: {msg}", SweepWarning, stacklevel=3)
        notes.append(msg)
    return notes


def _load_sweep(exp_or_path: Experiment | str | Path | None, overrides, trials: int | None,
                resume: str | Path | None, options: dict | None = None,
                ) -> tuple[Experiment, SweepSpec, Path | None, dict | None]:
    """The experiment (with its resolved ``[sweep]`` table) and its spec; with
    ``resume``, the folder and its ``sweep.json``. ``options`` (``batch``,
    ``pruner``) replace the table's keys and are checked with it."""
    ov = _coerce_overrides(overrides)
    ident: dict | None = None  # sweep/sweep.json of the folder resumed
    resume_dir: Path | None = None
    if resume is not None:
        resume_dir = Path(resume)
        ident, cfg_file = load_resume_dir(resume_dir)
        if exp_or_path is None:
            exp_or_path = cfg_file
    if exp_or_path is None:
        raise ConfigError("memsim sweep: give an EXPERIMENT.toml or --resume RUN_DIR")
    if isinstance(exp_or_path, Experiment):
        exp = exp_or_path.with_overrides(ov) if ov else exp_or_path
    else:
        exp = load_experiment(exp_or_path, ov)
    table = exp.sweep if exp.sweep is None or not options else {**exp.sweep, **options}
    if table is not None and trials is not None:
        # --trials replaces sweep.trials: the grid's size is checked against it (with_trials)
        table = {k: v for k, v in table.items() if k != "trials"}
    try:
        spec = SweepSpec.from_config(table, exp)
        # an optional sampler package, before any folder or study exists
        require_sampler(spec)
    except ConfigError as exc:  # name the file, the option or the --set that caused a mistake
        raise _attribute_sweep_error(exc, ov, options or {}, exp.source_file) from None
    if trials is not None:
        spec = spec.with_trials(trials)
    # the resolved experiment, with the resolved sweep table, is what runs
    exp = dataclasses.replace(exp, sweep=spec.to_config())
    return exp, spec, resume_dir, ident


#: ``run_sweep``'s options that replace a ``[sweep]`` key, and the flag that sets each.
_OPTION_FLAGS = {"batch": "--batch", "pruner": "--pruner", "cache_mb": "--cache-mb"}


def _attribute_sweep_error(exc: ConfigError, overrides: dict, options: dict,
                           source_file: str | None) -> ConfigError:
    """``exc`` (a mistake in the ``[sweep]`` table) blaming who made it: an
    option (``--batch: ...``) for a key the options set, else the file (with
    the ``--set`` that set the key, if one did)."""
    exc = attribute_overrides(exc, overrides)
    exc = exc.with_messages([_attribute_related(m, overrides) for m in exc.errors])
    messages = []
    for m in exc.errors:
        key = m.split(":", 1)[0]
        flag = _OPTION_FLAGS.get(key[len("sweep."):]) if key.startswith("sweep.") else None
        if flag is not None and key[len("sweep."):] in options:
            messages.append(f"{flag}:{m.split(':', 1)[1]}")
        else:
            messages.append(f"{source_file}: {m}" if source_file else m)
    return exc.with_messages(messages)


#: A parameter entry's mistake reported at one field (``.low``, ``.step``)
#: that other fields make as much: (words of the message, those fields).
_RELATED_FIELDS = (("a log-scale range needs low > 0", ("log",)),
                   ("is not a multiple of step", ("low", "high")))
_ENTRY_FIELD = re.compile(r'^(sweep\.params\."(?:[^"\\]|\\.)*")\.(\w+): ')


def _attribute_related(message: str, overrides: dict) -> str:
    """``message`` ending in ``(from --set ...)`` when a ``--set`` set a field
    of the same ``[sweep.params]`` entry that the mistake is as much about:
    ``--set '...".log=true'`` on a range from 0 is reported at ``.low``."""
    m = _ENTRY_FIELD.match(message)
    if m is None or not overrides:
        return message
    fields = [f for words, fs in _RELATED_FIELDS if words in message for f in fs]
    for field_ in fields:
        probe = f"{m.group(1)}.{field_}: x"
        for key, value in overrides.items():  # one at a time: each its own text
            got = attribute_overrides(ConfigError(probe), {key: value}).errors[0]
            text = got[len(probe):].removeprefix(" (from ").removesuffix(")")
            if not text or text in message:
                continue
            message = (f"{message[:-1]}, {text})" if message.endswith(")") and
                       "(from --set " in message else f"{message} (from {text})")
    return message


def _place(exp: Experiment, spec: SweepSpec, hash8: str, study_name: str,
           storage: str | None, out: str | Path | None, resume_dir: Path | None,
           ident: dict | None, workers: int) -> _Plan:
    """Find or make the run folder and open the storage the study lives in.

    A storage of the user's (``--storage``, or the one a folder recorded) is
    opened before a new run folder is made, so that one that cannot be opened
    leaves no folder behind (which the same command would find and retry).
    """
    run_dir, ident = locate_run_dir(exp, hash8, out, resume_dir, ident)
    storage = resume_storage(storage, ident, run_dir)
    if storage is None and run_dir is None and out is None and workers > 1:
        raise ConfigError("--workers: several workers need a storage they share; pass --storage "
                          "or an output folder")
    if run_dir is None and out is not None:
        # a file in the way of --out, found before the storage is opened
        # (opening a journal writes its file)
        blocked = file_in_the_way(Path(out))
        if blocked is not None:
            raise ConfigError(f"--out {out}: cannot create a run folder there: {blocked} is a "
                              "file")
    storage_obj = None
    if storage is not None:
        storage_spec = normalise_storage(storage, run_dir)
        storage_obj = open_storage(storage_spec)
        # a --study of another sweep in that storage: refused before any folder exists
        check_study(storage_obj, study_name, spec, hash8)
    if run_dir is None and out is not None:
        try:
            run_dir = new_run_dir(Path(out), exp.name, hash8)
        except OSError as exc:  # a file, under a file, read-only: the user's --out
            raise ConfigError(f"--out {out}: cannot create a run folder there: "
                              f"{exc.strerror or exc}") from None
    if storage_obj is None:  # the default: a journal in the run folder, or memory
        storage_spec = normalise_storage(None, run_dir)
    if run_dir is not None and ident is None:
        write_ident(run_dir, study_name, hash8, storage_spec)
    return _Plan(exp, spec, hash8, study_name, run_dir, storage_spec, workers, storage_obj)


def _start_manifest(plan: _Plan, prior: dict, argv: list[str] | None,
                    ) -> tuple[Any, list[dict]]:
    """Write ``config.toml`` and the manifest (status running), with this
    session appended to the folder's earlier ones.

    Returns the manifest (``memsim.reporting.rundir.Manifest``) and the sessions
    list, or (None, []) without a folder.
    """
    run_dir, exp, spec = plan.run_dir, plan.exp, plan.spec
    if run_dir is None:
        return None, []
    # the manifest first: a folder never holds files without one
    manifest = experiment_manifest(run_dir, exp, argv)
    write_atomic(run_dir / "config.toml", lambda p: p.write_text(
        config_header(exp, "Resolved sweep configuration") + dumps_toml(exp.to_config()),
        encoding="utf-8"))
    sessions = list(prior.get("sessions", []))
    session = {"started_utc": manifest.data["started_utc"], "host": host_name(),
               "pid": os.getpid(), "workers": plan.workers, "argv": manifest.data["argv"]}
    sessions.append(session)
    # config_hash: the hash that names the folder and the study (the sweep's
    # identity: experiment and search space without sweep.trials, and the
    # study name), not the hash of config.toml, which changes with --trials
    manifest.update(kind="sweep", config_hash=plan.hash8, sessions=sessions, sweep={
        "study": plan.study_name, "identity": plan.hash8,
        "storage": recorded_storage(plan.storage_spec, run_dir),
        "trials": spec.trials, "sampler": spec.sampler, "seed": spec.seed,
        "batch": spec.batch if spec.batchable else 1, "pruner": spec.pruner,
        "cache_mb": spec.cache_mb,  # null: automatic (evaluate.cache_budget)
        "objectives": spec.labels, "directions": spec.directions, "params": spec.keys,
        "workers": plan.workers})
    return manifest, sessions


def _one_worker_seed(study, storage, spec: SweepSpec) -> int | None:
    """The sampler seed of a one-worker session: from ``sweep.seed`` and the
    study's state when it starts or resumes the study alone
    (:func:`~memsim.sweep.study.session_seed`: the same folder resumed alike
    samples alike), None when it joins a study another live session works
    on (a RUNNING trial left once this machine's dead workers' trials are
    given back): it then seeds as a worker does, from its host and pid, since
    the same seed would propose the other session's points."""
    reap_dead_workers(study, storage)
    if study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        return None
    return session_seed(spec.seed, study)


def _run_trials(plan: _Plan, progress: Callable[[float], None] | None,
                timings: dict) -> tuple[optuna.Study, int]:
    """Open the study and work on it until it has ``trials`` COMPLETE trials.

    Returns the study and the number of trials completed by this call.
    """
    exp, spec, workers = plan.exp, plan.spec, plan.workers
    storage_obj = plan.storage if plan.storage is not None else open_storage(plan.storage_spec)
    study, _ = open_study(storage_obj, plan.study_name, exp, spec, plan.hash8)
    n_before = count_complete(study)
    t0 = time.perf_counter()
    job = WorkerJob(config=exp.to_config(), base_dir=str(exp.base_dir),
                     source_file=exp.source_file, storage=plan.storage_spec,
                     study_name=plan.study_name, trials=spec.trials,
                     seed=_one_worker_seed(study, storage_obj, spec) if workers == 1 else None,
                     workers=workers)
    try:
        if workers == 1:
            run_worker(job, exp=exp, spec=spec, storage=storage_obj, progress=progress)
        else:
            run_workers(job, workers, study, spec, progress)
        timings["trials"] = time.perf_counter() - t0
        n_after = count_complete(study)
        if n_after < spec.trials:
            _check_grid_done(study, spec, n_after)
    except BaseException as exc:
        # what this session completed before it stopped, for its manifest entry
        with contextlib.suppress(Exception):
            exc.trials_completed = count_complete(study) - n_before
        raise
    return study, n_after - n_before


def _more_than_asked(study, spec: SweepSpec, n_done: int) -> list[str]:
    """A note when the study already had more COMPLETE trials than asked
    (``--trials`` lowered): no trial ran, and the outputs cover them all."""
    n = count_complete(study)
    if n_done or n <= spec.trials:
        return []
    return [f"the study already has {n} COMPLETE trials, more than the {spec.trials} asked "
            f"(sweep.trials or --trials): no trial ran, and the outputs cover all {n}"]


def _check_grid_done(study, spec: SweepSpec, n_complete: int) -> None:
    """Accept a study with fewer than ``trials`` COMPLETE trials only when it
    is a grid whose every point was tried once and some failed (they are
    reported: :func:`_grid_notes`); otherwise the workers stopped early."""
    if spec.sampler == "grid":
        tried, failed = grid_points(study, spec)
        if failed and len(tried) >= grid_size(spec):
            if n_complete == 0:
                t = next(iter(failed.values()))
                raise MemsimError(f"sweep: every point of the grid failed; the first, trial "
                                  f"{t.number} ({point_text(t.params)}): {_trial_error(t)}")
            return
    raise MemsimError(f"sweep: the study has {n_complete} of {spec.trials} COMPLETE "
                      "trials (workers stopped early); run the same command again "
                      "to resume")


def _grid_notes(study, spec: SweepSpec) -> list[str]:
    """The failed points of a grid sweep, for the summary (a note each) and
    a warning when the grid ended with fewer COMPLETE trials than asked."""
    if spec.sampler != "grid":
        return []
    _, failed = grid_points(study, spec)
    if not failed:
        return []
    notes = [f"grid point {point_text(t.params)} failed (trial {t.number}: "
             f"{_trial_error(t)}) and is not run again"
             for t in sorted(failed.values(), key=lambda t: t.number)]
    n_complete = count_complete(study)
    if n_complete < spec.trials:
        msg = (f"sweep.trials: the grid ended with {n_complete} COMPLETE trials of the "
               f"{spec.trials} asked: {len(failed)} of its {grid_size(spec)} points failed "
               "(each point runs once; see trials.csv)")
        # stacklevel 3: the caller of run_sweep, whose call the warning is about
        warnings.warn(f"memsim sweep: {msg}", SweepWarning, stacklevel=3)
        notes.insert(0, msg)
    return notes


def _trial_error(t) -> str:
    """Why a FAIL trial failed, as its user attributes say."""
    why = t.user_attrs.get("error") or t.user_attrs.get("failed_reason") or "failed"
    return " ".join(str(why).split())[:200]


def _finish(study, exp: Experiment, spec: SweepSpec, run_dir: Path | None,
            timings: dict, quiet: bool, want_plots: bool = True, jobs: int = 1,
            progress=None) -> SweepResult:
    """Trials table, best configuration, robustness check (its replays
    ``jobs`` at a time, at least as many as the cores: the sweep's workers are
    done, and every check's replays share one pool), plateaus and plots.
    A ``progress`` with phases (the CLI's) shows the re-check as a phase of
    its own."""
    t0 = time.perf_counter()
    table = trials_table(study, spec)
    best = best_trials(study, spec)
    best_params = dict(best[0].params) if best else {}
    best_values = dict(zip(spec.labels, best[0].values)) if best else {}
    evaluator = TrialEvaluator(exp, spec, jobs=max(jobs, default_jobs()))
    cands = robustness_candidates(study, spec, best, exp.settings.replicates)
    recheck = None
    if cands and hasattr(progress, "phase"):
        n = robustness_replays(spec, exp.settings.replicates)
        if n:
            progress.phase(f"robustness re-check of {len(cands)} trial(s)", units=n,
                           unit="replay")
            recheck = progress
    robust = robustness_check(evaluator, spec, cands, progress=recheck) if cands \
        else pd.DataFrame()
    timings["robustness"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    params_of = {t.number: dict(t.params) for t in study.trials}

    def evaluate(numbers: list[int], reps: list[int]) -> dict[int, dict]:
        outs = evaluator.evaluate_batch([params_of[n] for n in numbers],
                                        names=[f"t{n}" for n in numbers], replicates=reps)
        return {n: o.per_replicate for n, o in zip(numbers, outs) if not o.error}

    # the plateau's trials on more replicates (fresh: past the robustness
    # check's) until each plateau is determined or the cap is reached; replays
    # of one stream measure no replicate noise, so no plateau
    plateau, _ = grow_plateau(table, spec, evaluate, first_replicate=(
        exp.settings.replicates + spec.robustness.replicates),
        replays=replays_one_stream(exp))
    timings["plateau"] = time.perf_counter() - t1
    plots: dict[str, str] = {}
    importance = pd.DataFrame(columns=IMPORTANCE_COLUMNS)
    if run_dir is not None:
        plots, importance = write_outputs(study, exp, spec, table, robust, best,
                                           run_dir / "sweep", timings, quiet, want_plots,
                                           plateau)
    return SweepResult(experiment=exp, spec=spec, study=study, trials=table,
                       best_params=best_params, best_values=best_values,
                       best_number=best[0].number if best else None,
                       pareto=[t.number for t in best], robustness=robust, path=run_dir,
                       plots=plots, timings=timings, plateau=plateau, importance=importance)


def _complete_manifest(manifest, sessions: list[dict], result: SweepResult,
                       timings: dict, n_done: int) -> None:
    """Mark the run completed: this session's trials, the timings, the best trial."""
    sessions[-1].update(trials_completed=n_done, finished_utc=_now())
    manifest.update(status="completed", timings_s=timings, finished_utc=_now(),
                    sessions=sessions, plots=result.plots,
                    best={"number": result.best_number, "values": result.best_values,
                          "params": result.best_params})


def _write_report(run_dir: Path, timings: dict) -> None:
    """Build the run folder's ``report.html``; a failure only warns."""
    t1 = time.perf_counter()
    try:
        build_report(run_dir)
    except Exception as exc:  # the sweep's results stand without a report
        # stacklevel 3: the caller of run_sweep, whose call the warning is about
        warnings.warn(f"memsim sweep: report.html failed: {type(exc).__name__}: {exc}",
                      SweepWarning, stacklevel=3)
    timings["report"] = time.perf_counter() - t1


def _error_text(exc: BaseException) -> str:
    """What the manifest's ``error`` says of ``exc``: its type and message, or
    its type alone when it has none (Ctrl-C: ``KeyboardInterrupt``)."""
    msg = str(exc)
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def _now() -> str:
    """The current UTC time as the manifest records it."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
