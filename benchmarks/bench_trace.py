"""Peak memory of importing a large memory-layer trace (a script, not a test).

Writes a deterministic trace of 2 million events (1 million ``note_added``
with 16-dimension embeddings; 333,333 ``query`` events, each followed by a
``retrieved`` list of 10 notes with scores and a ``used`` pair), then imports
it in a fresh process under ``/usr/bin/time -v`` and prints the wall time and
the peak resident memory against the 1 GiB target::

    python benchmarks/bench_trace.py [--notes 1000000] [--keep PATH]

About 450 MB of JSON are written to a temporary folder (or ``--keep``).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

TARGET_KB = 1024 * 1024  # 1 GiB


def write_trace(path: Path, n_notes: int, dim: int = 16, seed: int = 0) -> int:
    """Write the trace; return its number of events (header excluded)."""
    rng = np.random.default_rng(seed)
    n_queries = n_notes // 3
    actors = [f"agent-{i}" for i in range(8)]
    emb = rng.standard_normal((n_notes, dim)).astype(np.float32)
    qemb = rng.standard_normal((n_queries, dim)).astype(np.float32)
    who = rng.integers(0, len(actors), n_notes + n_queries)
    tokens = rng.integers(1, 500, n_notes)
    events = 0
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps({"event": "header", "format": "memsim-trace", "version": 1,
                             "time_unit": "second"}) + "\n")
        nid, q, t = 0, 0, 0.0
        while nid < n_notes or q < n_queries:
            for _ in range(12 if q == 0 else 3):  # notes first, then interleaved
                if nid < n_notes:
                    t += 1.0
                    fh.write(json.dumps({
                        "event": "note_added", "id": nid, "t": t, "actor": actors[who[nid]],
                        "tokens": int(tokens[nid]),
                        "embedding": [round(float(x), 6) for x in emb[nid]]}) + "\n")
                    nid += 1
                    events += 1
            if q < n_queries:
                t += 0.5
                fh.write(json.dumps({
                    "event": "query", "id": q, "t": t, "actor": actors[who[n_notes + q]],
                    "embedding": [round(float(x), 6) for x in qemb[q]]}) + "\n")
                ids = rng.choice(nid, 10, replace=False)
                scores = np.sort(rng.random(10))[::-1]
                fh.write(json.dumps({"event": "retrieved", "query": q,
                                     "notes": [int(x) for x in ids],
                                     "scores": [round(float(s), 6) for s in scores]}) + "\n")
                fh.write(json.dumps({"event": "used", "query": q,
                                     "notes": [int(x) for x in ids[:2]]}) + "\n")
                q += 1
                events += 3
    return events


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notes", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, default=None, help="write the trace here and keep it")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "trace.jsonl"
        events = write_trace(path, args.notes)
        size_mb = path.stat().st_size / 1e6
        code = ("from memsim.data.importers.trace import import_trace; "
                f"import_trace({str(path)!r})")
        res = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-c", code],
                             capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(res.stderr[-2000:])
        peak = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", res.stderr)[1])
        wall = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", res.stderr)[1]
    verdict = "PASS" if peak < TARGET_KB else "MISS"
    print(f"{events:,} events, {size_mb:.0f} MB of JSON: import took {wall} (wall), "
          f"peak {peak:,} KB ({peak / TARGET_KB:.2f} GiB) -> {verdict} (target < 1 GiB)")


if __name__ == "__main__":
    main()
