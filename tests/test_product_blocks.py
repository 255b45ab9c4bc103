"""A batch's similarity product is computed in fixed blocks of columns
(:data:`memsim.Batch.product_block`), and the blocks of notes every arm has
evicted are not multiplied: each block is its own matrix product, and
skipping blocks changes no result, with or without a replay cache."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import memsim.engine.batch as batch_module
from memsim.policies.retrieval import Cosine
from memsim.runs.config import resolve_policy
from memsim.engine import Arm, Batch, NoteArrays, ReplayCache, SimSettings, simulate
from memsim.evaluation.metrics import RelevanceIndex
from memsim.core.rng import seed_sequence
from memsim.data.stream import make_stream

from .helpers import numba_kernels, random_stream
from .test_pruning import assert_each_alone, assert_same, policy_table


def batch_of(stream, rows) -> Batch:
    codes = {a: i for i, a in enumerate(sorted(set(stream.notes["actor"])
                                               | set(stream.queries["actor"])))}
    notes = NoteArrays.from_stream(stream, codes)
    qe = stream.query_embeddings[rows]
    return Batch(qrows=rows, t=stream.queries["t"].to_numpy()[rows],
                 actors=np.zeros(len(rows), int), notes=notes, qemb=qe,
                 qnorm2=(qe.astype(np.float64) ** 2).sum(1),
                 relevance=RelevanceIndex(stream, notes.created_at))


def expiring(stream, seed=0):
    """``stream`` with a third of its notes expiring: a batch's notes are
    then not consecutive rows."""
    rng = np.random.default_rng(seed)
    notes = stream.notes.copy()
    notes["expires_at"] = np.where(rng.random(len(notes)) < 0.3,
                                   notes["created_at"] + rng.uniform(0.5, 5, len(notes)),
                                   np.nan)
    return make_stream(notes, stream.queries, stream.qrels, None, stream.note_embeddings,
                       stream.query_embeddings, {"name": "expiring"})


def test_one_block_is_the_plain_product():
    """A store of at most one block gets exactly ``Q @ N.T``."""
    s = random_stream(1, n_notes=Batch.product_block, n_queries=40, horizon=1.0, dim=32)
    b = batch_of(s, np.arange(40))
    assert len(b.idx) <= Batch.product_block
    np.testing.assert_array_equal(b.dots, b.qemb @ s.note_embeddings[b.idx].T)


@pytest.mark.parametrize("expire", [False, True])
def test_each_block_is_its_own_product(expire):
    """Over several blocks (the last one partial), each block's columns are
    exactly the product of the queries with that block's notes alone."""
    s = random_stream(2, n_notes=3 * Batch.product_block + 123, n_queries=40, dim=32)
    if expire:
        s = expiring(s)
    rows = np.arange(20, 40)
    b = batch_of(s, rows)
    n = len(b.idx)
    assert n > 2 * Batch.product_block
    assert expire == (int(b.idx[-1]) - int(b.idx[0]) + 1 != n)
    dots = b.dots
    assert dots.shape == (20, n) and dots.dtype == np.float32
    for lo in range(0, n, Batch.product_block):
        cols = b.idx[lo:lo + Batch.product_block]
        np.testing.assert_array_equal(dots[:, lo:lo + len(cols)],
                                      b.qemb @ s.note_embeddings[cols].T)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), q=st.integers(1, 40),
       dim=st.sampled_from([1, 5, 16, 33, 64, 130]), n_notes=st.integers(1, 2500),
       block=st.sampled_from([1, 7, 100, 2048]))
def test_each_block_is_the_plain_product_for_any_number_of_queries(monkeypatch, seed, q, dim,
                                                                   n_notes, block):
    """However few the queries (a tick in parts has a handful), whatever the
    dimension and block, each block's columns are exactly ``Q @ N.T`` of
    the block's notes: the layout the product is computed in (notes x
    queries, written transposed) changes no float."""
    monkeypatch.setattr(Batch, "product_block", block)
    s = random_stream(seed, n_notes=n_notes, n_queries=q, dim=dim, horizon=1.0)
    b = batch_of(s, np.arange(q))
    n = len(b.idx)
    if n == 0:
        return
    dots = b.dots
    for lo in range(0, n, block):
        cols = b.idx[lo:lo + block]
        np.testing.assert_array_equal(dots[:, lo:lo + len(cols)],
                                      b.qemb @ s.note_embeddings[cols].T)


