"""The Optuna study of a sweep: its sampler, creating or loading it, trial 0.

Holds :func:`open_study` (create the study or join an existing one, refuse
one that belongs to another sweep, enqueue the experiment's own parameters as
trial 0 on a fresh study), :func:`make_sampler` (the ``sampler = "..."`` of
the ``[sweep]`` table), :func:`make_pruner` (its ``pruner = "..."``; a
pruner lives in each worker, not in the storage, so a study may be resumed
with another), :func:`count_complete` (the count of COMPLETE trials
every loop polls) and :func:`quiet_optuna`, which keeps the warnings about
Optuna's experimental features that memsim uses on purpose off the console.
"""

from __future__ import annotations

import contextlib
import importlib.util
import warnings

import numpy as np
import optuna
from optuna.trial import TrialState

from memsim.runs.config import Experiment
from memsim.core.errors import ConfigError

from .space import SweepSpec, _is_number


@contextlib.contextmanager
def quiet_optuna():
    """Optuna warns about experimental features memsim uses on purpose
    (heartbeats, retries, metric names, plots, heartbeats outside
    ``study.optimize``); keep them off the console."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", FutureWarning)
        warnings.filterwarnings("ignore", message=".*computes the importances of params to "
                                "achieve low `target` values")
        # memsim's ask-and-tell batches send the heartbeat themselves
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used "
                                "with Study.optimize")
        yield


def count_complete(study) -> int:
    """Number of COMPLETE trials of ``study``."""
    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


class _GridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler, counting trial 0 as the grid point it is.

    Trial 0 (the experiment's own parameters, a point of the grid) is
    enqueued, and Optuna's sampler gives an enqueued trial no grid point: it
    would run that point a second time and leave another one out (trial
    ``k`` takes point ``k``). Here the own point is point 0 of the order, and
    an enqueued trial (trial 0, or the retry of a failed one) takes the point
    its parameters are, so each point runs once. The order comes from
    ``sweep.seed`` alone, so that a point's number means the same point in
    every worker and every session of the study.
    """

    def __init__(self, spec: SweepSpec, first: dict | None = None) -> None:
        super().__init__({p.key: p.grid() for p in spec.params}, seed=spec.seed)
        if first is not None:
            i = self._grid_id(first)
            if i is not None:
                self._all_grids[0], self._all_grids[i] = self._all_grids[i], self._all_grids[0]

    def _grid_id(self, params: dict) -> int | None:
        """The number of the grid point ``params`` are (None: not a point)."""
        if any(k not in params for k in self._param_names):
            return None
        point = [params[k] for k in self._param_names]
        for i, grid in enumerate(self._all_grids):
            if all(_same_value(a, b) for a, b in zip(grid, point)):
                return i
        return None

    def _get_unvisited_grid_ids(self, study) -> list[int]:
        """Optuna's rule (a point is visited once a trial of it finished, and
        the running ones are taken last), except that a trial that gave its
        point up is no visit: one that stepped aside as surplus, or one
        interrupted and enqueued again (its retry holds the point; a retry
        waiting to run counts as running). A point whose trial failed on its
        own stays visited: it is not run again (:func:`grid_points`)."""
        trials = study._storage.get_all_trials(study._study_id, deepcopy=False)
        given_up = given_up_trials(trials)
        visited, running = set(), set()
        for t in trials:
            if "grid_id" not in t.system_attrs or t.number in given_up or \
                    not self._same_search_space(t.system_attrs.get("search_space", {})):
                continue
            if t.state == TrialState.FAIL and any(k not in t.params for k in self._param_names):
                continue  # failed before its point was set: it tried nothing (grid_points)
            if t.state.is_finished():
                visited.add(t.system_attrs["grid_id"])
            else:
                running.add(t.system_attrs["grid_id"])
        every = set(range(self._n_min_trials))
        return list(every - visited - running or every - visited)

    def before_trial(self, study, trial) -> None:
        fixed = trial.system_attrs.get("fixed_params")
        if fixed is not None and "grid_id" not in trial.system_attrs:
            i = self._grid_id(fixed)
            if i is not None:
                study._storage.set_trial_system_attr(trial._trial_id, "search_space",
                                                     self._search_space)
                study._storage.set_trial_system_attr(trial._trial_id, "grid_id", i)
            return
        super().before_trial(study, trial)


def _same_value(a, b) -> bool:
    """Whether a grid value and a parameter's value are one point: numbers
    as :func:`point_key` compares them (to 12 significant digits: 0.1 + 2 *
    0.1 is the point 0.3, and an int grid value 15 the float 15.0), any
    other value by type and value (a bool is no number)."""
    if _is_number(a) and _is_number(b):
        return _number_key(a) == _number_key(b)
    return type(a) is type(b) and a == b


