"""Can this workload test these parameters? (seed 000's lesson as a feature)

"A test can only catch a bug its data can express": a benchmark whose every
note has age 0 cannot see a decay bug, one with a single actor cannot see a
breadth weight, one whose notes all have one size cannot tell packers apart.
:func:`audit` measures, for an experiment, whether what its policies rank on
varies where it matters, whether the workload reaches the regime each
floor, promotion or eviction threshold controls, and whether each swept
parameter moves the objective beyond replicate noise:

*Signals.* For every signal a ranking or a retention rule can use (``age``,
``recall_count``, ``distinct_actors``, ``tokens``, ``importance``,
``salience``) its spread over the notes that queries actually score: for a
sample of queries (evenly spaced in time), the notes that exist at the
query's time (``created_at <= t < expires_at``, in the query's namespace when
the stream has one). Reported per signal: quantiles, coefficient of
variation and the share of distinct values over all (query, note) pairs, and
``varies_within`` -- the share of sampled queries whose scored notes do not
all share one value. Only variation *within* a query can change a ranking:
a signal equal for every note a query scores is constant for that query,
whatever it does between queries. ``age`` is counted from creation.

``recall_count`` and ``distinct_actors`` depend on the policy (its feedback
decides what counts as a use), so they are reported per policy, rebuilt from
one simulated replicate with ``save_rankings``: a use is a packed note
(``touch = "packed"``), a note among the first ``k`` of the ranking
(``"returned"``) or any ranked candidate (``"prefilter"``, approximated by the
top-C the rankings keep), plus the stream's organic accesses; a use counts
for queries of later ticks (per-tick feedback) or later queries (per-query:
the policy's ``feedback.timing``, else the experiment's ``feedback_mode``), as
in the engine. The engine's cooldown is not replayed,
so counts can be slightly high for policies with one. ``distinct_actors`` is
``max(actors, 1)``, the quantity a breadth term reads (``ln max(n, 1)``: no
actor and one actor weigh the same).

*Reach.* A parameter that controls a regime can only be tested when the
workload gets into that regime. For every such parameter of the audited
policies (swept: at its low, middle and high probe values; not swept: at the
experiment's value), over the sampled (query, note) pairs, with the use
counts, tiers (after promotion) and last accesses rebuilt above:

- a decay floor (a decay parameter whose name contains ``floor``): the
  multiplier the decay gives (``decay.recency`` of the stickiness's effective
  age), over the pairs of the tier the floor applies to (``task_floor``: task
  tier, ``scratch_floor``: scratch; a plain ``floor``: every tier). The floor
  is *reached* when some pair has ``recency - floor <= 0.1 * (1 - floor)``: the
  part above the floor is down to a tenth of its range. Measure: the least
  ``(recency - floor) / (1 - floor)``, over pairs and probe values. (A
  relative rule ``recency <= 1.1 * floor`` could never be met by a floor of 0.)
  For ``half-life-floor`` and ``per-tier`` the rule reads ``0.5 ** (age / H)
  <= 0.1``, i.e. age >= 3.32 half-lives, whatever the floor.
- a promotion threshold (the feedback's ``promote_after``, when > 0): reached
  when some note's use count over the replicate reaches it; a swept one when
  it reaches the least positive value the sweep can take (a range from 0,
  which is off, is reached at 1, not at its middle probe). Measure: the
  largest use count.
- an eviction threshold (a retention parameter whose name contains
  ``threshold``, or a capacity's ``max_notes``): the retention rule's own
  ``evict`` at each sampled query's time, on the notes it scores. Reached
  when it would evict any of them. Measure: the largest share of pairs
  evicted. (A ``memorybank`` threshold in ``"probabilistic"`` mode is never
  read: flagged as such.)

Reach is measured on the audited replicate under the experiment's other
parameter values (use counts come from a simulation at the experiment's own
``promote_after``).

*Parameters.* Every parameter of ``[sweep.params]`` is evaluated at its low,
middle and high value (each choice of a categorical), the others at the
experiment's values, with the sweep's own objective code
(:class:`memsim.sweep.TrialEvaluator`), on replicates ``0 .. R-1``, R = the
``replicates`` argument (default: the experiment's replicates, at least 3),
the same seeds for every value (common random numbers). Every probe value
is an arm of one replay per replicate
(:meth:`~memsim.sweep.TrialEvaluator.evaluate_batch`), with the values it
gets alone. ``values`` are the means over replicates; ``spread`` is how far
they move across the range.
*Effect*: the best and the worst probe value (by that mean, in the
objective's direction); per replicate ``d = better - worse``; the effect is
the mean of ``d`` with a Student-t 95% interval (``mean +- t_{0.975, R-1} *
sd / sqrt(R)``, replicates where either value is NaN left out). Choosing the
best and worst from the same replicates makes the effect biased upwards, so
the rule errs towards calling a parameter testable. A replayed stream (a
trace, a stream folder, LoCoMo) gives the same queries to every replicate:
its replicates are replays, not samples (a deterministic policy gives the
same ``d`` on each, an interval of zero width), so the effect is paired over
the stream's queries instead, each once
(:func:`~memsim.sweep.evaluate.paired_over_queries`: a bootstrap,
``ci_over = "queries"``), and an objective measured once per run
(``recall_gini``, the store size ...) gets no interval (``ci_over =
"stream"``: within noise, for want of a measure of it).

*Flags.* A swept parameter is untestable when the signal it acts on is
constant within every sampled query (decay rates when every age is 0, breadth
weights with one actor, stickiness when recall counts never vary, packers
when every note has the same size, importance weights when importance is
constant, a per-tier constant for a tier no scored note is in), when the
policy ignores it (a decay under a ranker that does not use recency), when it
controls a regime the workload never reaches (reason: what the measure
shows), when the objective does not move at all across its range (spread <=
1e-9 of its scale), or when its effect is within replicate noise (the 95%
interval of the effect includes 0, or fewer than 2 replicates give values).
A regime parameter that is not swept and not reached is flagged
``unreached``.

*A measured effect wins.* The reach rule and the constant-signal rules are
heuristics; the effect is a measurement. A parameter whose effect is
significant (its 95% interval excludes 0) is testable whatever the rules say
(e.g. a floor at a 10-day half-life on a 30-day workload: the multiplier
stays above 10% of its range, yet the floor moves utility); what a rule said
is kept in the ``note`` column and a ``note:`` line. An unreached regime only
explains a null effect ("..., so its effect is nil").
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from memsim.runs.config import Experiment, StreamSource
from memsim.engine import feedback_timing
from memsim.core.paths import file_in_the_way
from memsim.core.errors import ConfigError, MemsimError
from memsim.policies.base import TIER_CODES, ArrayContext
from memsim.reporting.rundir import write_atomic
from memsim.runs.runner import experiment_arms, load_stream_for, simulate_experiment
from memsim.reporting.stats import mean_ci
from memsim.sweep import SweepSpec, TrialEvaluator, apply_params
from memsim.sweep.evaluate import paired_over_queries, replays_one_stream

__all__ = ["AuditReport", "audit", "SIGNALS", "param_signals", "regime_kind",
           "REGIMES", "PARAM_COLUMNS", "MIN_REPLICATES"]

#: Signals a ranking or retention rule can read, in report order.
SIGNALS = ("age", "recall_count", "distinct_actors", "tokens", "importance", "salience")
#: Signals that depend on the policy's feedback.
DYNAMIC = ("recall_count", "distinct_actors")
_TIER_NAMES = {v: k for k, v in TIER_CODES.items()}
#: Fewest replicates each probe value is evaluated on by default.
MIN_REPLICATES = 3
#: A parameter moves the objective when its spread exceeds this share of the
#: objective's scale (floating-point noise aside, an untestable parameter
#: gives bit-identical values).
_MOVE_RTOL = 1e-9


@dataclass
class AuditReport:
    """What :func:`audit` found.

    Attributes
    ----------
    signals : DataFrame
        One row per (signal, policy): ``signal, policy`` ("" for signals that
        do not depend on the policy), ``pairs`` (query-note pairs), ``min, p05,
        p50, p95, max, mean, cv, distinct_share, varies_within, constant``.
    params : DataFrame
        One row per (swept parameter, objective), columns
        :data:`PARAM_COLUMNS`: ``values`` (objective at each probe point, mean
        over replicates), ``spread``, ``moves``, ``signal_varies``;
        ``replicates`` (pairs of the comparison), ``best``, ``worst``,
        ``effect`` (mean of better - worse, >= 0) and its 95% interval
        ``effect_lo, effect_hi``, ``ci_over`` (what the interval resamples:
        ``"replicates"``; on a replayed stream ``"queries"``, or ``"stream"``
        for a per-run objective, which has none), ``within_noise``; ``regime`` (floor,
        promotion, eviction or ""), ``reach`` (its measure, see ``reach``),
        ``reached``; ``testable``, ``reason`` (why not) and ``note`` (a rule
        that would have said untestable, overruled by a significant effect).
    reach : DataFrame
        One row per regime parameter of the audited policies (swept or not):
        ``param, policy, kind, swept, values, measure_name, measure, reached,
        reason``.
    flags : list of str
        One line per untestable parameter, unreached regime or constant signal.
    tiers : dict
        Policy -> tiers of the scored notes (after promotion).
    replicates : int
        Replicates each probe value was evaluated on.
    replays : bool
        Whether they replay one stream (effects paired over its queries).
    """

    experiment: str
    replicate: int
    n_queries: int
    n_notes: int
    signals: pd.DataFrame
    params: pd.DataFrame
    flags: list[str] = field(default_factory=list)
    tiers: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    reach: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        columns=["param", "policy", "kind", "swept", "values", "measure_name", "measure",
                 "reached", "reason"]))
    replicates: int = MIN_REPLICATES
    replays: bool = False

    def untestable(self) -> list[str]:
        """Swept parameters flagged untestable."""
        if not len(self.params):
            return []
        bad = self.params.loc[~self.params["testable"].astype(bool), "param"]
        return list(dict.fromkeys(bad))

    def to_text(self) -> str:
        """The report as plain text (what ``memsim audit`` prints)."""
        lines = [f"memsim audit: {self.experiment}, replicate {self.replicate}: "
                 f"{self.n_queries} sampled queries, {self.n_notes} notes", ""]
        lines.append("Signals over the notes each sampled query scores "
                     "(varies_within: share of queries whose notes differ):")
        sig = self.signals.copy()
        if len(sig):
            show = sig[["signal", "policy", "p05", "p50", "p95", "cv", "distinct_share",
                        "varies_within", "constant"]].copy()
            show["policy"] = show["policy"].replace("", "-")
            lines.append(show.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
        for pol, tiers in self.tiers.items():
            lines.append(f"tiers scored by {pol}: "
                         + ", ".join(f"{k} {v:.1%}" for k, v in tiers.items()))
        lines.append("")
        if len(self.reach):
            lines.append(f"Regime reach (floor: least (recency - floor) / (1 - floor), reached "
                         f"at <= {_FLOOR_REACH:g}; promotion: largest use count; eviction: "
                         "largest share of scored notes evicted):")
            show = self.reach[["param", "kind", "swept", "values", "measure", "reached"]]
            lines.append(show.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
            lines.append("")
        if len(self.params):
            if self.replays:
                # replays are no samples: the interval is over the stream's queries
                lines.append(f"Swept parameters (objective at each probe point, mean of "
                             f"{self.replicates} replays of one stream; effect = better - "
                             "worse, paired over the stream's queries, 95% CI; none for a "
                             "per-run objective):")
            else:
                lines.append(f"Swept parameters (objective at each probe point, mean of "
                             f"{self.replicates} replicates; effect = better - worse, "
                             "paired, 95% CI):")
            show = self.params[["param", "objective", "points", "values", "best", "worst",
                                "effect", "effect_lo", "effect_hi", "testable"]]
            lines.append(show.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        else:
            lines.append("No [sweep.params]: add a [sweep] table to audit parameters.")
        lines.append("")
        if self.flags:
            lines.append("Flags:")
            lines.extend(f"  {f}" for f in self.flags)
        else:
            lines.append("No flags: every signal varies, every regime is reached and every "
                         "swept parameter moves the objective beyond replicate noise.")
        lines.extend(self.notes)
        return "\n".join(lines)

    def save(self, folder: Path) -> Path:
        """Write ``signals.csv``, ``params.csv``, ``reach.csv`` and ``audit.txt``
        to ``folder``.

        Raises
        ------
        ConfigError
            If ``folder`` cannot be made a folder (a file is there or above it,
            or it is read-only), naming it.
        """
        folder = Path(folder)
        check_out_folder(folder, what=str(folder))
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{folder}: cannot save the audit there: "
                              f"{exc.strerror or exc}") from None
        write_atomic(folder / "signals.csv", lambda p: self.signals.to_csv(p, index=False))
        write_atomic(folder / "params.csv", lambda p: self.params.to_csv(p, index=False))
        write_atomic(folder / "reach.csv", lambda p: self.reach.to_csv(p, index=False))
        write_atomic(folder / "audit.txt",
                     lambda p: p.write_text(self.to_text() + "\n", encoding="utf-8"))
        return folder


def check_out_folder(folder: str | Path, what: str = "--out") -> None:
    """Check, before any work, that ``folder`` can hold the audit's files.

    Parameters
    ----------
    folder : path
        The folder :meth:`AuditReport.save` will write to (made if missing).
    what : str
        What the message names (``--out`` for the command line's option).

    Raises
    ------
    ConfigError
        One line naming ``what`` when a file stands at ``folder`` or above
        it, or the nearest existing folder cannot be written to.
    """
    folder = Path(folder)
    prefix = what if what == str(folder) else f"{what} {folder}"
    p = file_in_the_way(folder)
    if p is not None:
        why = "is a file, not a folder" if p == folder else f"{p} is a file, not a folder"
        raise ConfigError(f"{prefix}: {why}; give a folder to save the audit in")
    near = next((q for q in (folder, *folder.absolute().parents) if q.exists()), None)
    if near is not None and not os.access(near, os.W_OK | os.X_OK):
        raise ConfigError(f"{prefix}: cannot save the audit there: {near} is not writable")


# --------------------------------------------------------------------------
# Which signals a parameter acts on
# --------------------------------------------------------------------------

_RANKER_SIGNALS = {"importance_weight": "importance", "w_importance": "importance",
                   "time_weight": "age", "min_weight": "age", "w_recency": "age"}
_RETENTION_SIGNALS = {"lambda_per_day": "age", "strength_days": "age",
                      "task_half_life_days": "age", "scratch_half_life_days": "age",
                      "longterm_half_life_days": "age", "sigma": "recall_count",
                      "mu_per_day": "recall_count", "strength_per_recall": "recall_count",
                      "breadth_weight": "distinct_actors"}


def param_signals(key: str, exp: Experiment) -> tuple[list[str], str | None, str]:
    """(signals, tier, structural reason) of a dotted key.

    ``signals`` are the signals the parameter acts on (empty: none in
    particular, e.g. a workload knob); ``tier`` is the tier a per-tier
    constant applies to; ``reason`` is non-empty when the policy ignores the
    parameter whatever the workload (a decay under a ranker without recency).
    """
    parts = key.split(".")
    if key == "experiment.budget_tokens":
        return ["tokens"], None, ""
    if parts[0] != "policies" or len(parts) < 3 or parts[1] not in exp.policies:
        return [], None, ""
    policy = exp.policies[parts[1]]
    slot = parts[2]
    name = parts[3] if len(parts) > 3 else ""
    tier = next((t for t in TIER_CODES if name.startswith(f"{t}_")), None)
    uses_recency = getattr(policy.ranker, "uses_recency", True)
    no_recency = (f"ranker {policy.ranker.name!r} does not use recency"
                  if not uses_recency else "")
    if slot == "decay":
        sig = ["recall_count"] if name in ("strength_per_recall", "recall_growth") else ["age"]
        return sig, tier, no_recency
    if slot == "stickiness":
        return ["recall_count"], None, no_recency
    if slot == "breadth":
        return ["distinct_actors"], None, ""
    if slot == "ranker":
        s = _RANKER_SIGNALS.get(name)
        return ([s] if s else []), None, ""
    if slot == "retention":
        s = _RETENTION_SIGNALS.get(name)
        return ([s] if s else []), tier, ""
    if slot == "packer":
        return ["tokens"], None, ""
    if slot == "feedback" and name == "promote_after":
        return ["recall_count"], None, ""
    return [], None, ""


# --------------------------------------------------------------------------
# The audit
# --------------------------------------------------------------------------


def _sample(n: int, k: int) -> np.ndarray:
    if n <= k:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, k).round().astype(np.int64))


def _stats(values: list[np.ndarray]) -> dict[str, Any]:
    """Spread of one signal: pooled over pairs, and within each query."""
    within = [len(v) > 1 and bool(np.ptp(v) > 0) for v in values]
    allv = np.concatenate(values) if values else np.zeros(0)
    if allv.size == 0:
        return {"pairs": 0, "min": math.nan, "p05": math.nan, "p50": math.nan,
                "p95": math.nan, "max": math.nan, "mean": math.nan, "cv": math.nan,
                "distinct_share": math.nan, "varies_within": 0.0, "constant": True}
    mean = float(allv.mean())
    std = float(allv.std())
    q = np.quantile(allv, [0.05, 0.5, 0.95])
    return {"pairs": int(allv.size), "min": float(allv.min()), "p05": float(q[0]),
            "p50": float(q[1]), "p95": float(q[2]), "max": float(allv.max()), "mean": mean,
            "cv": std / abs(mean) if mean != 0 else (0.0 if std == 0 else math.inf),
            "distinct_share": len(np.unique(allv)) / allv.size,
            "varies_within": float(np.mean(within)) if within else 0.0,
            "constant": not any(within)}


def _scored(stream, rows: np.ndarray) -> list[np.ndarray]:
    """Note rows existing at each sampled query (its namespace only, if any)."""
    notes, queries = stream.notes, stream.queries
    created = notes["created_at"].to_numpy(np.float64)
    expires = notes["expires_at"].to_numpy(np.float64)
    expires = np.where(np.isnan(expires), np.inf, expires)
    t = queries["t"].to_numpy(np.float64)[rows]
    ns = None
    if "namespace" in notes and "namespace" in queries:
        ns = (notes["namespace"].astype(str).to_numpy(),
              queries["namespace"].astype(str).to_numpy()[rows])
    out = []
    for i, tq in enumerate(t):
        ok = (created <= tq) & (expires > tq)
        if ns is not None:
            ok &= ns[0] == ns[1][i]
        out.append(np.flatnonzero(ok))
    return out


@dataclass
class _PolicyUses:
    """One policy's use state of the scored notes, at each sampled query.

    Lists hold one (L_i,) array per sampled query, aligned with ``scored``:
    ``recalls`` (uses seen by the query), ``actors`` (distinct actors, 0 when
    never used), ``tier`` (codes, after promotion) and ``last_access`` (time of
    the last use seen, NaN when never used). ``max_uses`` is the largest use
    count any note reaches over the whole replicate.
    """

    recalls: list[np.ndarray]
    actors: list[np.ndarray]
    tier: list[np.ndarray]
    last_access: list[np.ndarray]
    max_uses: int


#: ``_uses(rankings=)``: simulate the replicate for its rankings there.
_SIMULATE = object()


def _uses_experiment(exp: Experiment, policies: list[str]) -> Experiment | None:
    """The experiment whose replicate gives the audited policies' uses: the
    policies with feedback, at the first budget, saving their rankings (None
    when no policy has feedback)."""
    need_sim = [p for p in policies if exp.policies[p].feedback.touch != "none"]
    if not need_sim:
        return None
    settings = dataclasses.replace(exp.settings, save_rankings=True,
                                   budgets=exp.settings.budgets[:1])
    return dataclasses.replace(exp, policies={p: exp.policies[p] for p in need_sim},
                               settings=settings)


def _uses(exp: Experiment, stream, replicate: int, policies: list[str],
          rows: np.ndarray, scored: list[np.ndarray], rankings: Any = _SIMULATE
          ) -> tuple[dict, dict, dict]:
    """Recall counts, distinct actors and tiers of the scored notes, per policy.

    ``rankings``: the ``rankings`` frame of :func:`_uses_experiment` on the
    replicate, when the caller simulated it (else it is simulated here).
    Returns the signal values (policy -> signal -> list of arrays), the tier
    shares (policy -> tier -> share) and the use state (policy ->
    :class:`_PolicyUses`).
    """
    notes, queries = stream.notes, stream.queries
    n = len(notes)
    qt = queries["t"].to_numpy(np.float64)
    note_row = pd.Series(np.arange(n), index=notes["note_id"].to_numpy(np.int64))
    actors = sorted(set(notes["actor"].astype(str)) | set(queries["actor"].astype(str))
                    | set(stream.accesses["actor"].astype(str)))
    acode = {a: i for i, a in enumerate(actors)}
    q_by_id = pd.DataFrame({"t": qt, "actor": queries["actor"].astype(str).map(acode)},
                           index=queries["query_id"].to_numpy(np.int64))
    acc = stream.accesses
    acc_t = acc["t"].to_numpy(np.float64)
    acc_rows = note_row.reindex(acc["note_id"].to_numpy(np.int64)).to_numpy()
    acc_actor = acc["actor"].astype(str).map(acode).to_numpy(np.int64)

    if rankings is _SIMULATE:
        sim = _uses_experiment(exp, policies)
        rankings = None if sim is None else simulate_experiment(
            sim, replicates=[replicate], streams={replicate: stream})["rankings"]
    tier0 = notes["tier"].astype(str).map(lambda x: TIER_CODES.get(x, TIER_CODES["task"])
                                          ).to_numpy(np.int64)
    tick = exp.sim.tick_days
    out: dict[str, dict[str, list[np.ndarray]]] = {}
    tiers: dict[str, dict[str, float]] = {}
    state: dict[str, _PolicyUses] = {}
    for pol in policies:
        fb = exp.policies[pol].feedback
        per_tick = feedback_timing(exp.policies[pol], exp.sim) == "per-tick"
        ev_t, ev_rows, ev_actor = [acc_t], [acc_rows], [acc_actor]
        # accesses before a query's time count; feedback uses as in the engine
        ev_key = [acc_t]
        if rankings is not None and fb.touch != "none":
            r = rankings[rankings["policy"] == pol]
            if fb.touch == "packed":
                r = r[r["packed"].astype(bool)]
            elif fb.touch == "returned":
                r = r[r["rank"] <= fb.k]
            q = q_by_id.loc[r["query_id"].to_numpy(np.int64)]
            t_use = q["t"].to_numpy(np.float64)
            ev_t.append(t_use)
            ev_rows.append(note_row.reindex(r["note_id"].to_numpy(np.int64)).to_numpy())
            ev_actor.append(q["actor"].to_numpy(np.int64))
            # a use of tick k is seen from tick k + 1 on (per-tick feedback)
            ev_key.append((np.floor(t_use / tick) + 1) * tick if per_tick
                          else np.nextafter(t_use, np.inf))
        t_all = np.concatenate(ev_key)
        # the time of the use itself (what last_access records), not when it is seen
        t_raw = np.concatenate(ev_t)
        rows_all = np.concatenate(ev_rows).astype(np.int64)
        act_all = np.concatenate(ev_actor).astype(np.int64)
        order = np.argsort(t_all, kind="stable")
        t_all, t_raw = t_all[order], t_raw[order]
        rows_all, act_all = rows_all[order], act_all[order]
        counts = np.zeros(n, dtype=np.int64)
        last = np.full(n, -np.inf)
        seen = np.zeros((n, max(1, len(actors))), dtype=bool)
        done = 0
        recall_vals, actor_vals = [], []
        st = _PolicyUses([], [], [], [], int(np.bincount(rows_all, minlength=n).max(initial=0)))
        tier_counts = np.zeros(len(TIER_CODES), dtype=np.int64)
        for i in np.argsort(qt[rows], kind="stable"):
            tq = qt[rows[i]]
            upto = int(np.searchsorted(t_all, tq, side="right")) if per_tick else int(
                np.searchsorted(t_all, tq, side="left"))
            if upto > done:
                np.add.at(counts, rows_all[done:upto], 1)
                np.maximum.at(last, rows_all[done:upto], t_raw[done:upto])
                seen[rows_all[done:upto], act_all[done:upto]] = True
                done = upto
            idx = scored[i]
            n_act = seen[idx].sum(axis=1)
            recall_vals.append(counts[idx].astype(np.float64))
            actor_vals.append(np.maximum(n_act, 1).astype(np.float64))
            tier = tier0[idx].copy()
            if fb.promote_after > 0:
                tier[counts[idx] >= fb.promote_after] = TIER_CODES["longterm"]
            tier_counts += np.bincount(tier, minlength=len(TIER_CODES))
            st.recalls.append(counts[idx].copy())
            st.actors.append(n_act.astype(np.int64))
            st.tier.append(tier)
            st.last_access.append(np.where(np.isfinite(last[idx]), last[idx], np.nan))
        # back to the order of ``rows`` (the loop ran in time order)
        back = np.argsort(np.argsort(qt[rows], kind="stable"), kind="stable")
        recall_vals = [recall_vals[j] for j in back]
        actor_vals = [actor_vals[j] for j in back]
        for name in ("recalls", "actors", "tier", "last_access"):
            lst = getattr(st, name)
            setattr(st, name, [lst[j] for j in back])
        out[pol] = {"recall_count": recall_vals, "distinct_actors": actor_vals}
        state[pol] = st
        total = tier_counts.sum()
        tiers[pol] = {_TIER_NAMES[c]: (tier_counts[c] / total if total else 0.0)
                      for c in range(len(TIER_CODES))}
    return out, tiers, state


# --------------------------------------------------------------------------
# Reach: does the workload get into the regime a parameter controls?
# --------------------------------------------------------------------------

#: A floor is reached when the part of the multiplier above it falls to this
#: share of its range: ``(recency - floor) / (1 - floor) <= _FLOOR_REACH``.
_FLOOR_REACH = 0.1
REGIMES = ("floor", "promotion", "eviction")


def regime_kind(key: str, exp: Experiment) -> str | None:
    """The regime a dotted key controls: ``"floor"``, ``"promotion"``,
    ``"eviction"`` or None.

    ``"floor"``: a parameter of a decay whose name contains ``floor``;
    ``"promotion"``: the feedback's ``promote_after``; ``"eviction"``: a
    retention parameter whose name contains ``threshold``, or a capacity's
    ``max_notes``.
    """
    parts = key.split(".")
    if len(parts) != 4 or parts[0] != "policies" or parts[1] not in exp.policies:
        return None
    slot, name = parts[2], parts[3]
    if slot == "decay" and "floor" in name:
        return "floor"
    if slot == "feedback" and name == "promote_after":
        return "promotion"
    if slot == "retention" and ("threshold" in name or name == "max_notes"):
        return "eviction"
    return None


def _probe_sets(spec: SweepSpec) -> list[tuple[str, dict]]:
    """(swept key, parameter set) of every probe point, in report order."""
    return [(p.key, {p.key: v}) for p in spec.params for v in p.probe_points()]


def _probe(evaluator: TrialEvaluator, spec: SweepSpec, reps: list[int],
           step_done: Callable[[int], None], outs: list | None = None,
           keep_queries: bool = False) -> dict[str, list[tuple[list[float], dict, dict]]]:
    """Swept key -> (objective values, per-replicate values, per-query
    values) at each of its probe points, every point one parameter set on
    the replicates ``reps``; the per-query values only with
    ``keep_queries`` (a replayed stream).

    All the points are simulated as the arms of one replay per replicate
    (:meth:`TrialEvaluator.evaluate_batch`): each value is bit for bit the
    one evaluating the point alone gives. A point whose evaluation fails is
    evaluated alone again, so that its error is raised as it would be.
    ``outs``: the batch's outcomes, when the caller evaluated it
    (:meth:`TrialEvaluator.evaluate_batches`).
    """
    sets = _probe_sets(spec)
    if outs is None:
        done: set[int] = set()

        def after(i: int, step: int, values: list[float]) -> bool:
            if step not in done:
                done.add(step)
                step_done(step)
            return False

        # the per-query values only where they are read (a replayed stream)
        keep = {"keep_queries": True} if keep_queries else {}
        outs = evaluator.evaluate_batch([params for _, params in sets], replicates=reps,
                                        after_replicate=after, **keep)
    probed: dict[str, list[tuple[list[float], dict, dict]]] = {p.key: [] for p in spec.params}
    for (key, params), out in zip(sets, outs):
        if out.error:
            evaluator.evaluate(params, replicates=reps)  # raises the point's error
            raise MemsimError(out.error)
        probed[key].append((list(out.values), out.per_replicate, out.queries))
    return probed


def _regime_keys(exp: Experiment, policies: list[str]) -> list[str]:
    """Regime parameters the audited policies actually use (at their values)."""
    keys = []
    for pol in policies:
        p = exp.policies[pol]
        for slot, comp in (("decay", p.decay), ("feedback", p.feedback),
                           ("retention", p.retention)):
            for f in dataclasses.fields(comp):
                key = f"policies.{pol}.{slot}.{f.name}"
                kind = regime_kind(key, exp)
                if kind is None or not isinstance(getattr(comp, f.name), (int, float)):
                    continue
                if kind == "promotion" and comp.promote_after == 0:
                    continue  # promotion is off: no threshold to reach
                if kind == "eviction" and not getattr(comp, "evicts", True):
                    continue
                keys.append(key)
    return keys


def _note_columns(notes) -> dict[str, np.ndarray | None]:
    """The note columns an :class:`ArrayContext` reads, as arrays over every
    note (``memory_type`` as str, ``pinned`` as bool; None when absent):
    converted once per audit, then sliced per sampled query."""
    def col(name, astype=None):
        if name not in notes:
            return None
        v = notes[name].to_numpy()
        return v if astype is None else v.astype(astype)

    return {"created_at": col("created_at"), "updated_at": col("updated_at"),
            "memory_type": col("memory_type", str), "importance": col("importance"),
            "salience": col("salience"), "pinned": col("pinned", bool),
            "tokens": col("tokens")}


def _context(cols: dict, scored_i: np.ndarray, tq: float, use: _PolicyUses, i: int):
    """An :class:`ArrayContext` of the notes a sampled query scores, at its
    time (``cols``: :func:`_note_columns`)."""
    def col(name):
        return None if cols[name] is None else cols[name][scored_i]

    return ArrayContext(
        t=np.array([tq]), created_at=col("created_at"), updated_at=col("updated_at"),
        last_access=use.last_access[i], recalls=use.recalls[i], tier=use.tier[i],
        memory_type=col("memory_type"), importance=col("importance"),
        salience=col("salience"), pinned=col("pinned"), distinct_actors=use.actors[i],
        tokens=col("tokens"), idx=scored_i)


def _least_positive(param, values: list) -> float | None:
    """The least positive value a swept ``param`` can take (None when it
    takes none): not only its probe points, whose low end may be 0 (a
    promotion that never happens) while the next value up is 1. Without a
    parameter, the least positive of ``values``."""
    if param is None or param.type == "categorical":
        pos = [v for v in (values if param is None else param.choices)
               if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0]
        return min(pos) if pos else None
    low, high = param.low, param.high
    if high <= 0:
        return None
    if low > 0:
        return low
    if param.step is not None:  # low + k step, the first above 0
        return low + (math.floor(-low / param.step) + 1) * param.step
    return 1 if param.type == "int" else math.nextafter(0.0, 1.0)


def _reach(key: str, kind: str, values: list, exp: Experiment, cols: dict, tq: np.ndarray,
           scored: list[np.ndarray], use: _PolicyUses, least: float | None = None
           ) -> dict[str, Any]:
    """How far the sampled queries get into the regime ``key`` controls.

    Returns ``measure`` (floor: the least ``(recency - floor) / (1 - floor)``
    over the sampled pairs of the floor's tier(s), the smallest over
    ``values``; promotion: the largest use count of the replicate, reached
    when it is at least ``least``, the least positive threshold the
    parameter can take (:func:`_least_positive`); eviction: the largest
    share of sampled pairs the rule would evict), ``reached`` and ``reason``
    (why not, in words; "" when reached).
    """
    pol, slot, name = key.split(".")[1:]
    lo_hi = (_short(values[0]) if len(values) == 1
             else f"{_short(values[0])} .. {_short(values[-1])}")
    if kind == "promotion":
        reached = least is not None and use.max_uses >= least
        why = "" if reached else (
            f"promote_after = {lo_hi} never promotes (0 is off)" if least is None else
            f"no note is used more than {use.max_uses} times in the replicate, below "
            f"promote_after = {_short(least)}, the least positive value of {lo_hi}: no note "
            "is ever promoted")
        return {"measure": float(use.max_uses), "reached": reached, "reason": why}
    comps = [getattr(apply_params(exp, {key: v}).policies[pol], slot) for v in values]
    if kind == "eviction":
        mode = getattr(comps[0], "mode", None)
        if name == "threshold" and mode == "probabilistic":
            return {"measure": math.nan, "reached": False,
                    "reason": f"retention mode {mode!r} ignores {name}"}
        # each sampled query's context once, read by every probe value's rule
        ctxs = [_context(cols, idx, tq[i], use, i) for i, idx in enumerate(scored) if len(idx)]
        tot = sum(len(idx) for idx in scored)
        share = [sum(int(np.count_nonzero(comp.evict(c))) for c in ctxs) / tot if tot else 0.0
                 for comp in comps]
        reached = max(share) > 0
        why = "" if reached else (
            f"no scored note's retention crosses {name} = {lo_hi}: the rule never evicts")
        return {"measure": float(max(share)), "reached": reached, "reason": why}
    # a floor: the decay's multiplier over the pairs of the tier(s) it applies to
    policy = exp.policies[pol]
    tier = next((t for t in TIER_CODES if name.startswith(f"{t}_")), None)
    gaps = []
    oldest = -math.inf
    for i, idx in enumerate(scored):
        keep = (use.tier[i] == TIER_CODES[tier]) if tier is not None else np.ones(len(idx), bool)
        if not keep.any():
            continue
        ctx = _context(cols, idx, tq[i], use, i)
        age = policy.stickiness.effective_age(ctx.age(policy.decay.clock), ctx)
        oldest = max(oldest, float(np.max(np.asarray(age)[0][keep])))
        gaps.append([np.min((np.asarray(c.recency(age, ctx))[0][keep] - v) / (1.0 - v))
                     for c, v in zip(comps, values)])
    where = f"{tier}-tier " if tier is not None else ""
    if not gaps:
        return {"measure": math.nan, "reached": False,
                "reason": f"no sampled query scores a {where}note"}
    measure = float(np.min(gaps))
    reached = measure <= _FLOOR_REACH
    why = "" if reached else (
        f"the recency multiplier never comes within {_FLOOR_REACH:.0%} of {name} = {lo_hi}: "
        f"the part above the floor stays >= {measure:.2f} of its range (oldest {where}"
        f"note scored: {oldest:.0f} days)")
    return {"measure": measure, "reached": reached, "reason": why}


def _effect(per: list[dict[int, float]], direction: str, level: float = 0.95, *,
            queries: list | None = None, metric: str = "") -> dict[str, Any]:
    """Paired effect of the best vs the worst probe value, over replicates.

    ``per[j]`` maps replicate -> objective at probe value ``j``. The best and
    worst values are chosen on the mean over replicates (in the objective's
    direction); the effect is the mean over replicates of ``better - worse``
    (so >= 0), with a Student-t interval at ``level`` (``ci_over =
    "replicates"``).

    ``queries``, when the replicates replay one stream: each probe value's
    per-query values of the objective (``metric``), or None where the
    objective is measured once per run. The replays are no samples, so the
    effect and its interval are paired over the stream's queries instead
    (:func:`~memsim.sweep.evaluate.paired_over_queries`, ``ci_over =
    "queries"``, ``n_queries`` pairs); a per-run objective has no interval
    (``ci_over = "stream"``) and is within noise for want of a measure of it.
    """
    reps = sorted(set().union(*[set(d) for d in per]))
    y = np.array([[d.get(r, math.nan) for r in reps] for d in per], dtype=np.float64)
    ok = np.isfinite(y).all(axis=0)
    y = y[:, ok]
    out = {"best": -1, "worst": -1, "effect": math.nan, "effect_lo": math.nan,
           "effect_hi": math.nan, "n_replicates": int(ok.sum()), "within_noise": True,
           "ci_over": "replicates" if queries is None else "queries", "n_queries": 0}
    if y.shape[1] == 0 or len(per) < 2:
        return out
    sign = 1.0 if direction == "maximize" else -1.0
    m = sign * y.mean(axis=1)
    best, worst = int(np.argmax(m)), int(np.argmin(m))
    d = sign * (y[best] - y[worst])
    if queries is None:
        mean, lo, hi, n = mean_ci(d, level)
    elif queries[best] is not None and queries[worst] is not None:
        diff, a, b, out["n_queries"] = paired_over_queries(queries[best], queries[worst],
                                                           metric, level)
        # better - worse in the objective's direction: a minimised one flips
        mean, lo, hi = (diff, a, b) if sign > 0 else (-diff, -b, -a)
        n = out["n_replicates"]
    else:
        mean, lo, hi, n = float(d.mean()), math.nan, math.nan, out["n_replicates"]
        out["ci_over"] = "stream"
    # an interval needs two replicates; all-equal differences give a point
    within = not (np.isfinite(lo) and (lo > 0 or hi < 0))
    out.update(best=best, worst=worst, effect=mean, effect_lo=lo, effect_hi=hi,
               n_replicates=n, within_noise=bool(within))
    return out


def audit(exp: Experiment, *, sweep: dict | Any | None = None, replicate: int = 0,
          max_queries: int = 300, params: bool = True, replicates: int | None = None,
          progress: Callable[[float], None] | None = None, jobs: int = 1) -> AuditReport:
    """Audit an experiment: signal spreads, regime reach and parameter effects.

    Parameters
    ----------
    exp : Experiment
    sweep : dict or SweepSpec, optional
        The search space (default: the experiment's ``[sweep]`` table; none
        means signals and reach only).
    replicate : int
        Replicate whose stream is audited (signals, use counts, reach).
    max_queries : int
        Queries sampled, evenly in time, for the signal spreads and the reach.
    params : bool
        Evaluate the swept parameters (3 probe values, or every choice, each
        on ``replicates`` replicates).
    replicates : int, optional
        Replicates ``0 .. replicates - 1`` on which each probe value is
        evaluated (the same seeds for every value: common random numbers).
        Default: the experiment's replicates, at least 3. At least 2 (an
        interval needs two).
    progress : callable, optional
        Called with the fraction done.
    jobs : int
        Worker processes the replays run in, ``jobs`` at a time: the probe
        replays of every replicate and the replay of the use counts, in one
        pool. The report does not depend on it.

    Returns
    -------
    AuditReport
    """
    exp = exp.single("memsim audit")
    if not isinstance(replicate, int) or replicate < 0:
        raise ConfigError(f"--replicate: expected an integer >= 0, got {replicate!r}")
    if not isinstance(max_queries, int) or max_queries < 1:
        raise ConfigError(f"--queries: expected an integer >= 1, got {max_queries!r}")
    if replicates is None:
        replicates = max(int(exp.settings.replicates), MIN_REPLICATES)
    if isinstance(replicates, bool) or not isinstance(replicates, int) or replicates < 2:
        raise ConfigError(f"replicates (memsim audit --param-replicates): expected an integer "
                          f">= 2, got {replicates!r}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"--jobs: expected an integer >= 1, got {jobs!r}")
    table = sweep if sweep is not None else exp.sweep
    spec = None
    if isinstance(table, SweepSpec):
        spec = table
    elif table is not None:
        spec = SweepSpec.from_config(table, exp)
    tick = progress or (lambda f: None)

    stream = load_stream_for(exp, replicate)
    rows = _sample(len(stream.queries), max_queries)
    scored = _scored(stream, rows)
    notes = stream.notes
    tq = stream.queries["t"].to_numpy(np.float64)[rows]
    created = notes["created_at"].to_numpy(np.float64)
    static = {
        "age": [tq[i] - created[idx] for i, idx in enumerate(scored)],
        "tokens": [notes["tokens"].to_numpy(np.float64)[idx] for idx in scored],
        "importance": [notes["importance"].to_numpy(np.float64)[idx] for idx in scored],
        "salience": [notes["salience"].to_numpy(np.float64)[idx] for idx in scored],
    }
    policies = list(dict.fromkeys(
        [o.policy for o in spec.objectives] if spec is not None else list(exp.policies)))
    reps = list(range(replicates))
    # replicates of a stream from disk are replays: effects over its queries
    replays = replays_one_stream(exp)
    evaluator = None
    if spec is not None and params:
        evaluator = TrialEvaluator(exp, spec, jobs=jobs)
        evaluator.keep_stream(exp, replicate, stream)  # generated once
    rankings, pooled = _SIMULATE, None
    if evaluator is not None and jobs > 1:
        # the probe replays and the replay of the use counts in one pool of
        # worker processes: the values are those of one process
        sim = _uses_experiment(exp, policies)
        extra = [] if sim is None else [(sim, experiment_arms(sim), replicate, stream)]
        n_tasks = len(reps) + len(extra)
        if hasattr(progress, "phase"):
            progress.phase(f"replays ({len(_probe_sets(spec))} probe points as arms of one "
                           f"replay per replicate{', and the use counts' if extra else ''}; "
                           f"{min(jobs, n_tasks)} at a time)", units=n_tasks, unit="replay")
            pool_progress = progress
        else:
            pool_progress = (lambda f: tick(0.9 * f)) if progress is not None else None
        batch = {"param_sets": [params for _, params in _probe_sets(spec)], "replicates": reps}
        if replays:
            batch["keep_queries"] = True
        outs, frames = evaluator.evaluate_batches([batch], extra=extra, progress=pool_progress)
        pooled = outs[0]
        if sim is not None:
            rankings = pd.concat([frames[0]["rankings"]], ignore_index=True)
        # what is left takes a moment: the pool's phase ends the progress
        tick = ((lambda f: None) if progress is None or hasattr(progress, "phase")
                else (lambda f: progress(0.9 + 0.1 * f)))
    dynamic, tiers, uses = _uses(exp, stream, replicate, policies, rows, scored,
                                 rankings=rankings)
    tick(0.2)

    sig_rows = []
    for s in SIGNALS:
        if s in DYNAMIC:
            for pol in policies:
                sig_rows.append({"signal": s, "policy": pol, **_stats(dynamic[pol][s])})
        else:
            sig_rows.append({"signal": s, "policy": "", **_stats(static[s])})
    signals = pd.DataFrame(sig_rows)

    def constant(signal: str, policy: str | None) -> bool:
        sub = signals[signals["signal"] == signal]
        if signal in DYNAMIC:
            sub = sub[sub["policy"] == policy] if policy in set(sub["policy"]) else sub
        return bool(len(sub)) and bool(sub["constant"].all())

    flags: list[str] = []
    for _, r in signals.iterrows():
        if r["constant"]:
            who = f" (policy {r['policy']})" if r["policy"] else ""
            flags.append(f"constant signal: {r['signal']}{who} is the same for every note a "
                         f"query scores ({_value_text(r)}): no ranking can use it")

    # reach of every regime parameter: swept ones over their probe values,
    # the others at the experiment's value
    params = {p.key: p for p in spec.params} if spec is not None else {}
    swept = {k: p.probe_points() for k, p in params.items()}
    reach_keys = list(dict.fromkeys(
        _regime_keys(exp, policies)
        + [k for k in swept if regime_kind(k, exp) and k.split(".")[1] in uses]))
    reach_rows = []
    cols = _note_columns(notes) if reach_keys else {}
    for key in reach_keys:
        kind = regime_kind(key, exp)
        pol, slot, name = key.split(".")[1:]
        vals = swept.get(key) or [getattr(getattr(exp.policies[pol], slot), name)]
        got = _reach(key, kind, vals, exp, cols, tq, scored, uses[pol],
                     least=_least_positive(params.get(key), vals))
        reach_rows.append({"param": key, "policy": pol, "kind": kind, "swept": key in swept,
                           "values": ", ".join(_short(v) for v in vals),
                           "measure_name": _MEASURES[kind], **got})
        if not got["reached"] and key not in swept:
            flags.append(f"unreached: {key} = {_short(vals[0])} (not swept): {got['reason']}")
    reach = pd.DataFrame(reach_rows, columns=[
        "param", "policy", "kind", "swept", "values", "measure_name", "measure", "reached",
        "reason"])
    reach_by_key = {r["param"]: r for r in reach_rows}
    tick(0.3)

    param_rows = []
    if evaluator is not None:
        # the probe replays take nearly all of the time: a phase of their own,
        # counted in replicates, so the time left is measured on them alone
        n_points = len(_probe_sets(spec))
        phased = hasattr(progress, "phase")
        if phased and pooled is None:
            progress.phase(f"probe replays ({n_points} points as arms of one replay per "
                           f"replicate)", units=len(reps), unit="replicate")

        def step_done(step: int) -> None:
            frac = step / len(reps)
            progress(frac) if phased else tick(0.3 + 0.7 * frac)
        probed = _probe(evaluator, spec, reps, step_done, outs=pooled, keep_queries=replays)
        for p in spec.params:
            pts = p.probe_points()
            vals = probed[p.key]
            sigs, tier, structural = param_signals(p.key, exp)
            pol = p.key.split(".")[1] if p.key.startswith("policies.") else None
            const = [s for s in sigs if constant(s, pol)]
            tier_missing = ""
            if tier is not None and pol in tiers and tiers[pol].get(tier, 0.0) == 0.0:
                tier_missing = f"no scored note is in the {tier} tier"
            rch = reach_by_key.get(p.key)
            for j, (o, direction) in enumerate(zip(spec.objectives, spec.directions)):
                lab = o.label
                ys = np.array([v[0][j] for v in vals], dtype=np.float64)
                fin = ys[np.isfinite(ys)]
                spread = float(np.ptp(fin)) if fin.size else math.nan
                scale = float(np.max(np.abs(fin))) if fin.size else math.nan
                moves = bool(fin.size and spread > _MOVE_RTOL * max(1.0, scale))
                eff = _effect([v[1][lab] for v in vals], direction, metric=o.metric,
                              queries=[v[2].get(lab) for v in vals] if replays else None)
                reasons = []
                if structural:
                    reasons.append(structural)
                for s in const:
                    reasons.append(_why_constant(s, signals, pol))
                if tier_missing:
                    reasons.append(tier_missing)
                significant = moves and not eff["within_noise"]
                note = ""
                if rch is not None and not rch["reached"]:
                    if significant:
                        # the measured effect wins: the reach rule is a
                        # heuristic that can only explain a null effect
                        note = (f"testable by its significant effect, although the reach "
                                f"rule is not met ({rch['reason']})")
                    elif rch["reason"] not in reasons:
                        reasons.append(f"{rch['reason']}, so its effect is nil")
                if not moves:
                    reasons.append(f"{lab} does not move across {pts[0]!r} .. {pts[-1]!r}")
                elif eff["within_noise"]:
                    reasons.append(_noise_text(lab, pts, eff))
                if significant and reasons:
                    # a significant effect is never called untestable; what the
                    # other rules say is kept as a note on the estimate
                    note = "; ".join([note] * bool(note) + [
                        f"testable by its significant effect, although: {'; '.join(reasons)}"])
                    reasons = []
                testable = not reasons
                param_rows.append({
                    "param": p.key, "objective": lab, "signals": ",".join(sigs),
                    "points": ", ".join(_short(x) for x in pts),
                    "values": ", ".join(f"{y:.4g}" for y in ys),
                    "spread": spread,
                    "relative_spread": spread / scale if scale else math.nan,
                    "moves": moves, "signal_varies": not const and not tier_missing,
                    "replicates": eff["n_replicates"],
                    "best": _short(pts[eff["best"]]) if eff["best"] >= 0 else "",
                    "worst": _short(pts[eff["worst"]]) if eff["worst"] >= 0 else "",
                    "effect": eff["effect"], "effect_lo": eff["effect_lo"],
                    "effect_hi": eff["effect_hi"], "ci_over": eff["ci_over"],
                    "within_noise": eff["within_noise"],
                    "regime": rch["kind"] if rch else "",
                    "reach": rch["measure"] if rch else math.nan,
                    "reached": bool(rch["reached"]) if rch else True,
                    "testable": testable, "reason": "; ".join(reasons), "note": note})
                if not testable:
                    flags.append(f"untestable: {p.key} ({lab}): {'; '.join(reasons)}")
                elif note:
                    flags.append(f"note: {p.key} ({lab}): {note}")
    params_df = pd.DataFrame(param_rows, columns=PARAM_COLUMNS)
    if not param_rows or pooled is not None:
        tick(1.0)
    info = []
    if isinstance(exp.workload, StreamSource):
        info.append(f"(stream replayed from {exp.workload.path})")
    return AuditReport(experiment=exp.name, replicate=replicate, n_queries=len(rows),
                       n_notes=len(notes), signals=signals, params=params_df, flags=flags,
                       tiers=tiers, notes=info, reach=reach, replicates=replicates,
                       replays=replays)


#: What ``measure`` is, per regime.
_MEASURES = {"floor": "least (recency - floor) / (1 - floor)",
             "promotion": "largest use count",
             "eviction": "largest share of scored notes evicted"}

#: Columns of :attr:`AuditReport.params`.
PARAM_COLUMNS = ["param", "objective", "signals", "points", "values", "spread",
                 "relative_spread", "moves", "signal_varies", "replicates", "best", "worst",
                 "effect", "effect_lo", "effect_hi", "ci_over", "within_noise", "regime", "reach",
                 "reached", "testable", "reason", "note"]


def _noise_text(lab: str, pts: list, eff: dict) -> str:
    if eff["ci_over"] == "stream" and eff["best"] >= 0:
        return (f"effect not measurable: {lab} is measured once per run and the replicates "
                f"replay one stream, so {_short(pts[eff['best']])} vs "
                f"{_short(pts[eff['worst']])} (differs by {eff['effect']:.3g}) has no interval")
    if eff["best"] < 0 or not np.isfinite(eff["effect_lo"]):
        return (f"effect within noise: {lab} cannot be compared across replicates "
                f"({eff['n_replicates']} with finite values)")
    over = (f"the stream's {eff['n_queries']} queries (its replays folded)"
            if eff["ci_over"] == "queries" else f"{eff['n_replicates']} replicates")
    return (f"effect within noise: {lab} of {_short(pts[eff['best']])} vs "
            f"{_short(pts[eff['worst']])} differs by {eff['effect']:.3g}, 95% CI "
            f"[{eff['effect_lo']:.3g}, {eff['effect_hi']:.3g}] over {over} includes 0")


def _value_text(r) -> str:
    if r["pairs"] == 0:
        return "no query scores any note"
    if r["min"] == r["max"]:
        return f"always {r['min']:g}"
    return f"from {r['min']:g} to {r['max']:g} across queries, never within one"


def _why_constant(signal: str, signals: pd.DataFrame, policy: str | None) -> str:
    sub = signals[signals["signal"] == signal]
    if signal in DYNAMIC and policy in set(sub["policy"]):
        sub = sub[sub["policy"] == policy]
    r = sub.iloc[0]
    what = {"age": "age", "recall_count": "recall count", "distinct_actors":
            "number of distinct actors (max(n, 1))", "tokens": "size in tokens",
            "importance": "importance", "salience": "salience"}[signal]
    return f"every note a query scores has the same {what} ({_value_text(r)})"


def _short(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)
