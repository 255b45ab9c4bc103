"""A ``[sweep.params]`` key spelled twice (quoted and dotted), and ``--set``
keys with quoted parts: refused or applied as TOML reads them, before any
trial runs."""

from __future__ import annotations

import pytest

from memsim.cli import main
from memsim.core.errors import ConfigError
from memsim.core.params import apply_override, split_key
from memsim.runs.config import load_experiment
from memsim.sweep.space import ParamSpec, SweepSpec

FLOOR = "policies.hivemind.decay.task_floor"

HEAD = """\
[experiment]
name = "twice"
seed = 7
replicates = 2
budget_tokens = 800
candidates = 30

[workload]
horizon_days = 20
backfill_days = 10
notes_per_day = 4.0
queries_per_day = 2.0

[policies.hivemind]
preset = "hivemind"

[sweep]
trials = 4
objectives = [{ metric = "utility", direction = "maximize" }]
"""

QUOTED = f'"{FLOOR}" = {{ type = "float", low = 0.0, high = 0.9 }}\n'
DOTTED = f'{FLOOR} = {{ type = "float", low = 0.0, high = 0.8 }}\n'
HALF_LIFE = ('"policies.hivemind.decay.task_half_life_days" = '
             '{ type = "float", low = 7.0, high = 720.0, log = true }\n')


def _write(tmp_path, params: str, extra: str = ""):
    path = tmp_path / "exp.toml"
    path.write_text(HEAD + "\n[sweep.params]\n" + params + extra)
    return path


def _sweep_error(capsys, tmp_path, path, *sets):
    """Run ``memsim sweep`` and return its one error line (no folder made)."""
    out = tmp_path / "out"
    args = ["sweep", str(path), "--out", str(out)]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert not out.exists()  # refused before any trial
    return err[0]


TWICE = (f'sweep.params."{FLOOR}": given twice, quoted ("{FLOOR}") and dotted ({FLOOR}); '
         "both name this one key, so write it once")


def test_quoted_and_dotted_in_the_file_refused(tmp_path, capsys):
    path = _write(tmp_path, HALF_LIFE + QUOTED + "\n" + DOTTED)
    line = _sweep_error(capsys, tmp_path, path)
    assert line == f"memsim: error: {path}: {TWICE}"
    assert "(from --set" not in line


def test_dotted_set_on_a_quoted_key_refused_and_attributed(tmp_path, capsys):
    path = _write(tmp_path, HALF_LIFE + QUOTED)
    line = _sweep_error(capsys, tmp_path, path,
                        f'sweep.params.{FLOOR}={{type="float",low=0.0,high=0.8}}')
    assert line.startswith(f"memsim: error: {path}: {TWICE} (from --set sweep.params.{FLOOR}=")


def test_spec_parsing_refuses_twice_without_an_experiment():
    table = {"params": {FLOOR: {"type": "float", "low": 0.0, "high": 0.9},
                        "policies": {"hivemind": {"decay": {"task_floor": {
                            "type": "float", "low": 0.0, "high": 0.8}}}}}}
    with pytest.raises(ConfigError, match="given twice, quoted .* and dotted"):
        SweepSpec.from_config(table)


def test_partly_quoted_spelling_refused():
    table = {"params": {"policies.hivemind": {"decay": {"task_floor": {
        "type": "float", "low": 0.0, "high": 0.9}}},
        "policies": {"hivemind": {"decay.task_floor": {
            "type": "float", "low": 0.0, "high": 0.8}}}}}
    with pytest.raises(ConfigError, match=r'given twice, partly quoted \("policies.hivemind"'
                                          r'.decay.task_floor\) and partly quoted'):
        SweepSpec.from_config(table)


def test_spec_built_in_python_refuses_a_key_twice():
    p = ParamSpec(key=FLOOR, type="float", low=0.0, high=0.9)
    with pytest.raises(ConfigError, match="given twice"):
        SweepSpec(params=(p, p), objectives=())


def test_variant_key_twice_refused(tmp_path, capsys):
    path = _write(tmp_path, HALF_LIFE, """
[sweep.robustness]
variants = [{ name = "v", "workload.notes_per_day" = 5.0, workload = { notes_per_day = 6.0 } }]
""")
    line = _sweep_error(capsys, tmp_path, path)
    assert ("sweep.robustness.variants[0].workload.notes_per_day: given twice, quoted "
            '("workload.notes_per_day") and dotted (workload.notes_per_day)') in line


def test_quoted_set_key_reaches_the_quoted_entry(tmp_path):
    path = _write(tmp_path, HALF_LIFE + QUOTED)
    exp = load_experiment(path, [f'sweep.params."{FLOOR}".high=0.8'])
    spec = SweepSpec.from_config(exp.sweep, exp)
    assert spec.keys == ["policies.hivemind.decay.task_half_life_days", FLOOR]
    assert spec.params[1].high == 0.8


def test_quoted_set_key_error_quoted_once_and_attributed(tmp_path, capsys):
    path = _write(tmp_path, HALF_LIFE)  # no task_floor entry: the --set makes half of one
    line = _sweep_error(capsys, tmp_path, path, f'sweep.params."{FLOOR}".high=0.8')
    assert f'sweep.params."{FLOOR}": missing type' in line
    assert '""' not in line
    assert line.endswith(f'(from --set sweep.params."{FLOOR}".high=0.8)')


def test_quoted_set_key_bad_range_attributed(tmp_path, capsys):
    path = _write(tmp_path, HALF_LIFE + QUOTED)
    line = _sweep_error(capsys, tmp_path, path, f'sweep.params."{FLOOR}".high=1.5')
    assert line.startswith(f'memsim: error: {path}: sweep.params."{FLOOR}": the value 1.5')
    assert line.endswith(f'(from --set sweep.params."{FLOOR}".high=1.5)')


def test_split_key_reads_toml_quoting():
    assert split_key("a.b.c") == ["a", "b", "c"]
    assert split_key('sweep.params."a.b".high') == ["sweep", "params", "a.b", "high"]
    assert split_key("x.'a.b'") == ["x", "a.b"]
    table: dict = {}
    apply_override(table, 'sweep.params."a.b".high', 1)
    assert table == {"sweep": {"params": {"a.b": {"high": 1}}}}
    with pytest.raises(ConfigError, match="not a dotted key"):
        split_key('sweep.params."a.b.high')
