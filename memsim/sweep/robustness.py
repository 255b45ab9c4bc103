"""The robustness re-check of a sweep's winners (``[sweep.robustness]``).

A sweep that looks only at its own replicate seeds can overfit to them. The
best trial(s) and the experiment's own parameters (trial 0, the published
preset) are evaluated again on fresh replicate seeds the sweep never used,
and on each workload variant; :func:`robustness_check` returns the values,
their change from the sweep's, and whether the best beats the preset: the
paired difference on the same fresh replicates with its confidence interval
(``sweep/robustness.csv``). Only COMPLETE trials are candidates (a PRUNED
trial never is). The candidates of a check are evaluated as one batch
(:meth:`~memsim.sweep.TrialEvaluator.evaluate_batch`: one replay per
replicate when only policies are swept), with the values of one at a time.

On a replayed stream (a trace, a stream folder, LoCoMo) the fresh seeds
replay the sweep's own stream: their differences are no independent samples
(a deterministic policy gives the same one on every replay, an interval of
zero width). The paired difference is then taken over the stream's queries
(each once), and an objective measured once per run has no interval at all
(:data:`NO_INTERVAL`).
"""

from __future__ import annotations

import json
import math
from typing import Callable

import numpy as np
import pandas as pd
from optuna.trial import TrialState

from memsim.core.errors import MemsimError
from memsim.reporting.stats import mean_ci

from .evaluate import TrialEvaluator, paired_over_queries, replays_one_stream
from .space import SweepSpec

#: Confidence level of the paired difference with the experiment's preset.
PAIRED_LEVEL = 0.95
#: ``note`` of a ``vs-experiment`` row whose winner is the preset itself.
SAME_NOTE = "the best trial is the experiment's own parameters"
#: ``verdict`` of a per-run objective (``recall_gini``, the store size ...) on
#: replays of one stream: one value per run, and no independent one to
#: compare it with.
NO_INTERVAL = "no interval: one replayed stream"
#: What a ``vs-experiment`` row adds to its note on a replayed stream.
REPLAY_NOTE = "the replicates replay one stream: intervals over its queries, each once"
#: ... and when that stream is the sweep's own: no fresh data to check on.
IN_SAMPLE_NOTE = "in-sample: the sweep chose the winner on this stream, which flatters it"
#: ``note`` of a ``fresh-seeds`` row that replays the sweep's own stream.
REPLAYED_SEEDS_NOTE = ("the fresh seeds replay the sweep's own stream: a change near 0 "
                       "is no sign of robustness")


# Over 80 lines only through its docstring, which states the rule exactly.
def robustness_replays(spec: SweepSpec, replicates: int) -> int:
    """How many replicate replays :func:`robustness_check` makes (its
    progress units): the fresh seeds, then each variant's replicates."""
    k = spec.robustness.replicates
    return k + len(spec.robustness.variants) * (k or replicates)


