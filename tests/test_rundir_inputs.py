"""Bad input to the run-folder readers: one clear memsim error naming the file
(or argument), the column and the row, never a raw traceback, a silent
coercion or a silent recomputation.

- ``summary.csv`` that exists but lacks a column or holds a value that is not
  a number is refused; an absent one (a failed run has none) is recomputed.
- ``rankings.parquet`` is checked for its columns and their types on reading,
  as the other data files of a run folder are.
- ``queries.parquet`` with an infinite measure is refused (a measure is
  finite, or NaN where undefined).
- :func:`memsim.reporting.compare.compare` refuses what it cannot read (not a
  run, a wrong argument type, a corrupt file) with a
  :class:`~memsim.core.errors.MemsimError`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

import memsim
from memsim.cli import main as cli_main
from memsim.core.errors import ConfigError, MemsimError
from memsim.reporting.compare import compare
from memsim.reporting.rundir import RunFolderError, load_run, summary_rows


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A small completed run of two policies with its rankings, no report."""
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "inputs", "replicates": 1, "seed": 5, "save_rankings": True},
        "workload": {"horizon_days": 15, "backfill_days": 10},
        "policies": {"a": {"preset": "hivemind"}, "b": {"preset": "hivemind-2025-bug"}}})
    return memsim.run_experiment(exp, out=tmp_path_factory.mktemp("runs"), report=False).path


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    shutil.copytree(run_dir, folder)
    return folder


def _one_line(folder: Path, capsys) -> str:
    """``memsim report FOLDER`` must fail with exit code 2 and one line."""
    capsys.readouterr()
    assert cli_main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memsim: error: "), err
    assert "Traceback" not in err
    return lines[0]


# ---------------------------------------------------------------------------
# 1. summary.csv
# ---------------------------------------------------------------------------


def test_a_summary_csv_without_a_column_is_refused_while_an_absent_one_is_recomputed(
        run_dir, tmp_path, capsys):
    folder = _copy(run_dir, tmp_path)
    f = folder / "summary.csv"
    pd.read_csv(f).drop(columns=["ci_low", "n"]).to_csv(f, index=False)
    with pytest.raises(RunFolderError) as info:
        load_run(folder)
    msg = str(info.value)
    assert str(f) in msg and "'ci_low'" in msg and "'n'" in msg
    with pytest.raises(RunFolderError, match="'ci_low'"):
        compare(folder)
    line = _one_line(folder, capsys)
    assert str(f) in line and "'ci_low'" in line
    # absent (a failed run has none): computed from queries.parquet, the same numbers
    f.unlink()
    assert load_run(folder).summary is None
    pd.testing.assert_frame_equal(compare(folder).summary, compare(run_dir).summary,
                                  check_exact=True)


@pytest.mark.parametrize("column, value, why", [("mean", "abc", "not a number"),
                                                 ("n", "2.5", "whole number"),
                                                 ("budget", "", "whole number")])
def test_a_summary_csv_value_that_is_not_a_number_names_column_and_row(run_dir, tmp_path,
                                                                       capsys, column, value,
                                                                       why):
    folder = _copy(run_dir, tmp_path)
    f = folder / "summary.csv"
    s = pd.read_csv(f, dtype=str, keep_default_na=False)
    s.loc[3, column] = value
    s.to_csv(f, index=False)
    with pytest.raises(RunFolderError) as info:
        load_run(folder)
    msg = str(info.value)
    assert str(f) in msg and f"column {column!r}" in msg and "row 3" in msg and why in msg
    line = _one_line(folder, capsys)
    assert str(f) in line and f"column {column!r}" in line and "row 3" in line


def test_summary_rows_refuses_a_malformed_summary_and_reads_one_with_more_columns(run_dir):
    run = load_run(run_dir)
    q = run.queries
    metrics = ["utility_share", "recall"]
    # more columns than summary.csv has (a note a user added): its rows are read, not
    # resampled again
    wider = run.summary.assign(note="mine")
    assert summary_rows(wider, q, metrics) is not None
    pd.testing.assert_frame_equal(summary_rows(wider, q, metrics),
                                  summary_rows(run.summary, q, metrics), check_exact=True)
    with pytest.raises(ConfigError, match="summary: .*no column 'ci_high'"):
        summary_rows(run.summary.drop(columns=["ci_high"]), q, metrics)
    bad = run.summary.astype({"mean": object})
    bad.loc[2, "mean"] = "x"
    with pytest.raises(ConfigError, match="column 'mean': row 2"):
        summary_rows(bad, q, metrics)
    # compare()'s summary= goes through the same check: never silently resampled
    with pytest.raises(ConfigError, match="no column 'ci_high'"):
        compare(q, summary=run.summary.drop(columns=["ci_high"]))


