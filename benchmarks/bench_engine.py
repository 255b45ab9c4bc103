"""Engine benchmark (issue #8): throughput, scaling, policies, memory, targets.

Run from the repository root::

    python benchmarks/bench_engine.py --scale-only    # the scale targets only (~1 min)
    python benchmarks/bench_engine.py --scale-only --big   # time the whole 1M-note year

    python benchmarks/bench_engine.py                 # standard sizes, ~3-5 min on 2 idle cores
    python benchmarks/bench_engine.py --quick         # smaller variant, ~1-2 min
    python benchmarks/bench_engine.py --sizes 10000,50000 --policies 1,4,12 --window-days 30
    python benchmarks/bench_engine.py --timings-only  # feedback timings, presets, physical limit
    python benchmarks/bench_engine.py --commands-only [--commands-quick]   # command latencies
    python benchmarks/bench_engine.py --year 10000000 # a whole 10M-note year, measured (~10 min)

What is measured
----------------
*The host*, first in every output (text and ``--json``): the CPU model
(:func:`memsim.core.machine.cpu_model`), the cores this process may use, Python,
numpy and the BLAS threadpoolctl sees, the load average at the start and the
end: a figure is never quoted without its machine.

*Feedback timings* (``--timing-size``, default 50k notes): the full policy
and each preset of ``--presets`` at its own configuration (the presets
update per query), 1 and ``--timing-policies`` (10) arms, each in per-tick
and in per-query feedback; "10 per-query policies / 1 per-query policy"
(target <= 3x) and "1 per-query arm / 1 per-tick arm" (target <= 1.3x).
Beside them, note-scores per CPU-second of memsim, of the fastest exact
kernel and the limit implied by the host's single-core float32 GEMM peak
(``--gemm-size``; 2 x embedding dimension flops per note-score).

*Command latencies* (``--commands``, or ``--commands-quick`` on workloads
shrunk with ``--set``): wall and CPU seconds of ``memsim --help``, the
quickstart with and without its report, the presets, the audit of the
Hivemind sweep, ``memsim report`` on the quickstart's run folder and a
6-trial Hivemind sweep, with the wall seconds of its robustness re-check
(its manifest's ``timings_s``).

*Standard sizes*: a store that reaches N notes (10k, 50k, 200k) by the end of
a year of queries (50 a day), half of it backfilled before the first query
(``backfill_days = 365``, ``notes_per_day = N / 730``), built directly with
:class:`memsim.data.workload.SyntheticWorkload`. To keep the whole script within
minutes, each size is timed on the **last ``--window-days`` days** of that year
(``horizon_days = W``, ``backfill_days = 730 - W``, same note rate): the store
then holds between ``N - W N / 730`` and ``N`` notes, as at the end of the
year. ``--window-days 365`` times the whole year. The cost that does not grow
with queries (note arrays, relevance index: "fixed s") is measured on the same
stream with one day of queries, and the full-year cost is estimated as that
plus the rest per note-score times the note-scores of the year.

For each size, in a **fresh subprocess** each (so that peak memory, the
maximum resident set size from ``resource.getrusage``, belongs to that run
alone; it includes the stream), the fastest of ``REPEAT`` (3) runs:

* the **fastest exact kernel** (:func:`bare_kernel`): per day-batch one
  float32 product of queries x the notes existing by the batch's last query,
  a recency multiplier computed once per note, ``argpartition`` top-C and a
  sort of the C, single-threaded BLAS like the engine;
* a **full policy**: Hivemind's ranker (cosine x per-tier half-life with
  floor, promotion after 5 uses), ai-memory's retention sweep (daily),
  greedy-swap packing into 1,500 tokens, edges ordering, every metric;
* with ``--policies P``: P variants of that full policy (task half-lives
  spread over 30..720 days) in one experiment, sharing the similarity.

Note-scores = (queries x notes existing at the query's batch) x policies.
The exponent of cost is fitted by least squares on log(CPU time) against
log(note-scores) over the sizes (one policy).

*Sweep*: a sweep of ``experiments/quickstart.toml`` (its ``[sweep]`` table,
or a half-life and floor search if it has none) with 2 workers, ``[sweep]
batch`` = ``--sweep-batch`` (default 10: trials simulated as arms of one
replay) and ``pruner`` = ``--sweep-pruner`` (default none); ``--sweep-trials``
trials are run (default 100: the wall time is measured); with fewer, the
time of 100 is estimated as the measured start-up plus the median trial's
wall time times 50 (two at a time).

*Feather*: if feather-db is installed, the 10k stream with ``--feather-days``
of queries (default 60) replayed through the real engine (ingest + searches
at the default ef, with :func:`memsim.checks.feather_check.replay_feather`) and
through memsim's ``feather`` preset, in memsim's default per-tick feedback
mode and in the exact per-query mode, each side the fastest of
``FEATHER_REPEAT`` (3) runs, memsim's first (after a feather-db replay the
engine's threads run on for a while, and their CPU time would count as
memsim's: 0.30 s of CPU for 0.21 s of wall); then projected to the standard year
(engine: per note + per query; memsim: per note-score).

The sweep's workers keep their replays' similarity work between batches
(``[sweep] cache_mb``, by default up to 2 GiB per worker here).

Timing: the targets (but the sweep's) use **CPU time** (``time.process_time``), not wall time:
on a shared machine wall time counts the other processes, while memsim's
engine is single-threaded (BLAS limited to one thread), so on an idle core
CPU time is its wall time. The machine's load average is printed at the start
and the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

YEAR = 365.0
QUERIES_PER_DAY = 50.0
#: runs of each side of the Feather comparison (the fastest counts)
FEATHER_REPEAT = 3
#: runs of each kernel and policy measurement in its own process (the fastest counts)
REPEAT = 3
CANDIDATES = 50

#: The "full policy": ranker, retention, packing and (always) metrics, with
#: per-tick feedback (the targets' mode); the hivemind preset's own timing is
#: per-query, measured beside it.
FULL_POLICY = {
    "preset": "hivemind",
    "retention": {"kind": "ai-memory"},
    "feedback": {"timing": "per-tick"},
}


# --------------------------------------------------------------------------
# Child side: one measurement per process
# --------------------------------------------------------------------------


def _workload(n_notes: int, window_days: float):
    from memsim.data.workload import SyntheticWorkload

    total_days = 2 * YEAR  # backfill + horizon of the standard year
    return SyntheticWorkload(horizon_days=window_days, backfill_days=total_days - window_days,
                             notes_per_day=n_notes / total_days,
                             queries_per_day=QUERIES_PER_DAY)


def _stream(n_notes: int, window_days: float, seed: int = 1):
    return _workload(n_notes, window_days).generate(np.random.SeedSequence(seed))


def _day_batches(t: np.ndarray) -> list[np.ndarray]:
    day = np.floor(t).astype(np.int64)
    return np.split(np.arange(len(t)), np.flatnonzero(np.diff(day)) + 1)


def _note_scores(stream) -> int:
    """Cells scored per policy: each query x the notes existing by its batch's
    last query (as the engine's ``Batch`` takes them)."""
    created = np.sort(stream.notes["created_at"].to_numpy(np.float64))
    t = stream.queries["t"].to_numpy(np.float64)
    total = 0
    for rows in _day_batches(t):
        total += len(rows) * int(np.searchsorted(created, t[rows].max(), side="right"))
    return total


def _first_day(stream):
    """The stream with only its first day of queries (and their qrels)."""
    from memsim.data.stream import make_stream

    t = stream.queries["t"].to_numpy(np.float64)
    keep = np.floor(t) == np.floor(t.min())
    queries = stream.queries[keep]
    qrels = stream.qrels[stream.qrels["query_id"].isin(queries["query_id"])]
    return make_stream(stream.notes, queries, qrels, stream.accesses, stream.note_embeddings,
                       stream.query_embeddings[keep], stream.meta)


def _year_note_scores(n_notes: int) -> float:
    """Expected note-scores of the full standard year (one policy): queries at
    rate q over [0, Y], notes at rate N / 2Y over [-Y, Y]; existing notes at
    time t are N (Y + t) / 2Y."""
    rate = n_notes / (2 * YEAR)
    return QUERIES_PER_DAY * rate * (YEAR * YEAR + YEAR * YEAR / 2)


def bare_kernel(stream, c: int = CANDIDATES, half_life: float = 180.0) -> None:
    """The least work any exact brute-force replay must do, per day-batch:
    one float32 product of the batch's queries x the notes existing by its
    last query (a view of the embeddings: the generator's notes are in
    creation order), a recency multiplier computed once per note (at the
    batch's last query), one in-place multiply, ``argpartition`` top-C (no
    negated copy) and a sort of the C."""
    from threadpoolctl import threadpool_limits

    emb = np.ascontiguousarray(stream.note_embeddings, dtype=np.float32)
    qemb = np.ascontiguousarray(stream.query_embeddings, dtype=np.float32)
    created = stream.notes["created_at"].to_numpy(np.float64)
    assert np.all(np.diff(created) >= 0), "notes must be in creation order"
    t = stream.queries["t"].to_numpy(np.float64)
    with threadpool_limits(limits=1, user_api="blas"):
        for rows in _day_batches(t):
            t0 = float(t[rows].max())
            m = int(np.searchsorted(created, t0, side="right"))
            score = qemb[rows] @ emb[:m].T  # unit vectors: the cosine
            score *= np.exp2((created[:m] - t0) * (1.0 / half_life)).astype(np.float32)
            if m > c:
                part = np.argpartition(score, m - c, axis=1)[:, m - c:]
            else:
                part = np.broadcast_to(np.arange(m), score.shape).copy()
            vals = np.take_along_axis(score, part, axis=1)
            order = np.argsort(-vals, axis=1, kind="stable")
            np.take_along_axis(part, order, axis=1)


def policy_table(i: int, p: int, timing: str = "per-tick") -> dict:
    """The i-th of p variants of the full policy (task half-lives 30..720 d)."""
    import copy

    table = copy.deepcopy(FULL_POLICY)
    hl = 180.0 if p == 1 else float(np.geomspace(30.0, 720.0, p)[i])
    table["decay"] = {"task_half_life_days": hl}
    table["feedback"] = {"timing": timing}
    return table


def run_policies(stream, p: int, timing: str = "per-tick") -> None:
    run_tables(stream, [policy_table(i, p, timing) for i in range(p)])


def run_tables(stream, tables: list[dict]) -> None:
    """One replay of ``stream`` with an arm per policy table (public API only)."""
    from memsim.engine import Arm, SimSettings, simulate
    from memsim.policies import resolve_policy

    arms = [Arm(f"arm-{i}", resolve_policy(t, f"policies.arm-{i}")) for i, t in enumerate(tables)]
    simulate(stream, arms, SimSettings(candidates=CANDIDATES), np.random.SeedSequence(0))


# --------------------------------------------------------------------------
# Feedback timings: the configurations users run
# --------------------------------------------------------------------------

#: the presets measured at their own configuration (``--presets``)
PRESET_NAMES = ("hivemind", "ai-memory", "feather", "langchain-time-weighted",
                "generative-agents")


def _vary_decay(decay, i: int, p: int):
    """The i-th of p variants of a preset's decay table: each half-life and
    rate scaled by ``geomspace(1/4, 4, p)[i]``, a per-step decay factor raised
    to that power (so it stays in (0, 1)); floors and kinds kept. ``None`` or
    a kind without such parameters is kept as it is (identical arms)."""
    import copy

    if p == 1 or not isinstance(decay, dict):
        return copy.deepcopy(decay)
    s = float(np.geomspace(0.25, 4.0, p)[i])
    out = dict(decay)
    for key, value in decay.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if "half_life" in key:
            out[key] = float(value) * s
        elif "rate" in key:
            out[key] = float(value) / s
        elif key == "decay_factor":
            out[key] = float(value) ** (1.0 / s)
    return out


def preset_tables(name: str, p: int, timing: str | None) -> list[dict]:
    """p arms of preset ``name`` at its own configuration; ``timing`` None
    keeps the preset's own feedback timing, else overrides it. With p > 1 the
    arms differ by their decay's time scale (:func:`_vary_decay`)."""
    from memsim.core.errors import ConfigError
    from memsim.policies import resolve_policy
    from memsim.policies.presets import preset_table

    decay = preset_table(name, f"presets.{name}").get("decay")
    tables = []
    for i in range(p):
        t: dict = {"preset": name}
        if timing is not None:
            t["feedback"] = {"timing": timing}
        if p > 1 and decay is not None:
            varied = {**t, "decay": _vary_decay(decay, i, p)}
            try:  # a scaled parameter outside its range: the preset's own decay
                resolve_policy(varied, f"presets.{name}")
                t = varied
            except ConfigError:
                pass
        tables.append(t)
    return tables


def own_timing(name: str) -> str:
    """The feedback timing preset ``name`` runs with."""
    from memsim.policies import resolve_policy

    return resolve_policy({"preset": name}, f"presets.{name}").feedback.timing


def child_timings(spec: dict) -> dict:
    """Per-tick and per-query arms, 1 and P of them, for the full policy and
    each preset at its own configuration, plus the fastest kernel, on one
    stream in one process; each measurement alternated ``repeat`` times (the
    minimum CPU time counts)."""
    stream = _stream(spec["n"], spec["window"])
    p = spec["p"]
    groups: dict[str, dict[str, list[dict]]] = {
        "full policy": {f"{timing}_{k}": [policy_table(i, k, timing) for i in range(k)]
                        for timing in ("per-tick", "per-query") for k in (1, p)}}
    own: dict[str, str] = {"full policy": "per-tick (per-query measured beside it)"}
    for name in spec.get("presets", []):
        own[name] = own_timing(name)
        groups[name] = {f"{timing}_{k}": preset_tables(name, k, timing)
                        for timing in ("per-tick", "per-query") for k in (1, p)}
        # with p variants the decay differs; the own-timing arm is its
        # per-query or per-tick arm above, whichever the preset runs
    runs: dict[str, dict[str, list[float]]] = {g: {k: [] for k in arms}
                                               for g, arms in groups.items()}
    kernel: list[float] = []
    # warm-up, not counted: the first replay of a configuration pays imports
    # and first-call costs that a later one does not
    bare_kernel(stream)
    for arms in groups.values():
        for key in ("per-tick_1", "per-query_1"):
            run_tables(stream, arms[key])
    for _ in range(spec.get("repeat", 3)):
        kernel.append(_cpu(bare_kernel, stream)[1])
        for g, arms in groups.items():
            for key, tables in arms.items():
                runs[g][key].append(_cpu(run_tables, stream, tables)[1])
    return {"n_notes": stream.n_notes, "n_queries": stream.n_queries, "p": p,
            "note_scores": _note_scores(stream), "dim": int(stream.note_embeddings.shape[1]),
            "kernel": min(kernel), "own_timing": own,
            "groups": {g: {k: min(v) for k, v in r.items()} for g, r in runs.items()},
            "runs": runs, "peak_mib": _maxrss_mib()}


def child_gemm(spec: dict) -> dict:
    """The host's single-core float32 GEMM peak: ``a @ b`` of two n x n
    matrices with BLAS limited to one thread, best of ``repeat`` (2 n^3 flops
    each, wall time on an otherwise idle core)."""
    from threadpoolctl import threadpool_limits

    n = spec["n"]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    best = np.inf
    best_cpu = np.inf
    with threadpool_limits(limits=1, user_api="blas"):
        np.matmul(a, b, out=out)  # warm-up: pages, BLAS buffers
        for _ in range(spec.get("repeat", 5)):
            wall, cpu = _cpu(np.matmul, a, b, out)
            best, best_cpu = min(best, wall), min(best_cpu, cpu)
    flops = 2.0 * n ** 3
    return {"n": n, "repeat": spec.get("repeat", 5), "best_wall_s": best, "best_cpu_s": best_cpu,
            "gflops": flops / best / 1e9, "gflops_cpu": flops / best_cpu / 1e9}

def _maxrss_mib() -> float:
    # Linux reports kilobytes, macOS bytes
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / (1024.0 * 1024.0) if sys.platform == "darwin" else r / 1024.0


def _cpu(fn, *args) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - t0, time.process_time() - c0


def child_side_by_side(spec: dict) -> dict:
    """The fastest kernel, one full policy and P of them on one stream, in one
    process, alternated ``repeat`` times (the minimum CPU time of each)."""
    stream = _stream(spec["n"], spec["window"])
    p = spec["p"]
    runs: dict[str, list[float]] = {"kernel": [], "policy": [], "policy_per_query": [],
                                    f"policies_{p}": []}
    for _ in range(spec.get("repeat", 2)):
        runs["kernel"].append(_cpu(bare_kernel, stream)[1])
        runs["policy"].append(_cpu(run_policies, stream, 1)[1])
        runs["policy_per_query"].append(_cpu(run_policies, stream, 1, "per-query")[1])
        if p > 1:
            runs[f"policies_{p}"].append(_cpu(run_policies, stream, p)[1])
    out = {k: min(v) for k, v in runs.items() if v}
    out.update(n_notes=stream.n_notes, n_queries=stream.n_queries,
               note_scores=_note_scores(stream), peak_mib=_maxrss_mib(), p=p)
    return out


def child_big(spec: dict) -> dict:
    """One full policy on the 1M-note store: the whole year (``window`` 365)
    or its last days, with the fixed cost measured on one day of queries."""
    from memsim.runs.config import estimate_stream_bytes

    t0, c0 = time.perf_counter(), time.process_time()
    stream = _stream(spec["n"], spec["window"])
    gen, gen_cpu = time.perf_counter() - t0, time.process_time() - c0
    gen_peak = _maxrss_mib()
    sys0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
    wall, cpu = _cpu(run_policies, stream, 1, spec.get("timing", "per-tick"))
    out = {"n_notes": stream.n_notes, "n_queries": stream.n_queries, "gen_s": gen,
           "gen_cpu_s": gen_cpu, "gen_peak_mib": gen_peak, "wall_s": wall, "cpu_s": cpu,
           "system_s": resource.getrusage(resource.RUSAGE_SELF).ru_stime - sys0,
           "note_scores": _note_scores(stream), "load": _load()}
    out["peak_mib"] = _maxrss_mib()
    out.update(_batches(stream, spec.get("timing", "per-tick")))
    out["estimate_gib"] = estimate_stream_bytes(_workload(spec["n"], spec["window"]),
                                                parts=out["in_parts"]) / 2**30
    return out


def _batches(stream, timing: str) -> dict:
    """The ticks of the full policy's replay and the batches it takes them
    in (a tick in parts: ``SimSettings.max_tick_cells``)."""
    from memsim.engine import SimSettings
    from memsim.engine.batch import make_batches, replay_batches
    from memsim.engine.settings import splits_ticks
    from memsim.policies import resolve_policy

    s = SimSettings(candidates=CANDIDATES)
    parts = splits_ticks(resolve_policy(policy_table(0, 1, timing), "arm-0"), s)
    t = stream.queries["t"].to_numpy(np.float64)
    created = stream.notes["created_at"].to_numpy(np.float64)
    return {"ticks": len(make_batches(t, 1.0)), "max_tick_cells": s.max_tick_cells,
            "in_parts": parts,
            "batches": len(replay_batches(t, 1.0, created, parts, s.max_tick_cells))}


def year_run(n: int, timing: str) -> dict:
    """A whole standard year of ``n`` notes, one full policy with ``timing``
    feedback, measured (not estimated) in a process of its own."""
    r = spawn({"what": "big", "n": n, "window": YEAR, "timing": timing})
    print(f"Whole year   ({_fmt_n(r['n_notes'])} notes, {r['n_queries']} queries, full policy, "
          f"{timing} feedback; load average at the end {r['load']})")
    print(f"  generating the stream   wall {r['gen_s']:7.1f} s   CPU {r['gen_cpu_s']:7.1f} s   "
          f"peak {r['gen_peak_mib'] / 1024:.2f} GiB")
    print(f"  replaying it            wall {r['wall_s']:7.1f} s   CPU {r['cpu_s']:7.1f} s "
          f"(system {r['system_s']:.1f} s)   peak {r['peak_mib'] / 1024:.2f} GiB")
    print(f"  {r['ticks']} ticks replayed as {r['batches']} batches (max_tick_cells "
          f"{r['max_tick_cells']:,}); memory estimate {r['estimate_gib']:.2f} GiB "
          f"(the limit of experiment files: MEMSIM_MAX_STREAM_GB, default 8)")
    print()
    return r


def child(spec: dict) -> dict:
    """Run one measurement; return its figures."""
    what = spec["what"]
    if what == "sweep":
        return child_sweep(spec)
    if what == "side":
        return child_side_by_side(spec)
    if what == "big":
        return child_big(spec)
    if what == "timings":
        return child_timings(spec)
    if what == "gemm":
        return child_gemm(spec)
    t0 = time.perf_counter()
    stream = _stream(spec["n"], spec["window"])
    gen_s = time.perf_counter() - t0
    rss_stream = _maxrss_mib()
    out = {"n_notes": stream.n_notes, "n_queries": stream.n_queries, "gen_s": gen_s,
           "note_scores": _note_scores(stream), "rss_stream_mib": rss_stream}
    if what in ("kernel", "policy"):
        # the fastest of REPEAT runs (a run of a tenth of a second moves by
        # half between runs on a shared machine)
        runs = [_cpu(bare_kernel, stream) if what == "kernel"
                else _cpu(run_policies, stream, spec["p"]) for _ in range(REPEAT)]
        out["wall_s"] = min(r[0] for r in runs)
        out["cpu_s"] = min(r[1] for r in runs)
        if what == "policy":
            # the part of the cost that does not grow with queries (arrays
            # of the notes, relevance index, ...): one day of queries
            first = _first_day(stream)
            out["fixed_cpu_s"] = min(_cpu(run_policies, first, spec["p"])[1]
                                     for _ in range(REPEAT))
            out["fixed_note_scores"] = _note_scores(first)
    elif what == "feather":
        out.update(child_feather(stream))
    else:  # pragma: no cover
        raise ValueError(what)
    out["peak_mib"] = _maxrss_mib()
    return out


def child_feather(stream) -> dict:
    from memsim.checks.feather_check import quantise_stream, replay_feather, replay_memsim

    qs = quantise_stream(stream)
    # each side's fastest of FEATHER_REPEAT runs (a run of a fraction of a
    # second moves by 10-20% on a shared machine); memsim's first: after a
    # feather-db replay the engine's threads still run for a while, and
    # their CPU time would count as memsim's
    mem: dict[str, float] = {}
    for _ in range(FEATHER_REPEAT):
        for mode, name in (("per-tick", "tick"), ("per-query", "query")):
            r = replay_memsim(qs, feedback_mode=mode)
            for key, value in ((f"memsim_{name}_s", r.seconds),
                               (f"memsim_{name}_cpu_s", r.cpu_seconds)):
                mem[key] = min(mem.get(key, np.inf), value)
    best = min((replay_feather(qs) for _ in range(FEATHER_REPEAT)), key=_engine_cpu)
    return {**mem, "repeat": FEATHER_REPEAT,
            "engine_ingest_s": best.timings["ingest_s"],
            "engine_search_s": best.timings["search_s"],
            "engine_ingest_cpu_s": best.timings["ingest_cpu_s"],
            "engine_search_cpu_s": best.timings["search_cpu_s"],
            "engine_replay_s": best.timings["total_s"], "ef": best.ef}


def _engine_cpu(replay) -> float:
    """CPU seconds of a feather-db replay, ingest and search."""
    return replay.timings["ingest_cpu_s"] + replay.timings["search_cpu_s"]


_DEFAULT_SWEEP = """
[sweep]
trials = 100
sampler = "tpe"
objectives = [{ metric = "utility", direction = "maximize", policy = "half-life-180-floor" }]

[sweep.params]
"policies.half-life-180-floor.decay.half_life_days" = { type = "float", low = 7, high = 720, log = true }
"policies.half-life-180-floor.decay.floor" = { type = "float", low = 0.0, high = 0.9 }
"""


def child_sweep(spec: dict) -> dict:
    import tomllib

    from memsim.sweep import run_sweep

    src = ROOT / "experiments" / "quickstart.toml"
    text = src.read_text(encoding="utf-8")
    has_sweep = "sweep" in tomllib.loads(text)
    with tempfile.TemporaryDirectory(prefix="memsim-bench-sweep-") as tmp:
        path = Path(tmp) / "quickstart.toml"
        path.write_text(text if has_sweep else text + _DEFAULT_SWEEP, encoding="utf-8")
        t0, c0 = time.perf_counter(), _cpu_with_children()
        res = run_sweep(path, trials=spec["trials"], workers=spec["workers"],
                        out=Path(tmp) / "results", plots=False, quiet=True,
                        batch=spec.get("batch"), pruner=spec.get("pruner"))
        wall = time.perf_counter() - t0
        cpu = _cpu_with_children() - c0
        trials = getattr(res, "trials", None)
        secs = []
        if trials is not None and "seconds" in trials:
            secs = [float(x) for x in trials["seconds"].dropna()]
    return {"wall_s": wall, "cpu_s": cpu, "trials": spec["trials"], "workers": spec["workers"],
            "batch": spec.get("batch"), "pruner": spec.get("pruner"),
            "trial_seconds": secs, "own_sweep_table": has_sweep}


def _cpu_with_children() -> float:
    """CPU seconds of this process and of its finished children (workers)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + ch.ru_utime + ch.ru_stime


# --------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------


def spawn(spec: dict, timeout: float | None = None) -> dict:
    """Run ``child(spec)`` in a fresh interpreter; return its JSON."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    # engines (BLAS, the feather replay's throwaway store) single-threaded
    # unless told otherwise; feather-db's WAL fsync is pointless here
    env.setdefault("FEATHER_WAL_SYNC", "0")
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)],
                          capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"child {spec} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fit_exponent(x, y) -> float:
    """Slope of log(y) on log(x) (least squares)."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    return float(np.polyfit(lx, ly, 1)[0])


def _load() -> str:
    try:
        a, b, c = os.getloadavg()
        return f"{a:.2f} {b:.2f} {c:.2f}"
    except OSError:  # pragma: no cover
        return "n/a"


def _fmt_n(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.0f}"


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "MISS")


def scale_targets(window: float, big: bool, big_days: float) -> dict:
    """The three scale targets, each with PASS or MISS."""
    side = spawn({"what": "side", "n": 50000, "window": window, "p": 10, "repeat": 3})
    days = YEAR if big else big_days
    b = spawn({"what": "big", "n": 1_000_000, "window": days})
    if big:
        year_s = b["wall_s"]
        how = (f"measured; CPU {b['cpu_s']:.0f} s, load average during the run "
               f"{b['load']}")
    else:
        # two windows (d and 3d days at the year's end): the cost per
        # note-score from their difference, the fixed cost from the intercept
        b3 = spawn({"what": "big", "n": 1_000_000, "window": 3 * days})
        per = max(b3["wall_s"] - b["wall_s"], 1e-9) / max(b3["note_scores"] - b["note_scores"], 1)
        fixed = max(b["wall_s"] - per * b["note_scores"], 0.0)
        year_s = fixed + per * _year_note_scores(1_000_000)
        b["peak_mib"] = max(b["peak_mib"], b3["peak_mib"])
        per_c = max(b3["cpu_s"] - b["cpu_s"], 1e-9) / max(b3["note_scores"] - b["note_scores"], 1)
        cpu_year = max(b["cpu_s"] - per_c * b["note_scores"], 0.0) + per_c * _year_note_scores(
            1_000_000)
        how = (f"ESTIMATE from the last {days:g} and {3 * days:g} days ({b['wall_s']:.1f} s, "
               f"{b3['wall_s']:.1f} s): fixed {fixed:.1f} s + {per * 1e9:.2f} s per G "
               f"note-scores x the year's {_fmt_n(_year_note_scores(1_000_000))}; same in CPU "
               f"time {cpu_year / 60:.2f} min; --big measures it")
    r1 = side["policy"] / side["kernel"]
    r10 = side["policies_10"] / side["policy"]
    rows = [
        ("full policy vs fastest exact kernel, 50k notes (CPU, same process)",
         f"{r1:.2f}x (kernel {side['kernel']:.2f} s, policy {side['policy']:.2f} s, "
         f"{side['n_queries']} queries)", "<= 1.5x", r1 <= 1.5),
        ("  the same policy with per-query feedback (the preset's own), vs per-tick",
         f"{side['policy_per_query'] / side['policy']:.2f}x "
         f"({side['policy_per_query']:.2f} s)", "(info)", None),
        ("10 policies vs one, 50k notes (CPU, same process)",
         f"{r10:.2f}x ({side['policies_10']:.2f} s)", "<= 3x", r10 <= 3.0),
        ("1M notes x 365 d x 50 queries/d, one full policy (wall)",
         f"{year_s / 60:.2f} min ({how})", "<= 2 min", year_s <= 120.0),
        ("  peak memory of that run (incl. stream)", f"{b['peak_mib'] / 1024:.2f} GiB",
         "<= 3 GiB", b["peak_mib"] <= 3 * 1024),
    ]
    print(f"Scale targets   (load average {_load()})")
    w = max(len(r[0]) for r in rows)
    for name, value, goal, ok in rows:
        print(f"  {name:<{w}}  {goal:>9}  {_verdict(ok):>4}  {value}")
    print()
    return {"side_by_side": side, "big": b, "year_1m_s": year_s,
            "targets": [dict(zip(("name", "value", "goal", "pass"), r)) for r in rows]}


# --------------------------------------------------------------------------
# The host, the feedback timings, the physical limit, the commands
# --------------------------------------------------------------------------


def host_info() -> dict:
    """What a figure needs beside it: CPU model, usable cores, load average,
    Python, numpy and its BLAS (threadpoolctl)."""
    import platform

    from memsim.core.machine import cpu_model, default_jobs

    try:
        from threadpoolctl import threadpool_info

        blas = [{k: lib.get(k) for k in ("user_api", "internal_api", "version",
                                          "architecture", "threading_layer", "num_threads")}
                for lib in threadpool_info()]
    except ImportError:  # pragma: no cover
        blas = [{"user_api": "unknown (threadpoolctl not installed)"}]
    return {"cpu_model": cpu_model(), "cores_usable": default_jobs(),
            "cpus": os.cpu_count(), "machine": platform.machine(),
            "system": f"{platform.system()} {platform.release()}",
            "python": sys.version.split()[0], "numpy": np.__version__, "blas": blas,
            "load_start": _load()}


def print_host(host: dict) -> None:
    print(f"host: {host['cpu_model']}; {host['cores_usable']} cores usable of {host['cpus']} "
          f"({host['machine']}, {host['system']})")
    libs = "; ".join(
        " ".join(str(lib[k]) for k in ("internal_api", "version", "architecture") if lib.get(k))
        + f" ({lib.get('user_api')}, {lib.get('num_threads')} threads by default)"
        for lib in host["blas"]) or "none loaded"
    print(f"python {host['python']}, numpy {host['numpy']}; BLAS/OpenMP: {libs}")
    print(f"load average at start: {host['load_start']} (1, 5, 15 min; figures from a busy "
          f"machine are not results)")


def measure_timings(n: int, window: float, p: int, presets: list[str], repeat: int,
                    gemm_n: int) -> dict:
    """The headline ratios in both feedback timings and the presets' own
    configurations, then memsim's throughput beside the bare kernel's and the
    limit implied by the host's GEMM peak. Prints both tables."""
    tm = spawn({"what": "timings", "n": n, "window": window, "p": p, "presets": presets,
                "repeat": repeat})
    gemm = spawn({"what": "gemm", "n": gemm_n, "repeat": 5})
    nk = f"{_fmt_n(tm['n_notes'])} notes, {tm['n_queries']} queries"
    rows = []
    for g, r in tm["groups"].items():
        label = g if g == "full policy" else f"preset {g} ({tm['own_timing'][g]})"
        rq = r[f"per-query_{p}"] / r["per-query_1"]
        rt = r[f"per-tick_{p}"] / r["per-tick_1"]
        rqt = r["per-query_1"] / r["per-tick_1"]
        pairs = tm["runs"][g]
        rows.append((f"{label}: {p} per-query policies / 1 per-query policy",
                     f"{rq:.2f}x ({r[f'per-query_{p}']:.2f} s / {r['per-query_1']:.2f} s"
                     f"{_pair_range(pairs[f'per-query_{p}'], pairs['per-query_1'])})",
                     "<= 3x", rq <= 3.0))
        rows.append(("  1 per-query arm / 1 per-tick arm",
                     f"{rqt:.2f}x ({r['per-query_1']:.2f} s / {r['per-tick_1']:.2f} s"
                     f"{_pair_range(pairs['per-query_1'], pairs['per-tick_1'])})",
                     "<= 1.3x", rqt <= 1.3))
        rows.append((f"  {p} per-tick policies / 1 per-tick policy",
                     f"{rt:.2f}x ({r[f'per-tick_{p}']:.2f} s)", "(info)", None))
    print(f"Feedback timings   ({nk}; CPU, minimum of {repeat} alternated runs in one "
          f"process; load average {_load()})")
    print("  (the verdict reads the minima's ratio; 'runs' gives the ratio of each "
          "run's pair:\n   a range that crosses the target is a verdict this host's "
          "noise can turn)")
    w = max(len(r[0]) for r in rows)
    for name, value, goal, ok in rows:
        print(f"  {name:<{w}}  {goal:>7}  {_verdict(ok):>4}  {value}")
    print("  (presets: their own configuration; the P arms differ by their decay's time "
          "scale, x 1/4..4;\n   a preset whose decay has no time scale (or no decay: "
          "ai-memory) runs P identical arms)")
    print()

    # throughput against the physical limit
    dim = tm["dim"]
    limit = gemm["gflops"] * 1e9 / (2.0 * dim)
    cells = tm["note_scores"]
    lim_rows = [("host float32 GEMM peak, 1 core", f"{gemm['gflops']:.1f} GFLOP/s "
                 f"({gemm['n']} x {gemm['n']} matmul, best of {gemm['repeat']}; "
                 f"{gemm['gflops_cpu']:.1f} by CPU time)"),
                (f"  limit implied (2 x {dim} flops per note-score)",
                 f"{_fmt_n(limit)} note-scores/s")]
    lim_rows.append(("fastest exact kernel", _rate_row(cells, tm["kernel"], limit)))
    full = tm["groups"]["full policy"]
    lim_rows.append(("memsim, full policy per-tick", _rate_row(cells, full["per-tick_1"], limit)))
    lim_rows.append(("memsim, full policy per-query",
                     _rate_row(cells, full["per-query_1"], limit)))
    lim_rows.append((f"memsim, {p} full policies per-query",
                     _rate_row(cells * p, full[f"per-query_{p}"], limit)))
    for g in presets:
        own = tm["own_timing"][g]
        lim_rows.append((f"memsim, preset {g} ({own})",
                         _rate_row(cells, tm["groups"][g][f"{own}_1"], limit)))
    print(f"Throughput against the physical limit   ({nk}; note-scores per CPU-second)")
    w = max(len(r[0]) for r in lim_rows)
    for name, value in lim_rows:
        print(f"  {name:<{w}}  {value}")
    print("  (note-scores: queries x notes existing at the query's batch, x arms; the limit "
          "is the\n   brute-force product alone at the GEMM peak: no recency, top-C, "
          "packing or metrics)")
    print()
    return {"timings": tm, "gemm": gemm, "limit_note_scores_per_s": limit,
            "targets": [dict(zip(("name", "value", "goal", "pass"), r)) for r in rows],
            "throughput": [dict(zip(("name", "value"), r)) for r in lim_rows]}


