"""Reader model: the U-shaped use curve and answer_prob."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsim.core.errors import ConfigError, ParameterError
from memsim.policies import REGISTRY
from memsim.evaluation.reader import READERS, NullReader, PositionalReader, reader_from_config


def _curve_at(reader, n):
    return reader.p_use(np.arange(n)[None, :], np.array([n]))[0]


def test_default_curve_is_lost_in_the_middle_at_20_documents():
    # Liu et al. (TACL 2024), 20 documents: first best, last nearly as good,
    # the middle roughly 20 points below either end (approximate default).
    p = _curve_at(PositionalReader(), 20)
    middle = p[9:11].mean()
    assert p.argmax() == 0
    assert p[0] - p[-1] < 0.08  # the end is nearly as good as the start
    assert 0.15 <= p[0] - middle <= 0.25
    assert 0.15 <= p[-1] - middle <= 0.25
    assert (p[0] + p[-1]) / 2 - middle == pytest.approx(0.20, abs=0.03)
    # U-shaped: down to the middle, then up
    k = int(p.argmin())
    assert 5 <= k <= 14
    assert (np.diff(p[: k + 1]) <= 1e-12).all() and (np.diff(p[k:]) >= -1e-12).all()


def test_length_penalty_decreases_with_more_notes():
    r = PositionalReader()
    x = np.linspace(0, 1, 11)
    values = [r.curve(x, n) for n in (1, 5, 10, 20, 40, 100)]
    for a, b in zip(values, values[1:]):
        assert (b <= a + 1e-12).all()
    assert PositionalReader(length_penalty=0.0).curve(0.0, 100) == pytest.approx(0.76)
    # at n_ref the parameters read directly
    r = PositionalReader(p_first=0.9, p_last=0.8, depth=0.3, n_ref=7)
    assert r.curve(0.0, 7) == pytest.approx(0.9)
    assert r.curve(1.0, 7) == pytest.approx(0.8)
    assert r.curve(0.5, 7) == pytest.approx(0.85 - 0.3)


def test_answer_prob_single_note_and_nothing_relevant():
    r = PositionalReader()
    pos = np.array([[0, 1, 2, -1]])
    n = np.array([3])
    p = r.p_use(pos, n)[0]
    assert r.answer_prob(pos, np.array([[0.0, 1.0, 0.0, 0.0]]), n)[0] == pytest.approx(p[1])
    assert r.answer_prob(pos, np.array([[0.0, 0.0, 0.0, 2.0]]), n)[0] == 0.0  # unpacked
    assert r.answer_prob(pos, np.zeros((1, 4)), n)[0] == 0.0
    two = r.answer_prob(pos, np.array([[1.0, 0.0, 1.0, 0.0]]), n)[0]
    assert two == pytest.approx(1 - (1 - p[0]) * (1 - p[2]))
    stale = r.answer_prob(pos, np.array([[1.0, -1.0, 0.0, 0.0]]), n)[0]
    assert stale == pytest.approx(p[0] * (1 - 0.5 * p[1]))
    assert PositionalReader(stale_weight=0.0).answer_prob(
        pos, np.array([[1.0, -1.0, 0.0, 0.0]]), n)[0] == pytest.approx(p[0])


@st.composite
def contexts(draw):
    q = draw(st.integers(1, 3))
    c = draw(st.integers(1, 25))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    packed = rng.random((q, c)) < rng.random()
    position = np.full((q, c), -1, dtype=np.int64)
    for r in range(q):
        cols = np.flatnonzero(packed[r])
        position[r, cols] = rng.permutation(len(cols))
    gains = rng.choice([-1.0, 0.0, 0.0, 0.5, 1.0, 3.0], size=(q, c))
    reader = PositionalReader(
        p_first=float(rng.uniform(0, 1)), p_last=float(rng.uniform(0, 1)),
        depth=float(rng.uniform(0, 1)), shape=float(rng.uniform(0.2, 6)),
        n_ref=int(rng.integers(1, 40)), length_penalty=float(rng.uniform(0, 0.2)),
        stale_weight=float(rng.uniform(0, 1)))
    return reader, position, gains, packed.sum(axis=1)


@settings(max_examples=150, deadline=None)
@given(contexts())
def test_answer_prob_in_unit_interval_and_monotone(ctx):
    reader, position, gains, n = ctx
    for r in (reader, PositionalReader()):
        ap = r.answer_prob(position, gains, n)
        assert ap.shape == (position.shape[0],)
        assert ((ap >= 0) & (ap <= 1)).all()
        # more relevant notes (same context, same n): never lower
        more = np.where((position >= 0) & (gains == 0), 1.0, gains)
        assert (r.answer_prob(position, more, n) >= ap - 1e-12).all()
        # stale notes never help
        worse = np.where((position >= 0) & (gains == 0), -1.0, gains)
        assert (r.answer_prob(position, worse, n) <= ap + 1e-12).all()
        # nothing relevant packed: 0
        none = np.where(position >= 0, np.minimum(gains, 0.0), gains)
        assert (r.answer_prob(position, none, n) == 0).all()


def test_null_reader_returns_nan():
    out = NullReader().answer_prob(np.zeros((3, 4), np.int64), np.ones((3, 4)), np.full(3, 4))
    assert out.shape == (3,) and np.isnan(out).all()


def test_config_round_trip_and_errors():
    assert set(READERS) == {"positional", "none"}
    assert "reader" not in REGISTRY and all(
        cls not in table.values() for table in REGISTRY.values() for cls in READERS.values())
    r = PositionalReader(depth=0.3, shape=2.0)
    assert reader_from_config(r.to_config()) == r
    assert reader_from_config({}) == PositionalReader()
    assert reader_from_config(None) == PositionalReader()
    assert isinstance(reader_from_config("none"), NullReader)
    assert reader_from_config({"kind": "none"}).to_config() == {"kind": "none"}
    assert PositionalReader.from_config({"depth": 0.1}).depth == 0.1
    with pytest.raises(ParameterError, match=r"^reader\.depth: The 'depth' parameter"):
        reader_from_config({"kind": "positional", "depth": 1.5})
    with pytest.raises(ConfigError, match=r"^reader\.shape:"):
        reader_from_config({"shape": 0.0})
    with pytest.raises(ConfigError, match=r"^reader\.n_ref:"):
        reader_from_config({"n_ref": 2.5})
    with pytest.raises(ConfigError, match=r"^reader\.dept: unknown parameter.*'depth'"):
        reader_from_config({"dept": 0.2})
    with pytest.raises(ConfigError, match=r"^reader\.kind: unknown reader 'liu'"):
        reader_from_config({"kind": "liu"})
    with pytest.raises(ConfigError, match=r"^exp\.reader: expected"):
        reader_from_config(3, "exp.reader")
    with pytest.raises(ConfigError, match=r"^reader\.kind: expected 'none'"):
        NullReader.from_config({"kind": "positional"})
