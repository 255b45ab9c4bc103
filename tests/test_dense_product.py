"""The batch's similarity product computed block by block into reused
buffers (:meth:`Batch.scaled_similarity`, :class:`Scratch`): the same floats
and the same top C as the similarity computed in whole-matrix passes, for
block sizes that do not divide the notes, a store smaller than one block,
skipped (dead) blocks, several threads, and buffers reused batch after
batch."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memsim.engine.batch as batch_module
from memsim.engine.batch import Batch
from memsim.engine.context import BatchContext
from memsim.engine.inputs import _inputs
from memsim.engine.state import PolicyState, Scratch, _subtract
from memsim.engine.topc import top_candidates
from memsim.policies.retrieval import HNSW, Cosine, InverseSquaredL2, pair_cosine

from .helpers import numba_kernels, random_stream


def make_batch(inp, rows: np.ndarray, block: int, dead: np.ndarray | None) -> Batch:
    t = inp.qt[rows]
    b = Batch(qrows=rows, t=t, actors=inp.qactor[rows], notes=inp.notes, qemb=inp.qemb[rows],
              qnorm2=inp.qnorm2[rows], relevance=inp.relevance, t0=float(t.max()))
    b.product_block = block
    if dead is not None:
        b.set_dead(dead[b.idx])
    return b


def unblocked_cosine(inp, b: Batch) -> np.ndarray:
    """The cosine as whole-matrix passes: the (Q, L) dot products (each
    block of ``product_block`` columns one product, as the engine defines
    them: BLAS gives a column other floats in products of other widths),
    then the factors applied to the whole matrix as the retriever applies
    them, zeros at the notes the batch skips."""
    emb = inp.notes.emb[b.idx]
    blk = b.product_block
    dots = np.concatenate([np.matmul(b.qemb, emb[a:a + blk].T)
                           for a in range(0, len(b.idx), blk)], axis=1)
    # (within float32 rounding of one whole product)
    np.testing.assert_allclose(dots, np.matmul(b.qemb, emb.T), rtol=1e-4, atol=1e-4)
    with np.errstate(divide="ignore"):
        qs = np.where(b.qnorm2 > 0, 1.0 / np.sqrt(b.qnorm2), 0.0).astype(np.float32)
        n2 = inp.notes.norm2[b.idx]
        ns = np.where(n2 > 0, 1.0 / np.sqrt(n2), 0.0).astype(np.float32)
    sim = dots * qs[:, None]
    sim *= ns[None, :]
    sim[:, ~b.computed] = 0
    return sim


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.fixture
def small_scratch(monkeypatch):
    """Every (Q, L) matrix through the reused buffers, however small."""
    monkeypatch.setattr(Scratch, "SMALL", 0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), n_notes=st.integers(1, 700),
       block=st.sampled_from([1, 7, 64, 100, 333, 2048]), dim=st.sampled_from([3, 8, 33]),
       dead_share=st.sampled_from([0.0, 0.5, 0.95]), threads=st.sampled_from([1, 3]),
       compiled=st.booleans())
def test_blocked_similarity_equals_the_unblocked_one(small_scratch, monkeypatch, seed, n_notes,
                                                     block, dim, dead_share, threads, compiled):
    """With the compiled write of each block (numba) or numpy's."""
    monkeypatch.setattr(batch_module, "product_threads", lambda blocks: threads)
    with numba_kernels(compiled):
        _check_blocked_similarity(seed, n_notes, block, dim, dead_share)


