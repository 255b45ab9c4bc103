"""`memsim --help` and `memsim --version` start without a numerical library.

The command line imports what a command needs inside that command, and
``import memsim`` loads its public names on first use, so the two commands
a newcomer types first answer in a fraction of a second. The check reads
``python -X importtime`` (which modules were imported), not a clock.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("numpy", "pandas", "scipy", "optuna", "matplotlib", "pyarrow", "sklearn")


def _imported(*args: str) -> tuple[set[str], float, str]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "memsim.cli", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names, total = set(), 0.0
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line[len("import time:"):].split("|")
            if cumulative.strip().isdigit():
                names.add(name.strip())
                if not name.startswith("  "):  # a top-level import: its cumulative time
                    total += int(cumulative) / 1e6
    return names, total, proc.stdout


@pytest.mark.parametrize("args", [("--help",), ("--version",), ("run", "--help")])
def test_first_commands_import_no_numerical_library(args):
    names, seconds, out = _imported(*args)
    assert out.startswith("memsim") or out.startswith("usage: memsim")
    heavy = sorted({n.split(".")[0] for n in names} & set(HEAVY))
    assert heavy == [], f"memsim {' '.join(args)} imported {heavy}"
    print(f"memsim {' '.join(args)}: {seconds:.3f} s of imports")


def test_import_memsim_is_lazy_but_complete():
    code = ("import sys, memsim; assert 'pandas' not in sys.modules; "
            "names = [n for n in memsim.__all__ if n != '__version__']; "
            "assert all(callable(getattr(memsim, n)) or isinstance(getattr(memsim, n), type) "
            "for n in names); print(memsim.reporting.stats.utility_share.__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "utility_share"