def robustness_check(evaluator: TrialEvaluator, spec: SweepSpec, candidates: list[dict],
                     progress: Callable[[float], None] | None = None) -> pd.DataFrame:
    r"""Re-evaluate parameter sets on fresh seeds and on workload variants.

    Parameters
    ----------
    evaluator : TrialEvaluator
    spec : SweepSpec
    candidates : list of dict
        Each with ``number``, ``role`` (``best``, ``pareto`` or
        ``experiment``), ``params`` and ``values`` (the sweep's values);
        ``experiment = True`` marks the experiment's own parameters when they
        won (role ``best``).

    Returns
    -------
    DataFrame
        One row per (candidate, check): ``number, role, check, variant,
        replicates``, then per objective ``values_<objective>`` (mean over the
        check's replicates), ``change_<objective>`` (minus the sweep's value:
        a large drop on fresh seeds is overfitting to the seeds, on a variant
        overfitting to the workload) and ``per_replicate_<objective>`` (JSON).
        ``check`` is ``sweep`` (the trial's own values, replicates 0..R-1),
        ``fresh-seeds`` (replicates R..R+K-1, never used by the sweep),
        ``variant``, or ``vs-experiment``.

        A ``vs-experiment`` row compares a winner with the experiment's own
        parameters (the preset the sweep started from) on the replicates of
        one check (``variant`` empty: the fresh seeds; else that variant);
        it has one per check other than ``sweep``, for each winner, when the
        experiment's own parameters are among the candidates. On the sweep's
        seeds the winner was selected, so the comparison there would flatter
        it; fresh seeds are unbiased. Its columns, per objective:
        ``per_replicate_<objective>``, the paired differences
        :math:`d_r = y_r^{\mathrm{winner}} - y_r^{\mathrm{preset}}` (same
        replicate seed, so the replicate's own luck cancels);
        ``diff_<objective>`` their mean :math:`\bar d`;
        ``diff_ci_low_<objective>``, ``diff_ci_high_<objective>`` the Student
        t interval :math:`\bar d \pm t_{K-1,\,0.975}\, s_d/\sqrt{K}` over the
        K replicates (:func:`memsim.reporting.stats.mean_ci`; a t-interval rather than a
        bootstrap because K is small, often 2-5, where a bootstrap has only a
        handful of distinct resamples and its interval is too narrow; NaN with
        one replicate); ``excludes_0_<objective>``; and
        ``verdict_<objective>``: ``better`` or ``worse`` (the interval
        excludes 0, in the objective's direction), ``no difference shown``,
        or ``not measured``; and ``ci_over_<objective>``, what the interval
        is over: ``replicates``.
        ``values_`` and ``change_`` are NaN there; ``note`` says when the
        winner is the preset itself (difference 0).

        When the check's workload replays one stream (a trace, a stream
        folder, LoCoMo), its replicates are replays, not samples: the
        difference and its interval are those of
        :func:`~memsim.sweep.evaluate.paired_over_queries`, over the
        stream's queries (the replays folded: each query once; a bootstrap,
        ``ci_over_<objective> = "queries"``; ``diff`` the mean over the
        queries where both have a value, ``utility_share`` the difference of
        the pooled shares). An objective measured once per run (no queries:
        ``recall_gini``, ``store_notes``, ``store_tokens``,
        ``evicted_notes``) gets the mean of the differences over the replays,
        no interval and the verdict :data:`NO_INTERVAL` (``ci_over = "stream"``).
        ``note`` then says so (:data:`REPLAY_NOTE`), and, on the sweep's own
        stream, that the comparison is in-sample (:data:`IN_SAMPLE_NOTE`):
        the fresh seeds replay the stream the winner was selected on.
    """
    R = evaluator.exp.settings.replicates
    K = spec.robustness.replicates
    fresh = list(range(R, R + K))
    checks: list[tuple[str, str, dict | None, list[int]]] = []
    if fresh:
        checks.append(("fresh-seeds", "", None, fresh))
    for name, ov in spec.robustness.variants:
        checks.append(("variant", name, ov, fresh or list(range(R))))
    # a check whose replicates replay one stream keeps each candidate's
    # per-query values: its paired interval is over the stream's queries; on
    # the sweep's own stream that comparison is in-sample
    check_exps = [_check_experiment(evaluator, ov) for _, _, ov, _ in checks]
    replayed = [replays_one_stream(e) for e in check_exps]
    own = evaluator.exp.workload.to_config()
    in_sample = [r and e.workload.to_config() == own for r, e in zip(replayed, check_exps)]
    rows = []
    # (candidate index, check index) -> (objective label -> {replicate: value},
    # objective label -> per-query values on a replayed stream)
    evals: dict[tuple[int, int], tuple[dict[str, dict[int, float]], dict]] = {}
    # every candidate of a check in one batch (one replay per replicate when
    # only policies are swept): the values are those of evaluate(), bit for bit
    total = sum(len(reps) for *_, reps in checks)
    done = [0]

    def count(n: int = 1) -> None:
        done[0] += n
        if progress is not None and total:
            progress(done[0] / total)
    if evaluator.jobs > 1:
        # every check's replays in one pool of workers: a check does not wait
        # for the previous one's last replay
        outs, _ = evaluator.evaluate_batches(
            [{"param_sets": [c["params"] for c in candidates],
              "names": [f"c{i}" for i in range(len(candidates))], "replicates": reps,
              "variant": ov, "keep_queries": keep}
             for (_, _, ov, reps), keep in zip(checks, replayed)],
            progress=None if progress is None else (lambda f: progress(f) if total else None))
        outcomes = {j: _outcomes(candidates, got) for j, got in enumerate(outs)}
    else:
        outcomes = {j: _evaluate_all(evaluator, candidates, reps, ov, count, replayed[j])
                    for j, (_, _, ov, reps) in enumerate(checks)}
    for i, c in enumerate(candidates):
        base = {"number": c["number"], "role": c["role"]}
        row = dict(base, check="sweep", variant="", replicates=_reps_text(range(R)))
        for lab, v in zip(spec.labels, c["values"]):
            row[f"values_{lab}"] = v
            row[f"change_{lab}"] = 0.0
            row[f"per_replicate_{lab}"] = json.dumps(c.get("per_replicate", {}).get(lab, []))
        rows.append(row)
        for j, (check, name, _ov, reps) in enumerate(checks):
            values, per, queries = outcomes[j][i]
            evals[i, j] = per, queries
            row = dict(base, check=check, variant=name, replicates=_reps_text(reps))
            if check == "fresh-seeds" and in_sample[j]:
                # replays of the queries the winner was chosen on: its values
                # there are the sweep's (a deterministic policy's, exactly)
                row["note"] = REPLAYED_SEEDS_NOTE
            for lab, v, v0 in zip(spec.labels, values, c["values"]):
                row[f"values_{lab}"] = v
                row[f"change_{lab}"] = v - v0
                row[f"per_replicate_{lab}"] = json.dumps([per[lab][r] for r in reps])
            rows.append(row)
    rows += _paired_rows(spec, candidates, checks, evals, replayed, in_sample)
    cols = ["number", "role", "check", "variant", "replicates"]
    for lab in spec.labels:
        cols += [f"values_{lab}", f"change_{lab}", f"per_replicate_{lab}"]
    for lab in spec.labels:
        cols += [f"diff_{lab}", f"diff_ci_low_{lab}", f"diff_ci_high_{lab}",
                 f"excludes_0_{lab}", f"verdict_{lab}", f"ci_over_{lab}"]
    return pd.DataFrame(rows, columns=cols + ["note"])


