"""The ``hnsw`` retriever's maintained index against the exact prefilter.

Run from the repository root (needs hnswlib: ``pip install -e ".[ann]"``)::

    python benchmarks/bench_ann.py                          # 20k and 200k notes
    python benchmarks/bench_ann.py --sizes 1000000 --days 1 # the 1M-note store
    python benchmarks/bench_ann.py --ef-construction 64     # a cheaper build

For each size N, a synthetic store that reaches N notes by the end of a year
of queries (50 a day, half of the notes backfilled before the first; the
store of ``benchmarks/bench_engine.py``), generated with only the last
``--days`` days of queries. On each day-batch of those queries, as the
engine takes it (:class:`memsim.engine.batch.Batch`, no eviction):

* **exact**: the engine's exact nearest M (:func:`memsim.engine.prefilter.level_prefilter`
  with ``cosine``), including the batch's dot products it reads;
* **index**: the ``hnsw`` retriever on the stream's maintained index: the
  notes created since the last batch inserted (:meth:`HNSW.index`), then
  one search per query, filtered to the query's live notes
  (:meth:`memsim.policies.retrieval.HNSW.prefilter_mask`).

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


def measure(n_notes: int, days: float, m: int, ef: int, dim: int, repeat: int = 3,
            build: dict | None = None) -> dict:
    """CPU per query of the exact prefilter and of the maintained index."""
    from threadpoolctl import threadpool_limits

    from memsim.engine.batch import Batch, make_batches
    from memsim.engine.context import BatchContext
    from memsim.engine.inputs import _inputs
    from memsim.engine.prefilter import level_prefilter
    from memsim.engine.state import PolicyState
    from memsim.policies.retrieval import HNSW, Cosine

    t0 = time.perf_counter()
    stream = _stream(n_notes, days, dim)
    inp = _inputs(stream)
    gen_s = time.perf_counter() - t0
    notes = inp.notes
    st = PolicyState(notes, len(inp.actor_names))
    rng = np.random.default_rng(0)
    exact_r, ann_r = Cosine(prefilter=m), HNSW(prefilter=m, ef=ef, **(build or {}))

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="20000,200000", help="note counts, comma-separated")
    ap.add_argument("--days", type=float, default=2.0, help="days of queries timed (50 a day)")
    ap.add_argument("--prefilter", type=int, default=100,
                    help="candidates per query (the retriever's prefilter)")
    ap.add_argument("--ef", type=int, default=50, help="the index's search beam width")
    ap.add_argument("--dim", type=int, default=64, help="embedding dimension")
    ap.add_argument("--M", type=int, default=16, help="the index's graph degree")
    ap.add_argument("--ef-construction", type=int, default=200,
                    help="the index's beam width while inserting")
    ap.add_argument("--repeat", type=int, default=3,
                    help="timings of each batch's exact prefilter and searches (the fastest "
                         "counts; the inserts happen once)")
    args = ap.parse_args(argv)
    print(f"prefilter = {args.prefilter}, ef = {args.ef}, M = {args.M}, ef_construction = "
          f"{args.ef_construction}, dim = {args.dim}, "
          f"{args.days:g} day(s) of queries; load average at start: {_load()}")
    for n in (int(x) for x in args.sizes.split(",")):
        r = measure(n, args.days, args.prefilter, args.ef, args.dim, args.repeat,
                    {"M": args.M, "ef_construction": args.ef_construction})
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
