"""The package layout shows the layers, and the earlier flat module names
still import, as the very same module objects."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import memsim

ROOT = Path(__file__).resolve().parents[1]


def _layer_names() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    layers = config["tool"]["importlinter"]["contracts"][0]["layers"]
    return {m.strip() for layer in layers for m in layer.split("|")}


def test_the_top_level_holds_only_the_layers():
    top = ROOT / "memsim"
    found = {f"memsim.{p.stem}" for p in top.glob("*.py") if p.stem != "__init__"}
    found |= {f"memsim.{p.name}" for p in top.iterdir() if (p / "__init__.py").is_file()}
    assert found == _layer_names()
    assert "memsim.data" in found and "memsim.stream" not in found


def test_flat_names_are_the_layered_modules():
    import memsim.data.importers.trace as layered_trace
    import memsim.importers.trace as flat_trace
    import memsim.reporting.stats as layered_stats
    import memsim.stats as flat_stats
    from memsim.testing import check_component

    assert flat_stats is layered_stats and flat_trace is layered_trace
    assert check_component.__module__ == "memsim.checks.testing"
    assert memsim.stream is sys.modules["memsim.data.stream"]
    # the module keeps its own spec, so reloading and pickling by name work
    assert flat_stats.__spec__.name == "memsim.reporting.stats"
    # ``memsim.compare`` stays the function users call
    assert callable(memsim.compare) and not isinstance(memsim.compare, type(sys))


def test_every_moved_name_resolves_in_a_fresh_process():
    code = ("import importlib, sys, memsim\n"
            "for old, new in memsim._MOVED.items():\n"
            "    assert importlib.import_module(old) is importlib.import_module(new), old\n"
            "dupes = [k for k, m in sys.modules.items() if k.startswith('memsim.') and m.__name__ != k\n"
            "         and k not in memsim._MOVED and not any(k.startswith(o + '.') for o in memsim._MOVED)]\n"
            "assert not dupes, dupes\n"
            "print(len(memsim._MOVED))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) >= 30
