"""Replays shared by the commands users wait on: the same numbers as one at a time.

``memsim audit`` simulates its probe points of every replicate and the
replay of its use counts in one pool of worker processes; a sweep's
robustness re-check runs every check's replays (fresh seeds, each workload
variant) in one pool; the audit's reach reads the note columns converted
once. Each must give exactly the numbers of the unshared path: the audit
point by point in this process, each check's batch on its own, the contexts
built from the notes table for each query.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import memsim
from memsim.tuning.audit import _context, _note_columns, audit
from memsim.core.errors import MemsimError
from memsim.policies.base import ArrayContext
from memsim.runs.runner import experiment_arms, load_stream_for, simulate_replicate, simulate_tasks
from memsim.sweep import SweepSpec, TrialEvaluator, robustness_check

from .test_sweep import HL, table

TASK_FLOOR = "policies.hivemind.decay.task_floor"
PROMOTE = "policies.hivemind.feedback.promote_after"


def hivemind(**workload) -> memsim.Experiment:
    """Hivemind (per-query feedback: the audit replays its use counts) on a
    small workload, with a sweep of its task floor and promotion threshold."""
    return memsim.experiment_from_dict({
        "experiment": {"name": "shared", "seed": 11, "replicates": 1},
        "workload": {"horizon_days": 12, "backfill_days": 200, "notes_per_day": 3.0,
                     "queries_per_day": 4.0, **workload},
        "policies": {"hivemind": {"preset": "hivemind"}},
        "sweep": {"objectives": [{"metric": "utility", "policy": "hivemind"},
                                 {"metric": "recall", "policy": "hivemind"}],
                  "params": {TASK_FLOOR: {"type": "float", "low": 0.0, "high": 0.9},
                             PROMOTE: {"type": "int", "low": 0, "high": 6}}},
    })


def assert_same_audit(a, b):
    for name in ("signals", "params", "reach"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)
    assert a.flags == b.flags and a.tiers == b.tiers


def test_audit_in_a_pool_gives_the_numbers_of_one_process_and_of_each_point_alone(
        monkeypatch):
    """The pooled audit (probe replays of both replicates and the use-count
    replay, two at a time) equals the audit in one process and the audit
    whose every probe point is evaluated alone, bit for bit."""
    exp = hivemind()
    calls = []
    real = memsim.sweep.evaluate.simulate_tasks

    def spy(tasks, jobs=1, progress=None):
        calls.append((len(tasks), jobs))
        return real(tasks, jobs=jobs, progress=progress)

    monkeypatch.setattr(memsim.sweep.evaluate, "simulate_tasks", spy)
    fracs = []
    pooled = audit(exp, max_queries=40, replicates=2, jobs=2, progress=fracs.append)
    assert calls == [(3, 2)]  # 2 probe replays and the use counts, in one pool
    assert fracs and fracs[-1] == 1.0 and fracs == sorted(fracs)
    monkeypatch.undo()
    serial = audit(exp, max_queries=40, replicates=2)
    assert_same_audit(pooled, serial)
    # the use counts moved: the pooled rankings are really read
    rc = pooled.signals.set_index(["signal", "policy"]).loc[("recall_count", "hivemind")]
    assert rc["max"] > 0

    def alone(self, param_sets, names=None, replicates=None, after_replicate=None,
              variant=None):
        from memsim.sweep.evaluate import TrialOutcome

        outs = []
        for params in param_sets:
            values, per = self.evaluate(params, replicates=replicates)
            outs.append(TrialOutcome(values=tuple(values), per_replicate=per))
        return outs

    monkeypatch.setattr(TrialEvaluator, "evaluate_batch", alone)
    point_by_point = audit(exp, max_queries=40, replicates=2)
    assert_same_audit(pooled, point_by_point)


def test_a_pooled_audit_whose_replay_fails_raises_the_error_of_one_process(monkeypatch):
    exp = hivemind()

    def fails(*args, **kw):
        raise MemsimError("the replay failed")

    monkeypatch.setattr(memsim.runs.runner, "_simulate_replicate", fails)
    with pytest.raises(MemsimError, match="the replay failed"):
        audit(exp, max_queries=20, replicates=2, jobs=2)


def test_audit_rejects_a_bad_jobs_value():
    with pytest.raises(memsim.ConfigError, match="--jobs: expected an integer >= 1"):
        audit(hivemind(), params=False, jobs=0)


def test_the_audited_stream_is_generated_once(monkeypatch):
    """The audited replicate's stream serves the signals and its probe
    replay: it is generated once."""
    made = []
    real = memsim.tuning.audit.load_stream_for

    def count(exp, r):
        made.append(r)
        return real(exp, r)

    monkeypatch.setattr(memsim.tuning.audit, "load_stream_for", count)
    monkeypatch.setattr(memsim.sweep.evaluate, "load_stream_for", count)
    audit(hivemind(), max_queries=20, replicates=2)
    assert sorted(made) == [0, 1]


def test_reach_contexts_from_columns_converted_once_equal_those_from_the_table():
    exp = hivemind(backfill_days=300)
    stream = load_stream_for(exp, 0)
    notes = stream.notes
    cols = _note_columns(notes)
    rng = np.random.default_rng(0)
    idx = np.sort(rng.choice(len(notes), size=25, replace=False))
    use = memsim.tuning.audit._PolicyUses([rng.integers(0, 5, 25)], [rng.integers(0, 3, 25)],
                                   [np.zeros(25, dtype=np.int64)], [np.full(25, np.nan)], 4)
    got = _context(cols, idx, 321.5, use, 0)

    def col(name):
        return notes[name].to_numpy()[idx] if name in notes else None

    want = ArrayContext(
        t=np.array([321.5]), created_at=col("created_at"), updated_at=col("updated_at"),
        last_access=use.last_access[0], recalls=use.recalls[0], tier=use.tier[0],
        memory_type=None if col("memory_type") is None else col("memory_type").astype(str),
        importance=col("importance"), salience=col("salience"),
        pinned=None if col("pinned") is None else col("pinned").astype(bool),
        distinct_actors=use.actors[0], tokens=col("tokens"), idx=idx)
    assert vars(got).keys() == vars(want).keys()
    for name, b in vars(want).items():
        a = vars(got)[name]
        if isinstance(b, np.ndarray):
            assert a.dtype == b.dtype or a.dtype.kind == b.dtype.kind == "U", name
            np.testing.assert_array_equal(a, b)
        elif isinstance(b, np.random.Generator):
            assert a.bit_generator.state == b.bit_generator.state
        else:
            assert a == b or (a is None and b is None), name


# --------------------------------------------------------------------------
# The robustness re-check: every check's replays in one pool
# --------------------------------------------------------------------------


def robust_experiment():
    t = table(own=45.0, replicates=2, robustness={
        "replicates": 2, "variants": [
            {"name": "more-notes", "workload.notes_per_day": 9.0},
            {"name": "fewer-queries", "workload.queries_per_day": 2.0}]})
    t["policies"]["r"] = {"ranker": "random", "packer": "greedy", "candidates": 20}
    t["sweep"]["params"]["policies.r.candidates"] = {"type": "int", "low": 5, "high": 40}
    t["sweep"]["objectives"] = [
        {"metric": "utility", "direction": "maximize", "policy": "p"},
        {"metric": "utility_share", "direction": "maximize", "policy": "r"}]
    return memsim.experiment_from_dict(t)


def test_the_robustness_recheck_in_one_pool_gives_the_numbers_of_each_check_alone(
        monkeypatch):
    exp = robust_experiment()
    spec = SweepSpec.from_config(exp.sweep, exp)
    cands = [{"number": 4, "role": "best", "params": {HL: 20.0, "policies.r.candidates": 9},
              "values": [0.5, 0.5]},
             {"number": 0, "role": "experiment", "params": {HL: 45.0,
                                                            "policies.r.candidates": 20},
              "values": [0.4, 0.4]}]
    calls = []
    real = memsim.sweep.evaluate.simulate_tasks

    def spy(tasks, jobs=1, progress=None):
        calls.append((len(tasks), jobs))
        return real(tasks, jobs=jobs, progress=progress)

    monkeypatch.setattr(memsim.sweep.evaluate, "simulate_tasks", spy)
    fracs = []
    pooled = robustness_check(TrialEvaluator(exp, spec, jobs=2), spec, cands,
                              progress=fracs.append)
    # fresh seeds and two variants, two replicates each: six replays, one pool
    assert calls == [(6, 2)] and fracs[-1] == 1.0
    monkeypatch.undo()
    serial = robustness_check(TrialEvaluator(exp, spec), spec, cands)
    pd.testing.assert_frame_equal(pooled, serial, check_exact=True)
    # the checks' values differ from one another: each got its own replays
    first = f"values_{spec.labels[0]}"
    fresh = pooled[pooled["check"] != "vs-experiment"]
    assert fresh[first].nunique() > 2
    # and each candidate on each check alone gives the same numbers
    ev = TrialEvaluator(exp, spec)
    for _, row in pooled[pooled["check"].isin(["fresh-seeds", "variant"])].iterrows():
        c = next(c for c in cands if c["number"] == row["number"])
        variant = dict(dict(spec.robustness.variants)[row["variant"]]) if row["variant"] \
            else None
        values, _ = ev.evaluate(c["params"], replicates=[2, 3], variant=variant)
        assert [row[f"values_{lab}"] for lab in spec.labels] == values


def test_evaluate_batches_with_a_failing_replay_gives_the_errors_of_evaluate_batch(
        monkeypatch):
    """A replay of the pool that raises: the batches are evaluated one after
    the other in this process, so a trial that fails has its own error and
    the others their values."""
    exp = robust_experiment()
    spec = SweepSpec.from_config(exp.sweep, exp)
    sets = [{HL: 30.0, "policies.r.candidates": 9}, {HL: -3.0, "policies.r.candidates": 9}]
    want = TrialEvaluator(exp, spec).evaluate_batch(sets, replicates=[2, 3])

    def fails(*args, **kw):
        raise MemsimError("a worker's replay failed")

    monkeypatch.setattr(memsim.sweep.evaluate, "simulate_tasks",
                        lambda tasks, jobs=1, progress=None: fails() if jobs > 1
                        else simulate_tasks(tasks, jobs=jobs, progress=progress))
    (got,), _ = TrialEvaluator(exp, spec, jobs=2).evaluate_batches(
        [{"param_sets": sets, "replicates": [2, 3]}])
    assert got[1].error and "half_life_days" in got[1].error
    assert [o.values for o in got] == [o.values for o in want]
    assert [o.per_replicate for o in got] == [o.per_replicate for o in want]


def test_simulate_tasks_in_workers_gives_the_frames_of_one_process():
    exp = robust_experiment()
    other = exp.with_overrides({"workload.notes_per_day": 9.0})
    tasks = [(exp, experiment_arms(exp), 1, None), (other, experiment_arms(other), 0, None),
             (exp, experiment_arms(exp), 0, load_stream_for(exp, 0))]
    pooled = simulate_tasks(tasks, jobs=2)
    for (e, arms, r, stream), got in zip(tasks, pooled):
        want = simulate_replicate(e, arms, r, stream)
        pd.testing.assert_frame_equal(got["queries"], want["queries"], check_exact=True)


def test_a_pooled_audit_counts_its_replays_on_stderr():
    """``memsim audit --jobs 2``: the replays are the phase whose progress is
    printed, one line per replay (two probe replicates and the use counts)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-m", "memsim.cli", "audit",
         str(root / "experiments" / "sweep_hivemind.toml"), "--queries", "30",
         "--param-replicates", "2", "--jobs", "2", "--set", "experiment.replicates=1",
         "--set", "workload.horizon_days=8", "--set", "workload.backfill_days=8"],
        capture_output=True, text=True, cwd=root, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    done = [ln.split(" (")[0] for ln in proc.stderr.splitlines() if " done" in ln]
    assert done == [f"memsim audit: replay {k}/3 done" for k in (1, 2, 3)]
    assert "Swept parameters" in proc.stdout


