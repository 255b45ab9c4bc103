"""``memsim advise``: today's setting as trial 0 whatever the cuts searched,
and the automatic choice between a time split and rolling folds on logs
whose queries share times."""

from __future__ import annotations

import dataclasses
import warnings
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memsim

from memsim.core.errors import ConfigError
from memsim.tuning.advice import (MIN_TEST_QUERIES, AdviseSpec, _folds, _resolved, _Space,
                                  _time_cuts, advise)

from .test_advise import experiment, planted_world
from .test_advise_edges import trace_exp, write_trace


# --------------------------------------------------------------------------
# trial 0 is today's setting, with one cut in the space too
# --------------------------------------------------------------------------


def _space(today: dict, table: dict) -> tuple[_Space, dict]:
    exp = experiment(planted_world(10.0), today, table, replicates=1)
    pol = exp.policies["today"]
    cands = int(pol.candidates or exp.sim.candidates)
    space = _Space(AdviseSpec.from_table(exp.advise, exp), pol, cands, "", (), "")
    return space, _resolved(pol.to_config(), cands)


@pytest.mark.parametrize("cuts, inside", [
    (["score"], True), (["none"], False), (["similarity"], False), (["score", "none"], True),
])
def test_todays_cut_is_trial_zero_only_where_the_cuts_hold_it(cuts, inside):
    today = {"ranker": "similarity", "packer": {"kind": "greedy", "min_relative_score": 0.5}}
    space, now = _space(today, {"cuts": cuts})
    own = space.own_params()
    assert space.in_space(own) is inside
    if inside:
        assert space.resolved(own) == now


def test_an_inert_cut_on_is_not_read_as_a_change_of_packer():
    # cut_on without a cut does nothing: today's setting is trial 0 as it is
    today = {"ranker": "similarity", "packer": {"kind": "greedy", "cut_on": "similarity"}}
    space, now = _space(today, {})
    own = space.own_params()
    assert space.in_space(own) and space.resolved(own) == now


def _with_today(exp: memsim.Experiment, today: dict) -> memsim.Experiment:
    return memsim.experiment_from_dict({**exp.to_config(), "policies": {"today": today}})


def test_with_one_cut_searched_every_fold_starts_from_todays_cut(tmp_path):
    trace = write_trace(tmp_path / "t.jsonl")
    table = {"rankers": ["current"], "packers": ["greedy"], "candidates": [20]}
    today = {"ranker": "similarity", "packer": {"kind": "greedy", "min_relative_score": 0.5}}
    adv = advise(_with_today(trace_exp(trace, cuts=["score"], **table), today))
    first = adv.trials_table[adv.trials_table["number"] == 0]
    assert list(first["params.cut_level"]) == [0.5] * len(adv.folds)
    # today's setting was searched: the best trial is no worse on the tuning queries
    assert adv.tuning["recommended"] >= adv.tuning["current"]
    # only trial 0, today's inert cut_on kept: nothing better found, no change
    inert = {"ranker": "similarity", "packer": {"kind": "greedy", "cut_on": "similarity"}}
    adv = advise(_with_today(trace_exp(trace, cuts=["none", "score"], **{
        **table, "trials": 1, "batch": 1}), inert))
    assert adv.changes == [] and adv.verdict_reason == "nothing better found"


def test_todays_cut_level_outside_the_drawn_range_is_searched_without_a_warning(tmp_path):
    # a stray warning on stderr would break the lines of --progress json
    today = {"ranker": "similarity", "packer": {"kind": "greedy", "min_relative_score": 0.99}}
    exp = _with_today(trace_exp(write_trace(tmp_path / "t.jsonl"), rankers=["current"],
                                packers=["greedy"], cuts=["score", "none"]), today)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        adv = advise(exp)
    assert not [w for w in caught if "out of range" in str(w.message)]
    first = adv.trials_table[adv.trials_table["number"] == 0]
    assert list(first["params.cut_level"]) == [0.99] * len(adv.folds)


# --------------------------------------------------------------------------
# the automatic choice counts the test queries the time cut leaves
# --------------------------------------------------------------------------


def test_sessions_of_questions_asked_at_one_time_get_rolling_folds_not_a_refusal(tmp_path):
    # 3 sessions of 150 questions: a 70% cut lands in the last session and
    # moves past it, leaving nothing to test on; 2 folds cut between sessions
    trace = write_trace(tmp_path / "s.jsonl", times=[1.0] * 150 + [2.0] * 150 + [3.0] * 150)
    adv = advise(trace_exp(trace))
    assert adv.split.startswith("rolling origin over time, 2 folds (the 450 queries, at 3 "
                                "distinct times, allow no more)")
    assert [f["n_test"] for f in adv.folds] == [150, 150]


def test_a_time_split_moved_past_a_session_to_few_test_queries_gives_way_to_folds(tmp_path):
    # 400 queries: nominally 120 to test on, but the 70% cut moves past 130
    # queries asked at one time and leaves 20, fewer than MIN_TEST_QUERIES
    times = list(range(1, 251)) + [300.0] * 130 + list(range(400, 420))
    trace = write_trace(tmp_path / "t.jsonl", times=times)
    adv = advise(trace_exp(trace))
    assert adv.split.startswith("rolling origin over time, 3 folds")
    with pytest.raises(ConfigError, match=r"^advise\.split: not used \(advise\.folds is "
                       r"automatic, and a split leaving 20 of the 400 queries"):
        advise(trace_exp(trace, split=0.65))


