"""Note streams: the in-memory :class:`Stream` and the on-disk format (version 1).

A stream is everything a simulation replays: notes with their creation times
and sizes, queries with their times and actors, graded ground truth (qrels),
optional organic accesses and optional embeddings. The on-disk layout is fixed
by DESIGN.md section 3.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "Stream",
    "make_stream",
    "NOTE_DEFAULTS",
    "FORMAT_NAME",
    "FORMAT_VERSION",
]

FORMAT_NAME = "memsim-stream"
FORMAT_VERSION = 1

#: Optional note columns and their defaults (DESIGN.md section 3).
NOTE_DEFAULTS: dict[str, Any] = {
    "tier": "task",
    "importance": 1.0,
    "salience": 1.0,
    "memory_type": "episodic",
    "pinned": False,
    "expires_at": np.nan,
}


@dataclass(frozen=True, eq=False)
class Stream:
    """A replayable workload, validated and in canonical form.

    Attributes
    ----------
    notes : DataFrame
        One row per note, sorted by ``note_id``; row ``i`` is row ``i`` of
        ``note_embeddings``. Required columns ``note_id`` (int64),
        ``created_at`` (float64 days, may be negative), ``tokens`` (int64 > 0),
        ``actor`` (str); optional columns are filled from
        :data:`NOTE_DEFAULTS`. Extra columns (a synthetic workload's
        ``note_class``, ``topic``, ``slot``) are kept and ignored by the engine.
    queries : DataFrame
        ``query_id`` (int64), ``t`` (float64 days), ``actor`` (str), optional
        ``budget_tokens``; sorted by ``(t, query_id)``; row ``i`` is row ``i``
        of ``query_embeddings``.
    qrels : DataFrame
        ``query_id``, ``note_id``, ``gain`` (float, non-zero).
    accesses : DataFrame
        Organic reads ``t``, ``note_id``, ``actor`` (possibly empty).
    note_embeddings, query_embeddings : ndarray or None
        float32 arrays, one row per note / query.
    meta : dict
        ``name``, ``source`` and free-form provenance.
    """

    notes: pd.DataFrame
    queries: pd.DataFrame
    qrels: pd.DataFrame
    accesses: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(
            {"t": pd.Series(dtype="float64"), "note_id": pd.Series(dtype="int64"),
             "actor": pd.Series(dtype="object")}
        )
    )
    note_embeddings: np.ndarray | None = None
    query_embeddings: np.ndarray | None = None
    meta: dict = field(default_factory=dict)

    @property
    def n_notes(self) -> int:
        return len(self.notes)

    @property
    def n_queries(self) -> int:
        return len(self.queries)

    @property
    def embedding_dim(self) -> int | None:
        return None if self.note_embeddings is None else int(self.note_embeddings.shape[1])

    @property
    def name(self) -> str:
        return str(self.meta.get("name", "stream"))


def make_stream(
    notes: pd.DataFrame,
    queries: pd.DataFrame,
    qrels: pd.DataFrame,
    accesses: pd.DataFrame | None = None,
    note_embeddings: np.ndarray | None = None,
    query_embeddings: np.ndarray | None = None,
    meta: dict | None = None,
) -> Stream:
    """Build a canonical :class:`Stream` from frames: fill optional columns with
    their defaults, sort notes by ``note_id`` and queries by ``(t, query_id)``
    (embedding rows follow their rows), and cast dtypes.
    """
    notes = notes.copy()
    for col, default in NOTE_DEFAULTS.items():
        if col not in notes.columns:
            notes[col] = default
    order = np.argsort(notes["note_id"].to_numpy(), kind="stable")
    notes = notes.iloc[order].reset_index(drop=True)
    if note_embeddings is not None:
        note_embeddings = np.ascontiguousarray(note_embeddings[order], dtype=np.float32)
    notes = notes.astype({"note_id": "int64", "created_at": "float64", "tokens": "int64",
                          "importance": "float64", "salience": "float64", "pinned": "bool",
                          "expires_at": "float64"})
    queries = queries.copy()
    qorder = np.lexsort((queries["query_id"].to_numpy(), queries["t"].to_numpy()))
    queries = queries.iloc[qorder].reset_index(drop=True)
    queries = queries.astype({"query_id": "int64", "t": "float64"})
    if query_embeddings is not None:
        query_embeddings = np.ascontiguousarray(query_embeddings[qorder], dtype=np.float32)
    qrels = qrels.astype({"query_id": "int64", "note_id": "int64", "gain": "float64"})
    qrels = qrels.sort_values(["query_id", "note_id"], kind="stable").reset_index(drop=True)
    if accesses is None:
        accesses = Stream.__dataclass_fields__["accesses"].default_factory()  # type: ignore[misc]
    else:
        accesses = accesses.astype({"t": "float64", "note_id": "int64"})
        accesses = accesses.sort_values(["t", "note_id"], kind="stable").reset_index(drop=True)
    return Stream(notes=notes, queries=queries, qrels=qrels, accesses=accesses,
                  note_embeddings=note_embeddings, query_embeddings=query_embeddings,
                  meta=dict(meta or {}))
