"""The approximate retrievers' maintained indexes (``hnsw``, ``ivf``) and the
recall loss a run reports."""

from __future__ import annotations

import importlib.util

import numpy as np
import pandas as pd
import pytest

from memsim.runs.config import resolve_policy
from memsim.engine import Arm, ReplayCache, SimSettings, reference, simulate
from memsim.engine.ann import OVERLAP_QUERIES, overlap_sample
from memsim.engine.batch import Batch, make_batches
from memsim.engine.context import BatchContext
from memsim.engine.inputs import _inputs
from memsim.engine.state import PolicyState
from memsim.policies.base import Retriever
from memsim.policies.retrieval import HNSW, IVF, Cosine
from memsim.core.rng import seed_sequence
from memsim.data.stream import make_stream

from .helpers import random_stream

from memsim.policies import retrieval  # noqa: E402

needs_hnswlib = pytest.mark.skipif(importlib.util.find_spec("hnswlib") is None,
                                   reason="hnswlib is not installed (pip install -e '.[ann]')")
needs_faiss = pytest.mark.skipif(importlib.util.find_spec("faiss") is None,
                                 reason="faiss-cpu is not installed (pip install -e '.[ann]')")


def approximate(kind, prefilter, **build):
    """A retriever of ``kind`` that misses neighbours on the test streams
    (``wide``: one that searches exhaustively, the exact nearest M)."""
    if kind == "hnsw":
        return HNSW(prefilter=prefilter, ef=8, **build)
    return IVF(prefilter=prefilter, nlist=16, nprobe=2, train_size=300, **build)


def wide(kind, prefilter):
    if kind == "hnsw":
        return HNSW(prefilter=prefilter, ef=5000)
    return IVF(prefilter=prefilter, nlist=16, nprobe=16, train_size=300)


KINDS = [pytest.param("hnsw", marks=needs_hnswlib), pytest.param("ivf", marks=needs_faiss)]


def shuffled_stream(seed=0, n_notes=1500, n_queries=120, dim=8, expire=0.2):
    """A random stream whose creation order is not the ``note_id`` order and
    some of whose notes expire: the index's labels are then neither the rows
    nor the batches' columns."""
    s = random_stream(seed, n_notes=n_notes, n_queries=n_queries, dim=dim)
    rng = np.random.default_rng(seed + 1)
    notes = s.notes.copy()
    notes["created_at"] = rng.permutation(notes["created_at"].to_numpy())
    notes["updated_at"] = notes["created_at"]
    life = rng.uniform(1.0, 20.0, n_notes)
    notes["expires_at"] = np.where(rng.random(n_notes) < expire,
                                   notes["created_at"].to_numpy() + life, np.nan)
    created = notes["created_at"].to_numpy()
    qrels = s.qrels.merge(pd.DataFrame({"note_id": notes["note_id"], "c": created}),
                          on="note_id")
    t = s.queries.set_index("query_id")["t"]
    qrels = qrels[qrels["c"] <= t.reindex(qrels["query_id"]).to_numpy()].drop(columns="c")
    return make_stream(notes, s.queries, qrels, s.accesses, s.note_embeddings,
                       s.query_embeddings, s.meta)


def window_stream(seed=0, n_notes=1500, n_queries=120, dim=8, life=15.0):
    """A random stream whose notes all expire ``life`` days after their
    creation, in row order: every batch holds a window of consecutive rows
    that does not start at the first."""
    s = random_stream(seed, n_notes=n_notes, n_queries=n_queries, dim=dim)
    notes = s.notes.copy()
    notes["expires_at"] = notes["created_at"] + life
    t = s.queries.set_index("query_id")["t"]
    live = notes.set_index("note_id")["expires_at"]
    qrels = s.qrels[live.reindex(s.qrels["note_id"]).to_numpy()
                    > t.reindex(s.qrels["query_id"]).to_numpy()]
    return make_stream(notes, s.queries, qrels, s.accesses, s.note_embeddings,
                       s.query_embeddings, s.meta)


