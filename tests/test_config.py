"""Experiment configs: overrides, resolution, grids and clear errors."""

from __future__ import annotations

import re

import dataclasses
import tomllib
from pathlib import Path

import pytest

from memsim.runs.config import (
    ExperimentSettings,
    apply_override,
    dumps_toml,
    experiment_from_dict,
    load_experiment,
    parse_override,
)
from memsim.engine import SimSettings
from memsim.core.errors import ConfigError
from memsim.policies import resolve_policy

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "experiments" / "quickstart.toml"


def minimal(**extra):
    table = {
        "experiment": {"name": "t", "seed": 1, "replicates": 1},
        "workload": {"horizon_days": 10, "backfill_days": 5},
        "policies": {"sim": {"preset": "similarity-only"}},
    }
    for k, v in extra.items():
        apply_override(table, k, v)
    return table


def test_quickstart_loads_and_resolves_every_default():
    exp = load_experiment(QUICKSTART)
    cfg = exp.to_config()
    assert cfg["experiment"]["seed"] == 20261130
    pol = cfg["policies"]["half-life-180-floor"]
    assert pol["decay"] == {"kind": "half-life-floor", "clock": "created",
                            "half_life_days": 180, "floor": 0.35}
    assert pol["candidates"] == 50
    bug = cfg["policies"]["bug-5pct-per-day"]
    assert bug["decay"]["rate"] == 0.05 and bug["packer"]["kind"] == "top-k-cutoff"
    # the workload table is complete: every knob has a value
    assert cfg["workload"]["horizon_days"] == 365


def test_resolved_config_round_trips_through_toml(tmp_path):
    exp = load_experiment(QUICKSTART)
    text = dumps_toml(exp.to_config())
    again = experiment_from_dict(tomllib.loads(text))
    assert again.to_config() == exp.to_config()
    assert again.hash8() == exp.hash8()


def test_experiment_settings_hold_the_engine_settings():
    # one [experiment] table, one object: every engine setting is a field of
    # ExperimentSettings, with the engine's default
    sim_fields = {f.name: f.default for f in dataclasses.fields(SimSettings)}
    exp_fields = {f.name: f.default for f in dataclasses.fields(ExperimentSettings)}
    assert sim_fields.items() <= exp_fields.items()
    s = ExperimentSettings(candidates=7, feedback_mode="per-query")
    assert s.sim == SimSettings(candidates=7, feedback_mode="per-query")
    assert dataclasses.replace(s, candidates=9).sim.candidates == 9
    with pytest.raises(ConfigError, match=r"^experiment\.candidates: The 'candidates' "
                                          "parameter of SimSettings must be"):
        ExperimentSettings.from_table({"candidates": 0})


def test_set_overrides_use_the_dotted_keys():
    exp = load_experiment(QUICKSTART, ["policies.half-life-180-floor.decay.floor=0.2",
                                       "experiment.replicates=2"])
    assert exp.policies["half-life-180-floor"].decay.floor == 0.2
    assert exp.settings.replicates == 2


@pytest.mark.parametrize("key", ['policies."half-life-180-floor".decay.floor',
                                 "policies.'half-life-180-floor'.decay.floor",
                                 'policies.half-life-180-floor."decay".floor'])
def test_set_overrides_read_quoted_parts_as_toml_does(key):
    """A quoted part names the same table as the bare one (TOML's reading):
    it used to keep its quotes and find no policy '"half-life-180-floor"'."""
    exp = load_experiment(QUICKSTART, [f"{key}=0.2"])
    assert exp.policies["half-life-180-floor"].decay.floor == 0.2


def test_a_quoted_preset_override_is_a_preset_override():
    exp = load_experiment(QUICKSTART, ['policies."no-decay".preset=hivemind'])
    assert exp.policies["no-decay"].to_config() == load_experiment(
        QUICKSTART, ["policies.no-decay.preset=hivemind"]).policies["no-decay"].to_config()


def test_override_of_a_preset_parameter_keeps_the_preset_kind():
    exp = load_experiment(QUICKSTART, ["policies.bug-5pct-per-day.decay.rate=0.1"])
    decay = exp.policies["bug-5pct-per-day"].decay
    assert decay.name == "per-day" and decay.rate == 0.1


