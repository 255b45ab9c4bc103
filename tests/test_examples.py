"""Every command the README and the ``--help`` texts show runs.

The commands are taken from README.md (the lines of its ```bash blocks, the
inline `memsim ...` commands without placeholders, and its Python blocks) and
from the help of every ``memsim`` command, then run on small sizes: runs get
``--set`` overrides for one replicate of ten days, sweeps two trials, and every
``--out`` points into a temporary folder. Commands that need data or engines
that are absent skip with a reason.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from memsim.cli import build_parser, main
from memsim.data.datasets import cached_path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SMALL = ["experiment.replicates=1", "workload.horizon_days=10", "workload.backfill_days=10"]
# commands that take --set (and, but for `stream generate`, an --out with a default)
TAKES_SET = {"run", "sweep", "audit", "optimum", "generate", "advise"}
TAKES_OUT = {"run", "sweep", "audit", "advise"}
# an upper-case word or a bracketed option stands for something the reader fills in
# (A.toml, DIR, RESULTS_DIR/config.toml), and a bare config.toml is a run folder's
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z_]*\.toml\b|\b[A-Z][A-Z_]+\b|\[--|(?<![/\w])config\.toml")


def _readme_commands() -> list[tuple[str, str]]:
    text = README.read_text(encoding="utf-8")
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            for part in line.split("&&"):
                part = part.strip()
                if part.startswith(".venv/bin/memsim "):
                    part = part[len(".venv/bin/"):]
                if part.startswith("memsim "):
                    found.append(("README", part))
    for span in re.findall(r"`(memsim [^`]+)`", text):
        span = " ".join(span.split())
        if len(span.split()) >= 3 and not PLACEHOLDER.search(span):
            found.append(("README", span))
    return found


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _parsers(sub)


def _help_commands() -> list[tuple[str, str]]:
    found = []
    for parser in _parsers(build_parser()):
        for line in parser.format_help().splitlines():
            line = line.strip()
            if line.startswith("memsim ") and not PLACEHOLDER.search(line):
                found.append((parser.prog, line))
    return found


# each command once, named by where it is shown first
_FIRST: dict[str, str] = {}
for _src, _cmd in _readme_commands() + _help_commands():
    _FIRST.setdefault(_cmd, _src)
COMMANDS = [(src, cmd) for cmd, src in _FIRST.items()]


def test_the_examples_are_found():
    commands = {c for _, c in COMMANDS}
    assert "memsim run experiments/quickstart.toml" in commands
    assert any(c.startswith("memsim curves hivemind feather --set") for c in commands)
    assert any(c.startswith("memsim sweep ") for c in commands)
    assert {src for src, _ in COMMANDS} >= {"README", "memsim run", "memsim curves"}


def _shrink_engine_check(path: str, tmp_path: Path) -> str:
    """A copy of a real-engine check's TOML with a ten-day stream."""
    table = tomllib.loads((ROOT / path).read_text(encoding="utf-8"))
    wl = table.setdefault("workload", {})
    wl["horizon_days"], wl["backfill_days"] = 10, 10
    lines = []
    for name, sub in table.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in sub.items()]
    out = tmp_path / Path(path).name
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(out)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return repr(v)


def _needs(argv: list[str]) -> str | None:
    """Why the command cannot run here, or None."""
    for a in argv:
        if a.startswith("../shared/") and not (ROOT / a).exists():
            return f"needs {a}, absent"
    if argv[1:3] == ["data", "get"] and "--from" not in argv and "--help" not in argv:
        return "downloads from the network"
    for a in argv:
        if a.startswith("data:") and not cached_path(a[len("data:"):]).is_file():
            return f"needs {a} (memsim data get {a[len('data:'):]}), absent"
    engines = {"feather-check": "feather_db", "feather": "feather_db",
               "langchain": "langchain_classic"}
    for word, module in engines.items():
        if word in argv[:3] and importlib.util.find_spec(module) is None:
            return f"needs the {module} engine (an optional extra), absent"
    return None


def _small(argv: list[str], tmp_path: Path) -> list[str]:
    """The command on small sizes, writing under tmp_path only."""
    argv = list(argv)
    words = [a for a in argv if not a.startswith("-")]
    command = words[1] if len(words) > 1 and words[1] not in ("stream", "calibrate") else (
        words[2] if len(words) > 2 else "")
    for opt, value in (("--trials", "2"), ("--workers", "1"), ("--queries", "50")):
        if opt in argv:
            argv[argv.index(opt) + 1] = value
    if argv[1:3] == ["data", "get"] and "--to" not in argv:
        argv += ["--to", str(tmp_path / "data")]   # never the user's cache
    if "--out" in argv:
        i = argv.index("--out")
        argv[i + 1] = str(tmp_path / f"out{i}")
    elif command in TAKES_OUT:
        argv += ["--out", str(tmp_path / "out")]
    if command in TAKES_SET:
        argv += [x for s in SMALL for x in ("--set", s)]
    if command == "audit":
        argv += ["--param-replicates", "2"]
    if command == "advise":
        argv += ["--set", "advise.trials=2", "--set", "advise.batch=2"]
    if command in ("feather-check", "engine-check"):
        argv = [_shrink_engine_check(a, tmp_path) if a.endswith(".toml") else a
                for a in argv]
    return argv


@pytest.mark.parametrize("source, command", COMMANDS,
                         ids=[f"{s}: {c}" for s, c in COMMANDS])
def test_example_runs(source, command, tmp_path, monkeypatch, capsys):
    argv = shlex.split(command)
    assert argv[0] == "memsim"
    why = _needs(argv)
    if why:
        pytest.skip(why)
    monkeypatch.chdir(ROOT)
    args = _small(argv, tmp_path)[1:]
    try:
        code = main(args)
    except SystemExit as exc:  # --help
        code = exc.code
    captured = capsys.readouterr()
    assert code == 0, f"{source}: `{command}` exited {code}: {captured.err.strip()}"


def test_version_matches_the_package():
    from importlib.metadata import version

    proc = subprocess.run([sys.executable, "-m", "memsim.cli", "--version"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"memsim {version('memsim')}"


def _python_blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("index", range(len(_python_blocks())))
def test_readme_python_block_runs(index, tmp_path):
    code = _python_blocks()[index]
    if "store.add(" in code:
        pytest.skip("an exporter sketch around the reader's own store, not runnable alone")
    if "import ranx" in code:
        pytest.importorskip("ranx")  # an optional extra (pip install -e ".[ranx]")
    small = ', "workload.horizon_days": 10, "workload.backfill_days": 10'
    code = code.replace('{"experiment.replicates": 1}', '{"experiment.replicates": 1' + small
                        + "}")
    code = code.replace('"workload": {"horizon_days": 30, "backfill_days": 30}',
                        '"workload": {"horizon_days": 10, "backfill_days": 10}')
    code = code.replace('memsim.load_run("results/...")',
                        f'memsim.load_run(memsim.run_experiment(exp, out={str(tmp_path)!r},'
                        ' report=False).path)')
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