def _check_blocked_similarity(seed, n_notes, block, dim, dead_share):
    stream = random_stream(seed, n_notes=n_notes, n_queries=30, dim=dim)
    inp = _inputs(stream)
    rng = np.random.default_rng(seed)
    rows = np.arange(len(inp.qt))
    dead = rng.random(n_notes) < dead_share if dead_share else None
    b = make_batch(inp, rows, block, dead)
    if len(b.idx) == 0:
        return
    got = b.scaled_similarity(Cosine())
    assert same_bits(got, unblocked_cosine(inp, b))
    # the retriever's own computation from the batch's products: the same
    ctx = BatchContext(b, PolicyState(inp.notes, len(inp.actor_names)), rng)
    assert same_bits(Cosine().similarity(ctx), got)
    # an index retriever's cosine is computed per cell, not from the product
    per_cell = ctx.similarity(HNSW())
    assert same_bits(per_cell, pair_cosine(inp.qemb[rows], inp.notes.emb[b.idx],
                                           inp.qnorm2[rows], inp.notes.norm2[b.idx]))
    seen = slice(None) if dead is None else ~dead[b.idx]  # the product skips the others
    np.testing.assert_allclose(per_cell[:, seen], got[:, seen], rtol=0, atol=1e-5)
    # and the same top C over the live notes
    live = b.valid & ~(np.zeros(len(b.idx), bool) if dead is None else dead[b.idx])[None, :]
    ref = np.where(live, unblocked_cosine(inp, b), -np.inf)
    for c in (1, 5, 50):
        pos, vals = top_candidates(np.where(live, got, -np.inf), c)
        rpos, rvals = top_candidates(ref, c)
        np.testing.assert_array_equal(pos, rpos)
        np.testing.assert_array_equal(vals, rvals)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_compiled_write_gives_numpys_floats(small_scratch, monkeypatch, threads):
    """Each block written transposed (and scaled) by the compiled kernel or
    by numpy: the same bits, for the dot products and the cosine, zero
    vectors (factor 0) and skipped blocks among them."""
    pytest.importorskip("numba", reason="the compiled write needs the 'fast' extra")
    monkeypatch.setattr(batch_module, "product_threads", lambda blocks: threads)
    stream = random_stream(11, n_notes=900, n_queries=25, dim=17)
    stream.note_embeddings[::7] = 0.0
    stream.query_embeddings[3] = 0.0
    inp = _inputs(stream)
    rows = np.arange(len(inp.qt))
    dead = np.random.default_rng(1).random(900) < 0.3
    got = {}
    for compiled in (True, False):
        with numba_kernels(compiled):
            b = make_batch(inp, rows, 64, dead)
            got[compiled] = (b.dots.copy(), b.scaled_similarity(Cosine()).copy())
    assert same_bits(got[True][0], got[False][0])
    assert same_bits(got[True][1], got[False][1])
    assert np.isfinite(got[True][1]).all() and (got[True][1][3] == 0).all()


def test_a_store_smaller_than_one_block_and_a_ragged_last_block(small_scratch):
    stream = random_stream(3, n_notes=50, n_queries=12, dim=16)
    inp = _inputs(stream)
    rows = np.arange(len(inp.qt))
    for block in (4096, 50, 49, 13):
        b = make_batch(inp, rows, block, None)
        assert same_bits(b.scaled_similarity(Cosine()), unblocked_cosine(inp, b))


def test_a_retriever_that_is_no_scaled_product_is_computed_as_before(small_scratch):
    stream = random_stream(5, n_notes=200, n_queries=10)
    inp = _inputs(stream)
    b = make_batch(inp, np.arange(len(inp.qt)), 64, None)
    assert b.scaled_similarity(InverseSquaredL2()) is None
    ctx = BatchContext(b, PolicyState(inp.notes, len(inp.actor_names)), np.random.default_rng(0))
    dots = np.matmul(b.qemb, inp.notes.emb[b.idx].T)
    d = (b.qnorm2[:, None].astype(np.float32) + inp.notes.norm2[b.idx][None, :].astype(np.float32)
         - np.float32(2.0) * dots)
    np.testing.assert_allclose(ctx.similarity(InverseSquaredL2()),
                               1.0 / (1.0 + np.maximum(d, 0)), rtol=1e-5)


def test_views_of_a_batch_take_its_similarity_at_their_cells(small_scratch):
    stream = random_stream(7, n_notes=400, n_queries=20)
    inp = _inputs(stream)
    b = make_batch(inp, np.arange(len(inp.qt)), 100, None)
    row = b.row(3)  # asked before the batch computed anything
    full = b.scaled_similarity(Cosine())
    assert same_bits(row.scaled_similarity(Cosine()), full[3:4])
    cols = np.array([0, 5, 17, len(b.idx) - 1])
    assert same_bits(b.subset(cols).scaled_similarity(Cosine()), full[:, cols])
    assert same_bits(row.dots, b.dots[3:4])


