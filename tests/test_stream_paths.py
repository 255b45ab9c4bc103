"""A malformed stream folder is named by its path, whichever entry point read it.

``read_stream`` named the file alone (``notes.parquet: column 'tokens': ...``),
so a user with several stream folders could not tell which one was broken,
from Python, ``memsim stream validate`` or ``memsim run``. Now the message
names the file by its path (the folder as given, joined with the file name);
where the folder came from a config key, the config file and the key come
first, as for the config's other mistakes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from memsim.checks.engine_check import load_check_config
from memsim.cli import main
from memsim.core.errors import ConfigError, StreamError
from memsim.data.stream import FORMAT_NAME, make_stream, read_stream, write_stream

WEEK1 = Path("data", "streams", "week1")
TOKENS = "column 'tokens': row 3 (note_id 14): tokens must be a positive integer, got 0"


def frames() -> dict[str, pd.DataFrame]:
    """A small valid stream's tables."""
    return {
        "notes": pd.DataFrame({"note_id": [10, 11, 12, 14, 13],
                               "created_at": [0.0, 0.5, 1.0, 1.5, 2.0],
                               "tokens": [40, 8, 120, 7, 35],
                               "actor": ["a", "b", "a", "b", "a"]}),
        "queries": pd.DataFrame({"query_id": [1, 2], "t": [3.0, 4.0], "actor": ["a", "b"]}),
        "qrels": pd.DataFrame({"query_id": [1, 2], "note_id": [10, 13], "gain": [1.0, 1.0]}),
    }


def stream_folder(folder: Path, fmt: str = "parquet", **broken: pd.DataFrame) -> Path:
    """A stream folder, written as the tables are (``broken`` replaces some)."""
    folder.mkdir(parents=True)
    (folder / "stream.json").write_text(json.dumps(
        {"format": FORMAT_NAME, "version": 1, "time_unit": "day", "name": folder.name}))
    for table, frame in {**frames(), **broken}.items():
        if fmt == "csv":
            frame.to_csv(folder / f"{table}.csv", index=False)
        else:
            frame.to_parquet(folder / f"{table}.parquet", index=False)
    return folder


def zero_tokens() -> pd.DataFrame:
    notes = frames()["notes"]
    notes.loc[3, "tokens"] = 0  # row 3, note 14
    return notes


@pytest.fixture
def two_folders(tmp_path, monkeypatch) -> Path:
    """week1 (its notes have a note of 0 tokens) and week2 (valid), under the
    working folder, which is returned."""
    monkeypatch.chdir(tmp_path)
    stream_folder(WEEK1, notes=zero_tokens())
    stream_folder(Path("data", "streams", "week2"))
    return tmp_path


# ---------------------------------------------------------------------------
# read_stream
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_read_stream_names_the_file_by_the_folder_as_given(tmp_path, monkeypatch, fmt):
    monkeypatch.chdir(tmp_path)
    stream_folder(WEEK1, fmt, notes=zero_tokens())
    for given in ("data/streams/week1", "data/streams/week1/", WEEK1):
        with pytest.raises(StreamError) as exc:
            read_stream(given)
        assert str(exc.value) == f"data/streams/week1/notes.{fmt}: {TOKENS}"
    # an absolute folder is named as it was given too
    with pytest.raises(StreamError) as exc:
        read_stream(tmp_path / WEEK1)
    assert str(exc.value) == f"{tmp_path / WEEK1 / f'notes.{fmt}'}: {TOKENS}"


def test_a_message_about_one_file_names_its_siblings_by_their_names(tmp_path):
    qrels = frames()["qrels"]
    qrels.loc[1, "note_id"] = 99
    folder = stream_folder(tmp_path / "week1", qrels=qrels)
    with pytest.raises(StreamError) as exc:
        read_stream(folder)
    # the folder once, at the start
    assert str(exc.value) == (f"{folder / 'qrels.parquet'}: column 'note_id': row 1 "
                              "(query_id 2, note_id 99): note_id 99 is not in notes.parquet")


@pytest.mark.parametrize("breaks, message", [
    (lambda f: (f / "queries.parquet").write_bytes(b""), "queries.parquet: file is empty"),
    (lambda f: (f / "qrels.parquet").write_bytes(b"PAR1 not parquet"),
     "qrels.parquet: cannot be read as Parquet"),
    (lambda f: (f / "notes.parquet").unlink(),
     "notes.parquet: missing from the stream folder (notes.csv is also accepted)"),
    (lambda f: (f / "stream.json").write_text('{"format": "memsim-stream", "version": 9}'),
     "stream.json: format version 9 is newer than this memsim reads"),
    (lambda f: (f / "stream.json").unlink(), "stream.json: missing from the stream folder"),
    (lambda f: (np.save(f / "note_embeddings.npy", np.full((5, 2), np.nan, np.float32)),
                np.save(f / "query_embeddings.npy", np.ones((2, 2), np.float32))),
     "note_embeddings.npy: row 0 (note_id 10): dimension 0: embedding values must be finite"),
    (lambda f: np.save(f / "note_embeddings.npy", np.ones((5, 2), np.float32)),
     "query_embeddings.npy: missing while note_embeddings.npy is given"),
], ids=["empty", "unreadable", "missing", "header", "no-header", "npy-values", "npy-pair"])
def test_every_file_of_the_folder_is_named_by_its_path(tmp_path, breaks, message):
    folder = stream_folder(tmp_path / "week1")
    breaks(folder)
    with pytest.raises(StreamError) as exc:
        read_stream(folder)
    assert str(exc.value).startswith(f"{folder}/{message}"), str(exc.value)
    assert "\n" not in str(exc.value)


