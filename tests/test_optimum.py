"""The planted optimum: a known law of validity, the Bayes ranker, and a sweep
that recovers the derived optimum (memsim.data.planted, memsim.tuning.optimum)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import memsim
from memsim.cli import main
from memsim.core.errors import ConfigError
from memsim.tuning.optimum import BAYES_LABEL, BAYES_PACKERS, RANK_ONLY_PACKERS, optimum
from memsim.data.planted import PlantedModel, known_optimum
from memsim.policies.base import REGISTRY
from memsim.sweep import run_sweep
from memsim.data.workload import CLASS_NAMES, SyntheticWorkload

HL = "policies.p.decay.half_life_days"


def exponential_world(h: float, **extra) -> dict:
    """One expiring class, one note per slot, validity with half-life ``h``:
    a slot is askable exactly while its note is valid, so no stale gains."""
    table = {
        "horizon_days": 60.0, "backfill_days": 4 * h, "queries_per_day": 20.0,
        "notes_per_day": 20.0, "uniform_tokens": 100,
        "classes": {"evergreen": {"share": 0.0}, "scratch": {"share": 0.0},
                    "superseding": {"share": 0.0}, "distractor": {"share": 0.0},
                    "project": {"share": 1.0, "notes_per_slot": 1.0,
                                "lifetime_law": "exponential", "lifetime_median_days": h}},
    }
    table.update(extra)
    return table


def test_the_optimum_is_derived_only_where_the_age_prior_is_one_exponential():
    opt = known_optimum(SyntheticWorkload.from_config(exponential_world(25.0)))
    assert opt.solvable and opt.half_life_days == 25.0
    # beta: the linear-discriminant slope of the within-query similarity law
    assert opt.beta == pytest.approx(SyntheticWorkload().query_similarity_model().beta)
    default = known_optimum(SyntheticWorkload())
    assert not default.solvable and "notes_per_slot" in default.reason
    evergreen = SyntheticWorkload.from_config({"classes": {
        "evergreen": {"share": 1.0}, "project": {"share": 0.0}, "scratch": {"share": 0.0},
        "superseding": {"share": 0.0}, "distractor": {"share": 0.0}}})
    assert math.isinf(known_optimum(evergreen).half_life_days)
    lognormal = exponential_world(25.0)
    lognormal["classes"]["project"]["lifetime_law"] = "lognormal"
    assert "exponential" in known_optimum(SyntheticWorkload.from_config(lognormal)).reason


def test_no_optimum_is_derived_where_similarity_has_no_slot_signal():
    """At slot_weight = 0 the slope is 0 and the derivation said "rank by age
    alone" (beta 0), while similarity still tells the asked topic from the
    others: ranking by age alone finds the asked note far less often."""
    wl = SyntheticWorkload.from_config(exponential_world(30.0, slot_weight=0.0))
    opt = known_optimum(wl)
    assert opt.beta == 0.0 and not opt.solvable and "slot_weight = 0" in opt.reason
    s = wl.generate(0)
    asked = s.qrels[s.qrels.gain == 1.0].set_index("query_id").note_id
    q = s.queries[s.queries.query_id.isin(asked.index)]
    cos = s.query_embeddings[q.index.to_numpy()] @ s.note_embeddings.T
    age = q.t.to_numpy()[:, None] - s.notes.created_at.to_numpy()[None, :]
    target = asked.loc[q.query_id].to_numpy()

    def mrr(beta):
        score = np.where(age >= 0, beta * cos - np.log(2) * age / 30.0, -np.inf)
        mine = score[np.arange(len(target)), target][:, None]
        return np.mean(1.0 / (1 + (score > mine).sum(axis=1)))

    assert mrr(5.0) > 3 * mrr(0.0)
    assert known_optimum(SyntheticWorkload.from_config(
        exponential_world(30.0, slot_weight=0.3))).solvable


def test_the_planted_posterior_orders_by_similarity_and_by_the_age_prior():
    model = PlantedModel.from_workload(SyntheticWorkload.from_config(exponential_world(30.0)))
    project = CLASS_NAMES.index("project")
    cos = np.array([[0.3, 0.5, 0.6, 0.6, 0.6]])
    age = np.array([[0.0, 0.0, 0.0, 30.0, 60.0]])
    g = model.expected_gain(cos, age, np.full(5, project), np.array([10.0]))[0]
    assert g[0] < g[1] < g[2]  # more similar, more likely the asked note
    assert g[2] > g[3] > g[4] > 0  # older, less likely still valid
    # one note per slot, exponential law: the log odds of being the asked
    # note fall by ln 2 per half-life (prior odds ~ prior: it is small)
    odds = g / (1 - g)  # gain_current = 1, so g is the posterior itself
    assert math.log(odds[2] / odds[3]) == pytest.approx(math.log(2), rel=0.02)
    assert math.log(odds[3] / odds[4]) == pytest.approx(math.log(2), rel=0.02)
    # a class nobody asks about, or an unknown class, is worth nothing
    assert model.expected_gain(cos, age, np.full(5, -1), np.array([10.0])).max() == 0.0


def test_bayes_needs_a_planted_model():
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "b", "replicates": 1},
        "workload": {"horizon_days": 5.0, "backfill_days": 5.0},
        "policies": {"b": {"ranker": "bayes"}}})
    res = memsim.run_experiment(exp, out=None, report=False)
    assert res.queries["utility"].notna().all()
    from memsim.data.planted import PlantedModel as PM  # the stream without its workload
    with pytest.raises(ConfigError, match="synthetic workload"):
        PM.from_config(None)


def test_memsim_optimum_derives_the_family_and_runs_the_bayes_twins():
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "o", "replicates": 1, "budget_tokens": 500},
        "workload": exponential_world(20.0, horizon_days=20.0, queries_per_day=10.0),
        "policies": {
            "p": {"ranker": {"kind": "calibrated-product", "beta": 17.0},
                  "decay": {"kind": "half-life", "half_life_days": 60.0},
                  "packer": "top-k-cutoff"},
            "bug": {"preset": "hivemind-2025-bug"}}})
    rep = optimum(exp)
    row = rep.table.set_index("policy").loc["p"]
    assert row["status"] == "derived" and row["optimum.half_life_days"] == 20.0
    assert row["current.beta"] == 17.0 and row["current.half_life_days"] == 60.0
    # only beta x h is identifiable: at half the slope, twice the half-life
    assert row["optimum.half_life_days_at_current_beta"] == pytest.approx(
        20.0 * row["optimum.beta"] / 17.0)
    bug = rep.table.set_index("policy").loc["bug"]
    assert bug["status"] == "not derivable" and "calibrated-product" in bug["reason"]
    # the planted posterior packs more of the answer than the 5%-a-day bug
    assert bug["utility.bayes_own_packer"] > bug["utility.current"]
    assert 0 < row["utility_share.bayes_own_packer"] <= 1
    # the best packer is one of those tried, and no worse than the own one
    assert row["bayes_best_packer"] in BAYES_PACKERS
    assert row["utility.bayes_best_packer"] >= row["utility.bayes_own_packer"]
    assert BAYES_LABEL in rep.to_text()


def test_rank_only_packers_are_exactly_those_that_ignore_score_magnitudes():
    # the beta x h rule holds for a packer only if any increasing transform of
    # the scores (another pair with the same beta x h) packs the same notes
    rng = np.random.default_rng(5)
    q, c = 200, 30
    values = np.sort(rng.uniform(0.05, 1.0, (q, c)), axis=1)[:, ::-1].copy()
    tokens = rng.integers(20, 600, (q, c))
    valid = np.ones((q, c), bool)
    budget = np.full(q, 1500)
    invariant = set()
    for name, cls in REGISTRY["packer"].items():
        packer = cls()
        a = packer.pack(values, tokens, valid, budget)
        b = packer.pack(values ** 3, tokens, valid, budget)
        if np.array_equal(a, b):
            invariant.add(name)
    assert invariant == set(RANK_ONLY_PACKERS)


def test_the_law_is_not_applied_where_the_pipeline_breaks_it():
    base = {"ranker": {"kind": "calibrated-product", "beta": 20.0},
            "decay": {"kind": "half-life", "half_life_days": 30.0}}
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "o", "replicates": 1},
        "workload": exponential_world(20.0),
        "policies": {
            "ok": {**base, "packer": "skip-fill"},
            "sticky": {**base, "stickiness": "log-recall"},
            "cut": {**base, "packer": {"kind": "greedy", "min_relative_score": 0.5}},
            "greedy": {**base, "packer": "greedy"}}})
    t = optimum(exp, simulate=False).table.set_index("policy")
    assert t.loc["ok", "status"] == "derived"
    assert t.loc["sticky", "status"] == "not derivable"
    assert "stickiness" in t.loc["sticky", "reason"]
    # without simulation a value packer's derived pair is not checked: no answer
    for name in ("cut", "greedy"):
        assert t.loc[name, "status"] == "not derivable"
        assert math.isnan(t.loc[name, "optimum.beta"])
        assert math.isnan(t.loc[name, "optimum.half_life_days_at_current_beta"])
        assert "weighs score magnitudes" in t.loc[name, "rule"]


def test_optimum_json_writes_an_infinite_half_life_as_null(capsys):
    """docs/contracts/json.md: NaN and infinities are null (strict JSON);
    an evergreen world's optimum has no decay, an infinite half-life."""
    path = Path(__file__).resolve().parents[1] / "experiments" / "planted.toml"
    assert main(["optimum", str(path), "--no-simulate", "--json",
                 "--set", "workload.classes.project.share=0.0",
                 "--set", "workload.classes.evergreen.share=1.0"]) == 0

    def refuse(name):
        raise AssertionError(f"not strict JSON: {name}")

    out = json.loads(capsys.readouterr().out, parse_constant=refuse)
    derived = [p for p in out["policies"] if p["status"] == "derived"]
    assert derived
    for p in derived:
        assert p["optimum"]["half_life_days"] is None
        assert p["optimum"]["half_life_days_at_current_beta"] is None
    assert '"inf"' not in json.dumps(out)


