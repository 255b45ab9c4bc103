"""The command line's own behaviour: progress on stderr, help texts, version,
what ``memsim policies`` prints, and overrides of policies that do not exist."""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path

import pytest

from memsim.cli import Progress, build_parser, main
from memsim.runs.config import load_experiment

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "experiments" / "quickstart.toml"
SMALL = ["experiment.replicates=2", "workload.horizon_days=10", "workload.backfill_days=10"]


class Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


def test_progress_writes_one_line_per_unit_when_not_a_terminal():
    out = Pipe()
    prog = Progress("memsim run", phase="replicates", units=3, unit="replicate", stream=out)
    for frac in (0.1, 0.2, 1 / 3, 0.5, 0.9, 1.0):
        prog(frac)
    prog.close()
    lines = out.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        "memsim run: replicate 1/3 done", "memsim run: replicate 2/3 done",
        "memsim run: replicate 3/3 done"]
    assert "s left)" in lines[0] and lines[-1].endswith(" s)")


def test_progress_without_units_writes_tenths_and_quiet_writes_nothing():
    out = Pipe()
    prog = Progress("memsim audit", stream=out)
    for frac in (0.2, 0.3, 1.0):
        prog(frac)
    assert [line.split(" done")[0] for line in out.getvalue().splitlines()] == [
        f"memsim audit: {k}%" for k in range(10, 101, 10)]
    quiet = Pipe()
    prog = Progress("memsim run", quiet=True, units=2, stream=quiet)
    prog(0.5)
    prog(1.0)
    prog.close()
    assert quiet.getvalue() == ""


def test_progress_of_a_resumed_sweep_counts_from_where_it_was_and_names_the_next_phase():
    out = Pipe()
    prog = Progress("memsim sweep", phase="trials", units=4, unit="trial", resumed=True,
                    then="trials done; robustness check", stream=out)
    prog(0.5)   # two trials complete before this command
    prog(0.75)
    prog(1.0)
    lines = out.getvalue().splitlines()
    assert lines[0] == "memsim sweep: trials: 2/4 trials done before"
    assert lines[1].startswith("memsim sweep: trial 3/4 done (")
    assert lines[2].startswith("memsim sweep: trial 4/4 done (")
    assert lines[3] == "memsim sweep: trials done; robustness check"
    # the next phase, labelled
    prog.phase("robustness", units=2, unit="candidate")
    prog(1.0)
    assert [line.split(" (")[0] for line in out.getvalue().splitlines()[4:]] == [
        "memsim sweep: candidate 1/2 done", "memsim sweep: candidate 2/2 done"]


def test_progress_on_a_terminal_draws_a_labelled_bar():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    prog = Progress("memsim sweep", phase="trials", units=2, unit="trial", stream=out)
    prog.t0 -= 5  # the bar shows once a phase has run 2 s
    prog(0.5)
    bar = prog._bar
    assert bar is not None and "memsim sweep: trials 1/2 trials" in bar.desc
    prog.close()


@pytest.mark.slow
def test_memsim_run_in_a_pipe_prints_a_line_per_replicate(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "memsim.cli", "run", str(QUICKSTART),
                           "--out", str(tmp_path), "--no-report",
                           *[x for s in SMALL for x in ("--set", s)]],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        "memsim run: replicate 1/2 done", "memsim run: replicate 2/2 done"]
    # stdout: the headline table, one blank line, the run folder (as the README shows)
    out = proc.stdout.splitlines()
    assert out[0].startswith("policy") and out[-2:-1] == [""] and out[-3] != ""
    assert Path(out[-1]).is_dir()
    quiet = subprocess.run([sys.executable, "-m", "memsim.cli", "run", str(QUICKSTART),
                            "--out", str(tmp_path), "--no-report", "--quiet",
                            *[x for s in SMALL for x in ("--set", s)]],
                           capture_output=True, text=True, cwd=ROOT)
    assert quiet.returncode == 0 and quiet.stderr == ""
    # and stdout holds only the run folder (no headline table), as --help says
    assert len(quiet.stdout.splitlines()) == 1 and Path(quiet.stdout.strip()).is_dir()
    helped = subprocess.run([sys.executable, "-m", "memsim.cli", "run", "--help"],
                            capture_output=True, text=True, cwd=ROOT)
    assert "print only the run folder" in " ".join(helped.stdout.split())