def _number_key(v) -> float:
    """A number as a grid point compares it: 12 significant digits."""
    return float(f"{float(v):.12g}")


#: the user attribute of a trial that gives its parameters back (interrupted,
#: or its worker died), set before it is told FAIL: a signal or a death
#: between that and its retry leaves no failure of its point behind
GIVEN_BACK = "given_back"


def given_up_trials(trials) -> set[int]:
    """Numbers of the FAIL trials that gave their parameters back: a surplus
    trial (it stepped aside, :meth:`memsim.sweep.workers._TrialBatch._ask`)
    and one enqueued again after an interrupt or a dead worker (its number is
    in a later trial's ``retry_history``, or it was marked given back before
    it failed: a retry a second signal or a death cut short)."""
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", ())}
    return {t.number for t in trials if t.state == TrialState.FAIL
            and (t.number in retried or t.user_attrs.get("surplus")
                 or t.user_attrs.get(GIVEN_BACK))}


def point_key(spec: SweepSpec, params: dict) -> tuple | None:
    """A grid point as a hashable key (numbers compared as floats to 12
    digits, so 0.1 + 2 * 0.1 is the point 0.3; a bool is no number), or None
    when ``params`` lacks a swept key."""
    if any(k not in params for k in spec.keys):
        return None
    out = []
    for k in spec.keys:
        v = params[k]
        if _is_number(v):
            out.append(("number", _number_key(v)))
        else:
            out.append((type(v).__name__, v))
    return tuple(out)


def grid_points(study, spec: SweepSpec) -> tuple[set, dict]:
    """What a grid sweep has done with its points: (tried, failed).

    ``tried``: the points a trial took (:func:`point_key`): COMPLETE,
    RUNNING or WAITING, or FAIL on its own account. ``failed``: point ->
    its FAIL trial, for the tried points none of whose trials completed.
    A FAIL trial that gave its point back (:func:`given_up_trials`) tried
    nothing: its retry holds the point, or another trial takes it. The grid
    is exhausted when every point is tried; a failed point is reported, and
    never run again (a grid runs each point once).
    """
    trials = study.get_trials(deepcopy=False)
    given_up = given_up_trials(trials)
    tried: set = set()
    complete: set = set()
    failed: dict = {}
    for t in trials:
        params = t.params or t.system_attrs.get("fixed_params") or {}
        key = point_key(spec, params)
        if key is None or t.number in given_up:
            continue
        tried.add(key)
        if t.state == TrialState.COMPLETE:
            complete.add(key)
        elif t.state == TrialState.FAIL:
            failed.setdefault(key, t)
    return tried, {k: t for k, t in failed.items() if k not in complete}


#: Samplers that need a package Optuna does not install, and that package.
SAMPLER_PACKAGES = {"cmaes": "cmaes"}


def require_sampler(spec: SweepSpec) -> None:
    """Refuse a sampler whose optional package is missing (``cmaes`` needs
    the ``cmaes`` package), as a mistake of ``sweep.sampler``: checked with
    the ``[sweep]`` table, before any folder or study exists."""
    package = SAMPLER_PACKAGES.get(spec.sampler)
    if package is not None and not _installed(package):
        raise ConfigError(f"sweep.sampler: {spec.sampler!r} needs the optional {package} "
                          f"package, which is not installed (pip install {package}); or "
                          "use another sampler (tpe, random, qmc, nsga2)")


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported (found without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or half-removed install
        return False


def session_seed(seed: int, study) -> int:
    """The sampler seed of a one-worker session on ``study``.

    ``seed`` (``sweep.seed``) while the study has no COMPLETE or PRUNED
    trial: a fresh study, or one stopped before its first trial ended (trial
    0 still queued, or failed and queued again), runs as a fresh one does.
    Otherwise a seed derived from ``seed`` and the number ``n`` of those
    trials (``numpy.random.SeedSequence([seed, n])``), which are what the
    samplers learn from: the same folder resumed the same way samples the
    same trials, whichever process or machine resumes it.
    """
    n = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))
    if n == 0:
        return seed
    return int(np.random.SeedSequence([seed, n]).generate_state(1)[0])


