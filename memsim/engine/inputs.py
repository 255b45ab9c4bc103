"""Stream encoding: the stream as arrays shared by every arm."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memsim.evaluation.metrics import RelevanceIndex
from memsim.data.stream import LoggedRankings, Stream
from .state import NoteArrays, text_codes, distinct_texts


@dataclass(frozen=True, eq=False)
class _Inputs:
    """The stream as arrays, shared by every arm (rows in stream order)."""

    notes: NoteArrays
    actor_names: list[str]
    relevance: RelevanceIndex
    qt: np.ndarray
    qactor: np.ndarray
    qemb: np.ndarray
    qnorm2: np.ndarray
    qns: np.ndarray | None
    qbudget: np.ndarray
    acc_t: np.ndarray
    acc_rows: np.ndarray
    acc_actor: np.ndarray
    #: the stream's logged rankings (its optional ``retrieved`` table), or None
    logged: LoggedRankings | None = None
    #: each query's category (as text; by row), or None: the queries'
    #: ``category`` column, else the synthetic class asked (``note_class``)
    qcategory: np.ndarray | None = None


def _inputs(stream: Stream) -> _Inputs:
    """Encode the stream: actor and namespace codes, note arrays, query
    vectors, the per-query budget column (NaN where unset), the organic uses."""
    queries = stream.queries
    actor_names = sorted(distinct_texts(stream.notes["actor"]) | distinct_texts(queries["actor"])
                         | distinct_texts(stream.accesses["actor"]))
    actor_codes = {a: i for i, a in enumerate(actor_names)}
    ns_codes = None
    if "namespace" in stream.notes and "namespace" in queries:
        ns_names = sorted(distinct_texts(stream.notes["namespace"]) | distinct_texts(queries["namespace"]))
        ns_codes = {x: i for i, x in enumerate(ns_names)}
    notes = NoteArrays.from_stream(stream, actor_codes, ns_codes)
    qemb = np.ascontiguousarray(stream.query_embeddings, dtype=np.float32)
    note_row = {int(nid): i for i, nid in enumerate(notes.note_id)} if len(
        stream.accesses) else {}
    return _Inputs(
        notes=notes,
        actor_names=actor_names,
        relevance=RelevanceIndex(stream, notes.created_at),
        qt=queries["t"].to_numpy(np.float64),
        qactor=text_codes(queries["actor"], actor_codes),
        qemb=qemb,
        qnorm2=np.einsum("ij,ij->i", qemb, qemb, dtype=np.float64),
        qns=None if ns_codes is None else text_codes(queries["namespace"], ns_codes),
        qbudget=(queries["budget_tokens"].to_numpy(np.float64)
                 if "budget_tokens" in queries else np.full(len(queries), np.nan)),
        acc_t=stream.accesses["t"].to_numpy(np.float64),
        acc_rows=np.array([note_row[int(x)] for x in stream.accesses["note_id"]],
                          dtype=np.int64),
        acc_actor=text_codes(stream.accesses["actor"], actor_codes),
        logged=(LoggedRankings(stream) if getattr(stream, "retrieved", None) is not None
                else None),
        qcategory=next((queries[c].astype(str).to_numpy(dtype=object)
                        for c in ("category", "note_class") if c in queries), None),
    )
