"""Sweep defects found by reproduction: categorical choices that are no
strings, in-memory and mistyped storages, a grid whose points fail,
resumed sweeps seeded from the process, an optional sampler package found
missing too late, and smaller mistakes of messages and notes.

Workloads are the tiny ones of ``tests/test_sweep.py`` (20 + 20 days, a
trial takes a fraction of a second).
"""

from __future__ import annotations

import json
import shutil
import sys
import warnings

import pandas as pd
import pytest

import memsim
from memsim.cli import main
from memsim.core.errors import ConfigError, SweepWarning
from memsim.sweep import SweepSpec, TrialEvaluator, plateau_table, run_sweep
from memsim.sweep.evaluate import TrialOutcome

from .test_sweep import HL, table, write_toml

CANDIDATES = "policies.p.candidates"
BEFORE = "policies.p.feedback.before_scoring"


def tiny(**kw) -> dict:
    """``table`` on a 20 + 20 day workload, no fresh-seed re-check."""
    kw.setdefault("robustness", {"replicates": 0})
    t = table(own=45.0, **kw)
    t["workload"].update(horizon_days=20, backfill_days=20)
    return t


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# --------------------------------------------------------------------------
# 1. Categorical choices of every TOML type
# --------------------------------------------------------------------------


def test_plateau_of_int_bool_float_and_string_choices_keeps_their_types():
    """The trials table holds numpy scalars (int64, bool_) and an int column
    with a missing value as floats; the plateau maps each back to its choice
    (json could not write numpy scalars: TypeError after every trial ran)."""
    params = {
        "a": {"type": "categorical", "choices": [0, 5, 10]},
        "b": {"type": "categorical", "choices": [False, True]},
        "c": {"type": "categorical", "choices": [0.5, 2.0]},
        "d": {"type": "categorical", "choices": ["x", "y"]},
    }
    spec = SweepSpec.from_config({"params": params, "objectives": [{"metric": "utility"}]})
    trials = pd.DataFrame({
        "number": [0, 1, 2, 3], "state": ["COMPLETE"] * 3 + ["FAIL"],
        "values_utility": [0.50, 0.51, 0.10, float("nan")],
        "a": pd.array([5, 10, 0, None], dtype=object),
        "b": [True, False, True, False], "c": [0.5, 2.0, 0.5, 0.5], "d": ["x", "y", "x", "x"],
        # trials 0 and 1 within the replicate noise of each other, 2 far below
        "utility_rep0": [0.45, 0.56, 0.10, None], "utility_rep1": [0.55, 0.46, 0.10, None]})
    trials["a"] = trials["a"].astype("float64")  # what an int column with a gap becomes
    trials["b"] = trials["b"].astype(bool)
    rows = plateau_table(trials, spec).set_index("param")
    chosen = {k: json.loads(rows.loc[k, "choices"]) for k in params}
    assert chosen["a"] == [5, 10] and all(type(v) is int for v in chosen["a"])
    assert chosen["b"] == [False, True] and all(type(v) is bool for v in chosen["b"])
    assert chosen["c"] == [0.5, 2.0] and chosen["d"] == ["x", "y"]
    assert rows.loc["a", "best"] == 10 and type(rows.loc["a", "best"]) is int
    assert rows.loc["b", "best"] is False


def test_a_sweep_over_int_and_bool_choices_with_replicates_writes_its_outputs(tmp_path):
    t = tiny(trials=4, replicates=2, sampler="random")
    t["sweep"]["params"] = {CANDIDATES: {"type": "categorical", "choices": [20, 50]},
                            BEFORE: {"type": "categorical", "choices": [False, True]}}
    res = run_sweep(memsim.experiment_from_dict(t), out=tmp_path, plots=False, report=False)
    plateau = pd.read_csv(res.path / "sweep" / "plateau.csv").set_index("param")
    assert set(json.loads(plateau.loc[CANDIDATES, "choices"])) <= {20, 50}
    assert set(json.loads(plateau.loc[BEFORE, "choices"])) <= {False, True}
    summary = (res.path / "sweep" / "summary.txt").read_text()
    assert f"{BEFORE} = false" in summary or f"{BEFORE} = true" in summary
    # the same command again (nothing left to run) writes them again
    again = run_sweep(memsim.experiment_from_dict(t), out=tmp_path, plots=False, report=False)
    assert again.path == res.path and (again.path / "sweep" / "plateau.csv").exists()


