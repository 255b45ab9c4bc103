"""Can this workload test these parameters? (seed 000's lesson as a feature)

"A test can only catch a bug its data can express": a benchmark whose every
note has age 0 cannot see a decay bug, one with a single actor cannot see a
breadth weight, one whose notes all have one size cannot tell packers apart.
:func:`audit` measures, for an experiment, whether what its policies rank on
varies where it matters, and whether each swept parameter moves the objective:

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
for queries of later ticks (``feedback_mode = "per-tick"``) or later queries
(``"per-query"``), as in the engine. The engine's cooldown is not replayed,
so counts can be slightly high for policies with one. ``distinct_actors`` is
``max(actors, 1)``, the quantity a breadth term reads (``ln max(n, 1)``: no
actor and one actor weigh the same).

*Parameters.* Every parameter of ``[sweep.params]`` is evaluated at its low,
middle and high value (each choice of a categorical), the others at the
experiment's values, on one replicate, with the sweep's own objective code
(:class:`memsim.sweep.TrialEvaluator`). ``spread`` is how far the objective
moves across the range.

*Flags.* A parameter is untestable when the signal it acts on is constant
within every sampled query (decay rates when every age is 0, breadth weights
with one actor, stickiness when recall counts never vary, packers when every
note has the same size, importance weights when importance is constant, a
per-tier constant for a tier no scored note is in), when the policy ignores
it (a decay under a ranker that does not use recency), or when the objective
does not move at all across its range.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from .config import Experiment, StreamSource
from .errors import ConfigError
from .policies.base import TIER_CODES
from .runner import load_stream_for, simulate_experiment, write_atomic

__all__ = ["AuditReport", "audit", "SIGNALS", "param_signals"]

#: Signals a ranking or retention rule can read, in report order.
SIGNALS = ("age", "recall_count", "distinct_actors", "tokens", "importance", "salience")
#: Signals that depend on the policy's feedback.
DYNAMIC = ("recall_count", "distinct_actors")
_TIER_NAMES = {v: k for k, v in TIER_CODES.items()}
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
        One row per (swept parameter, objective): ``param, objective,
        signals, points, values, spread, relative_spread, moves,
        signal_varies, testable, reason``.
    flags : list of str
        One line per untestable parameter or constant signal.
    tiers : dict
        Policy -> tiers of the scored notes (after promotion).
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
        if len(self.params):
            lines.append("Swept parameters (objective at each probe point, one replicate):")
            show = self.params[["param", "objective", "points", "values", "spread", "moves",
                                "testable"]]
            lines.append(show.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        else:
            lines.append("No [sweep.params]: add a [sweep] table to audit parameters.")
        lines.append("")
        if self.flags:
            lines.append("Flags:")
            lines.extend(f"  {f}" for f in self.flags)
        else:
            lines.append("No flags: every signal varies and every swept parameter moves the "
                         "objective.")
        lines.extend(self.notes)
        return "\n".join(lines)

    def save(self, folder: Path) -> Path:
        """Write ``signals.csv``, ``params.csv`` and ``audit.txt`` to ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / "signals.csv", lambda p: self.signals.to_csv(p, index=False))
        write_atomic(folder / "params.csv", lambda p: self.params.to_csv(p, index=False))
        write_atomic(folder / "audit.txt",
                     lambda p: p.write_text(self.to_text() + "\n", encoding="utf-8"))
        return folder


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


def _uses(exp: Experiment, stream, replicate: int, policies: list[str],
          rows: np.ndarray, scored: list[np.ndarray]) -> tuple[dict, dict]:
    """Recall counts, distinct actors and tiers of the scored notes, per policy."""
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

    need_sim = [p for p in policies if exp.policies[p].feedback.touch != "none"]
    rankings = None
    if need_sim:
        sim = dataclasses.replace(exp, policies={p: exp.policies[p] for p in need_sim},
                                  sim=dataclasses.replace(exp.sim, save_rankings=True))
        if exp.settings.budgets:
            sim = dataclasses.replace(sim, settings=dataclasses.replace(
                exp.settings, budgets=exp.settings.budgets[:1]))
        rankings = simulate_experiment(sim, replicates=[replicate],
                                       streams={replicate: stream})["rankings"]
    tier0 = notes["tier"].astype(str).map(lambda x: TIER_CODES.get(x, TIER_CODES["task"])
                                          ).to_numpy(np.int64)
    per_tick = exp.sim.feedback_mode == "per-tick"
    tick = exp.sim.tick_days
    out: dict[str, dict[str, list[np.ndarray]]] = {}
    tiers: dict[str, dict[str, float]] = {}
    for pol in policies:
        fb = exp.policies[pol].feedback
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
        rows_all = np.concatenate(ev_rows).astype(np.int64)
        act_all = np.concatenate(ev_actor).astype(np.int64)
        order = np.argsort(t_all, kind="stable")
        t_all, rows_all, act_all = t_all[order], rows_all[order], act_all[order]
        counts = np.zeros(n, dtype=np.int64)
        seen = np.zeros((n, max(1, len(actors))), dtype=bool)
        done = 0
        recall_vals, actor_vals = [], []
        tier_counts = np.zeros(len(TIER_CODES), dtype=np.int64)
        for i in np.argsort(qt[rows], kind="stable"):
            tq = qt[rows[i]]
            upto = int(np.searchsorted(t_all, tq, side="right")) if per_tick else int(
                np.searchsorted(t_all, tq, side="left"))
            if upto > done:
                np.add.at(counts, rows_all[done:upto], 1)
                seen[rows_all[done:upto], act_all[done:upto]] = True
                done = upto
            idx = scored[i]
            recall_vals.append(counts[idx].astype(np.float64))
            actor_vals.append(np.maximum(seen[idx].sum(axis=1), 1).astype(np.float64))
            tier = tier0[idx].copy()
            if fb.promote_after > 0:
                tier[counts[idx] >= fb.promote_after] = TIER_CODES["longterm"]
            tier_counts += np.bincount(tier, minlength=len(TIER_CODES))
        out[pol] = {"recall_count": recall_vals, "distinct_actors": actor_vals}
        total = tier_counts.sum()
        tiers[pol] = {_TIER_NAMES[c]: (tier_counts[c] / total if total else 0.0)
                      for c in range(len(TIER_CODES))}
    return out, tiers