def test_reused_buffers_give_fresh_results_batch_after_batch(small_scratch):
    """Batches of other sizes and other skipped blocks in turn, each
    released before the next: the buffers are reused (no new one after the
    first few) and each batch's zeros and values are its own."""
    stream = random_stream(11, n_notes=1500, n_queries=200, dim=8, horizon=40.0)
    # notes that expire, some inside a batch's window
    stream.notes["expires_at"] = np.where(np.arange(1500) % 3 == 0,
                                          stream.notes["created_at"] + 5.0, np.nan)
    inp = _inputs(stream)
    rng = np.random.default_rng(0)
    scratch = inp.notes.scratch
    counts = []
    for i in range(12):
        rows = np.sort(rng.choice(len(inp.qt), size=int(rng.integers(1, 60)), replace=False))
        dead = rng.random(len(inp.notes.note_id)) < rng.choice([0.0, 0.7, 0.99])
        b = make_batch(inp, rows, int(rng.choice([16, 100, 250])), dead if dead.any() else None)
        got = b.scaled_similarity(Cosine())
        assert same_bits(got, unblocked_cosine(inp, b)), i
        notes = inp.notes
        np.testing.assert_array_equal(b.valid, (notes.created_at[b.idx][None, :] <= b.t[:, None])
                                      & (notes.expires_at[b.idx][None, :] > b.t[:, None]))
        # the scan skips ``valid`` outside the columns said to vary: all True there
        assert b.valid[:, ~b.varying].all() and b.varying.sum() < len(b.idx)
        cols = np.flatnonzero(rng.random(len(b.idx)) < 0.5)
        sub = b.subset(cols)
        assert sub.valid[:, ~sub.varying].all()
        np.testing.assert_array_equal(sub.varying, b.varying[cols])
        assert not got.flags.writeable  # shared by every arm: nobody writes it
        del b, got
        gc.collect()
        counts.append(len(scratch._raw))
    assert counts[-1] <= 4 and counts[-1] == counts[3]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([(np.int32, 0), (bool, True),
                                                              (bool, False)]),
                          st.lists(st.integers(0, 200), max_size=6)), min_size=1, max_size=8))
def test_a_reused_buffer_holds_its_value_but_where_written(uses):
    scratch = Scratch()
    scratch.SMALL = 0
    held = []
    for size_i, (dtype, value), cuts in uses:
        n = 50 * (size_i + 1)
        cuts = sorted({min(c, n) for c in cuts})
        iv = np.array(cuts[:len(cuts) // 2 * 2], dtype=np.int64).reshape(-1, 2)
        iv = iv[iv[:, 1] > iv[:, 0]]
        a = scratch.filled_except((n,), dtype, value, iv)
        mask = np.ones(n, bool)
        for x, y in iv:
            mask[x:y] = False
        assert (a[mask] == value).all()
        for x, y in iv:
            a[x:y] = 7 if dtype is np.int32 else not value  # what a caller writes
        held = held[-1:] + [a]  # one earlier array still alive


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), max_size=8),
       st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), max_size=8))
def test_interval_subtraction(a, b):
    def norm(pairs):  # sorted, disjoint, non-empty intervals
        cover = np.zeros(61, bool)
        for s, e in pairs:
            cover[min(s, e):max(s, e)] = True
        edges = np.flatnonzero(np.diff(np.r_[False, cover, False].astype(np.int8)))
        return edges.reshape(-1, 2), cover
    (ia, ca), (ib, cb) = norm(a), norm(b)
    got = np.zeros(61, bool)
    for s, e in _subtract(ia, ib):
        assert s < e
        got[s:e] = True
    np.testing.assert_array_equal(got, ca & ~cb)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), n=st.integers(1, 3000), piece=st.sampled_from([5, 64, 1000]),
       gap=st.sampled_from([0, 3, 256]), dead=st.sampled_from(["none", "old", "scattered", "all"]),
       vary=st.booleans())
def test_the_first_level_scan_in_pieces_finds_every_cell_above_its_threshold(
        monkeypatch, seed, n, piece, gap, dead, vary):
    import memsim.engine.cells as cells_module
    from memsim.engine.cells import SimOrder

    monkeypatch.setattr(cells_module, "SCAN_BLOCK", piece)
    monkeypatch.setattr(cells_module, "SCAN_GAP", gap)
    rng = np.random.default_rng(seed)
    q = int(rng.integers(1, 9))
    sim = rng.standard_normal((q, n)).astype(np.float32)
    valid = rng.random((q, n)) < 0.9
    d = {"none": None, "old": np.arange(n) < int(0.8 * n),
         "scattered": rng.random(n) < 0.7, "all": np.ones(n, bool)}[dead]
    if d is not None:
        d = d | (rng.random(n) < 0.05)  # a few more dead among the open
    # ``valid`` False only in the columns said to vary (or anywhere: None)
    varying = rng.random(n) < rng.choice([0.0, 0.01, 0.5]) if vary else None
    if vary:
        valid |= ~varying[None, :]
    order = SimOrder(sim, valid, d, varying)
    thi = rng.standard_normal(q).astype(np.float32)
    r_i, c, v = order._hits(thi)
    want = (sim > thi[:, None]) & valid
    if d is not None:
        want &= ~d[None, :]
    wr, wc = np.nonzero(want)  # row by row, columns ascending
    np.testing.assert_array_equal(r_i, wr)
    np.testing.assert_array_equal(c, wc)
    np.testing.assert_array_equal(v, sim[wr, wc])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(200, 3000), block=st.sampled_from([16, 64, 250]),
       dead=st.sampled_from(["none", "old", "scattered"]), q=st.integers(1, 40),
       exact=st.booleans(), threads=st.sampled_from([1, 3]), compiled=st.booleans(),
       hit_buffer=st.sampled_from([1, 7, 1 << 14]))
