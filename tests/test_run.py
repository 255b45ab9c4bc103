"""Run folders, reproducibility and the `memsim run` command."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pandas as pd
import pytest

import memsim
import memsim.runs.runner
from memsim.reporting import rundir
from memsim.cli import main
from memsim.core.errors import ConfigError
from memsim.reporting.rundir import RunResult
from .helpers import TINY_TOML

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "experiments" / "quickstart.toml"
SMALL = ["experiment.replicates=2", "workload.horizon_days=30", "workload.backfill_days=30",
         "workload.queries_per_day=3", "workload.notes_per_day=5"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    res = memsim.run_experiment(QUICKSTART, overrides=SMALL, out=out, report=False)
    return res.path


def test_run_folder_holds_every_file(run_dir):
    assert run_dir.name.split("_", 1)[1].startswith("quickstart_")
    for name in ("config.toml", "manifest.json", "queries.parquet", "summary.csv",
                 "store.parquet", "arms.csv"):
        assert (run_dir / name).exists(), name
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["versions"]["numpy"]
    assert not list(run_dir.glob(".*tmp*"))  # no temporary files left behind


def test_summary_has_ci_per_policy_and_metric(run_dir):
    s = pd.read_csv(run_dir / "summary.csv")
    assert set(s.columns) >= {"policy", "metric", "mean", "ci_low", "ci_high", "n"}
    u = s[s["metric"] == "utility"]
    assert len(u) == 3  # the quickstart's three policies
    assert ((u["ci_low"] <= u["mean"]) & (u["mean"] <= u["ci_high"])).all()
    q = pd.read_parquet(run_dir / "queries.parquet")
    row = u.iloc[0]
    mine = q[q["policy"] == row["policy"]]
    # the point estimate weighs replicates equally: the mean of per-replicate means
    assert row["mean"] == pytest.approx(mine.groupby("replicate")["utility"].mean().mean())
    # the interval is over replicates, or over the pooled queries when they are few
    assert row["n"] == (2 if row["ci_over"] == "replicates" else len(mine))


def test_summary_has_the_pooled_utility_share(run_dir):
    s = pd.read_csv(run_dir / "summary.csv")
    q = pd.read_parquet(run_dir / "queries.parquet")
    assert {"harm", "oracle_utility", "recall_age_90_inf"} <= set(q.columns)
    assert (q["harm"] >= 0).all()
    assert q.loc[q["oracle_utility"] == 0, "utility_ratio"].isna().all()
    share = s[s["metric"] == "utility_share"].set_index("policy")
    assert len(share) == 3 and (share["ci_method"] == "bootstrap-ratio").all()
    for pol, r in share.iterrows():
        mine = q[(q["policy"] == pol) & (q["oracle_utility"] > 0)]
        # one pooled ratio over every replicate's queries, not a mean of ratios
        assert r["mean"] == pytest.approx(mine["utility"].sum() / mine["oracle_utility"].sum())
        assert r["ci_low"] <= r["mean"] <= r["ci_high"]
        assert r["n"] == len(mine)  # 2 replicates: the interval is over queries


def test_load_run_gives_what_run_experiment_returned(tmp_path):
    res = memsim.run_experiment(QUICKSTART, overrides=SMALL, out=tmp_path, report=False)
    back = memsim.load_run(res.path)
    assert isinstance(res, RunResult) and isinstance(back, RunResult)
    pd.testing.assert_frame_equal(res.queries, back.queries)
    pd.testing.assert_frame_equal(res.store, back.store)
    assert back.arms.shape == res.arms.shape and back.summary.shape == res.summary.shape
    assert back.rankings is None and back.experiment is None
    assert back.config == tomllib.loads(
        (res.path / "config.toml").read_text()) == res.experiment.to_config()
    assert back.manifest["status"] == res.manifest["status"] == "completed"
    assert back.baseline == res.baseline == "bug-5pct-per-day"
    assert back.policies == res.policies and set(back.policies) == set(
        res.experiment.policies)
    assert back.timings == pytest.approx(res.timings)
    assert RunResult.load(res.path).path == res.path
    with pytest.raises(ConfigError, match="not a run folder"):
        memsim.load_run(tmp_path)


def test_manifest_needs_no_experiment(tmp_path):
    folder = rundir.new_run_dir(tmp_path, "plain", "0123abcd")
    m = rundir.Manifest(folder, name="plain", config_hash="0123abcd", argv=["x"])
    assert rundir.run_status(folder)["status"] == "running"
    m.update(status="completed")
    status = rundir.run_status(folder)
    assert status["status"] == "completed" and status["argv"] == ["x"]
    assert status["pid"] == os.getpid() and status["config_hash"] == "0123abcd"
    assert not list(folder.glob(".*tmp*"))


def test_pid_alive():
    me = os.getpid()
    assert rundir.pid_alive(me)
    assert rundir.pid_alive(me, rundir.proc_start(me))
    assert rundir.pid_alive(me, "")
    assert not rundir.pid_alive(0) and not rundir.pid_alive(-1)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert not rundir.pid_alive(proc.pid)
    if rundir.proc_start(me):  # a host with /proc: a reused pid reads as gone
        assert not rundir.pid_alive(me, "not-my-start")


def test_layers_reports_read_run_folders_only():
    # rundir sits low; reports never import the runner or config
    import ast

    def imports(module: str) -> set[str]:
        tree = ast.parse((ROOT / "memsim" / "reporting" / f"{module}.py").read_text())
        out = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                out.add(("." * node.level) + (node.module or ""))
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
        return out

    # (the metrics' names and the summary's replicate rule: below the reports;
    # the data layer's readers, for the exports that re-read a run's source;
    # the printed numbers' rules, the reports' lowest layer)
    bottom = {"memsim.core.params", "memsim.core.rng", "memsim.core.errors", "memsim.data.stream",
              "memsim.data.datasets", "memsim.data.importers", "memsim.evaluation.metrics",
              ".numbers"}
    # ranx: the optional IR export (RunResult.to_ranx), imported inside it alone
    for name in imports("rundir"):
        assert name in bottom or not name.startswith((".", "memsim")) and name.split(".")[0] in (
            sys.stdlib_module_names | {"numpy", "pandas", "pyarrow", "ranx"}), name
    for module in ("report", "compare"):
        assert not {m for m in imports(module) if m.startswith(("memsim.runs", "memsim.engine"))}
    assert memsim.runs.runner.write_atomic is rundir.write_atomic
    assert memsim.runs.runner.RunResult is rundir.RunResult is memsim.RunResult


def test_resolved_config_reproduces_the_run_bit_for_bit(run_dir, tmp_path):
    again = memsim.run_experiment(run_dir / "config.toml", out=tmp_path, report=False)
    a = pd.read_parquet(run_dir / "queries.parquet")
    b = pd.read_parquet(again.path / "queries.parquet")
    pd.testing.assert_frame_equal(a, b)
    assert tomllib.loads((again.path / "config.toml").read_text()) == tomllib.loads(
        (run_dir / "config.toml").read_text())


def test_another_seed_gives_other_numbers(run_dir):
    other = memsim.run_experiment(QUICKSTART, overrides=SMALL + ["experiment.seed=1"], out=None)
    a = pd.read_parquet(run_dir / "queries.parquet")
    assert not a["utility"].reset_index(drop=True).equals(
        other.queries["utility"].reset_index(drop=True))


def test_folders_are_never_reused(run_dir, tmp_path):
    out = tmp_path / "r"
    a = memsim.run_experiment(QUICKSTART, overrides=SMALL[:1] + SMALL[2:] +
                              ["experiment.replicates=1"], out=out, report=False)
    b = memsim.run_experiment(a.path / "config.toml", out=out, report=False)
    assert a.path != b.path and a.path.exists() and b.path.exists()


def test_a_failing_run_is_marked_failed(tmp_path, monkeypatch):
    import memsim.runs.runner as runner

    def boom(*a, **k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(runner, "simulate_experiment", boom)
    with pytest.raises(RuntimeError):
        memsim.run_experiment(QUICKSTART, overrides=SMALL, out=tmp_path, report=False)
    (folder,) = tmp_path.iterdir()
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "disk on fire" in manifest["error"]
    assert not (folder / "summary.csv").exists()


def test_cli_run_prints_the_folder_last(tmp_path, capsys):
    code = main(["run", str(QUICKSTART), "--out", str(tmp_path), "--quiet", "--no-report",
                 *sum((["--set", s] for s in SMALL), [])])
    assert code == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert Path(last).is_dir() and Path(last).parent == tmp_path


@pytest.mark.parametrize("args, needle", [
    (["--set", "policies.half-life-180-floor.decay.half_life_days=-1"], "half_life_days"),
    (["--set", "experiment.replicats=2"], "did you mean 'replicates'"),
    (["--set", "policies.half-life-180-floor.preset=nope"], "unknown preset 'nope'"),
    (["--set", "policies.fixed.decay.floor=0.2"], "no policy 'fixed'"),
])
def test_cli_user_mistakes_exit_2_with_one_line_and_no_folder(tmp_path, args, needle):
    proc = subprocess.run([sys.executable, "-m", "memsim.cli", "run", str(QUICKSTART),
                           "--out", str(tmp_path / "r"), "--quiet", *args],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()


def test_cli_grid_runs_in_parallel_jobs(tmp_path):
    exp = tmp_path / "grid.toml"
    exp.write_text(QUICKSTART.read_text() + '\n[grid]\n"experiment.budget_tokens" = [300, 900]\n')
    proc = subprocess.run([sys.executable, "-m", "memsim.cli", "run", str(exp), "--out",
                           str(tmp_path / "r"), "--quiet", "--no-report", "--jobs", "2",
                           *sum((["--set", s] for s in SMALL[:1] + ["experiment.replicates=1"]
                                 + SMALL[1:]), [])],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    paths = [Path(p) for p in proc.stdout.strip().splitlines()]
    assert len(paths) == 2
    budgets = sorted(pd.read_parquet(p / "queries.parquet")["budget"].iloc[0] for p in paths)
    assert budgets == [300, 900]


def test_cli_run_defaults_to_a_results_folder_in_the_working_directory(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "memsim.cli", "run", str(QUICKSTART), "--quiet",
                           "--no-report", *sum((["--set", s] for s in SMALL[1:]), []),
                           "--set", "experiment.replicates=1"],
                          capture_output=True, text=True, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    last = Path(proc.stdout.strip().splitlines()[-1])
    assert last.parent == Path("results") and (tmp_path / last / "summary.csv").exists()


# ---------------------------------------------------------------------------
# The tidy recall-by-age table, and compare() over several runs
# ---------------------------------------------------------------------------


def test_recall_by_age_is_one_row_per_policy_budget_and_bucket(run_dir):
    run = memsim.load_run(run_dir)
    r = run.recall_by_age()
    assert list(r.columns) == ["policy", "budget", "bucket", "low_days", "high_days", "recall",
                               "ci_low", "ci_high", "n"]
    buckets = ["0-7", "7-30", "30-90", "90-180", "180-365", "365+"]
    assert len(r) == 3 * len(buckets)  # three policies, one budget
    for _, g in r.groupby("policy", sort=False):
        assert g["bucket"].tolist() == buckets
        assert g["low_days"].tolist() == [0, 7, 30, 90, 180, 365]
        assert g["high_days"].tolist() == [7, 30, 90, 180, 365, float("inf")]
    # the same numbers as the summary's recall_age_* rows
    s = run.summary.set_index(["policy", "metric"])
    for row in r.itertuples(index=False):
        hi = "inf" if row.high_days == float("inf") else int(row.high_days)
        want = s.loc[(row.policy, f"recall_age_{int(row.low_days)}_{hi}")]
        assert row.n == want["n"]
        assert row.recall == pytest.approx(want["mean"], nan_ok=True)
        assert row.ci_low == pytest.approx(want["ci_low"], nan_ok=True)
    # RunResult.load and a run in memory give the same table
    pd.testing.assert_frame_equal(RunResult.load(run_dir).recall_by_age(), r)
    # without a summary: the summary's means (over replicates of each
    # replicate's mean), no intervals
    bare = RunResult(queries=run.queries).recall_by_age()
    assert bare[["policy", "bucket", "n"]].equals(r[["policy", "bucket", "n"]])
    assert bare["ci_low"].isna().all()
    one = run.queries[run.queries["policy"] == r["policy"].iloc[0]]
    assert bare["recall"].iloc[0] == pytest.approx(
        one.groupby("replicate")["recall_age_0_7"].mean().mean())


@pytest.fixture(scope="module")
def two_runs(run_dir):
    """The run folder, the same experiment again in memory with a shorter
    half-life in one policy, and a one-replicate run."""
    a = memsim.load_run(run_dir)
    exp = memsim.load_experiment(run_dir / "config.toml")
    b = memsim.run_experiment(exp.with_overrides(
        {"policies.half-life-180-floor.decay.half_life_days": 10.0}), out=None)
    one = memsim.run_experiment(exp.with_overrides({"experiment.replicates": 1}), out=None)
    return a, b, one


def test_compare_several_runs_labels_colliding_policies(two_runs):
    a, b, _ = two_runs
    cmp = memsim.compare([a, b], labels=["before", "after"],
                         metrics=["utility", "recall", "ndcg@10"])
    pols = ["bug-5pct-per-day", "half-life-180-floor", "no-decay"]
    assert cmp.policies == [f"before/{p}" for p in pols] + [f"after/{p}" for p in pols]
    assert cmp.baseline == "before/bug-5pct-per-day"  # the first run's baseline
    df = cmp.to_dataframe()
    same = df[(df["policy"] == "after/bug-5pct-per-day") & (df["metric"] == "recall")].iloc[0]
    assert same["diff"] == 0 and same["ties"] == same["n_pairs"] > 0  # paired query by query
    # without labels: the experiments share a name, the in-memory run has no folder
    assert memsim.compare([a, b]).policies[0] == "run1/bug-5pct-per-day"
    # paths work too, and one run in a list is that run
    assert memsim.compare([a.path]).policies == pols


def test_compare_refuses_runs_that_cannot_be_paired(two_runs):
    a, _, one = two_runs
    with pytest.raises(ConfigError, match=r"cannot pair run 'run1' \(2 replicates, .*\) with "
                                          r"run 'run2' \(1 replicate, .*\).*paired=False"):
        memsim.compare([a, one])
    # the same ids, other queries: another workload
    moved = a.queries.assign(t=a.queries["t"] + 1.0)
    with pytest.raises(ConfigError, match=r"different queries under the same ids \(replicate 0,"
                                          r" query_id \d+: t = "):
        memsim.compare([a.queries, moved])
    # asked for explicitly, an unpaired comparison: intervals per run, no tests
    cmp = memsim.compare([a, one], paired=False, metrics=["utility"])
    assert not cmp.paired and len(cmp.tests) == 0
    assert "unpaired" in cmp.legend()
    s = cmp.summary.set_index("policy")["mean"]
    own = memsim.compare(one, metrics=["utility"]).summary.set_index("policy")["mean"]
    assert s["run2/no-decay"] == pytest.approx(own["no-decay"])
    assert "▲" not in cmp.to_markdown() and "▼" not in cmp.to_markdown()



def test_cli_jobs_defaults_to_the_cores_and_the_api_to_one(monkeypatch):
    import inspect

    from memsim.cli import build_parser

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert memsim.runs.runner.default_jobs() == 3
    assert build_parser().parse_args(["run", "x.toml"]).jobs == memsim.runs.runner.default_jobs()
    for fn in (memsim.runs.runner.run_experiment, memsim.runs.runner.run_many,
               memsim.runs.runner.simulate_experiment):
        assert inspect.signature(fn).parameters["jobs"].default == 1


@pytest.mark.parametrize("jobs", ["0", "-2", "two"])
def test_cli_refuses_a_jobs_below_one(jobs, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", str(QUICKSTART), "--jobs", jobs])
    assert exit_.value.code == 2
    assert "--jobs" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# Mistakes found before the run folder exists
# ---------------------------------------------------------------------------

TINY = TINY_TOML


def test_a_grid_over_a_preset_runs_each_preset(tmp_path):
    exp = tmp_path / "grid.toml"
    exp.write_text(TINY + '[grid]\n"policies.a.preset" = ["hivemind", "hivemind-2025-bug"]\n')
    paths = memsim.runs.runner.run_many([memsim.load_experiment(exp)], out=tmp_path / "r",
                                        report=False)
    decays = [tomllib.loads((p / "config.toml").read_text())["policies"]["a"]["decay"]["kind"]
              for p in paths]
    assert decays == ["per-tier", "per-day"]
    q0, q1 = (pd.read_parquet(p / "queries.parquet") for p in paths)
    assert not q0.equals(q1)


def test_a_policy_the_workload_cannot_serve_is_refused_before_any_folder(tmp_path):
    exp = tmp_path / "tiny.toml"
    exp.write_text(TINY)
    with pytest.raises(ConfigError) as info:
        memsim.run_experiment(exp, overrides=["policies.a.preset=as-logged"],
                              out=tmp_path / "r", report=False)
    assert str(info.value).startswith(f"{exp}: policies.a.ranker: 'as-logged' replays")
    assert not (tmp_path / "r").exists()


def test_an_empty_trace_is_refused_before_any_folder(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    exp = tmp_path / "trace.toml"
    exp.write_text('[experiment]\nreplicates = 1\n[workload]\nsource = "empty.jsonl"\n'
                   'importer = "trace"\n[policies.a]\npreset = "hivemind"\n')
    with pytest.raises(memsim.core.errors.MemsimError, match="empty trace"):
        memsim.run_experiment(exp, out=tmp_path / "r", report=False)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("jobs", [0, -1, 1.5, "2", True])
def test_jobs_that_are_not_a_number_of_processes_are_refused(tmp_path, jobs):
    """The API refuses what --jobs refuses (jobs=0 ran as one process, "2"
    was a TypeError), before any folder exists."""
    from memsim.runs.runner import run_many, simulate_experiment

    exp = memsim.experiment_from_dict(tomllib.loads(TINY_TOML))
    for call in (lambda: memsim.run_experiment(exp, out=tmp_path, jobs=jobs),
                 lambda: run_many([exp], out=tmp_path, jobs=jobs),
                 lambda: simulate_experiment(exp, jobs=jobs)):
        with pytest.raises(ConfigError, match=r"^jobs: expected an int >= 1 \(worker "
                           rf"processes\), got {re.escape(repr(jobs))}$"):
            call()
    assert not any(tmp_path.iterdir())
