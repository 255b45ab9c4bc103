"""The approximate retrievers' maintained indexes against the exact prefilter.

Run from the repository root (needs hnswlib and faiss-cpu: ``pip install -e ".[ann]"``)::

    python benchmarks/bench_ann.py                          # hnsw, 20k and 200k notes
    python benchmarks/bench_ann.py --ef-construction 64     # a cheaper build
    python benchmarks/bench_ann.py --index ivf --sizes 200000,1000000 --days 1
    python benchmarks/bench_ann.py --index ivf --year 1000000  # end to end, ~2 min
    python benchmarks/bench_ann.py --index ivf --year 1000000 --preset hivemind  # per query
    python benchmarks/bench_ann.py --index ivf --year 1000000 --sweep-nprobe 32,16,64

For each size N, a synthetic store that reaches N notes by the end of a year
of queries (50 a day, half of the notes backfilled before the first; the
store of ``benchmarks/bench_engine.py``), generated with only the last
``--days`` days of queries. On each day-batch of those queries, as the
engine takes it (:class:`memsim.engine.batch.Batch`, no eviction):

* **exact**: the engine's exact nearest M (:func:`memsim.engine.prefilter.level_prefilter`
  with ``cosine``), including the batch's dot products it reads;
* **index**: the ``--index`` retriever (``hnsw``, the default, or ``ivf``)
  on the stream's maintained index: the notes created since the last batch
  inserted (its ``index``), then one search per query, filtered to the
  query's live notes (its ``prefilter_mask``).

Printed per size: CPU seconds per query of each (process time, the sum over
the batches, each the fastest of ``--repeat`` timings, divided by their
queries; the index's split into inserting and searching), their ratios, the
CPU of building the index up to the first batch (per note inserted: what a rebuild per batch
would pay for every note, every batch), the overlap of the index's
candidates with the exact ones, a whole year extrapolated (every note of the
store inserted at the build's rate and every query searched, against every
query's exact prefilter at the full size: the index's cost against an upper
bound of the exact one), and the load average before and after: the
machine may be shared, and CPU time is what to compare.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

YEAR = 365.0
QUERIES_PER_DAY = 50.0


def _load() -> str:
    a, b, c = os.getloadavg()
    return f"{a:.2f} {b:.2f} {c:.2f}"


def _stream(n_notes: int, days: float, dim: int, seed: int = 1):
    """The bench_engine store: N notes by the end of the year, queries on its
    last ``days`` days only."""
    from memsim.data.workload import SyntheticWorkload

    total = 2 * YEAR
    w = SyntheticWorkload(horizon_days=days, backfill_days=total - days,
                          notes_per_day=n_notes / total, queries_per_day=QUERIES_PER_DAY,
                          embedding_dim=dim)
    return w.generate(np.random.SeedSequence(seed))


def measure(n_notes: int, days: float, m: int, dim: int, repeat: int = 3,
            kind: str = "hnsw", params: dict | None = None) -> dict:
    """CPU per query of the exact prefilter and of the maintained index."""
    from threadpoolctl import threadpool_limits

    from memsim.engine.batch import Batch, make_batches
    from memsim.engine.context import BatchContext
    from memsim.engine.inputs import _inputs
    from memsim.engine.prefilter import level_prefilter
    from memsim.engine.state import PolicyState
    from memsim.policies.retrieval import HNSW, IVF, Cosine

    t0 = time.perf_counter()
    stream = _stream(n_notes, days, dim)
    inp = _inputs(stream)
    gen_s = time.perf_counter() - t0
    notes = inp.notes
    st = PolicyState(notes, len(inp.actor_names))
    rng = np.random.default_rng(0)
    exact_r = Cosine(prefilter=m)
    ann_r = (HNSW if kind == "hnsw" else IVF)(prefilter=m, **(params or {}))

    def context(rows, t_end):
        batch = Batch(qrows=rows, t=inp.qt[rows], actors=inp.qactor[rows], notes=notes,
                      qemb=inp.qemb[rows], qnorm2=inp.qnorm2[rows], relevance=inp.relevance,
                      namespaces=None if inp.qns is None else inp.qns[rows], t0=t_end)
        return BatchContext(batch, st, rng)

    batches = make_batches(inp.qt, 1.0)
    cpu = {"exact": 0.0, "insert": 0.0, "search": 0.0}
    found = exact_n = queries = 0
    with threadpool_limits(limits=1, user_api="blas"):  # as the engine
        c0 = time.process_time()
        index, _ = ann_r.index(context(*batches[0]))  # the index up to the first batch
        build_s = time.process_time() - c0
        built = index.count
        for rows, t_end in batches:
            ctx = context(rows, t_end)
            c0 = time.process_time()
            ann_r.index(ctx)  # the notes created since the last batch, inserted
            cpu["insert"] += time.process_time() - c0
            best = {"exact": np.inf, "search": np.inf}
            for _ in range(repeat):  # the fastest of a few: the machine may be shared
                ctx = context(rows, t_end)  # a fresh batch: no dot products computed yet
                c0 = time.process_time()
                exact, _ = level_prefilter(ctx, exact_r, st.evicted[ctx.idx])
                best["exact"] = min(best["exact"], time.process_time() - c0)
                ctx = context(rows, t_end)
                mask = ctx.batch.valid & ~st.evicted[ctx.idx][None, :]
                c0 = time.process_time()
                got = ann_r.prefilter_mask(ctx, mask)  # the searches (nothing to insert)
                best["search"] = min(best["search"], time.process_time() - c0)
            cpu["exact"] += best["exact"]
            cpu["search"] += best["search"]
            found += int((got & exact).sum())
            exact_n += int(exact.sum())
            queries += len(rows)
    return {"n_notes": int(stream.n_notes), "queries": queries, "batches": len(batches),
            "gen_s": gen_s, "exact_cpu_q": cpu["exact"] / queries,
            "insert_cpu_q": cpu["insert"] / queries, "search_cpu_q": cpu["search"] / queries,
            "index_cpu_q": (cpu["insert"] + cpu["search"]) / queries, "built": built, "build_cpu_s": build_s,
            "insert_cpu_note": build_s / max(built, 1), "overlap": found / max(exact_n, 1)}


def year_end_to_end(n_notes: int, m: int, dim: int, kind: str, params: dict,
                    preset: str = "similarity-only") -> None:
    """A whole year of the store (every query, 50 a day) replayed by the
    engine, one arm of ``preset`` at a time (its own feedback timing): the
    exact ``cosine`` prefilter of ``m``, then the ``kind`` index of ``m``; CPU and wall
    seconds, nDCG@10, utility and the run's ``prefilter_overlap``."""
    from memsim.engine import Arm, SimSettings, simulate
    from memsim.policies import resolve_policy

    stream = _stream(n_notes, YEAR, dim)
    print(f"whole year: {stream.n_notes} notes, {stream.n_queries} queries, one "
          f"{preset} arm (prefilter = {m}, 50 candidates) at a time")
    cpus = []
    for name, retriever in (("cosine", {"kind": "cosine", "prefilter": m}),
                            (kind, {"kind": kind, "prefilter": m, **params})):
        arm = Arm(name, resolve_policy({"preset": preset, "retriever": retriever},
                                       name))
        c0, w0 = time.process_time(), time.perf_counter()
        res = simulate(stream, [arm], SimSettings(candidates=50), np.random.SeedSequence(0))
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        cpus.append(cpu)
        q = res.queries
        overlap = (f"{res.arms['prefilter_overlap'].mean():.3f}"
                   if "prefilter_overlap" in res.arms else "exact")
        print(f"  {name:<7} {cpu:7.1f} s CPU, {wall:6.1f} s wall; nDCG@10 "
              f"{q['ndcg@10'].mean():.4f}, utility {q['utility'].mean():.4f}, overlap {overlap}")
    print(f"  {kind} / exact CPU: {cpus[1] / cpus[0]:.2f}x")
    print(f"  load average now: {_load()}")