def test_levels_built_before_the_product_are_those_built_after(seed, n, block, dead, q, exact,
                                                               threads, compiled, hit_buffer):
    """Levels built on a similarity not computed yet (its sample computed on
    its own, the first scan run on each block as the product writes it, on
    the product's threads) have the same sample, scan, thresholds and
    columns at every level, bit for bit, as levels built on the computed
    similarity, and the similarity is the same; also where the BLAS's rows
    depend on their neighbours (no sample of its own: the similarity first).
    With the scan compiled into the pass that writes each block (its cell
    buffers too small or not) or numpy's after it."""
    with pytest.MonkeyPatch.context() as monkeypatch, numba_kernels(compiled):
        monkeypatch.setattr(batch_module, "HIT_BUFFER", hit_buffer)
        monkeypatch.setattr(batch_module, "_LOCAL", threading.local())  # (buffers at that size)
        _levels_before_and_after(monkeypatch, seed, n, block, dead, q, exact, threads)


def _levels_before_and_after(monkeypatch, seed, n, block, dead, q, exact, threads):
    import memsim.engine.batch as batch_module
    from memsim.engine.cells import SimOrder, _Pending, ladder_level

    if not exact:
        monkeypatch.setattr(batch_module, "gathers_exactly", lambda *a: False)
    # the sample is computed on its own where the BLAS gathers this shape exactly
    own = exact and batch_module.gathers_exactly(block, q, 8, np.dtype(np.float32).str)
    monkeypatch.setattr(batch_module, "product_threads", lambda blocks: min(threads, blocks))
    stream = random_stream(seed % 997, n_notes=n, n_queries=60, dim=8, horizon=40.0)
    stream.notes["expires_at"] = np.where(np.arange(n) % 4 == 0,
                                          stream.notes["created_at"] + 3.0, np.nan)
    rng = np.random.default_rng(seed)
    # queries of other norms: the cosine's query factors are not 1
    stream.query_embeddings[:] *= rng.uniform(0.3, 3.0, (len(stream.queries), 1))
    inp = _inputs(stream)
    rows = np.sort(rng.choice(len(inp.qt), size=q, replace=False))
    ids = np.arange(len(inp.notes.note_id))
    d = {"none": None, "old": ids < 0.8 * len(ids), "scattered": rng.random(len(ids)) < 0.9}[dead]
    cos = Cosine()
    visited = []
    blocks = Batch._blocks
    monkeypatch.setattr(Batch, "_blocks", lambda self, scale, scan=None: (
        visited.append(scan is not None), blocks(self, scale, scan))[1])

    def pair() -> tuple[SimOrder, SimOrder]:
        """(levels built before the product, levels built after it)"""
        before, after = (make_batch(inp, rows, block, d) for _ in range(2))
        late = SimOrder(after.scaled_similarity(cos), after.valid, after.dead, after.varying)
        visited.clear()
        early = SimOrder(None, before.valid, before.dead, before.varying, _Pending(before, cos))
        assert same_bits(early.neg_sample, late.neg_sample)
        return early, late

    # the first scan, at thresholds on either side of zero (the cells of
    # notes no arm sees read 0 in the blocks multiplied)
    early, late = pair()
    thi = rng.uniform(-0.5, 0.5, q).astype(np.float32)
    for got, want in zip(early._hits(thi), late._hits(thi)):
        np.testing.assert_array_equal(got, want)
    assert visited == [own]
    assert same_bits(early.sim, late.sim)
    # the levels, from the batch's first
    early, late = pair()
    m = ladder_level(64 * rng.integers(1, 4))
    every = np.arange(q)
    for lv in (m, ladder_level(2 * m), ladder_level(4 * m), ladder_level(16 * m)):
        if late.n == 0:  # no open note: the engine asks no level (every cell is scored)
            break
        got, tau = early.cols(lv, every)
        want, want_tau = late.cols(lv, every)
        assert same_bits(tau, want_tau)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    assert same_bits(early.sim, late.sim)
