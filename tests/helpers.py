"""Small hand-built streams for engine and metric tests, and the switch of
the compiled kernels."""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pandas as pd

from memsim.core import jit
from memsim.data.stream import make_stream


@contextlib.contextmanager
def numba_kernels(on: bool):
    """The compiled kernels on or off (``MEMSIM_NUMBA``) within the block."""
    old = os.environ.get(jit.ENV)
    os.environ[jit.ENV] = "1" if on else "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ[jit.ENV]
        else:
            os.environ[jit.ENV] = old


def tiny_stream(*, created, tokens, note_vecs, queries, qrels, actors=None, query_actors=None,
                accesses=None, extra_notes=None, **meta):
    """Build a stream from plain lists.

    ``queries`` is a list of (t, vector); ``qrels`` a list of
    (query_index, note_index, gain). Note ids are 0..n-1, query ids 0..m-1.
    """
    n = len(created)
    notes = pd.DataFrame({
        "note_id": np.arange(n, dtype=np.int64),
        "created_at": np.asarray(created, dtype=float),
        "tokens": np.asarray(tokens, dtype=np.int64),
        "actor": actors if actors is not None else ["a0"] * n,
    })
    for k, v in (extra_notes or {}).items():
        notes[k] = v
    q = pd.DataFrame({
        "query_id": np.arange(len(queries), dtype=np.int64),
        "t": [float(t) for t, _ in queries],
        "actor": query_actors if query_actors is not None else ["a0"] * len(queries),
    })
    qr = pd.DataFrame(qrels, columns=["query_id", "note_id", "gain"]) if qrels else pd.DataFrame(
        {"query_id": pd.Series(dtype="int64"), "note_id": pd.Series(dtype="int64"),
         "gain": pd.Series(dtype="float64")})
    ne = np.asarray(note_vecs, dtype=np.float32)
    qe = np.asarray([v for _, v in queries], dtype=np.float32).reshape(len(queries), ne.shape[1])
    return make_stream(notes, q, qr, accesses, ne, qe, {"name": "tiny", **meta})


def random_stream(seed: int = 0, n_notes: int = 300, n_queries: int = 60, dim: int = 8,
                  horizon: float = 30.0, accesses: int = 0):
    """A random stream with a few qrels per query (for engine invariants),
    and ``accesses`` organic uses of notes already created (drawn last: the
    rest of the stream does not depend on them)."""
    rng = np.random.default_rng(seed)
    created = np.sort(rng.uniform(-horizon, horizon, n_notes))
    notes = pd.DataFrame({
        "note_id": np.arange(n_notes, dtype=np.int64),
        "created_at": created,
        "tokens": rng.integers(10, 600, n_notes),
        "actor": rng.choice(["a0", "a1", "a2"], n_notes),
    })
    qt = np.sort(rng.uniform(0, horizon, n_queries))
    queries = pd.DataFrame({"query_id": np.arange(n_queries, dtype=np.int64), "t": qt,
                            "actor": rng.choice(["a0", "a1"], n_queries)})
    rows = []
    for qi, t in enumerate(qt):
        existing = np.flatnonzero(created <= t)
        if len(existing) == 0:
            continue
        for ni in rng.choice(existing, size=min(4, len(existing)), replace=False):
            rows.append((qi, int(ni), float(rng.choice([1.0, 0.5, -0.5]))))
    qrels = pd.DataFrame(rows, columns=["query_id", "note_id", "gain"])
    ne = rng.normal(size=(n_notes, dim)).astype(np.float32)
    qe = rng.normal(size=(n_queries, dim)).astype(np.float32)
    used = None
    if accesses:
        at = np.sort(rng.uniform(0, horizon, accesses))
        used = pd.DataFrame({"t": at, "note_id": [int(rng.integers(0, max(1, (created <= x).sum())))
                                                  for x in at],
                             "actor": rng.choice(["a0", "a1", "a2"], accesses)})
    return make_stream(notes, queries, qrels, used, ne, qe, {"name": "random"})


#: A one-policy experiment file that runs in a few seconds (tests of the
#: command line and of run folders add their own tables after it).
TINY_TOML = """\
[experiment]
name = "tiny"
seed = 7
replicates = 1
[workload]
horizon_days = 5
backfill_days = 10
[policies.a]
preset = "hivemind-2025-bug"
"""
