"""A decay's ``lower_bound`` holds for notes of default salience
(``Decay.lower_bound``); a family that may read salience
(``Decay.reads_salience``, True unless declared) can fall below it for other
notes, so the engine's pruning trusts the bound only where every note has
default salience: a contributor's decay whose floor scales with salience,
declared as documented, gives the reference's rankings even where a
query's top C holds negative similarities (the product ranker's bound there
is ``similarity x lowest recency``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest

from memsim.core.params import Interval
from memsim.core.rng import seed_sequence
from memsim.data.stream import make_stream
from memsim.engine import Arm, SimSettings, reference, simulate
from memsim.policies import REGISTRY, ArrayContext, Decay, Policy



@dataclass(frozen=True, kw_only=True)
class SalienceFloor(Decay):
    """``floor * min(salience, 1) + (1 - floor) * 0.5 ** (age / 5 d)``; its
    ``lower_bound`` is the floor, for a note of default salience."""

    name: ClassVar[str] = "test-salience-floor"
    floor: float = 0.3
    _constraints: ClassVar[dict] = {"floor": Interval(0, 1, closed="left")}

    def recency(self, age, ctx):
        sal = np.minimum(np.asarray(ctx.salience, dtype=np.float64), 1.0)
        return self.floor * sal + (1.0 - self.floor) * np.exp2(-np.maximum(age, 0.0) / 5.0)

    def upper_bound(self):
        return 1.0

    def lower_bound(self):
        return self.floor


@dataclass(frozen=True, kw_only=True)
class Undeclared(SalienceFloor):
    """Reads salience, declares it reads none."""

    name: ClassVar[str] = "test-salience-undeclared"
    reads_salience: ClassVar[bool] = False


def _stream(salience: bool):
    """Queries opposite to the notes: most cosines are negative, so the top
    C holds negative scores; a fifth of the notes has salience 0.05."""
    rng = np.random.default_rng(0)
    n, q, dim = 1500, 30, 8
    base = rng.normal(size=dim)
    notes = pd.DataFrame({"note_id": np.arange(n), "created_at": np.sort(rng.uniform(-60, 10, n)),
                          "tokens": rng.integers(10, 200, n), "actor": "a",
                          "salience": (rng.choice([1.0, 0.05], n, p=[0.8, 0.2]) if salience
                                       else 1.0)})
    emb = (base + 0.3 * rng.normal(size=(n, dim))).astype(np.float32)
    qemb = (-base + 0.3 * rng.normal(size=(q, dim))).astype(np.float32)
    queries = pd.DataFrame({"query_id": np.arange(q), "t": np.sort(rng.uniform(10, 20, q)),
                            "actor": "a"})
    qrels = pd.DataFrame({"query_id": np.arange(q), "note_id": rng.choice(n, q), "gain": 1.0})
    return make_stream(notes, queries, qrels, note_embeddings=emb, query_embeddings=qemb,
                       meta={"name": "negative"})


@pytest.mark.parametrize("timing", ["per-tick", "per-query"])
@pytest.mark.parametrize("salience", [True, False])
def test_a_salience_scaled_floor_gives_the_references_rankings(timing, salience):
    arm = Arm("p", Policy(decay=SalienceFloor()))
    s = SimSettings(candidates=8, budget_tokens=800, feedback_mode=timing, save_rankings=True)
    stream = _stream(salience)
    want = reference.simulate(stream, [arm], s, seed_sequence(5))
    got = simulate(stream, [arm], s, seed_sequence(5))
    pd.testing.assert_frame_equal(got.rankings, want.rankings, check_exact=True)
    pd.testing.assert_frame_equal(got.queries, want.queries, check_exact=True)
    assert (want.rankings["score"] < 0).any()  # the bound below 0 is in play


def test_the_built_in_families_that_declare_no_salience_read_none():
    """A family declaring ``reads_salience = False`` gives the same
    multipliers whatever the notes' salience (ai-memory's scales with it)."""
    age = np.array([[0.0, 3.0, 40.0, 400.0]])
    for name, cls in REGISTRY["decay"].items():
        if not cls.__module__.startswith("memsim."):  # a plugin another test registered
            continue
        if cls.reads_salience:
            assert name == "ai-memory", name
            continue
        decay = cls()
        got = [np.asarray(decay.recency(age, ArrayContext(t=500.0, created_at=[0, 1, 2, 3],
                                                          salience=[s] * 4)))
               for s in (1.0, 0.05, 2.0)]
        np.testing.assert_array_equal(got[0], got[1], err_msg=name)
        np.testing.assert_array_equal(got[0], got[2], err_msg=name)


def test_the_checker_refuses_a_salience_reader_that_declares_it_reads_none():
    from memsim.checks.testing import CheckError, check_component

    check_component(SalienceFloor)  # declares nothing: its bound is trusted at default salience
    with pytest.raises(CheckError) as err:
        check_component(Undeclared)
    assert err.value.check == "reads_salience"
