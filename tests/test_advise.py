"""``memsim advise`` (memsim.tuning.advice) and the per-type half-life decay.

Small workloads and few trials: each test runs in seconds.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import memsim
from memsim.tuning.advice import advise
from memsim.core.errors import ConfigError
from memsim.policies import resolve_policy
from memsim.policies.context import ArrayContext
from memsim.policies.decay import PerTypeHalfLife
from memsim.runs.config import config_hash
from memsim.runs.runner import simulate_experiment
from memsim.reporting.numbers import p_phrase
from memsim.reporting.stats import paired_tests, utility_share
from memsim.checks.testing import check_component
from .helpers import TINY_TOML

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "experiments" / "traces" / "example.jsonl"


def planted_world(h: float, **classes) -> dict:
    """One expiring class, one note per slot, validity with half-life ``h``
    days: the older a note, the likelier it has expired, so the right
    half-life matters and a one-day one buries nearly everything."""
    cls = {"evergreen": {"share": 0.0}, "scratch": {"share": 0.0},
           "superseding": {"share": 0.0}, "distractor": {"share": 0.0},
           "project": {"share": 1.0, "notes_per_slot": 1.0, "lifetime_law": "exponential",
                       "lifetime_median_days": h}}
    cls.update(classes)
    return {"horizon_days": 30.0, "backfill_days": 4 * h, "queries_per_day": 10.0,
            "notes_per_day": 20.0, "uniform_tokens": 100, "classes": cls}


def experiment(workload: dict, today: dict, advise_table: dict, replicates: int = 2):
    return memsim.experiment_from_dict({
        "experiment": {"name": "advise-test", "seed": 5, "replicates": replicates,
                       "budget_tokens": 300, "candidates": 20},
        "workload": workload, "policies": {"today": today},
        "advise": {"current": "today", **advise_table}})


HALF_LIFE_ONLY = {"rankers": ["half-life"], "packers": ["skip-fill"], "cuts": ["none"],
                  "candidates": [20], "trials": 16, "batch": 8}


# --------------------------------------------------------------------------
# planted optimum, bad current, already-optimal current
# --------------------------------------------------------------------------


def test_advise_recommends_within_the_planted_plateau_and_beats_a_bad_current():
    exp = experiment(planted_world(20.0),
                     {"ranker": "product", "decay": {"kind": "half-life", "half_life_days": 1.0},
                      "packer": "skip-fill"}, HALF_LIFE_ONLY)
    adv = advise(exp)
    rec_h = adv.recommended["decay"]["half_life_days"]
    # the held-out gain over a one-day half-life is large and its interval excludes 0
    assert adv.significant and adv.gain_low > 0
    assert "a significant gain" in adv.headline()

    # the truth, found independently: a grid of half-lives on the same fresh
    # replicates (2, 3), the plateau = the grid values not significantly
    # worse than the best grid value
    grid = [2.0, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0]
    pols = {f"h{h:g}": {"ranker": "product", "decay": {"kind": "half-life", "half_life_days": h},
                        "packer": "skip-fill"} for h in grid}
    pols["rec"] = adv.recommended
    truth = memsim.experiment_from_dict({**exp.to_config(), "policies": pols})
    q = simulate_experiment(truth, replicates=[2, 3])["queries"]
    shares = {h: utility_share(q[q["policy"] == f"h{h:g}"]) for h in grid}
    best = max(shares, key=shares.get)
    tests = paired_tests(q, baseline=f"h{best:g}", metrics=["utility_share"])
    worse = set(tests.loc[(tests["diff_ci_high"] < 0), "policy"])
    plateau = [h for h in grid if f"h{h:g}" not in worse]
    assert "rec" not in worse, (rec_h, shares)
    # within the plateau, to a grid step either side
    i_lo, i_hi = grid.index(min(plateau)), grid.index(max(plateau))
    lo = grid[max(i_lo - 1, 0)]
    hi = grid[min(i_hi + 1, len(grid) - 1)]
    assert lo <= rec_h <= hi, (rec_h, plateau)
    # the reported held-out shares are the recommendation's on those replicates
    assert adv.heldout["utility_share"]["recommended"] == pytest.approx(
        utility_share(q[q["policy"] == "rec"]))


@pytest.mark.parametrize("queries_per_day, n", [(0.03, 2), (0.04, 5), (0.05, 6)])
def test_a_handful_of_held_out_queries_is_not_a_significant_gain(queries_per_day, n):
    # a one-day half-life against the planted 20 days, on fresh replicates
    # with a handful of queries: every held-out query gains, the interval
    # excludes 0, but 5 queries or fewer cannot make the exact paired test
    # significant (at least 2 / 2^n); 6 that all gain can (2 / 64)
    world = {**planted_world(20.0), "queries_per_day": queries_per_day}
    exp = experiment(world, {"ranker": "product", "decay": {"kind": "half-life",
                                                            "half_life_days": 1.0},
                             "packer": "skip-fill"}, {**HALF_LIFE_ONLY, "trials": 4, "batch": 4})
    adv = advise(exp)
    u = adv.heldout["utility_share"]
    assert adv.n_heldout == n and adv.changes
    assert adv.gain_low > 0  # the interval alone would call it significant
    assert u["p"] >= 2 / 2 ** n
    assert adv.significant == (n > 5) == (adv.verdict == "adopt")
    head = adv.headline()
    assert f"paired test {p_phrase(u['p'])}" in head and "p = <" not in head
    assert ("NOT significant" in head) == (n <= 5)
    assert json.loads(adv.to_json())["heldout"]["utility_share"]["p"] == u["p"]


def test_advise_reports_no_significant_gain_when_current_is_already_optimal():
    # evergreen facts only: nothing expires, so no decay can beat similarity alone
    world = planted_world(20.0, evergreen={"share": 1.0}, project={"share": 0.0})
    exp = experiment(world, {"ranker": "similarity", "packer": "skip-fill"},
                     {**HALF_LIFE_ONLY, "rankers": ["current", "half-life"],
                      "half_life_days": [50.0, 5000.0]})
    adv = advise(exp)
    assert not adv.gain_low > 0, adv.headline()
    assert "a significant gain" not in adv.headline()
    if not adv.significant:
        assert "NOT significant" in adv.headline()


def test_the_stages_telescope_to_the_total_gain():
    # today: 5% a day, top-k cutoff; the space changes ranking and packing
    exp = experiment(planted_world(20.0), {"preset": "hivemind-2025-bug"},
                     {"rankers": ["half-life-floor"], "packers": ["greedy"], "cuts": ["score"],
                      "candidates": [20], "trials": 8, "batch": 8})
    adv = advise(exp)
    names = [s["stage"] for s in adv.stages]
    assert names == ["ranking", "packing", "cut"]
    # each step's gain is over the step before: they add up to the whole gain
    assert sum(s["gain"] for s in adv.stages) == pytest.approx(adv.gain, abs=1e-12)
    assert adv.stages[-1]["share"] == pytest.approx(
        adv.heldout["utility_share"]["recommended"])
    assert any(c.startswith("packer from top-k-cutoff to greedy(min_relative_score=")
               for c in adv.changes)


# --------------------------------------------------------------------------
# time order: the held-out score is the one reported
# --------------------------------------------------------------------------


def trace_experiment(**advise_table) -> memsim.Experiment:
    return memsim.experiment_from_dict({
        "experiment": {"name": "trace-advise", "budget_tokens": 300, "candidates": 20,
                       "replicates": 1},
        "workload": {"source": str(TRACE), "importer": "trace"},
        "policies": {"today": {"preset": "as-logged"}},
        "advise": {"current": "today", **advise_table}})


def test_a_time_split_reports_the_heldout_gain_not_the_tuning_gain():
    exp = trace_experiment(folds=1, split=0.5, trials=12, batch=6,
                           rankers=["current", "similarity", "half-life-floor"])
    adv = advise(exp)
    assert adv.split.startswith("time split: tuned on the first 32 queries")
    # recompute both scores independently: the whole stream replayed once,
    # the queries split by time
    both = memsim.experiment_from_dict({**exp.to_config(), "policies": {
        "today": {"preset": "as-logged"}, "rec": adv.recommended}})
    q = memsim.run_experiment(both, out=None).queries
    stream = memsim.runs.runner.load_stream_for(both, 0)
    order = stream.queries.sort_values(["t", "query_id"], kind="stable")["query_id"]
    early, late = set(order.iloc[:32]), set(order.iloc[32:])

    def share(policy, ids):
        return utility_share(q[(q["policy"] == policy) & q["query_id"].isin(ids)])

    heldout = share("rec", late) - share("today", late)
    tuning = share("rec", early) - share("today", early)
    assert abs(heldout - tuning) > 0.01  # the case tells them apart
    assert adv.gain == pytest.approx(heldout, abs=1e-12)
    assert adv.tuning["recommended"] - adv.tuning["current"] == pytest.approx(tuning, abs=1e-12)
    text = adv.to_text()
    assert f"{adv.tuning['recommended']:.3f}    {adv.heldout['utility_share']['recommended']:.3f}" \
        in text


def test_few_queries_use_rolling_origin_folds_that_never_test_on_their_tuning_queries():
    adv = advise(trace_experiment(trials=4, batch=4, rankers=["current", "similarity"]))
    assert adv.split.startswith("rolling origin over time, 3 folds")
    assert [f["n_tune"] for f in adv.folds] == [16, 32, 48]
    assert [f["n_test"] for f in adv.folds] == [16, 16, 16]


# --------------------------------------------------------------------------
# the command line and the run folder
# --------------------------------------------------------------------------


def _trace_experiment(tmp_path: Path, batch: int) -> Path:
    """An experiment file advising on the example trace (4 trials)."""
    exp_file = tmp_path / "a.toml"
    exp_file.write_text(f"""
