"""``memsim advise`` on logs at the edges: nothing to measure, a fold with
nothing to tune on, a budget curve, settings that do not apply, a log of a
handful of queries, an interrupted run folder."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import memsim
from memsim.core.errors import ConfigError
from memsim.reporting.stats import utility_share
from memsim.tuning.advice import advise

#: a search of two trials over two rankings: fast, and enough to exercise the folds
FAST = {"trials": 2, "batch": 2, "rankers": ["current", "similarity"],
        "packers": ["skip-fill"], "cuts": ["none"], "candidates": [20]}


def write_trace(path: Path, queries: int = 40, used=lambda j: True, tokens=(30, 200),
                notes: int = 60, times=None) -> Path:
    """A trace: each query asked a day after the one before (or query ``j``
    at ``times[j]``: queries may share a time, as the questions of one
    session do), with the logged top 8 and (where ``used(j)``) the one note
    it used."""
    times = [1.0 + j for j in range(queries)] if times is None else times
    rng = np.random.default_rng(3)
    emb = rng.normal(size=(notes, 8))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    events = [{"event": "header", "format": "memsim-trace", "version": 1, "time_unit": "day",
               "name": "edge"}]
    for i in range(notes):
        events.append({"event": "note_added", "id": i, "t": -60 + i, "actor": "a0",
                       "tokens": int(rng.integers(*tokens)),
                       "embedding": [round(float(x), 4) for x in emb[i]]})
    for j, t in enumerate(times):
        target = int(rng.integers(0, notes))
        q = emb[target] + 0.5 * rng.normal(size=8)
        q /= np.linalg.norm(q)
        events.append({"event": "query", "id": j, "t": float(t), "actor": "a0",
                       "embedding": [round(float(x), 4) for x in q]})
        top = np.argsort(-(emb @ q))[:8]
        events.append({"event": "retrieved", "query": j, "notes": [int(k) for k in top]})
        if used(j):
            events.append({"event": "used", "query": j, "notes": [target]})
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def trace_exp(trace: Path, experiment: dict | None = None, **advise_table) -> memsim.Experiment:
    return memsim.experiment_from_dict({
        "experiment": {"name": "edge", "budget_tokens": 300, "candidates": 20, "replicates": 1,
                       **(experiment or {})},
        "workload": {"source": str(trace), "importer": "trace"},
        "policies": {"today": {"preset": "as-logged"}},
        "advise": {"current": "today", **FAST, **advise_table}})


def write_exp(tmp_path: Path, trace: Path, extra: str = "") -> Path:
    f = tmp_path / "edge.toml"
    f.write_text(f"""