def _check_experiment(evaluator: TrialEvaluator, variant: dict | None):
    """The experiment of a check (with its variant), for its workload; the
    sweep's own where the variant does not build without a candidate's
    parameters (the candidates' evaluation then says why)."""
    try:
        return evaluator.trial_experiment({}, variant)
    except MemsimError:
        return evaluator.exp


def _evaluate_all(evaluator: TrialEvaluator, candidates: list[dict], reps: list[int],
                  variant: dict | None, replayed: Callable[[int], None],
                  keep_queries: bool = False) -> list[tuple[list[float], dict, dict]]:
    """(values, per-replicate values, per-query values) of every candidate on
    ``reps`` (and a variant): one :meth:`~TrialEvaluator.evaluate_batch`, so
    that candidates differing only in their policies share each replay.
    ``replayed(n)`` counts the replicates done: each one as it ends, or all
    at once when they run in parallel worker processes (which report nothing
    before they end). The per-query values are kept with ``keep_queries``."""
    steps: set[int] = set()

    def after(i: int, step: int, values: list[float]) -> bool:
        if step not in steps:
            steps.add(step)
            replayed()
        return False
    parallel = evaluator.jobs > 1 and len(reps) > 1
    outs = evaluator.evaluate_batch([c["params"] for c in candidates],
                                    names=[f"c{i}" for i in range(len(candidates))],
                                    replicates=reps, variant=variant,
                                    after_replicate=None if parallel else after,
                                    keep_queries=keep_queries)
    if parallel:
        replayed(len(reps))
    return _outcomes(candidates, outs)


def _outcomes(candidates: list[dict], outs: list) -> list[tuple[list[float], dict, dict]]:
    """(values, per-replicate values, per-query values) of each candidate's
    outcome; a failed one raises its error."""
    for c, out in zip(candidates, outs):
        if out.error:  # a COMPLETE trial's parameters built during the sweep
            raise MemsimError(f"robustness check of trial {c['number']}: {out.error}")
    return [(list(out.values), out.per_replicate, out.queries) for out in outs]


