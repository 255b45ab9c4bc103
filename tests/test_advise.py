"""``memsim advise`` (memsim.tuning.advice) and the per-type half-life decay.

Small workloads and few trials: each test runs in seconds.
"""

from __future__ import annotations

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


def test_cli_writes_advice_files_atomically_and_prints_the_answer(tmp_path):
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
batch = 4
rankers = ["current", "similarity"]
""")
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
    if "current" in kw:
        assert info.value.errors[0].endswith("(from --current nope)")


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
    assert "fresh replicates (1-5: new seeds)" in adv.split
    assert "interval over replicates" in adv.headline()


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