def test_an_evergreen_worlds_optimum_is_simulated_as_no_decay(capsys):
    """The derived half-life is infinite: the optimum arm runs with no decay
    (it used to fail building a half-life of inf, in the default mode), and
    a value packer's check varies beta alone (halving infinity left no
    neighbour, and the pair was called confirmed against none)."""
    path = Path(__file__).resolve().parents[1] / "experiments" / "planted.toml"
    assert main(["optimum", str(path), "--json", "--set", "experiment.replicates=1",
                 "--set", "workload.horizon_days=20", "--set", "workload.backfill_days=60",
                 "--set", "workload.classes.project.share=0.0",
                 "--set", "workload.classes.evergreen.share=1.0"]) == 0
    out = json.loads(capsys.readouterr().out)
    pol = {p["policy"]: p for p in out["policies"]}
    topk = pol["calibrated-top-k"]
    assert topk["status"] == "derived" and topk["optimum"]["half_life_days"] is None
    assert math.isfinite(topk["utility"]["optimum"])
    greedy = pol["calibrated-greedy"]
    labels = [c["label"] for c in greedy["check"]]
    assert labels == ["derived", "beta halved", "beta doubled"]
    beta = greedy["optimum"]["beta"]
    assert [c["beta"] for c in greedy["check"]] == [beta, beta / 2, beta * 2]