def _paired_rows(spec: SweepSpec, candidates: list[dict], checks: list, evals: dict,
                 replayed: list[bool], in_sample: list[bool]) -> list[dict]:
    """The ``vs-experiment`` rows of :func:`robustness_check`: each winner
    minus the experiment's own parameters, replicate by replicate, or over
    the stream's queries where the check replays one stream (``replayed``;
    ``in_sample``: the sweep's own stream)."""
    preset = next((i for i, c in enumerate(candidates)
                   if c["role"] == "experiment" or c.get("experiment")), None)
    if preset is None:
        return []
    rows = []
    for i, c in enumerate(candidates):
        if c["role"] == "experiment":
            continue
        same = i == preset
        for j, (_, name, _, reps) in enumerate(checks):
            row = {"number": c["number"], "role": c["role"], "check": "vs-experiment",
                   "variant": name, "replicates": _reps_text(reps),
                   "note": (SAME_NOTE if same else f"minus trial {candidates[preset]['number']} "
                                 "(the experiment's own parameters)")}
            (per, queries), (per0, queries0) = evals[i, j], evals[preset, j]
            for o, direction in zip(spec.objectives, spec.directions):
                lab = o.label
                d = np.array([per[lab][r] - per0[lab][r] for r in reps], dtype=np.float64)
                if not replayed[j]:
                    mean, lo, hi, _ = mean_ci(d, PAIRED_LEVEL)
                    over = "replicates"
                elif lab in queries:
                    # replays are no samples: pair the stream's queries instead
                    mean, lo, hi, _ = paired_over_queries(queries[lab], queries0[lab],
                                                          o.metric, PAIRED_LEVEL)
                    over = "queries"
                else:
                    # one value per run: nothing to resample, no interval
                    fin = d[np.isfinite(d)]
                    mean = float(fin.mean()) if fin.size else math.nan
                    lo = hi = math.nan
                    over = "stream"
                excl = bool(np.isfinite(lo) and (lo > 0 or hi < 0))
                sign = 1.0 if direction == "maximize" else -1.0
                if over == "stream":
                    verdict = NO_INTERVAL
                elif not np.isfinite(lo):
                    verdict = "not measured"
                elif not excl:
                    verdict = "no difference shown"
                else:
                    verdict = "better" if sign * mean > 0 else "worse"
                row.update({f"values_{lab}": math.nan, f"change_{lab}": math.nan,
                            f"per_replicate_{lab}": json.dumps(d.tolist()),
                            f"diff_{lab}": mean, f"diff_ci_low_{lab}": lo,
                            f"diff_ci_high_{lab}": hi, f"excludes_0_{lab}": excl,
                            f"verdict_{lab}": verdict, f"ci_over_{lab}": over})
            if replayed[j]:
                row["note"] += "; " + REPLAY_NOTE
            if in_sample[j] and not same:
                row["note"] += "; " + IN_SAMPLE_NOTE
            rows.append(row)
    return rows


def _reps_text(reps) -> str:
    """Replicates as a range (``2-4``) when consecutive, else listed."""
    reps = list(reps)
    if reps and reps == list(range(reps[0], reps[-1] + 1)):
        return f"{reps[0]}-{reps[-1]}" if len(reps) > 1 else str(reps[0])
    return " ".join(str(r) for r in reps)


def robustness_candidates(study, spec: SweepSpec, best: list, R: int) -> list[dict]:
    """What :func:`robustness_check` re-evaluates: the first ten of ``best``
    (the best trial, or the Pareto set best first), then trial 0 (the
    experiment's own parameters) when it is not among them."""
    zero = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.user_attrs.get("origin") == "experiment"]
    cands = []
    for t in best[:10]:
        cands.append({"number": t.number, "role": "pareto" if spec.multi else "best",
                      "params": dict(t.params), "values": list(t.values),
                      "per_replicate": _per_rep(t, spec, R),
                      # the preset won: the paired comparison is with itself
                      "experiment": bool(zero) and t.number == zero[0].number})
    if zero and zero[0].number not in {c["number"] for c in cands}:
        t = zero[0]
        cands.append({"number": t.number, "role": "experiment", "params": dict(t.params),
                      "values": list(t.values),
                      "per_replicate": _per_rep(t, spec, R)})
    return cands


def _per_rep(t, spec: SweepSpec, R: int) -> dict[str, list[float]]:
    """Objective label -> the trial's value on each replicate 0..R-1."""
    return {lab: [t.user_attrs.get(f"{lab}_rep{r}", math.nan) for r in range(R)]
            for lab in spec.labels}