def contexts(stream, tick=2.0):
    """A context per batch of the stream, in order (one state, nothing evicted)."""
    inp = _inputs(stream)
    st = PolicyState(inp.notes, len(inp.actor_names))
    for rows, t0 in make_batches(inp.qt, tick):
        batch = Batch(qrows=rows, t=inp.qt[rows], actors=inp.qactor[rows], notes=inp.notes,
                      qemb=inp.qemb[rows], qnorm2=inp.qnorm2[rows], relevance=inp.relevance,
                      t0=t0)
        ctx = BatchContext(batch, st, np.random.default_rng(0))
        ctx.live = batch.valid
        yield ctx


@needs_hnswlib
def test_a_grown_index_is_the_index_built_at_once():
    rng = np.random.default_rng(0)
    vec = rng.normal(size=(3000, 16)).astype(np.float32)
    q = rng.normal(size=(200, 16)).astype(np.float32)
    r = HNSW(ef=10)
    once = r.new_index(16, 3000)
    once.grow(vec)
    grown = r.new_index(16, 1)  # reallocated as it grows
    for part in np.array_split(vec, 41):
        grown.grow(part)
    assert grown.count == once.count == 3000
    for index in (once, grown):
        index.index.set_ef(10)
    a, _ = once.index.knn_query(q, k=10, num_threads=1)
    b, _ = grown.index.knn_query(q, k=10, num_threads=1)
    np.testing.assert_array_equal(a, b)
    other = HNSW(ef=10, seed=7).new_index(16, 3000)
    other.grow(vec)
    other.index.set_ef(10)
    assert not np.array_equal(a, other.index.knn_query(q, k=10, num_threads=1)[0])


@needs_faiss
def test_a_grown_ivf_is_the_ivf_built_at_once():
    """Notes added in batches of any size (before, across and after the
    training) land in the lists one build gives them, and queries probe the
    same lists: the same answers."""
    rng = np.random.default_rng(0)
    vec = rng.normal(size=(3000, 16)).astype(np.float32)
    q = rng.normal(size=(200, 16)).astype(np.float32)
    r = IVF(prefilter=10, nlist=32, nprobe=3, train_size=700)
    once = r.new_index(16, 3000)
    once.grow(vec)
    grown = r.new_index(16, 1)
    cuts = np.sort(rng.choice(np.arange(1, 3000), 60, replace=False))
    for part in np.split(vec, cuts):
        grown.grow(part)
        assert grown.ready == (grown.count >= 700)
    assert grown.count == once.count == 3000
    a = np.array([once.search_one(x, 10, r, None) for x in q])
    b = np.array([grown.search_one(x, 10, r, None) for x in q])
    np.testing.assert_array_equal(a, b)
    assert (a >= 0).all()
    other = IVF(prefilter=10, nlist=32, nprobe=3, train_size=700, seed=7).new_index(16, 3000)
    other.grow(vec)
    assert not np.array_equal(a, [other.search_one(x, 10, r, None) for x in q])


@pytest.mark.parametrize("kind", KINDS)
def test_the_maintained_index_answers_as_one_built_for_each_batch(kind):
    stream = shuffled_stream()
    r = approximate(kind, 15)
    grown, rebuilt, sizes = [], [], []
    for ctx in contexts(stream):
        grown.append(r.prefilter_mask(ctx))
        sizes.append(r.index(ctx)[0].count)
    for ctx in contexts(stream):
        retrieval._STREAMS.clear()  # no index kept: built from nothing for the batch
        rebuilt.append(r.prefilter_mask(ctx))
    assert len(set(sizes)) > 5 and sizes == sorted(sizes)  # it grew, batch by batch
    for a, b in zip(grown, rebuilt):
        np.testing.assert_array_equal(a, b)
    # and the index is approximate here: not the exact nearest 15 everywhere
    exact = [wide(kind, 15).prefilter_mask(ctx) for ctx in contexts(stream)]
    assert any((a != e).any() for a, e in zip(grown, exact))