def test_dead_notes_are_zeros_and_the_rest_unchanged(monkeypatch):
    monkeypatch.setattr(Batch, "product_block", 64)
    s = random_stream(3, n_notes=1000, n_queries=30, dim=8)
    rows = np.arange(25, 30)
    whole = batch_of(s, rows).dots
    b = batch_of(s, rows)
    n = len(b.idx)
    dead = np.zeros(n, dtype=bool)
    dead[64:192] = True  # blocks 1 and 2
    dead[300:350] = True  # parts of blocks 4 and 5: their other notes gathered
    dead[-(n % 64 or 64):] = True  # the last, partial block
    b.set_dead(dead)
    dots = b.dots
    assert not b.multiplied[1:3].any() and b.multiplied[4:6].all()
    assert (dots[:, dead] == 0).all()
    np.testing.assert_array_equal(dots[:, ~dead], whole[:, ~dead])
    # a block some arm sees again (another replay) is multiplied then
    b.cache[("similarity", "cosine")] = "stale"
    b.set_dead(None)
    assert ("similarity", "cosine") not in b.cache
    np.testing.assert_array_equal(b.dots, whole)


def capacity_arm(name, m, hl=10.0, mode="experiment"):
    table = {"ranker": "product", "decay": {"kind": "half-life", "half_life_days": hl},
             "retention": {"kind": "capacity", "max_notes": m}, "feedback": {"timing": mode}}
    return Arm(name, resolve_policy(table, name))


def every_block(monkeypatch):
    """Multiply every note, whatever the arms evicted."""
    monkeypatch.setattr(Batch, "open_notes", lambda self: np.ones(len(self.idx), bool))


def test_skipped_blocks_change_no_frame(monkeypatch):
    """Arms that evict most of the store (blocks are skipped: the path runs)
    give the frames of a replay that multiplies every block, and each arm
    alone the frames it has with the others."""
    monkeypatch.setattr(Batch, "product_block", 32)
    skipped = []
    real = Batch._blocks  # the products behind the dots and a scaled similarity

    def spy(self, scale, visit=None):
        out = real(self, scale, visit)
        skipped.append(int((~self.computed).sum()))
        return out

    monkeypatch.setattr(Batch, "_blocks", spy)
    s = random_stream(4, n_notes=2000, n_queries=60, dim=6)
    arms = [capacity_arm("a", 40), capacity_arm("b", 90, 50.0, "per-query"),
            Arm("h", resolve_policy({"preset": "hivemind",
                                     "retention": {"kind": "capacity", "max_notes": 60}}, "h"))]
    kw = dict(save_rankings=True, candidates=8)
    got = simulate(s, arms, SimSettings(**kw), seed_sequence(0))
    assert max(skipped) > 10
    assert_each_alone(s, arms, got, names=("queries", "rankings"), candidates=8)
    every_block(monkeypatch)
    skipped.clear()
    assert_same(simulate(s, arms, SimSettings(**kw), seed_sequence(0)), got)
    assert max(skipped) == 0


RETENTIONS = [{"kind": "capacity", "max_notes": 15}, {"kind": "capacity", "max_notes": 60},
              {"kind": "capacity", "max_notes": 300}, "ai-memory"]


@st.composite
def cases(draw):
    """A stream and three replays of it, each with 1-3 arms that evict (a
    random policy with a drawn retention), the later ones maybe with an
    arm that keeps everything."""
    def arm_table():
        table = policy_table(draw)
        table["retention"] = draw(st.sampled_from(RETENTIONS))
        return table

    return {
        "seed": draw(st.integers(0, 10**6)),
        "block": draw(st.sampled_from([1, 3, 16, 64])),
        "n_notes": draw(st.integers(30, 800)),
        "n_queries": draw(st.integers(1, 30)),
        "c": draw(st.integers(1, 30)),
        "expire": draw(st.booleans()),
        "replays": [(draw(st.sampled_from(["per-tick", "per-query"])),
                     [arm_table() for _ in range(draw(st.integers(1, 3)))]
                     + ([{"ranker": "product"}] if k and draw(st.booleans()) else []))
                    for k in range(3)],
    }


#: a case a run found: one query over blocks of 3 notes, where OpenBLAS's
#: matrix-vector kernel gives a row other bits by its place (the gather's
#: probe must see it)
_ONE_QUERY_SMALL_BLOCKS = {
    "seed": 224, "block": 3, "n_notes": 619, "n_queries": 1, "c": 11, "expire": False,
    "replays": [("per-tick", [{"retriever": "cosine", "ranker": "product", "decay": "none",
                               "stickiness": "none", "feedback": {"touch": "packed"},
                               "retention": {"kind": "capacity", "max_notes": 15}}]) for _ in range(2)]
    + [("per-tick", [{"preset": "agent-framework-default",
                      "retention": {"kind": "capacity", "max_notes": 15}}])]}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
