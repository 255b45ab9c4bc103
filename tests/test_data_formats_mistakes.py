"""Real data in, standard formats out: mistakes a new user makes with the
trace check, the data cache, the TREC exports and the trace writer.

- ``memsim stream check trace --limit 0`` lists no error but still fails;
- a relative ``$MEMSIM_DATA`` (or ``--to ~/DIR``) names the folder
  ``memsim data get`` wrote to, wherever the experiment file is;
- ``memsim data get`` of a file already cached says nothing about a download;
- TREC files refuse ids holding whitespace (their columns are separated by
  whitespace) instead of writing lines with extra columns;
- :class:`~memsim.data.trace.TraceWriter` takes numpy integer ids (vector
  stores return them) and refuses ids beyond 64 bits, which the importer
  refuses;
- :func:`~memsim.data.trace.join_segments` keeps the meaning of the times of
  a segment whose header has another origin.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

import memsim
from memsim.cli import main
from memsim.core.errors import ConfigError
from memsim.data import datasets
from memsim.data.datasets import Dataset
from memsim.data.importers.trace import import_trace
from memsim.data.trace import TraceWriter, join_segments, segments

HEADER = {"event": "header", "format": "memsim-trace", "version": 1}


def _write(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    return path


def _small_trace(path: Path, note_id=lambda i: f"n{i}", query_id=lambda k: f"q{k}") -> Path:
    events = [HEADER]
    for i in range(6):
        events.append({"event": "note_added", "id": note_id(i), "t": float(i), "actor": "a",
                       "text": f"alpha beta word{i} gamma"})
    for k in range(3):
        events.append({"event": "query", "id": query_id(k), "t": 8.0 + k, "actor": "a",
                       "text": f"word{k} alpha"})
        events.append({"event": "used", "query": query_id(k), "notes": [note_id(k)]})
    return _write(path, events)


# -- memsim stream check trace --limit ---------------------------------------------

def test_check_with_limit_zero_lists_nothing_but_still_fails(tmp_path, capsys):
    bad = _write(tmp_path / "bad.jsonl", [
        HEADER,
        {"event": "note_added", "id": 1, "t": 1.7e9, "actor": "a", "text": "x"},
        {"event": "note_added", "id": 2, "t": 0, "actor": "a", "tokens": 0}])
    assert main(["stream", "check", "trace", str(bad), "--limit", "0"]) == 2
    captured = capsys.readouterr()
    assert "a valid trace" not in captured.out
    assert captured.out.strip() == "2 errors not listed (--limit 0)"
    assert "bad.jsonl: 2 errors" in captured.err
    assert main(["stream", "check", "trace", str(bad), "--limit", "-1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--limit: must be 0 or more" in err
    # a valid trace is still valid with --limit 0
    good = _small_trace(tmp_path / "good.jsonl")
    assert main(["stream", "check", "trace", str(good), "--limit", "0"]) == 0
    assert "a valid trace" in capsys.readouterr().out


# -- the data cache ------------------------------------------------------------------

@pytest.fixture
def trace_data(tmp_path, monkeypatch) -> tuple[str, bytes]:
    """A registered data set whose file is a small trace (importer "trace")."""
    payload = _small_trace(tmp_path / "upstream.jsonl").read_bytes()
    tiny = Dataset(name="tinytrace", filename="tiny.jsonl", url="file:///nonexistent/tiny",
                   sha256=hashlib.sha256(payload).hexdigest(), size=len(payload),
                   licence="CC0", citation="Nobody, 2025", homepage="",
                   what="a tiny trace", importer="trace")
    monkeypatch.setitem(datasets.DATASETS, "tinytrace", tiny)
    return "tinytrace", payload


def test_a_relative_memsim_data_is_the_folder_data_get_wrote_to(tmp_path, monkeypatch,
                                                                trace_data, capsys):
    name, _ = trace_data
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv(datasets.CACHE_ENV, "cache")          # relative, as typed in a shell
    assert datasets.cache_dir() == work / "cache"
    assert main(["data", "get", name, "--from", str(tmp_path / "upstream.jsonl")]) == 0
    assert (work / "cache" / name / "tiny.jsonl").is_file()
    # an experiment file in another folder reads the same cached file
    folder = tmp_path / "experiments"
    folder.mkdir()
    toml = folder / "exp.toml"
    toml.write_text(f'[experiment]\nname = "x"\nreplicates = 1\n\n[workload]\n'
                    f'source = "data:{name}"\n\n[policies.s]\npreset = "similarity-only"\n')
    exp = memsim.load_experiment(toml)
    assert Path(exp.workload.path) == work / "cache" / name / "tiny.jsonl"


def test_get_to_a_home_folder_writes_where_it_checked(tmp_path, monkeypatch, trace_data):
    name, payload = trace_data
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv(datasets.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "upstream.jsonl"
    got = datasets.get(name, to="~/data", url=src.as_uri())
    assert got == tmp_path / "home" / "data" / name / "tiny.jsonl"
    assert got.read_bytes() == payload
    assert not (tmp_path / "~").exists()
    assert datasets.is_cached(name, "~/data") and not datasets.is_cached(name)


def test_get_of_a_cached_file_does_not_say_it_downloads(tmp_path, monkeypatch, trace_data,
                                                        capsys):
    name, _ = trace_data
    monkeypatch.setenv(datasets.CACHE_ENV, str(tmp_path / "cache"))
    src = tmp_path / "upstream.jsonl"
    assert main(["data", "get", name, "--url", src.as_uri()]) == 0
    assert "downloading" in capsys.readouterr().err
    assert main(["data", "get", name, "--url", src.as_uri()]) == 0
    assert "downloading" not in capsys.readouterr().err


# -- TREC files ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def spaced_run(tmp_path_factory):
    """A run on a trace whose note and query ids hold spaces."""
    folder = tmp_path_factory.mktemp("spaced")
    trace = _small_trace(folder / "t.jsonl", note_id=lambda i: f"note {i}",
                         query_id=lambda k: f"q{k}")
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "sp", "replicates": 1, "seed": 1, "save_rankings": True,
                       "candidates": 5, "budget_tokens": 1000},
        "workload": {"source": str(trace), "importer": "trace"},
        "policies": {"sim": {"preset": "similarity-only"}}})
    return memsim.run_experiment(exp, out=None, report=False)


def test_trec_files_refuse_ids_with_whitespace(spaced_run, tmp_path):
    run_file, qrels_file = tmp_path / "run.txt", tmp_path / "qrels.txt"
    with pytest.raises(ConfigError, match=r"run\.txt: note id 'note \d' holds whitespace"):
        spaced_run.to_trec_run(run_file)
    with pytest.raises(ConfigError, match=r"qrels\.txt: note id 'note \d' holds whitespace"):
        spaced_run.to_trec_qrels(qrels_file)
    assert not run_file.exists() and not qrels_file.exists()   # nothing half written
    # ranx takes any string id
    pytest.importorskip("ranx")
    qrels, run = spaced_run.to_ranx()
    assert "note 0" in qrels.to_dict()["q0"]
    assert set(run.to_dict()["q0"]) <= {f"note {i}" for i in range(6)}


def test_trec_files_of_a_query_id_with_a_tab_are_refused(tmp_path):
    trace = _small_trace(tmp_path / "t.jsonl", query_id=lambda k: f"q\t{k}")
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "tab", "replicates": 1, "seed": 1, "save_rankings": True,
                       "candidates": 5, "budget_tokens": 1000},
        "workload": {"source": str(trace), "importer": "trace"},
        "policies": {"sim": {"preset": "similarity-only"}}})
    res = memsim.run_experiment(exp, out=None, report=False)
    with pytest.raises(ConfigError, match=r"query id 'q\\t0' holds whitespace"):
        res.to_trec_run(tmp_path / "run.txt")


# -- the trace writer ------------------------------------------------------------------

def test_writer_takes_numpy_ids_and_refuses_ids_beyond_64_bits(tmp_path):
    path = tmp_path / "app.jsonl"
    with TraceWriter(path) as w:
        assert w.note_added(np.int64(3), "alpha beta") == 3
        w.note_added(np.uint32(4), "alpha gamma")
        q = w.query("alpha", id=np.int64(10))
        assert q == 10 and type(q) is int
        w.retrieved(q, np.array([4, 3]), scores=np.array([0.9, 0.5]))
        w.used(np.int32(10), [np.int64(3)])
        for bad in (2 ** 64, -(2 ** 63) - 1, np.uint64(2 ** 64 - 1)):
            with pytest.raises(ValueError, match="must fit in 64 bits"):
                w.note_added(bad, "x")
        with pytest.raises(ValueError, match="expected an integer or a non-empty string"):
            w.note_added(np.bool_(True), "x")
    lines = path.read_text().splitlines()
    assert len(lines) == 6                                    # header + 5 events, no refused one
    s = import_trace(path)
    assert s.notes["note_id"].tolist() == [3, 4]
    assert s.retrieved["note_id"].tolist() == [4, 3]


def test_join_keeps_the_times_of_a_segment_with_another_origin(tmp_path):
    clock = [1_700_000_000.0]
    path = tmp_path / "app.jsonl"
    w = TraceWriter(path, max_bytes=300, clock=lambda: clock[0])
    for i in range(4):
        clock[0] += 3600.0
        w.note_added(f"n{i}", f"alpha text {i}", expires_at=clock[0] - 1_700_000_000.0 + 7200)
    w.close()
    assert len(segments(path)) > 1
    os.replace(path, tmp_path / "lost.jsonl")  # the current file gone: a new writer starts afresh
    clock[0] += 86400.0
    with TraceWriter(path, clock=lambda: clock[0]) as w2:
        q = w2.query("alpha 1")
        w2.used(q, ["n1"])
    joined = join_segments(path, tmp_path / "all.jsonl")
    s = import_trace(joined)
    kept = [e for e in map(json.loads, (tmp_path / "lost.jsonl").read_text().splitlines())
            if e["event"] == "note_added"]
    n_notes = 4 - len(kept)
    hours = np.arange(1, n_notes + 1) / 24.0
    assert np.allclose(s.notes["created_at"], hours)
    assert np.allclose(s.notes["expires_at"], hours + 2 / 24.0)
    # the query, written by the second writer 4 h + 1 day after the first origin
    assert np.allclose(s.queries["t"], [4 / 24.0 + 1.0])


def test_trec_files_refuse_an_empty_id_of_a_stream_folder(tmp_path):
    # a hand-made stream folder may give a row an empty trace_id: its TREC
    # line would lose a column
    from memsim.data.importers.trace import import_trace
    from memsim.data.stream import write_stream

    stream = import_trace(_small_trace(tmp_path / "t.jsonl"))
    stream.notes["trace_id"] = stream.notes["trace_id"].astype(object)
    stream.notes.loc[stream.notes["note_id"] == 2, "trace_id"] = ""
    folder = write_stream(stream, tmp_path / "folder")
    exp = memsim.experiment_from_dict({
        "experiment": {"name": "empty", "replicates": 1, "seed": 1, "save_rankings": True,
                       "candidates": 6, "budget_tokens": 1000},
        "workload": {"source": str(folder)},
        "policies": {"sim": {"preset": "similarity-only"}}})
    res = memsim.run_experiment(exp, out=None, report=False)
    with pytest.raises(ConfigError, match=r"run\.txt: a note id is empty"):
        res.to_trec_run(tmp_path / "run.txt")
    assert not (tmp_path / "run.txt").exists()