@pytest.fixture(scope="module")
def stream_exp(tmp_path_factory):
    return trace_exp(write_trace(tmp_path_factory.mktemp("fold") / "t.jsonl", queries=2))


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 260), min_size=1, max_size=8),
       split=st.sampled_from([0.3, 0.5, 0.7, 0.9]))
def test_automatic_folds_respect_time_and_test_on_enough_queries(stream_exp, sizes, split):
    """Sessions of queries asked at one time each: the automatic cut is a
    time split only where it leaves MIN_TEST_QUERIES to test on or the log
    allows no rolling folds; every part is non-empty and in time order; and
    a refusal only where no cut is possible."""
    times = np.repeat(np.arange(len(sizes), dtype=float), sizes)
    queries = pd.DataFrame({"query_id": np.arange(len(times)), "t": times})
    replays = SimpleNamespace(stream=lambda r: SimpleNamespace(queries=queries))
    # the split as an automatic choice would use it (not a setting to refuse)
    spec = dataclasses.replace(AdviseSpec.from_table({"current": "today"}, stream_exp),
                               split=split)
    possible = [k for k in (1, 2, 3) if _time_cuts(times, k, split) is not None]
    try:
        folds, _ = _folds(stream_exp, spec, replays)
    except ConfigError:
        assert not possible
        return
    t_of = dict(zip(queries["query_id"], times))
    for f in folds:
        assert f.tune and f.test and not f.tune & f.test
        assert max(t_of[q] for _, q in f.tune) < min(t_of[q] for _, q in f.test)
    if len(folds) == 1 and any(k > 1 for k in possible):
        assert len(folds[0].test) >= MIN_TEST_QUERIES


@pytest.mark.parametrize("level", ["INFO", "WARNING"])
def test_advise_leaves_optunas_log_level_as_it_found_it(tmp_path, level):
    """The search runs with Optuna's log at ERROR (a line per trial would
    bury the progress lines); a notebook's own level is back after it."""
    import optuna

    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(getattr(optuna.logging, level))
    try:
        advise(trace_exp(write_trace(tmp_path / "t.jsonl")))
        assert optuna.logging.get_verbosity() == getattr(optuna.logging, level)
    finally:
        optuna.logging.set_verbosity(before)


def test_one_tuning_and_one_fresh_replicate_are_named_as_one():
    """A synthetic workload tuned on one replicate and tested on one fresh
    one says so (not "replicates 0-0", "1 fresh replicate (1-1")."""
    from .test_advise import HALF_LIFE_ONLY

    exp = experiment(planted_world(10.0),
                     {"ranker": "product", "decay": {"kind": "half-life", "half_life_days": 1.0},
                      "packer": "skip-fill"},
                     {**HALF_LIFE_ONLY, "trials": 2, "batch": 2, "holdout_replicates": 1},
                     replicates=1)
    assert advise(exp).split == "tuned on replicate 0, tested on 1 fresh replicate (1: a new seed)"


def test_the_smallest_relevant_note_named_is_one_that_exists_at_its_query():
    """"Nothing fits the budget" names the smallest note of R+ (the relevant
    notes that exist at the query's time, as the metrics count them), not a
    smaller one created after the query, which would contradict it."""
    from memsim.tuning.advice import _smallest_relevant

    stream = SimpleNamespace(
        queries=pd.DataFrame({"query_id": [0, 1], "t": [10.0, 20.0]}),
        notes=pd.DataFrame({"note_id": [5, 6, 7], "created_at": [1.0, 15.0, 30.0],
                            "tokens": [500, 40, 20]}),
        qrels=pd.DataFrame({"query_id": [0, 0, 1, 1], "note_id": [5, 6, 5, 7],
                            "gain": [1.0, 1.0, 1.0, 1.0]}))
    replays = SimpleNamespace(stream=lambda r: stream)
    rows = pd.DataFrame({"replicate": [0, 0], "query_id": [0, 1]})
    # note 6 exists only after query 0, note 7 only after query 1
    assert _smallest_relevant(rows, replays) == 500
    stream.notes.loc[1, "created_at"] = 5.0  # now in query 0's R+
    assert _smallest_relevant(rows, replays) == 40


@pytest.mark.parametrize("column, values, want", [
    # a type the engine does not know (or none) is "other" to it
    ("memory_type", ["episodic", "diary", "episodic"], ("memory_type", ("episodic", "other"))),
    ("memory_type", ["semantic", None], ("memory_type", ("semantic", "other"))),
    ("memory_type", ["diary", "journal"], ("", ())),  # one type to the engine: "other"
    # a tier it does not know is "task"
    ("tier", ["scratch", "draft"], ("tier", ("task", "scratch"))),
    ("tier", ["task", "draft"], ("", ())),
])
def test_per_type_keys_on_the_types_as_the_engine_reads_them(column, values, want):
    """The per-type ranking is searched when the engine sees several types
    (or tiers), counting the texts it does not know as it does."""
    from memsim.tuning.advice import _per_type_key

    stream = SimpleNamespace(notes=pd.DataFrame({column: values}))
    assert _per_type_key(stream) == want