def audit(exp: Experiment, *, sweep: dict | Any | None = None, replicate: int = 0,
          max_queries: int = 300, params: bool = True,
          progress: Callable[[float], None] | None = None) -> AuditReport:
    """Audit an experiment: signal spreads and swept-parameter sensitivity.

    Parameters
    ----------
    exp : Experiment
    sweep : dict or SweepSpec, optional
        The search space (default: the experiment's ``[sweep]`` table; none
        means signals only).
    replicate : int
        Replicate whose stream is audited (and on which parameters are
        evaluated).
    max_queries : int
        Queries sampled, evenly in time, for the signal spreads.
    params : bool
        Evaluate the swept parameters (3 simulations of one replicate each).
    progress : callable, optional
        Called with the fraction done.

    Returns
    -------
    AuditReport
    """
    from .sweep import SweepSpec, TrialEvaluator

    if not isinstance(replicate, int) or replicate < 0:
        raise ConfigError(f"--replicate: expected an integer >= 0, got {replicate!r}")
    if not isinstance(max_queries, int) or max_queries < 1:
        raise ConfigError(f"--queries: expected an integer >= 1, got {max_queries!r}")
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
    dynamic, tiers = _uses(exp, stream, replicate, policies, rows, scored)
    tick(0.3)

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

    param_rows = []
    if spec is not None and params:
        evaluator = TrialEvaluator(exp, spec)
        n_pts = sum(len(p.probe_points()) for p in spec.params)
        done = 0
        for p in spec.params:
            pts = p.probe_points()
            vals = []
            for v in pts:
                vals.append(evaluator.evaluate({p.key: v}, replicates=[replicate])[0])
                done += 1
                tick(0.3 + 0.7 * done / n_pts)
            sigs, tier, structural = param_signals(p.key, exp)
            pol = p.key.split(".")[1] if p.key.startswith("policies.") else None
            const = [s for s in sigs if constant(s, pol)]
            tier_missing = ""
            if tier is not None and pol in tiers and tiers[pol].get(tier, 0.0) == 0.0:
                tier_missing = f"no scored note is in the {tier} tier"
            for j, lab in enumerate(spec.labels):
                ys = np.array([v[j] for v in vals], dtype=np.float64)
                fin = ys[np.isfinite(ys)]
                spread = float(np.ptp(fin)) if fin.size else math.nan
                scale = float(np.max(np.abs(fin))) if fin.size else math.nan
                moves = bool(fin.size and spread > _MOVE_RTOL * max(1.0, scale))
                reasons = []
                if structural:
                    reasons.append(structural)
                for s in const:
                    reasons.append(_why_constant(s, signals, pol))
                if tier_missing:
                    reasons.append(tier_missing)
                if not moves:
                    reasons.append(f"{lab} does not move across {pts[0]!r} .. {pts[-1]!r}")
                testable = not reasons
                param_rows.append({
                    "param": p.key, "objective": lab, "signals": ",".join(sigs),
                    "points": ", ".join(_short(x) for x in pts),
                    "values": ", ".join(f"{y:.4g}" for y in ys),
                    "spread": spread,
                    "relative_spread": spread / scale if scale else math.nan,
                    "moves": moves, "signal_varies": not const and not tier_missing,
                    "testable": testable, "reason": "; ".join(reasons)})
                if not testable:
                    flags.append(f"untestable: {p.key} ({lab}): {'; '.join(reasons)}")
    params_df = pd.DataFrame(param_rows, columns=[
        "param", "objective", "signals", "points", "values", "spread", "relative_spread",
        "moves", "signal_varies", "testable", "reason"])
    if not param_rows:
        tick(1.0)
    info = []
    if isinstance(exp.workload, StreamSource):
        info.append(f"(stream replayed from {exp.workload.path})")
    return AuditReport(experiment=exp.name, replicate=replicate, n_queries=len(rows),
                       n_notes=len(notes), signals=signals, params=params_df, flags=flags,
                       tiers=tiers, notes=info)


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
