"""The Python API's answer to a caller's mistake is a MemsimError naming the
argument, never a TypeError from pathlib or an AttributeError from inside,
and never a silently empty result."""

from __future__ import annotations

from pathlib import Path

import pytest

import memsim
from memsim.core.errors import ConfigError
from memsim.policies import resolve_policy

from .test_failures import tiny

QUICKSTART = Path(__file__).resolve().parents[1] / "experiments" / "quickstart.toml"


@pytest.mark.parametrize("call, said", [
    (lambda: memsim.run_experiment({"experiment": {}}, out=None), "experiment_from_dict"),
    (lambda: memsim.advise({"x": 1}), "experiment_from_dict"),
    (lambda: memsim.load_experiment(3), "load_experiment(path): expected a path"),
    (lambda: memsim.load_run(None), "load_run(path): expected a path"),
    (lambda: memsim.build_report(3.5), "build_report(run_dir): expected a path"),
    (lambda: memsim.load_sweep(None), "load_sweep(run_dir): expected a path"),
    (lambda: memsim.run_many(memsim.load_experiment(QUICKSTART), out="r"),
     "expected a list of experiments"),
    (lambda: memsim.run_many([QUICKSTART], out=None), "out=None would keep no result"),
    (lambda: memsim.run_experiment(QUICKSTART, out=None, progress=5),
     "run_experiment(progress=): expected a function"),
    (lambda: memsim.advise(QUICKSTART, progress="x"), "advise(progress=): expected a function"),
    (lambda: resolve_policy(3, "p"), "p: expected a policy table or a preset name"),
    # a FileExistsError after the work before
    (lambda: memsim.advise(QUICKSTART, out=QUICKSTART), "quickstart.toml: not a folder; give a folder"),
    (lambda: memsim.advise(QUICKSTART, out=QUICKSTART / "x"), "quickstart.toml is a file"),
])
def test_a_wrong_argument_is_a_memsim_error_naming_it(call, said):
    with pytest.raises(ConfigError) as info:
        call()
    assert said in str(info.value)
    assert "\n" not in str(info.value)


def test_a_preset_name_is_a_policy_table():
    assert resolve_policy("hivemind", "p") == resolve_policy({"preset": "hivemind"}, "p")


def test_run_many_takes_the_files_of_experiments(tmp_path):
    paths = memsim.run_many([tiny(tmp_path)], out=tmp_path / "r", report=False)
    assert len(paths) == 1 and (paths[0] / "summary.csv").is_file()


def test_a_metric_not_in_the_summary_is_named_with_the_nearest(tmp_path):
    run = memsim.run_experiment(tiny(tmp_path), out=None, report=False)
    assert len(run.metric("recall")) > 0
    with pytest.raises(ConfigError, match=r"metric 'recal': not in the summary \(did you mean "
                                          r"'recall'\?\)"):
        run.metric("recal")


@pytest.mark.parametrize("decay, said", [
    ({"half_life_days": 3}, "keeps the default decay 'none', which has no parameter "
                            "'half_life_days'; set decay.kind to one that has it: half-life"),
    ({"halflife": 3}, "decay.halflife: unknown parameter of decay 'none'"),
])
def test_a_slot_without_kind_names_the_kind_it_kept(decay, said):
    """A decay of parameters alone keeps the default kind ('none'): the
    message used to blame the parameter, never the missing kind."""
    with pytest.raises(ConfigError) as info:
        memsim.experiment_from_dict({"policies": {"a": {"decay": decay}}})
    assert said in str(info.value)
