"""Worker processes: the loop that runs trials until the study is complete.

A worker (:func:`_work`) loads the study, reaps the trials of dead workers
(:mod:`memsim.sweep.liveness`) and runs ``study.optimize`` one trial at a
time until the study has ``trials`` COMPLETE trials. The function Optuna
calls (:class:`_TrialObjective`) claims its trial, steps aside when enough
trials are COMPLETE or under way (so none is counted twice), evaluates the
parameters with a :class:`~memsim.sweep.evaluate.TrialEvaluator` and records
the per-replicate values as user attributes.

``--workers N`` starts N such processes, spawned (:func:`_run_workers`), that
share the storage. The same command on another machine, with the same
``--storage postgresql://...`` and ``--study``, joins the study.

Reproducibility: with one worker on a fresh study the sampler is seeded with
the sweep's ``seed``. Each extra worker seeds its sampler from ``seed``, its
host and its pid (:func:`_worker_seed`) so that workers do not propose the
same points; the order in which their trials finish depends on timing.
"""

from __future__ import annotations

import copy
import json
import math
import multiprocessing
import os
import sys
import time
import traceback
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Callable

import numpy as np
import optuna
from optuna.trial import TrialState

from memsim.config import Experiment, experiment_from_dict
from memsim.errors import ConfigError, MemsimError
from memsim.rundir import proc_start

from .evaluate import TrialEvaluator
from .liveness import _host, _reap, _retry, _worker_id
from .space import SweepSpec, _grid_size
from .storage import open_storage
from .study import _make_sampler, _n_complete, _quiet_optuna

#: Seconds a worker waits before re-checking the study when the last trials
#: are running elsewhere.
POLL_S = 0.5


class _Surplus(Exception):
    """The study already has enough trials COMPLETE or under way."""


class _TrialFailed(MemsimError):
    """A trial's parameters gave an invalid experiment or a NaN objective."""


class _TrialObjective:
    """The function Optuna calls: claim, check for surplus, evaluate, record."""

    def __init__(self, evaluator: TrialEvaluator, spec: SweepSpec):
        self.evaluator = evaluator
        self.spec = spec
        self.worker = _worker_id()
        self.start = proc_start(os.getpid())
        #: number of the trial being evaluated (None between trials)
        self.current: int | None = None

    def __call__(self, trial):
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
    """A sampler seed of its own for this worker process (see the module docstring)."""
    ss = np.random.SeedSequence([spec_seed, int.from_bytes(_host().encode()[:8], "little"),
                                 os.getpid()])
    return int(ss.generate_state(1)[0])


def _work(job: _WorkerJob, exp: Experiment | None = None, spec: SweepSpec | None = None,
          storage=None, progress: Callable[[float], None] | None = None) -> int:
    """Run trials until the study has ``job.trials`` COMPLETE trials.

    ``exp``, ``spec`` and ``storage`` are built from ``job`` when not given
    (a spawned worker gets only the job). Returns the number of trials this
    worker completed.
    """
    spec, study, objective = _start_worker(job, exp, spec, storage)
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
        _optimize_one(study, objective)
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


def _start_worker(job: _WorkerJob, exp: Experiment | None, spec: SweepSpec | None, storage,
                  ) -> tuple[SweepSpec, optuna.Study, _TrialObjective]:
    """The spec (with the job's trials), the study loaded with this worker's
    sampler, and the objective Optuna will call."""
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
    return spec, study, _TrialObjective(TrialEvaluator(exp, spec), spec)


def _optimize_one(study, objective: _TrialObjective) -> None:
    """Let Optuna run one trial; on Ctrl-C give the interrupted trial's
    parameters back to the study before stopping."""
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


def _last_trial_of(study, worker: str):
    """The trial ``worker`` started last (None before its first)."""
    mine = [t for t in study.get_trials(deepcopy=False)
            if t.user_attrs.get("worker") == worker and t.user_attrs.get("worker_trial")
            == t.number]
    return max(mine, key=lambda t: t.datetime_start or datetime.min) if mine else None


def _grid_exhausted(study, spec: SweepSpec) -> bool:
    """Whether every grid point is COMPLETE or running."""
    seen = {json.dumps([t.params.get(k) for k in spec.keys])
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,
                                                                TrialState.RUNNING))}
    return len(seen) >= _grid_size(spec)


def _worker_main(job: _WorkerJob) -> None:
    """Entry point of a spawned worker process."""
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


def _run_workers(job: _WorkerJob, workers: int, study, spec: SweepSpec,
                 progress: Callable[[float], None] | None) -> None:
    """Spawn ``workers`` processes and wait for them, reporting progress."""
    ctx = multiprocessing.get_context("spawn")
    procs = []
    for i in range(workers):
        j = replace(job, index=i, seed=None)
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

