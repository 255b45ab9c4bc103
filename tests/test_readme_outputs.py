"""The README's command outputs are what the commands print today.

Each ``<!-- output: NAME -->`` block of README.md is rerun with the command
``tools/readme_outputs.py`` names for it and compared (a run folder's UTC
time aside); ``python tools/readme_outputs.py --write`` regenerates them.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("readme_outputs",
                                                  ROOT / "tools" / "readme_outputs.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


TOOL = _tool()


def test_every_output_block_has_a_command_and_every_command_a_block():
    found = TOOL.blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert set(found) == set(TOOL.OUTPUTS)


def test_a_stale_block_is_told_apart_from_a_new_run_folder_time():
    body = "policy  share\na  0.250\n\nresults/20261130T184840Z_quickstart_535c3b6f\n"
    assert TOOL.same(body, body.replace("20261130T184840Z", "20271201T010203Z"))
    assert not TOOL.same(body, body.replace("0.250", "0.251"))
    assert not TOOL.same(body, body.replace("535c3b6f", "535c3b70"))
    text = "x\n<!-- output: quickstart -->\n```text\nold\n```\n<!-- /output -->\ny\n"
    assert TOOL.blocks(TOOL.rewrite(text, "quickstart", "new\n")) == {"quickstart": "new\n"}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TOOL.OUTPUTS))
def test_the_readme_shows_what_the_command_prints(name):
    readme = TOOL.blocks((ROOT / "README.md").read_text(encoding="utf-8"))[name]
    out = TOOL.OUTPUTS[name].run()
    assert TOOL.same(readme, out), (
        f"README.md's '{name}' block is stale: python tools/readme_outputs.py --only {name} "
        f"--write\n--- README\n{readme}--- now\n{out}")