[experiment]
name = "trace"
budget_tokens = 300
candidates = 20
replicates = 1
[workload]
source = "{TRACE}"
importer = "trace"
[policies.today]
preset = "as-logged"
[advise]
current = "today"
trials = 4
batch = {batch}
rankers = ["current", "similarity"]
""")
    return exp_file


def test_cli_writes_advice_files_atomically_and_prints_the_answer(tmp_path):
    exp_file = _trace_experiment(tmp_path, batch=4)
    res = subprocess.run([sys.executable, "-m", "memsim.cli", "advise", str(exp_file),
                          "--out", str(tmp_path / "out")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    folder = Path(res.stdout.strip().splitlines()[-1])
    assert "held-out utility_share" in res.stdout and "tuning   held-out" in res.stdout
    data = json.loads((folder / "advice.json").read_text())
    assert data["current"] == "today" and "gain" in data and data["split"]
    assert "```toml" in (folder / "advice.md").read_text()
    assert json.loads((folder / "manifest.json").read_text())["status"] == "completed"
    assert not list(folder.glob(".*.tmp-*"))
    # the file leaves out where it is (the same experiment, the same bytes);
    # --json prints it with the folder's path
    assert "path" not in data
    again = subprocess.run([sys.executable, "-m", "memsim.cli", "advise", str(exp_file),
                            "--out", str(tmp_path / "elsewhere"), "--json"],
                           capture_output=True, text=True)
    printed = json.loads(again.stdout)
    other = Path(printed.pop("path"))
    assert other.parent == tmp_path / "elsewhere" and printed == data
    assert (other / "advice.json").read_bytes() == (folder / "advice.json").read_bytes()


def test_a_stop_after_the_folder_is_completed_leaves_it_completed(tmp_path, monkeypatch):
    from memsim.tuning import advice as advice_module

    update = advice_module.Manifest.update

    def then_stopped(self, **kw):  # Ctrl-C right after the folder is marked completed
        update(self, **kw)
        if kw.get("status") == "completed":
            raise KeyboardInterrupt

    monkeypatch.setattr(advice_module.Manifest, "update", then_stopped)
    with pytest.raises(KeyboardInterrupt):
        advise(_trace_experiment(tmp_path, batch=4), out=tmp_path / "out")
    folder, = (tmp_path / "out").iterdir()
    assert json.loads((folder / "manifest.json").read_text())["status"] == "completed"
    assert (folder / "advice.json").is_file()


@pytest.mark.parametrize("table, message", [
    ({}, "advise.current: missing"),
    ({"current": "oracle"}, "reads hidden labels"),
    ({"current": "nope"}, "neither a policy of this experiment nor a preset"),
    ({"current": "today", "packers": ["greedy", "bogus"]}, "advise.packers: unknown 'bogus'"),
    ({"current": "today", "trails": 3}, "advise.trails: unknown key (did you mean 'trials'?)"),
    ({"current": "today", "split": 0.99}, "advise.split: expected a share"),
])
def test_bad_advise_tables_are_refused_with_one_line(tmp_path, table, message):
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "x", "replicates": 1},
        "workload": {"horizon_days": 5, "backfill_days": 5},
        "policies": {"today": {"preset": "similarity-only"}}, "advise": table})
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("?", r"\?")):
        advise(exp)


def test_every_mistake_of_an_advise_table_is_reported_at_once(tmp_path):
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "x", "replicates": 1},
        "workload": {"horizon_days": 5, "backfill_days": 5},
        "policies": {"today": {"preset": "similarity-only"}},
        "advise": {"trials": "many", "packers": ["foo"], "trails": 3, "split": 0.5}})
    with pytest.raises(ConfigError) as info:
        advise(exp)
    got = info.value.errors
    assert len(got) == 5, got
    for part in ("advise.trails: unknown key", "advise.current: missing",
                 "advise.trials: expected an int", "advise.packers: unknown 'foo'",
                 "advise.split: does not apply to a synthetic workload"):
        assert sum(m.startswith(part) for m in got) == 1, (part, got)
    # the command line prints each on its own line
    exp_file = tmp_path / "many.toml"
    exp_file.write_text(SMALL_ADVISE.replace("trials = 4\n", "")
                        + 'trials = "many"\npackers = ["foo"]\n')
    res = subprocess.run([sys.executable, "-m", "memsim.cli", "advise", str(exp_file), "-q"],
                         capture_output=True, text=True)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and any("advise.trials" in x for x in lines) \
        and any("advise.packers" in x for x in lines), res.stderr


def test_cli_error_is_one_line_with_exit_code_2(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text('[workload]\nhorizon_days = 5\nbackfill_days = 5\n'
                 '[policies.p]\nranker = "bayes"\n[advise]\ncurrent = "p"\n')
    res = subprocess.run([sys.executable, "-m", "memsim.cli", "advise", str(f)],
                         capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stderr.startswith("memsim: error: ") and len(res.stderr.strip().splitlines()) == 1
    assert "hidden labels" in res.stderr


SMALL_ADVISE = TINY_TOML.replace('name = "tiny"', 'name = "small"') + """\
[advise]
current = "a"
trials = 4
batch = 4
holdout_replicates = 1
"""


def test_memsim_report_refuses_an_advice_folder_and_writes_nothing(tmp_path, capsys):
    """An advice folder has no queries: `memsim report` on it says what it is
    and where its own report is (advice.md), instead of an empty report."""
    from memsim.cli import main

    exp_file = tmp_path / "adv.toml"
    exp_file.write_text(SMALL_ADVISE)
    folder = advise(exp_file, out=tmp_path / "out").path
    before = sorted(p.name for p in folder.iterdir())
    capsys.readouterr()
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("memsim: error: "), err
    assert "memsim advise" in err[0] and str(folder / "advice.md") in err[0]
    assert "memsim run" in err[0]  # what memsim report takes
    assert sorted(p.name for p in folder.iterdir()) == before
    # nor does load_run read it as a run with no queries
    with pytest.raises(ConfigError, match=r"a folder of memsim advise, not a run folder; its "
                       r"advice is advice\.json"):
        memsim.load_run(folder)


def test_memsim_report_refuses_an_interrupted_advice_folder(tmp_path, capsys):
    """An advice folder stopped before its advice.json says what it is in its
    manifest: `memsim report` refuses it as well, writing nothing."""
    from memsim.cli import main

    exp_file = tmp_path / "adv.toml"
    exp_file.write_text(SMALL_ADVISE)

    def stop(line):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        advise(exp_file, out=tmp_path / "out", progress=stop)
    (folder,) = (tmp_path / "out").iterdir()
    assert not (folder / "advice.json").exists()
    before = sorted(p.name for p in folder.iterdir())
    capsys.readouterr()
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a folder of memsim advise" in err[0], err
    # it names no advice.md it does not hold (before: "its report is .../advice.md")
    assert "advice.md" not in err[0].replace("holds no advice.md", "")
    assert f"it holds no advice.md (an advise that did not finish: run it again with " \
           f"memsim advise {folder / 'config.toml'})" in err[0]
    assert sorted(p.name for p in folder.iterdir()) == before


def test_the_run_folder_config_records_current_and_gives_the_same_advice(tmp_path):
    exp_file = tmp_path / "adv.toml"
    exp_file.write_text(SMALL_ADVISE)
    first = advise(exp_file, current="random", out=tmp_path / "o1")
    written = tomllib.loads((first.path / "config.toml").read_text())
    # the [advise] table as it ran: --current and every default, concrete seed
    assert written["advise"]["current"] == "random"
    assert written["advise"]["seed"] == 7 and written["advise"]["trials"] == 4
    again = advise(first.path / "config.toml", out=tmp_path / "o2")
    assert again.current == "random"
    assert again.path.name.split("_")[-1] == first.path.name.split("_")[-1]
    drop_path = re.compile(r'"path": "[^"]*"')
    assert drop_path.sub("", again.to_json()) == drop_path.sub("", first.to_json())
    # another today's setting is another experiment: another hash
    today = advise(exp_file, out=tmp_path / "o3")
    assert today.current == "a"
    assert today.path.name.split("_")[-1] != first.path.name.split("_")[-1]
    # the folder's hash is the written config's
    for adv in (first, today):
        table = tomllib.loads((adv.path / "config.toml").read_text())
        assert adv.path.name.endswith(f"_{config_hash(table)}")


@pytest.mark.parametrize("extra, kw, message", [
    ("trails = 4\n", {}, "advise.trails: unknown key (did you mean 'trials'?)"),
    ("", {"overrides": ["advise.trials=0"]},
     "advise.trials: expected an int from 1 to 100000, got 0 (from --set advise.trials=0)"),
    ("", {"current": "nope"}, "advise.current: 'nope' is neither a policy"),
])
def test_advise_table_mistakes_name_the_file(tmp_path, extra, kw, message):
    exp_file = tmp_path / "ga.toml"
    exp_file.write_text(SMALL_ADVISE + extra)
    with pytest.raises(ConfigError) as info:
        advise(exp_file, **kw)
    assert info.value.errors[0].startswith(f"{exp_file}: {message}")
    if "current" in kw:  # a call's argument, named as the call gives it
        assert info.value.errors[0].endswith("(from current='nope')")


def test_cli_and_call_name_current_and_out_their_own_way(tmp_path):
    exp_file = tmp_path / "ga.toml"
    exp_file.write_text(SMALL_ADVISE)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match=r"^advise\(out=\) .*afile: not a folder"):
        advise(exp_file, out=tmp_path / "afile")
    for args, said in ([["--current", "nope"], "(from --current nope)"],
                       [["--out", str(tmp_path / "afile")], f"--out {tmp_path / 'afile'}: "]):
        res = subprocess.run([sys.executable, "-m", "memsim.cli", "advise", str(exp_file), "-q",
                              *args], capture_output=True, text=True)
        assert res.returncode == 2 and said in res.stderr, res.stderr


def test_cli_advise_table_mistake_names_the_file(tmp_path):
    exp_file = tmp_path / "ga.toml"
    exp_file.write_text(SMALL_ADVISE + "trails = 4\n")
    res = subprocess.run([sys.executable, "-m", "memsim.cli", "advise", str(exp_file), "-q"],
                         capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stderr.startswith(f"memsim: error: {exp_file}: advise.trails: unknown key")
    assert len(res.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------
# per-type half-life
# --------------------------------------------------------------------------


def test_per_type_half_life_gives_each_memory_type_its_own_half_life():
    check_component(PerTypeHalfLife)
    d = PerTypeHalfLife(episodic_half_life_days=10.0, semantic_half_life_days=100.0,
                        procedural_half_life_days=1.0, other_half_life_days=50.0, floor=0.2)
    types = ["episodic", "semantic", "procedural", "other", "unknown-type"]
    ctx = ArrayContext(t=np.array([20.0]), created_at=np.zeros(5), memory_type=types)
    got = d.recency(ctx.age("created"), ctx)[0]
    h = np.array([10.0, 100.0, 1.0, 50.0, 50.0])  # an unknown type counts as "other"
    np.testing.assert_allclose(got, 0.2 + 0.8 * 0.5 ** (20.0 / h), rtol=1e-12)
    floor, rate = d.exponential_form(ctx)
    np.testing.assert_allclose(floor + (1 - floor) * np.exp(-rate * 20.0), got, rtol=1e-12)
    assert d.lower_bound() == 0.2 and d.upper_bound() == 1.0
    pol = resolve_policy({"preset": "per-type-half-life"}, "p")
    assert pol.decay.name == "per-type-half-life" and pol.ranker.name == "product"
    with pytest.raises(ConfigError, match="semantic_half_life_days"):
        resolve_policy({"decay": {"kind": "per-type-half-life",
                                  "semantic_half_life_days": 0}}, "p")


def test_per_type_search_keys_on_the_types_a_stream_has():
    from memsim.tuning.advice import _per_type_key

    class S:
        def __init__(self, notes):
            self.notes = notes

    typed = pd.DataFrame({"memory_type": ["episodic", "semantic", "episodic"],
                          "tier": ["task"] * 3})
    assert _per_type_key(S(typed)) == ("memory_type", ("episodic", "semantic"))
    tiered = pd.DataFrame({"memory_type": ["episodic"] * 3,
                           "tier": ["task", "scratch", "longterm"]})
    assert _per_type_key(S(tiered)) == ("tier", ("task", "scratch"))
    plain = pd.DataFrame({"memory_type": ["episodic"] * 2, "tier": ["task"] * 2})
    assert _per_type_key(S(plain)) == ("", ())
    assert math.isfinite(PerTypeHalfLife().half_life())


def test_the_retention_threshold_is_searched_where_today_evicts():
    exp = experiment(planted_world(10.0), {"preset": "ai-memory"},
                     {"rankers": ["current"], "candidates": [20], "trials": 4, "batch": 4},
                     replicates=1)
    adv = advise(exp)
    col = adv.trials_table["params.retention.cold_threshold"]
    # trial 0 is today's setting; the others lie within half to twice today's 0.20
    assert col.iloc[0] == pytest.approx(0.20)
    assert col.between(0.10, 0.40).all() and col.nunique() > 1
    assert adv.recommended["retention"]["kind"] == "ai-memory"
    # without evictions there is nothing to tune
    plain = advise(experiment(planted_world(10.0), {"preset": "similarity-only"},
                              {"rankers": ["current"], "candidates": [20], "trials": 2,
                               "batch": 2}, replicates=1))
    assert not any(c.startswith("params.retention") for c in plain.trials_table.columns)


def test_five_fresh_replicates_give_an_interval_over_replicates():
    exp = experiment(planted_world(10.0),
                     {"ranker": "product", "decay": {"kind": "half-life", "half_life_days": 1.0},
                      "packer": "skip-fill"},
                     {**HALF_LIFE_ONLY, "trials": 2, "batch": 2, "holdout_replicates": 5},
                     replicates=1)
    adv = advise(exp)
    assert adv.ci_over == "replicates"
    assert adv.split == "tuned on replicate 0, tested on 5 fresh replicates (1-5: new seeds)"
    assert "interval over replicates" in adv.headline()


@pytest.mark.parametrize("h", [1, 3])
def test_fewer_than_five_fresh_replicates_say_the_interval_leaves_out_workloads(h):
    exp = experiment(planted_world(10.0),
                     {"ranker": "product", "decay": {"kind": "half-life", "half_life_days": 1.0},
                      "packer": "skip-fill"},
                     {**HALF_LIFE_ONLY, "trials": 2, "batch": 2, "holdout_replicates": h},
                     replicates=1)
    adv = advise(exp)
    assert adv.ci_over == "queries" and adv.heldout_fresh
    replicates = "1 fresh replicate," if h == 1 else f"{h} fresh replicates,"
    assert (f"interval over queries of {replicates} fewer than 5: it leaves out the variation "
            "between workloads") in adv.headline()
    # a stream's held-out queries are not fresh replicates: no such caveat
    log = dataclasses.replace(adv, heldout_fresh=False)
    assert "fresh" not in log.headline() and "interval over queries;" in log.headline()


def test_a_gain_too_small_for_three_decimals_is_not_printed_as_zero():
    from memsim.tuning.advice import _signed

    assert [_signed(x) for x in (0.0004, -0.0004, 0.00031, 0.0296, 0.0, -1e-12, math.nan)] == [
        "+0.00040", "-0.00040", "+0.00031", "+0.030", "+0.000", "-0.0000000000010", "n/a"]
    exp = trace_experiment(trials=2, batch=2, rankers=["current", "half-life-floor"])
    adv = dataclasses.replace(advise(exp), gain=0.0004, gain_low=0.0003, gain_high=0.0006)
    assert "gain +0.00040 [+0.00030, +0.00060]" in adv.headline()


def test_the_same_experiment_gives_the_same_advice():
    exp = trace_experiment(trials=4, batch=2, rankers=["current", "half-life-floor"])
    assert advise(exp).to_json() == advise(exp).to_json()


def test_a_time_cut_never_splits_queries_asked_at_the_same_time():
    from memsim.tuning.advice import _time_cut

    t = np.array([1.0, 1.0, 2.0, 2.0, 2.0, 3.0])
    assert [_time_cut(t, i) for i in range(7)] == [0, 2, 2, 5, 5, 5, 6]


@pytest.mark.parametrize("today", [
    {"preset": "hivemind"}, {"preset": "ai-memory"}, {"preset": "feather"},
    {"preset": "hivemind-2025-bug", "candidates": 30},
    {"ranker": "product", "decay": "half-life-floor",
     "packer": {"kind": "greedy-swap", "max_swaps": 2, "min_relative_score": 0.5}},
    {"ranker": "product", "decay": "half-life-floor",
     "packer": {"kind": "greedy", "min_relative_score": 0.7, "cut_on": "similarity"}},
])
def test_trial_zero_is_todays_setting_exactly(today):
    from memsim.tuning.advice import AdviseSpec, _resolved, _Space

    exp = experiment(planted_world(10.0), today, {}, replicates=1)
    spec = AdviseSpec.from_table(exp.advise, exp)
    pol = exp.policies["today"]
    cands = int(pol.candidates or exp.sim.candidates)
    knob = {"ai-memory": "cold_threshold"}.get(pol.retention.name, "")
    space = _Space(spec, pol, cands, "tier", ("task", "scratch"), knob)
    assert space.in_space(space.own_params())
    assert space.resolved(space.own_params()) == _resolved(pol.to_config(), cands)


def test_per_type_trials_build_one_half_life_per_type_present():
    import optuna

    from memsim.tuning.advice import AdviseSpec, _Space

    exp = experiment(planted_world(10.0), {"preset": "similarity-only"},
                     {"rankers": ["per-type"]}, replicates=1)
    spec = AdviseSpec.from_table(exp.advise, exp)
    pol = exp.policies["today"]
    for key, types, kind in [("memory_type", ("episodic", "semantic"), "per-type-half-life"),
                             ("tier", ("task", "scratch"), "per-tier")]:
        space = _Space(spec, pol, 50, key, types, "")
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
        params = space.sample(study.ask())
        decay = space.policy(params).decay
        assert decay.name == kind
        for t in types:
            assert getattr(decay, f"{t}_half_life_days") == params[f"half_life_days.{t}"]
    # a stream with neither several types nor several tiers has no per-type ranking
    assert _Space(spec, pol, 50, "", (), "").rankings == ()
    with pytest.raises(ConfigError, match="carry neither several memory types"):
        advise(exp)  # one class, one tier, one memory type


def test_a_cut_on_similarity_is_in_the_search_space():
    from memsim.tuning.advice import CUTS, AdviseSpec, _Space

    assert "similarity" in CUTS
    exp = experiment(planted_world(10.0), {"preset": "hivemind"}, {}, replicates=1)
    spec = AdviseSpec.from_table(exp.advise, exp)
    pol = exp.policies["today"]
    space = _Space(spec, pol, 50, "tier", ("task", "scratch"), "")
    params = {"ranking": "similarity", "candidates": 50, "packer": "greedy",
              "cut": "similarity", "cut_level": 0.6}
    packer = space.table(params)["packer"]
    assert packer == {"kind": "greedy", "min_relative_score": 0.6, "cut_on": "similarity"}
    none = space.table(dict(params, cut="none"))["packer"]
    assert none["min_relative_score"] == 0.0


# --------------------------------------------------------------------------
# seeds, the retention knob's declared range and type
# --------------------------------------------------------------------------


@pytest.mark.parametrize("where, seed", [
    ("advise", 2**63 - 1), ("advise", 2**32 - 1), ("advise", 2**32), ("experiment", 2**40),
])
def test_any_seed_memsim_run_accepts_seeds_every_fold(where, seed):
    # fold j's sampler seed is a named child stream of the seed (32 bits),
    # not seed + j: a seed of 2**32 - 1 or more used to crash numpy
    table = {"trials": 2, "batch": 2, "rankers": ["current", "similarity"]}
    if where == "advise":
        exp = trace_experiment(seed=seed, **table)
    else:
        exp = memsim.experiment_from_dict({**trace_experiment(**table).to_config(),
                                           "experiment": {"name": "trace-advise",
                                                          "seed": seed, "budget_tokens": 300,
                                                          "candidates": 20, "replicates": 1}})
        exp = memsim.experiment_from_dict({**exp.to_config(), "advise": {
            k: v for k, v in exp.to_config()["advise"].items() if k != "seed"}})
    adv = advise(exp)
    assert len(adv.folds) == 3 and len(adv.trials_table) == 6
    # deterministic: the same seed draws the same trials
    assert advise(exp).to_json() == adv.to_json()


def test_the_fold_seeds_are_distinct_32_bit_child_streams():
    from memsim.tuning.advice import _fold_seed

    for seed in (0, 1, 2**32 - 1, 2**63 - 1):
        seeds = [_fold_seed(seed, j) for j in range(4)]
        assert len(set(seeds)) == 4 and all(0 <= s < 2**32 for s in seeds)
        assert seeds == [_fold_seed(seed, j) for j in range(4)]


def test_the_retention_search_stays_within_the_knobs_declared_range():
    # memorybank's threshold is declared in [0, 1]: from half to twice today's
    # 0.9 is [0.45, 1.8], clamped to [0.45, 1]
    exp = experiment(planted_world(10.0),
                     {"preset": "memorybank", "retention": {"kind": "memorybank",
                                                            "threshold": 0.9}},
                     {"rankers": ["current"], "candidates": [20], "trials": 8, "batch": 8},
                     replicates=1)
    adv = advise(exp)
    col = adv.trials_table["params.retention.threshold"]
    assert col.iloc[0] == pytest.approx(0.9)
    assert col.between(0.45, 1.0).all() and col.nunique() > 1


def test_a_retention_knob_whose_range_collapses_is_not_searched():
    from memsim.tuning.advice import _retention_range

    exp = experiment(planted_world(10.0), {"preset": "ai-memory"}, {}, replicates=1)
    ret = exp.policies["today"].retention
    rng = _retention_range(ret, "cold_threshold")
    assert not rng.integer and (rng.low, rng.high) == pytest.approx((0.10, 0.40))
    # today's 0 has no scale, and cold_threshold has no upper bound: not searched
    zero = resolve_policy({"preset": "ai-memory", "retention": {
        "kind": "ai-memory", "cold_threshold": 0}}, "p").retention
    assert _retention_range(zero, "cold_threshold") is None
    cap = resolve_policy({"retention": {"kind": "capacity", "max_notes": 1}}, "p").retention
    one = _retention_range(cap, "max_notes")  # declared an int >= 1: {1, 2}
    assert one.integer and (one.low, one.high) == (1, 2)
    adv = advise(experiment(planted_world(10.0), {"preset": "ai-memory", "retention": {
        "kind": "ai-memory", "cold_threshold": 0}},
        {"rankers": ["current"], "candidates": [20], "trials": 2, "batch": 2}, replicates=1))
    assert not any(c.startswith("params.retention") for c in adv.trials_table.columns)


def test_the_knobs_declared_type_not_how_it_was_written_chooses_the_search():
    def run(value):
        return advise(experiment(planted_world(10.0), {"preset": "ai-memory", "retention": {
            "kind": "ai-memory", "cold_threshold": value}},
            {"rankers": ["current"], "candidates": [20], "trials": 5, "batch": 5},
            replicates=1))

    as_int, as_float = run(1), run(1.0)
    col = as_int.trials_table["params.retention.cold_threshold"]
    # cold_threshold is a float: 1 and 1.0 give the same search, over [0.5, 2]
    pd.testing.assert_frame_equal(as_int.trials_table, as_float.trials_table)
    assert col.between(0.5, 2.0).all() and not col.iloc[1:].apply(float.is_integer).all()
    assert as_int.to_json() == as_float.to_json()


def test_a_zero_threshold_is_searched_linearly_within_its_declared_range():
    # memorybank's threshold = 0: no log range, and no scale from today's;
    # the declared [0, 1] is searched instead (it used to crash in suggest_int)
    adv = advise(experiment(planted_world(10.0), {"preset": "memorybank", "retention": {
        "kind": "memorybank", "threshold": 0}},
        {"rankers": ["current"], "candidates": [20], "trials": 5, "batch": 5}, replicates=1))
    col = adv.trials_table["params.retention.threshold"]
    assert col.iloc[0] == 0 and col.between(0.0, 1.0).all() and col.nunique() > 1
    assert isinstance(adv.recommended["retention"]["threshold"], float)


# --------------------------------------------------------------------------
# --progress json; side-effect warnings; honest labels; the verdict
# --------------------------------------------------------------------------


def test_cli_advise_honours_progress_json(tmp_path):
    exp_file = _trace_experiment(tmp_path, batch=2)
    res = subprocess.run([sys.executable, "-m", "memsim.cli", "advise", str(exp_file),
                          "--progress", "json", "--out", str(tmp_path / "out")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    lines = [json.loads(line) for line in res.stderr.splitlines()]
    assert [x["done"] for x in lines] == ["trials 2/4", "trials 4/4"]
    assert all(x["command"] == "memsim advise" and x["phase"] == "trials" for x in lines)
    assert lines[-1]["fraction"] == 1.0
    # the contract lists advise among the commands that take --progress
    shared = (ROOT / "docs" / "contracts" / "cli.md").read_text().split(
        "## Options shared by the commands that run simulations")[1].split("| option |")[0]
    assert "`advise`" in shared


def write_trace(path: Path, *, notes: int = 100, queries: int = 200, same_t: int = 50,
                seed: int = 0) -> Path:
    """A small trace: notes up to 100 days old, queries asked ``same_t`` at a
    time, each with the logged top 8 and the one note it used."""
    rng = np.random.default_rng(seed)
    emb = rng.normal(size=(notes, 8))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    events = [{"event": "header", "format": "memsim-trace", "version": 1, "time_unit": "day",
               "name": "gen"}]
    for i in range(notes):
        events.append({"event": "note_added", "id": i, "t": -100 + 100 * i / notes,
                       "actor": "a0", "tokens": int(rng.integers(30, 200)),
                       "tier": ["task", "scratch", "longterm"][i % 3],
                       "embedding": [round(float(x), 4) for x in emb[i]]})
    for j in range(queries):
        target = int(rng.integers(0, notes))
        q = emb[target] + 0.5 * rng.normal(size=8)
        q /= np.linalg.norm(q)
        events.append({"event": "query", "id": j, "t": 1.0 + (j // same_t) * 0.5, "actor": "a0",
                       "embedding": [round(float(x), 4) for x in q]})
        sims = emb @ q
        top = np.argsort(-sims)[:8]
        events.append({"event": "retrieved", "query": j, "notes": [int(k) for k in top],
                       "scores": [round(float(sims[k]), 4) for k in top]})
        events.append({"event": "used", "query": j, "notes": [target]})
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


@pytest.fixture(scope="module")
def old_notes_advice(tmp_path_factory):
    """Rolling folds on a trace whose old notes a 500-day half-life buries a
    little: one point in the search space, so the result depends on no draw."""
    trace = write_trace(tmp_path_factory.mktemp("trace") / "old.jsonl")
    return advise(memsim.experiment_from_dict({
        "experiment": {"name": "old", "budget_tokens": 300, "candidates": 20, "replicates": 1},
        "workload": {"source": str(trace), "importer": "trace"},
        "policies": {"today": {"preset": "as-logged"}},
        "advise": {"current": "today", "rankers": ["half-life"], "packers": ["skip-fill"],
                   "cuts": ["none"], "candidates": [20], "trials": 1, "batch": 1,
                   "half_life_days": [500.0, 500.0]}}))


def test_side_effects_warn_only_where_the_interval_excludes_zero(old_notes_advice):
    from memsim.evaluation.metrics import OLD_RECALL_COLUMN

    adv = old_notes_advice
    old = adv.heldout[OLD_RECALL_COLUMN]
    # old-note recall falls, but its interval reaches 0: reported, no warning
    assert old["diff"] < 0 and old["low"] < 0 and old["high"] >= 0
    assert adv.warnings == [] and "WARNING" not in adv.to_text()
    assert "recall of notes >= 90 days" in adv.metrics_line()


def test_side_effect_warnings_follow_the_interval():
    from memsim.tuning.advice import _side_effect_warnings

    def h(diff, low, high):
        return {"diff": diff, "low": low, "high": high}

    nan = h(math.nan, math.nan, math.nan)
    quiet = {"harm": h(0.01, -0.01, 0.03), "recall_age_90_inf": h(-0.05, -0.15, 0.0),
             "tokens_used": h(50.0, 20.0, 80.0)}
    assert _side_effect_warnings(quiet) == []
    loud = {"harm": h(0.02, 0.01, 0.03), "recall_age_90_inf": h(-0.05, -0.15, -0.01),
            "tokens_used": h(50.0, 20.0, 80.0)}
    assert _side_effect_warnings(loud) == [
        "raises harm by 0.020 [+0.010, +0.030]",
        "lowers recall of notes >= 90 days by 0.050 [-0.150, -0.010]"]
    # an improvement is no warning; nor is a metric with nothing to measure
    assert _side_effect_warnings({"harm": h(-0.02, -0.03, -0.01), "recall_age_90_inf": nan,
                                  "tokens_used": nan}) == []


def test_pooled_heldout_figures_say_they_are_each_folds_own_winner(old_notes_advice):
    import dataclasses

    adv = old_notes_advice
    assert len(adv.folds) == 3
    text = adv.to_text()
    assert "held-out, each fold's own winner" in text
    metrics = next(line for line in text.splitlines() if "tokens used" in line)
    assert metrics.startswith("held-out, each fold's own winner: ")
    # the search kept today's setting, and earlier folds' winners differ:
    # the report says the pooled figures are not the recommendation's
    kept = dataclasses.replace(adv, changes=[])
    text = kept.to_text()
    assert "Recommendation: keep today's setting" in text
    assert "the held-out figures below pool each fold's own winner" in text
    assert "keep" in kept.headline() and "a significant gain" not in kept.headline()


def test_runner_ups_heldout_names_the_last_folds_test_queries(old_notes_advice):
    import dataclasses

    adv = old_notes_advice
    ru = {"tuning": 0.3, "changes": ["candidates from 20 to 10"], "heldout": 0.5,
          "policy": adv.recommended}
    text = dataclasses.replace(adv, runner_ups=[ru]).to_text()
    n = adv.folds[-1]["n_test"]
    header = next(line for line in text.splitlines() if line.startswith("Runner-ups"))
    assert f"held-out: on the last fold's {n} test queries" in header
    # one fold: the runner-ups' held-out base is the recommendation's
    one = dataclasses.replace(adv, runner_ups=[ru], folds=adv.folds[-1:]).to_text()
    assert "last fold" not in next(line for line in one.splitlines()
                                   if line.startswith("Runner-ups"))


def test_advice_md_never_recommends_a_setting_the_verdict_rejects(old_notes_advice):
    import dataclasses

    adv = old_notes_advice
    worse = dataclasses.replace(adv, gain=-0.2, gain_low=-0.3, gain_high=-0.1, significant=True)
    md = worse.to_markdown()
    assert "significantly WORSE" in md
    assert "Recommended policy" not in md and "[policies.recommended]" not in md
    assert "keep today's setting" in md and "not recommended" in md
    data = json.loads(worse.to_json())
    assert data["verdict"] == "keep" and data["verdict_reason"] == "significantly worse"
    assert data["recommended"] == json.loads(adv.to_json())["recommended"]  # kept for compat
    # not significant: not recommended either
    flat = dataclasses.replace(adv, gain=0.01, gain_low=-0.1, gain_high=0.1, significant=False)
    assert "Recommended policy" not in flat.to_markdown()
    assert json.loads(flat.to_json())["verdict_reason"] == "not significant"
    # a significant gain: the setting to paste
    better = dataclasses.replace(adv, gain=0.2, gain_low=0.1, gain_high=0.3, significant=True)
    assert "Recommended policy (paste as a `[policies.NAME]` table)" in better.to_markdown()
    assert json.loads(better.to_json())["verdict"] == "adopt"
    # nothing better found: no table to paste
    same = dataclasses.replace(better, changes=[])
    assert json.loads(same.to_json())["verdict"] == "keep"
    assert "```toml" not in same.to_markdown()
