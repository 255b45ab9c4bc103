"""Nothing crashes, nothing is lost: user mistakes and environment faults.

A user mistake ends with exit code 2 and one line ``memsim: error: ...``; an
environment fault (disk full, file-size limit) with exit code 1 and one line;
never a traceback, never a run folder without a manifest, never a half file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsim.runs.config import config_hash, dumps_toml, experiment_from_dict, load_experiment
from memsim.core.errors import ConfigError
from memsim.reporting.rundir import run_status

ROOT = Path(__file__).resolve().parents[1]

TINY = """\
[experiment]
name = "tiny"
seed = 1
replicates = 1
budget_tokens = 500
candidates = 20
{extra}
[workload]
horizon_days = 12
backfill_days = 10
notes_per_day = 5.0
queries_per_day = 3.0
n_topics = 5
{workload}
[policies.a]
preset = "hivemind-2025-bug"
{tail}
"""

SWEEP = """
[sweep]
trials = 3
seed = 1
objectives = [{ metric = "utility", direction = "maximize" }]

[sweep.params]
"policies.a.candidates" = { type = "int", low = 10, high = 30 }
"""


def tiny(tmp_path: Path, name: str = "tiny.toml", *, extra: str = "", workload: str = "",
         tail: str = "") -> Path:
    path = tmp_path / name
    path.write_text(TINY.format(extra=extra, workload=workload, tail=tail), encoding="utf-8")
    return path


def cli(*args, cwd=ROOT, env=None, preexec_fn=None, timeout=120):
    full_env = dict(os.environ, **(env or {}))
    full_env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "memsim.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, env=full_env,
                          preexec_fn=preexec_fn, timeout=timeout)


def one_error_line(res, code: int) -> str:
    assert res.returncode == code, (res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("memsim: error: "), res.stderr
    return lines[0]


def folders_without_manifest(out: Path) -> list[Path]:
    if not out.is_dir():
        return []
    return [p for p in out.iterdir() if p.is_dir() and not (p / "manifest.json").exists()]


def file_size_limit(n_bytes: int):
    def limit():
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (n_bytes, n_bytes))
    return limit


def memory_limit(n_bytes: int = 3 << 30):
    """A guard for the tests below: memsim before these fixes grew without bound."""
    def limit():
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (n_bytes, n_bytes))
    return limit


# --------------------------------------------------------------------------
# Config validation: one line, before any folder exists
# --------------------------------------------------------------------------


def test_experiment_that_is_not_a_table(tmp_path):
    f = tmp_path / "x.toml"
    f.write_text('experiment = "x"\n[policies.a]\npreset = "hivemind-2025-bug"\n')
    line = one_error_line(cli("run", f, "--out", tmp_path / "out"), 2)
    assert "experiment: expected a table" in line
    assert not (tmp_path / "out").exists()


def test_config_that_is_a_device_is_refused(tmp_path):
    link = tmp_path / "zero.toml"
    link.symlink_to("/dev/zero")
    line = one_error_line(cli("run", link, "--out", tmp_path / "out", timeout=60,
                              preexec_fn=memory_limit()), 2)
    assert "zero.toml" in line and "not a regular file" in line


def test_config_larger_than_the_cap_is_refused(tmp_path):
    f = tmp_path / "big.toml"
    f.write_text(TINY.format(extra="", workload="", tail="") + "# x\n" * 400_000)
    with pytest.raises(ConfigError, match=r"big.toml: larger than 1024 KiB"):
        load_experiment(f)


def test_a_huge_grid_is_refused_with_its_count(tmp_path, monkeypatch):
    values = ", ".join(str(10 + i) for i in range(100))
    tail = f'[grid]\n"experiment.seed" = [{values}]\n"experiment.candidates" = [{values}]\n' \
           f'"experiment.budget_tokens" = [{values}]\n'
    f = tiny(tmp_path, tail=tail)
    line = one_error_line(cli("run", f, "--out", tmp_path / "out", timeout=60,
                              preexec_fn=memory_limit()), 2)
    assert "grid: 1,000,000 combinations" in line and "MEMSIM_MAX_RUNS" in line
    monkeypatch.setenv("MEMSIM_MAX_RUNS", "2000000")
    t0 = time.monotonic()
    assert load_experiment(f).n_runs() == 1_000_000
    assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("knob", ["horizon_days = 1e9", "notes_per_day = 1e9",
                                  "embedding_dim = 1000000000", "n_topics = 1000000000",
                                  "n_actors = 1000000000"])
def test_a_stream_too_large_for_memory_is_refused(tmp_path, knob):
    text = TINY.format(extra="", workload="", tail="")
    key = knob.split(" = ")[0]
    text = "\n".join(line for line in text.splitlines() if not line.startswith(key + " "))
    text = text.replace("[workload]", f"[workload]\n{knob}")
    f = tmp_path / "big.toml"
    f.write_text(text)
    line = one_error_line(cli("run", f, "--out", tmp_path / "out", timeout=60,
                              preexec_fn=memory_limit()), 2)
    assert "GiB of memory" in line and "MEMSIM_MAX_STREAM_GB" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("setting", ["budget_tokens = 9223372036854775807",
                                     "budget_tokens = 1000000000000000000000000000000",
                                     "budgets = [100, 1099511627777]",
                                     "candidates = 10000000"])
def test_budgets_and_candidates_are_bounded(tmp_path, setting):
    key = setting.split(" = ")[0]
    text = TINY.format(extra=setting, workload="", tail="")
    text = "\n".join(ln for ln in text.splitlines() if not ln.startswith(key + " ")
                     or ln == setting)
    f = tmp_path / "b.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=rf"experiment\.{key}"):
        load_experiment(f)


def test_policy_candidates_are_bounded(tmp_path):
    with pytest.raises(ConfigError, match=r"policies\.a\.candidates"):
        load_experiment(tiny(tmp_path), ["policies.a.candidates=10000000"])


def test_a_long_name_is_refused_before_any_folder(tmp_path):
    line = one_error_line(cli("run", tiny(tmp_path), "--out", tmp_path / "out",
                              "--set", "experiment.name=" + "n" * 5000), 2)
    assert "experiment.name" in line and len(line) < 400
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_a_missing_source_is_found_before_any_folder(tmp_path):
    f = tmp_path / "src.toml"
    f.write_text('[workload]\nsource = "nowhere"\n[policies.a]\npreset = "hivemind-2025-bug"\n')
    line = one_error_line(cli("run", f, "--out", tmp_path / "out"), 2)
    assert "workload.source" in line and "nowhere" in line
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------
# workload.source: relative to the experiment file, hashed on content
# --------------------------------------------------------------------------


def _stream_experiment(tmp_path: Path) -> Path:
    from memsim.data.stream import write_stream

    exp = experiment_from_dict(tomllib.loads(TINY.format(extra="", workload="", tail="")))
    write_stream(exp.workload.generate(1), tmp_path / "proj" / "stream")
    f = tmp_path / "proj" / "replay.toml"
    f.write_text('[experiment]\nreplicates = 1\n[workload]\nsource = "stream"\n'
                 '[policies.a]\npreset = "hivemind-2025-bug"\n')
    return f


def test_a_relative_source_is_relative_to_the_experiment_file(tmp_path, monkeypatch):
    f = _stream_experiment(tmp_path)
    monkeypatch.chdir(tmp_path)
    a = load_experiment(Path("proj") / "replay.toml")
    monkeypatch.chdir(tmp_path / "proj")
    b = load_experiment("replay.toml")
    wl = a.to_config()["workload"]
    assert wl["source"] == str(tmp_path / "proj" / "stream")
    assert wl["source_hash"].startswith("sha256:")
    assert a.hash8() == b.hash8()
    # the resolved config runs from anywhere, and a moved stream keeps its hash
    resolved = tmp_path / "config.toml"
    resolved.write_text(dumps_toml(a.to_config()))
    monkeypatch.chdir("/")
    assert load_experiment(resolved).hash8() == a.hash8()
    moved, h = a.to_config(), a.hash8()
    (tmp_path / "proj" / "stream").rename(tmp_path / "moved")
    moved["workload"]["source"] = str(tmp_path / "moved")
    assert experiment_from_dict(moved).hash8() == h
    # content that changed since the config was written is refused
    (tmp_path / "moved" / "stream.json").write_text(
        (tmp_path / "moved" / "stream.json").read_text() + " ")
    with pytest.raises(ConfigError, match="workload.source_hash"):
        experiment_from_dict(moved)
    assert f.exists()


# --------------------------------------------------------------------------
# The resolved config.toml: written with tomli-w, read back equal
# --------------------------------------------------------------------------

_TEXT = st.text(st.characters(codec="utf-8"), max_size=30)


@settings(max_examples=60, deadline=None)
@given(description=_TEXT, name=_TEXT, policy=_TEXT)
def test_any_string_round_trips_through_the_resolved_config(description, name, policy):
    table = {"experiment": {"name": name, "description": description, "budgets": [1, 2]},
             "policies": {policy: {"preset": policy, "decay": {"kind": policy, "x": 0.5}}},
             "grid": {f"policies.{policy}.x": [1, 2.5, "a\x7f"]}}
    text = dumps_toml(table)
    back = tomllib.loads(text)
    assert back == table
    assert config_hash(back) == config_hash(table)


def test_a_description_with_a_control_character_reruns(tmp_path):
    f = tiny(tmp_path)
    out = tmp_path / "out"
    res = cli("run", f, "--out", out, "--quiet", "--no-report",
              "--set", 'experiment.description="a\\u007fb\\u0001c"')
    assert res.returncode == 0, res.stderr
    folder = Path(res.stdout.strip().splitlines()[-1])
    assert tomllib.loads((folder / "config.toml").read_text())["experiment"][
        "description"] == "a\x7fb\x01c"
    again = cli("run", folder / "config.toml", "--out", out, "--quiet", "--no-report")
    assert again.returncode == 0, again.stderr


# --------------------------------------------------------------------------
# --out and the disk
# --------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["file", "under-file", "read-only"])
def test_an_unusable_out_is_one_line(tmp_path, case):
    if case == "read-only" and os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    f = tiny(tmp_path)
    (tmp_path / "afile").write_text("x")
    out = {"file": tmp_path / "afile", "under-file": tmp_path / "afile" / "sub",
           "read-only": tmp_path / "ro"}[case]
    if case == "read-only":
        out.mkdir()
        out.chmod(0o500)
    try:
        line = one_error_line(cli("run", f, "--out", out, "--quiet"), 2)
    finally:
        if case == "read-only":
            out.chmod(0o700)
    assert "--out" in line


@pytest.mark.parametrize("limit", [1024, 2048, 6000, 40_000])
def test_a_full_disk_is_one_line_and_leaves_no_folder_without_manifest(tmp_path, limit):
    f = tiny(tmp_path)
    out = tmp_path / "out"
    res = cli("run", f, "--out", out, "--quiet", preexec_fn=file_size_limit(limit))
    line = one_error_line(res, 1)
    assert "File too large" in line or "disk full" in line
    assert folders_without_manifest(out) == []
    for folder in out.iterdir() if out.exists() else []:
        assert run_status(folder)["status"] == "failed"
        assert not (folder / "summary.csv").exists()
        assert not list(folder.glob(".*tmp*"))


# --------------------------------------------------------------------------
# The report step, signals
# --------------------------------------------------------------------------


def test_a_completed_run_reports_completed(tmp_path):
    res = cli("run", tiny(tmp_path), "--out", tmp_path / "out", "--quiet")
    assert res.returncode == 0, res.stderr
    folder = Path(res.stdout.strip().splitlines()[-1])
    md = (folder / "report.md").read_text()
    assert "running" not in md and "completed" in md
    assert run_status(folder)["status"] == "completed"
    assert (folder / "summary.csv").exists()


def test_a_failed_report_leaves_no_summary(tmp_path, monkeypatch):
    import memsim.runs.runner as runner

    def broken(path, **kwargs):  # progress= as the runner passes it
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runner, "build_report", broken)
    with pytest.raises(OSError):
        runner.run_experiment(tiny(tmp_path), out=tmp_path / "out")
    (folder,) = (tmp_path / "out").iterdir()
    assert run_status(folder)["status"] == "failed"
    assert not (folder / "summary.csv").exists()


def test_a_signal_stops_the_queue_of_a_batch(tmp_path):
    """SIGTERM during `run A B C D --jobs 2`: queued runs never start, and the
    running ones end failed."""
    files = [tiny(tmp_path, f"e{i}.toml", extra=f'description = "{i}"',
                  workload="") for i in range(4)]
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # 400 replicates: minutes of work per run, so that no run ends before the
    # signal, however slow the machine is to start the second one
    proc = subprocess.Popen([sys.executable, "-m", "memsim.cli", "run", *map(str, files),
                             "--jobs", "2", "--quiet", "--no-report", "--out", str(out),
                             "--set", "experiment.replicates=400",
                             "--set", "workload.horizon_days=200"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:
        if out.exists() and len([p for p in out.iterdir()
                                 if (p / "manifest.json").exists()]) >= 2:
            break
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == 143  # 128 + SIGTERM
    folders = list(out.iterdir())
    assert len(folders) == 2, folders
    for folder in folders:
        assert run_status(folder)["status"] == "failed"
        assert not (folder / "summary.csv").exists()


def test_ctrl_c_works_when_started_with_sigint_ignored(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "memsim.cli", "run", str(tiny(tmp_path)),
                             "--quiet", "--no-report", "--out", str(out),
                             "--set", "experiment.replicates=400",
                             "--set", "workload.horizon_days=200"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60 and not list(out.glob("*/manifest.json")):
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    (folder,) = out.iterdir()
    assert run_status(folder)["status"] == "failed"


# --------------------------------------------------------------------------
# Sweep storage
# --------------------------------------------------------------------------


@pytest.mark.parametrize("storage", ["journal:{tmp}", "foo://bar", "journal:{tmp}/afile/x.log"])
def test_a_bad_storage_leaves_no_folder(tmp_path, storage):
    (tmp_path / "afile").write_text("x")
    f = tiny(tmp_path, tail=SWEEP)
    out = tmp_path / "out"
    line = one_error_line(cli("sweep", f, "--out", out, "--quiet",
                              "--storage", storage.format(tmp=tmp_path)), 2)
    assert "--storage" in line
    assert not out.exists() or not list(out.iterdir())


@pytest.mark.slow
def test_a_torn_journal_is_repaired_on_resume(tmp_path):
    f = tiny(tmp_path, tail=SWEEP)
    out = tmp_path / "out"
    first = cli("sweep", f, "--out", out, "--quiet", "--no-report", timeout=300)
    assert first.returncode == 0, first.stderr
    (folder,) = out.iterdir()
    journal = folder / "sweep" / "journal.log"
    size = journal.stat().st_size
    # resume with more trials under a file-size limit just above the journal
    torn = cli("sweep", f, "--out", out, "--quiet", "--no-report", "--trials", "5",
               preexec_fn=file_size_limit(size + 100), timeout=300)
    assert torn.returncode == 1, torn.stderr
    assert "Traceback" not in torn.stderr
    assert not journal.read_bytes().endswith(b"\n")  # the write was cut short
    ok = cli("sweep", f, "--out", out, "--quiet", "--no-report", "--trials", "5",
             timeout=300)
    assert ok.returncode == 0, ok.stderr
    side = list(journal.parent.glob("journal.log.torn-*"))
    assert len(side) == 1 and side[0].stat().st_size > 0
    (warning,) = [ln for ln in ok.stderr.splitlines() if "torn" in ln]
    assert warning.startswith("memsim: warning: ") and str(side[0]) in warning
    for line in journal.read_bytes().splitlines():
        json.loads(line)
    assert json.loads((folder / "manifest.json").read_text())["status"] == "completed"


def test_a_journal_torn_in_the_middle_keeps_every_record(tmp_path):
    from memsim.sweep.storage import repair_journal

    journal = tmp_path / "journal.log"
    recs = [json.dumps({"op_code": i, "x": "y" * i}) for i in range(4)]
    journal.write_bytes((recs[0] + "\n" + recs[1][:7] + recs[2] + "\n" + recs[3] + "\n")
                        .encode())
    assert repair_journal(journal) == 7
    assert journal.read_text().splitlines() == [recs[0], recs[2], recs[3]]
    assert (tmp_path / "journal.log.torn-1").read_text() == recs[1][:7]
    assert repair_journal(journal) == 0


def test_a_run_that_fails_after_others_names_the_folders_completed_before_it(tmp_path, capsys):
    """``memsim run A.toml B.toml`` whose B's stream is broken (found when B
    starts): exit 2, B's error, and A's folder, complete and kept, named."""
    import pandas as pd

    from memsim.cli import main

    good = _stream_experiment(tmp_path)
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    (tmp_path / "proj" / "stream").rename(bad_dir / "stream")
    _stream_experiment(tmp_path)  # the good stream again
    notes = pd.read_parquet(bad_dir / "stream" / "notes.parquet")
    notes.loc[0, "tokens"] = -5
    notes.to_parquet(bad_dir / "stream" / "notes.parquet")
    bad = bad_dir / "replay.toml"
    bad.write_text(good.read_text())
    out = tmp_path / "out"
    assert main(["run", str(good), str(bad), "--no-report", "--out", str(out), "-q"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("memsim: error: ") and "tokens" in err[0]
    done = [line.removeprefix("memsim: completed before the error: ") for line in err[1:]]
    assert len(done) == 1 and Path(done[0]).parent == out
    assert run_status(done[0])["status"] == "completed"
    assert (Path(done[0]) / "summary.csv").exists()
