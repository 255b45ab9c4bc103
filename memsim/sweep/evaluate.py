"""Evaluating a trial: :class:`TrialEvaluator`.

A trial applies its parameters to the experiment with
:func:`~memsim.sweep.space.apply_params` and simulates it with
:func:`~memsim.runs.runner.simulate_experiment`, the code path of ``memsim run``,
on the experiment's replicate seeds ``0 .. R-1``: every trial sees the
identical streams (common random numbers), so trials differ only by their
parameters. Only the policies (and budgets) the objectives name are
simulated; arms never interact (each has its own state and its own named
random stream), so this changes nothing but the time taken. Streams are
generated once per evaluator and reused across trials; a swept ``workload.*``
key regenerates them (from the same seeds) for each trial.

The objective of a trial is the mean over replicates of each replicate's mean
of the metric over its queries (NaN values left out), exactly the ``mean`` of
``summary.csv`` (:func:`memsim.reporting.stats.summarise`). A run-level objective
(:data:`~memsim.sweep.space.RUN_OBJECTIVES`) has one value per replicate,
averaged over replicates: ``recall_gini`` and ``evicted_notes`` from the
arm's ``arms`` row, ``store_notes`` and ``store_tokens`` from the last row
(in time) of its ``store`` frame, the store left after the last eviction
sweep, and ``utility_share`` pooled over the replicate's queries
(:func:`memsim.reporting.stats.utility_share_by` by policy, budget and replicate).

Replays of one stream. An experiment whose workload is a stream from disk (a
trace, a stream folder, LoCoMo: :func:`replays_one_stream`) replays the same
queries in every replicate, so its per-replicate values are no independent
samples: identical for a deterministic policy. A caller that needs an
interval then asks for each trial's per-query values (``keep_queries``:
:attr:`TrialOutcome.queries`) and pairs two trials over the stream's queries
(:func:`paired_over_queries`).

Batches (:meth:`TrialEvaluator.evaluate_batch`). Trials that differ only in
their policies (every swept key under ``policies.``) are simulated as the
arms of one replay per replicate, so that the stream, the similarity product
of each tick and the oracle are computed once for all of them. Arms never
interact in the engine: each trial's arm is named ``<name>/<policy>`` but
draws the random stream its policy would draw alone (the engine's
``Arm.stream_name``), on the runner's replicate seed
(:func:`memsim.runs.runner.simulate_replicate`), so its values are bit for bit
those of :meth:`TrialEvaluator.evaluate`. Replicates are the outer loop: after
each one the caller sees every trial's running value (the mean over the
replicates done, the definition of the final value) and may stop a trial
(a pruner), which is then left out of the remaining replicates. A trial
whose parameters do not build fails alone; trials whose experiments differ
outside their policies (a swept ``workload.*`` or ``experiment.*`` key) are
simulated in separate replays.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

import pandas as pd

from memsim.runs.config import Experiment, StreamSource, config_hash
from memsim.engine import Arm, ReplayCache
from memsim.core.errors import MemsimError
from memsim.runs.runner import (load_stream_for, simulate_experiment, simulate_replicate,
                           simulate_replicates, simulate_tasks)
from memsim.reporting.stats import RATIO_METRICS, paired_tests, ratio_sums

from .space import RUN_OBJECTIVES, SweepSpec, apply_params


def run_level_values(frames: dict[str, Any], metric: str, policy: str, budget: Any,
                     replicates: Sequence[int]) -> dict[int, float]:
    """Replicate -> value of a run-level metric (:data:`RUN_OBJECTIVES`) of
    one arm, from :func:`~memsim.runs.runner.simulate_experiment`'s frames.

    NaN for a replicate without a value (e.g. no query with an achievable
    utility, for ``utility_share``).
    """
    out: dict[int, float] = {int(r): math.nan for r in replicates}
    if metric == "utility_share":
        q = frames["queries"]
        sub = q[(q["policy"] == policy) & (q["budget"] == budget)]
        num, den = RATIO_METRICS["utility_share"]
        for r, part in sub.groupby("replicate", sort=False):
            if int(r) in out:
                out[int(r)] = PooledShare(*ratio_sums(part[num], part[den]))
        return out
    if metric in ("store_notes", "store_tokens"):
        st = frames.get("store")
        if st is None or not len(st):
            return out
        sub = st[(st["policy"] == policy) & (st["budget"] == budget)]
        last = sub.sort_values("t", kind="stable").groupby("replicate").last()
        out.update({int(r): float(v) for r, v in last[metric].items() if int(r) in out})
        return out
    arms = frames["arms"]
    sub = arms[(arms["policy"] == policy) & (arms["budget"] == budget)]
    for r, v in zip(sub["replicate"], sub[metric]):
        if int(r) in out:
            out[int(r)] = float(v)
    return out


def replays_one_stream(e: Experiment) -> bool:
    """Whether every replicate of ``e`` replays one stream (a stream from
    disk: a trace, a stream folder, LoCoMo) rather than drawing its own."""
    return isinstance(e.workload, StreamSource)


def query_columns(metric: str) -> tuple[str, ...]:
    """The per-query columns an objective's value is made of: its own, the
    numerator and denominator of a ratio (``utility_share``), or none for a
    per-run metric (``recall_gini``, the store size ...), which has no
    queries to resample."""
    if metric in RATIO_METRICS:
        return tuple(RATIO_METRICS[metric])
    if metric in RUN_OBJECTIVES:
        return ()
    return (metric,)


def paired_over_queries(a: pd.DataFrame, b: pd.DataFrame, metric: str, level: float = 0.95
                        ) -> tuple[float, float, float, int]:
    """Paired difference ``a - b`` of an objective over one stream's queries.

    Parameters
    ----------
    a, b : DataFrame
        Two trials' :attr:`TrialOutcome.queries` of the objective, on the
        same replicates of one replayed stream.
    metric : str
        The objective's metric (a query column, or ``utility_share``).
    level : float
        Confidence level.

    Returns
    -------
    (diff, lo, hi, n) : tuple
        :func:`memsim.reporting.stats.paired_tests` of the two: the replays
        are folded, so each query is one pair (its mean over the replays),
        and the interval is a bootstrap over the stream's queries (of the
        ratio of sums for ``utility_share``); ``n`` pairs. ``diff`` is the
        mean over the queries where both have a value. NaN and 0 when no
        query pairs.
    """
    q = pd.concat([a.assign(policy="a"), b.assign(policy="b")], ignore_index=True)
    q["budget"] = 0
    t = paired_tests(q, baseline="b", metrics=[metric], level=level)
    if not len(t):
        return math.nan, math.nan, math.nan, 0
    r = t.iloc[0]
    return (float(r["diff"]), float(r["diff_ci_low"]), float(r["diff_ci_high"]),
            int(r["n_pairs"]))


@dataclass(frozen=True)
class TrialOutcome:
    """How one trial of :meth:`TrialEvaluator.evaluate_batch` ended.

    Attributes
    ----------
    values : tuple of float
        One per objective: the mean over the replicates simulated of the
        per-replicate values; for ``utility_share`` their pooled ratio of
        sums (:class:`PooledShare`). Empty when ``error``.
    per_replicate : dict
        Objective label -> {replicate: value}, for the replicates simulated.
    error : str
        Why the trial failed (its parameters do not give a valid experiment,
        or its simulation raised a :class:`~memsim.core.errors.MemsimError`);
        ``""`` when it did not.
    stopped_after : int or None
        The number of replicates done when the caller stopped the trial
        (``after_replicate`` returned True); None when it ran them all.
    queries : dict
        Objective label -> its per-query values over the replicates
        simulated (``replicate, query_id, t`` and :func:`query_columns`),
        when the batch kept them (``keep_queries``); a per-run objective
        has none.
    """

    values: tuple = ()
    per_replicate: dict = field(default_factory=dict)
    error: str = ""
    stopped_after: int | None = None
    queries: dict = field(default_factory=dict)


class TrialEvaluator:
    """Evaluates parameter sets on fixed replicate seeds (common random numbers).

    Streams are generated once per (workload, seed, replicate) and kept for
    the life of the evaluator, so that trials only pay for the simulation.

    Parameters
    ----------
    exp : Experiment
        The experiment (its [sweep] table is not read; pass ``spec``).
    spec : SweepSpec
    """

    #: streams kept per evaluator (a swept workload key would otherwise grow it)
    MAX_STREAMS = 64

    def __init__(self, exp: Experiment, spec: SweepSpec, jobs: int = 1,
                 cache_bytes: int = 0):
        self.exp = exp
        self.spec = spec
        #: worker processes a batch without ``after_replicate`` may simulate
        #: its replicates in (the robustness check); values do not depend on it
        self.jobs = jobs
        #: the replays' shared work kept from one batch to the next
        #: (``cache_bytes`` of arrays at most; None: nothing kept); values do
        #: not depend on it
        self.cache = ReplayCache(cache_bytes) if cache_bytes > 0 else None
        self._streams: dict[tuple, Any] = {}
        self.policies = list(dict.fromkeys(o.policy for o in spec.objectives))
        self.budgets = tuple(dict.fromkeys(o.budget for o in spec.objectives
                                           if o.budget is not None))

    def trial_experiment(self, params: dict[str, Any],
                         variant: dict[str, Any] | None = None) -> Experiment:
        """The experiment a trial simulates (all policies, as ``memsim run`` would)."""
        e = apply_params(self.exp, params)
        if variant:
            e = e.with_overrides(variant)
        return e

    def _restricted(self, e: Experiment) -> Experiment:
        # Arms do not interact (own state, own named random stream), so
        # simulating only the objectives' arms leaves their values unchanged.
        pols = {n: e.policies[n] for n in self.policies}
        settings = e.settings
        if self.budgets and settings.budgets:
            settings = dataclasses.replace(settings, budgets=self.budgets)
        return dataclasses.replace(e, policies=pols, settings=settings)

    def streams_for(self, e: Experiment, replicates: Sequence[int]) -> dict[int, Any]:
        """Replicate -> stream of ``e``'s workload, generated once and kept."""
        wl = config_hash(e.workload.to_config())
        out = {}
        for r in replicates:
            key = (wl, e.seed, r)
            if key not in self._streams:
                if len(self._streams) >= self.MAX_STREAMS:
                    self._streams.pop(next(iter(self._streams)))
                self._streams[key] = load_stream_for(e, r)
            out[r] = self._streams[key]
        return out

    def evaluate(self, params: dict[str, Any], replicates: Sequence[int] | None = None,
                 variant: dict[str, Any] | None = None,
                 ) -> tuple[list[float], dict[str, dict[int, float]]]:
        """Objective values and per-replicate values of one parameter set.

        Returns
        -------
        values : list of float
            One per objective: mean over replicates of the per-replicate means.
        per_replicate : dict
            objective label -> {replicate: value}.
        """
        e = self.trial_experiment(params, variant)
        reps = list(range(e.settings.replicates)) if replicates is None else list(replicates)
        sim = self._restricted(e)
        frames = simulate_experiment(sim, replicates=reps, streams=self.streams_for(e, reps))
        per = self._objective_values(frames, e, reps)
        return [_mean_of(per[lab]) for lab in self.spec.labels], per

    def _objective_values(self, frames: dict[str, Any], e: Experiment, reps: Sequence[int],
                          prefix: str = "") -> dict[str, dict[int, float]]:
        """Objective label -> {replicate: value} of the arms named
        ``prefix + policy`` in ``frames``."""
        q = frames["queries"]
        per = {}
        for o in self.spec.objectives:
            budget = o.budget if o.budget is not None else e.sim.budget_tokens
            policy = prefix + o.policy
            if o.metric in RUN_OBJECTIVES:
                by_rep = run_level_values(frames, o.metric, policy, budget, reps)
            else:
                sub = q[(q["policy"] == policy) & (q["budget"] == budget)]
                by_rep = {}
                for r in reps:
                    v = sub.loc[sub["replicate"] == r, o.metric].to_numpy(np.float64)
                    v = v[np.isfinite(v)]
                    by_rep[r] = float(v.mean()) if v.size else math.nan
            per[o.label] = by_rep
        return per

    def _objective_queries(self, frames: dict[str, Any], e: Experiment, prefix: str = ""
                           ) -> dict[str, pd.DataFrame]:
        """Objective label -> the per-query values (:func:`query_columns`) of
        the arm named ``prefix + policy`` in ``frames``; none for a per-run
        objective."""
        q = frames["queries"]
        out = {}
        for o in self.spec.objectives:
            cols = query_columns(o.metric)
            if cols:
                budget = o.budget if o.budget is not None else e.sim.budget_tokens
                sub = q[(q["policy"] == prefix + o.policy) & (q["budget"] == budget)]
                out[o.label] = sub[["replicate", "query_id", "t", *cols]]
        return out

    # -- batches ---------------------------------------------------------------
    def evaluate_batch(self, param_sets: Sequence[dict[str, Any]],
                       names: Sequence[str] | None = None,
                       replicates: Sequence[int] | None = None,
                       after_replicate: Callable[[int, int, list[float]], bool] | None = None,
                       variant: dict[str, Any] | None = None,
                       keep_queries: bool = False) -> list[TrialOutcome]:
        """Evaluate several parameter sets, replicate by replicate, sharing
        one replay per replicate among the trials that differ only in their
        policies (see the module docstring).

        Parameters
        ----------
        param_sets : sequence of dict
            One parameter set per trial.
        names : sequence of str, optional
            Distinct names of the trials (their arms are ``<name>/<policy>``);
            default ``t0, t1, ...``.
        replicates : sequence of int, optional
            Default ``0 .. R-1``.
        after_replicate : callable, optional
            ``after_replicate(i, step, values)`` is called after each
            replicate for every trial ``i`` still running, with ``step`` the
            number of replicates done and ``values`` its running values (one
            per objective, NaN where no replicate has a value yet); returning
            True stops the trial (it is not simulated on the rest).
        variant : dict, optional
            Dotted-key overrides applied to every trial's experiment (a
            robustness variant), as in :meth:`evaluate`.
        keep_queries : bool
            Keep each trial's per-query values (:attr:`TrialOutcome.queries`):
            what an interval over the queries of a replayed stream needs.

        Returns
        -------
        list of TrialOutcome
            In the order of ``param_sets``. A set's values are bit for bit
            those of :meth:`evaluate` on the same replicates.
        """
        n = len(param_sets)
        names, full, sims, context, errors = self._prepare(param_sets, names, variant)
        reps = list(range(self.exp.settings.replicates)) if replicates is None \
            else list(replicates)
        per: list[dict[str, dict[int, float]]] = [{lab: {} for lab in self.spec.labels}
                                                  for _ in range(n)]
        per_query: list[dict | None] = [{} if keep_queries else None for _ in range(n)]
        stopped: list[int | None] = [None] * n
        if after_replicate is None and self.jobs > 1 and len(reps) > 1:
            self._replay_parallel(full, sims, context, names, reps, errors, per, per_query)
            reps = []  # done (a group that failed was replayed replicate by replicate)
        for step, r in enumerate(reps, 1):
            live = [i for i in range(n) if not errors[i] and stopped[i] is None]
            if not live:
                break
            # one replay per experiment context (all of them when only policies differ)
            groups: dict[str, list[int]] = {}
            for i in live:
                groups.setdefault(context[i], []).append(i)
            for group in groups.values():
                _record(per, self._replay(group, full, sims, names, r, errors, per_query), r)
            if after_replicate is not None:
                for i in live:
                    if not errors[i] and after_replicate(
                            i, step, [_mean_of(per[i][lab]) for lab in self.spec.labels]):
                        stopped[i] = step
        return [TrialOutcome(error=errors[i], per_replicate=per[i]) if errors[i] else
                TrialOutcome(values=tuple(_mean_of(per[i][lab]) for lab in self.spec.labels),
                             per_replicate=per[i], stopped_after=stopped[i],
                             queries=_joined(per_query[i]))
                for i in range(n)]

    def _prepare(self, param_sets: Sequence[dict[str, Any]], names: Sequence[str] | None,
                 variant: dict[str, Any] | None) -> tuple[list[str], list, list, list, list]:
        """(names, experiments, restricted experiments, context keys, errors) of
        a batch's trials; a trial whose parameters do not build has None and
        its error."""
        n = len(param_sets)
        names = [f"t{i}" for i in range(n)] if names is None else [str(x) for x in names]
        if len(set(names)) != n:
            raise ValueError(f"evaluate_batch needs {n} distinct names. Got {names!r} instead.")
        full: list[Experiment | None] = []
        errors = [""] * n
        for i, params in enumerate(param_sets):
            try:
                full.append(self.trial_experiment(params, variant))
            except MemsimError as exc:  # this trial fails alone
                full.append(None)
                errors[i] = str(exc)
        sims = [None if e is None else self._restricted(e) for e in full]
        context = [None if e is None else _context_key(e) for e in full]
        return names, full, sims, context, errors

    def keep_stream(self, e: Experiment, replicate: int, stream: Any) -> None:
        """Keep ``stream`` as replicate ``replicate`` of ``e``'s workload (a
        caller that already generated it: it is not generated again)."""
        key = (config_hash(e.workload.to_config()), e.seed, replicate)
        if key not in self._streams and len(self._streams) < self.MAX_STREAMS:
            self._streams[key] = stream

    def evaluate_batches(self, batches: Sequence[dict[str, Any]],
                         extra: Sequence[tuple] = (),
                         progress: Callable[[float], None] | None = None
                         ) -> tuple[list[list[TrialOutcome]], list[dict[str, Any]]]:
        """Several :meth:`evaluate_batch` calls whose replays share one pool of
        ``self.jobs`` worker processes, with ``extra`` replays of the caller's.

        Parameters
        ----------
        batches : sequence of dict
            The keyword arguments of each :meth:`evaluate_batch` call
            (``param_sets``, and optionally ``names``, ``replicates``,
            ``variant``, ``keep_queries``; no ``after_replicate``).
        extra : sequence of tuple
            ``(exp, arms, replicate, stream)`` replays
            (:func:`~memsim.runs.runner.simulate_tasks`) whose frames are returned.
        progress : callable, optional
            Called with the share of the replays done.

        Returns
        -------
        (outcomes, frames)
            Each batch's :class:`TrialOutcome` list, bit for bit those of
            :meth:`evaluate_batch`, and the frames of each ``extra`` replay.
            With ``self.jobs`` > 1 every replay (each batch's replicates of
            each group of trials, and ``extra``) runs in one pool, so that a
            check's replays do not wait for the previous check's. Where a
            replay of the pool raises a :class:`MemsimError`, the batches
            are evaluated one after the other here (the ``extra`` first),
            so that each error lands where :meth:`evaluate_batch` puts it.
        """
        plans, tasks = [], []
        if self.jobs > 1:
            for b in batches:
                names, full, sims, context, errors = self._prepare(
                    b["param_sets"], b.get("names"), b.get("variant"))
                reps = list(range(self.exp.settings.replicates)) \
                    if b.get("replicates") is None else list(b["replicates"])
                groups: dict[str, list[int]] = {}
                for i in range(len(full)):
                    if not errors[i]:
                        groups.setdefault(context[i], []).append(i)
                slots = []
                for group in groups.values():
                    e0 = full[group[0]]
                    source = (config_hash(e0.workload.to_config()), e0.seed)
                    kept = {k[2]: v for k, v in self._streams.items() if k[:2] == source}
                    arms = self._arms(group, sims, names)
                    for r in reps:
                        slots.append((group, r, len(tasks)))
                        tasks.append((sims[group[0]], arms, r, kept.get(r)))
                plans.append((names, full, errors, slots, b.get("keep_queries", False)))
        n_batch = len(tasks)
        frames = None
        if self.jobs > 1 and n_batch + len(extra) > 1:
            try:
                frames = simulate_tasks(tasks + list(extra), jobs=self.jobs, progress=progress)
            except MemsimError:
                frames = None  # replayed here, one batch after the other
        if frames is None:
            total = sum(len(range(self.exp.settings.replicates) if b.get("replicates") is None
                            else b["replicates"]) for b in batches) + len(extra)
            done = [0]

            def step(n: int = 1) -> None:
                done[0] += n
                if progress is not None and total:
                    progress(done[0] / total)
            got = simulate_tasks(list(extra), progress=None)
            step(len(extra))
            outs = []
            for b in batches:
                seen: set[int] = set()

                def after(i: int, k: int, values: list[float], seen=seen) -> bool:
                    if k not in seen:
                        seen.add(k)
                        step()
                    return False
                outs.append(self.evaluate_batch(**b, after_replicate=after))
            return outs, got
        outs = []
        for names, full, errors, slots, keep in plans:
            per: list[dict[str, dict[int, float]]] = [{lab: {} for lab in self.spec.labels}
                                                      for _ in full]
            per_query: list[dict | None] = [{} if keep else None for _ in full]
            for group, r, k in slots:
                _record(per, {i: self._trial_values(frames[k], full[i], r, names[i],
                                                    per_query[i])
                              for i in group}, r)
            outs.append([TrialOutcome(error=errors[i], per_replicate=per[i]) if errors[i] else
                         TrialOutcome(values=tuple(_mean_of(per[i][lab])
                                                   for lab in self.spec.labels),
                                      per_replicate=per[i], queries=_joined(per_query[i]))
                         for i in range(len(full))])
        return outs, frames[n_batch:]

    def _replay_parallel(self, full: list, sims: list, context: list, names: list[str],
                         reps: list[int], errors: list[str], per: list[dict],
                         per_query: list[dict | None]) -> None:
        """Every replicate of every trial that builds, ``self.jobs``
        replicates at a time in worker processes, into ``per`` (and the
        per-query values into ``per_query``, where a trial keeps them); a group whose
        replay raises is replayed replicate by replicate in this process
        (:meth:`_replay`), so that the error lands on its trial."""
        groups: dict[str, list[int]] = {}
        for i in range(len(full)):
            if not errors[i]:
                groups.setdefault(context[i], []).append(i)
        for group in groups.values():
            e0 = full[group[0]]
            source = (config_hash(e0.workload.to_config()), e0.seed)
            kept = {k[2]: v for k, v in self._streams.items() if k[:2] == source}
            try:
                frames = simulate_replicates(sims[group[0]], self._arms(group, sims, names), reps,
                                             streams=kept, jobs=self.jobs)
            except MemsimError:
                frames = None
            for k, r in enumerate(reps):
                _record(per, self._replay(group, full, sims, names, r, errors, per_query)
                        if frames is None else
                        {i: self._trial_values(frames[k], full[i], r, names[i], per_query[i])
                         for i in group}, r)

    def _arms(self, group: list[int], sims: list, names: list[str]) -> list[Arm]:
        """The arms of the trials of ``group`` in one replay: each trial's
        arm draws its policy's own random stream (``stream_name``)."""
        budgets = sims[group[0]].settings.budgets or (None,)
        return [Arm(f"{names[i]}/{p}", sims[i].policies[p], b, stream_name=p)
                for b in budgets for i in group for p in self.policies]

    def _replay(self, group: list[int], full: list, sims: list, names: list[str], r: int,
                errors: list[str], per_query: list[dict | None]
                ) -> dict[int, dict[str, dict[int, float]]]:
        """Simulate replicate ``r`` of the trials of ``group`` (same experiment
        context) as the arms of one replay; trial -> objective values (and
        the per-query values into ``per_query``, where a trial keeps them). An
        error fails the trial alone: a group that raises is replayed trial
        by trial, so the error lands on the trial that caused it."""
        e0, sim0 = full[group[0]], sims[group[0]]
        try:
            frames = simulate_replicate(sim0, self._arms(group, sims, names), r,
                                        self.streams_for(e0, [r])[r], cache=self.cache)
        except MemsimError as exc:
            if len(group) == 1:
                errors[group[0]] = str(exc)
                return {}
            out: dict[int, dict[str, dict[int, float]]] = {}
            for i in group:
                out.update(self._replay([i], full, sims, names, r, errors, per_query))
            return out
        return {i: self._trial_values(frames, full[i], r, names[i], per_query[i])
                for i in group}

    def _trial_values(self, frames: dict[str, Any], e: Experiment, r: int, name: str,
                      kept: dict | None) -> dict[str, dict[int, float]]:
        """Objective label -> {r: value} of trial ``name``'s arms in the
        frames of replicate ``r``; with ``kept`` (the trial's per-query
        values so far) its per-query values are added to it."""
        if kept is not None:
            for lab, rows in self._objective_queries(frames, e, prefix=f"{name}/").items():
                kept.setdefault(lab, []).append(rows)
        return self._objective_values(frames, e, [r], prefix=f"{name}/")


