"""Reliability: bad input, interrupted runs, concurrent writers, safety."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memsim
from memsim.runs.config import experiment_from_dict
from memsim.core.errors import ConfigError, MemsimError
from memsim.reporting.rundir import run_status

from .helpers import tiny_stream
from .test_engine import run

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "experiments" / "quickstart.toml"


def _cli(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "memsim.cli", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _wait_for_folder(out: Path, timeout: float = 60.0) -> Path:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        folders = [p for p in out.glob("*") if (p / "manifest.json").exists()]
        if folders:
            return folders[0]
        time.sleep(0.05)
    raise AssertionError("no run folder appeared")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_an_interrupted_run_never_looks_complete(tmp_path, sig):
    out = tmp_path / "r"
    proc = _cli("run", str(QUICKSTART), "--out", str(out), "--quiet", "--no-report",
                "--set", "experiment.replicates=20")
    folder = _wait_for_folder(out)
    time.sleep(0.5)
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    status = run_status(folder)
    assert status["status"] == "failed", status
    assert not (folder / "summary.csv").exists()
    assert not list(folder.glob(".*tmp*"))
    # the documented way back: re-run the resolved config into a new folder
    assert (folder / "config.toml").exists()


def _children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` (Linux /proc; zombies,
    which have exited, are not counted)."""
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            kids.append(int(stat.parent.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
@pytest.mark.parametrize("runs", [1, 2])
def test_a_killed_runs_workers_stop_with_it(tmp_path, runs):
    """``--jobs 2`` and the parent SIGKILLed (it cannot stop its workers):
    each worker notices it has no parent and stops: a replicate's at once,
    a run's (two experiments at once) marking its folder failed. Before,
    a worker blocked in sending its result lived on for good."""
    out = tmp_path / "r"
    proc = _cli("run", *[str(QUICKSTART)] * runs, "--out", str(out), "--quiet", "--no-report",
                "--jobs", "2", "--set", "experiment.replicates=20")
    _wait_for_folder(out)
    t0 = time.monotonic()
    while len(_children(proc.pid)) < 2 and time.monotonic() - t0 < 60:
        time.sleep(0.05)
    workers = _children(proc.pid)
    assert len(workers) >= 2, workers
    proc.kill()
    proc.communicate(timeout=60)
    t0 = time.monotonic()
    while any(_alive(w) for w in workers) and time.monotonic() - t0 < 30:
        time.sleep(0.1)
    left = [w for w in workers if _alive(w)]
    for w in left:  # not to leave them running after a failure
        os.kill(w, signal.SIGKILL)
    assert not left
    folders = [p for p in out.glob("*") if (p / "manifest.json").exists()]
    assert folders and all(run_status(f)["status"] == "failed" for f in folders)
    assert not any((f / "summary.csv").exists() for f in folders)


def test_two_runs_at_once_never_share_a_folder(tmp_path):
    out = tmp_path / "r"
    args = ("run", str(QUICKSTART), "--out", str(out), "--quiet", "--no-report",
            "--set", "experiment.replicates=1", "--set", "workload.horizon_days=20",
            "--set", "workload.backfill_days=10")
    procs = [_cli(*args) for _ in range(2)]
    paths = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr
        paths.append(stdout.strip().splitlines()[-1])
    assert len(set(paths)) == 2
    for p in paths:
        assert json.loads((Path(p) / "manifest.json").read_text())["status"] == "completed"


def test_run_names_cannot_escape_the_results_folder():
    table = {"experiment": {"name": "../../etc"}, "policies": {"s": {"preset": "similarity-only"}}}
    with pytest.raises(ConfigError, match="experiment.name"):
        experiment_from_dict(table)


# -- fuzzing config loading -----------------------------------------------------

KEYS = ["experiment", "workload", "policies", "grid", "sweep", "reader", "experimnt",
        "seed", "replicates", "budget_tokens", "horizon_days", "decay", "kind", "half_life_days",
        "floor", "preset", "packer", "sim", "rate", "classes", "evergreen", "share", "name"]
SCALARS = st.one_of(
    st.integers(-5, 10**6), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.sampled_from(["", "similarity-only", "hivemind-2025-bug", "half-life",
                                    "skip-fill", "x", "per-tick"]),
)
TABLES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
    max_leaves=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS), TABLES, max_size=5))
def test_any_config_either_loads_or_raises_config_error(table):
    try:
        exp = experiment_from_dict(table)
    except ConfigError as exc:
        # every mistake of the file at once, each of them one line
        assert exc.errors and all("\n" not in msg for msg in exc.errors)
        assert len(exc.errors) > 1 or "\n" not in str(exc)
        return
    assert exp.policies  # a loaded experiment is usable


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["half_life_days", "floor", "rate"]),
       st.one_of(st.just(math.nan), st.just(math.inf), st.just(-math.inf),
                 st.floats(-1e6, -1e-9), st.just("7")))
def test_bad_numbers_are_refused_by_name(param, value):
    kind = {"half_life_days": "half-life", "floor": "half-life-floor", "rate": "per-day"}[param]
    table = {"policies": {"p": {"decay": {"kind": kind, param: value}}}}
    with pytest.raises(ConfigError, match=param):
        experiment_from_dict(table)


# -- extreme but valid streams run, with documented NaNs ------------------------------


def test_extreme_values_do_not_crash_the_engine():
    s = tiny_stream(created=[-1e9, 0.0, 1e9 - 1], tokens=[10**12, 5, 7],
                    note_vecs=[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]],
                    queries=[(1e9, [1.0, 0.0]), (1e9, [0.0, 0.0])],
                    qrels=[(0, 0, 1.0), (0, 1, 0.5)])
    res = run(s, {"bug": {"preset": "hivemind-2025-bug"}, "sim": {"preset": "similarity-only"}},
              budget_tokens=100)
    q = res.queries
    assert (q["tokens_used"] <= 100).all()
    # query 1 has no relevant note: recall and utility_ratio are undefined (NaN)
    nores = q[q["query_id"] == 1]
    assert nores["recall"].isna().all() and nores["utility_ratio"].isna().all()
    assert (nores["n_relevant"] == 0).all()
    # the zero query vector has similarity 0 to everything, not NaN
    assert np.isfinite(nores["n_packed"]).all()


def test_an_empty_stream_gives_empty_results():
    s = tiny_stream(created=[], tokens=[], note_vecs=np.zeros((0, 2)), queries=[], qrels=[])
    res = run(s, {"sim": {"preset": "similarity-only"}})
    assert len(res.queries) == 0


def test_queries_before_any_note_exists():
    s = tiny_stream(created=[5.0], tokens=[3], note_vecs=[[1.0, 0.0]],
                    queries=[(1.0, [1.0, 0.0])], qrels=[])
    res = run(s, {"sim": {"preset": "similarity-only"}})
    assert res.queries.iloc[0]["n_packed"] == 0
    assert np.isnan(res.queries.iloc[0]["precision"])


def test_user_errors_share_one_base_class():
    assert issubclass(ConfigError, MemsimError) and issubclass(memsim.StreamError, MemsimError)


def test_stale_running_manifest_reads_failed(tmp_path):
    # a manifest left "running" by a process that no longer exists
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"status": "running", "pid": dead.pid, "host": os.uname().nodename}))
    assert run_status(tmp_path)["status"] == "failed"
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"status": "running", "pid": os.getpid(), "host": os.uname().nodename}))
    assert run_status(tmp_path)["status"] == "running"
