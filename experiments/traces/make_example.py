"""Write ``example.jsonl``: a small memory-layer trace (format version 1).

The workload is a memsim synthetic stream (30 days of backfill, 30 days of
queries, 8-dimension embeddings). The "production system" being logged is a
plain vector store: for each query it returns the 8 live notes most similar
by cosine (``retrieved``, with their scores), and the answer cites those of
its first 5 that the planted truth marks relevant (``used``). A few notes are
then updated and deleted, to show those events. Deterministic: run it again
and the file is the same.

    python experiments/traces/make_example.py     # writes next to this file
    memsim stream import trace experiments/traces/example.jsonl --out /tmp/example
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from memsim.data.importers.trace import write_trace
from memsim.data.workload import SyntheticWorkload

HERE = Path(__file__).resolve().parent
RETURNED, CITED = 8, 5


def logged_rankings(stream) -> pd.DataFrame:
    """Top-8 live notes by cosine for every query: what the logged system returned."""
    notes, queries = stream.notes, stream.queries
    ne, qe = stream.note_embeddings.astype(np.float64), stream.query_embeddings.astype(np.float64)
    cos = (qe @ ne.T) / np.outer(np.linalg.norm(qe, axis=1), np.linalg.norm(ne, axis=1))
    live = notes["created_at"].to_numpy()[None, :] <= queries["t"].to_numpy()[:, None]
    cos = np.where(live, cos, -np.inf)
    rows = []
    for qi, qid in enumerate(queries["query_id"]):
        order = np.lexsort((notes["note_id"].to_numpy(), -cos[qi]))[:RETURNED]
        for rank, ni in enumerate(order[np.isfinite(cos[qi, order])], start=1):
            rows.append((int(qid), rank, int(notes["note_id"].iat[ni]), round(float(cos[qi, ni]), 4)))
    return pd.DataFrame(rows, columns=["query_id", "rank", "note_id", "score"])


def main(out: Path) -> Path:
    wl = SyntheticWorkload(horizon_days=30, backfill_days=30, notes_per_day=3, queries_per_day=2,
                           embedding_dim=8)
    stream = wl.generate(20260101)
    retrieved = logged_rankings(stream)
    # used = the cited notes: relevant ones among the first CITED returned
    rel = stream.qrels[stream.qrels["gain"] > 0][["query_id", "note_id"]]
    cited = retrieved[retrieved["rank"] <= CITED].merge(rel, on=["query_id", "note_id"])
    qrels = cited.assign(gain=1.0)[["query_id", "note_id", "gain"]]
    # round embeddings so that the example stays small and readable
    stream = type(stream)(notes=stream.notes, queries=stream.queries, qrels=qrels,
                          accesses=stream.accesses,
                          note_embeddings=np.round(stream.note_embeddings, 3),
                          query_embeddings=np.round(stream.query_embeddings, 3),
                          meta=stream.meta)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_trace(stream, Path(tmp) / "trace.jsonl", embeddings=True, relevance="used",
                           retrieved=retrieved,
                           header={"name": "example", "source": "memsim synthetic workload, "
                                   "logged by experiments/traces/make_example.py"})
        lines = [json.loads(x) for x in path.read_text().splitlines()]
    for ev in lines:  # shorter floats in the file
        for key in ("t", "expires_at"):
            if isinstance(ev.get(key), float):
                ev[key] = round(ev[key], 5)
        if "embedding" in ev:
            ev["embedding"] = [round(x, 3) for x in ev["embedding"]]
    # two updates and a deletion after the last query: they show the events
    # without changing what any query saw
    end = max(ev["t"] for ev in lines if "t" in ev) + 1.0
    added = [ev for ev in lines if ev["event"] == "note_added"][:3]
    lines.append({"event": "note_updated", "id": added[0]["id"], "t": end, "importance": 2.0})
    lines.append({"event": "note_updated", "id": added[1]["id"], "t": end, "tokens": 40,
                  "embedding": added[1]["embedding"]})
    lines.append({"event": "note_deleted", "id": added[2]["id"], "t": end + 0.5})
    out.write_text("".join(json.dumps(ev) + "\n" for ev in lines), encoding="utf-8")
    return out


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "example.jsonl"
    print(main(target))