def test_tables_in_memory_are_still_named_by_their_table():
    # no folder, no path: the label is the table's name
    with pytest.raises(StreamError) as exc:
        make_stream(zero_tokens(), frames()["queries"], frames()["qrels"])
    assert str(exc.value) == f"notes: {TOKENS}"
    qrels = frames()["qrels"]
    qrels.loc[1, "note_id"] = 99
    with pytest.raises(StreamError) as exc:
        make_stream(frames()["notes"], frames()["queries"], qrels,
                    where={"notes": "notes.parquet", "qrels": "qrels.parquet"})
    assert str(exc.value) == ("qrels.parquet: column 'note_id': row 1 (query_id 2, note_id 99): "
                              "note_id 99 is not in notes.parquet")


# ---------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------

def test_stream_validate_names_the_folder(two_folders, capsys):
    assert main(["stream", "validate", "data/streams/week2"]) == 0
    capsys.readouterr()
    assert main(["stream", "validate", "data/streams/week1"]) == 2
    err = capsys.readouterr().err
    assert err == f"memsim: error: data/streams/week1/notes.parquet: {TOKENS}\n"


def test_calibrate_workload_names_the_folder(two_folders, capsys):
    assert main(["calibrate", "workload", "data/streams/week1", "--out", "twin", "-q"]) == 2
    err = capsys.readouterr().err
    assert err == f"memsim: error: data/streams/week1/notes.parquet: {TOKENS}\n"
    assert not Path("twin").exists()


EXPERIMENT = ('[experiment]\nreplicates = 1\n[workload]\nsource = "{source}"\n'
              '[policies.a]\npreset = "hivemind"\n')


def test_memsim_run_names_the_config_key_and_the_folder(two_folders):
    """The experiment's ``workload.source`` is relative to the file, and read
    from its folder (the resolved path, as ``workload.source: DIR: no such
    file or folder`` names it)."""
    (two_folders / "exp.toml").write_text(EXPERIMENT.format(source="data/streams/week1"))
    proc = subprocess.run([sys.executable, "-m", "memsim.cli", "run", "exp.toml",
                           "--out", "results", "-q"], cwd=two_folders, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr
    notes = two_folders / WEEK1 / "notes.parquet"
    assert proc.stderr == f"memsim: error: exp.toml: workload.source: {notes}: {TOKENS}\n"
    assert proc.stdout == "" and not (two_folders / "results").exists()


def test_memsim_run_from_python_names_the_key_and_the_folder(two_folders):
    import memsim

    exp = two_folders / "exp.toml"
    exp.write_text(EXPERIMENT.format(source="data/streams/week1"))
    with pytest.raises(StreamError) as exc:
        memsim.run_experiment(exp, out=two_folders / "results", report=False)
    notes = two_folders / WEEK1 / "notes.parquet"
    assert str(exc.value) == f"{exp}: workload.source: {notes}: {TOKENS}"
    # the same experiment on the valid folder reads it
    exp.write_text(EXPERIMENT.format(source="data/streams/week2"))
    assert memsim.load_experiment(exp).workload.load().n_notes == 5


def test_engine_check_config_names_the_key_and_the_folder(two_folders):
    cfg = two_folders / "c.toml"
    cfg.write_text('[engine_check]\nk = 4\n[workload]\nsource = "data/streams/week1"\n')
    with pytest.raises(StreamError) as exc:
        load_check_config(cfg, ("engine_check",), {"k"})
    notes = two_folders / WEEK1 / "notes.parquet"
    assert str(exc.value) == f"{cfg}: workload.source: {notes}: {TOKENS}"


@pytest.mark.parametrize("workload, message", [
    ('source = "t.jsonl"\nimporter = "trace"',
     "workload.importer: an engine check replays a stream folder as it is, importing nothing"),
    ('source = "t.jsonl"',
     "workload.source: {t} is a file, not a stream folder: import it first"),
])
def test_an_engine_check_on_a_file_says_to_import_it_first(tmp_path, workload, message):
    """Before: a trace given with run's ``importer`` read "takes no generator
    knobs" (an importer is none), and a file was refused only once the
    check had started."""
    (tmp_path / "t.jsonl").write_text("{}\n")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[engine_check]\nk = 4\n[workload]\n{workload}\n")
    with pytest.raises(ConfigError) as exc:
        load_check_config(cfg, ("engine_check",), {"k"})
    assert str(exc.value).startswith(f"{cfg}: " + message.format(t=tmp_path / "t.jsonl"))
    assert str(exc.value).endswith("(memsim stream import trace FILE --out DIR) and give "
                                   "source = DIR")


def test_a_valid_folder_still_reads(tmp_path):
    stream = make_stream(**frames())
    write_stream(stream, tmp_path / "week1")
    assert read_stream(tmp_path / "week1").n_notes == 5