@pytest.mark.parametrize("kind", KINDS)
def test_one_index_serves_every_arm_and_a_new_replay_keeps_an_ivf(kind):
    stream = shuffled_stream(1)
    ctxs = list(contexts(stream))
    a, b = approximate(kind, 10), wide(kind, 30)  # same build parameters
    a.prefilter_mask(ctxs[-1])
    index = a.index(ctxs[-1])[0]
    b.prefilter_mask(ctxs[-1])
    assert b.index(ctxs[-1])[0] is index  # shared
    assert approximate(kind, 10, seed=8).index(ctxs[-1])[0] is not index  # its own
    first = a.index(ctxs[0])[0]  # fewer notes than it holds
    if kind == "hnsw":  # a graph holding later notes is another graph: a new index
        assert first is not index and first.count < index.count
        return
    # an IVF keeps them (they are not live yet), and answers every earlier
    # batch as an index of its notes only: trained then, exact before
    assert first is index
    c = IVF(prefilter=10, nlist=16, nprobe=2, train_size=800)  # the second batch trains
    kept = [c.prefilter_mask(ctx) for ctx in reversed(ctxs)][::-1]
    assert c.index(ctxs[0])[0].ready  # holding every note
    fresh, trained = [], []
    for ctx in ctxs:
        retrieval._STREAMS.clear()
        fresh.append(c.prefilter_mask(ctx))
        trained.append(c.index(ctx)[0].ready)
    assert not trained[0] and trained[-1]  # exact in the first batches, indexed later
    for k, f in zip(kept, fresh):
        np.testing.assert_array_equal(k, f)


@pytest.mark.parametrize("kind", KINDS)
def test_evicted_and_unborn_notes_are_never_candidates(kind):
    stream = shuffled_stream(2)
    rng = np.random.default_rng(3)
    r = approximate(kind, 20) if kind == "hnsw" else IVF(prefilter=20, nlist=4, nprobe=2,
                                                          train_size=300)
    checked = 0
    for ctx in contexts(stream):
        evicted = rng.random(len(ctx.idx)) < 0.4
        allowed = ctx.batch.valid & ~evicted[None, :]
        got = r.prefilter_mask(ctx, allowed)
        assert not (got & ~allowed).any()
        enough = allowed.sum(axis=1) >= 20
        assert (got.sum(axis=1)[enough] == 20).all()
        checked += int(enough.sum())
    assert checked > 50


def arms_of(tables):
    return [Arm(n, resolve_policy(t, n), None) for n, t in tables.items()]


HNSW_TABLE = {"kind": "hnsw", "prefilter": 20, "ef": 4, "M": 4}
IVF_TABLE = {"kind": "ivf", "prefilter": 20, "nlist": 32, "nprobe": 2, "train_size": 500}
TABLES = {"exact": {"preset": "similarity-only", "retriever": {"kind": "cosine",
                                                               "prefilter": 20}},
          "ann": {"preset": "similarity-only", "retriever": HNSW_TABLE},
          "ann-capped": {"ranker": "product", "retriever": HNSW_TABLE,
                         "retention": {"kind": "capacity", "max_notes": 300}},
          "ivf": {"preset": "similarity-only", "retriever": IVF_TABLE},
          "ivf-capped": {"ranker": "product", "retriever": IVF_TABLE,
                         "retention": {"kind": "capacity", "max_notes": 300}}}
#: each approximate arm searching exhaustively: the exact nearest M
EXHAUSTIVE = {"ann": {"ef": 5000}, "ivf": {"nprobe": 32}}


