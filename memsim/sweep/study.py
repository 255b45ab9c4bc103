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
import math
import warnings

import optuna
from optuna.trial import TrialState

from memsim.runs.config import Experiment
from memsim.core.errors import ConfigError

from .space import SweepSpec


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
    """Whether a grid value and a parameter's value are one point (floats up
    to rounding: 0.1 + 2 * 0.1 is the point 0.3)."""
    if type(a) is type(b) and a == b:
        return True
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return False


def make_sampler(spec: SweepSpec, seed: int, first: dict | None = None):
    """The Optuna sampler named by ``spec.sampler``, seeded with ``seed``;
    the grid sampler (:class:`_GridSampler`) is seeded with ``spec.seed`` and
    puts ``first`` (trial 0's parameters) first."""
    with quiet_optuna():
        if spec.sampler == "tpe":
            return optuna.samplers.TPESampler(seed=seed)
        if spec.sampler == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if spec.sampler == "qmc":
            return optuna.samplers.QMCSampler(seed=seed, scramble=True)
        if spec.sampler == "nsga2":
            return optuna.samplers.NSGAIISampler(seed=seed)
        if spec.sampler == "cmaes":
            try:
                # optional dependency: only this sampler needs it, so look for it here
                import cmaes  # noqa: F401
            except ImportError:
                raise ConfigError("sweep.sampler: 'cmaes' needs the cmaes package "
                                  "(pip install cmaes)") from None
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
    directions = spec.directions
    with quiet_optuna():
        study = optuna.create_study(storage=storage, study_name=study_name,
                                    directions=directions, load_if_exists=True)
        got = [d.name.lower() for d in study.directions]
        if got != directions:
            raise ConfigError(f"--study {study_name}: the study exists with directions {got}, "
                              f"this sweep has {directions}; pick another --study name")
        attrs = study.user_attrs
        if "memsim_identity" in attrs and attrs["memsim_identity"] != hash8:
            raise ConfigError(f"--study {study_name}: the study belongs to another experiment or "
                              "search space; pick another --study name")
        if "memsim_identity" not in attrs:
            study.set_user_attr("memsim_identity", hash8)
            study.set_user_attr("memsim_objectives", spec.labels)
            study.set_metric_names(spec.labels)
        fresh = len(study.get_trials(deepcopy=False)) == 0
        if fresh:
            study.enqueue_trial(spec.own_params(exp), user_attrs={"origin": "experiment"},
                                skip_if_exists=True)
    return study, fresh
