"""Evaluating a trial: :class:`TrialEvaluator`.

A trial applies its parameters to the experiment with
:func:`~memsim.sweep.space.apply_params` and simulates it with
:func:`~memsim.runner.simulate_experiment`, the code path of ``memsim run``,
on the experiment's replicate seeds ``0 .. R-1``: every trial sees the
identical streams (common random numbers), so trials differ only by their
parameters. Only the policies (and budgets) the objectives name are
simulated; arms never interact (each has its own state and its own named
random stream), so this changes nothing but the time taken. Streams are
generated once per evaluator and reused across trials; a swept ``workload.*``
key regenerates them (from the same seeds) for each trial.

The objective of a trial is the mean over replicates of each replicate's mean
of the metric over its queries (NaN values left out), exactly the ``mean`` of
``summary.csv`` (:func:`memsim.stats.summarise`). A run-level objective
(:data:`~memsim.sweep.space.RUN_OBJECTIVES`) has one value per replicate,
averaged over replicates: ``recall_gini`` and ``evicted_notes`` from the
arm's ``arms`` row, ``store_notes`` and ``store_tokens`` from the last row
(in time) of its ``store`` frame, the store left after the last eviction
sweep, and ``utility_share`` pooled over the replicate's queries
(:func:`memsim.stats.utility_share_by` by policy, budget and replicate).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np

from memsim.config import Experiment, config_hash
from memsim.runner import load_stream_for, simulate_experiment
from memsim.stats import utility_share_by

from .space import RUN_OBJECTIVES, SweepSpec, apply_params


def run_level_values(frames: dict[str, Any], metric: str, policy: str, budget: Any,
                     replicates: Sequence[int]) -> dict[int, float]:
    """Replicate -> value of a run-level metric (:data:`RUN_OBJECTIVES`) of
    one arm, from :func:`~memsim.runner.simulate_experiment`'s frames.

    NaN for a replicate without a value (e.g. no query with an achievable
    utility, for ``utility_share``).
    """
    out = {int(r): math.nan for r in replicates}
    if metric == "utility_share":
        q = frames["queries"]
        sub = q[(q["policy"] == policy) & (q["budget"] == budget)]
        if len(sub):
            share = utility_share_by(sub, ("replicate",))
            out.update({int(r): float(v) for r, v in share.items() if int(r) in out})
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

    def __init__(self, exp: Experiment, spec: SweepSpec):
        self.exp = exp
        self.spec = spec
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
        q = frames["queries"]
        values, per = [], {}
        for o in self.spec.objectives:
            budget = o.budget if o.budget is not None else e.sim.budget_tokens
            if o.metric in RUN_OBJECTIVES:
                by_rep = run_level_values(frames, o.metric, o.policy, budget, reps)
            else:
                sub = q[(q["policy"] == o.policy) & (q["budget"] == budget)]
                by_rep = {}
                for r in reps:
                    v = sub.loc[sub["replicate"] == r, o.metric].to_numpy(np.float64)
                    v = v[np.isfinite(v)]
                    by_rep[r] = float(v.mean()) if v.size else math.nan
            fin = [v for v in by_rep.values() if math.isfinite(v)]
            values.append(float(np.mean(fin)) if fin else math.nan)
            per[o.label] = by_rep
        return values, per
