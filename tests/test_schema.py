"""The JSON Schema of the experiment format: generated, shipped, and in
agreement with memsim's own validation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is a test dependency")

from memsim.runs.config import TOP_LEVEL, experiment_from_dict, load_experiment  # noqa: E402
from memsim.core.errors import ConfigError  # noqa: E402
from memsim.policies import PRESETS, REGISTRY  # noqa: E402
from memsim.schema import SCHEMA_FILE, experiment_schema, shipped_schema_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "memsim" / "schemas" / SCHEMA_FILE
EXPERIMENTS = sorted((ROOT / "experiments").glob("*.toml"))
#: files in experiments/ that configure a check, not an experiment
CHECKS = [p for p in EXPERIMENTS if p.stem.endswith("_check")]


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(SHIPPED.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "memsim.cli", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)


def test_the_shipped_schema_is_the_generated_one():
    # a fresh process: what other tests register does not leak in
    res = _cli("schema", "experiment")
    assert res.returncode == 0, res.stderr
    assert res.stdout == SHIPPED.read_text(encoding="utf-8"), (
        "memsim/schemas/experiment.schema.json is stale: regenerate it with "
        "`memsim schema experiment > memsim/schemas/experiment.schema.json`")
    assert shipped_schema_text() == res.stdout  # the package's copy is that file


def test_advise_defaults_in_the_schema_are_the_ones_memsim_uses():
    # a default the schema shows is the value a table without the key gets
    # (an editor offers it); advise.seed defaults to the experiment's seed
    from memsim.tuning.advice import AdviseSpec

    exp = experiment_from_dict({"experiment": {"name": "x", "seed": 123},
                                "workload": {"horizon_days": 5},
                                "policies": {"a": {"preset": "similarity-only"}},
                                "advise": {"current": "a"}})
    spec = AdviseSpec.from_table(exp.advise, exp)
    advise = experiment_schema()["properties"]["advise"]["properties"]
    for key, prop in advise.items():
        if "default" in prop:
            got = getattr(spec, key)
            assert (list(got) if isinstance(got, tuple) else got) == prop["default"], key
    assert spec.seed == 123 and "default" not in advise["seed"]
    assert "the experiment's seed" in advise["seed"]["description"]


def test_the_trace_schema_is_printed_too():
    res = _cli("schema", "trace")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["$id"] == "urn:memsim:schema:trace:1"


def test_the_schema_comes_from_the_definitions():
    schema = experiment_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert tuple(schema["properties"]) == TOP_LEVEL
    policy = schema["$defs"]["policy"]["properties"]
    assert policy["preset"]["enum"] == sorted(PRESETS)
    for slot, kinds in REGISTRY.items():
        assert policy[slot]["then"]["enum"] == sorted(kinds)
        for kind, cls in kinds.items():
            params = schema["$defs"][f"{slot}.{kind}"]["properties"]
            assert set(params) == {"kind"} | {name for name, _, _ in cls.describe()}
    # an Interval becomes bounds: the floor of half-life-floor is in [0, 1)
    floor = schema["$defs"]["decay.half-life-floor"]["properties"]["floor"]
    assert floor["type"] == "number" and floor["minimum"] == 0
    assert floor["exclusiveMaximum"] == 1
    assert floor["description"]  # from the class's numpydoc Parameters



def test_a_knob_is_described_by_its_own_text_not_a_type_line():
    """A subclass's bare 'share : float, default 0.3' line hid its base
    class's description, and 'size_median, size_sigma : float, default
    250.0, 1.0' gave size_sigma size_median's default as its text."""
    classes = experiment_schema()["properties"]["workload"]["else"]["properties"]["classes"]
    project = classes["properties"]["project"]["properties"]
    assert project["share"]["description"].startswith("Relative weight of the class")
    assert project["share"]["default"] == 0.3
    assert "LogNormal(ln size_median, size_sigma)" in project["size_sigma"]["description"]
    assert "250" not in project["size_sigma"]["description"]
    for cls in ("project", "scratch", "superseding", "distractor"):
        for knob, spec in classes["properties"][cls]["properties"].items():
            assert not spec["description"].startswith(("float", "str", "int")), (cls, knob)


@pytest.mark.parametrize("path", [p for p in EXPERIMENTS if p not in CHECKS],
                         ids=lambda p: p.name)
def test_every_shipped_experiment_validates(validator, path):
    table = tomllib.loads(path.read_text(encoding="utf-8"))
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
              for e in validator.iter_errors(table)]
    assert not errors, errors


@pytest.mark.parametrize("path", CHECKS, ids=lambda p: p.name)
def test_a_check_file_is_not_an_experiment_to_the_schema_or_to_memsim(validator, path):
    table = tomllib.loads(path.read_text(encoding="utf-8"))
    assert not validator.is_valid(table)
    with pytest.raises(ConfigError):
        experiment_from_dict(table)


@pytest.mark.parametrize("name", ["quickstart", "presets", "packing", "sweep_hivemind"])
def test_a_resolved_config_validates(validator, name):
    # a run folder's config.toml: every default filled in
    resolved = load_experiment(ROOT / "experiments" / f"{name}.toml").to_config()
    errors = [e.message for e in validator.iter_errors(json.loads(json.dumps(resolved)))]
    assert not errors, errors


BASE = """\
[experiment]
name = "e"
replicates = 2

[workload]
horizon_days = 10

[policies.a]
preset = "similarity-only"
decay = { kind = "half-life-floor", floor = 0.5 }
"""


@pytest.mark.parametrize("edit, path, needle", [
    # an unknown key
    (("horizon_days = 10", "horizon_days = 10\nnotes_per_dya = 3"), ["workload"],
     "'notes_per_dya' was unexpected"),
    (("[policies.a]", "[polices.b]\n[policies.a]"), [], "'polices' was unexpected"),
    # a value out of range
    (("floor = 0.5", "floor = 1.5"), ["policies", "a", "decay", "floor"], "1.5"),
    (("replicates = 2", "replicates = 0"), ["experiment", "replicates"], "minimum"),
    # a budget listed twice (two arms of one name and budget)
    (("replicates = 2", "replicates = 2\nbudgets = [500, 500]"), ["experiment", "budgets"],
     "non-unique"),
    # an unknown preset and an unknown kind
    (('preset = "similarity-only"', 'preset = "similarity-onyl"'),
     ["policies", "a", "preset"], "'similarity-onyl' is not one of"),
    (('kind = "half-life-floor"', 'kind = "half-life-flor"'),
     ["policies", "a", "decay", "kind"], "'half-life-flor' is not one of"),
])
def test_a_bad_file_fails_the_schema_at_its_key(validator, edit, path, needle):
    good = tomllib.loads(BASE)
    assert validator.is_valid(good)
    experiment_from_dict(good)
    bad = tomllib.loads(BASE.replace(*edit))
    errors = list(validator.iter_errors(bad))
    assert errors, "the schema accepted a bad file"
    # the error names the key (by its path), as memsim does
    at_key = [e for e in errors if list(e.absolute_path) == path and needle in e.message]
    assert at_key, [(list(e.absolute_path), e.message) for e in errors]
    with pytest.raises(ConfigError) as info:
        experiment_from_dict(bad)
    key = ".".join(path[:3]) if path else "polices"
    assert key in str(info.value)


def test_a_file_with_plugins_may_name_any_kind(validator):
    table = tomllib.loads(BASE.replace('kind = "half-life-floor", floor = 0.5',
                                       'kind = "my-decay", rate = 2'))
    assert not validator.is_valid(table)
    table["experiment"]["plugins"] = ["my_package.decays"]
    assert validator.is_valid(table)