def _pair_range(top: list[float], bottom: list[float]) -> str:
    """``"; runs a-bx"``: the lowest and highest ratio of the runs' pairs
    (run i's ``top`` over run i's ``bottom``, measured one after the
    other), or nothing with a single run."""
    ratios = [a / max(b, 1e-12) for a, b in zip(top, bottom)]
    return f"; runs {min(ratios):.2f}-{max(ratios):.2f}x" if len(ratios) > 1 else ""


def _rate_row(cells: float, cpu_s: float, limit: float) -> str:
    rate = cells / max(cpu_s, 1e-12)
    return f"{_fmt_n(rate):>8}/s  ({100 * rate / limit:5.1f}% of the limit; {cpu_s:.2f} s CPU)"


#: ``--set`` overrides that shrink each command's workload (``--commands-quick``)
QUICK_SETS = ("--set", "workload.horizon_days=20", "--set", "workload.backfill_days=40",
              "--set", "experiment.replicates=1")


def command_list(quick: bool, out: Path) -> list[tuple[str, list[str]]]:
    """The commands users wait on, as (label, memsim arguments); ``{run}``
    stands for the quickstart's run folder (the report is rebuilt there)."""
    sets = list(QUICK_SETS) if quick else []
    o = ["--out", str(out)]
    return [
        ("memsim --help", ["--help"]),
        ("memsim run experiments/quickstart.toml --no-report",
         ["run", "experiments/quickstart.toml", "-q", "--no-report", *o, *sets]),
        ("memsim run experiments/quickstart.toml (with the report)",
         ["run", "experiments/quickstart.toml", "-q", *o, *sets]),
        ("memsim run experiments/presets.toml", ["run", "experiments/presets.toml", "-q", *o,
                                                  *sets]),
        ("memsim audit experiments/sweep_hivemind.toml",
         ["audit", "experiments/sweep_hivemind.toml", "-q", *sets]
         + (["--queries", "50", "--param-replicates", "2"] if quick else [])),
        ("memsim report RUN (the quickstart's run folder)", ["report", "--quiet", "{run}"]),
        # the robustness re-check is the sweep's phase after its trials: its
        # wall seconds are the run folder's manifest timings_s.robustness
        (f"memsim sweep experiments/sweep_hivemind.toml --trials {SWEEP_TRIALS} "
         "(robustness re-check)",
         ["sweep", "experiments/sweep_hivemind.toml", "-q", "--no-report", "--trials",
          str(SWEEP_TRIALS), *o, *sets]),
    ]


