"""``memsim optimum``: the best parameters that follow from a planted workload.

A sweep searches; on a synthetic workload whose truth has a known law the
optimum of some policy families can instead be *derived* (:mod:`memsim.planted`).
For each policy of an experiment, :func:`optimum` reports:

- whether its family has a derived optimum on the experiment's workload: the
  ``calibrated-product`` ranker (``score = exp(beta (cos - 1)) * recency``)
  with ``decay = {kind = "half-life"}``, on a workload whose age prior is one
  exponential (:func:`memsim.planted.known_optimum`; otherwise the reason);
- the optimal ``beta`` (the linear-discriminant slope of the planted
  similarity law) and ``half_life_days`` (the planted half-life ``H``), and,
  since only ``beta * h`` is identifiable from a ranking, the half-life that
  is optimal at the policy's own ``beta``: ``H * beta_opt / beta``;
- the utility of the policy and of the ``bayes`` ranker in its place (the
  planted posterior with the policy's packer and orderer: the best any
  score-based ranking of that policy can do), simulated on the experiment's
  replicates. ``utility_share`` is the sum of utility over the sum of the
  oracle's (queries with a positive oracle).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from memsim.config import Experiment
from memsim.errors import ConfigError
from memsim.planted import known_optimum
from memsim.policies import Policy
from memsim.policies.rank import Bayes
from memsim.runner import simulate_experiment
from memsim.stats import utility_share
from memsim.workload import SyntheticWorkload

__all__ = ["optimum", "OptimumReport", "family_of"]

#: Suffix of the arm that runs a policy with the ``bayes`` ranker.
BAYES_SUFFIX = "~bayes"


def family_of(policy: Policy) -> str | None:
    """``"calibrated-product/half-life"`` when the policy is in the family
    with a derived optimum, else None."""
    if policy.ranker.name == "calibrated-product" and policy.decay.name == "half-life":
        return "calibrated-product/half-life"
    return None


@dataclass
class OptimumReport:
    """What :func:`optimum` found: one row per policy (:attr:`table`)."""

    table: pd.DataFrame
    workload: str

    def to_text(self) -> str:
        lines = [f"workload: {self.workload}"]
        for r in self.table.itertuples(index=False):
            lines.append(f"\n{r.policy}")
            if r.solvable:
                lines.append(f"  optimum ({r.family}): beta = {r.beta_opt:.2f}, "
                             f"half_life_days = {_days(r.half_life_opt)} "
                             "(derived from the planted truth, not searched)")
                lines.append(f"  policy: beta = {r.beta:.2f}, half_life_days = "
                             f"{_days(r.half_life)}; only beta x h is identifiable: at "
                             f"beta = {r.beta:.2f} the optimal half-life is "
                             f"{_days(r.half_life_at_beta)}")
            else:
                lines.append(f"  no derived optimum: {r.reason}")
            if np.isfinite(r.utility):
                lines.append(f"  utility {r.utility:.4f} (share {r.utility_share:.3f}); with the "
                             f"bayes ranker {r.bayes_utility:.4f} (share "
                             f"{r.bayes_utility_share:.3f})")
        return "\n".join(lines)

    def to_json(self) -> str:
        rows = self.table.replace({np.inf: "inf"}).to_dict(orient="records")
        clean = [{k: (None if isinstance(v, float) and math.isnan(v) else v)
                  for k, v in row.items()} for row in rows]
        return json.dumps({"workload": self.workload, "policies": clean}, indent=2)


def _days(h: float) -> str:
    return "inf (no decay)" if math.isinf(h) else ("n/a" if math.isnan(h) else f"{h:.1f}")


def optimum(exp: Experiment, *, simulate: bool = True) -> OptimumReport:
    """Derive each policy's optimum on the experiment's workload (module docstring).

    Parameters
    ----------
    exp : Experiment
        Its workload must be synthetic (a stream on disk has no planted model).
    simulate : bool
        Also simulate each policy and its ``bayes`` twin on the experiment's
        replicates (utility columns; NaN when False).

    Raises
    ------
    ConfigError
        When the workload is a stream on disk.
    """
    if not isinstance(exp.workload, SyntheticWorkload):
        raise ConfigError("workload: memsim optimum needs a synthetic workload (a stream on disk "
                          "has no planted model)")
    known = known_optimum(exp.workload)
    rows = []
    for name, policy in exp.policies.items():
        fam = family_of(policy)
        solvable = fam is not None and known.solvable
        reason = known.reason if fam is not None else (
            f"no derived optimum for ranker {policy.ranker.name!r} with decay "
            f"{policy.decay.name!r} (only calibrated-product with half-life)")
        beta = float(policy.ranker.beta) if fam else math.nan
        h = float(policy.decay.half_life_days) if fam else math.nan
        rows.append({
            "policy": name, "family": fam or "", "solvable": bool(solvable),
            "reason": "" if solvable else reason,
            "beta_opt": known.beta if solvable else math.nan,
            "half_life_opt": known.half_life_days if solvable else math.nan,
            "beta": beta, "half_life": h,
            "half_life_at_beta": (known.half_life_days * known.beta / beta
                                  if solvable else math.nan),
        })
    table = pd.DataFrame(rows)
    for col in ("utility", "utility_share", "bayes_utility", "bayes_utility_share"):
        table[col] = math.nan
    if simulate and len(table):
        _simulate(exp, table)
    label = ("synthetic, planted law: " + (f"half-life {_days(known.half_life_days)}"
                                           if known.solvable else known.reason))
    return OptimumReport(table=table, workload=label)


def _simulate(exp: Experiment, table: pd.DataFrame) -> None:
    """Fill the utility columns: each policy beside its bayes twin."""
    arms = {}
    for name, policy in exp.policies.items():
        arms[name] = policy
        arms[name + BAYES_SUFFIX] = dataclasses.replace(policy, ranker=Bayes())
    run = dataclasses.replace(exp, policies=arms, grid={}, sweep=None)
    q = simulate_experiment(run)["queries"]
    for i, name in enumerate(table["policy"]):
        own, twin = q[q["policy"] == name], q[q["policy"] == name + BAYES_SUFFIX]
        table.loc[i, "utility"] = float(own["utility"].mean())
        table.loc[i, "utility_share"] = utility_share(own)
        table.loc[i, "bayes_utility"] = float(twin["utility"].mean())
        table.loc[i, "bayes_utility_share"] = utility_share(twin)