# ---------------------------------------------------------------------------
# 2. rankings.parquet
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("column", ["rank", "note_id", "packed", "query_id"])
def test_a_rankings_parquet_without_a_column_is_refused(run_dir, tmp_path, capsys, column):
    folder = _copy(run_dir, tmp_path)
    f = folder / "rankings.parquet"
    pd.read_parquet(f).drop(columns=[column]).to_parquet(f)
    with pytest.raises(RunFolderError) as info:
        load_run(folder)
    msg = str(info.value)
    assert str(f) in msg and repr(column) in msg and "\n" not in msg
    line = _one_line(folder, capsys)
    assert str(f) in line and repr(column) in line


@pytest.mark.parametrize("column, value", [("rank", "first"), ("note_id", "n7"),
                                           ("score", "high")])
def test_a_rankings_parquet_column_of_the_wrong_type_names_column_and_row(run_dir, tmp_path,
                                                                           column, value):
    folder = _copy(run_dir, tmp_path)
    f = folder / "rankings.parquet"
    r = pd.read_parquet(f)
    r[column] = r[column].astype(str)
    r.loc[5, column] = value
    r.to_parquet(f)
    with pytest.raises(RunFolderError) as info:
        load_run(folder)
    msg = str(info.value)
    assert str(f) in msg and f"column {column!r}" in msg and "row 5" in msg
    assert repr(value) in msg


def test_trec_export_of_a_damaged_rankings_file_is_a_memsim_error(run_dir, tmp_path):
    folder = _copy(run_dir, tmp_path)
    f = folder / "rankings.parquet"
    pd.read_parquet(f).drop(columns=["rank"]).to_parquet(f)
    with pytest.raises(MemsimError, match="rankings.parquet.*'rank'"):
        load_run(folder).to_trec_run(tmp_path / "run.txt", policy="a")
    assert not (tmp_path / "run.txt").exists()


# ---------------------------------------------------------------------------
# 3. compare() on what it cannot read
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("data", [42, None, b"results/run", 1.5])
def test_compare_refuses_what_is_not_a_run_with_a_memsim_error(data):
    with pytest.raises(MemsimError) as info:
        compare(data)
    # still the TypeError compare() has always raised for a wrong type
    assert isinstance(info.value, TypeError) and isinstance(info.value, ConfigError)
    assert "compare(): data" in str(info.value) and type(data).__name__ in str(info.value)


def test_compare_names_the_run_of_a_list_that_is_not_one(run_dir):
    with pytest.raises(ConfigError, match=r"compare\(\): data\[1\]: .*int"):
        compare([run_dir, 42])


def test_compare_on_a_path_that_is_no_run_folder(run_dir, tmp_path):
    with pytest.raises(RunFolderError, match="does not exist"):
        compare(tmp_path / "nope")
    (tmp_path / "file.csv").write_text("a\n1\n")
    with pytest.raises(RunFolderError, match="a file, not a folder"):
        compare(tmp_path / "file.csv")


@pytest.mark.parametrize("kw", [{"summary": "summary.csv"}, {"metrics": 5},
                                {"metrics": [["recall"]]}, {"seed": "x"},
                                {"min_replicates": "x"}])
def test_compare_refuses_an_argument_of_the_wrong_type(run_dir, kw):
    name = next(iter(kw))
    with pytest.raises(ConfigError, match=rf"compare\(\): {name}"):
        compare(run_dir, **kw)


def test_compare_refuses_wrong_types_in_a_list_of_runs(run_dir):
    with pytest.raises(ConfigError, match=r"compare\(\): labels"):
        compare([run_dir, run_dir], labels=5)
    with pytest.raises(ConfigError, match=r"compare\(\): paired"):
        compare([run_dir, run_dir], paired="no")


def test_compare_refuses_a_dict_whose_queries_are_not_a_table(run_dir):
    with pytest.raises(ConfigError, match="queries.*str"):
        compare({"queries": "queries.parquet"})


