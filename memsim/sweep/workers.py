"""Worker processes: the loop that runs trials until the study has enough.

A worker (:func:`run_worker`) loads the study, reaps the trials of dead workers
(:mod:`memsim.sweep.liveness`) and runs batches of trials
(:class:`_TrialBatch`) until the study has ``trials`` COMPLETE trials.

A batch is Optuna's ask-and-tell: the worker asks for up to ``sweep.batch``
trials (no more than the study still needs: ``trials`` minus the COMPLETE
and running ones), claims each (its worker, so that a reaper can tell whose
it is), steps aside when enough trials are COMPLETE or under way (so none is
counted twice: see :meth:`_TrialBatch._surplus`), suggests its parameters
and evaluates the batch with
:meth:`~memsim.sweep.evaluate.TrialEvaluator.evaluate_batch`: one replay
per replicate for all of them when only policies are swept, replicates
outermost. After each replicate a single-objective trial reports its running
value (``trial.report``, step = replicates done) and, with a pruner, asks
whether to stop (``trial.should_prune``); a stopped trial ends PRUNED and
does not count. A trial whose parameters fail fails alone. Trials run one at
a time (a batch of one) by default and when a swept key is outside
``policies.``. On an RDB storage each trial of a batch sends Optuna's
heartbeat.

``--workers N`` starts N such processes, spawned (:func:`run_workers`), that
share the storage. A spawned worker rebuilds the experiment from the resolved
config (:func:`memsim.runs.config.experiment_from_dict`), which imports the
``[experiment] plugins`` first, so components registered by the user's own
modules resolve there too (the worker inherits the parent's ``sys.path``).
The same command on another machine, with the same ``--storage
postgresql://...`` and ``--study``, joins the study.

Reproducibility: with one worker the sampler is seeded with
:func:`~memsim.sweep.study.session_seed` (the sweep's ``seed`` on a study
with no finished trial, else a seed derived from it and the number of
COMPLETE and PRUNED trials), so a session is reproducible from the folder it
starts on (a batch asks its trials in order, so a given batch size is
reproducible too). With several workers each seeds its sampler from
``seed``, its host and its pid (:func:`_worker_seed`) so that workers do not
propose the same points; the order in which their trials finish depends on
timing.

A grid sweep runs each point once: a worker stops when every point was tried
(:func:`~memsim.sweep.study.grid_points`: COMPLETE, running or FAIL on its
own account), even with fewer COMPLETE trials than asked, and a trial that
Optuna's grid sampler gives a point another trial holds (two workers racing
for the last one) steps aside as surplus.
"""

from __future__ import annotations

import contextlib
import copy
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import optuna
from optuna.trial import TrialState

from memsim.runs.config import Experiment, experiment_from_dict
from memsim.core import interrupt
from memsim.core.errors import ConfigError, MemsimError
from memsim.reporting.rundir import proc_start

from .evaluate import TrialEvaluator, TrialOutcome, cache_budget
from .liveness import host_name, reap_dead_workers, retry_trial, trial_id, worker_id
from .space import SweepSpec, grid_size
from .storage import open_storage
from .study import (GIVEN_BACK, count_complete, given_up_trials, grid_points, make_pruner,
                    make_sampler, point_key, quiet_optuna)

#: Seconds a worker waits before re-checking the study when the last trials
#: are running elsewhere.
POLL_S = 0.5


