"""Generative Agents' arms with and without the ``"minmax"`` accelerator.

Run from the repository root::

    python benchmarks/bench_minmax.py                          # 50k (10 days), 200k (3), 1M (1)
    python benchmarks/bench_minmax.py --sizes 50000:10 --arms 1,3,10 --repeat 5

For each ``N:DAYS`` of ``--sizes``, the store of ``benchmarks/bench_engine.py``
(N notes by the end of its year, 50 queries a day) with only the last DAYS
days of queries, replayed in one process through P ``generative-agents``
arms for each P of ``--arms`` (at their own per-query feedback; the arms
differ by their decay factor, ``0.995 ** (1/4 .. 4)``), once with every
accelerator and once with all but ``"minmax"``, alternated ``--repeat``
times after an uncounted warm-up of each: the minimum CPU seconds of each,
every run's in brackets, and the ratio. Where the arms that share a query's
row hold fewer than ``memsim.engine.minmax.MIN_CELLS`` notes between them
(one arm over a small store) the accelerator does not run, and both lines
measure the same path. The host (CPU model, cores, BLAS, load average)
comes first and last, as in ``bench_engine.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_engine as be  # noqa: E402  (the store and the host lines)


def _arms(p: int):
    from memsim.engine import Arm
    from memsim.policies import resolve_policy

    return [Arm(f"arm-{i}", resolve_policy(t, f"policies.arm-{i}"))
            for i, t in enumerate(be.preset_tables("generative-agents", p, None))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="50000:10,200000:3,1000000:1",
                    help="N:DAYS pairs (notes by the end of the year, days of queries)")
    ap.add_argument("--arms", default="1,10", help="numbers of arms")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)

    from threadpoolctl import threadpool_limits

    from memsim.engine import ACCELERATORS, SimSettings, simulate

    host = be.host_info()
    be.print_host(host)
    every = ACCELERATORS
    without = tuple(a for a in ACCELERATORS if a != "minmax")
    settings = SimSettings(candidates=be.CANDIDATES)
    for spec in args.sizes.split(","):
        n, days = spec.split(":")
        stream = be._stream(int(n), float(days))
        print(f"\n{int(n):,} notes, {stream.n_queries} queries ({days} days), CPU seconds:")
        for p in (int(x) for x in args.arms.split(",")):
            arms = _arms(p)
            runs: dict[str, list[float]] = {"without": [], "with": []}
            with threadpool_limits(limits=1, user_api="blas"):
                for acc in (without, every):  # warm-up
                    simulate(stream, arms, settings, np.random.SeedSequence(0),
                             accelerators=acc)
                for _ in range(args.repeat):
                    for key, acc in (("without", without), ("with", every)):
                        t0 = time.process_time()
                        got = simulate(stream, arms, settings, np.random.SeedSequence(0),
                                       accelerators=acc)
                        runs[key].append(time.process_time() - t0)
            answered = sum(a.get("minmax", 0) for a in got.accelerated)
            a, b = min(runs["without"]), min(runs["with"])
            print(f"  {p:3d} arms: without minmax {a:7.3f} "
                  f"[{', '.join(f'{x:.3f}' for x in runs['without'])}]   with {b:7.3f} "
                  f"[{', '.join(f'{x:.3f}' for x in runs['with'])}]   {a / b:5.2f}x "
                  f"({answered} of {p * stream.n_queries} answers by minmax)")
    print(f"\nload average at end: {be._load()} (start {host['load_start']}); "
          f"host {host['cpu_model']}, {host['cores_usable']} cores usable")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