def test_compare_on_a_run_folder_with_a_corrupt_metric_column(run_dir, tmp_path):
    folder = _copy(run_dir, tmp_path)
    f = folder / "queries.parquet"
    q = pd.read_parquet(f)
    q["recall"] = q["recall"].astype(str)
    q.loc[7, "recall"] = "abc"
    q.to_parquet(f)
    with pytest.raises(RunFolderError) as info:
        compare(folder)
    msg = str(info.value)
    assert str(f) in msg and "column 'recall'" in msg and "row 7" in msg and "'abc'" in msg


@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
def test_an_infinite_measure_in_queries_parquet_is_refused(run_dir, tmp_path, capsys, value):
    """A per-query measure is finite, or NaN where undefined: an infinity
    is damage (before: the report's means skipped it in silence, one pair
    fewer)."""
    folder = _copy(run_dir, tmp_path)
    f = folder / "queries.parquet"
    q = pd.read_parquet(f)
    q.loc[7, "utility"] = value
    q.to_parquet(f)
    line = _one_line(folder, capsys)
    assert line == (f"memsim: error: {f}: not a memsim queries.parquet: column 'utility': "
                    f"row 7: {value!r} is not a measure (a finite number, or NaN where "
                    "undefined)")
    with pytest.raises(RunFolderError, match="is not a measure"):
        load_run(folder)


def test_compare_on_a_queries_frame_with_a_text_metric(run_dir):
    q = load_run(run_dir).queries.astype({"recall": object})
    q.loc[4, "recall"] = "abc"
    for metrics in (None, ["recall"]):
        with pytest.raises(ConfigError, match="column 'recall': row 4: 'abc'"):
            compare(q, metrics=metrics)


def test_trec_export_of_rankings_in_memory_without_a_column_is_a_memsim_error(tmp_path):
    """A RunResult built by hand is checked by the export itself."""
    queries = pd.DataFrame({"replicate": 0, "policy": "a", "budget": 500, "query_id": [0, 1]})
    rankings = pd.DataFrame({"replicate": 0, "policy": "a", "budget": 500,
                             "query_id": [0, 1], "rank": [1, 1], "score": [0.9, 0.7]})
    run = memsim.RunResult(queries=queries, rankings=rankings)
    with pytest.raises(ConfigError, match="rankings: no column 'note_id'"):
        run.to_trec_run(tmp_path / "run.txt")
    # the policy's own scores need the score column; the ranks alone do not
    unscored = memsim.RunResult(queries=queries, rankings=rankings.drop(columns="score")
                                .assign(note_id=[5, 6]))
    assert len(unscored.trec_run_frame()) == 2
    with pytest.raises(ConfigError, match="rankings: no column 'score'"):
        unscored.trec_run_frame(scores="policy")
    assert not (tmp_path / "run.txt").exists()


@pytest.mark.parametrize("file, edit, says", [
    ("config.toml", lambda t: "experiment = 5\n" + t.split("[experiment]", 1)[0],
     "[experiment]: expected a table, got 5"),
    ("config.toml", lambda t: 'policies = "x"\n', "[policies]: expected a table, got 'x'"),
    ("config.toml", lambda t: "policies = { c = 3 }\n", "policies.c: expected a table, got 3"),
    ("manifest.json", lambda t: t.replace('"versions": {', '"versions": 5, "x": {', 1),
     "versions: expected a JSON object, got 5"),
    ("manifest.json", lambda t: t.replace('"timings_s": {', '"timings_s": "abc", "y": {', 1),
     "timings_s: expected a JSON object, got 'abc'"),
])
def test_a_config_or_manifest_of_the_wrong_shape_is_one_line(run_dir, tmp_path, capsys,
                                                             file, edit, says):
    """They parsed, and the readers took them apart: AttributeError and
    ValueError tracebacks."""
    folder = _copy(run_dir, tmp_path)
    path = folder / file
    path.write_text(edit(path.read_text()))
    line = _one_line(folder, capsys)
    assert str(path) in line and says in line
    with pytest.raises(RunFolderError, match="expected a"):
        load_run(folder)


def test_the_folder_readers_tables_are_the_configs():
    """rundir keeps its own list of a config's tables (the reporting layer
    does not import memsim.runs): it must be the config loader's."""
    from memsim.reporting.rundir import _CONFIG_TABLES
    from memsim.runs.config import TOP_LEVEL
    assert _CONFIG_TABLES == TOP_LEVEL
