"""Write ``superseded.jsonl``: a small memory-layer trace whose facts get superseded.

A memory layer that appends instead of updating: when a fact changes (the
user's preferred test runner, a deadline), the new version is added as a new
note that names the one it replaces (``"supersedes"``), and the old note stays
in the store, where a ranking can still return it. Each query's relevance is
logged as ``judgement`` events: the current version has gain 1, older valid
notes 0.5, and superseded ones -0.5 (they mislead).

The workload is a memsim synthetic stream (60 days of backfill, 60 days of
queries, 8-dimension embeddings) with more superseding facts than the
default world (half of the notes and of the questions), so that what decay and
invalidation do to stale notes shows in a few hundred queries. Deterministic:
run it again and the file is the same.

    python experiments/traces/make_superseded.py     # writes next to this file
    memsim run experiments/invalidation.toml \\
        --set workload.source=traces/superseded.jsonl --set workload.importer=trace
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from memsim.data.importers.trace import write_trace
from memsim.data.workload import SyntheticWorkload

HERE = Path(__file__).resolve().parent


def predecessors(notes) -> dict[int, int]:
    """note_id -> the note_id it supersedes: the previous version of its slot
    (the superseding class: a version's ``valid_until`` is its successor's
    creation time)."""
    sup = notes[notes["note_class"] == "superseding"].sort_values(["slot", "created_at",
                                                                   "note_id"])
    out = {}
    for _, grp in sup.groupby("slot", sort=False):
        ids = grp["note_id"].to_numpy()
        for old, new in zip(ids[:-1], ids[1:]):
            out[int(new)] = int(old)
    return out


def main(out: Path) -> Path:
    wl = SyntheticWorkload.from_config({
        "horizon_days": 60, "backfill_days": 60, "notes_per_day": 5, "queries_per_day": 4,
        "embedding_dim": 8,
        "classes": {"superseding": {"share": 0.5, "query_share": 0.5, "interval_days": 10.0}},
    }, "workload")
    stream = wl.generate(20261202)
    pred = predecessors(stream.notes)
    stream = type(stream)(notes=stream.notes, queries=stream.queries, qrels=stream.qrels,
                          accesses=stream.accesses,
                          note_embeddings=np.round(stream.note_embeddings, 3),
                          query_embeddings=np.round(stream.query_embeddings, 3),
                          meta=stream.meta)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_trace(stream, Path(tmp) / "trace.jsonl", embeddings=True,
                           relevance="judgement",
                           header={"name": "superseded", "source": "memsim synthetic workload, "
                                   "logged by experiments/traces/make_superseded.py"})
        lines = [json.loads(x) for x in path.read_text().splitlines()]
    for ev in lines:  # shorter floats in the file; the supersession links
        for key in ("t", "expires_at"):
            if isinstance(ev.get(key), float):
                ev[key] = round(ev[key], 5)
        if "embedding" in ev:
            ev["embedding"] = [round(x, 3) for x in ev["embedding"]]
        if ev["event"] == "note_added" and ev["id"] in pred:
            ev["supersedes"] = pred[ev["id"]]
    out.write_text("".join(json.dumps(ev) + "\n" for ev in lines), encoding="utf-8")
    return out


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "superseded.jsonl"
    print(main(target))
