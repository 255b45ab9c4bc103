"""The relevance cut of the value packers on similarity (``cut_on``), and the
``hivemind`` preset's cut applied to the quantity its argument is about."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import memsim
from memsim.policies import assumptions
from memsim.policies.packing import Exact, Greedy, GreedySwap
from memsim.policies.presets import HIVEMIND_CUT, resolve_policy


@pytest.mark.parametrize("cls", [Greedy, GreedySwap, Exact])
def test_the_cut_compares_similarity_not_the_score(cls):
    # candidate 1 scores well (a recent note) but is barely similar; candidate
    # 2 scores low (an old note) but is as similar as the best
    values = np.array([[1.0, 0.9, 0.3]])
    sim = np.array([[0.6, 0.2, 0.6]])
    tokens = np.array([[100, 100, 100]])
    valid = np.ones((1, 3), bool)
    budget = np.array([1000])
    on_score = cls(min_relative_score=0.7).pack(values, tokens, valid, budget)
    on_sim = cls(min_relative_score=0.7, cut_on="similarity").pack(
        values, tokens, valid, budget, similarity=sim)
    assert on_score.tolist() == [[True, True, False]]
    assert on_sim.tolist() == [[True, False, True]]
    assert cls(min_relative_score=0.7, cut_on="similarity").needs_similarity
    assert not cls(min_relative_score=0.0, cut_on="similarity").needs_similarity
    assert not cls(min_relative_score=0.7).needs_similarity
    with pytest.raises(ValueError, match="cuts on similarity"):
        cls(min_relative_score=0.7, cut_on="similarity").pack(values, tokens, valid, budget)


def test_cut_on_is_validated():
    with pytest.raises(memsim.ConfigError, match="cut_on"):
        memsim.experiment_from_dict({
            "experiment": {"name": "x"},
            "policies": {"p": {"packer": {"kind": "greedy", "cut_on": "age"}}}})


def _run(packers: dict, decay) -> pd.DataFrame:
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "cut", "seed": 3, "replicates": 1},
        "workload": {"horizon_days": 20, "backfill_days": 200, "notes_per_day": 8.0,
                     "queries_per_day": 6.0},
        "policies": {name: {"ranker": "product", "decay": decay, "packer": pk}
                     for name, pk in packers.items()}})
    return memsim.run_experiment(exp, out=None, report=False).queries


def test_the_engine_gives_the_packer_the_candidates_similarity():
    score = {"kind": "greedy-swap", "min_relative_score": 0.7}
    sim = dict(score, cut_on="similarity")
    cols = ["utility", "n_packed", "tokens_used", "recall"]
    # without decay the score is the similarity: both cuts pack the same notes
    flat = _run({"score": score, "sim": sim}, "none").set_index(["policy", "query_id"])
    a, b = flat.loc["score", cols], flat.loc["sim", cols]
    pd.testing.assert_frame_equal(a, b)
    # with a decay the score also carries age: the cuts differ
    aged = _run({"score": score, "sim": sim},
                {"kind": "half-life", "half_life_days": 10.0}).set_index(["policy", "query_id"])
    assert not aged.loc["score", "n_packed"].equals(aged.loc["sim", "n_packed"])


def test_the_hivemind_preset_cuts_on_similarity():
    packer = resolve_policy({"preset": "hivemind"}, "hivemind").packer
    assert packer.cut_on == "similarity" and packer.min_relative_score == HIVEMIND_CUT
    marks = assumptions("hivemind")
    assert "packer.cut_on" in marks and "similarity" in marks["packer.cut_on"]
