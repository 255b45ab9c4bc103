"""A retriever's parameters change its similarity: the values a batch
shares between arms (and a replay cache between replays) are kept under the
retriever's name and parameters (``engine.state.similarity_key``), so two
arms of one retriever kind with other parameters never read each other's,
while arms whose retrievers differ by their prefilter alone share one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest

from memsim.core.params import Interval
from memsim.core.rng import seed_sequence
from memsim.engine import Arm, ReplayCache, SimSettings, reference, simulate
from memsim.engine.state import similarity_key
from memsim.policies import Policy, Retriever, resolve_policy
from memsim.policies.decay import HalfLife
from memsim.policies.rank import Additive

from .helpers import random_stream


@dataclass(frozen=True, kw_only=True)
class Sharpened(Retriever):
    """``sign(c) |c| ** power`` of the cosine ``c``."""

    name: ClassVar[str] = "test-sharpened"
    power: float = 1.0
    _constraints: ClassVar[dict] = {"power": Interval(0, None, closed="neither")}

    def similarity(self, ctx):
        d = np.asarray(ctx.dots, dtype=np.float64)
        norms = np.sqrt(np.asarray(ctx.qnorm2, dtype=np.float64))[:, None] * np.sqrt(
            np.asarray(ctx.nnorm2, dtype=np.float64))[None, :]
        c = d / np.maximum(norms, 1e-30)
        return np.sign(c) * np.abs(c) ** self.power


def _arm(name: str, power: float, prefilter: int = 0) -> Arm:
    return Arm(name, Policy(retriever=Sharpened(power=power, prefilter=prefilter),
                            decay=HalfLife(half_life_days=3.0), ranker=Additive()))


def test_the_key_names_every_parameter_but_the_prefilter():
    a, b = _arm("a", 1.0).policy.retriever, _arm("b", 3.0).policy.retriever
    assert similarity_key(a) != similarity_key(b)
    assert similarity_key(_arm("c", 3.0, prefilter=5).policy.retriever) == similarity_key(b)
    cosine = resolve_policy({"retriever": {"kind": "cosine", "prefilter": 30}}, "x").retriever
    assert similarity_key(cosine) == "cosine"


@pytest.mark.parametrize("engine", [reference.simulate, simulate])
@pytest.mark.parametrize("timing", ["per-tick", "per-query"])
def test_arms_of_one_retriever_kind_with_other_parameters_do_not_share(engine, timing):
    stream = random_stream(5, n_notes=300, n_queries=60, dim=8)
    arms = [_arm("p1", 1.0), _arm("p3", 3.0), _arm("p3-prefiltered", 3.0, prefilter=20)]
    s = SimSettings(candidates=6, save_rankings=True, tick_days=2.0, feedback_mode=timing)
    both = engine(stream, arms, s, seed_sequence(5))
    for arm in arms:
        alone = engine(stream, [arm], s, seed_sequence(5))
        got = both.rankings[both.rankings["policy"] == arm.policy_name].reset_index(drop=True)
        pd.testing.assert_frame_equal(alone.rankings, got, check_exact=True)
    p1, p3 = (both.rankings[both.rankings["policy"] == n] for n in ("p1", "p3"))
    assert not np.array_equal(p1["score"].to_numpy(), p3["score"].to_numpy())


def test_a_replay_cache_keeps_each_parameter_apart():
    stream = random_stream(6, n_notes=300, n_queries=60, dim=8)
    s = SimSettings(candidates=6, save_rankings=True, tick_days=2.0)
    fresh = simulate(stream, [_arm("p3", 3.0)], s, seed_sequence(5))
    cache = ReplayCache(10**9)
    simulate(stream, [_arm("p1", 1.0)], s, seed_sequence(5), cache=cache)
    again = simulate(stream, [_arm("p3", 3.0)], s, seed_sequence(5), cache=cache)
    pd.testing.assert_frame_equal(fresh.rankings, again.rankings, check_exact=True)
