"""``memsim advise`` on small and odd logs of one's own: a couple of sessions
of questions asked at one time, a re-run of the written ``config.toml``, a
last test block with nothing to gain."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import memsim
from memsim.core.errors import ConfigError
from memsim.data.trace import TraceWriter
from memsim.tuning.advice import advise

#: a search of two trials over two rankings: fast, enough to run every part
FAST = {"trials": 2, "batch": 2, "rankers": ["current", "similarity"],
        "packers": ["skip-fill"], "cuts": ["none"], "candidates": [10]}


def write_log(path: Path, times: list[float], used=lambda j: True, notes: int = 12) -> Path:
    """A log as :class:`TraceWriter` records it: ``notes`` notes, then query
    ``j`` at ``times[j]`` seconds after the last note (queries may share a
    time, as the questions of one session do), each with the logged top 4
    and, where ``used(j)``, the note it used."""
    clock = [1_700_000_000.0]
    rng = np.random.default_rng(5)
    words = ["lisbon", "dog", "paris", "café", "東京", "sister", "car", "rain", "job", "house"]
    texts = [" ".join(rng.choice(words, 3)) + f" fact{i}" for i in range(notes)]
    with TraceWriter(path, header={"name": "mine"}, clock=lambda: clock[0]) as w:
        for i, text in enumerate(texts):
            clock[0] += 60.0
            w.note_added(f"n{i}", text, actor="ann")
        start = clock[0]
        for j, t in enumerate(times):
            clock[0] = start + 3600.0 * t
            target = j % notes
            q = w.query(texts[target].split()[-1], id=f"q{j}", actor="ann")
            w.retrieved(q, [f"n{(target + k) % notes}" for k in range(1, 5)])
            if used(j):
                w.used(q, [f"n{target}"])
    return path


def log_exp(trace: Path, **advise_table) -> memsim.Experiment:
    return memsim.experiment_from_dict({
        "experiment": {"name": "mine", "budget_tokens": 300, "replicates": 1},
        "workload": {"source": str(trace), "importer": "trace"},
        "policies": {"today": {"preset": "as-logged"}},
        "advise": {"current": "today", **FAST, **advise_table}})


def test_two_sessions_of_questions_are_split_between_the_sessions(tmp_path):
    # two sessions of 5 questions each: a 70% cut falls in the second session;
    # moved past it, it left nothing to test on, and the log was refused,
    # although a split between the sessions keeps every tie on one side
    trace = write_log(tmp_path / "two.jsonl", [1.0] * 5 + [2.0] * 5)
    for table in ({}, {"folds": 1}, {"folds": 1, "split": 0.9}):
        adv = advise(log_exp(trace, **table))
        assert [(f["n_tune"], f["n_test"]) for f in adv.folds] == [(5, 5)], table
        assert "tuned on the first 5 queries by time, tested on the last 5" in adv.split


def test_a_log_asked_at_one_time_is_refused_without_pointing_at_the_split(tmp_path):
    trace = write_log(tmp_path / "one.jsonl", [1.0] * 6)
    with pytest.raises(ConfigError) as info:
        advise(log_exp(trace))
    (msg,) = info.value.errors
    assert msg.startswith("workload: the log's 6 queries (1 distinct time) cannot be cut by "
                          "time into a tuning and a test part")
    assert "advise.split" not in msg  # no split helps a log asked at one time


@pytest.mark.parametrize("times", [
    [1.0, 2.0],                       # the smallest log: one split
    [1.0] * 4 + [2.0] * 4 + [3.0] * 4,  # three sessions: two folds, no more
    [1.0, 2.0, 2.0, 2.0],             # one split, moved before the last session
])
def test_rerunning_the_written_config_gives_the_same_advice_on_a_small_log(tmp_path, times):
    # the config.toml sets the folds that ran; the advice it gives, its
    # wording of how the log was cut included, is the first run's
    trace = write_log(tmp_path / "small.jsonl", times)
    first = advise(log_exp(trace), out=tmp_path / "a")
    again = advise(first.path / "config.toml", out=tmp_path / "b")
    drop_path = re.compile(r'"path": "[^"]*"')
    assert drop_path.sub("", again.to_json()) == drop_path.sub("", first.to_json())
    assert again.path.name.split("_")[-1] == first.path.name.split("_")[-1]
    if len(first.folds) > 1:
        assert "allow no more" in first.split
    else:
        assert "(the log is too small for rolling folds)" in first.split


def test_a_last_test_block_with_nothing_to_gain_prints_n_a_not_nan(tmp_path):
    # the last 3 of 12 queries used nothing: the last fold tunes (its tuning
    # part has gains) but its test block has none; its shares are n/a
    trace = write_log(tmp_path / "late.jsonl", [float(j) for j in range(12)],
                      used=lambda j: j < 9)
    adv = advise(log_exp(trace, runner_ups=2, rankers=["current", "similarity", "half-life"],
                         trials=4, batch=4))
    assert len(adv.folds) == 3 and adv.folds[-1]["tuned"]
    text = adv.to_text()
    assert not re.search(r"\bnan\b", text), text
    assert adv.stages  # the search found a change: its stages are printed
    assert "on the last fold's 3 test queries, none of them with something to gain" in text
    json.loads(adv.to_json())  # NaN is written as null


def test_a_log_judged_only_negatively_is_not_said_to_have_no_ground_truth(tmp_path):
    # judgements that all mark notes misleading are ground truth, with
    # nothing in it to find: the refusal says so, not "no ground truth"
    clock = [1_700_000_000.0]
    with TraceWriter(tmp_path / "neg.jsonl", clock=lambda: clock[0]) as w:
        for i in range(3):
            clock[0] += 60.0
            w.note_added(f"n{i}", f"old address {i}")
        for j in range(4):
            clock[0] += 3600.0
            q = w.query("address", id=f"q{j}")
            w.retrieved(q, ["n0", "n1"])
            w.judgement(q, "n0", -1.0)
    with pytest.raises(ConfigError) as info:
        advise(log_exp(tmp_path / "neg.jsonl"))
    (msg,) = info.value.errors
    assert msg.startswith("workload: nothing to measure: no query has a relevant note (all 4 "
                          "judgements of the log have a negative gain")
    assert "no ground truth" not in msg


def test_counts_of_one_query_read_as_one_query():
    """The advice's counts of queries (a split's tuning part, the held-out
    queries, a fold's test block) read "1 query", not "1 queries"."""
    from memsim.tuning.advice import _queries

    assert _queries(1) == "1 query"
    assert _queries(1, "held-out") == "1 held-out query"
    assert _queries(12, "test") == "12 test queries"
