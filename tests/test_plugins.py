"""Plugins: a component registered in the user's own module works in every process.

A decay registered by a module written to a temporary folder (on the
subprocesses' PYTHONPATH) runs through ``memsim run`` (named in ``[experiment]
plugins``), a rerun from the run folder's resolved ``config.toml``, ``memsim
report`` and a sweep with two worker processes; an installed package's
``memsim.components`` entry point (a real ``*.dist-info`` folder on the path)
registers its components without any config key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pandas as pd
import pytest

from memsim.runs.config import dumps_toml, experiment_from_dict
from memsim.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]

PLUGIN = "memsim_plugin_fade"  # a name no installed package uses
PLUGIN_CODE = '''
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from memsim.core.params import Interval
from memsim.policies import Decay, register


@register
@dataclass(frozen=True, kw_only=True)
class LinearFade(Decay):
    """Linear fade to a floor: ``recency = max(floor, 1 - age / span_days)``."""

    name: ClassVar[str] = "plugin-linear"
    span_days: float = 30.0
    floor: float = 0.2
    _constraints: ClassVar[dict] = {"span_days": Interval(0, None, closed="neither"),
                                    "floor": Interval(0, 1, closed="left")}

    def recency(self, age, ctx):
        return np.maximum(self.floor, 1.0 - np.maximum(age, 0.0) / self.span_days)

    def lower_bound(self):
        return self.floor
'''


def _table(plugins=(PLUGIN,), sweep: bool = False) -> dict:
    exp = {"name": "plugin", "seed": 3, "replicates": 1, "budget_tokens": 600,
           "tick_days": 10.0}
    if plugins is not None:
        exp["plugins"] = list(plugins)
    t = {"experiment": exp,
         "workload": {"horizon_days": 20, "backfill_days": 20, "notes_per_day": 6.0,
                      "queries_per_day": 3.0, "n_topics": 10},
         "policies": {"p": {"ranker": "product",
                            "decay": {"kind": "plugin-linear", "span_days": 20.0}},
                      "q": {"decay": {"kind": "half-life", "half_life_days": 10.0}}}}
    if sweep:
        t["sweep"] = {"trials": 2, "seed": 1, "robustness": {"replicates": 0},
                      "objectives": [{"metric": "utility", "direction": "maximize"}],
                      "params": {"policies.p.decay.span_days": {"type": "float", "low": 5.0,
                                                                "high": 100.0}}}
    return t


@pytest.fixture()
def plugin_dir(tmp_path):
    d = tmp_path / "plugins"
    d.mkdir()
    (d / f"{PLUGIN}.py").write_text(PLUGIN_CODE, encoding="utf-8")
    return d


def _memsim(args, path_dirs, cwd, timeout=300):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(p) for p in path_dirs] + [str(ROOT)]
                                        + [env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "memsim.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def _write(path: Path, table: dict) -> Path:
    path.write_text(dumps_toml(table), encoding="utf-8")
    return path


@pytest.mark.slow
def test_a_plugin_component_runs_through_the_cli_a_rerun_a_report_and_two_workers(
        tmp_path, plugin_dir):
    work = tmp_path / "work"  # not the plugin's folder: only PYTHONPATH finds it
    work.mkdir()
    # without the plugins key the component is unknown (the failure this fixes)
    bare = _memsim(["run", str(_write(work / "bare.toml", _table(plugins=None))), "--out",
                    str(work / "bare"), "--quiet", "--no-report"], [plugin_dir], work)
    assert bare.returncode == 2
    assert "unknown decay 'plugin-linear'" in bare.stderr

    # 1. memsim run, the plugin named in [experiment]
    first = _memsim(["run", str(_write(work / "exp.toml", _table())), "--out",
                     str(work / "out"), "--quiet", "--no-report"], [plugin_dir], work)
    assert first.returncode == 0, first.stderr[-3000:]
    run = next((work / "out").iterdir())
    config = tomllib.loads((run / "config.toml").read_text(encoding="utf-8"))
    assert config["experiment"]["plugins"] == [PLUGIN]
    assert config["policies"]["p"]["decay"] == {"kind": "plugin-linear", "clock": "created",
                                                "span_days": 20.0, "floor": 0.2}
    assert json.loads((run / "manifest.json").read_text())["plugins"] == [PLUGIN]

    # 2. the rerun from the resolved config: the same numbers
    again = _memsim(["run", str(run / "config.toml"), "--out", str(work / "rerun"), "--quiet",
                     "--no-report"], [plugin_dir], work)
    assert again.returncode == 0, again.stderr[-3000:]
    rerun = next((work / "rerun").iterdir())
    pd.testing.assert_frame_equal(pd.read_parquet(run / "queries.parquet"),
                                  pd.read_parquet(rerun / "queries.parquet"), check_exact=True)

    # 3. memsim report rebuilds the policies (recency curves) from the run folder
    report = _memsim(["report", str(run)], [plugin_dir], work)
    assert report.returncode == 0, report.stderr[-3000:]
    assert (run / "report.html").exists() and "plugin-linear" in (run / "report.md").read_text()
    # without the module on the path, one line names the key and the module
    lost = _memsim(["report", str(run)], [], work)
    assert lost.returncode == 2
    assert lost.stderr.count("\n") == 1
    assert f"experiment.plugins: cannot import '{PLUGIN}'" in lost.stderr

    # 4. a sweep with two spawned worker processes
    sweep = _memsim(["sweep", str(_write(work / "sweep.toml", _table(sweep=True))), "--out",
                     str(work / "sweep"), "--quiet", "--no-report", "--workers", "2"],
                    [plugin_dir], work)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    folder = next((work / "sweep").iterdir())
    trials = pd.read_csv(folder / "sweep" / "trials.csv")
    assert (trials["state"] == "COMPLETE").sum() == 2, trials
    assert json.loads((folder / "manifest.json").read_text())["plugins"] == [PLUGIN]


def test_an_unknown_plugin_is_one_line_naming_the_key_and_the_module(tmp_path):
    f = _write(tmp_path / "exp.toml", _table(plugins=["no_such_module_for_memsim"]))
    done = _memsim(["run", str(f), "--out", str(tmp_path / "out"), "--quiet"], [], tmp_path)
    assert done.returncode == 2
    assert done.stderr == (f"memsim: error: {f}: experiment.plugins: cannot import "
                           "'no_such_module_for_memsim': no such module on the Python path; "
                           "install it or add its folder to PYTHONPATH\n")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_plugin_whose_own_import_is_missing_is_not_called_missing(tmp_path, monkeypatch):
    """The module is on the path; a module it imports is not installed
    (before: 'no such module on the Python path', which sent the user to fix
    the wrong thing)."""
    here = tmp_path / "plug"
    here.mkdir()
    (here / "memsim_plugin_needs_more.py").write_text("import memsim_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(here))
    with pytest.raises(ConfigError) as info:
        experiment_from_dict(_table(plugins=["memsim_plugin_needs_more"]))
    assert str(info.value) == (
        "experiment.plugins: importing 'memsim_plugin_needs_more' failed: it imports "
        "'memsim_no_such_dependency', which is not installed (No module named "
        "'memsim_no_such_dependency')")


def test_a_component_without_a_name_is_refused_at_registration():
    """Before: registered under "", listed as an empty name and chosen by
    ``kind = ""``."""
    import numpy as np

    from memsim.policies import Decay, register
    from memsim.policies.base import REGISTRY

    before = dict(REGISTRY["decay"])

    class Nameless(Decay):
        def recency(self, age, ctx):
            return np.ones_like(age)

    with pytest.raises(RuntimeError, match=r"^cannot register .*Nameless: it has no name; "
                                           r"give it one"):
        register(Nameless)
    assert REGISTRY["decay"] == before


def test_plugins_are_imported_before_the_rest_is_validated(tmp_path, plugin_dir, monkeypatch):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "memsim_plugin_broken.py").write_text("raise RuntimeError('half-written')\n")
    monkeypatch.syspath_prepend(str(broken))
    with pytest.raises(ConfigError, match=r"^experiment\.plugins: importing "
                                          r"'memsim_plugin_broken' failed: RuntimeError: "
                                          r"half-written$"):
        experiment_from_dict(_table(plugins=["memsim_plugin_broken"]))
    for bad in ("my_decays", ["my decays"], [3]):
        with pytest.raises(ConfigError, match=r"^experiment\.plugins: "):
            experiment_from_dict(_table(plugins=bad))
    # a config without plugins keeps its resolved table (and so its hash)
    monkeypatch.syspath_prepend(str(plugin_dir))
    plain = _table(plugins=None)
    plain["policies"] = {"q": plain["policies"]["q"]}
    assert "plugins" not in experiment_from_dict(plain).to_config()["experiment"]
    exp = experiment_from_dict(_table())
    assert exp.settings.plugins == (PLUGIN,)
    assert exp.policies["p"].decay.name == "plugin-linear"


def test_an_entry_point_registers_components_without_a_config_key(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "memsim_plugin_ep.py").write_text(
        PLUGIN_CODE.replace("@register\n", "").replace('"plugin-linear"', '"ep-linear"'),
        encoding="utf-8")
    info = site / "memsim_plugin_ep-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: memsim-plugin-ep\n"
                                   "Version: 0.1\n", encoding="utf-8")
    # the entry point names the class: memsim registers it on load
    (info / "entry_points.txt").write_text(textwrap.dedent("""\
        [memsim.components]
        ep-linear = memsim_plugin_ep:LinearFade
        """), encoding="utf-8")
    table = _table(plugins=None)
    table["policies"]["p"]["decay"]["kind"] = "ep-linear"
    f = _write(tmp_path / "exp.toml", table)
    done = _memsim(["run", str(f), "--out", str(tmp_path / "out"), "--quiet", "--no-report"],
                   [site], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    listed = _memsim(["policies"], [site], tmp_path)
    assert listed.returncode == 0 and "  ep-linear: Linear fade to a floor" in listed.stdout
    # and a broken entry point is one line naming it and its package
    (info / "entry_points.txt").write_text("[memsim.components]\nbad = no_such_mod_ep\n")
    done = _memsim(["run", str(f), "--out", str(tmp_path / "out2"), "--quiet"], [site],
                   tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("memsim: error: ") and done.stderr.count("\n") == 1
    assert "entry point bad = 'no_such_mod_ep' of memsim-plugin-ep (group memsim.components)" \
        in done.stderr
    # beside a working package, a broken one used to stop every config that
    # named a plugin component, the working package's ones too
    (info / "entry_points.txt").write_text("[memsim.components]\n"
                                           "ep-linear = memsim_plugin_ep:LinearFade\n")
    other = site / "memsim_broken-0.1.dist-info"
    other.mkdir()
    (other / "METADATA").write_text("Metadata-Version: 2.1\nName: memsim-broken\n"
                                    "Version: 0.1\n", encoding="utf-8")
    (other / "entry_points.txt").write_text("[memsim.components]\nbad = no_such_mod_ep\n")
    done = _memsim(["run", str(f), "--out", str(tmp_path / "out3"), "--quiet", "--no-report"],
                   [site], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    listed = _memsim(["policies"], [site], tmp_path)
    assert listed.returncode == 0 and "  ep-linear: Linear fade to a floor" in listed.stdout
    assert "memsim: warning: entry point bad = 'no_such_mod_ep' of memsim-broken" \
        in listed.stderr