def make_sampler(spec: SweepSpec, seed: int, first: dict | None = None):
    """The Optuna sampler named by ``spec.sampler``, seeded with ``seed``;
    the grid sampler (:class:`_GridSampler`) is seeded with ``spec.seed`` and
    puts ``first`` (trial 0's parameters) first, and the QMC sampler's
    sequence is scrambled with ``spec.seed`` (its categorical parameters
    are drawn with ``seed``), so that each continues its one order across
    sessions and workers."""
    with quiet_optuna():
        if spec.sampler == "tpe":
            return optuna.samplers.TPESampler(seed=seed)
        if spec.sampler == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if spec.sampler == "qmc":
            # one scrambled sequence for the whole study: every session and
            # worker continues it (Optuna numbers its points in the storage);
            # another seed would start another sequence
            return optuna.samplers.QMCSampler(
                seed=spec.seed, scramble=True,
                independent_sampler=optuna.samplers.RandomSampler(seed=seed))
        if spec.sampler == "nsga2":
            return optuna.samplers.NSGAIISampler(seed=seed)
        if spec.sampler == "cmaes":
            require_sampler(spec)
            return optuna.samplers.CmaEsSampler(seed=seed)
        return _GridSampler(spec, first)


def make_pruner(spec: SweepSpec, replicates: int):
    """The Optuna pruner named by ``spec.pruner``; a step is one replicate.

    ``median``: :class:`optuna.pruners.MedianPruner` with its defaults (no
    pruning before 5 COMPLETE trials; then a trial whose best running value
    is worse than the median of the COMPLETE trials' at the same replicate is
    stopped). ``successive-halving``:
    :class:`optuna.pruners.SuccessiveHalvingPruner` with rungs at 1, 2, 4...
    replicates (``min_resource = 1``, ``reduction_factor = 2``): a trial
    goes past a rung only in the better half of the trials that reached it
    (Optuna's asynchronous rule: while a rung has one other trial, only if
    it beats it). ``hyperband``: :class:`optuna.pruners.HyperbandPruner` over
    1 .. ``replicates`` replicates with the same reduction factor 2: several
    successive-halving brackets, from aggressive to none (the last bracket
    runs every trial to the end), the sampler seeing each bracket's trials
    apart. The factor is 2 rather than Optuna's 3 or 4 because sweeps run
    2-5 replicates: with 3, the rungs after the first lie beyond the last
    replicate. Returns a :class:`~optuna.pruners.NopPruner` for ``"none"``.
    """
    if spec.pruner == "median":
        return optuna.pruners.MedianPruner()
    if spec.pruner == "successive-halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=2)
    if spec.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=max(1, replicates),
                                              reduction_factor=2)
    return optuna.pruners.NopPruner()


def open_study(storage, study_name: str, exp: Experiment, spec: SweepSpec, hash8: str):
    """Create or load the study; enqueue trial 0 on a fresh one.

    Returns (study, fresh): fresh when the study had no trial yet.
    """
    with quiet_optuna():
        study = optuna.create_study(storage=storage, study_name=study_name,
                                    directions=spec.directions, load_if_exists=True)
        attrs = study.user_attrs
        _refuse_other_study(study_name, study.directions, attrs, spec, hash8)
        if "memsim_identity" not in attrs:
            study.set_user_attr("memsim_identity", hash8)
            study.set_user_attr("memsim_objectives", spec.labels)
            study.set_metric_names(spec.labels)
        fresh = len(study.get_trials(deepcopy=False)) == 0
        if fresh:
            study.enqueue_trial(spec.own_params(exp), user_attrs={"origin": "experiment"},
                                skip_if_exists=True)
    return study, fresh


def check_study(storage, study_name: str, spec: SweepSpec, hash8: str) -> None:
    """Refuse a study of that name in ``storage`` that belongs to another
    sweep (other directions, or another experiment or search space), before
    a run folder is made; a study not there yet is fine (it is created)."""
    try:
        study_id = storage.get_study_id_from_name(study_name)
    except KeyError:
        return
    _refuse_other_study(study_name, storage.get_study_directions(study_id),
                        storage.get_study_user_attrs(study_id), spec, hash8)


def _refuse_other_study(study_name: str, directions, attrs: dict, spec: SweepSpec,
                        hash8: str) -> None:
    """The ConfigError of a study that is not this sweep's (see :func:`check_study`)."""
    got = [d.name.lower() for d in directions]
    if got != spec.directions:
        raise ConfigError(f"--study {study_name}: the study exists with directions {got}, "
                          f"this sweep has {spec.directions}; pick another --study name")
    if "memsim_identity" in attrs and attrs["memsim_identity"] != hash8:
        raise ConfigError(f"--study {study_name}: the study belongs to another experiment or "
                          "search space; pick another --study name")
