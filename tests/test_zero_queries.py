"""A workload that yields no query: a valid run that memsim reads back (its
queries.parquet has every documented column, no row), a report that says
there is nothing to measure, and a clear refusal from `memsim optimum`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

import memsim
from memsim.cli import main
from memsim.core.errors import ConfigError
from memsim.core.rng import seed_sequence
from memsim.engine import Arm, SimSettings, simulate
from memsim.reporting.rundir import REQUIRED_COLUMNS
from memsim.runs.config import load_experiment, resolve_policy
from memsim.tuning.optimum import optimum
from .helpers import random_stream

PLANTED = Path(__file__).resolve().parents[1] / "experiments" / "planted.toml"
# 0.01 queries a day over 20 days: the planted seed draws none
NO_QUERY = ["workload.horizon_days=20", "workload.backfill_days=20", "experiment.replicates=1",
            "workload.queries_per_day=0.01"]
SETS = sum((["--set", s] for s in NO_QUERY), [])


def _folder(out: Path) -> Path:
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    return folder


@pytest.fixture(scope="module")
def no_report_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("zq")
    assert main(["run", str(PLANTED), *SETS, "--out", str(out), "--quiet", "--no-report"]) == 0
    return _folder(out)


def test_a_run_without_queries_completes_and_reports(tmp_path, capsys):
    code = main(["run", str(PLANTED), *SETS, "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    folder = _folder(tmp_path)
    assert "nothing to measure" in out and out.strip().splitlines()[-1] == str(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert "no queries" in (folder / "report.md").read_text()


def test_its_queries_parquet_has_every_documented_column(no_report_run):
    q = pd.read_parquet(no_report_run / "queries.parquet")
    assert len(q) == 0
    need = [*REQUIRED_COLUMNS["queries.parquet"], "budget_tokens", "actor", "category"]
    assert not [c for c in need if c not in q.columns]
    for c in memsim.evaluation.metrics.METRIC_COLUMNS:
        assert pd.api.types.is_numeric_dtype(q[c]), c


def test_it_reads_back_and_reports(no_report_run, capsys):
    run = memsim.load_run(no_report_run)
    assert run.manifest["status"] == "completed" and len(run.queries) == 0
    assert main(["report", str(no_report_run), "--quiet"]) == 0, capsys.readouterr().err
    assert "no queries" in (no_report_run / "report.md").read_text()
    with pytest.raises(ConfigError, match="no rows .*nothing to compare"):
        memsim.compare(run)


def test_an_empty_queries_frame_has_the_columns_and_types_of_a_full_one():
    s = random_stream(6)
    empty = dataclasses.replace(s, queries=s.queries.iloc[:0],
                                query_embeddings=s.query_embeddings[:0], qrels=s.qrels.iloc[:0])
    arms = [Arm("sim", resolve_policy({"preset": "similarity-only"}, "sim"), None)]
    got, full = (simulate(x, arms, SimSettings(), seed_sequence(0)).queries
                 for x in (empty, s))
    assert len(got) == 0 and len(full)
    assert list(got.columns) == list(full.columns)
    assert got.dtypes.astype(str).to_dict() == full.dtypes.astype(str).to_dict()


def test_optimum_refuses_a_workload_without_queries_in_one_line(capsys):
    code = main(["optimum", str(PLANTED), *SETS, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith("memsim: error: workload: ") and "yields no query" in line
    assert "queries_per_day" in line and "horizon_days" in line
    exp = load_experiment(PLANTED, NO_QUERY)
    with pytest.raises(ConfigError, match="yields no query"):
        optimum(exp)
    # the derived optimum needs no simulation
    assert len(optimum(exp, simulate=False).table)