@needs_hnswlib
@needs_faiss
def test_a_run_reports_the_recall_loss_of_its_index():
    stream = random_stream(4, n_notes=2500, n_queries=300, dim=16)
    settings = SimSettings(tick_days=2.0)
    res = simulate(stream, arms_of(TABLES), settings, seed_sequence(0))
    arms = res.arms.set_index("policy")
    assert np.isnan(arms.loc["exact", "prefilter_overlap"])
    assert arms.loc["exact", "prefilter_sampled"] == 0
    for name in ("ann", "ann-capped", "ivf", "ivf-capped"):
        assert arms.loc[name, "prefilter_sampled"] == OVERLAP_QUERIES
        # ef 4, M 4; 2 lists of 32: each loses some
        assert 0.0 <= arms.loc[name, "prefilter_overlap"] < 1.0, name
    # searching exhaustively, each finds every exact candidate
    wide = [Arm(n, resolve_policy({**TABLES[n], "retriever": {**TABLES[n]["retriever"],
                                                               **more}}, n), None)
            for n, more in EXHAUSTIVE.items()]
    exact = simulate(stream, wide, settings, seed_sequence(0)).arms.set_index("policy")
    assert (exact.loc[list(EXHAUSTIVE), "prefilter_overlap"] == 1.0).all()
    # the reference engine measures the same
    ref = reference.simulate(stream, arms_of(TABLES), settings, seed_sequence(0))
    pd.testing.assert_frame_equal(ref.arms, res.arms, check_exact=True)
    for key in ("queries", "store"):
        pd.testing.assert_frame_equal(getattr(ref, key), getattr(res, key), check_exact=True)


@pytest.mark.parametrize("shuffled", [False, True])
def test_the_exact_nearest_reads_the_streams_inverse_norms(shuffled):
    """The exact nearest M of an index retriever (the overlap's reference)
    scales its approximate cosines by the stream's inverse norms, computed
    once: the same floats as computed for the batch's notes, at consecutive
    rows (a view) and at scattered ones (creation out of row order, notes
    that expired)."""
    stream = shuffled_stream() if shuffled else window_stream()
    r = IVF(prefilter=15, nlist=16, nprobe=2, train_size=300)  # nearest reads no index
    retrieval._STREAMS.clear()
    scattered = starts = 0
    for ctx in contexts(stream):
        idx = np.asarray(ctx.idx)
        scattered += int(idx[-1]) - int(idx[0]) + 1 != len(idx)
        starts += int(idx[0]) > 0
        nn2 = np.asarray(ctx.nnorm2)
        np.testing.assert_array_equal(retrieval._note_inverse_norms(ctx, nn2),
                                      retrieval._inverse_norm(nn2))
        rows = np.arange(0, len(ctx.t), 2)
        np.testing.assert_array_equal(r.nearest(ctx, ctx.live, rows),
                                      Retriever.nearest(r, ctx, ctx.live, rows))
        # the engine's cosine factors of every note, computed once per replay
        every = ctx.notes.dot_scale(Cosine())
        assert len(every) == stream.n_notes
        assert np.shares_memory(retrieval._note_inverse_norms(ctx, nn2), every) \
            == (int(idx[-1]) - int(idx[0]) + 1 == len(idx))
    assert scattered > 0 if shuffled else scattered == 0 and starts > 1


@pytest.mark.parametrize("kind", KINDS)
def test_index_arms_score_their_cells_without_the_batch_product(kind, monkeypatch):
    """An index retriever's similarity is computed per cell: a replay of
    index arms alone (per tick, capped, per query through the walk, a
    set-dependent ranker) never multiplies the queries by every note, and
    both engines agree."""
    names = ("ann", "ann-capped") if kind == "hnsw" else ("ivf", "ivf-capped")
    tables = {n: TABLES[n] for n in names}
    index = TABLES[names[0]]["retriever"]
    tables["per-query"] = {"preset": "hivemind", "retriever": index}
    # a set-dependent ranker scores every live note of its context, query by query
    tables["set-dependent"] = {"preset": "generative-agents", "retriever": index}
    stream = random_stream(4, n_notes=2500, n_queries=120, dim=16)  # two product blocks
    settings = SimSettings(tick_days=2.0, save_rankings=True)

    def refuse(self, scale, visit=None):
        raise AssertionError("the batch's similarity product was computed")

    monkeypatch.setattr(Batch, "_blocks", refuse)
    got = simulate(stream, arms_of(tables), settings, seed_sequence(0))
    assert got.arms.set_index("policy").loc["per-query", "prefilter_sampled"] > 0
    want = reference.simulate(stream, arms_of(tables), settings, seed_sequence(0))
    for key in ("queries", "arms", "rankings", "store"):
        pd.testing.assert_frame_equal(getattr(want, key), getattr(got, key), check_exact=True)


