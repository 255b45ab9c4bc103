"""Optuna sweeps: any dotted parameter, one or several objectives, resumable,
parallel on one machine and distributed through PostgreSQL.

The ``[sweep]`` table
---------------------

::

    [sweep]
    trials = 50                 # COMPLETE trials the study must end with
    sampler = "tpe"             # tpe | random | qmc | cmaes | nsga2 | grid
    seed = 1                    # default: the experiment's seed
    batch = 1                   # trials simulated together in one replay (see below)
    pruner = "none"             # none | median | hyperband | successive-halving
    cache_mb = 1024             # work kept between a worker's batches (default: automatic)
    objectives = [{ metric = "utility", direction = "maximize" }]
    #   optional per objective: policy = "NAME" (default: the first policy),
    #   budget = N (required when experiment.budgets lists several)

    [sweep.params]
    "policies.hivemind.decay.task_half_life_days" = {
        type = "float", low = 7, high = 720, log = true }
    "policies.hivemind.packer" = {
        type = "categorical", choices = ["greedy", "greedy-swap", "exact"] }
    "policies.hivemind.candidates" = { type = "int", low = 10, high = 200, step = 10 }

    [sweep.robustness]          # optional
    replicates = 3              # fresh replicate seeds (default: experiment.replicates)
    variants = [{ name = "noisy", "workload.retriever_noise" = 1.6 }]

Every key is validated against the experiment before anything runs: a key
must name a value of the resolved experiment (``memsim sweep`` refuses a key
that would silently add a new policy), its range must build a valid
experiment at both ends, and the experiment's own value must lie in the
range, because it is trial 0. A categorical needs at least two distinct
choices (strings, numbers or booleans, kept with their TOML type in every
output). With ``sampler = "grid"`` every combination is built too (up to
:data:`~memsim.sweep.space.GRID_CHECK_MAX`), and a point whose trial fails
when it runs is reported and never run again (the grid is used up once every
point was tried).

What a trial is
---------------
A trial applies its parameters to the experiment with
:meth:`~memsim.runs.config.Experiment.with_overrides` (shallower keys first, so a
categorical that switches a component's kind is applied before a parameter of
that component) and simulates it with
:func:`~memsim.runs.runner.simulate_experiment`, the code path of ``memsim run``, on
the experiment's replicate seeds ``0 .. R-1``: every trial sees the identical
streams (common random numbers), so trials differ only by their parameters.
Only the policies (and budgets) the objectives name are simulated; arms never
interact (each has its own state and its own named random stream), so this
changes nothing but the time taken. Streams are generated once per process and
reused across trials; a swept ``workload.*`` key regenerates them (from the
same seeds) for each trial.

The objective of a trial is the mean over replicates of each replicate's mean
of the metric over its queries (NaN values left out), exactly the ``mean`` of
``summary.csv`` (:func:`memsim.reporting.stats.summarise`); for ``utility_share``,
as there, one ratio of sums pooled over the replicates. The per-replicate
values are kept as trial user attributes ``<objective>_rep<r>``. The experiment's own
values are enqueued as trial 0 (user attribute ``origin = "experiment"``).

Batches and pruning
-------------------
Most of a replay is per arm, but the stream, the similarity product of each
tick and the oracle are shared by every arm. ``batch = N`` has a worker ask
Optuna for N trials at once (never more than the study still needs) and
simulate them as the arms of one replay per replicate
(:meth:`TrialEvaluator.evaluate_batch`): each trial's arm is named
``t<number>/<policy>`` but draws its policy's own random stream, so every
value is bit for bit the one the trial gets alone. It needs every swept key
under ``policies.`` (trials then differ only in their policies); otherwise
trials run one at a time and the summary says so. The arms of a batch
share the stream, the similarity product, the oracle and the similarity
levels, are scored as one array when they differ only in their decay's
floor and rate, and pack and are measured together. TPE proposes the trials
of a batch without the results of the others (Optuna's constant liar
spreads them), so a batch explores a little less per trial than one at a
time.

``cache_mb`` (default: a quarter of the memory shared by the workers, at
most 2048 per worker; :func:`~memsim.sweep.evaluate.cache_budget`) is how
many megabytes of that shared work a worker keeps from one batch to the
next (:class:`memsim.engine.ReplayCache`): the replicate streams are the
same for every batch, so each tick's similarity and its levels are too, and
later batches skip them. ``0`` keeps nothing; values do not depend on it.

Replicates are the outer loop: after each one a trial of a single-objective
study reports its running value (``trial.report``: step = replicates done,
value = the mean over them, the definition of the final value), and with
``pruner`` set asks Optuna whether to stop (``trial.should_prune``); a
stopped trial ends PRUNED, is left out of the remaining replicates and does
not count toward ``trials`` (see :class:`SweepSpec` for the pruners). A
pruner spends fewer replicates on bad trials, so it explores more parameter
sets in a given time, but the study still ends with ``trials`` COMPLETE
trials, each run on every replicate: pruning never makes a sweep of N
trials finish sooner. It needs one objective (several: a ConfigError) and
two replicates or more (with one it warns and does nothing); trial 0 is never
pruned, and the grid sampler takes none (a pruned point would never
complete). None of the three keys is part of the study's identity: a sweep
may be resumed with another batch size, pruner or cache.

Storage, resuming and the run folder
------------------------------------
The default storage is an Optuna journal file inside the run folder
(``sweep/journal.log``, :class:`optuna.storages.JournalStorage` over
:class:`optuna.storages.journal.JournalFileBackend`), which several processes
on one machine can share. ``--storage`` also takes Optuna's RDB URLs
(``sqlite:///file.db``, ``postgresql://user:pw@host/db``) or
``journal:PATH``.

The run folder is ``<out>/<UTC time>_<name>_<hash8>/`` where ``hash8`` hashes
the resolved experiment and search space (without ``sweep.trials``, which may
grow, nor ``sweep.batch``, ``sweep.pruner`` and ``sweep.cache_mb``) and, when given, the study
name. ``sweep/sweep.json``, written once,
records the study name, that identity and the storage. Running the same
command again finds the newest folder under ``--out`` with the same identity
and continues its study, in its storage, until it has ``trials`` COMPLETE
trials (``--trials`` may be raised to extend a finished sweep);
``--resume DIR`` names the folder explicitly (the experiment then defaults to
the folder's ``config.toml``). The study name is ``--study NAME`` or
``<name>-<hash8>``. Changing the experiment or the search space starts a new
folder and a new study.

A trial whose process died is marked FAIL and its parameters are enqueued
again (Optuna's :class:`~optuna.storages.RetryHeartbeatStaleTrialCallback`),
so it is never lost, and a worker only starts a trial while fewer than
``trials`` trials are COMPLETE or running, so none is counted twice. A dead
trial is found two ways: every trial records its worker (``host:pid``), and
any worker on the same host fails the RUNNING trials of processes that no
longer exist; on RDB storages Optuna's heartbeat (every
:data:`HEARTBEAT_S` s, stale after :data:`GRACE_S` s) also catches workers on
other machines.

Parallel and distributed
------------------------
``--workers N`` starts N worker processes (spawned) that share the storage,
each asking Optuna for trials (``batch`` at a time, Optuna's ask-and-tell)
and stopping when the study has ``trials`` COMPLETE trials. The same command on another machine,
with the same ``--storage postgresql://...`` and ``--study``, joins the
study; each machine writes its own run folder and, once the study is
complete, the same outputs.

Reproducibility: with one worker, a session seeds its sampler from
``seed`` and the study (:func:`~memsim.sweep.study.session_seed`): ``seed``
itself while the study has no COMPLETE or PRUNED trial, so one session on a
fresh study (or on one stopped before its first trial ended) is
reproducible, the parameters sampled, the values and the outputs; after
that, a seed derived from ``seed`` and the number of those trials, so the
same folder resumed the same way samples the same trials, in any process.
A sweep done in several sessions does not sample what one session of as many
trials does. The grid's order and the QMC sampler's scrambled sequence come
from ``seed`` alone and continue across sessions and workers. With several
workers the order in which trials finish depends on timing, so the set of
parameters sampled is not reproducible (each worker seeds its sampler from
``seed``, its host and its pid so that workers do not propose the same
points); what still holds is that each trial's value is a deterministic
function of its parameters (same seeds, same code path), so any trial can be
re-run exactly from ``best.toml`` or its row of ``trials.csv``.

Outputs (``<run>/sweep/``)
--------------------------
``trials.csv`` (one row per trial, PRUNED and FAIL ones too, with their
``state``; a PRUNED trial's values are its running values when stopped and
only COMPLETE trials enter the best, the plateau, the importance and the
robustness check: ``number``, ``state``, ``values_<objective>``,
one column per parameter named by its dotted key, ``origin``, ``worker``,
``retry_of``, ``seconds``, ``<objective>_rep<r>``), ``best.toml`` (the resolved
experiment with the best parameters applied, runnable with ``memsim run``;
with several objectives the Pareto member best on the first objective, and
``pareto/trial_<n>.toml`` for every Pareto member), ``robustness.csv`` (see
:func:`robustness_check`; its ``vs-experiment`` rows say whether the best
beats the experiment's own parameters on fresh seeds, with a paired
interval), ``plateau.csv`` (see :func:`plateau_table`: per parameter the best
value, the plateau of values within the replicate noise of the best, grown
on more replicates until it is narrow enough or said to be undetermined
(:func:`~memsim.sweep.plateau.grow_plateau`), and a warning when the best
lies in the outer 5% of its range or the objective still improves towards
an edge), ``importance.csv``
(Optuna's fANOVA importance per objective, seeded with ``seed``: the share of
the objective's variance each parameter explains on its own, from a random
forest fitted to the completed trials; it needs scikit-learn), ``summary.txt``
(what ``memsim sweep`` prints) and the plots as PNG: Optuna's ``history`` and
``pareto_front``, memsim's ``importance`` and ``slice`` (one panel per
parameter, log axes for log ranges).

Opening the study: ``summary.txt`` and the report end with the exact
``optuna-dashboard`` command (``pip install optuna-dashboard``, not a memsim
dependency) and the Python that loads the study. optuna-dashboard opens a
journal file given by its path, and an RDB URL as it is::

    optuna-dashboard /abs/path/results/<run>/sweep/journal.log   # the default journal
    optuna-dashboard sqlite:////abs/path/sweep.db
    optuna-dashboard postgresql://USER:PASSWORD@HOST:5432/DB

In Python, a journal is opened through Optuna's journal backend (memsim
records it as ``journal:sweep/journal.log`` in ``sweep.json``, a form only
memsim reads)::

    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    study = optuna.load_study(study_name="NAME",
                              storage=JournalStorage(JournalFileBackend(PATH)))

Modules
-------
From the bottom up (a module imports only modules above it in this list):

``space``
    The ``[sweep]`` table: :class:`SweepSpec`, :class:`ParamSpec`,
    :class:`Objective`, :class:`RobustnessSpec`, :func:`apply_params`.
``evaluate``
    :class:`TrialEvaluator`: one parameter set, or a batch of them sharing
    each replay, on fixed replicate seeds.
``study``
    The Optuna study: sampler, pruner, creating or loading it, trial 0.
``storage``
    ``--storage`` strings and :func:`open_storage`.
``liveness``
    Which workers are alive; failing and retrying the trials of dead ones.
``workers``
    The trial loop of a worker (batches, reporting, pruning), and spawning
    worker processes.
``robustness``
    :func:`robustness_check` of the winners on fresh seeds and variants.
``plateau``
    :func:`plateau_table`: how sure the sweep is of each best value.
``outputs``
    :func:`trials_table`, the best trial(s), the files of ``sweep/``,
    :class:`SweepResult`.
``resume``
    The run folder's identity, ``sweep.json`` and finding it again.
``run``
    :func:`run_sweep`.
``load``
    :func:`load_sweep`: a sweep's run folder read back, with its study.
"""

from __future__ import annotations

from .evaluate import TrialEvaluator, TrialOutcome
from .load import SweepRun, load_sweep
from .outputs import SweepResult, importance_table, trials_table
from .plateau import EDGE, plateau_table, range_position
from .robustness import robustness_check, robustness_replays
from .run import run_sweep
from .space import (OBJECTIVE_METRICS, PRUNERS, SAMPLERS, Objective, ParamSpec, RobustnessSpec,
                    SweepSpec, apply_params)
from .storage import GRACE_S, HEARTBEAT_S, open_storage

__all__ = [
    "SAMPLERS",
    "PRUNERS",
    "OBJECTIVE_METRICS",
    "ParamSpec",
    "Objective",
    "RobustnessSpec",
    "SweepSpec",
    "apply_params",
    "TrialEvaluator",
    "TrialOutcome",
    "SweepResult",
    "run_sweep",
    "load_sweep",
    "SweepRun",
    "open_storage",
    "trials_table",
    "importance_table",
    "robustness_check",
    "robustness_replays",
    "plateau_table",
    "range_position",
    "EDGE",
    "HEARTBEAT_S",
    "GRACE_S",
]