#: the most a worker keeps between batches by default (bytes)
CACHE_MAX = 2 << 30


def cache_budget(cache_mb: int | None, workers: int = 1) -> int:
    """Bytes of replay work a sweep worker keeps between batches
    (:class:`~memsim.engine.ReplayCache`): ``cache_mb`` megabytes, or by
    default a quarter of the memory this process may use (the machine's, or
    its control group's limit when lower) shared by ``workers``, at most
    :data:`CACHE_MAX`; 0 where the memory is unknown."""
    if cache_mb is not None:
        return int(cache_mb) << 20
    return min(CACHE_MAX, _memory_bytes() // (4 * max(1, workers)))


def _memory_bytes() -> int:
    """The memory this process may use: the machine's physical memory, or
    its cgroup v2 limit when lower; 0 when unknown."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 0
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        return total
    return min(total, int(limit)) if limit.isdigit() else total


def _record(per: list[dict], got: dict[int, dict[str, dict[int, float]]], r: int) -> None:
    """Put replicate ``r``'s values of the trials in ``got`` (trial ->
    objective -> {replicate: value}) into ``per``."""
    for i, by_label in got.items():
        for lab, by_rep in by_label.items():
            per[i][lab][r] = by_rep[r]


def _joined(kept: dict | None) -> dict[str, pd.DataFrame]:
    """A trial's kept per-query values, each objective's replicates in one
    frame (none when the trial kept none)."""
    if not kept:
        return {}
    return {lab: pd.concat(parts, ignore_index=True) for lab, parts in kept.items()}


class PooledShare(float):
    """One replicate's ``utility_share`` (a float: ``num / den``, NaN when
    ``den`` is 0), which keeps the sums it is the ratio of, so that
    replicates pool into one ratio of sums as ``summary.csv`` pools them
    (:func:`_mean_of`), not into a mean of ratios."""

    num: float
    den: float

    def __new__(cls, num: float, den: float) -> "PooledShare":
        share = super().__new__(cls, num / den if den > 0 else math.nan)
        share.num, share.den = num, den
        return share

    def __reduce__(self):  # to worker processes and back, sums included
        return (PooledShare, (self.num, self.den))


def _mean_of(by_rep: dict[int, float]) -> float:
    """An objective's value over the replicates done: the mean of its finite
    per-replicate values (NaN when none is finite); for ``utility_share``
    the ratio of the replicates' pooled sums, the value of ``summary.csv``
    (to rounding)."""
    vals = list(by_rep.values())
    if vals and all(isinstance(v, PooledShare) for v in vals):
        den = sum(v.den for v in vals)
        return sum(v.num for v in vals) / den if den > 0 else math.nan
    fin = [v for v in vals if math.isfinite(v)]
    return float(np.mean(fin)) if fin else math.nan


def _context_key(e: Experiment) -> str:
    """What trials must share to be simulated as arms of one replay: the
    experiment without its policies (workload, engine settings, reader,
    seed)."""
    table = e.to_config()
    table.pop("policies", None)
    table.pop("sweep", None)
    return config_hash(table)