# --------------------------------------------------------------------------
# Reports: the summary's intervals read from summary.csv, not resampled again
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """The quickstart, small, on 2 replicates (intervals over queries) and
    2 budgets, without its report."""
    from pathlib import Path

    from memsim.runs.runner import run_experiment

    quickstart = Path(__file__).resolve().parents[1] / "experiments" / "quickstart.toml"
    return run_experiment(quickstart, out=tmp_path_factory.mktemp("runs"), report=False,
                          overrides={"workload.horizon_days": 30, "workload.backfill_days": 150,
                                     "experiment.replicates": 2,
                                     "experiment.budgets": [600, 1500]})


def test_the_summary_from_summary_csv_is_the_summary_resampled_again(small_run):
    from memsim.reporting import plots
    from memsim.reporting.compare import compare
    from memsim.reporting.rundir import load_run, summary_rows

    run = load_run(small_run.path)
    q = run.queries
    fresh = compare(q, summary=None)
    assert summary_rows(run.summary, q, fresh.metrics) is not None  # the rows are there
    for got in (compare(q, summary=run.summary), compare(run.path)):
        pd.testing.assert_frame_equal(got.summary, fresh.summary, check_exact=True)
        pd.testing.assert_frame_equal(got.tests, fresh.tests, check_exact=True)
    # one budget of the table, another metric order
    at = compare(q, budget=600, metrics=["recall", "utility_share"], summary=run.summary)
    again = compare(q, budget=600, metrics=["recall", "utility_share"])
    pd.testing.assert_frame_equal(at.summary, again.summary, check_exact=True)
    by_age = plots.age_recall_data(q, 1500, summary=run.summary)
    assert len(by_age)
    pd.testing.assert_frame_equal(by_age, plots.age_recall_data(q, 1500), check_exact=True)
    # other resamples, or a summary lacking a row: resampled
    other = compare(q, n_boot=200, summary=run.summary)
    pd.testing.assert_frame_equal(other.summary, compare(q, n_boot=200).summary,
                                  check_exact=True)
    assert not other.summary[["ci_low"]].equals(fresh.summary[["ci_low"]])
    assert summary_rows(run.summary.iloc[1:], q, fresh.metrics) is None


