"""Each policy of an experiment with its own packer and with the best of the five.

    python benchmarks/best_packers.py experiments/presets.toml [--replicates N]

A preset's headline result is decided by its packer as much as by its
ranking (seed 000 is about both). For every policy of the experiment this
simulates the policy as configured (its source's packer, with its parameters,
e.g. ``hivemind``'s relevance cut) and with each other packer kind at its
defaults (``top-k-cutoff``, ``skip-fill``, ``greedy``, ``greedy-swap``,
``exact``; no relevance cut), on the experiment's replicates (or the first
N), and prints per policy: the utility share with the own packer, the best
packer and its utility share, and the paired difference of mean utility per
query (best - own) with a 95% t-interval over queries (paired on replicate
and query). ``experiments/presets.toml`` carries a ``NAME-PACKER`` arm for
every preset whose best packer is not its own, chosen with this script.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import memsim
from memsim.policies.base import REGISTRY
from memsim.runs.runner import simulate_experiment
from memsim.reporting.stats import mean_ci, utility_share

PACKERS = ("top-k-cutoff", "skip-fill", "greedy", "greedy-swap", "exact")


def best_packers(exp, replicates=None):
    """Rows ``(policy, own, own_share, best, best_share, diff, lo, hi)``."""
    # the oracle packs true gains: only its own packer means anything
    policies = {n: p for n, p in exp.policies.items() if not p.ranker.needs_truth}
    arms = {}
    for name, policy in policies.items():
        for kind in PACKERS:
            packer = (policy.packer if kind == policy.packer.name
                      else REGISTRY["packer"][kind]())
            arms[f"{name}~{kind}"] = dataclasses.replace(policy, packer=packer)
    run = dataclasses.replace(exp, policies=arms, grid={}, sweep=None)
    q = simulate_experiment(run, replicates=replicates)["queries"]
    by = {k: v.sort_values(["replicate", "query_id"]) for k, v in q.groupby("policy")}
    rows = []
    for name, policy in policies.items():
        own = policy.packer.name
        shares = {k: utility_share(by[f"{name}~{k}"]) for k in PACKERS}
        best = max(PACKERS, key=lambda k: (shares[k], k == own))
        d = (by[f"{name}~{best}"]["utility"].to_numpy()
             - by[f"{name}~{own}"]["utility"].to_numpy())
        mean, lo, hi, _ = mean_ci(d)
        rows.append((name, own, shares[own], best, shares[best], mean, lo, hi))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("experiment")
    ap.add_argument("--replicates", type=int, default=None)
    args = ap.parse_args(argv)
    exp = memsim.load_experiment(args.experiment)
    reps = None if args.replicates is None else list(range(args.replicates))
    print(f"{'policy':26s} {'own packer':13s} {'share':>6s}  {'best packer':13s} "
          f"{'share':>6s}  utility best - own [95% CI]")
    for name, own, s_own, best, s_best, d, lo, hi in best_packers(exp, reps):
        ci = "" if best == own else f"{d:+.4f} [{lo:+.4f}, {hi:+.4f}]"
        print(f"{name:26s} {own:13s} {s_own:6.3f}  {best:13s} {s_best:6.3f}  {ci}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