[experiment]
name = "edge"
budget_tokens = 300
candidates = 20
replicates = 1
{extra}
[workload]
source = "{trace}"
importer = "trace"
[policies.today]
preset = "as-logged"
[advise]
current = "today"
trials = 2
batch = 2
rankers = ["current", "similarity"]
packers = ["skip-fill"]
""")
    return f


# --------------------------------------------------------------------------
# A: nothing to measure is refused, before any folder
# --------------------------------------------------------------------------


def test_a_log_without_ground_truth_is_refused(tmp_path):
    trace = write_trace(tmp_path / "t.jsonl", used=lambda j: False)
    with pytest.raises(ConfigError) as info:
        advise(trace_exp(trace), out=tmp_path / "out")
    (msg,) = info.value.errors
    assert msg.startswith("workload: nothing to measure: no query has a relevant note")
    assert "no ground truth" in msg
    assert not (tmp_path / "out").exists()


def test_cli_refuses_a_budget_no_relevant_note_fits_naming_the_key(tmp_path):
    exp_file = write_exp(tmp_path, write_trace(tmp_path / "t.jsonl", tokens=(50, 60)))
    res = subprocess.run([sys.executable, "-m", "memsim.cli", "advise", str(exp_file), "--out",
                          str(tmp_path / "out"), "--set", "experiment.budget_tokens=40"],
                         capture_output=True, text=True)
    assert res.returncode == 2, res.stdout + res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"memsim: error: {exp_file}: experiment.budget_tokens: nothing to "
                           "measure: no query has a relevant note that fits the budget of 40 "
                           "tokens (the smallest relevant note has 5")
    assert line.endswith("(from --set experiment.budget_tokens=40)")
    assert res.stdout == "" and not (tmp_path / "out").exists()


@pytest.mark.parametrize("used, words", [
    (lambda j: j >= 28, "nothing to tune on: none of the 28 tuning queries has a relevant note"),
    (lambda j: j < 28, "nothing to test on: none of the 12 held-out queries has a relevant note"),
])
def test_a_time_split_with_nothing_on_one_side_is_refused(tmp_path, used, words):
    trace = write_trace(tmp_path / "t.jsonl", used=used)
    with pytest.raises(ConfigError) as info:
        advise(trace_exp(trace, folds=1, split=0.7))
    assert info.value.errors[0].startswith(f"workload: {words}")
    assert "(advise.split, advise.folds)" in info.value.errors[0]


# --------------------------------------------------------------------------
# B: the budget of experiment.budgets
# --------------------------------------------------------------------------


def test_advise_tunes_at_the_one_budget_of_experiment_budgets(tmp_path):
    trace = write_trace(tmp_path / "t.jsonl")
    one = advise(trace_exp(trace, {"budgets": [120]}))
    plain = advise(trace_exp(trace, {"budget_tokens": 120}))
    assert "budget 120 tokens" in one.workload
    assert one.heldout == plain.heldout and one.folds == plain.folds
    with pytest.raises(ConfigError, match=r"^experiment\.budgets: advise tunes at one budget, "
                       r"and \[40, 80\] holds 2"):
        advise(trace_exp(trace, {"budgets": [40, 80]}))


# --------------------------------------------------------------------------
# C: a fold with nothing to tune on keeps today's setting, and says so
# --------------------------------------------------------------------------


def test_a_fold_with_nothing_to_tune_on_is_left_out_of_the_pooled_figures(tmp_path):
    trace = write_trace(tmp_path / "t.jsonl", used=lambda j: j >= 10)  # block 0: no uses
    exp = trace_exp(trace)
    adv = advise(exp)
    assert [f["tuned"] for f in adv.folds] == [False, True, True]
    assert adv.folds[0]["changes"] == [] and set(adv.trials_table["fold"]) == {"fold-2",
                                                                               "fold-3"}
    # the pooled figures hold blocks 2 and 3 only: today's share recomputed on them
    q = memsim.run_experiment(exp, out=None).queries
    later = q[q["query_id"] >= 20]
    assert adv.n_heldout == int((later["oracle_utility"] > 0).sum())
    assert adv.heldout["utility_share"]["current"] == pytest.approx(utility_share(later))
    text = adv.to_text()
    assert ("pooled over 2 of 3 folds, each block scored by its own fold's winner; fold-1 left "
            "out (nothing to gain in its tuning part: today's setting kept)") in adv.headline()
    fold1 = next(line for line in text.splitlines() if line.startswith("fold-1 "))
    assert "today's setting kept: nothing to gain in its tuning part" in fold1
    assert json.loads(adv.to_json())["folds"][0]["tuned"] is False
    # the line under the table says which blocks the held-out figures pool
    assert ("held-out: the test blocks of the folds searched (fold-1 left out), each scored by "
            "its own fold's winner") in text
    assert "every fold's test block" not in text


# --------------------------------------------------------------------------
# D: a setting that does not apply is refused
# --------------------------------------------------------------------------


def test_settings_that_do_not_apply_are_refused(tmp_path):
    trace = write_trace(tmp_path / "t.jsonl")
    with pytest.raises(ConfigError, match=r"^advise\.holdout_replicates: does not apply to a "
                       "log"):
        advise(trace_exp(trace, folds=1, holdout_replicates=3))
    # 40 queries: a split leaves too few to test on, so automatic folds take over
    with pytest.raises(ConfigError, match=r"^advise\.split: not used \(advise\.folds is "
                       r"automatic, and a split leaving 20 of the 40 queries"):
        advise(trace_exp(trace, split=0.5))
    with pytest.raises(ConfigError, match=r"^advise\.split: not used \(advise\.folds = 2\)"):
        advise(trace_exp(trace, split=0.5, folds=2))
    synthetic = {"experiment": {"name": "s", "replicates": 1},
                 "workload": {"horizon_days": 5, "backfill_days": 5},
                 "policies": {"today": {"preset": "similarity-only"}}}
    for key, value in (("split", 0.5), ("folds", 2)):
        exp = memsim.experiment_from_dict({**synthetic, "advise": {"current": "today",
                                                                   key: value}})
        with pytest.raises(ConfigError, match=rf"^advise\.{key}: does not apply to a synthetic"):
            advise(exp)


def test_keys_at_their_unset_values_are_not_settings(tmp_path):
    """A config.toml written before only the keys that apply were kept holds
    all three at the values that mean "not set": it is read as before."""
    trace = write_trace(tmp_path / "t.jsonl")
    plain = advise(trace_exp(trace))
    old = advise(trace_exp(trace, split=0.7, folds=0, holdout_replicates=0))
    assert old.to_dict() | {"path": None} == plain.to_dict() | {"path": None}
    synthetic = {"experiment": {"name": "s", "replicates": 1},
                 "workload": {"horizon_days": 5, "backfill_days": 5},
                 "policies": {"today": {"preset": "similarity-only"}}}
    spec = memsim.tuning.advice.AdviseSpec.from_table(
        {"current": "today", "split": 0.7, "folds": 0},
        memsim.experiment_from_dict(synthetic))
    assert spec.given == {"current"}


# --------------------------------------------------------------------------
# E: a log of a handful of queries gets fewer folds
# --------------------------------------------------------------------------


def test_a_small_log_falls_back_to_fewer_folds_down_to_one_split(tmp_path):
    three = advise(trace_exp(write_trace(tmp_path / "3.jsonl", queries=3)))
    assert three.split.startswith("rolling origin over time, 2 folds (the 3 queries allow no "
                                  "more)")
    two = advise(trace_exp(write_trace(tmp_path / "2.jsonl", queries=2)))
    assert two.split.startswith("time split (the log is too small for rolling folds): tuned "
                                "on the first 1 query by time")
    with pytest.raises(ConfigError) as info:
        advise(trace_exp(write_trace(tmp_path / "1.jsonl", queries=1)))
    assert info.value.errors[0].startswith("workload: the log's 1 query (1 distinct time) "
                                           "cannot be cut by time")
    # folds the user sets are taken as set
    with pytest.raises(ConfigError, match=r"^advise\.folds: the 3 queries"):
        advise(trace_exp(write_trace(tmp_path / "3.jsonl", queries=3), folds=3))


# --------------------------------------------------------------------------
# F: config.toml comes first; the resolved table gives the same advice
# --------------------------------------------------------------------------


def test_an_interrupted_advice_folder_has_its_config(tmp_path):
    trace = write_trace(tmp_path / "t.jsonl")

    def stop(line):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        advise(trace_exp(trace), out=tmp_path / "out", progress=stop)
    (folder,) = (tmp_path / "out").iterdir()
    assert json.loads((folder / "manifest.json").read_text())["status"] == "failed"
    table = tomllib.loads((folder / "config.toml").read_text())["advise"]
    # what applies, concrete: 3 rolling folds, no split, no fresh replicates
    assert table["folds"] == 3 and "split" not in table and "holdout_replicates" not in table
    first = advise(trace_exp(trace), out=tmp_path / "done")
    again = advise(folder / "config.toml")
    assert again.to_dict() | {"path": None} == first.to_dict() | {"path": None}
    assert first.path.name.split("_")[-1] == folder.name.split("_")[-1]
