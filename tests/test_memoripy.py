"""The ``memoripy`` preset against memoripy's real ``MemoryStore.retrieve``.

The real store (memoripy 0.1.2, ``memoripy/memory_store.py``) is given
the stream's vectors in place of an embedder and its module's
``time.time()`` reads the stream's clock, so no model, LLM or network is
called; the query concepts are empty (they are what memoripy's LLM
extracts). memsim replays the same stream through the preset with every
candidate kept (memoripy returns every interaction that reaches the
threshold; the preset keeps the first 3), and each query's whole returned
list is compared: the same notes, in the same order, with the same scores.

This drives the store directly, not through ``memsim engine-check
memoripy`` (whose replay shares memsim's stream handling and compares the
top 3), over streams with bursts of queries at one instant, exact ties,
notes recalled past memoripy's long-term promotion, and pauses long
enough for the compounding factor to silence what was returned before.

memoripy pins old numpy, scipy, scikit-learn and langchain releases:
install it with ``pip install --no-deps memoripy==0.1.2`` (what
``MemoryStore`` needs, numpy, faiss-cpu, networkx and scikit-learn, is
memsim's or its extras'; the package's ``__init__`` also imports pydantic
and langchain-core).
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import types

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("memoripy", reason="memoripy is not installed (pip install --no-deps "
                    "memoripy==0.1.2: its pinned dependencies would downgrade numpy, scipy, "
                    "scikit-learn and langchain-core)")

from memoripy import memory_store  # noqa: E402

from memsim.checks.engine_check import replay_memsim  # noqa: E402
from memsim.data.stream import make_stream  # noqa: E402
from memsim.policies import resolve_policy  # noqa: E402

DAY = 86400.0
EPOCH = 1_700_000_000.0  # the real store's clock at the stream's time 0
ALL = 10_000  # candidates: every note the threshold lets through


@functools.lru_cache(maxsize=None)
def _stream(seed: int, n: int = 90, q: int = 160, dim: int = 12):
    """Notes every 20-90 s in three sessions 2 h apart (memoripy's factor
    loses ~51% over a 2-h gap, and compounds it at every call, so a pause
    silences most of what was returned), queries at whole seconds within
    5 minutes of a note, most about one of the latest notes, about one in
    eight in the same second as the query before (a burst), some about an
    old note or nothing; one note duplicates another's vector and creation
    time (an exact tie)."""
    rng = np.random.default_rng(seed)
    gaps = rng.integers(20, 91, n)
    gaps[n // 3] += 7200
    gaps[2 * n // 3] += 7200
    created = np.cumsum(gaps)
    centres = rng.normal(size=(8, dim))
    emb = centres[rng.integers(0, 8, n)] + 0.45 * rng.normal(size=(n, dim))
    twin = n // 2
    emb[twin + 1], created[twin + 1] = emb[twin], created[twin]
    qs: list[int] = []
    while len(qs) < q:
        if qs and rng.random() < 0.125:
            qs.append(qs[-1])  # a burst: another call at the same instant
        else:
            s = int(created[rng.integers(0, n)] + rng.integers(1, 300))
            qs.append(s if s not in set(created.tolist()) else s + 1)
    qt = np.sort(np.array(qs))
    src, qemb = np.zeros(q, np.int64), np.zeros((q, dim))
    for j, s in enumerate(qt):
        seen = np.flatnonzero(created < s)
        u = rng.random()
        if u < 0.7:  # about one of the latest notes
            src[j] = rng.choice(seen[-10:])
            qemb[j] = emb[src[j]] + 0.25 * rng.normal(size=dim)
        elif u < 0.85:  # an older one
            src[j] = rng.choice(seen)
            qemb[j] = emb[src[j]] + 0.25 * rng.normal(size=dim)
        else:  # about nothing stored
            src[j] = seen[-1]
            qemb[j] = rng.normal(size=dim)
    notes = pd.DataFrame({"note_id": np.arange(n), "created_at": created / DAY,
                          "tokens": rng.integers(20, 200, n), "actor": "u"})
    queries = pd.DataFrame({"query_id": np.arange(q), "t": qt / DAY, "actor": "u"})
    qrels = pd.DataFrame({"query_id": np.arange(q), "note_id": src, "gain": 1.0})
    return make_stream(notes, queries, qrels, None, emb.astype(np.float32),
                       qemb.astype(np.float32), {"name": f"memoripy-{seed}"})


@contextlib.contextmanager
def _clock(start: float):
    """memory_store's ``time.time()`` reads ``clock["now"]`` (restored after)."""
    clock = {"now": start}
    saved = memory_store.time
    memory_store.time = types.SimpleNamespace(time=lambda: clock["now"])
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints a line per interaction
            yield clock
    finally:
        memory_store.time = saved


@functools.lru_cache(maxsize=None)
def _real(seed: int, threshold: float = 40.0):
    """Each query's (note ids, total scores) from the real store, every
    interaction that reached the threshold, in its order, and the store at
    the end. Notes are added as ``MemoryManager.add_interaction`` adds them
    (access count 1, factor 1, no concepts), each before the first query
    after its creation."""
    stream = _stream(seed)
    emb = np.asarray(stream.note_embeddings, dtype=np.float64)
    qemb = np.asarray(stream.query_embeddings, dtype=np.float64)
    created = np.round(stream.notes["created_at"].to_numpy() * DAY).astype(np.int64)
    ids = stream.notes["note_id"].to_numpy(np.int64)
    qt = np.round(stream.queries["t"].to_numpy() * DAY).astype(np.int64)
    store = memory_store.MemoryStore(dimension=emb.shape[1])
    got, added = [], 0
    with _clock(EPOCH) as clock:
        for j, s in enumerate(qt.tolist()):
            while added < len(ids) and created[added] < s:
                store.add_interaction({"id": int(ids[added]), "prompt": f"n{added}", "output": "",
                                       "embedding": emb[added].tolist(),
                                       "timestamp": EPOCH + float(created[added]),
                                       "access_count": 1, "concepts": [], "decay_factor": 1.0})
                added += 1
            clock["now"] = EPOCH + float(s)
            out = store.retrieve(qemb[j].reshape(1, -1), [], similarity_threshold=threshold)
            got.append((np.array([x["id"] for x in out], np.int64),
                        np.array([x["total_score"] for x in out], np.float64)))
    return got, store