@example(case=_ONE_QUERY_SMALL_BLOCKS)
def test_skipping_blocks_equals_multiplying_every_block(case):
    """Random policies that evict, three replays sharing a replay cache (the
    later ones may see blocks the earlier skipped): each equals a replay
    without the cache that multiplies every block."""
    stream = random_stream(case["seed"], n_notes=case["n_notes"], n_queries=case["n_queries"],
                           dim=4)
    if case["expire"]:
        stream = expiring(stream, case["seed"])
    cache = ReplayCache(10**9)
    with pytest.MonkeyPatch.context() as mp:  # (a Hypothesis test: no fixture)
        mp.setattr(Batch, "product_block", case["block"])
        for k, (mode, tables) in enumerate(case["replays"]):
            arms = [Arm(f"p{k}{i}", resolve_policy(t, f"p{k}{i}")) for i, t in enumerate(tables)]
            s = SimSettings(save_rankings=True, candidates=case["c"], feedback_mode=mode)
            got = simulate(stream, arms, s, seed_sequence(0), cache=cache)
            with pytest.MonkeyPatch.context() as every:
                every_block(every)
                assert_same(simulate(stream, arms, s, seed_sequence(0)), got)


def test_an_approximate_index_over_skipped_blocks(monkeypatch):
    """An HNSW retriever (its scores read the dot products) on arms that
    evict most of the store: the frames of multiplying every block."""
    pytest.importorskip("hnswlib")
    monkeypatch.setattr(Batch, "product_block", 32)
    s = random_stream(5, n_notes=2000, n_queries=60, dim=6)
    arms = [Arm(f"h{m}", resolve_policy(
        {"retriever": {"kind": "hnsw", "prefilter": 20, "ef": 40}, "ranker": "product",
         "retention": {"kind": "capacity", "max_notes": m}}, f"h{m}")) for m in (50, 80)]
    kw = dict(save_rankings=True, candidates=8)
    got = simulate(s, arms, SimSettings(**kw), seed_sequence(0))
    every_block(monkeypatch)
    assert_same(simulate(s, arms, SimSettings(**kw), seed_sequence(0)), got)


def sparse_dead(n: int, block: int, rng) -> np.ndarray:
    """Most notes of the first full blocks dead (their few live ones are
    gathered), one block whole, the last (partial) block half dead."""
    dead = np.zeros(n, dtype=bool)
    full = n // block
    dead[:(full - 1) * block] = rng.random((full - 1) * block) < 0.9
    dead[full * block:] = rng.random(n - full * block) < 0.5
    return dead


@pytest.mark.parametrize("q", [1, 7, 50])
@pytest.mark.parametrize("gather", [True, False])
def test_gathered_notes_get_their_blocks_floats(monkeypatch, q, gather):
    """The live notes of mostly dead blocks, multiplied gathered into
    full-width products (or, where the BLAS is not known to give a row the
    same floats there, in their blocks), get exactly their block's
    products; the dead ones zeros; scaled similarities too."""
    calls = []
    real = batch_module.gathers_exactly

    def spy(*args):
        calls.append(args)
        return gather and real(*args)

    monkeypatch.setattr(batch_module, "gathers_exactly", spy)
    block = Batch.product_block
    s = random_stream(5, n_notes=5 * block + 300, n_queries=q, dim=64, horizon=1.0)
    rows = np.arange(q)
    whole = batch_of(s, rows)
    b = batch_of(s, rows)
    dead = sparse_dead(len(b.idx), block, np.random.default_rng(q))
    b.set_dead(dead)
    dots = b.dots
    assert calls  # the sparse blocks asked
    assert (dots[:, dead] == 0).all()
    np.testing.assert_array_equal(dots[:, ~dead], whole.dots[:, ~dead])
    got, want = b.scaled_similarity(Cosine()), whole.scaled_similarity(Cosine())
    assert (got[:, dead] == 0).all()
    np.testing.assert_array_equal(got[:, ~dead], want[:, ~dead])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), q=st.integers(1, 60), dim=st.sampled_from([3, 4, 16, 64, 384]),
       block=st.sampled_from([3, 7, 16, 333, 2048]), pad=st.booleans())