def test_quiet_help_says_advise_prints_only_the_run_folder(capsys):
    with pytest.raises(SystemExit):
        main(["advise", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    start = text.index("-q, --quiet")
    quiet = text[start:text.index("--progress {", start)]
    assert "run, sweep and advise also print only the run folder" in quiet, quiet


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("memsim 0.")


def _parsers(parser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _parsers(sub)


def test_every_argument_has_help_and_defaults_are_shown():
    for parser in _parsers(build_parser()):
        for action in parser._actions:
            assert action.help, f"{parser.prog}: {action.dest} has no help text"
    help_of = {p.prog: p.format_help() for p in _parsers(build_parser())}
    assert "(default: results)" in " ".join(help_of["memsim run"].split())
    from memsim.runs.runner import default_jobs  # --jobs defaults to the usable cores
    assert f"(default: {default_jobs()})" in " ".join(help_of["memsim run"].split())
    assert "(default: 300)" in help_of["memsim audit"]
    assert "(default: 0.8)" in help_of["memsim curves"]


def test_policies_prints_no_rest_markup(capsys):
    assert main(["policies"]) == 0
    out = capsys.readouterr().out
    for mark in ("``", ":class:", ":func:", ":meth:", ":mod:"):
        assert mark not in out, mark
    assert "cosine: Cosine similarity, q . n / (|q| |n|), in [-1, 1]." in out
    assert "d the squared L2 distance" in out            # was **squared**
    assert "recency = 0.5 ** (days / half_life)" in out  # a power stays a power


@pytest.mark.parametrize("key", ["policies.fixed.decay.floor=0.2", "policies.fixed.preset=hivemind",
                                 "policies.fixed=hivemind"])
def test_an_override_of_a_policy_that_does_not_exist_is_refused(key):
    proc = subprocess.run([sys.executable, "-m", "memsim.cli", "run", str(QUICKSTART),
                           "--set", key, "--out", "/nonexistent/never"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].endswith("no policy 'fixed' (policies: bug-5pct-per-day, "
                             "half-life-180-floor, no-decay)")


def test_a_whole_policy_table_can_still_be_added():
    exp = load_experiment(QUICKSTART, {"policies.extra": {"preset": "hivemind"}})
    assert list(exp.policies) == ["bug-5pct-per-day", "half-life-180-floor", "no-decay", "extra"]


def _commands(parser, name="memsim"):
    """Every (sub)command's parser, with its full name."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                yield from _commands(child, f"{name} {sub}")


def test_every_command_that_can_be_quiet_takes_the_short_flag():
    """`-q` means `--quiet` wherever `--quiet` exists (`memsim report -q`
    was refused while `memsim run -q` was not)."""
    quiet = {name: next((a.option_strings for a in p._actions if "--quiet" in a.option_strings),
                        None) for name, p in _commands(build_parser())}
    quiet = {k: v for k, v in quiet.items() if v is not None}
    assert {"memsim run", "memsim report", "memsim calibrate workload"} <= set(quiet)
    assert all("-q" in flags for flags in quiet.values()), quiet


@pytest.mark.parametrize("value", ["-1", "one"])
def test_stream_generate_refuses_a_replicate_that_is_not_a_number_from_0(tmp_path, capsys,
                                                                         value):
    """``memsim stream generate --replicate -1`` is a usage error naming the
    option (it reached numpy's seeding as a traceback), and writes nothing."""
    from memsim.cli import main

    exp = Path(__file__).resolve().parents[1] / "experiments" / "quickstart.toml"
    with pytest.raises(SystemExit) as e:
        main(["stream", "generate", str(exp), "--out", str(tmp_path / "s"),
              "--replicate", value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --replicate: '{value}': give a whole number, >= 0" in err
    assert "Traceback" not in err and not (tmp_path / "s").exists()


@pytest.mark.parametrize("command", ["generate", "import"])
def test_stream_commands_refuse_an_unusable_out_before_their_work(tmp_path, capsys, monkeypatch,
                                                                  command):
    """An --out under a file is refused (one line, exit 2) before the stream
    is generated or imported: the work that would be lost is not done."""
    from memsim.data.importers import trace
    from memsim.data.workload import SyntheticWorkload

    def never(*args, **kwargs):
        raise AssertionError("the stream was made before --out was checked")

    monkeypatch.setattr(SyntheticWorkload, "generate", never)
    monkeypatch.setattr(trace, "cli_import_trace", never)
    (tmp_path / "afile").write_text("x")
    src = (str(Path(__file__).resolve().parents[1] / "experiments" / "quickstart.toml")
           if command == "generate" else str(tmp_path / "t.jsonl"))
    argv = (["stream", "generate", src] if command == "generate"
            else ["stream", "import", "trace", src])
    assert main([*argv, "--out", str(tmp_path / "afile" / "s")]) == 2
    err = capsys.readouterr().err
    assert f"cannot write a stream at {tmp_path / 'afile' / 's'}: {tmp_path / 'afile'} is a file" \
        in err


@pytest.mark.parametrize("argv, forwarded", [
    (["feather-check", "c.toml", "--json"], ["c.toml", "--json"]),
    (["feather-check", "c.toml", "--csv", "p", "--json"], ["c.toml", "--csv", "p", "--json"]),
    (["feather-check", "c.toml"], ["c.toml"]),
    (["engine-check", "feather", "c.toml", "--json"], ["c.toml", "--json"]),
])
def test_feather_check_is_an_alias_of_engine_check_feather(monkeypatch, argv, forwarded):
    """``feather-check CFG --json`` failed with "unrecognized arguments": the
    alias takes the options of ``engine-check feather`` and passes them on."""
    from memsim.checks import feather_check

    seen = []
    monkeypatch.setattr(feather_check, "main",
                        lambda args, progress=None: seen.append(list(args)) or 0)
    assert main(argv) == 0
    assert seen == [forwarded]


@pytest.mark.parametrize("argv", [["feather-check", "c.toml"], ["engine-check", "feather", "c.toml"]])
def test_engine_checks_take_quiet_and_json_progress(monkeypatch, capsys, argv):
    """The feather check's progress follows ``--progress json`` (JSON lines
    on stderr) and ``-q`` (none), as every other command's does."""
    import json

    from memsim.checks import feather_check

    def check(args, progress=None):
        progress(0.5)
        progress(1.0)
        return 0

    monkeypatch.setattr(feather_check, "main", check)
    assert main([*argv, "--progress", "json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert lines and all(isinstance(x, dict) for x in lines)
    assert main([*argv, "-q"]) == 0
    assert capsys.readouterr().err == ""
