"""The first similarity level's scan run in the pass that writes each block
of the product (:meth:`Scan.write`, compiled) finds the cells numpy's scan
of the written block finds (:meth:`Scan.of`), and writes the same floats,
for whole blocks and blocks of picked notes, valid masks read or not, dead
notes among the picked ones or not, thresholds on either side of zero, NaN
products, and cell buffers too small."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memsim.engine.batch as batch_module
from memsim.core import jit
from memsim.engine.batch import Scan

pytestmark = pytest.mark.skipif(not jit.available(), reason="numba is not installed")


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), q=st.integers(1, 9), width=st.integers(1, 40),
       picked=st.booleans(), varying=st.sampled_from(["none", "some", "all"]),
       dead=st.booleans(), nan=st.booleans(), hit_buffer=st.sampled_from([1, 3, 1 << 14]))
def test_the_scan_in_the_write_finds_the_cells_of_numpys_scan(seed, q, width, picked, varying,
                                                              dead, nan, hit_buffer):
    rng = np.random.default_rng(seed)
    n = 3 * width
    s = slice(width, 2 * width)  # the middle block of three
    o = rng.standard_normal((width, q)).astype(np.float32)
    if nan:
        o[rng.random(o.shape) < 0.1] = np.nan
    qscale = rng.uniform(0.2, 2.0, q).astype(np.float32)
    nscale = rng.uniform(0.2, 2.0, width).astype(np.float32)
    th = rng.uniform(-1.0, 1.0, q).astype(np.float32)
    valid = rng.random((q, n)) < 0.8
    vary = {"none": None, "some": rng.random(n) < 0.5, "all": np.zeros(n, dtype=bool)}[varying]
    dead_notes = rng.random(n) < 0.4 if dead else None
    at = np.flatnonzero(rng.random(width) < 0.5) if picked else None
    if picked and dead_notes is not None:
        # the notes not picked are not computed: dead (some picked ones too)
        dead_notes[s][np.setdiff1d(np.arange(width), at)] = True
    pick = None if at is None else (at, at)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(batch_module, "HIT_BUFFER", hit_buffer)
        mp.setattr(batch_module, "_LOCAL", threading.local())
        got_out = np.full((q, n), 7.0, dtype=np.float32)
        got = Scan(th, valid, vary, dead_notes)
        got.write(o, s, pick, qscale, nscale, got_out)

    want_out = np.full((q, n), 7.0, dtype=np.float32)
    if pick is None:
        batch_module._write_block.py_func(o, qscale, nscale, want_out, s.start)
    else:
        batch_module._write_picked.py_func(o, at, at, qscale, nscale[at], want_out, s.start,
                                           width)
    assert got_out.tobytes() == want_out.tobytes()
    want = Scan(th, valid, vary, dead_notes)
    want.visit(want_out, s.start, s.stop)
    for g, w in zip(got.hits(), want.hits()):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