def test_small_and_huge_values_print_as_numbers(capsys):
    """beta = 0.001 printed 'beta = 0.00' (a value the config refuses) and a
    half-life of 1e300 days three hundred digits."""
    path = Path(__file__).resolve().parents[1] / "experiments" / "planted.toml"
    assert main(["optimum", str(path), "--no-simulate",
                 "--set", "policies.calibrated-top-k.ranker.beta=0.001",
                 "--set", "policies.calibrated-skip-fill.decay.half_life_days=1e300"]) == 0
    text = capsys.readouterr().out
    assert "current: beta = 0.001, half_life_days = 120.0" in text
    assert "current: beta = 20.00, half_life_days = 1e+300" in text
    assert max(len(line) for line in text.splitlines()) < 400


@pytest.mark.slow
def test_optimum_cli_on_the_shipped_planted_experiment(capsys):
    path = Path(__file__).resolve().parents[1] / "experiments" / "planted.toml"
    small = ["--set", "experiment.replicates=1", "--set", "workload.horizon_days=30"]
    assert main(["optimum", str(path), "--json", *small]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["workload"] == "synthetic, planted law: half-life 30.0"
    pol = {p["policy"]: p for p in out["policies"]}
    topk = pol["calibrated-top-k"]
    # keys say what they are: the policy's own values apart from the answer
    assert "beta" not in topk and "beta_opt" not in topk
    assert topk["current"] == {"beta": 20.0, "half_life_days": 120.0}
    assert topk["status"] == "derived" and topk["optimum"]["half_life_days"] == 30.0
    assert topk["optimum"]["half_life_days_at_current_beta"] == pytest.approx(
        30.0 * topk["optimum"]["beta"] / 20.0)
    # the derived optimum beats the experiment's long half-life
    assert topk["utility"]["optimum"] > topk["utility"]["current"]
    greedy = pol["calibrated-greedy"]
    assert greedy["status"] in ("checked", "not confirmed")
    assert greedy["optimum"]["half_life_days_at_current_beta"] is None
    assert [c["label"] for c in greedy["check"]][0] == "derived" and len(greedy["check"]) == 5
    assert pol["bug-5pct-per-day"]["status"] == "not derivable"
    for p in out["policies"]:
        assert p["bayes_label"] == BAYES_LABEL
        assert p["utility"]["bayes_best_packer"] >= p["utility"]["bayes_own_packer"]
    assert main(["optimum", str(path), "--no-simulate"]) == 0
    text = capsys.readouterr().out
    assert "derived from the planted truth" in text
    assert "at the current beta = 20.00 the optimal half-life is" in text


@pytest.mark.slow
@pytest.mark.parametrize("h", [8.0, 20.0, 40.0])
def test_a_sweep_of_the_family_recovers_the_planted_half_life(h):
    """60 TPE trials over [1, 1000] days (log), beta fixed at the derived
    slope: the best half-life is within 25% of the planted H, and the
    sweep's plateau (values within replicate noise of the best) holds H."""
    wl = SyntheticWorkload.from_config(exponential_world(h))
    opt = known_optimum(wl)
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "recover", "seed": 11, "replicates": 2, "budget_tokens": 500},
        "workload": exponential_world(h),
        "policies": {"p": {"ranker": {"kind": "calibrated-product", "beta": opt.beta},
                           "decay": {"kind": "half-life", "half_life_days": 300.0},
                           "packer": "top-k-cutoff"}},
        "sweep": {"trials": 60, "sampler": "tpe", "seed": 3,
                  "objectives": [{"metric": "utility", "direction": "maximize", "policy": "p"}],
                  "params": {HL: {"type": "float", "low": 1.0, "high": 1000.0, "log": True}},
                  "robustness": {"replicates": 0}}})
    res = run_sweep(exp, out=None, quiet=True, plots=False, report=False)
    best = res.best_params[HL]
    assert abs(best / h - 1) <= 0.25, (h, best)
    plateau = res.plateau.set_index("param").loc[HL]
    assert plateau["low"] <= h <= plateau["high"], (h, plateau["low"], plateau["high"])