# --------------------------------------------------------------------------
# 2. Storages that cannot hold a study across processes, or whose folder is missing
# --------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["sqlite:///:memory:", "sqlite://", "sqlite:///",
                                 "sqlite+pysqlite:///:memory:"])
def test_an_in_memory_sqlite_storage_is_refused_before_any_folder(tmp_path, capsys, url):
    f = write_toml(tmp_path / "tiny.toml", tiny(trials=2, replicates=1))
    out = tmp_path / "out"
    assert main(["sweep", str(f), "--out", str(out), "-q", "--no-report", "--storage", url]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"memsim: error: --storage: {url} is an in-memory SQLite")
    assert "sqlite:///FILE.db" in line
    assert not out.exists()


def test_a_journal_in_a_missing_folder_is_refused_not_created(tmp_path, capsys):
    f = write_toml(tmp_path / "tiny.toml", tiny(trials=2, replicates=1))
    out, missing = tmp_path / "out", tmp_path / "no" / "such"
    assert main(["sweep", str(f), "--out", str(out), "-q", "--no-report",
                 "--storage", f"journal:{missing / 'x.log'}"]) == 2
    line = _one_error_line(capsys)
    assert f"--storage journal:{missing / 'x.log'}: the folder {missing} does not exist" in line
    assert not (tmp_path / "no").exists() and not out.exists()


def test_a_study_of_another_sweep_is_refused_before_a_folder_is_made(tmp_path, capsys):
    journal = tmp_path / "shared.log"
    f = write_toml(tmp_path / "a.toml", tiny(trials=2, replicates=1))
    assert main(["sweep", str(f), "--out", str(tmp_path / "a"), "-q", "--no-report",
                 "--storage", f"journal:{journal}", "--study", "s"]) == 0
    capsys.readouterr()
    other = tiny(trials=2, replicates=1)
    other["policies"]["p"]["decay"]["half_life_days"] = 50.0
    g = write_toml(tmp_path / "b.toml", other)
    assert main(["sweep", str(g), "--out", str(tmp_path / "b"), "-q", "--no-report",
                 "--storage", f"journal:{journal}", "--study", "s"]) == 2
    assert "--study s: the study belongs to another experiment" in _one_error_line(capsys)
    assert not (tmp_path / "b").exists()


# --------------------------------------------------------------------------
# 3. The grid: each point once, failed points reported, never re-run
# --------------------------------------------------------------------------


def _grid(trials: int | None = None) -> dict:
    t = tiny(replicates=1, sampler="grid")
    t["policies"]["p"]["decay"]["half_life_days"] = 20.0
    t["sweep"]["params"] = {HL: {"type": "float", "low": 10.0, "high": 40.0, "step": 10.0}}
    if trials is None:
        del t["sweep"]["trials"]
    else:
        t["sweep"]["trials"] = trials
    return t


def _fail_at(monkeypatch, value: float) -> list:
    """Make every trial whose half-life is ``value`` fail, as a simulation
    error would; returns the list of parameter sets evaluated."""
    seen: list = []
    evaluate = TrialEvaluator.evaluate_batch

    def failing(self, param_sets, *a, **kw):
        seen.extend(dict(p) for p in param_sets)
        outs = evaluate(self, param_sets, *a, **kw)
        return [TrialOutcome(error=f"boom at {value:g}") if p.get(HL) == value else o
                for p, o in zip(param_sets, outs)]

    monkeypatch.setattr(TrialEvaluator, "evaluate_batch", failing)
    return seen