class _TrialBatch:
    """Runs batches of trials for one worker: ask, claim, evaluate, tell."""

    def __init__(self, evaluator: TrialEvaluator, spec: SweepSpec, storage):
        self.evaluator = evaluator
        self.spec = spec
        #: the study's storage, as opened (heartbeats and trial states go through it)
        self.storage = storage
        self.worker = worker_id()
        self.start = proc_start(os.getpid())
        #: trials asked for at once (1 when trials cannot share a replay)
        self.size = spec.batch if spec.batchable else 1
        self.replicates = evaluator.exp.settings.replicates
        self.prune = spec.pruner != "none" and self.replicates >= 2
        #: Optuna takes intermediate values of a single-objective study only
        self.report = not spec.multi
        #: the trials asked and not yet told (given back on Ctrl-C)
        self.open: list = []

    def run(self, study, n: int) -> list[tuple[TrialState, str]]:
        """Ask for up to ``n`` trials, evaluate them together and tell Optuna.

        Returns (state, error) of each trial this batch ran (not the surplus
        one, which only stepped aside).
        """
        self.open = []
        try:
            interrupt.raise_if_asked()  # a stop lost before this batch: no new trial
            with quiet_optuna():
                params = self._ask(study, n)
                if not params:
                    return []
                with _heartbeats(self.storage, [trial_id(self.storage, study, t.number)
                                                for t in self.open]):
                    return self._evaluate(study, params)
        except KeyboardInterrupt as exc:
            # give the interrupted trials' parameters back to the study, each
            # saying why it failed (its retry starts without the error)
            why = f"interrupted: {type(exc).__name__}" + (f": {exc}" if str(exc) else "")
            for t in self._still_open(study):
                with contextlib.suppress(Exception):
                    t.set_user_attr("error", why)
                # given back before FAIL: a second Ctrl-C before its retry is
                # enqueued must not leave a failure of its point
                t.set_user_attr(GIVEN_BACK, True)
                _tell(study, t, state=TrialState.FAIL)
                retry_trial(study, self.storage.get_trial(trial_id(self.storage, study, t.number)))
            raise
        except BaseException as exc:
            # as study.optimize does: the trials fail and the error is raised
            for t in self._still_open(study):
                with contextlib.suppress(Exception):
                    t.set_user_attr("error", f"{type(exc).__name__}: {exc}"[:500])
                with contextlib.suppress(Exception):
                    _tell(study, t, state=TrialState.FAIL)
            raise
        finally:
            self.open = []

    def _ask(self, study, n: int) -> list[dict]:
        """Ask for, claim and parametrise up to ``n`` trials (fewer when the
        study turns out to have enough)."""
        params = []
        for _ in range(n):
            trial = study.ask()
            self.open.append(trial)
            # claim first: a reaper must be able to tell whose trial this is
            trial.set_user_attr("worker", self.worker)
            trial.set_user_attr("worker_start", self.start)
            trial.set_user_attr("worker_trial", trial.number)
            if self._surplus(study, trial):
                trial.set_user_attr("surplus", True)
                _tell(study, trial, state=TrialState.FAIL)
                self.open.pop()
                break  # any later trial would be surplus too
            point = {p.key: p.suggest(trial) for p in self.spec.params}
            if self.spec.sampler == "grid" and self._taken(study, trial, point):
                # Optuna's grid sampler re-picks a taken point once none is
                # left (two workers racing for the last one): step aside
                trial.set_user_attr("surplus", True)
                _tell(study, trial, state=TrialState.FAIL)
                self.open.pop()
                break
            params.append(point)
        return params

    def _taken(self, study, trial, point: dict) -> bool:
        """Whether a trial numbered below ``trial`` holds grid point ``point``
        (the lower number keeps it, so two workers agree on who steps aside)."""
        key = point_key(self.spec, point)
        trials = study.get_trials(deepcopy=False)
        given_up = given_up_trials(trials)
        return any(point_key(self.spec, t.params or t.system_attrs.get("fixed_params") or {})
                   == key for t in trials if t.number < trial.number and t.number not in given_up)

    def _surplus(self, study, trial) -> bool:
        """Whether the study has ``trials`` trials COMPLETE or under way
        numbered below ``trial``. By trial number: the set of trials numbered
        below this one only grows, so two workers racing for the last slot
        agree on which of them is surplus; a trial of this batch counts for
        the ones asked after it."""
        ahead = sum(1 for t in study.get_trials(
            deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING))
            if t.number < trial.number)
        return ahead >= self.spec.trials

    def _evaluate(self, study, params: list[dict]) -> list[tuple[TrialState, str]]:
        """Evaluate the open trials (replicates outermost, reporting and
        pruning after each), record their values and tell Optuna."""
        trials = list(self.open)
        t0 = time.perf_counter()
        ended: dict[int, float] = {}
        reference = [t.user_attrs.get("origin") == "experiment" for t in trials]

        def after_replicate(i: int, step: int, values: list[float]) -> bool:
            t = trials[i]
            if self.report and math.isfinite(values[0]):
                t.report(values[0], step)
            # trial 0 is the reference of the robustness check: never pruned;
            # nor is a trial that has run every replicate
            if not self.prune or reference[i] or step >= self.replicates:
                return False
            if t.should_prune():
                ended[i] = time.perf_counter()
                return True
            return False

        outcomes = self.evaluator.evaluate_batch(
            params, names=[f"t{t.number}" for t in trials], after_replicate=after_replicate)
        t_end = time.perf_counter()
        return [self._tell_outcome(study, t, out, ended.get(i, t_end) - t0, len(trials))
                for i, (t, out) in enumerate(zip(trials, outcomes))]

    def _tell_outcome(self, study, t, out: TrialOutcome, seconds: float,
                      size: int) -> tuple[TrialState, str]:
        """Record one trial's outcome (user attributes) and tell Optuna."""
        if out.error:
            t.set_user_attr("error", out.error[:500])
            _tell(study, t, state=TrialState.FAIL)
            return TrialState.FAIL, out.error
        # seconds: wall time from the start of the batch to this trial's end
        t.set_user_attr("seconds", round(seconds, 4))
        if size > 1:
            t.set_user_attr("batch", size)
        for label, reps in out.per_replicate.items():
            for r, v in reps.items():
                t.set_user_attr(f"{label}_rep{r}", v)
        if out.stopped_after is not None:
            t.set_user_attr("pruned_after", out.stopped_after)
            _tell(study, t, state=TrialState.PRUNED)
            return TrialState.PRUNED, ""
        bad = [lab for lab, v in zip(self.spec.labels, out.values) if not math.isfinite(v)]
        if bad:
            msg = f"objective {bad[0]} is NaN for every replicate"
            t.set_user_attr("error", msg)
            _tell(study, t, state=TrialState.FAIL)
            return TrialState.FAIL, msg
        _tell(study, t, values=list(out.values))
        return TrialState.COMPLETE, ""

    def _still_open(self, study) -> list:
        """The open trials still RUNNING in the storage."""
        running = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
        return [t for t in self.open if t.number in running]