@functools.lru_cache(maxsize=None)
def _memsim(seed: int, **ranker):
    """Each query's (note ids, scores) from the preset, every candidate kept."""
    pol = resolve_policy({"preset": "memoripy", "candidates": ALL,
                          **({"ranker": ranker} if ranker else {})}, "m")
    ids, scores, _ = replay_memsim(_stream(seed), pol, ALL, arm="memoripy")
    return list(zip(ids, scores))


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_preset_returns_what_the_real_store_returns(seed):
    stream = _stream(seed)
    real, store = _real(seed)
    mine = _memsim(seed)
    assert len(real) == len(mine) == len(stream.queries)
    for j, ((a_ids, a_s), (b_ids, b_s)) in enumerate(zip(real, mine)):
        assert a_ids.tolist() == b_ids.tolist(), f"query {j}: {a_ids} != {b_ids}"
        np.testing.assert_allclose(b_s, a_s, rtol=2e-6, err_msg=f"query {j}")
    # the streams reach what the comparison is for
    n_out = np.array([len(x) for x, _ in real])
    assert (n_out > 0).mean() > 0.5          # most queries are answered,
    assert (n_out == 0).sum() >= 5           # some are not,
    assert (n_out > 3).sum() >= 5            # some return more than the preset's 3
    assert max(store.access_counts) > 11     # some notes go past the long-term promotion
    assert len(store.long_term_memory) > 0   # (a list retrieve never reads)
    qt = stream.queries["t"].to_numpy()
    burst = np.flatnonzero(np.diff(qt) == 0) + 1
    assert any(len(real[j][0]) for j in burst)  # calls at one instant, answered
    # the factor compounded over the pauses: most notes' is below 1%
    f = np.array([x["decay_factor"] for x in store.short_term_memory])
    assert (f < 0.01).mean() > 0.5


def test_a_tie_is_broken_by_insertion_order_on_both_sides():
    # memoripy's stable sort keeps the insertion order; memsim breaks a
    # tie by the lower note id, the order the notes were added in
    twin = _stream(3).n_notes // 2
    real, _ = _real(3)
    mine = _memsim(3)
    both = [j for j, (ids, _) in enumerate(real) if twin in ids and twin + 1 in ids]
    assert both, "the tied pair was never returned"
    for j in both:
        (a_ids, a_s), (b_ids, b_s) = real[j], mine[j]
        p = a_ids.tolist().index(twin)
        assert a_ids[p + 1] == twin + 1 and a_s[p] == a_s[p + 1]
        assert b_ids.tolist() == a_ids.tolist() and b_s[p] == b_s[p + 1]


def test_near_misses_return_other_notes_than_the_real_store():
    """The comparison tells the real code apart from near misses: no
    boost or fade, no fade, a threshold of 39, twice the decay rate."""
    real_ids = [ids.tolist() for ids, _ in _real(4)[0]]
    for ranker in ({"boost": 1.0, "fade": 1.0}, {"fade": 1.0}, {"threshold": 39.0},
                   {"decay_rate_per_s": 2e-4}):
        other = [ids.tolist() for ids, _ in _memsim(4, **ranker)]
        assert other != real_ids, ranker


def test_threshold_is_the_real_keyword():
    """``threshold`` is ``similarity_threshold``: another value moves both sides alike."""
    real, _ = _real(5, threshold=55.0)
    mine = _memsim(5, threshold=55.0)
    assert [x.tolist() for x, _ in real] == [x.tolist() for x, _ in mine]
    assert sum(len(x) for x, _ in real) < sum(len(x) for x, _ in _real(5)[0])


def test_a_store_with_clusters_returns_what_the_preset_cannot():
    """The parting documented in docs/guides/frameworks.md: once
    ``cluster_interactions`` has run (``MemoryManager`` runs it when it loads
    a stored history), ``retrieve`` appends up to 5 interactions of the
    cluster nearest the query whatever their score, and counts an access
    for each. The preset models the store as it starts, without clusters."""
    rng = np.random.default_rng(0)
    store = memory_store.MemoryStore(dimension=4)
    with _clock(EPOCH) as clock:
        for i in range(6):
            store.add_interaction({"id": i, "prompt": "", "output": "",
                                   "embedding": rng.normal(size=4).tolist(), "timestamp": EPOCH})
        clock["now"] = EPOCH + 30 * DAY  # every factor ~0: nothing reaches the threshold
        assert store.retrieve(rng.normal(size=(1, 4)), []) == []
        store.cluster_interactions()
        out = store.retrieve(rng.normal(size=(1, 4)), [])
    assert len(out) >= 1 and all("total_score" not in x for x in out)  # none scored
    assert sum(store.access_counts) == 6 + len(out)


def test_preset_constants_are_the_sources():
    r = resolve_policy({"preset": "memoripy"}, "m").ranker
    assert (r.threshold, r.decay_rate_per_s, r.boost, r.fade) == (40.0, 1e-4, 1.1, 0.9)
    # a note identical to the query is first returned within 1.53 h of being stored
    s = -math.log(40.0 / (100.0 * math.log(2.0))) / 1e-4
    assert 1.52 * 3600 < s < 1.53 * 3600
