"""Config validation reports every mistake at once, and names the --set
override that caused one."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memsim.runs.config import apply_override, experiment_from_dict, load_experiment
from memsim.core.errors import ConfigError, ParameterError

ROOT = Path(__file__).resolve().parents[1]

GOOD = """\
[experiment]
name = "e"
seed = 1
replicates = 1

[workload]
horizon_days = 10
backfill_days = 5

[policies.a]
decay = "half-life-floor"

[policies.b]
preset = "similarity-only"
"""

#: three independent mistakes: a value out of range, an unknown knob, an unknown preset
THREE = """\
[experiment]
name = "e"
seed = 1
replicates = 0

[workload]
horizon_days = 10
notes_per_dya = 3

[policies.a]
preset = "hivemnd"

[policies.b]
preset = "similarity-only"
"""


def write(tmp_path: Path, text: str, name: str = "exp.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def errors_of(fn, *args, **kwargs) -> list[str]:
    with pytest.raises(ConfigError) as info:
        fn(*args, **kwargs)
    return info.value.errors


def test_three_independent_mistakes_give_three_errors_in_one_run(tmp_path):
    path = write(tmp_path, THREE)
    errors = errors_of(load_experiment, path)
    assert len(errors) == 3, errors
    # each names the file and its own key, in the order of the file's parts
    assert errors[0].startswith(f"{path}: experiment.replicates: The 'replicates' parameter")
    assert errors[1].startswith(f"{path}: workload.notes_per_dya: unknown key (did you mean "
                                "'notes_per_day'?)")
    assert errors[2].startswith(f"{path}: policies.a.preset: unknown preset 'hivemnd'")
    # str() is the count and every message
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    text = str(info.value)
    assert text.startswith("3 errors:\n") and all(e in text for e in errors)


def test_one_mistake_keeps_its_single_message_and_type():
    table = {"policies": {"a": {"decay": {"kind": "half-life-floor", "floor": 1.5}}}}
    with pytest.raises(ParameterError) as info:
        experiment_from_dict(table)
    assert info.value.errors == [str(info.value)]
    assert str(info.value).startswith("policies.a.decay: The 'floor' parameter")


def test_each_slot_of_a_policy_is_checked():
    table = {"policies": {"a": {"decay": {"kind": "half-life-floor", "floor": 1.5},
                                "packer": "skip-fil"}}}
    errors = errors_of(experiment_from_dict, table)
    assert len(errors) == 2, errors
    assert errors[0].startswith("policies.a.decay: The 'floor' parameter")
    assert errors[1].startswith("policies.a.packer.kind: unknown packer 'skip-fil'")


@pytest.mark.parametrize("kind", [["x"], {"a": 1}, 3])
def test_a_component_kind_that_is_not_a_string_is_a_config_error(kind):
    """A ``kind`` that is a list or a table is refused as an unknown kind, not
    looked up in the registry (a TypeError: unhashable)."""
    table = {"policies": {"a": {"decay": {"kind": kind}}}}
    errors = errors_of(experiment_from_dict, table)
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"policies.a.decay.kind: unknown decay {kind!r}; allowed: ")


def test_a_component_kind_that_is_not_a_string_is_one_line_on_the_command_line(tmp_path):
    path = write(tmp_path, '[workload]\nhorizon_days = 2\n[policies.a]\n'
                           'decay = { kind = ["x"] }\n')
    out = subprocess.run([sys.executable, "-m", "memsim.cli", "run", str(path), "--out",
                          str(tmp_path / "r"), "-q"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"memsim: error: {path}: policies.a.decay.kind: unknown decay")
    assert "Traceback" not in out.stderr


def test_a_dependent_check_does_not_repeat_a_mistake():
    # the grid's first combination would fail on the same bad policy: only the
    # policy's own error is reported
    table = {"policies": {"a": {"decay": {"kind": "half-life-floor", "floor": 1.5}}},
             "grid": {"experiment.budget_tokens": [500, 1000]}}
    errors = errors_of(experiment_from_dict, table)
    assert len(errors) == 1 and errors[0].startswith("policies.a.decay:"), errors
    # out-of-range knobs: no follow-on "the stream would take ..." error
    table = {"workload": {"notes_per_day": -1.0},
             "policies": {"a": {"preset": "similarity-only"}}}
    errors = errors_of(experiment_from_dict, table)
    assert len(errors) == 1 and errors[0].startswith("workload.notes_per_day:"), errors


def test_the_baseline_is_checked_against_the_names_even_when_a_policy_failed():
    table = {"experiment": {"baseline": "b"},
             "policies": {"a": {"preset": "similarity-only"}, "b": {"preset": "nope"}}}
    errors = errors_of(experiment_from_dict, table)
    assert len(errors) == 1 and "unknown preset 'nope'" in errors[0], errors
    table["experiment"]["baseline"] = "c"
    errors = errors_of(experiment_from_dict, table)
    assert len(errors) == 2 and errors[1].startswith("experiment.baseline: 'c'"), errors


def test_no_policies_is_one_error_not_a_baseline_error_too(tmp_path):
    """Before: the baseline was then checked against no policy names, a
    second line for the same mistake (ending in an empty list)."""
    path = write(tmp_path, GOOD.replace('name = "e"', 'name = "e"\nbaseline = "a"'))
    errors = errors_of(load_experiment, path, ["policies={}"])
    assert errors == [f"{path}: policies: an experiment needs at least one [policies.NAME] "
                      "table (from --set policies={})"], errors


@pytest.mark.parametrize("override", ['workload.source="elsewhere"',
                                      "workload.horizon_days=3"])
def test_a_source_mixed_with_knobs_names_the_set_that_mixed_them(tmp_path, override):
    """The mistake is either key (a source, or the knobs beside it), so the
    message names the table and the knobs, and the override that set
    either (before: only the knob's, never the source's)."""
    text = GOOD if "source" in override else \
        GOOD.replace("horizon_days = 10\nbackfill_days = 5", 'source = "elsewhere"')
    errors = errors_of(load_experiment, write(tmp_path, text), [override])
    knobs = "horizon_days, backfill_days" if "source" in override else "horizon_days"
    assert errors == [f"{tmp_path / 'exp.toml'}: workload: a workload with 'source' replays a "
                      f"stream and takes no generator knobs ({knobs}): give one or the other "
                      f"(from --set {override})"], errors


@pytest.mark.parametrize("name", [1, (1, 2)])
def test_a_policy_name_that_is_not_text_is_a_config_error(name):
    """A table built in Python may have any key (before: a raw TypeError)."""
    table = {"workload": {"horizon_days": 5}, "policies": {name: {"preset": "hivemind"}}}
    errors = errors_of(experiment_from_dict, table)
    assert errors == [f"policies.{name}: a policy name is text, got {type(name).__name__} "
                      f"{name!r}"], errors


def test_a_failing_plugin_stops_at_once():
    table = {"experiment": {"plugins": ["memsim_no_such_plugin_module"]},
             "policies": {"a": {"decay": "from-the-plugin"}}}
    errors = errors_of(experiment_from_dict, table)
    # the unknown decay would only repeat what the missing plugin means
    assert len(errors) == 1 and errors[0].startswith("experiment.plugins:"), errors


def test_unknown_top_level_keys_are_all_reported():
    table = {"expriment": {}, "workloads": {}, "policies": {"a": {"preset": "random"}}}
    errors = errors_of(experiment_from_dict, table)
    assert [e.split(":")[0] for e in errors] == ["expriment", "workloads"]


def test_a_set_error_is_attributed_and_a_file_error_is_not(tmp_path):
    text = GOOD.replace("horizon_days = 10", "horizon_days = 10\nnotes_per_dya = 3")
    path = write(tmp_path, text)
    errors = errors_of(load_experiment, path, ["policies.a.decay.floor=1.5",
                                               "experiment.replicates=2"])
    assert len(errors) == 2, errors
    file_error, set_error = errors
    assert file_error.startswith(f"{path}: workload.notes_per_dya: unknown key")
    assert "--set" not in file_error
    assert set_error.startswith(f"{path}: policies.a.decay: The 'floor' parameter")
    # only the override that set the key is named, not experiment.replicates
    assert set_error.endswith(" (from --set policies.a.decay.floor=1.5)")


@pytest.mark.parametrize("override, attributed", [
    # the override set a table above the key at fault
    ('policies.a.decay={ kind = "half-life-floor", floor = 2.0 }', True),
    # ... or a key below the table at fault
    ("policies.a.decay.floor=2.0", True),
    # another parameter of the same component: the file's mistake
    ("policies.a.decay.half_life_days=30", False),
])
def test_attribution_follows_the_key(tmp_path, override, attributed):
    text = GOOD.replace('decay = "half-life-floor"',
                        'decay = { kind = "half-life-floor", floor = 2.0 }')
    errors = errors_of(load_experiment, write(tmp_path, text), [override])
    assert len(errors) == 1, errors
    assert ("(from --set " in errors[0]) is attributed, errors[0]


def test_override_mistakes_are_reported_with_the_file_mistakes(tmp_path):
    path = write(tmp_path, THREE)
    errors = errors_of(load_experiment, path, ["policies.zz.decay.floor=0.2", "novalue"])
    # (each names the file, as the file's own mistakes do)
    assert errors[0] == f"{path}: --set policies.zz.decay.floor: no policy 'zz' (policies: a, b)"
    assert errors[1] == f"{path}: --set 'novalue': expected KEY=VALUE"
    assert len(errors) == 5, errors


def test_a_dict_of_overrides_is_attributed_too(tmp_path):
    errors = errors_of(load_experiment, write(tmp_path, GOOD), {"experiment.replicates": 0})
    assert errors[0].endswith("(from --set experiment.replicates=0)"), errors


def test_grid_errors_keep_their_prefix_per_message():
    table = {"policies": {"a": {"decay": "half-life-floor"}},
             "grid": {"policies.a.decay.floor": [1.5]}}
    errors = errors_of(experiment_from_dict, table)
    assert len(errors) == 1 and errors[0].startswith("grid: policies.a.decay:"), errors


def test_config_error_keeps_its_messages_when_copied():
    exc = ConfigError(errors=["a: one", "b: two"])
    assert str(exc) == "2 errors:\n  a: one\n  b: two"
    # deepcopy goes through __reduce__, as a worker process's error does
    again = copy.deepcopy(exc)
    assert again.errors == ["a: one", "b: two"] and str(again) == str(exc)
    assert ConfigError("x").errors == ["x"]
    assert exc.prefixed("f.toml: ").errors == ["f.toml: a: one", "f.toml: b: two"]
    with pytest.raises(TypeError):
        ConfigError(errors=[])


def test_the_cli_prints_one_line_per_error_and_exits_2(tmp_path):
    path = write(tmp_path, THREE)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-m", "memsim.cli", "run", str(path), "--out",
                          str(tmp_path / "out"), "--set", "experiment.seed=-1"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 3, res.stderr
    assert all(line.startswith(f"memsim: error: {path}: ") for line in lines)
    # [experiment] reports its first mistake, the one the override made: named
    assert "experiment.seed" in lines[0] and lines[0].endswith("(from --set experiment.seed=-1)")
    assert "notes_per_dya" in lines[1] and "unknown preset 'hivemnd'" in lines[2]
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_a_valid_file_with_overrides_still_loads(tmp_path):
    exp = load_experiment(write(tmp_path, GOOD), ["policies.a.decay.floor=0.5"])
    assert exp.policies["a"].decay.floor == 0.5


def test_apply_override_is_unchanged_for_a_valid_table():
    table = {"policies": {"a": {"decay": "half-life-floor"}}}
    apply_override(table, "policies.a.decay.floor", 0.2)
    assert experiment_from_dict(table).policies["a"].decay.floor == 0.2


def test_every_unknown_key_of_a_table_is_reported():
    table = {"experiment": {"sed": 1, "replicats": 2},
             "workload": {"horizon_dayz": 3, "notes_per_dya": 1.0},
             "policies": {"a": {"preset": "random"}}}
    errors = errors_of(experiment_from_dict, table)
    assert [e.split(":")[0] for e in errors] == [
        "experiment.sed", "experiment.replicats", "workload.horizon_dayz",
        "workload.notes_per_dya"]
    assert "did you mean 'replicates'?" in errors[1]


@pytest.mark.parametrize("command, override, key", [
    ("sweep", "sweep.trials=0", "sweep.trials"),
    ("advise", "advise.trials=0", "advise.trials"),
])
def test_sweep_and_advise_checks_name_the_set_too(tmp_path, command, override, key):
    name = "sweep_hivemind" if command == "sweep" else "advise"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-m", "memsim.cli", command,
                          str(ROOT / "experiments" / f"{name}.toml"), "--out",
                          str(tmp_path / "out"), "--set", override],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    # the file first, as every experiment-file mistake; the --set that set the key last
    where = ROOT / "experiments" / f"{name}.toml"
    assert len(lines) == 1 and lines[0].startswith(f"memsim: error: {where}: {key}: "), \
        res.stderr
    assert lines[0].endswith(f"(from --set {override})")


def test_attribute_overrides_leaves_other_keys_alone():
    from memsim.runs.config import attribute_overrides

    exc = ConfigError(errors=["sweep.trials: bad", "sweep.seed: bad"])
    out = attribute_overrides(exc, ["sweep.seed=-1"])
    assert out.errors == ["sweep.trials: bad", "sweep.seed: bad (from --set sweep.seed=-1)"]
    assert attribute_overrides(exc, {"sweep": {"trials": 0}}).errors[0].endswith(
        "(from --set sweep={ trials = 0 })")


def test_every_grid_combination_names_the_file_and_the_grid(tmp_path):
    path = write(tmp_path, GOOD + '\n[grid]\n"experiment.budget_tokens" = [500, -1]\n')
    exp = load_experiment(path)  # the first combination is valid
    errors = errors_of(exp.expand)
    assert errors == [f"{path}: grid: experiment.budget_tokens: The 'budget_tokens' parameter "
                      "of SimSettings must be an int >= 1. Got -1 instead."]
    # the same prefix as the first combination's, which loading checks
    first = write(tmp_path, GOOD + '\n[grid]\n"experiment.budget_tokens" = [-1, 500]\n',
                  "first.toml")
    assert errors_of(load_experiment, first) == [errors[0].replace(str(path), str(first))]


def test_a_bad_later_grid_combination_stops_the_runs_before_any_folder(tmp_path):
    from memsim.runs.runner import run_many
    path = write(tmp_path, GOOD + '\n[grid]\n"experiment.budget_tokens" = [500, -1]\n')
    errors = errors_of(run_many, [load_experiment(path)], out=tmp_path / "out", report=False)
    assert len(errors) == 1 and errors[0].startswith(f"{path}: grid: experiment.budget_tokens")
    assert not (tmp_path / "out").exists()