def sweep_nprobe(n_notes: int, m: int, dim: int, params: dict, nprobes: list[int],
                 preset: str = "similarity-only") -> None:
    """A sweep of the ``ivf`` arm's ``nprobe`` over a whole year, one replay
    per value through one :class:`~memsim.engine.ReplayCache` (as ``memsim
    sweep`` replays its trials): the later trials keep the index the first
    built. CPU seconds, nDCG@10 and ``prefilter_overlap`` per trial."""
    from memsim.engine import Arm, ReplayCache, SimSettings, simulate
    from memsim.policies import resolve_policy

    stream = _stream(n_notes, YEAR, dim)
    cache = ReplayCache(4 * 2**30)
    print(f"sweep of nprobe: {stream.n_notes} notes, {stream.n_queries} queries, one {preset} "
          f"arm a trial (prefilter = {m}), one replay cache")
    for nprobe in nprobes:
        retriever = {"kind": "ivf", "prefilter": m, **params, "nprobe": nprobe}
        arm = Arm("ivf", resolve_policy({"preset": preset, "retriever": retriever}, "ivf"))
        c0 = time.process_time()
        res = simulate(stream, [arm], SimSettings(candidates=50), np.random.SeedSequence(0),
                       cache=cache)
        print(f"  nprobe {nprobe:<5} {time.process_time() - c0:7.1f} s CPU; nDCG@10 "
              f"{res.queries['ndcg@10'].mean():.4f}, overlap "
              f"{res.arms['prefilter_overlap'].mean():.3f}")
    print(f"  load average now: {_load()}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="20000,200000", help="note counts, comma-separated")
    ap.add_argument("--days", type=float, default=2.0, help="days of queries timed (50 a day)")
    ap.add_argument("--prefilter", type=int, default=100,
                    help="candidates per query (the retriever's prefilter)")
    ap.add_argument("--index", choices=("hnsw", "ivf"), default="hnsw",
                    help="the approximate retriever measured")
    ap.add_argument("--dim", type=int, default=64, help="embedding dimension")
    ap.add_argument("--ef", type=int, default=50, help="hnsw: the search beam width")
    ap.add_argument("--M", type=int, default=16, help="hnsw: the graph degree")
    ap.add_argument("--ef-construction", type=int, default=200,
                    help="hnsw: the beam width while inserting")
    ap.add_argument("--nlist", type=int, default=1024, help="ivf: lists (centroids)")
    ap.add_argument("--nprobe", type=int, default=32, help="ivf: lists scanned per query")
    ap.add_argument("--train-size", type=int, default=40_000,
                    help="ivf: notes the centroids are trained on")
    ap.add_argument("--repeat", type=int, default=3,
                    help="timings of each batch's exact prefilter and searches (the fastest "
                         "counts; the inserts happen once)")
    ap.add_argument("--preset", default="similarity-only",
                    help="--year: the policy preset replayed (its own feedback timing; "
                         "the presets of real systems update per query)")
    ap.add_argument("--sweep-nprobe", default=None, metavar="LIST",
                    help="with --year and --index ivf: instead, a sweep of these nprobe "
                         "values (comma-separated) through one replay cache")
    ap.add_argument("--year", type=int, default=None, metavar="N",
                    help="instead: a whole year of N notes replayed end to end, the exact "
                         "prefilter against the index")
    args = ap.parse_args(argv)
    params = ({"ef": args.ef, "M": args.M, "ef_construction": args.ef_construction}
              if args.index == "hnsw" else
              {"nlist": args.nlist, "nprobe": args.nprobe, "train_size": args.train_size})
    from memsim.core.machine import cpu_model

    print(f"host: {cpu_model()}, {os.cpu_count()} CPUs; {args.index}: prefilter = "
          f"{args.prefilter}, " + ", ".join(f"{k} = {v}" for k, v in params.items())
          + f", dim = {args.dim}"
          + ("" if args.year else f", {args.days:g} day(s) of queries")
          + f"; load average at start: {_load()}")
    if args.year:
        if args.sweep_nprobe:
            if args.index != "ivf":
                ap.error("--sweep-nprobe needs --index ivf")
            sweep_nprobe(args.year, args.prefilter, args.dim, params,
                         [int(v) for v in args.sweep_nprobe.split(",")], args.preset)
        else:
            year_end_to_end(args.year, args.prefilter, args.dim, args.index, params,
                            args.preset)
        return 0
    for n in (int(x) for x in args.sizes.split(",")):
        r = measure(n, args.days, args.prefilter, args.dim, args.repeat, args.index, params)
        print(f"{r['n_notes']:>9} notes, {r['queries']} queries in {r['batches']} batches "
              f"(stream generated in {r['gen_s']:.1f} s):")
        print(f"  exact prefilter:   {1e3 * r['exact_cpu_q']:9.3f} ms CPU per query")
        print(f"  maintained index:  {1e3 * r['index_cpu_q']:9.3f} ms CPU per query "
              f"(exact / index = {r['exact_cpu_q'] / r['index_cpu_q']:.2f}): "
              f"{1e3 * r['search_cpu_q']:.3f} ms searching (exact / search = "
              f"{r['exact_cpu_q'] / r['search_cpu_q']:.1f}), {1e3 * r['insert_cpu_q']:.3f} ms "
              "inserting the batches' new notes")
        print(f"  overlap of the index's candidates with the exact top {args.prefilter}: "
              f"{r['overlap']:.3f}")
        rebuild = r["build_cpu_s"] * r["batches"] / r["queries"]
        print(f"  index build to the first batch: {r['build_cpu_s']:.1f} s CPU for "
              f"{r['built']} notes ({1e6 * r['insert_cpu_note']:.0f} us per note); an index "
              f"rebuilt every batch: about {1e3 * rebuild:.0f} ms CPU per query "
              f"({rebuild / r['exact_cpu_q']:.0f}x the exact prefilter)")
        # the whole year the store is built for: every note inserted once
        # (half of them before the first query) and every query searched,
        # against every query's exact prefilter at this size (an upper
        # bound: the store is smaller earlier in the year)
        year_q = YEAR * QUERIES_PER_DAY
        index_year = r["insert_cpu_note"] * r["n_notes"] + year_q * r["search_cpu_q"]
        exact_year = year_q * r["exact_cpu_q"]
        print(f"  a whole year ({year_q:,.0f} queries; {r['n_notes'] / (2 * year_q):.1f} new "
              f"notes per query), extrapolated: the index {index_year:.0f} s CPU (every note "
              f"inserted at the build's rate, every query searched) against the exact "
              f"prefilter's {exact_year:.0f} s at most (index / exact = "
              f"{index_year / exact_year:.2f})")
        print(f"  load average now: {_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