def _tell(study, trial, values: list[float] | None = None, state: TrialState | None = None,
          ) -> None:
    """``study.tell``. The grid sampler asks Optuna to stop its optimisation
    loop once every point is taken, which ask-and-tell has not got: Optuna
    raises then, after the trial's state is written; that is not an error."""
    try:
        study.tell(trial, values, state=state)
    except RuntimeError as exc:
        if "Study.stop" not in str(exc):
            raise


@contextlib.contextmanager
def _heartbeats(storage, trial_ids: list[int]):
    """Send Optuna's heartbeat for ``trial_ids`` while the block runs (RDB
    storages with a heartbeat; nothing otherwise), one thread for the batch,
    as ``study.optimize`` does for its one trial."""
    get_interval = getattr(storage, "get_heartbeat_interval", None)
    interval = get_interval() if get_interval is not None else None
    if not interval or not trial_ids:
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while True:
            for tid in trial_ids:
                with contextlib.suppress(Exception):  # a trial finished or a glitch: next beat
                    storage.record_heartbeat(tid)
            if stop.wait(timeout=interval):
                return

    thread = threading.Thread(target=beat, name="memsim-sweep-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _fail_stale(study, storage) -> None:
    """Fail (and retry) the trials whose heartbeat stopped (RDB storages with
    a heartbeat), as ``study.optimize`` does before each trial."""
    get_interval = getattr(storage, "get_heartbeat_interval", None)
    if get_interval is not None and get_interval() is not None:
        with quiet_optuna():
            optuna.storages.fail_stale_trials(study)


@dataclass
class WorkerJob:
    """Everything a worker process needs (picklable for spawn)."""

    config: dict
    base_dir: str
    source_file: str
    storage: str
    study_name: str
    trials: int
    #: the sampler's seed (one worker: session_seed); None: derive it from
    #: the spec's seed, the host and the pid (_worker_seed)
    seed: int | None
    index: int = 0
    #: worker processes on this machine (they share its memory)
    workers: int = 1


def _worker_seed(spec_seed: int) -> int:
    """A sampler seed of its own for this worker process (see the module docstring)."""
    ss = np.random.SeedSequence([spec_seed, int.from_bytes(host_name().encode()[:8], "little"),
                                 os.getpid()])
    return int(ss.generate_state(1)[0])


def run_worker(job: WorkerJob, exp: Experiment | None = None, spec: SweepSpec | None = None,
          storage=None, progress: Callable[[float], None] | None = None) -> int:
    """Run trials until the study has ``job.trials`` COMPLETE trials.

    ``exp``, ``spec`` and ``storage`` are built from ``job`` when not given
    (a spawned worker gets only the job). Returns the number of trials this
    worker completed.
    """
    spec, study, batch = _start_worker(job, exp, spec, storage)
    done = failures = 0
    last_error = ""
    while True:
        reap_dead_workers(study, batch.storage)
        _fail_stale(study, batch.storage)
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
        untried = None  # grid points no trial has taken yet
        if spec.sampler == "grid" and not n_waiting:
            tried, failed = grid_points(study, spec)
            untried = grid_size(spec) - len(tried)
            if untried <= 0:
                if n_running:  # the last points run elsewhere
                    time.sleep(POLL_S)
                    continue
                if failed:
                    # every point was tried once; the failed ones are
                    # reported (run._grid_notes), never run again
                    return done
                raise ConfigError(f"sweep.trials: the grid has only {grid_size(spec)} points "
                                  f"and {n_complete} trials completed; ask for at most that "
                                  "many")
        # no more than the study still needs (a pruned trial frees its slot
        # again), nor than the grid has points left
        n = max(1, min(batch.size, spec.trials - n_complete - n_running,
                       untried if untried is not None else batch.size))
        for state, error in batch.run(study, n):
            if state == TrialState.COMPLETE:
                done += 1
            elif state == TrialState.FAIL:
                failures += 1
                last_error = error or "the trial failed"
        if failures > max(10, spec.trials):
            raise ConfigError(f"sweep: {failures} trials failed in this worker; the last "
                              f"one: {last_error}")


def _start_worker(job: WorkerJob, exp: Experiment | None, spec: SweepSpec | None, storage,
                  ) -> tuple[SweepSpec, optuna.Study, _TrialBatch]:
    """The spec (with the job's trials), the study loaded with this worker's
    sampler and pruner, and the batch runner."""
    if exp is None:
        exp = experiment_from_dict(copy.deepcopy(job.config), base_dir=job.base_dir,
                                   source_file=job.source_file)
    if spec is None:
        spec = SweepSpec.from_config(exp.sweep, exp)
    spec = spec.with_trials(job.trials)
    storage = storage if storage is not None else open_storage(job.storage)
    seed = job.seed if job.seed is not None else _worker_seed(spec.seed)
    with quiet_optuna():
        study = optuna.load_study(study_name=job.study_name, storage=storage,
                                  sampler=make_sampler(spec, seed, first=spec.own_params(exp)),
                                  pruner=make_pruner(spec, exp.settings.replicates))
    evaluator = TrialEvaluator(exp, spec, cache_bytes=cache_budget(spec.cache_mb, job.workers))
    return spec, study, _TrialBatch(evaluator, spec, storage)


def _worker_main(job: WorkerJob) -> None:
    """Entry point of a spawned worker process (started with SIGINT ignored,
    :func:`run_workers`: a Ctrl-C while it imports is its parent's to handle)."""
    # the first SIGINT or SIGTERM stops its batch, which gives its open
    # trials back to the study; later ones cannot cut that short
    interrupt.install(interrupt.once_on_signal)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        run_worker(job)
    except KeyboardInterrupt:
        sys.exit(130)
    except MemsimError as exc:
        print(f"memsim: sweep worker {job.index}: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except BaseException:
        traceback.print_exc()
        sys.exit(1)


def run_workers(job: WorkerJob, workers: int, study, spec: SweepSpec,
                 progress: Callable[[float], None] | None) -> None:
    """Spawn ``workers`` processes and wait for them, reporting progress."""
    ctx = multiprocessing.get_context("spawn")
    procs = []
    # started with SIGINT ignored (inherited across exec): a Ctrl-C while a
    # worker imports would print its traceback; each sets its own handlers
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        for i in range(workers):
            j = replace(job, index=i, seed=None)
            p = ctx.Process(target=_worker_main, args=(j,), name=f"memsim-sweep-{i}")
            p.start()
            procs.append(p)
    finally:
        if main:
            signal.signal(signal.SIGINT, old if old is not None else signal.SIG_DFL)
    try:
        while any(p.is_alive() for p in procs):
            if progress is not None:
                progress(min(1.0, count_complete(study) / spec.trials))
            for p in procs:
                p.join(timeout=0.5 / len(procs))
    except BaseException:
        # SIGTERM: each gives its open trials back, then exits
        for p in procs:
            if p.is_alive():
                p.terminate()
        deadline = time.monotonic() + 30.0
        for p in procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
            if p.is_alive():  # its trials are reaped as a dead worker's on resume
                p.kill()
                p.join()
        raise
    codes = [p.exitcode for p in procs]
    if any(c == 2 for c in codes) and count_complete(study) < spec.trials:
        raise ConfigError("sweep: a worker stopped on an error in the experiment (see above)")
    if progress is not None:
        progress(min(1.0, count_complete(study) / spec.trials))