#: COMPLETE trials of the sweep whose robustness re-check is timed
SWEEP_TRIALS = 6


def _phase_seconds(out: Path, phase: str) -> float | None:
    """``timings_s[phase]`` of the newest sweep run folder under ``out``."""
    manifests = sorted(out.glob("*sweep*/manifest.json"))
    if not manifests:
        return None
    value = json.loads(manifests[-1].read_text(encoding="utf-8")).get("timings_s", {}).get(phase)
    return float(value) if isinstance(value, (int, float)) else None


def measure_commands(quick: bool) -> dict:
    """Wall and CPU seconds (the command and every process it waited for) of
    each command, one after the other, in a fresh interpreter each."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    rows = []
    with tempfile.TemporaryDirectory(prefix="memsim-bench-cmd-") as tmp:
        run_dir = None
        for label, args in command_list(quick, Path(tmp) / "results"):
            if "{run}" in args:
                if run_dir is None:
                    rows.append({"command": label, "error": "no quickstart run folder"})
                    continue
                args = [run_dir if a == "{run}" else a for a in args]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "memsim.cli", *args], cwd=ROOT,
                                  capture_output=True, text=True, env=env)
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
            row = {"command": label, "argv": ["memsim", *args], "wall_s": wall,
                   "cpu_s": user + system, "user_s": user, "system_s": system,
                   "returncode": proc.returncode}
            if proc.returncode != 0:
                row["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1]
            elif args[0] == "run" and "--no-report" not in args and "quickstart" in args[1]:
                run_dir = proc.stdout.strip().splitlines()[-1]
            elif args[0] == "sweep":
                row["robustness_wall_s"] = _phase_seconds(Path(tmp) / "results", "robustness")
            rows.append(row)
    kind = ("quick: " + " ".join(QUICK_SETS) + "; audit --queries 50 --param-replicates 2"
            if quick else "full workloads")
    print(f"Command latencies   ({kind}; CPU includes the worker processes; load average "
          f"{_load()})")
    w = max(len(r["command"]) for r in rows)
    print(f"  {'command':<{w}}  {'wall s':>8}  {'CPU s':>8}  {'system s':>8}")
    for r in rows:
        if "wall_s" in r and "error" not in r:
            print(f"  {r['command']:<{w}}  {r['wall_s']:>8.2f}  {r['cpu_s']:>8.2f}  "
                  f"{r['system_s']:>8.2f}")
            if r.get("robustness_wall_s") is not None:
                print(f"  {'  of which the robustness re-check (wall)':<{w}}  "
                      f"{r['robustness_wall_s']:>8.2f}")
        else:
            print(f"  {r['command']:<{w}}  FAILED: {r.get('error')}")
    print()
    return {"quick": quick, "commands": rows}

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=None, help="note counts, comma-separated "
                    "(default 10000,50000,200000; --quick 10000,50000)")
    ap.add_argument("--policies", default=None,
                    help="policy counts P, comma-separated (default 1,4,12; --quick 1,4)")
    ap.add_argument("--policy-size", type=int, default=None,
                    help="store size at which P > 1 is measured (default: 10000)")
    ap.add_argument("--window-days", type=float, default=None,
                    help="days of queries timed at the end of the standard year "
                         "(default 30; --quick 10; 365 = the whole year)")
    ap.add_argument("--feather-days", type=float, default=None,
                    help="days of queries of the feather replay (default 60; --quick 14)")
    ap.add_argument("--sweep-trials", type=int, default=None,
                    help="sweep trials actually run (default 100)")
    ap.add_argument("--sweep-batch", type=int, default=10,
                    help="trials simulated together as arms of one replay (default 10)")
    ap.add_argument("--sweep-pruner", default="none",
                    help="the sweep's pruner (default none)")
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--no-feather", action="store_true")
    ap.add_argument("--quick", action="store_true", help="a smaller variant (~1-2 min)")
    ap.add_argument("--json", metavar="FILE", help="also write every figure as JSON")
    ap.add_argument("--big", action="store_true",
                    help="time the whole 1M-note year (several minutes) instead of "
                         "estimating it from its last --big-days and 3x as many days")
    ap.add_argument("--big-days", type=float, default=4.0,
                    help="days timed at 1M notes without --big (default %(default)g)")
    ap.add_argument("--scale-only", action="store_true",
                    help="only the three scale targets (fastest kernel, 10 policies, 1M notes)")
    ap.add_argument("--timing-size", type=int, default=50000,
                    help="store size of the feedback-timing ratios and the throughput "
                         "against the physical limit (default 50000)")
    ap.add_argument("--timing-policies", type=int, default=10,
                    help="P of 'P policies / 1 policy' in both timings (default 10)")
    ap.add_argument("--presets", default=",".join(PRESET_NAMES),
                    help="presets measured at their own configuration, comma-separated, or "
                         f"'none' (default {','.join(PRESET_NAMES)})")
    ap.add_argument("--timing-repeat", type=int, default=None,
                    help="alternated runs of each timing measurement (default 3; --quick 2)")
    ap.add_argument("--gemm-size", type=int, default=None,
                    help="n of the n x n float32 GEMM peak (default 4096; --quick 2048)")
    ap.add_argument("--no-scale", action="store_true",
                    help="skip the scale targets (their 50k side-by-side and 1M-note runs)")
    ap.add_argument("--no-timings", action="store_true",
                    help="skip the feedback timings and the physical limit")
    ap.add_argument("--timings-only", action="store_true",
                    help="only the feedback timings and the physical limit")
    ap.add_argument("--commands", action="store_true",
                    help="also time the commands users wait on, on their full workloads "
                         "(many minutes)")
    ap.add_argument("--commands-quick", action="store_true",
                    help="also time those commands on workloads shrunk with --set (~1-3 min)")
    ap.add_argument("--commands-only", action="store_true",
                    help="only the command latencies (full, or shrunk with --commands-quick)")
    ap.add_argument("--year", type=int, metavar="N", default=None,
                    help="only measure a whole standard year of N notes (one full policy; "
                         "10000000 takes about 10 minutes and 12 GiB)")
    ap.add_argument("--year-timing", choices=("per-tick", "per-query"), default="per-query",
                    help="feedback timing of --year (default per-query, the presets')")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0

    q = args.quick
    sizes = [int(s) for s in (args.sizes or ("10000,50000" if q else
                                             "10000,50000,200000")).split(",")]
    pols = sorted({int(p) for p in (args.policies or ("1,4" if q else "1,4,12")).split(",")}
                  | {1})
    psize = args.policy_size or 10000
    window = args.window_days or (10.0 if q else 30.0)
    sweep_trials = args.sweep_trials or 100
    feather_days = args.feather_days or (14.0 if q else 60.0)

    t_start = time.perf_counter()
    host = host_info()
    print("memsim engine benchmark")
    print_host(host)
    print()
    # the host first in the JSON as well: no figure without its machine
    results: dict = {"host": host}
    if args.year:
        results["year"] = year_run(args.year, args.year_timing)
        return _finish(results, args.json, t_start)
    commands = args.commands or args.commands_quick or args.commands_only
    if not args.commands_only:
        if not (args.timings_only or args.no_scale):
            results["scale"] = scale_targets(window, args.big, args.big_days)
        if not args.no_timings:
            presets = [] if args.presets.strip() in ("", "none") else [
                x.strip() for x in args.presets.split(",") if x.strip()]
            results["feedback_timings"] = measure_timings(
                args.timing_size, window, args.timing_policies, presets,
                args.timing_repeat or (2 if q else 3), args.gemm_size or (2048 if q else 4096))
    if args.scale_only or args.timings_only or args.commands_only:
        if commands:
            results["commands"] = measure_commands(args.commands_quick)
        return _finish(results, args.json, t_start)
    print(f"standard year: 365 days x {QUERIES_PER_DAY:g} queries/day, store reaches N notes "
          f"(backfill 365 d); timed window: last {window:g} days; C = {CANDIDATES}")
    print()

    rows = []
    results.update({"sizes": {}, "policies": {}})
    for n in sizes:
        k = spawn({"what": "kernel", "n": n, "window": window})
        p1 = spawn({"what": "policy", "n": n, "window": window, "p": 1})
        results["sizes"][n] = {"kernel": k, "policy": p1}
        rows.append((n, "kernel", k))
        rows.append((n, 1, p1))
        if n == psize:
            for p in pols:
                if p == 1:
                    continue
                r = spawn({"what": "policy", "n": n, "window": window, "p": p})
                results["policies"][p] = r
                rows.append((n, p, r))
    if psize not in sizes:
        for p in pols:
            r = spawn({"what": "policy", "n": psize, "window": window, "p": p})
            results["policies"][p] = r
            rows.append((psize, p, r))

    hdr = (f"{'notes':>7} {'policies':>8} {'queries':>7} {'note-scores':>11} {'wall s':>7} "
           f"{'CPU s':>7} {'fixed s':>7} {'scores/s':>9} {'x kernel':>8} {'year est. s':>11} "
           f"{'peak MiB':>8}")
    print(hdr)
    print("-" * len(hdr))
    for n, what, r in rows:
        kernel = results["sizes"].get(n, {}).get("kernel")
        p = 1 if what == "kernel" else what
        scores = r["note_scores"] * p
        rate = scores / r["cpu_s"]
        ratio = "" if what == "kernel" or kernel is None else f"{r['cpu_s'] / kernel['cpu_s']:.2f}"
        fixed = r.get("fixed_cpu_s", 0.0)
        # fixed part + the rest per note-score, scaled to the whole year
        marginal = max(r["cpu_s"] - fixed, 1e-9) / max(r["note_scores"] - r.get(
            "fixed_note_scores", 0), 1)
        year = fixed + marginal * _year_note_scores(n)
        r["year_est_cpu_s"] = year
        print(f"{n:>7} {('kernel' if what == 'kernel' else p):>8} {r['n_queries']:>7} "
              f"{_fmt_n(scores):>11} {r['wall_s']:>7.2f} {r['cpu_s']:>7.2f} "
              f"{(f'{fixed:.2f}' if what != 'kernel' else ''):>7} {_fmt_n(rate):>9} "
              f"{ratio:>8} {year:>11.0f} {r['peak_mib']:>8.0f}")
    print("(CPU time drives scores/s, x kernel, the year estimate and the targets: on a shared "
          "machine wall\n time counts other processes, and single-threaded code on an idle core "
          "has CPU = wall.\n fixed s: CPU of the same run with one day of queries, the part "
          "that does not grow with\n queries; year est. = fixed + the rest per note-score x the "
          "note-scores of the whole year)")
    print()

    # --- targets -----------------------------------------------------------
    targets = []
    if 50000 in results["sizes"]:
        s = results["sizes"][50000]
        ratio = s["policy"]["cpu_s"] / s["kernel"]["cpu_s"]
        targets.append(("full policy vs fastest kernel at 50k notes (CPU, separate processes)",
                        f"{ratio:.2f}x", "<= 1.5x", ratio <= 1.5))
    else:
        targets.append(("full policy vs fastest kernel at 50k notes", "not measured", "<= 1.5x",
                        None))
    one = results["sizes"].get(psize, {}).get("policy") or results["policies"].get(1)
    for p in pols:
        if p == 1 or p not in results["policies"] or one is None:
            continue
        rel = results["policies"][p]["cpu_s"] / one["cpu_s"]
        bound = 1 + 0.3 * (p - 1)
        targets.append((f"{p} policies vs one, {psize // 1000}k notes (CPU)", f"{rel:.2f}x",
                        f"<= {bound:.1f}x", rel <= bound))
    if len(sizes) >= 2:
        xs = [results["sizes"][n]["policy"]["note_scores"] for n in sizes]
        b = fit_exponent(xs, [results["sizes"][n]["policy"]["cpu_s"] for n in sizes])
        bk = fit_exponent(xs, [results["sizes"][n]["kernel"]["cpu_s"] for n in sizes])
        targets.append((f"cost exponent in notes x queries, "
                        f"{', '.join(_fmt_n(n) for n in sizes)} (CPU)",
                        f"{b:.3f} (kernel {bk:.3f})", "<= 1.1", b <= 1.1))
        results["exponent"] = {"policy": b, "kernel": bk}
    if 200000 in results["sizes"]:
        peak = results["sizes"][200000]["policy"]["peak_mib"]
        targets.append(("peak memory at 200k notes (1 policy, incl. stream)",
                        f"{peak / 1024:.2f} GiB", "< 2 GiB", peak < 2048))
    else:
        targets.append(("peak memory at 200k notes", "not measured", "< 2 GiB", None))

    # sweep
    try:
        import memsim.sweep  # noqa: F401
        has_sweep = True
    except ImportError:
        has_sweep = False
    if not has_sweep:
        targets.append(("100-trial quickstart sweep, 2 workers",
                        "not measured: sweep module absent", "<= 1 min", None))
    elif args.no_sweep:
        targets.append(("100-trial quickstart sweep, 2 workers", "not measured (--no-sweep)",
                        "<= 1 min", None))
    else:
        sw = spawn({"what": "sweep", "trials": sweep_trials, "workers": 2,
                    "batch": args.sweep_batch, "pruner": args.sweep_pruner})
        results["sweep"] = sw
        n_tr = sw["trials"]
        med = float(np.median(sw["trial_seconds"])) if sw["trial_seconds"] else float("nan")
        if n_tr >= 100:
            est, how = sw["wall_s"], "measured wall time"
        else:
            # Two trials at a time after a fixed start (workers import memsim
            # and build the replicate streams once, trial 0, final outputs):
            # fixed = what the measured run took beyond its trials. On a
            # loaded machine the per-trial wall time also counts the other
            # processes (pessimistic); the CPU line below is an upper bound
            # that charges the whole start to each trial.
            fixed = max(0.0, sw["wall_s"] - med * n_tr / 2)
            est = fixed + med * 100 / 2
            how = (f"estimated from {n_tr} trials: start {fixed:.0f} s + median trial "
                   f"{med:.1f} s x 100 / 2 workers; CPU bound "
                   f"{sw['cpu_s'] / n_tr * 100 / 2 / 60:.1f} min")
        ok = est <= 60
        how += f"; batch {args.sweep_batch}, pruner {args.sweep_pruner}"
        targets.append(("100-trial quickstart sweep, 2 workers", f"{est:.0f} s ({how})",
                        "<= 1 min", ok))

    # feather
    try:
        import importlib.util

        has_feather = importlib.util.find_spec("feather_db") is not None
    except ImportError:  # pragma: no cover
        has_feather = False
    if not has_feather:
        targets.append(("memsim feather preset vs feather-db replay",
                        "not measured: feather-db not installed", ">= 5x faster", None))
    elif args.no_feather:
        targets.append(("memsim feather preset vs feather-db replay",
                        "not measured (--no-feather)", ">= 5x faster", None))
    else:
        fn = min(sizes[0], 10000)
        f = spawn({"what": "feather", "n": fn, "window": feather_days})
        results["feather"] = f
        eng = f["engine_ingest_cpu_s"] + f["engine_search_cpu_s"]
        sp_tick = eng / f["memsim_tick_cpu_s"]
        sp_query = eng / f["memsim_query_cpu_s"]
        targets.append((f"memsim feather preset (per-tick) vs feather-db (CPU), "
                        f"{_fmt_n(f['n_notes'])} notes, {f['n_queries']} queries",
                        f"{sp_tick:.1f}x faster (engine {eng:.1f} s = ingest "
                        f"{f['engine_ingest_cpu_s']:.1f} + search "
                        f"{f['engine_search_cpu_s']:.1f} at ef {f['ef']}; "
                        f"memsim {f['memsim_tick_cpu_s']:.1f} s)", ">= 5x", sp_tick >= 5))
        targets.append(("  same, memsim in exact per-query mode (CPU)",
                        f"{sp_query:.1f}x (memsim {f['memsim_query_cpu_s']:.1f} s)", ">= 5x",
                        sp_query >= 5))
        # The engine's cost is per note (ingest) plus per query (search);
        # memsim's per note-score: project both to the whole standard year.
        per_note = f["engine_ingest_cpu_s"] / f["n_notes"]
        per_query = f["engine_search_cpu_s"] / f["n_queries"]
        per_cell = f["memsim_tick_cpu_s"] / f["note_scores"]
        q_year = QUERIES_PER_DAY * YEAR
        eng_year = per_note * fn + per_query * q_year
        mem_year = per_cell * _year_note_scores(fn)
        # not a target: the engine's search grows sublinearly with the store,
        # memsim's exact replay with notes x queries
        targets.append((f"  per-tick, projected to the standard year ({_fmt_n(fn)} notes, "
                        f"{q_year:.0f} queries)",
                        f"{eng_year / mem_year:.1f}x (engine {eng_year:.0f} s, memsim "
                        f"{mem_year:.0f} s)", "(info)", None))

    print("Targets")
    w = max(len(t[0]) for t in targets)
    for name, value, goal, ok in targets:
        print(f"  {name:<{w}}  {goal:>14}  {_verdict(ok):>4}  {value}")
    print()
    results["targets"] = [dict(zip(("name", "value", "goal", "pass"), t)) for t in targets]
    if commands:
        results["commands"] = measure_commands(args.commands_quick)
    return _finish(results, args.json, t_start)


def _finish(results: dict, json_path: str | None, t_start: float) -> int:
    """Print the host's load at the end (and the CPU model again, so that a
    tail of the output still names its machine); write the JSON."""
    host = results["host"]
    host["load_end"] = _load()
    host["total_wall_s"] = time.perf_counter() - t_start
    print(f"load average at end: {host['load_end']} (start {host['load_start']}); total wall "
          f"time {host['total_wall_s']:.0f} s; host {host['cpu_model']}, "
          f"{host['cores_usable']} cores usable")
    if json_path:
        _write_json(Path(json_path), results)
    return 0


def _write_json(path: Path, results: dict) -> None:
    """Write to a temporary name, then rename: never a half-written file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
