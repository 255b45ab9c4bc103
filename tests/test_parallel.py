"""Replicates in worker processes (`--jobs`): identical results, the same
errors, and interrupted runs that still end failed."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import memsim.runs.runner as runner
from memsim.cli import main
from memsim.runs.config import load_experiment
from memsim.policies import resolve_policy
from memsim.core.errors import ConfigError
from memsim.reporting.rundir import run_status

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "experiments" / "quickstart.toml"
SMALL = ["experiment.replicates=3", "workload.horizon_days=30", "workload.backfill_days=30",
         "workload.queries_per_day=3", "workload.notes_per_day=5"]


def _small(*more: str):
    return load_experiment(QUICKSTART, SMALL + list(more))


def test_two_jobs_give_the_frames_of_one(tmp_path):
    one = runner.run_experiment(_small(), out=tmp_path / "one", report=False, jobs=1)
    two = runner.run_experiment(_small(), out=tmp_path / "two", report=False, jobs=2)
    q1 = pd.read_parquet(one.path / "queries.parquet")
    pd.testing.assert_frame_equal(q1, pd.read_parquet(two.path / "queries.parquet"),
                                  check_exact=True)
    assert sorted(q1["replicate"].unique()) == [0, 1, 2]
    for name in ("queries", "store", "arms", "summary"):
        pd.testing.assert_frame_equal(getattr(one, name), getattr(two, name), check_exact=True)
    assert ((one.path / "summary.csv").read_bytes()
            == (two.path / "summary.csv").read_bytes())


def test_more_jobs_than_replicates_and_a_budget_curve_with_rankings():
    exp = _small("experiment.budgets=[300, 1500]", "experiment.save_rankings=true")
    one = runner.simulate_experiment(exp, replicates=[4, 1])
    fracs: list[float] = []
    many = runner.simulate_experiment(exp, replicates=[4, 1], jobs=8, progress=fracs.append)
    for key, frame in one.items():
        if frame is None:
            assert many[key] is None
        else:
            pd.testing.assert_frame_equal(frame, many[key], check_exact=True)
    assert list(one["queries"]["replicate"].unique()) == [4, 1]
    assert fracs == sorted(fracs) and fracs[-1] == pytest.approx(1.0)


def test_a_grid_with_spare_cores_gives_the_frames_of_one(tmp_path):
    exp = _small("experiment.replicates=2")
    grid = dataclasses.replace(exp, grid={"experiment.budget_tokens": [500, 1500]})
    serial = runner.run_many([grid], out=tmp_path / "one", jobs=1, report=False)
    parallel = runner.run_many([grid], out=tmp_path / "four", jobs=4, report=False)
    for a, b in zip(serial, parallel):
        pd.testing.assert_frame_equal(pd.read_parquet(a / "queries.parquet"),
                                      pd.read_parquet(b / "queries.parquet"), check_exact=True)


def test_idle_workers_take_a_share_of_the_last_replicates_arms(monkeypatch):
    """3 replicates on 2 workers: the third runs as two groups of arms, one
    per worker, and its frames (the store's, sweep by sweep, included) are
    those of one replay of all its arms."""
    exp = _small("experiment.budgets=[300, 1500]", "experiment.save_rankings=true",
                 "policies.bug-5pct-per-day.retention=\"ai-memory\"")
    tasks = []
    real = runner._simulate_parallel

    def spy(ts, *a, **k):
        tasks.extend((r, len(arms)) for _, arms, r, _ in ts)
        return real(ts, *a, **k)

    monkeypatch.setattr(runner, "_simulate_parallel", spy)
    one = runner.simulate_experiment(exp, jobs=1)
    two = runner.simulate_experiment(exp, jobs=2)
    n = len(runner.experiment_arms(exp))
    assert tasks == [(0, n), (1, n), (2, n // 2), (2, n - n // 2)]
    assert one["store"]["t"].nunique() > 1  # sweeps at several times
    for key, frame in one.items():
        assert frame is not None
        pd.testing.assert_frame_equal(frame, two[key], check_exact=True)


@pytest.mark.skipif(importlib.util.find_spec("hnswlib") is None,
                    reason="hnswlib is not installed (pip install -e '.[ann]')")
def test_a_group_without_an_approximate_prefilter_joins_its_recall_columns():
    """``arms.csv``'s recall loss of an approximate prefilter is a column of
    every arm once one arm has one (0 queries sampled for the others): a
    replicate whose arms ran in groups, one group without such an arm, has
    the same columns and types."""
    exp = _small()
    hnsw = resolve_policy({"preset": "similarity-only",
                           "retriever": {"kind": "hnsw", "prefilter": 20, "ef": 40}},
                          "policies.zz-hnsw")
    exp = dataclasses.replace(exp, policies={**exp.policies, "zz-hnsw": hnsw})
    names = [a.policy_name for a in runner.experiment_arms(exp)]
    assert names[-1] == "zz-hnsw" and "zz-hnsw" not in [
        a.policy_name for a in runner._split(runner.experiment_arms(exp), 2)[0]]
    one = runner.simulate_experiment(exp, jobs=1)
    two = runner.simulate_experiment(exp, jobs=2)
    assert (one["arms"]["prefilter_sampled"] > 0).sum() == 3  # the hnsw arm, each replicate
    for key, frame in one.items():
        if frame is not None:
            pd.testing.assert_frame_equal(frame, two[key], check_exact=True)


def test_a_replicate_asked_for_twice_is_two_replicates_in_groups():
    """Replicates [2, 2, 2] on 2 workers (the third in groups of arms): three
    copies of replicate 2's frames, as one process gives them, not the
    groups of every copy joined into each."""
    exp = _small()
    one = runner.simulate_experiment(exp, replicates=[2, 2, 2], jobs=1)
    two = runner.simulate_experiment(exp, replicates=[2, 2, 2], jobs=2)
    for key, frame in one.items():
        if frame is not None:
            pd.testing.assert_frame_equal(frame, two[key], check_exact=True)


@pytest.mark.parametrize("arms, reps, jobs, want", [
    (17, 3, 2, [1, 1, 2]), (17, 4, 2, [1, 1, 1, 1]), (17, 2, 8, [4, 4]),
    (17, 5, 4, [1, 1, 1, 1, 4]), (1, 3, 2, [1, 1, 1]), (3, 1, 8, [3])])
def test_arm_groups_fill_the_last_round(arms, reps, jobs, want):
    got = runner._arm_groups(arms, reps, jobs)
    assert got == want
    for g in got:  # consecutive runs of arms, every arm once, as even as can be
        parts = runner._split(list(range(arms)), g)
        assert sum(parts, []) == list(range(arms))
        assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_a_replicate_split_in_groups_fails_as_one_process(tmp_path, monkeypatch):
    """The failing replicate ran as groups of arms, each failing with an arm
    of its own: the error raised is the one the replicate raises with all
    its arms in one process (the arm that fails first in time), not the
    first group's."""
    import memsim.engine.arms as engine_arms

    real_replicate, real_pack = runner._simulate_replicate, engine_arms._pack_all
    current = {}

    def replicate(exp, arms, r, *a, **k):  # runs in the worker: its replicate
        current["r"] = r
        return real_replicate(exp, arms, r, *a, **k)

    def pack_all(items):
        for job, batch, *_ in items:
            name, t = job.arm.policy_name, float(batch.t.min())
            if current.get("r") == 2 and ((name == "bug-5pct-per-day" and t > 20)
                                          or (name == "no-decay" and t > 5)):
                raise ValueError(f"{name} broke")
        return real_pack(items)

    monkeypatch.setattr(runner, "_simulate_replicate", replicate)
    monkeypatch.setattr(engine_arms, "_pack_all", pack_all)
    for mod in ("memsim.engine.scoring", "memsim.engine.walk"):
        monkeypatch.setattr(f"{mod}._pack_all", pack_all)
    assert [p.policy_name for p in runner._split(runner.experiment_arms(_small()), 2)[0]] \
        == ["bug-5pct-per-day"]  # the first group fails later than the second
    with pytest.raises(ValueError) as serial:
        runner.run_experiment(_small(), out=tmp_path / "one", report=False)
    with pytest.raises(ValueError) as parallel:
        runner.run_experiment(_small(), out=tmp_path / "two", report=False, jobs=2)
    assert str(serial.value) == str(parallel.value) == "no-decay broke"


def _break_replicates(monkeypatch, error):
    """Replicates 1 and 2 fail while their streams are generated."""
    real = runner.load_stream_for

    def load(exp, r):
        if r >= 1:
            raise error(r)
        return real(exp, r)

    monkeypatch.setattr(runner, "load_stream_for", load)


@pytest.mark.parametrize("jobs", [2, 3])
def test_a_worker_error_is_raised_as_one_process_raises_it(tmp_path, monkeypatch, jobs):
    _break_replicates(monkeypatch, lambda r: ValueError(f"replicate {r} is broken"))
    with pytest.raises(ValueError) as serial:
        runner.run_experiment(_small(), out=tmp_path / "one", report=False)
    with pytest.raises(ValueError) as parallel:
        runner.run_experiment(_small(), out=tmp_path / "two", report=False, jobs=jobs)
    assert str(serial.value) == str(parallel.value) == "replicate 1 is broken"
    # the worker's own traceback travels along as a note
    assert "in the worker process of replicate 1" in "".join(parallel.value.__notes__)
    for out in ("one", "two"):
        (folder,) = (tmp_path / out).iterdir()
        status = run_status(folder)
        assert status["status"] == "failed"
        assert status["error"] == "ValueError: replicate 1 is broken"
        assert not (folder / "summary.csv").exists()


def test_a_worker_error_is_the_same_one_line_on_the_command_line(tmp_path, monkeypatch,
                                                                   capsys):
    _break_replicates(monkeypatch, lambda r: ConfigError(f"replicate {r}:\n  bad   value"))
    lines = []
    for jobs in ("1", "2"):
        code = main(["run", str(QUICKSTART), "--jobs", jobs, "--quiet", "--no-report",
                     "--out", str(tmp_path / jobs), *(a for s in SMALL for a in ("--set", s))])
        assert code == 2
        lines.append(capsys.readouterr().err)
    assert lines[0] == lines[1] == "memsim: error: replicate 1: bad value\n"


def test_a_worker_that_dies_is_an_error(monkeypatch):
    real = runner.load_stream_for

    def load(exp, r):
        if r == 1:
            os._exit(3)
        return real(exp, r)

    monkeypatch.setattr(runner, "load_stream_for", load)
    with pytest.raises(RuntimeError, match=r"replicate 1: the worker process died \(exit code 3"):
        runner.simulate_experiment(_small(), jobs=2)


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if text in (d / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(d.name))
        except OSError:
            pass
    return pids


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_signal_during_parallel_replicates_fails_the_run(tmp_path, sig):
    out = tmp_path / "interrupted"
    proc = subprocess.Popen([sys.executable, "-m", "memsim.cli", "run", str(QUICKSTART),
                             "--jobs", "2", "--quiet", "--no-report", "--out", str(out),
                             "--set", "experiment.replicates=20"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60 and len(_processes_mentioning(str(out))) < 3:
        time.sleep(0.05)  # the run and its two replicate workers
    assert len(_processes_mentioning(str(out))) >= 3
    time.sleep(0.3)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143,
                               signal.SIGKILL: -signal.SIGKILL}[sig]
    if sig != signal.SIGKILL:
        assert err.strip() == ("memsim: interrupted" if sig == signal.SIGINT
                               else "memsim: interrupted (SIGTERM)")
    (folder,) = out.iterdir()
    assert run_status(folder)["status"] == "failed"
    assert not (folder / "summary.csv").exists()
    # no worker outlives its run (a killed parent's workers stop at their next batch)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 20 and _processes_mentioning(str(out)):
        time.sleep(0.1)
    assert _processes_mentioning(str(out)) == []