def test_a_shape_that_gathers_exactly_does_so_for_any_notes(seed, q, dim, block, pad):
    """:func:`gathers_exactly` decides a shape from one fixed draw: where it
    says so, other embeddings gathered from other blocks, in any order,
    padded with zeros or not, get their blocks' floats too."""
    dtype = np.dtype(np.float32)
    if not batch_module.gathers_exactly(block, q, dim, dtype.str):
        return
    rng = np.random.default_rng(seed)
    emb = (rng.standard_normal((3 * block, dim)) * rng.uniform(0.1, 10)).astype(dtype)
    qemb = rng.standard_normal((q, dim)).astype(dtype)
    own = np.concatenate([emb[b * block:(b + 1) * block] @ qemb.T for b in range(3)])
    k = int(rng.integers(1, block + 1)) if pad else block
    pick = rng.choice(3 * block, size=k, replace=False)
    buf = np.zeros((block, dim), dtype=dtype)
    buf[:k] = emb[pick]
    got = np.empty((block, q), dtype=dtype)
    np.matmul(buf, qemb.T, out=got)
    assert got[:k].tobytes() == own[pick].tobytes()


@pytest.mark.parametrize("block, q, dim", [(3, 1, 4), (3, 2, 4), (7, 1, 6), (16, 1, 4),
                                           (2048, 1, 64), (2048, 50, 64)])
def test_the_probe_is_not_fooled_by_a_lucky_draw(block, q, dim):
    """Where :func:`gathers_exactly` says a shape gathers exactly, 100 other
    random draws do (a matrix-vector kernel over a few rows gives some rows
    other bits by their place, for some data only: one draw can miss it)."""
    dtype = np.dtype(np.float32)
    if not batch_module.gathers_exactly(block, q, dim, dtype.str):
        return
    rng = np.random.default_rng(block * 1000 + q)
    for _ in range(100 if block < 100 else 3):
        emb = rng.standard_normal((2 * block, dim)).astype(dtype)
        qemb = rng.standard_normal((q, dim)).astype(dtype)
        own = np.concatenate([emb[:block] @ qemb.T, emb[block:] @ qemb.T])
        pick = rng.permutation(2 * block)[:block]
        assert (emb[pick] @ qemb.T).tobytes() == own[pick].tobytes()


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dead", [False, True])
def test_levels_built_before_the_product_change_no_frame(monkeypatch, dead, compiled):
    """Replays whose batches build their similarity levels before the product
    (the first scan run on each block as it is written) give the frames of
    the reference engine, which scores every live note: per-tick and
    per-query arms, pruned and not, with and without arms that evict most
    of the store (blocks skipped and gathered); the scan compiled into the
    pass that writes each block, or numpy's after it."""
    import memsim.engine.cells as cells_module
    from memsim.engine import reference

    monkeypatch.setattr(Batch, "product_block", 32)
    monkeypatch.setattr(cells_module, "PENDING_BYTES", 0)
    fused = []
    compute = cells_module._Pending.compute

    def spy(self, scan=None):
        sim, fresh = compute(self, scan)
        fused.append(fresh and scan is not None)
        return sim, fresh

    monkeypatch.setattr(cells_module._Pending, "compute", spy)
    s = random_stream(6, n_notes=2500, n_queries=80, dim=6)
    s.notes["expires_at"] = np.where(np.arange(2500) % 5 == 0, s.notes["created_at"] + 2.0,
                                     np.nan)
    arms = [Arm("h", resolve_policy({"preset": "hivemind"}, "h")),
            Arm("f", resolve_policy({"preset": "feather"}, "f")),
            Arm("t", resolve_policy({"preset": "hivemind", "feedback": {"timing": "per-tick"},
                                     "decay": {"task_half_life_days": 3.0}}, "t"))]
    if dead:
        arms = [capacity_arm("a", 400), capacity_arm("b", 900, 50.0, "per-query"),
                Arm("c", resolve_policy({"preset": "hivemind",
                                         "retention": {"kind": "capacity", "max_notes": 600}},
                                        "c"))]
    skipped = []
    blocks = Batch._blocks

    def counted(self, scale, scan=None):
        out = blocks(self, scale, scan)
        skipped.append(int((~self.multiplied).sum()))
        return out

    monkeypatch.setattr(Batch, "_blocks", counted)
    written = []
    write = batch_module.Scan.write
    monkeypatch.setattr(batch_module.Scan, "write", lambda self, o, s, picked, *a: (
        written.append(picked is not None), write(self, o, s, picked, *a))[1])
    kw = dict(save_rankings=True, candidates=8)
    with numba_kernels(compiled):
        got = simulate(s, arms, SimSettings(**kw), seed_sequence(0))
    assert sum(fused) >= 5  # the path ran
    # compiled: each block scanned as it is written, picked notes' blocks too
    assert (len(written) > 0, any(written)) == (compiled, compiled and dead)
    assert (max(skipped) > 10) is dead
    assert_same(reference.simulate(s, arms, SimSettings(**kw), seed_sequence(0)), got)