@pytest.mark.parametrize("text, key, value", [
    ("a.b=1", "a.b", 1), ("a=0.5", "a", 0.5), ("a=true", "a", True),
    ("a=skip-fill", "a", "skip-fill"), ('a="x y"', "a", "x y"), ("a=[1, 2]", "a", [1, 2]),
])
def test_parse_override(text, key, value):
    assert parse_override(text) == (key, value)


@pytest.mark.parametrize("bad", ["novalue", "=3", "a..b=1", "a=(1", "a=1 2", 'a."b=1', "a.''=1"])
def test_parse_override_refuses(bad):
    with pytest.raises(ConfigError):
        parse_override(bad)


@pytest.mark.parametrize("override, needle", [
    ({"experiment.replicats": 2}, "experiment.replicats: unknown key (did you mean 'replicates'?)"),
    ({"polices": {}}, "polices: unknown key (did you mean 'policies'?)"),
    ({"policies.sim.decay": {"kind": "half-life", "half_life_days": -1}},
     "policies.sim.decay: The 'half_life_days' parameter of HalfLife must be a float > 0. "
     "Got -1 instead."),
    ({"policies.sim.decay": {"kind": "half-life-floor", "floor": 1.0}}, "'floor' parameter"),
    ({"policies.sim.decay": {"kind": "half-life", "half_life_days": float("nan")}},
     "half_life_days"),
    ({"policies.sim.decay": "no-such-decay"}, "policies.sim.decay.kind: unknown decay"),
    ({"policies.sim.preset": "hivemnd"}, "unknown preset 'hivemnd'"),
    ({"policies.sim.packer": {"kind": "skip-fill", "budget": 3}},
     "policies.sim.packer.budget: unknown parameter"),
    ({"experiment.replicates": 0}, "experiment.replicates"),
    ({"experiment.budget_tokens": 1.5}, "experiment.budget_tokens"),
    ({"experiment.feedback_mode": "sometimes"}, "experiment.feedback_mode"),
    ({"experiment.baseline": "nope"}, "experiment.baseline"),
    ({"workload": {"source": ""}}, "workload.source"),
    ({"workload.source": "x"}, "takes no generator knobs"),
    ({"grid.experiment.budget_tokens": []}, "grid"),
    ({"experiment.budgets": [100, 100]}, "experiment.budgets: The 'budgets' parameter of "
     "ExperimentSettings must be a list of distinct budgets"),
])
def test_bad_configs_give_one_clear_line(override, needle):
    table = minimal()
    for k, v in override.items():
        apply_override(table, k, v)
    with pytest.raises(ConfigError) as info:
        experiment_from_dict(table)
    msg = str(info.value)
    assert needle in msg
    assert "\n" not in msg


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such experiment file"):
        load_experiment(tmp_path / "missing.toml")
    empty = tmp_path / "empty.toml"
    empty.write_text("  \n")
    with pytest.raises(ConfigError, match="empty"):
        load_experiment(empty)
    broken = tmp_path / "broken.toml"
    broken.write_text("[experiment\nseed = 1\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_experiment(broken)
    nopol = tmp_path / "nopol.toml"
    nopol.write_text("[experiment]\nseed = 1\n")
    with pytest.raises(ConfigError, match="at least one"):
        load_experiment(nopol)


def test_policy_names_cannot_contain_dots(tmp_path):
    f = tmp_path / "dots.toml"
    f.write_text('[policies."a.b"]\npreset = "similarity-only"\n')
    with pytest.raises(ConfigError, match="policy names"):
        load_experiment(f)


def test_grid_expands_into_one_experiment_per_combination():
    table = minimal()
    table["grid"] = {"experiment.budget_tokens": [500, 1500],
                     "policies.sim.candidates": [10, 20, 30]}
    exp = experiment_from_dict(table)
    runs = exp.expand()
    assert len(runs) == 6
    combos = {(r.sim.budget_tokens, r.policies["sim"].candidates) for r in runs}
    assert combos == {(b, c) for b in (500, 1500) for c in (10, 20, 30)}
    assert len({r.name for r in runs}) == 6


def _grid_file(tmp_path, grid):
    f = tmp_path / "g.toml"
    f.write_text(dumps_toml({**minimal(), "grid": grid,
                             "advise": {"current": "sim", "trials": 2}}))
    return f


@pytest.mark.parametrize("command", ["audit", "optimum", "advise", "stream"])
def test_a_command_on_one_experiment_refuses_a_grid_of_several_runs(tmp_path, capsys, command):
    """audit, optimum, advise and stream generate worked on the file without
    its grid, in silence: a workload the grid never runs."""
    from memsim.cli import main
    f = _grid_file(tmp_path, {"workload.notes_per_day": [2.0, 50.0]})
    argv = {"audit": ["audit", str(f), "--no-params"], "optimum": ["optimum", str(f)],
            "advise": ["advise", str(f), "--out", str(tmp_path / "a")],
            "stream": ["stream", "generate", str(f), "--out", str(tmp_path / "s")]}[command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "grid: 2 runs" in err and '"workload.notes_per_day"' in err and str(f) in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "s").exists()


def test_stream_generate_writes_a_narrowed_grids_run_or_the_stream_a_grid_shares(tmp_path):
    from memsim.cli import main
    from memsim.data.stream import read_stream
    f = _grid_file(tmp_path, {"workload.notes_per_day": [2.0, 50.0]})
    assert main(["stream", "generate", str(f), "--out", str(tmp_path / "s50"),
                 "--set", 'grid."workload.notes_per_day"=[50.0]']) == 0
    s50 = read_stream(tmp_path / "s50")
    assert s50.meta["config"]["notes_per_day"] == 50.0
    # a grid over the policies only: every run has the file's workload and seed
    (tmp_path / "p").mkdir()
    g = _grid_file(tmp_path / "p", {"policies.sim.candidates": [10, 20]})
    assert main(["stream", "generate", str(g), "--out", str(tmp_path / "sp")]) == 0
    plain = experiment_from_dict(minimal())
    want = plain.workload.generate(_replicate_seq(plain.seed))
    got = read_stream(tmp_path / "sp")
    assert got.notes[["note_id", "created_at", "tokens"]].equals(
        want.notes[["note_id", "created_at", "tokens"]])
    assert len(s50.notes) > 2 * len(want.notes)  # 50 notes a day against the default 20


def _replicate_seq(seed):
    from memsim.core.rng import child_seq, seed_sequence
    return child_seq(seed_sequence(seed), "replicate", 0, "workload")


def test_a_set_of_a_key_the_grid_sets_is_refused_not_dropped(tmp_path):
    # the grid sets its values in every run: the --set would change nothing
    f = tmp_path / "g.toml"
    f.write_text(dumps_toml({**minimal(), "grid": {"experiment.budget_tokens": [500, 1500],
                                                   "policies.sim.decay": [{"kind": "none"}]}}))
    for override, grid_key in [("experiment.budget_tokens=800", "experiment.budget_tokens"),
                               ("policies.sim.decay.kind=none", "policies.sim.decay"),
                               ("policies.sim={preset = 'similarity-only'}", "policies.sim.decay"),
                               ("experiment . budget_tokens = 800", "experiment.budget_tokens")]:
        with pytest.raises(ConfigError) as info:
            load_experiment(f, overrides=[override])
        msg = info.value.errors[0]
        assert msg.startswith(f"{f}: --set ") and f"{grid_key} is also in [grid]" in msg, msg
    # the grid's own values, and other keys, can be set
    exp = load_experiment(f, overrides=['grid."experiment.budget_tokens"=[800]',
                                        "experiment.replicates=2"])
    assert [r.sim.budget_tokens for r in exp.expand()] == [800]


def test_a_key_set_twice_credits_the_later_set(tmp_path):
    f = tmp_path / "one.toml"
    f.write_text(dumps_toml(minimal()))
    with pytest.raises(ConfigError) as info:
        load_experiment(f, overrides=["experiment.replicates=1", "experiment.replicates=2.0"])
    assert info.value.errors[0].endswith("Got 2.0 instead. (from --set experiment.replicates=2.0)")


def test_a_set_that_names_no_policy_names_the_file(tmp_path):
    f = tmp_path / "one.toml"
    f.write_text(dumps_toml(minimal()))
    with pytest.raises(ConfigError) as info:
        load_experiment(f, overrides=["policies.floor.decay.floor=0.2"])
    assert info.value.errors[0].startswith(f"{f}: --set policies.floor.decay.floor: no policy "
                                           "'floor'")


def test_grid_run_names_stay_distinct_and_say_which_key():
    # keys that end alike are told apart by their last distinct parts
    table = minimal()
    table["policies"]["b"] = {"preset": "similarity-only"}
    table["grid"] = {"policies.sim.candidates": [10, 20], "policies.b.candidates": [10, 20]}
    names = [r.name for r in experiment_from_dict(table).expand()]
    assert names[1] == "t_sim.candidates-10_b.candidates-20", names
    # a long experiment name is cut before the labels, and a cut name ends
    # with a hash of the whole: never two runs of one name
    table = minimal()
    table["experiment"]["name"] = "x" * 110
    table["grid"] = {"experiment.budget_tokens": [1000, 1001],
                     "policies.sim.candidates": [10, 20]}
    names = [r.name for r in experiment_from_dict(table).expand()]
    assert len(set(names)) == 4 and all(len(n) == 120 for n in names), names
    assert "_budget_tokens-1000_candidates-20-" in names[1]


def test_a_grid_key_into_a_missing_policy_says_grid_once(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text(dumps_toml({**minimal(), "grid": {"policies.nope.decay.floor": [0.2]}}))
    with pytest.raises(ConfigError) as info:
        load_experiment(f).expand()
    assert info.value.errors == [f"{f}: grid: policies.nope.decay.floor: no policy 'nope' "
                                 "(policies: sim)"]


def test_every_bad_grid_value_is_reported_at_once(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text(dumps_toml({**minimal(), "grid": {"experiment.budget_tokens": [500, -1],
                                                   "policies.sim.candidates": [10, 0]}}))
    with pytest.raises(ConfigError) as info:
        load_experiment(f).expand()
    got = info.value.errors
    assert len(got) == 2 and all(m.startswith(f"{f}: grid: ") for m in got), got
    assert any("budget_tokens" in m and "Got -1" in m for m in got)
    assert any("candidates" in m and "Got 0" in m for m in got)


def test_a_grid_value_given_twice_is_refused():
    table = minimal()
    table["grid"] = {"experiment.budget_tokens": [500, 1500, 500]}
    with pytest.raises(ConfigError, match=r"grid\.experiment\.budget_tokens: 500 is given twice"):
        experiment_from_dict(table)


@pytest.mark.parametrize("key, values, said", [
    # a float knob: 500 is 500.0 once resolved, the same run twice
    ("policies.sim.decay.half_life_days", [30, 90, 30.0], "30.0 equals 30, given before"),
    ("experiment.budget_tokens", [500, 1500, True, 1], "1 equals True, given before"),
    ("policies.sim.decay.kind", ["half-life", "half-life"], "'half-life' is given twice"),
])
def test_grid_values_equal_as_values_are_refused(key, values, said):
    table = minimal(**{"policies.sim.decay": {"kind": "half-life", "half_life_days": 30.0}})
    table["grid"] = {key: values}
    with pytest.raises(ConfigError, match=re.escape(f"grid.{key}: {said}")):
        experiment_from_dict(table)


def test_a_whole_number_for_a_float_parameter_is_that_float():
    # 180 and 180.0: one resolved config, one hash (and messages still show
    # the value as written)
    exps = [experiment_from_dict(minimal(**{"policies.sim.decay": {
        "kind": "half-life-floor", "half_life_days": hl, "floor": fl}}))
        for hl, fl in ((180, 0), (180.0, 0.0))]
    assert exps[0].to_config() == exps[1].to_config()
    assert exps[0].hash8() == exps[1].hash8()
    assert exps[0].policies["sim"].decay.half_life_days.__class__ is float
    assert "half_life_days = 180.0" in dumps_toml(exps[0].to_config())
    with pytest.raises(ConfigError, match=r"Got -1 instead"):
        experiment_from_dict(minimal(**{"policies.sim.decay": {"kind": "half-life",
                                                               "half_life_days": -1}}))


def test_grid_key_must_exist():
    table = minimal()
    table["grid"] = {"experiment.budget_tokenz": [1, 2]}
    with pytest.raises(ConfigError, match="budget_tokenz"):
        experiment_from_dict(table)


def _preset_policy(preset: str, **slots) -> dict:
    """The resolved table of a policy written as ``preset`` plus ``slots``."""
    return resolve_policy({"preset": preset, **slots}, "p").to_config()


def test_a_grid_over_a_preset_runs_each_preset_under_the_written_keys():
    table = minimal()
    table["policies"] = {"a": {"preset": "hivemind-2025-bug", "packer": "skip-fill"}}
    # the slot key first: the preset must not undo it
    table["grid"] = {"policies.a.candidates": [20],
                     "policies.a.preset": ["hivemind", "hivemind-2025-bug"]}
    runs = experiment_from_dict(table).expand()
    got = [r.policies["a"].to_config() for r in runs]
    assert got == [_preset_policy(p, packer="skip-fill", candidates=20)
                   for p in ("hivemind", "hivemind-2025-bug")]
    assert got[0]["decay"] != got[1]["decay"]


def test_a_preset_override_starts_from_the_written_table():
    table = minimal()
    table["policies"] = {"a": {"preset": "hivemind-2025-bug", "packer": "skip-fill"}}
    exp = experiment_from_dict(table).with_overrides({"policies.a.preset": "hivemind"})
    assert exp.policies["a"].to_config() == _preset_policy("hivemind", packer="skip-fill")


def test_a_grid_over_the_experiments_candidates_reaches_the_policies_that_take_it(tmp_path):
    """A policy without candidates of its own takes the experiment's top-C in
    every combination of a grid (and an override) over it; one with its own
    keeps it. On a resolved config.toml, where every policy spells it out,
    the override is refused, not ignored."""
    table = minimal()
    table["policies"] = {"a": {"preset": "similarity-only"},
                         "b": {"preset": "random", "candidates": 20}}
    table["grid"] = {"experiment.candidates": [10, 40]}
    runs = experiment_from_dict(table).expand()
    took = [(r.settings.candidates, r.to_config()["policies"]["a"]["candidates"],
             r.to_config()["policies"]["b"]["candidates"]) for r in runs]
    assert took == [(10, 10, 20), (40, 40, 20)]
    assert runs[0].with_overrides({"experiment.candidates": 7}).to_config()[
        "policies"]["a"]["candidates"] == 7
    resolved = tmp_path / "config.toml"
    resolved.write_text(dumps_toml(runs[0].to_config()))
    with pytest.raises(ConfigError, match="every policy sets its own candidates"):
        load_experiment(resolved, ["experiment.candidates=30"])


def test_a_preset_set_on_a_resolved_config_is_refused_not_ignored(tmp_path):
    table = minimal()
    table["policies"] = {"a": {"preset": "hivemind-2025-bug"}}
    resolved = tmp_path / "config.toml"
    resolved.write_text(dumps_toml(experiment_from_dict(table).to_config()))
    with pytest.raises(ConfigError) as info:
        load_experiment(resolved, ["policies.a.preset=hivemind"])
    assert info.value.errors == [
        f"{resolved}: --set policies.a.preset: policies.a spells out every slot the preset fills (as a "
        "resolved config.toml does), so preset 'hivemind' would change nothing; replace the "
        "whole table instead: --set 'policies.a={preset = \"hivemind\"}'"]
    # the way the message gives
    exp = load_experiment(resolved, ['policies.a={preset = "hivemind"}'])
    assert exp.policies["a"].to_config() == _preset_policy("hivemind")
    # a grid over a resolved table's preset is refused too
    grid = tmp_path / "grid.toml"
    grid.write_text(resolved.read_text()
                    + '[grid]\n"policies.a.preset" = ["hivemind", "hivemind-2025-bug"]\n')
    with pytest.raises(ConfigError, match="preset 'hivemind' would change nothing"):
        load_experiment(grid)


def test_numpy_scalars_hash_as_the_numbers_config_toml_writes():
    """A config given with numpy scalars (``np.int64(800)``) is the one its
    ``config.toml`` re-runs from: the same hash (before: hashed as the text
    "800", another identity for the same run and sweep)."""
    import numpy as np
    import tomllib

    from memsim.runs.config import dumps_toml

    plain = experiment_from_dict(minimal(**{"experiment.budget_tokens": 800,
                                            "workload.notes_per_day": 3.5}))
    numpy = experiment_from_dict(minimal(**{"experiment.budget_tokens": np.int64(800),
                                            "workload.notes_per_day": np.float32(3.5)}))
    again = experiment_from_dict(tomllib.loads(dumps_toml(numpy.to_config())))
    assert plain.hash8() == numpy.hash8() == again.hash8()
    other = experiment_from_dict(minimal(**{"experiment.budget_tokens": np.int64(801),
                                            "workload.notes_per_day": 3.5}))
    assert other.hash8() != plain.hash8()
