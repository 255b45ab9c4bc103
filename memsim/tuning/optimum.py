"""``memsim optimum``: the best parameters that follow from a planted workload.

A sweep searches; on a synthetic workload whose truth has a known law the
optimum of some policy families can instead be *derived* (:mod:`memsim.data.planted`).
:func:`optimum` answers only where it can derive, and says why otherwise.

The law
-------
On a workload whose age prior is one exponential of half-life ``H``
(:func:`memsim.data.planted.known_optimum`) the planted posterior ranks by
``beta* cos - age ln 2 / H`` (``beta*``: the linear-discriminant slope of the
within-query similarity law). The ``calibrated-product`` ranker with a
``half-life`` decay scores ``exp(beta (cos - 1)) * 0.5 ** (age / h)``, so:

1. *Ranking.* Its ranking is the posterior's when ``beta * h = beta* * H``:
   only the product is identifiable from a ranking.
2. *Rank-only packers* (:data:`RANK_ONLY_PACKERS`: ``top-k-cutoff`` and
   ``skip-fill`` read the candidates' order and sizes, never their scores;
   ``drop-middle`` reads neither, only the notes' ages;
   the built-in orderers read ranks only) pack the same notes for every pair
   with the same ``beta * h``. For them the rule is applied: the optimal
   half-life at the policy's own ``beta`` is ``H * beta* / beta``.
3. *Value packers* (``greedy``, ``greedy-swap``, ``exact``, and any relevance
   cut) weigh score magnitudes against tokens, so pairs with one ``beta * h``
   pack differently (on a planted world (12.2, 140 d) lost 10% of utility to
   (24.4, 70 d) under ``greedy``). Only the pair ``(beta*, H)`` makes the
   score proportional to the posterior odds, which is what a value packer
   needs; no half-life is derived at another ``beta``. With ``simulate`` the
   pair is *checked*: the policy is simulated at ``(beta*, H)`` and at its
   neighbours (``h`` halved and doubled; ``beta`` and ``h`` traded at one
   product), and the answer says whether a neighbour beats it beyond noise
   (paired 95% t-interval over queries). Without the check the value-packer
   answer is reported as not derivable.

The family must also keep the law's other assumptions: a cosine retriever
without a prefilter, age from creation, no stickiness, no breadth term, no
eviction. Otherwise the answer is "not derivable" with the reason.

The ``bayes`` twin
------------------
Beside each policy, :func:`optimum` simulates the ``bayes`` ranker (the
planted posterior expected gain) with the policy's own packer, orderer,
candidates, retriever, retention and feedback, and separately with the best
of :data:`BAYES_PACKERS`. ``bayes`` reads hidden labels (each note's class,
who may ask about it): an upper bound, not achievable headroom
(:data:`BAYES_LABEL`, printed wherever it is shown).

``utility_share`` is the sum of utility over the sum of the oracle's (queries
with a positive oracle).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd

from memsim.runs.config import Experiment
from memsim.core.errors import ConfigError
from memsim.data.planted import Optimum, known_optimum
from memsim.policies import Policy
from memsim.policies.base import REGISTRY
from memsim.policies.breadth import NoBreadth
from memsim.policies.rank import Bayes
from memsim.policies.stickiness import NoStickiness
from memsim.runs.runner import simulate_experiment
from memsim.reporting.stats import mean_ci, utility_share
from memsim.data.workload import SyntheticWorkload

__all__ = ["optimum", "OptimumReport", "family_of", "law_breaks", "RANK_ONLY_PACKERS",
           "BAYES_PACKERS", "BAYES_LABEL"]

#: The family with a derived optimum.
FAMILY = "calibrated-product/half-life"
#: Packers whose pack depends on the candidates' order and sizes only, not on
#: their scores (``tests/test_optimum.py`` checks it on every registered
#: packer): for them only ``beta * h`` matters.
RANK_ONLY_PACKERS = ("top-k-cutoff", "skip-fill", "drop-middle")
#: Packers the ``bayes`` twin is tried with to find its best packer.
BAYES_PACKERS = ("top-k-cutoff", "skip-fill", "greedy", "greedy-swap", "exact")
#: What every table that shows ``bayes`` says of it.
BAYES_LABEL = ("bayes reads hidden labels: a reference near the best ranking, not achievable "
               "headroom")

#: Arm-name separators (not valid in a policy name of a TOML table key).
_SEP = "~"


def family_of(policy: Policy) -> str | None:
    """``"calibrated-product/half-life"`` when the policy's ranker and decay
    are the family with a derived optimum, else None."""
    if policy.ranker.name == "calibrated-product" and policy.decay.name == "half-life":
        return FAMILY
    return None


def law_breaks(policy: Policy) -> str:
    """Why the planted law does not apply to this member of the family ("" when it does)."""
    if policy.retriever.name != "cosine":
        return f"retriever {policy.retriever.name!r}: the law is stated on cosine similarity"
    if getattr(policy.retriever, "prefilter", 0):
        return "a nearest-M prefilter: candidates are chosen by similarity alone first"
    if getattr(policy.decay, "clock", "created") != "created":
        return (f"decay clock {policy.decay.clock!r}: the planted age prior counts age "
                "from creation")
    if policy.stickiness.name != "none":
        return f"stickiness {policy.stickiness.name!r} changes the ages the decay reads"
    if policy.breadth.name != "none":
        return f"breadth {policy.breadth.name!r} multiplies the score"
    if policy.retention.evicts:
        return f"retention {policy.retention.name!r} evicts notes"
    return ""


def _cut_of(policy: Policy) -> float:
    return float(getattr(policy.packer, "min_relative_score", 0.0) or 0.0)


@dataclass
class OptimumReport:
    """What :func:`optimum` found: one row per policy (:attr:`table`).

    Columns say what they are: ``current.beta``, ``current.half_life_days``
    (the policy's own values), ``optimum.beta``, ``optimum.half_life_days``
    (the derived pair), ``optimum.half_life_days_at_current_beta`` (rank-only
    packers only), ``status`` (``derived``, ``checked``, ``not confirmed``,
    ``not derivable``), ``rule`` and ``reason`` in words, the simulated
    ``utility.*`` and ``utility_share.*`` (``current``, ``optimum``,
    ``bayes_own_packer``, ``bayes_best_packer``) and ``bayes_best_packer``;
    ``check`` holds the neighbours' simulated utilities of a value packer.
    """

    table: pd.DataFrame
    workload: str

    def to_text(self) -> str:
        lines = [f"workload: {self.workload}"]
        for r in self.table.to_dict(orient="records"):
            lines.append(f"\n{r['policy']} (packer {r['packer']})")
            cur = (f"beta = {_beta(r['current.beta'])}, half_life_days = "
                   f"{_days(r['current.half_life_days'])}") if r["family"] else ""
            if r["status"] in ("derived", "checked", "not confirmed"):
                lines.append(f"  optimum ({r['family']}, {r['status']}): beta = "
                             f"{_beta(r['optimum.beta'])}, half_life_days = "
                             f"{_days(r['optimum.half_life_days'])} (derived from the planted "
                             "truth, not searched)")
                lines.append(f"  current: {cur}")
                lines.append(f"  rule: {r['rule']}")
                if r["status"] == "derived":
                    lines.append(f"  at the current beta = {_beta(r['current.beta'])} the optimal "
                                 "half-life is "
                                 f"{_days(r['optimum.half_life_days_at_current_beta'])}")
                if r["check"]:
                    lines.append("  check by simulation (utility; paired 95% CI of the "
                                 "difference to the derived pair):")
                    for c in r["check"]:
                        lines.append(f"    beta {_beta(c['beta'])}, h {_days(c['half_life_days'])}: "
                                     f"{c['utility']:.4f} ({c['label']}"
                                     + ("" if c["label"] == "derived" else
                                        f"; {c['diff']:+.4f} [{c['diff_lo']:+.4f}, "
                                        f"{c['diff_hi']:+.4f}]") + ")")
                if r["reason"]:
                    lines.append(f"  {r['reason']}")
            else:
                if cur:
                    lines.append(f"  current: {cur}")
                lines.append(f"  not derivable: {r['reason']}")
            if np.isfinite(r["utility.current"]):
                opt = (f"; at the optimum {r['utility.optimum']:.4f}"
                       if np.isfinite(r["utility.optimum"]) else "")
                lines.append(f"  utility {r['utility.current']:.4f} (share "
                             f"{r['utility_share.current']:.3f}){opt}")
                lines.append(f"  bayes, own packer {r['utility.bayes_own_packer']:.4f} (share "
                             f"{r['utility_share.bayes_own_packer']:.3f}); bayes, best packer "
                             f"({r['bayes_best_packer']}) {r['utility.bayes_best_packer']:.4f} "
                             f"(share {r['utility_share.bayes_best_packer']:.3f})")
                lines.append(f"  ({BAYES_LABEL})")
        return "\n".join(lines)

    def to_json(self) -> str:
        """Nested JSON: ``policies[i].current.beta``, ``policies[i].optimum.beta``, ...

        Strict JSON (``docs/contracts/json.md``): NaN and infinities are
        ``null`` (an infinite half-life, no decay, too: the text says
        ``inf (no decay)``)."""
        out = []
        for row in self.table.to_dict(orient="records"):
            item: dict[str, Any] = {}
            for key, value in row.items():
                node = item
                *parents, leaf = key.split(".")
                for p in parents:
                    node = node.setdefault(p, {})
                node[leaf] = _clean(value)
            item["bayes_label"] = BAYES_LABEL
            out.append(item)
        return json.dumps({"workload": self.workload, "policies": out}, indent=2,
                          allow_nan=False)


def _clean(v: Any) -> Any:
    """``v`` as strict JSON holds it: NaN and infinities as None, numpy
    scalars as Python ones."""
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _days(h: float) -> str:
    # a tenth of a day; 3 significant digits below 0.1 or beyond a million
    # years (1e300 days is not three hundred digits, 0.004 is not 0.0)
    if math.isinf(h):
        return "inf (no decay)"
    if math.isnan(h):
        return "n/a"
    return f"{h:.1f}" if h == 0 or 0.1 <= abs(h) < 1e8 else f"{h:.3g}"


def _beta(b: float) -> str:
    # two decimals; 3 significant digits where they would show 0.00 (a beta
    # the config refuses) or hundreds of digits
    return f"{b:.2f}" if b == 0 or 0.01 <= abs(b) < 1e8 or math.isnan(b) else f"{b:.3g}"


def _with(policy: Policy, beta: float, h: float) -> Policy:
    # an infinite half-life (the planted classes never go stale) is no decay,
    # which a half-life decay cannot hold: recency 1 at every age
    decay = (REGISTRY["decay"]["none"](clock=policy.decay.clock) if math.isinf(h)
             else dataclasses.replace(policy.decay, half_life_days=h))
    return dataclasses.replace(policy, ranker=dataclasses.replace(policy.ranker, beta=beta),
                               decay=decay)


def _neighbours(beta: float, h: float) -> list[tuple[str, float, float]]:
    """The derived pair and its neighbours (label, beta, h). With no decay
    (h infinite) only beta has neighbours: a finite h is a decay the planted
    classes do not have, and halving infinity leaves it."""
    if math.isinf(h):
        return [("derived", beta, h), ("beta halved", beta / 2, h), ("beta doubled", beta * 2, h)]
    return [("derived", beta, h), ("h halved", beta, h / 2), ("h doubled", beta, h * 2),
            ("beta halved, h doubled (same beta x h)", beta / 2, h * 2),
            ("beta doubled, h halved (same beta x h)", beta * 2, h / 2)]


def _row(name: str, policy: Policy, known: Optimum, simulate: bool) -> dict[str, Any]:
    fam = family_of(policy)
    packer = policy.packer.name
    rank_only = packer in RANK_ONLY_PACKERS and _cut_of(policy) == 0.0
    row: dict[str, Any] = {
        "policy": name, "family": fam or "", "packer": packer,
        "packer_rank_only": bool(rank_only), "status": "not derivable", "rule": "",
        "reason": "",
        "current.beta": float(policy.ranker.beta) if fam else math.nan,
        "current.half_life_days": float(policy.decay.half_life_days) if fam else math.nan,
        "optimum.beta": math.nan, "optimum.half_life_days": math.nan,
        "optimum.half_life_days_at_current_beta": math.nan,
    }
    if fam is None:
        row["reason"] = (f"ranker {policy.ranker.name!r} with decay {policy.decay.name!r}: the "
                         "optimum is derived only for calibrated-product with half-life, whose "
                         "ranking has the planted posterior's form")
        return row
    why = law_breaks(policy) or ("" if known.solvable else known.reason)
    if why:
        row["reason"] = why
        return row
    row["optimum.beta"], row["optimum.half_life_days"] = known.beta, known.half_life_days
    if rank_only:
        row["status"] = "derived"
        row["rule"] = (f"packer {packer!r} reads only the ranking, so only beta x h matters: "
                       "h = H * beta_opt / beta")
        row["optimum.half_life_days_at_current_beta"] = (
            known.half_life_days * known.beta / float(policy.ranker.beta))
        return row
    what = (f"packer {packer!r}" if packer not in RANK_ONLY_PACKERS
            else f"packer {packer!r} with a relevance cut")
    row["rule"] = (f"{what} weighs score magnitudes, so beta x h is not the only thing that "
                   "matters: only the pair (beta_opt, H), whose score is proportional to the "
                   "posterior odds, is derived; no half-life is derived at another beta")
    if simulate:
        row["status"] = "checked"  # confirmed or not by _simulate
    else:
        row["status"] = "not derivable"
        row["reason"] = (f"{what}: the derived pair is not checked without simulation "
                         "(drop --no-simulate)")
        row["optimum.beta"] = row["optimum.half_life_days"] = math.nan
    return row


def optimum(exp: Experiment, *, simulate: bool = True,
            progress: Callable[[float], None] | None = None) -> OptimumReport:
    """Derive each policy's optimum on the experiment's workload (module docstring).

    Parameters
    ----------
    exp : Experiment
        Its workload must be synthetic (a stream on disk has no planted model).
    simulate : bool
        Simulate each policy, the derived pair, a value packer's check and
        the ``bayes`` twins on the experiment's replicates (the ``utility.*``
        columns are NaN when False, and a value packer's answer is then not
        derivable).
    progress : callable, optional
        Called with the share of the simulations done (0..1), as
        :func:`~memsim.runs.runner.simulate_experiment` reports it.

    Raises
    ------
    ConfigError
        When the workload is a stream on disk; with ``simulate``, when the
        workload yields no query in any replicate (nothing to measure).
    """
    exp = exp.single("memsim optimum")
    if not isinstance(exp.workload, SyntheticWorkload):
        raise ConfigError("workload: memsim optimum needs a synthetic workload (a stream on disk "
                          "has no planted model)")
    known = known_optimum(exp.workload)
    rows = [_row(name, policy, known, simulate) for name, policy in exp.policies.items()]
    table = pd.DataFrame(rows)
    for col in ("utility.current", "utility_share.current", "utility.optimum",
                "utility_share.optimum", "utility.bayes_own_packer",
                "utility_share.bayes_own_packer", "utility.bayes_best_packer",
                "utility_share.bayes_best_packer"):
        table[col] = math.nan
    table["bayes_best_packer"] = ""
    table["check"] = [[] for _ in range(len(table))]
    if simulate and len(table):
        _simulate(exp, table, progress)
    label = ("synthetic, planted law: " + (f"half-life {_days(known.half_life_days)}"
                                           if known.solvable else known.reason))
    return OptimumReport(table=table, workload=label)


def _bayes_twin(policy: Policy, packer: Any = None) -> Policy:
    """The policy with the planted posterior as its ranker: what it reads
    (retriever, retention, feedback) and how it packs are the policy's; the
    score is the posterior alone (no breadth factor, no stickiness)."""
    return dataclasses.replace(policy, ranker=Bayes(), breadth=NoBreadth(),
                               stickiness=NoStickiness(),
                               packer=policy.packer if packer is None else packer)


def _simulate(exp: Experiment, table: pd.DataFrame,
              progress: Callable[[float], None] | None = None) -> None:
    """Fill the utility columns and the value packers' checks."""
    arms: dict[str, Policy] = {}
    plan: dict[str, dict[str, Any]] = {}
    for r in table.to_dict(orient="records"):
        name = r["policy"]
        policy = exp.policies[name]
        arms[name] = policy
        p: dict[str, Any] = {"bayes": {}}
        if r["status"] in ("derived", "checked"):
            p["optimum"] = f"{name}{_SEP}optimum"
            arms[p["optimum"]] = _with(policy, r["optimum.beta"], r["optimum.half_life_days"])
        if r["status"] == "checked":
            p["check"] = []
            for i, (lab, b, h) in enumerate(_neighbours(r["optimum.beta"],
                                                        r["optimum.half_life_days"])):
                arm = p["optimum"] if lab == "derived" else f"{name}{_SEP}check{i}"
                arms[arm] = _with(policy, b, h)
                p["check"].append((lab, b, h, arm))
        own = _bayes_twin(policy)
        twins = {policy.packer.name: own}
        for kind in BAYES_PACKERS:
            if kind != policy.packer.name:
                twins[kind] = _bayes_twin(policy, REGISTRY["packer"][kind]())
        for kind, twin in twins.items():
            arm = f"{name}{_SEP}bayes{_SEP}{kind}"
            arms[arm] = twin
            p["bayes"][kind] = arm
        plan[name] = p
    run = dataclasses.replace(exp, policies=arms, grid={}, sweep=None)
    q = simulate_experiment(run, progress=progress)["queries"]
    if not len(q):
        # a stream without queries is valid, but no utility can be measured on it
        wl = exp.workload
        raise ConfigError(
            f"workload: queries_per_day = {float(wl.queries_per_day):g} over horizon_days = "
            f"{float(wl.horizon_days):g} yields no query in {exp.settings.replicates} replicate(s): "
            "nothing to measure; raise workload.queries_per_day or workload.horizon_days "
            "(or skip the simulations: --no-simulate)")
    by_arm = {k: v.sort_values(["replicate", "query_id"]) for k, v in q.groupby("policy")}
    for i, name in enumerate(table["policy"]):
        p = plan[name]

        def put(col: str, arm: str, i: int = i) -> None:
            table.at[i, f"utility.{col}"] = float(by_arm[arm]["utility"].mean())
            table.at[i, f"utility_share.{col}"] = utility_share(by_arm[arm])

        put("current", name)
        if "optimum" in p:
            put("optimum", p["optimum"])
        put("bayes_own_packer", p["bayes"][exp.policies[name].packer.name])
        best = max(p["bayes"], key=lambda k: float(by_arm[p["bayes"][k]]["utility"].mean()))
        put("bayes_best_packer", p["bayes"][best])
        table.at[i, "bayes_best_packer"] = best
        if "check" in p:
            ref = by_arm[p["optimum"]]["utility"].to_numpy()
            checks = []
            for lab, b, h, arm in p["check"]:
                u = by_arm[arm]["utility"].to_numpy()
                mean, lo, hi, _ = mean_ci(u - ref)
                checks.append({"label": lab, "beta": b, "half_life_days": h,
                               "utility": float(np.mean(u)), "diff": mean, "diff_lo": lo,
                               "diff_hi": hi})
            table.at[i, "check"] = checks
            beaten = [c for c in checks if c["label"] != "derived" and c["diff_lo"] > 0]
            if beaten:
                top = max(beaten, key=lambda c: c["diff"])
                table.at[i, "status"] = "not confirmed"
                table.at[i, "reason"] = (
                    f"not confirmed: {top['label']} (beta {_beta(top['beta'])}, h "
                    f"{_days(top['half_life_days'])}) beats the derived pair by "
                    f"{top['diff']:+.4f} [{top['diff_lo']:+.4f}, {top['diff_hi']:+.4f}]")
            else:
                table.at[i, "reason"] = ("confirmed: no neighbour beats the derived pair "
                                         "beyond noise")