def test_a_run_without_an_index_has_no_overlap_columns():
    stream = random_stream(5, n_notes=300, n_queries=40)
    res = simulate(stream, arms_of({"exact": TABLES["exact"]}), SimSettings(),
                   seed_sequence(0))
    assert "prefilter_overlap" not in res.arms


def test_the_sample_is_seeded_and_bounded():
    a = overlap_sample(1000)
    assert len(a) == OVERLAP_QUERIES and len(np.unique(a)) == OVERLAP_QUERIES
    assert (np.diff(a) > 0).all() and a.max() < 1000
    assert np.array_equal(a, overlap_sample.__wrapped__(1000))  # not a cache artefact
    np.testing.assert_array_equal(overlap_sample(50), np.arange(50))


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_config_gives_the_same_numbers(kind):
    stream = shuffled_stream(6)
    names = ("ann", "ann-capped") if kind == "hnsw" else ("ivf", "ivf-capped")
    arms = arms_of({k: TABLES[k] for k in names})
    settings = SimSettings(tick_days=2.0, save_rankings=True)
    first = simulate(stream, arms, settings, seed_sequence(0))
    cache = ReplayCache(10**9)  # the same stream object again: its index starts again
    again = [simulate(stream, arms, settings, seed_sequence(0), cache=cache) for _ in range(2)]
    retrieval._STREAMS.clear()
    fresh = simulate(shuffled_stream(6), arms, settings, seed_sequence(0))
    for other in again + [fresh]:
        for key in ("queries", "arms", "rankings"):
            pd.testing.assert_frame_equal(getattr(first, key), getattr(other, key),
                                          check_exact=True)
    assert first.arms["prefilter_overlap"].between(0, 1).all()


EXPERIMENT = """
[experiment]
name = "ann"
seed = 3
replicates = 2

[workload]
horizon_days = 10
backfill_days = 10
notes_per_day = 40
queries_per_day = 10

[policies.exact]
preset = "similarity-only"
retriever = { kind = "cosine", prefilter = 20 }

[policies.ann]
preset = "similarity-only"
retriever = { kind = "hnsw", prefilter = 20, ef = 4, M = 4 }
"""


@needs_hnswlib
def test_the_run_folder_and_memsim_run_report_it(tmp_path, capsys):
    from memsim.cli import _print_prefilter_overlap
    from memsim.reporting.report import prefilter_overlap_line
    from memsim.runs.runner import run_experiment

    (tmp_path / "exp.toml").write_text(EXPERIMENT, encoding="utf-8")
    res = run_experiment(tmp_path / "exp.toml", out=tmp_path / "out", report=False)
    arms = pd.read_csv(res.path / "arms.csv").set_index(["replicate", "policy"])
    ann = arms.xs("ann", level="policy")
    asked = res.queries.query("policy == 'ann'").groupby("replicate").size()
    assert (ann["prefilter_sampled"] == asked).all()  # fewer than 200: every query
    assert ann["prefilter_overlap"].between(0, 1).all()
    assert arms.xs("exact", level="policy")["prefilter_overlap"].isna().all()
    _print_prefilter_overlap(res.path)
    line = capsys.readouterr().out
    assert line.rstrip().endswith(f": ann {ann['prefilter_overlap'].mean():.3f}.")
    assert prefilter_overlap_line(arms.reset_index()) == line.strip()
    assert prefilter_overlap_line(arms.reset_index().query("policy == 'exact'")) is None
