"""Benchmark the packers: time per query, and the DP against HiGHS (MILP).

A script, not a test::

    python benchmarks/bench_packers.py            # full tables
    python benchmarks/bench_packers.py --quick    # smaller batches, one repeat

Part 1 times every registered packer for C = 50, 200 and 1,000 candidates at
budgets of 1,500 and 16,000 tokens. Token sizes are heavy-tailed (lognormal,
median 150 tokens, sigma 1.2, clipped to 8..4,000 as in DESIGN.md section 2);
values are scores in (0, 1) sorted best first, as the engine passes them.

Part 2 compares the exact DP with ``scipy.optimize.milp`` (HiGHS) on single
queries at large C and large budgets, where the budget binds (total tokens of
the candidates about 3x the budget); it is the measurement behind
``Exact.milp_budget`` (the ``method = "auto"`` rule). Both must agree on the
optimal value.

Times are the best of ``--repeat`` runs, per query, in milliseconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memsim.policies import REGISTRY  # noqa: E402
from memsim.core.knapsack import dp_select, milp_select  # noqa: E402
from memsim.policies.packing import Exact  # noqa: E402


def make_batch(rng: np.random.Generator, q: int, c: int):
    tokens = np.clip(np.round(rng.lognormal(np.log(150.0), 1.2, (q, c))), 8, 4000)
    values = -np.sort(-rng.uniform(0.05, 1.0, (q, c)), axis=1)
    return values, tokens.astype(np.int64), np.ones((q, c), dtype=bool)


def best_time(fn, repeat: int) -> float:
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def part1(rng, quick: bool, repeat: int) -> None:
    names = sorted(REGISTRY["packer"])
    print("Part 1: packer time per query (ms); Q queries per batch; "
          "value relative to exact in brackets")
    head = f"{'C':>5} {'budget':>7} {'Q':>4} " + " ".join(f"{n:>20}" for n in names)
    print(head)
    print("-" * len(head))
    for c in (50, 200, 1000):
        for budget in (1500, 16000):
            q = {50: 64, 200: 16, 1000: 4}[c]
            if quick:
                q = max(q // 4, 1)
            values, tokens, valid = make_batch(rng, q, c)
            b = np.full(q, budget, dtype=np.int64)
            got = {}
            cells = []
            for name in names:
                packer = REGISTRY["packer"][name]()
                packed = packer.pack(values, tokens, valid, b)
                assert (np.where(packed, tokens, 0).sum(axis=1) <= b).all(), name
                got[name] = np.where(packed, values, 0.0).sum(axis=1)
                dt = best_time(lambda p=packer: p.pack(values, tokens, valid, b), repeat) / q  # noqa: B023
                cells.append(dt)
            ex = got["exact"]
            row = f"{c:>5} {budget:>7} {q:>4} "
            row += " ".join(f"{dt * 1e3:>10.3f} [{np.mean(got[n] / ex):5.3f}]  "
                            for n, dt in zip(names, cells))
            print(row)
    print()


def part2(rng, quick: bool, repeat: int) -> None:
    print("Part 2: exact DP vs MILP (HiGHS), one query, total tokens ~3x budget (ms)")
    head = f"{'C':>5} {'budget':>9} {'DP cells':>10} {'DP':>10} {'MILP':>10} {'|dV|':>9} {'auto uses':>9}"
    print(head)
    print("-" * len(head))
    cases = [(50, 16_000), (50, 64_000), (50, 256_000), (50, 1_000_000),
             (200, 16_000), (200, 64_000), (200, 256_000),
             (1000, 16_000), (1000, 64_000), (1000, 256_000)]
    if quick:
        cases = [(50, 16_000), (50, 256_000), (1000, 16_000)]
    exact = Exact()
    for c, budget in cases:
        values, tokens, _ = make_batch(rng, 1, c)
        v, t = values[0], tokens[0].astype(np.float64)
        t = np.maximum(1, np.round(t * (3.0 * budget / t.sum()))).astype(np.int64)
        g = int(np.gcd.reduce(t))
        t_g, cap = t // g, budget // g
        cells = c * (cap + 1)
        dp_ms, dp_val = float("nan"), float("nan")
        if cells <= 2**28:  # 256 MiB of table: beyond that the DP is not an option
            dp_ms = best_time(lambda: dp_select(v, t_g, cap), repeat) * 1e3  # noqa: B023
            dp_val = v[dp_select(v, t_g, cap)].sum()
        mi_ms = best_time(lambda: milp_select(v, t_g, cap, 60.0), repeat) * 1e3  # noqa: B023
        pick = milp_select(v, t_g, cap, 60.0)
        mi_val = v[pick].sum() if pick is not None else float("nan")
        auto = "milp" if cap > exact.milp_budget else (
            "dp" if exact.bucket_width(c, cap) == 1 else "dp/bucket")
        print(f"{c:>5} {budget:>9} {cells:>10.2e} {dp_ms:>10.2f} {mi_ms:>10.2f} "
              f"{abs(dp_val - mi_val):>9.1e} {auto:>9}")
    print()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller batches, fewer cases")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--part", choices=("1", "2", "all"), default="all")
    args = ap.parse_args(argv)
    repeat = 1 if args.quick else args.repeat
    rng = np.random.default_rng(args.seed)
    if args.part in ("1", "all"):
        part1(rng, args.quick, repeat)
    if args.part in ("2", "all"):
        part2(rng, args.quick, repeat)


if __name__ == "__main__":
    main()
