"""Regenerate (or check) the README's blocks that show a command's output.

A block is marked in README.md::

    <!-- output: NAME -->
    ```text
    ... what the command printed ...
    ```
    <!-- /output -->

and NAME is one of :data:`OUTPUTS` below: the command that printed it. The
block must hold exactly what the command prints today (a run folder's UTC
time, which changes each run, is the one part compared loosely), so a
number in the README can never go stale silently.

    python tools/readme_outputs.py            # check every block (exit 1 if one is stale)
    python tools/readme_outputs.py --write    # run the commands, rewrite the blocks
    python tools/readme_outputs.py --only quickstart --write

The test suite checks the blocks the same way (``tests/test_readme_outputs.py``).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

#: a run folder's UTC time: the one part of an output that changes run to run
_STAMP = re.compile(r"\d{8}T\d{6}Z")
_BLOCK = re.compile(r"(<!-- output: (?P<name>[\w-]+) -->\n```text\n)(?P<body>.*?)(```\n<!-- /output -->)",
                    re.S)


@dataclass(frozen=True)
class Output:
    """A command whose output the README shows.

    ``argv`` follows ``memsim``; ``{tmp}`` is a fresh temporary folder.
    ``keep`` picks the lines the README shows (default: all).
    """

    argv: tuple[str, ...]
    keep: str = "all"

    def run(self) -> str:
        with tempfile.TemporaryDirectory() as tmp:
            argv = [a.replace("{tmp}", tmp) for a in self.argv]
            proc = subprocess.run([sys.executable, "-m", "memsim.cli", *argv], cwd=ROOT,
                                  capture_output=True, text=True, timeout=1800,
                                  env=_env())
            if proc.returncode != 0:
                raise RuntimeError(f"memsim {' '.join(argv)} failed:\n{proc.stderr[-3000:]}")
            out = proc.stdout.replace(tmp, "results")
        return _select(out, self.keep)


def _env() -> dict:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _select(out: str, keep: str) -> str:
    """The part of an output the README shows."""
    if keep == "advice":
        # from the recommendation to the runner-ups (the workload, the split and
        # the run folder are described in the text around the block)
        lines = out.splitlines()
        start = next(i for i, ln in enumerate(lines) if ln.startswith("Recommendation"))
        end = max(i for i, ln in enumerate(lines) if ln.strip())
        while end > start and (lines[end].startswith("results") or not lines[end].strip()):
            end -= 1
        return "\n".join(lines[start:end + 1]) + "\n"
    return out if out.endswith("\n") else out + "\n"


#: The README's command outputs, by block name.
OUTPUTS: dict[str, Output] = {
    "quickstart": Output(("run", "experiments/quickstart.toml", "--no-report", "--out", "{tmp}")),
    "advise": Output(("advise", "experiments/advise.toml", "--out", "{tmp}"),
                     keep="advice"),
}


def blocks(text: str) -> dict[str, str]:
    """The README's output blocks: name -> body."""
    return {m["name"]: m["body"] for m in _BLOCK.finditer(text)}


def same(readme_body: str, output: str) -> bool:
    """Whether a block shows an output (a run folder's time may differ)."""
    return _STAMP.sub("T", readme_body) == _STAMP.sub("T", output)


def rewrite(text: str, name: str, output: str) -> str:
    """``text`` with block ``name`` holding ``output``."""
    def repl(m: re.Match) -> str:
        return m.group(1) + output + m.group(4) if m["name"] == name else m.group(0)
    return _BLOCK.sub(repl, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the blocks")
    parser.add_argument("--only", action="append", choices=sorted(OUTPUTS),
                        help="only this block (repeatable)")
    args = parser.parse_args(argv)
    text = README.read_text(encoding="utf-8")
    found = blocks(text)
    stale = []
    for name in args.only or sorted(OUTPUTS):
        if name not in found:
            print(f"README.md has no block 'output: {name}'", file=sys.stderr)
            return 2
        print(f"memsim {' '.join(OUTPUTS[name].argv)} ...", file=sys.stderr, flush=True)
        out = OUTPUTS[name].run()
        if not same(found[name], out):
            stale.append(name)
            text = rewrite(text, name, out)
    if args.write and stale:
        README.write_text(text, encoding="utf-8")
        print(f"rewrote: {', '.join(stale)}")
    elif stale:
        print(f"stale: {', '.join(stale)} (python tools/readme_outputs.py --write)")
        return 1
    else:
        print("every block is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