def test_a_failed_grid_point_is_reported_and_never_run_again(tmp_path, monkeypatch):
    """A grid of 4 points, one of which fails: before, the failed point's
    slot was filled with a duplicate of a completed point ("4 COMPLETE
    trials of 5" with 3 distinct points); now each point runs once, the
    failure is a note and a warning, and the same command runs nothing."""
    seen = _fail_at(monkeypatch, 30.0)
    exp = memsim.experiment_from_dict(_grid())
    with pytest.warns(SweepWarning, match="the grid ended with 3 COMPLETE trials of the 4"):
        res = run_sweep(exp, out=tmp_path, plots=False, report=False)
    trials = res.trials
    assert len(trials) == 4 and sorted(trials[HL]) == [10.0, 20.0, 30.0, 40.0]
    assert list(trials.loc[trials[HL] == 30.0, "state"]) == ["FAIL"]
    assert len(seen) == 4
    text = res.summary_text()
    assert f"grid point {HL} = 30 failed (trial" in text and "boom at 30" in text
    assert "is not run again" in (res.path / "sweep" / "summary.txt").read_text()
    manifest = json.loads((res.path / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SweepWarning)
        again = run_sweep(exp, out=tmp_path, plots=False, report=False)
    assert again.path == res.path and len(again.trials) == 4 and len(seen) == 4


def test_a_grid_smaller_than_its_points_skips_a_failed_one_for_an_untried_one(monkeypatch):
    _fail_at(monkeypatch, 30.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SweepWarning)
        res = run_sweep(memsim.experiment_from_dict(_grid(trials=3)), out=None, plots=False,
                        report=False)
    done = res.trials[res.trials["state"] == "COMPLETE"]
    assert len(done) == 3 and done[HL].is_unique


def test_a_grid_combination_that_cannot_be_built_is_refused_before_any_trial():
    t = _grid()
    t["sweep"]["params"] = {
        "policies.p.decay": {"type": "categorical", "choices": ["half-life", "exp-rate"]},
        HL: {"type": "float", "low": 10.0, "high": 30.0, "step": 10.0}}
    exp = memsim.experiment_from_dict(t)
    with pytest.raises(ConfigError) as info:
        SweepSpec.from_config(exp.sweep, exp)
    msg = str(info.value)
    assert msg.startswith('sweep.params: the grid point policies.p.decay = "exp-rate", '
                          f"{HL} = 10 does not give a valid experiment"), msg
    assert "\n" not in msg


# --------------------------------------------------------------------------
# 4. One worker: a resumed sweep is seeded from sweep.seed and the study
# --------------------------------------------------------------------------


def _sampled(res) -> list[float]:
    """The half-lives the sampler chose, in trial order."""
    t = res.trials
    return t.loc[t["origin"] == "sampler", HL].round(9).tolist()


def test_two_copies_of_a_folder_extended_alike_sample_alike(tmp_path, monkeypatch):
    """Before, a resumed study's sampler was seeded from the host and the
    pid: the same folder extended twice gave other trials (here the second
    copy is resumed as if on another machine)."""
    exp = memsim.experiment_from_dict(tiny(trials=3, replicates=1, sampler="random"))
    first = run_sweep(exp, out=tmp_path / "a", plots=False, report=False)
    shutil.copytree(first.path, tmp_path / "b" / first.path.name)
    a = run_sweep(exp, out=tmp_path / "a", trials=5, plots=False, report=False)
    import memsim.sweep.workers as workers
    monkeypatch.setattr(workers, "host_name", lambda: "another-machine")
    b = run_sweep(exp, out=tmp_path / "b", trials=5, plots=False, report=False)
    assert a.path.parent != b.path.parent
    assert len(_sampled(a)) == 4 and _sampled(a) == _sampled(b)


def test_a_study_stopped_before_its_first_trial_ended_runs_as_a_fresh_one(tmp_path,
                                                                         monkeypatch):
    exp = memsim.experiment_from_dict(tiny(trials=4, replicates=1, sampler="random"))
    fresh = run_sweep(exp, out=None, plots=False, report=False)

    def interrupted(self, *a, **kw):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(TrialEvaluator, "evaluate_batch", interrupted)
        with pytest.raises(KeyboardInterrupt):
            run_sweep(exp, out=tmp_path, plots=False, report=False)
    resumed = run_sweep(exp, out=tmp_path, plots=False, report=False)
    assert (resumed.trials["state"] == "FAIL").sum() == 1  # trial 0, given back
    assert len(_sampled(fresh)) == 3 and _sampled(resumed) == _sampled(fresh)


def test_the_qmc_sequence_is_scrambled_with_the_sweeps_seed_in_every_session():
    from memsim.sweep.study import make_sampler

    spec = SweepSpec.from_config(dict(tiny(sampler="qmc")["sweep"], seed=11))
    assert make_sampler(spec, seed=12345)._seed == 11


# --------------------------------------------------------------------------
# 5. An optional sampler package, checked with the [sweep] table
# --------------------------------------------------------------------------


def test_a_missing_cmaes_package_is_a_mistake_of_the_file_before_any_folder(
        tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "cmaes", None)  # as if not installed
    f = write_toml(tmp_path / "cma.toml", tiny(trials=2, replicates=1, sampler="cmaes"))
    out = tmp_path / "out"
    assert main(["sweep", str(f), "--out", str(out), "-q", "--no-report"]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"memsim: error: {f}: sweep.sampler: 'cmaes' needs the optional "
                           "cmaes package"), line
    assert not out.exists()


# --------------------------------------------------------------------------
# 6. Smaller mistakes
# --------------------------------------------------------------------------


@pytest.mark.parametrize("key, value, why", [
    ("experiment.replicates", 5, "it would change nothing"),
    ("experiment.seed", 99, "change every replicate's stream"),
    ("experiment.name", "other", "names the experiment"),
])
def test_a_variant_that_changes_the_seeds_or_nothing_is_refused(key, value, why):
    exp = memsim.experiment_from_dict(tiny(robustness={"variants": [{"name": "v", key: value}]}))
    with pytest.raises(ConfigError) as info:
        SweepSpec.from_config(exp.sweep, exp)
    msg = str(info.value)
    assert msg.startswith(f"sweep.robustness.variants[0].{key}: a variant cannot set it: "), msg
    assert why in msg


def test_the_objectives_message_shows_one_closing_brace():
    exp = memsim.experiment_from_dict(tiny())
    with pytest.raises(ConfigError) as info:
        SweepSpec.from_config(dict(exp.sweep, objectives=5), exp)
    assert 'direction = "maximize" } tables' in str(info.value)
    assert "}}" not in str(info.value)


def test_lowering_trials_below_those_done_says_the_outputs_cover_them_all(tmp_path):
    exp = memsim.experiment_from_dict(tiny(trials=3, replicates=1))
    run_sweep(exp, out=tmp_path, plots=False, report=False)
    res = run_sweep(exp, out=tmp_path, trials=2, plots=False, report=False)
    assert res.summary_text().splitlines()[:2] == [
        f"study {res.study_name}: 3 COMPLETE trials of 3",
        "note: the study already has 3 COMPLETE trials, more than the 2 asked (sweep.trials "
        "or --trials): no trial ran, and the outputs cover all 3"]


@pytest.mark.parametrize("sets, attributed", [
    ([f'sweep.params."{HL}".log=true'], [f'sweep.params."{HL}".log=true']),
    ([f'sweep.params."{HL}".low=5.0', f'sweep.params."{HL}".step=100.0'],
     [f'sweep.params."{HL}".step=100.0', f'sweep.params."{HL}".low=5.0']),
])
def test_a_set_that_makes_another_field_wrong_is_named(tmp_path, capsys, sets, attributed):
    """A range from 0 made log-scale by a --set is reported at ``.low``;
    before, without the --set that made it wrong."""
    t = tiny(trials=2, replicates=1)
    t["sweep"]["params"] = {HL: {"type": "float", "low": 0.0, "high": 1000.0}}
    f = write_toml(tmp_path / "hl.toml", t)
    args = ["sweep", str(f), "--out", str(tmp_path / "out")]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    line = _one_error_line(capsys)
    assert line.endswith(" (from " + ", ".join(f"--set {a}" for a in attributed) + ")"), line
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------
# Found on review of the changes above
# --------------------------------------------------------------------------


@pytest.mark.parametrize("choices", [[15, 15.0, 10], [1, True], [0, False, 3]])
def test_choices_equal_as_values_are_refused(choices):
    """Optuna finds a choice by ==: 15.0 was recorded as 15, and a grid over
    [15, 15.0, 10] never ended (a surplus trial a loop, for ever)."""
    with pytest.raises(ConfigError, match="are equal as values"):
        SweepSpec.from_config({"params": {CANDIDATES: {"type": "categorical",
                                                       "choices": choices}}})


def test_a_session_that_joins_a_running_study_seeds_as_a_worker(tmp_path):
    """A one-worker session that finds another session's trial running (here
    one claimed on another machine) must not take the resumed seed: two
    sessions starting from one state proposed the same points."""
    import optuna

    from memsim.sweep.run import _one_worker_seed
    from memsim.sweep.storage import open_storage
    from memsim.sweep.study import session_seed
    exp = memsim.experiment_from_dict(tiny(trials=2, replicates=1, sampler="random"))
    spec = SweepSpec.from_config(exp.sweep, exp)
    first = run_sweep(exp, out=tmp_path, plots=False, report=False)
    storage = open_storage(f"journal:{first.path / 'sweep' / 'journal.log'}")
    study = optuna.load_study(study_name=optuna.get_all_study_names(storage)[0],
                              storage=storage)
    resumed = _one_worker_seed(study, storage, spec)
    assert resumed == session_seed(spec.seed, study) and resumed != spec.seed
    other = study.ask()
    other.set_user_attr("worker", "another-machine:1")
    other.set_user_attr("worker_trial", other.number)
    assert _one_worker_seed(study, storage, spec) is None  # joining: a worker's seed
    study.tell(other, state=optuna.trial.TrialState.FAIL)
    assert _one_worker_seed(study, storage, spec) == resumed


def test_a_one_parameter_grid_builds_every_value_before_any_trial(tmp_path, capsys):
    """Only the range's probe points were built: uniform_tokens 0 .. 16 ran,
    and 7 of its 17 points failed at run time."""
    t = tiny(sampler="grid", params={
        "workload.uniform_tokens": {"type": "int", "low": 0, "high": 16}})
    f = write_toml(tmp_path / "g.toml", t)
    assert main(["sweep", str(f), "--out", str(tmp_path / "out")]) == 2
    line = _one_error_line(capsys)
    assert "the grid point workload.uniform_tokens = 1 does not give a valid experiment" in line
    assert not (tmp_path / "out").exists()


def test_a_trial_given_back_is_no_failure_of_its_point_even_without_its_retry():
    """A second Ctrl-C between the FAIL and the retry's enqueue left the
    point failed for good ("failed ... and is not run again")."""
    import optuna

    from memsim.sweep.study import GIVEN_BACK, given_up_trials
    study = optuna.create_study()
    cut = study.ask()
    cut.set_user_attr(GIVEN_BACK, True)
    study.tell(cut, state=optuna.trial.TrialState.FAIL)
    failed = study.ask()
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    assert given_up_trials(study.get_trials()) == {cut.number}


def test_trials_csv_keeps_integer_and_boolean_columns_around_a_trial_without_them():
    import optuna

    from memsim.sweep.outputs import trials_table
    spec = SweepSpec.from_config({"params": {
        CANDIDATES: {"type": "categorical", "choices": [10, 20]},
        BEFORE: {"type": "categorical", "choices": [False, True]}}})
    study = optuna.create_study()
    for c, b in ((10, True), (20, False)):
        study.enqueue_trial({CANDIDATES: c, BEFORE: b})
        t = study.ask({CANDIDATES: optuna.distributions.CategoricalDistribution([10, 20]),
                       BEFORE: optuna.distributions.CategoricalDistribution([False, True])})
        study.tell(t, 0.5)
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)  # a surplus: no parameters
    df = trials_table(study, spec)
    assert str(df[CANDIDATES].dtype) == "Int64" and str(df[BEFORE].dtype) == "boolean"
    assert df[CANDIDATES].tolist()[:2] == [10, 20] and df[BEFORE].tolist()[:2] == [True, False]


def test_an_int_grid_value_is_the_point_of_a_float_own_value():
    from memsim.sweep.study import _same_value, point_key
    assert _same_value(15, 15.0) and _same_value(15.0, 15) and _same_value(0.3, 0.1 + 2 * 0.1)
    assert not _same_value(1, True) and not _same_value(True, 1)
    spec = SweepSpec.from_config({"sampler": "grid", "params": {
        "workload.horizon_days": {"type": "int", "low": 13, "high": 17}}})
    assert point_key(spec, {"workload.horizon_days": 15}) == \
        point_key(spec, {"workload.horizon_days": 15.0})
