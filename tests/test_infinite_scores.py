"""A score of +inf (a plugin's "pin this note first") is refused with one
error naming the arm, the ranker and the query, by the engine (every
accelerator, per-tick and per-query feedback) and by the reference engine
alike: it would rank first and could not be packed. -inf and NaN stay what
they were: never a candidate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

import memsim
from memsim.core.rng import seed_sequence
from memsim.engine import Arm, SimSettings, reference, simulate
from memsim.policies import REGISTRY, Ranker, register
from memsim.policies import base as policy_base
from memsim.runs.config import resolve_policy

from .helpers import random_stream


@dataclass(frozen=True, kw_only=True)
class PinRanker(Ranker):
    """The similarity, with the notes of one importance pinned to ``pin``."""

    name: ClassVar[str] = "test-pin"
    pin: float = float("inf")

    def combine(self, rel, rec, ctx):
        pinned = np.broadcast_to(np.asarray(ctx.importance) > 0.9, np.shape(rel))
        return np.where(pinned, self.pin, rel)


@pytest.fixture
def pin_ranker():
    register(PinRanker)
    yield
    REGISTRY["ranker"].pop("test-pin", None)


def _arms(pin: float, timing: str) -> list[Arm]:
    return [Arm("plain", resolve_policy({"preset": "similarity-only"}, "policies.plain")),
            Arm("pinned", resolve_policy({"ranker": {"kind": "test-pin", "pin": pin},
                                          "feedback": {"timing": timing}}, "policies.pinned"))]


def _stream():
    s = random_stream(3, n_notes=200, n_queries=30)
    s.notes["importance"] = np.where(np.arange(200) == 17, 1.0, 0.5)
    return s


@pytest.mark.parametrize("engine", ["engine", "reference"])
@pytest.mark.parametrize("timing", ["per-tick", "per-query"])
def test_a_score_of_plus_infinity_is_refused_naming_the_arm(pin_ranker, engine, timing):
    sim = simulate if engine == "engine" else reference.simulate
    with pytest.raises(policy_base.ComponentOutputError,
                       match=r"^ranker 'test-pin' \(PinRanker\): arm 'pinned' scored a note "
                             r"\+inf for the query at t = [-0-9.e+]+ \(query row \d+\): a "
                             r"score is a number, or -inf or NaN \(never a candidate\)") as err:
        sim(_stream(), _arms(np.inf, timing), SimSettings(candidates=8), seed_sequence(0))
    assert err.value.check == "combine"


@pytest.mark.parametrize("pin", [-np.inf, np.nan])
def test_minus_infinity_and_nan_are_still_scores(pin_ranker, pin):
    # never a candidate (-inf and NaN alike): the engine and the reference
    # agree, and the pinned note is never packed
    kw = dict(candidates=8, save_rankings=True)
    got = simulate(_stream(), _arms(pin, "per-tick"), SimSettings(**kw), seed_sequence(0))
    want = reference.simulate(_stream(), _arms(pin, "per-tick"), SimSettings(**kw),
                              seed_sequence(0))
    a, b = got.queries, want.queries
    assert a.equals(b)


def test_a_run_with_an_infinite_score_fails_with_one_message(pin_ranker, tmp_path):
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "t", "replicates": 1, "seed": 1},
        "workload": {"horizon_days": 5, "backfill_days": 5},
        "policies": {"p": {"ranker": "test-pin"}}})
    with pytest.raises(policy_base.ComponentOutputError, match=r"arm 'p' scored a note \+inf"):
        memsim.run_experiment(exp, out=None)