def test_a_report_from_summary_csv_is_the_report_resampled_again(small_run, tmp_path,
                                                                 monkeypatch):
    import importlib
    import shutil

    from memsim.reporting.report import build_report

    # the modules (memsim.compare is also the name of the function)
    comparing = importlib.import_module("memsim.reporting.compare")
    plotting = importlib.import_module("memsim.reporting.plots")
    reporting = importlib.import_module("memsim.reporting.report")
    name = small_run.path.name
    used = []
    real = comparing.summary_rows

    def spy(*args):
        got = real(*args)
        used.append(got is not None)
        return got

    copies = {}
    for how in ("stored", "resampled"):
        copies[how] = tmp_path / how / name
        shutil.copytree(small_run.path, copies[how])
    for module in (comparing, plotting, reporting):
        monkeypatch.setattr(module, "summary_rows", spy)
    build_report(copies["stored"])
    assert len(used) == 3 and all(used)  # the comparison, the age figure, the glance
    for module in (comparing, plotting, reporting):
        monkeypatch.setattr(module, "summary_rows", lambda *a: None)
    build_report(copies["resampled"])
    for f in ("report.html", "report.md"):
        assert (copies["stored"] / f).read_bytes() == (copies["resampled"] / f).read_bytes()
    figs = sorted(p.name for p in (copies["stored"] / "figures").iterdir())
    assert figs and figs == sorted(p.name for p in (copies["resampled"] / "figures").iterdir())
    for f in figs:
        assert ((copies["stored"] / "figures" / f).read_bytes()
                == (copies["resampled"] / "figures" / f).read_bytes())
