"""Stream format (DESIGN.md section 3): validation, atomic write, read, summary."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memsim.data.stream as ms
from memsim.core.errors import StreamError
from memsim.data.stream import (
    FORMAT_NAME,
    FORMAT_VERSION,
    Stream,
    describe_stream,
    make_stream,
    read_stream,
    validate_frames,
    write_stream,
)

TABLES = ("notes", "queries", "qrels", "accesses")


# ---------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------

def base_frames(embeddings: bool = True) -> dict[str, Any]:
    """A small valid stream as raw parts (notes deliberately not sorted)."""
    rng = np.random.default_rng(7)
    parts: dict[str, Any] = {
        "notes": pd.DataFrame({
            "note_id": [12, 10, 11, 14, 13],
            "created_at": [1.5, -3.0, 0.0, 4.0, 2.0],
            "tokens": [4000, 8, 120, 60, 35],
            "actor": ["ann", "ann", "bob", "bob", "cy"],
            "note_class": ["scratch", "evergreen", "project", "project", "distractor"],
        }),
        "queries": pd.DataFrame({"query_id": [3, 1, 2], "t": [5.0, 0.5, 2.5],
                                 "actor": ["cy", "ann", "bob"]}),
        "qrels": pd.DataFrame({"query_id": [1, 2, 2, 3], "note_id": [10, 12, 11, 14],
                               "gain": [1.0, 2.0, -1.0, 1.0]}),
        "accesses": pd.DataFrame({"t": [3.0, 1.0], "note_id": [13, 10], "actor": ["ann", "bob"]}),
        "note_embeddings": None,
        "query_embeddings": None,
    }
    if embeddings:
        parts["note_embeddings"] = rng.normal(size=(5, 4)).astype(np.float32)
        parts["query_embeddings"] = rng.normal(size=(3, 4)).astype(np.float32)
    return parts


def build(parts: dict[str, Any], **kw: Any) -> Stream:
    return make_stream(parts["notes"], parts["queries"], parts["qrels"], parts["accesses"],
                       parts["note_embeddings"], parts["query_embeddings"], **kw)


def write_raw(folder: Path, parts: dict[str, Any], fmt: str = "parquet",
              header: dict | None = None) -> Path:
    """Write parts to a folder as they are, bypassing validation (to test the reader)."""
    folder.mkdir(parents=True, exist_ok=True)
    head = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "time_unit": "day",
            "name": "raw", "source": "test"}
    if header is not None:
        head = header
    (folder / "stream.json").write_text(json.dumps(head))
    for t in TABLES:
        frame = parts.get(t)
        if frame is None:
            continue
        if fmt == "csv":
            frame.to_csv(folder / f"{t}.csv", index=False)
        else:
            frame.to_parquet(folder / f"{t}.parquet", index=False)
    for t in ("note_embeddings", "query_embeddings"):
        if parts.get(t) is not None:
            np.save(folder / f"{t}.npy", parts[t])
    return folder


def set_cell(frame: pd.DataFrame, col: str, row: int, value: Any) -> None:
    """Put any value in a cell, going through object dtype (pandas 3 refuses
    setting a string into a float column in place)."""
    values = frame[col].tolist() if col in frame.columns else [None] * len(frame)
    values[row] = value
    frame[col] = pd.Series(values, dtype=object, index=frame.index)


def assert_message(exc: pytest.ExceptionInfo, label: str, column: str | None,
                   row: int | None, *fragments: str) -> None:
    msg = str(exc.value)
    assert msg.startswith(f"{label}: "), msg
    if column is not None:
        assert f"column {column!r}" in msg, msg
    if row is not None:
        assert f"row {row} " in msg or f"row {row}:" in msg, msg
    for frag in fragments:
        assert frag in msg, msg
    assert "\n" not in msg


# ---------------------------------------------------------------------------
# Malformed cases: each runs in memory (label = table name) and from a
# Parquet folder (label = file name).
# ---------------------------------------------------------------------------

@dataclass
class Case:
    id: str
    table: str                      # the table / file the message must name
    mutate: Callable[[dict], None]
    column: str | None
    row: int | None
    fragments: tuple[str, ...] = ()


def _drop(table: str, col: str) -> Callable[[dict], None]:
    return lambda p: p.__setitem__(table, p[table].drop(columns=[col]))


def _cell(table: str, col: str, row: int, value: Any) -> Callable[[dict], None]:
    return lambda p: set_cell(p[table], col, row, value)


def _column(table: str, col: str, values: list) -> Callable[[dict], None]:
    def go(p: dict) -> None:
        p[table][col] = values
    return go


def _emb(key: str, value: Callable[[dict], Any]) -> Callable[[dict], None]:
    return lambda p: p.__setitem__(key, value(p))


def _nan_embedding(p: dict) -> np.ndarray:
    arr = p["note_embeddings"].copy()
    arr[2, 1] = np.nan
    return arr


CASES = [
    Case("notes-missing-tokens", "notes", _drop("notes", "tokens"), "tokens", None,
         ("required column is missing",)),
    Case("notes-missing-note_id", "notes", _drop("notes", "note_id"), "note_id", None),
    Case("queries-missing-t", "queries", _drop("queries", "t"), "t", None),
    Case("qrels-missing-gain", "qrels", _drop("qrels", "gain"), "gain", None),
    Case("accesses-missing-actor", "accesses", _drop("accesses", "actor"), "actor", None),
    Case("created_at-not-numeric", "notes",
         _column("notes", "created_at", ["1.5", "-3", "yesterday", "4", "2"]),
         "created_at", 2, ("(note_id 11)", "got 'yesterday'")),
    Case("created_at-datetime", "notes",
         _column("notes", "created_at", pd.to_datetime(["2024-01-01"] * 5)),
         "created_at", 0, ("(note_id 12)", "number of days")),
    Case("created_at-nan", "notes", _cell("notes", "created_at", 3, np.nan),
         "created_at", 3, ("(note_id 14)", "got NaN")),
    Case("created_at-inf", "notes", _cell("notes", "created_at", 1, np.inf),
         "created_at", 1, ("got inf",)),
    Case("tokens-fraction", "notes", _column("notes", "tokens", [4000, 8, 120, 3.5, 35]),
         "tokens", 3, ("(note_id 14)", "tokens must be a positive integer, got 3.5")),
    Case("tokens-zero", "notes", _column("notes", "tokens", [4000, 0, 120, 60, 35]),
         "tokens", 1, ("(note_id 10)", "tokens must be a positive integer, got 0")),
    Case("tokens-negative", "notes", _column("notes", "tokens", [4000, 8, -5, 60, 35]),
         "tokens", 2, ("got -5",)),
    Case("tokens-nan", "notes", _column("notes", "tokens", [4000, 8, 120, 60, np.nan]),
         "tokens", 4, ("got NaN",)),
    Case("tokens-text", "notes", _column("notes", "tokens", ["4000", "8", "many", "60", "35"]),
         "tokens", 2, ("got 'many'",)),
    Case("tokens-bool", "notes", _column("notes", "tokens", [True] * 5),
         "tokens", 0, ("got True",)),
    Case("tokens-too-large", "notes", _column("notes", "tokens", [4000, 8, 1e20, 60, 35]),
         "tokens", 2, ("got 1e+20",)),
    Case("note_id-duplicate", "notes", _column("notes", "note_id", [12, 10, 11, 10, 13]),
         "note_id", 3, ("duplicate note_id 10 (first at row 1)",)),
    Case("note_id-fraction", "notes", _column("notes", "note_id", [12, 10, 11.5, 14, 13]),
         "note_id", 2, ("note_id must be an integer, got 11.5",)),
    Case("actor-missing", "notes", _cell("notes", "actor", 2, None),
         "actor", 2, ("(note_id 11)", "must be a string")),
    Case("importance-negative", "notes", _column("notes", "importance", [1, 1, 1, -0.5, 1]),
         "importance", 3, ("got -0.5",)),
    Case("salience-nan", "notes", _column("notes", "salience", [1, np.nan, 1, 1, 1]),
         "salience", 1, ("got NaN",)),
    Case("pinned-not-bool", "notes", _column("notes", "pinned", ["true", "no idea", "0", "1", "false"]),
         "pinned", 1, ("got 'no idea'",)),
    Case("expires-before-created", "notes",
         _column("notes", "expires_at", [np.nan, -2.0, -1.0, 9.0, np.nan]),
         "expires_at", 2, ("(note_id 11)", ">= created_at")),
    Case("updated-before-created", "notes",
         _column("notes", "updated_at", [2.0, np.nan, 0.0, 3.0, 2.0]),
         "updated_at", 3, ("(note_id 14)", ">= created_at", "got 3.0")),
    Case("query_id-duplicate", "queries", _column("queries", "query_id", [3, 1, 3]),
         "query_id", 2, ("duplicate query_id 3 (first at row 0)",)),
    Case("query-t-nan", "queries", _column("queries", "t", [5.0, np.nan, 2.5]),
         "t", 1, ("(query_id 1)", "got NaN")),
    Case("query-t-neg-inf", "queries", _column("queries", "t", [5.0, 0.5, -np.inf]),
         "t", 2, ("got -inf",)),
    Case("budget-zero", "queries", _column("queries", "budget_tokens", [100, 0, 100]),
         "budget_tokens", 1, ("positive integer, got 0",)),
    Case("qrels-unknown-query", "qrels", _column("qrels", "query_id", [1, 2, 9, 3]),
         "query_id", 2, ("query_id 9 is not in queries",)),
    Case("qrels-unknown-note", "qrels", _column("qrels", "note_id", [10, 12, 11, 99]),
         "note_id", 3, ("(query_id 3, note_id 99)", "note_id 99 is not in notes")),
    Case("qrels-gain-zero", "qrels", _column("qrels", "gain", [1.0, 0.0, -1.0, 1.0]),
         "gain", 1, ("non-zero", "got 0.0")),
    Case("qrels-gain-nan", "qrels", _column("qrels", "gain", [1.0, 2.0, -1.0, np.nan]),
         "gain", 3, ("got NaN",)),
    Case("qrels-duplicate-pair", "qrels", _column("qrels", "note_id", [10, 12, 12, 14]),
         "note_id", 2, ("duplicate (query_id, note_id) pair (first at row 1)",)),
    Case("accesses-unknown-note", "accesses", _column("accesses", "note_id", [13, 77]),
         "note_id", 1, ("note_id 77 is not in notes",)),
    Case("accesses-t-nan", "accesses", _column("accesses", "t", [np.nan, 1.0]),
         "t", 0, ("(note_id 13)", "got NaN")),
    Case("embedding-rows", "note_embeddings",
         _emb("note_embeddings", lambda p: p["note_embeddings"][:4]), None, None,
         ("has 4 rows but notes", "has 5 rows")),
    Case("embedding-ndim", "query_embeddings",
         _emb("query_embeddings", lambda p: p["query_embeddings"].ravel()), None, None,
         ("2-d array",)),
    Case("embedding-dims-differ", "query_embeddings",
         _emb("query_embeddings", lambda p: np.ones((3, 5), np.float32)), None, None,
         ("dimension 5", "dimension 4")),
    Case("embedding-nan", "note_embeddings", _emb("note_embeddings", _nan_embedding),
         None, 2, ("(note_id 11)", "dimension 1", "got NaN")),
    Case("embedding-only-notes", "query_embeddings", _emb("query_embeddings", lambda p: None),
         None, None, ("missing while",)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_in_memory(case: Case) -> None:
    parts = base_frames()
    case.mutate(parts)
    with pytest.raises(StreamError) as exc:
        build(parts)
    assert_message(exc, case.table, case.column, case.row, *case.fragments)
    # validate_frames says the same thing.
    with pytest.raises(StreamError) as exc2:
        validate_frames(parts["notes"], parts["queries"], parts["qrels"], parts["accesses"],
                        parts["note_embeddings"], parts["query_embeddings"])
    assert str(exc2.value) == str(exc.value)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_on_disk_names_the_file(case: Case, tmp_path: Path) -> None:
    parts = base_frames()
    case.mutate(parts)
    write_raw(tmp_path / "s", parts)
    with pytest.raises(StreamError) as exc:
        read_stream(tmp_path / "s")
    ext = "npy" if "embeddings" in case.table else "parquet"
    # the file by its path: the folder as given, joined with the file name
    label = str(tmp_path / "s" / f"{case.table}.{ext}")
    assert_message(exc, label, case.column, case.row, *case.fragments)


def test_message_format_matches_the_contract() -> None:
    parts = base_frames()
    parts["notes"]["tokens"] = [4000, 8, 120, 0, 35]
    with pytest.raises(StreamError, match=r"^notes\.parquet: column 'tokens': row 3 \(note_id 14\): "
                                          r"tokens must be a positive integer, got 0$"):
        build(parts, where={"notes": "notes.parquet"})


def test_where_rejects_unknown_table() -> None:
    with pytest.raises(ValueError, match="unknown table"):
        build(base_frames(), where={"note": "x"})


def test_inputs_that_are_not_frames_are_refused() -> None:
    parts = base_frames()
    parts["qrels"] = [(1, 10, 1.0)]
    with pytest.raises(StreamError, match="^qrels: expected a pandas DataFrame"):
        build(parts)


def test_duplicate_column_names_are_refused() -> None:
    parts = base_frames()
    parts["notes"] = pd.concat([parts["notes"], parts["notes"][["tokens"]]], axis=1)
    with pytest.raises(StreamError, match="column 'tokens': column appears more than once"):
        build(parts)


def test_pickled_npy_is_refused_not_loaded(tmp_path: Path) -> None:
    parts = base_frames()
    folder = write_raw(tmp_path / "s", parts)
    obj = np.empty((5, 4), dtype=object)
    obj[:] = 1.0
    np.save(folder / "note_embeddings.npy", obj, allow_pickle=True)
    with pytest.raises(StreamError, match=rf"^{re.escape(str(folder / 'note_embeddings.npy'))}: "
                                          "cannot be read"):
        read_stream(folder)


# ---------------------------------------------------------------------------
# Lossless reading and defaults
# ---------------------------------------------------------------------------

def test_lossless_conversions_are_accepted() -> None:
    parts = base_frames(embeddings=False)
    parts["notes"]["tokens"] = [4000.0, 8.0, 120.0, 60.0, 35.0]
    parts["notes"]["note_id"] = ["12", "10", "11", "14", "13"]
    parts["notes"]["actor"] = [1, 1, 2, 2, 3]
    parts["notes"]["pinned"] = ["True", "false", "1", "0", "FALSE"]
    parts["notes"]["expires_at"] = ["nan", "nan", "inf", "9", "2"]
    s = build(parts)
    assert s.notes["tokens"].dtype == np.int64
    assert s.notes["note_id"].tolist() == [10, 11, 12, 13, 14]
    assert s.notes["tokens"].tolist() == [8, 120, 4000, 35, 60]
    assert s.notes["actor"].tolist() == ["1", "2", "1", "3", "2"]
    assert s.notes["pinned"].tolist() == [False, True, True, False, False]
    assert np.isnan(s.notes["expires_at"].iloc[0]) and s.notes["expires_at"].iloc[1] == np.inf


def test_defaults_and_canonical_order() -> None:
    parts = base_frames()
    s = build(parts)
    assert s.notes["note_id"].tolist() == [10, 11, 12, 13, 14]
    assert s.queries["query_id"].tolist() == [1, 2, 3]
    assert list(s.notes.columns[:11]) == ["note_id", "created_at", "updated_at", "tokens",
                                          "actor", "tier", "importance", "salience",
                                          "memory_type", "pinned", "expires_at"]
    assert s.notes["note_class"].tolist() == ["evergreen", "project", "scratch", "distractor",
                                              "project"]
    assert (s.notes["updated_at"] == s.notes["created_at"]).all()
    assert (s.notes["tier"] == "task").all() and (s.notes["memory_type"] == "episodic").all()
    assert s.notes["expires_at"].isna().all() and not s.notes["pinned"].any()
    # Embedding rows follow their notes and queries through the sort.
    np.testing.assert_array_equal(s.note_embeddings[0], parts["note_embeddings"][1])
    np.testing.assert_array_equal(s.query_embeddings[0], parts["query_embeddings"][1])
    assert s.note_embeddings.dtype == np.float32 and s.note_embeddings.flags.c_contiguous
    assert s.accesses["t"].tolist() == [1.0, 3.0]
    assert s.qrels[["query_id", "note_id"]].values.tolist() == [[1, 10], [2, 11], [2, 12], [3, 14]]


def test_updated_at_nan_means_never_updated() -> None:
    parts = base_frames()
    parts["notes"]["updated_at"] = [np.nan, -1.0, np.nan, 4.0, 2.0]
    s = build(parts)
    assert s.notes.set_index("note_id")["updated_at"].to_dict() == {
        10: -1.0, 11: 0.0, 12: 1.5, 13: 2.0, 14: 4.0}


def test_expires_equal_to_created_is_allowed() -> None:
    parts = base_frames()
    parts["notes"]["expires_at"] = parts["notes"]["created_at"]
    assert build(parts).notes["expires_at"].notna().all()


def test_inputs_are_not_modified() -> None:
    parts = base_frames()
    before = {t: parts[t].copy() for t in TABLES}
    emb = parts["note_embeddings"].copy()
    build(parts)
    for t in TABLES:
        pd.testing.assert_frame_equal(parts[t], before[t])
    np.testing.assert_array_equal(parts["note_embeddings"], emb)


def test_make_stream_is_idempotent() -> None:
    s = build(base_frames())
    again = make_stream(s.notes, s.queries, s.qrels, s.accesses, s.note_embeddings,
                        s.query_embeddings, s.meta)
    assert_streams_equal(s, again)


# ---------------------------------------------------------------------------
# Extremes and empty streams
# ---------------------------------------------------------------------------

def test_extreme_values_load_and_round_trip(tmp_path: Path) -> None:
    parts = base_frames()
    parts["notes"]["tokens"] = [10**12, 1, 2**40, 5, 7]  # 2**40: MAX_TOKENS
    parts["notes"]["created_at"] = [-1e9, 1e9, 0.0, 5e8, -5e8]
    parts["queries"]["t"] = [1e9, -1e9, 0.0]
    s = build(parts)
    assert s.notes["tokens"].max() == 2**40
    assert 10**12 in s.notes["tokens"].tolist()
    back = read_stream(write_stream(s, tmp_path / "x"))
    assert_streams_equal(s, back)
    assert "max 1,099,511,627,776" in describe_stream(s)


def test_empty_stream_is_valid_and_round_trips(tmp_path: Path) -> None:
    notes = pd.DataFrame({"note_id": pd.Series(dtype="int64"), "created_at": pd.Series(dtype=float),
                          "tokens": pd.Series(dtype="int64"), "actor": pd.Series(dtype=str)})
    queries = pd.DataFrame({"query_id": pd.Series(dtype="int64"), "t": pd.Series(dtype=float),
                            "actor": pd.Series(dtype=str)})
    s = make_stream(notes, queries, pd.DataFrame())
    assert s.n_notes == 0 and s.n_queries == 0 and len(s.qrels) == 0
    back = read_stream(write_stream(s, tmp_path / "empty"))
    assert_streams_equal(s, back)
    assert "notes: 0" in describe_stream(back)


def test_notes_without_queries_and_queries_without_qrels() -> None:
    parts = base_frames(embeddings=False)
    s = make_stream(parts["notes"], parts["queries"].iloc[:0], pd.DataFrame())
    assert s.n_notes == 5 and s.n_queries == 0
    s = make_stream(parts["notes"].iloc[:0], parts["queries"], pd.DataFrame())
    assert "queries with no relevant note: 3 (100.0%)" in describe_stream(s)


# ---------------------------------------------------------------------------
# Write / read
# ---------------------------------------------------------------------------

def assert_streams_equal(a: Stream, b: Stream) -> None:
    for t in TABLES:
        pd.testing.assert_frame_equal(getattr(a, t), getattr(b, t))
    for t in ("note_embeddings", "query_embeddings"):
        x, y = getattr(a, t), getattr(b, t)
        assert (x is None) == (y is None)
        if x is not None:
            np.testing.assert_array_equal(x, y)
            assert y.dtype == np.float32


def full_parts() -> dict[str, Any]:
    parts = base_frames()
    n = parts["notes"]
    n["tier"] = ["task", "longterm", "scratch", "task", "task"]
    n["importance"] = [0.0, 1.0, 2.5, 1.0, 1.0]
    n["salience"] = [1.0, 0.5, 1.0, 3.0, 1.0]
    n["memory_type"] = ["semantic", "episodic", "procedural", "episodic", "other"]
    n["pinned"] = [False, True, False, False, True]
    n["expires_at"] = [np.nan, 30.0, np.nan, 4.0, np.inf]
    n["updated_at"] = [2.0, -3.0, 0.5, 4.0, 2.0]
    n["text"] = ["alpha", "", "gamma, with a comma", "delta \"quoted\"", "line\nbreak"]
    n["topic"] = [0, 1, 1, 2, 3]
    n["slot"] = ["a", "b", "b", "c", "d"]
    n["valid_until"] = [np.nan, 10.0, 20.0, np.nan, 5.0]
    parts["queries"]["budget_tokens"] = [500, 10**9, 64]
    parts["queries"]["topic"] = [2, 0, 1]
    return parts


def test_round_trip_parquet(tmp_path: Path) -> None:
    s = build(full_parts(), meta={"name": "demo", "source": "synthetic", "seed": 42,
                                  "params": {"k": [1, 2]}})
    out = write_stream(s, tmp_path / "demo")
    assert out == tmp_path / "demo"
    assert sorted(p.name for p in out.iterdir()) == [
        "accesses.parquet", "note_embeddings.npy", "notes.parquet", "qrels.parquet",
        "queries.parquet", "query_embeddings.npy", "stream.json"]
    header = json.loads((out / "stream.json").read_text())
    assert header["format"] == "memsim-stream" and header["version"] == 1
    assert header["time_unit"] == "day" and header["embedding_dim"] == 4
    assert header["name"] == "demo" and header["source"] == "synthetic"
    back = read_stream(out)
    assert_streams_equal(s, back)
    assert back.meta == {"name": "demo", "source": "synthetic", "seed": 42, "params": {"k": [1, 2]}}
    assert back.embedding_dim == 4


@pytest.mark.parametrize("under", ["afile/s", "afile/deeper/s"])
def test_a_stream_under_a_file_is_a_users_mistake(tmp_path: Path, under: str) -> None:
    # an --out whose path runs through a file: a StreamError (exit 2), not
    # the OSError of a full disk (exit 1), and nothing written
    (tmp_path / "afile").write_text("x")
    with pytest.raises(StreamError, match=f"cannot write a stream at .*: {tmp_path / 'afile'} "
                       "is a file"):
        write_stream(build(full_parts()), tmp_path / under)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_write_omits_empty_accesses_and_missing_embeddings(tmp_path: Path) -> None:
    parts = base_frames(embeddings=False)
    parts["accesses"] = None
    s = build(parts, meta={"name": "n"})
    out = write_stream(s, tmp_path / "s")
    names = {p.name for p in out.iterdir()}
    assert "accesses.parquet" not in names and not any(n.endswith(".npy") for n in names)
    assert json.loads((out / "stream.json").read_text())["embedding_dim"] is None
    back = read_stream(out)
    assert back.note_embeddings is None and len(back.accesses) == 0
    assert_streams_equal(s, back)


def test_read_csv(tmp_path: Path) -> None:
    parts = full_parts()
    parts["notes"]["actor"] = ["007", "NA", "null", "bob", "cy"]  # stay text, not numbers / NaN
    folder = write_raw(tmp_path / "csv", parts, fmt="csv")
    back = read_stream(folder)
    expected = build(parts, meta={"name": "raw", "source": "test"})
    assert_streams_equal(expected, back)
    assert back.meta == {"name": "raw", "source": "test"}


def test_csv_error_names_the_csv_file(tmp_path: Path) -> None:
    parts = base_frames(embeddings=False)
    parts["notes"]["tokens"] = [4000, 8, 120, 3.5, 35]
    folder = write_raw(tmp_path / "csv", parts, fmt="csv")
    with pytest.raises(StreamError, match=rf"^{re.escape(str(folder / 'notes.csv'))}: column "
                                          r"'tokens': row 3 \(note_id 14\)"):
        read_stream(folder)


def csv_stream(folder: Path, **tables: str) -> Path:
    """A small valid CSV stream folder, with any table replaced by raw text."""
    folder.mkdir(parents=True)
    (folder / "stream.json").write_text(json.dumps({"format": FORMAT_NAME, "version": 1,
                                                    "time_unit": "day", "name": "x"}))
    files = {"notes": "note_id,created_at,tokens,actor\n1,0,10,a\n2,1,20,b\n",
             "queries": "query_id,t,actor\n1,2,a\n",
             "qrels": "query_id,note_id,gain\n1,1,1\n"}
    files.update(tables)
    for table, text in files.items():
        (folder / f"{table}.csv").write_text(text)
    return folder


def test_a_csv_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    # far enough into the file that the decoder's own position (counted from
    # the chunk it read) is not the file's
    rows = "".join(f"{i},0,10,a\n" for i in range(1, 3000))
    folder = csv_stream(tmp_path / "s", notes="note_id,created_at,tokens,actor\n" + rows)
    path = folder / "notes.csv"
    path.write_bytes(path.read_bytes() + "3000,0,10,caf\u00e9\n".encode("latin-1"))
    with pytest.raises(StreamError, match=rf"^{re.escape(str(path))}: cannot be read as CSV: "
                       r"line 3001 is not UTF-8 \(byte 0xe9 at byte \d+ of the file\)"):
        read_stream(folder)


def test_csv_row_with_more_fields_than_the_header_is_refused(tmp_path: Path) -> None:
    # Long texts and quoted line breaks are fine; pandas took the extra
    # field's column 0 as the index and read query 1, note 1, gain 2.
    long_text = "x" * 200_000
    ok = csv_stream(tmp_path / "ok", notes="note_id,created_at,tokens,actor,text\n"
                    f'1,0,10,a,"two\nlines"\n2,1,20,b,{long_text}\n')
    assert read_stream(ok).notes["text"].tolist() == ["two\nlines", long_text]
    folder = csv_stream(tmp_path / "s", qrels="query_id,note_id,gain\n7,1,1,2\n")
    with pytest.raises(StreamError) as exc:
        read_stream(folder)
    assert str(exc.value) == (f"{folder / 'qrels.csv'}: row 0 (line 2): has 4 fields but the "
                              "header has 3")


def test_csv_trailing_comma_is_a_field_too_many(tmp_path: Path) -> None:
    folder = csv_stream(tmp_path / "s",
                        notes="note_id,created_at,tokens,actor\n1,0,10,a,\n2,1,20,b,\n")
    with pytest.raises(StreamError) as exc:
        read_stream(folder)
    assert_message(exc, str(folder / "notes.csv"), None, 0, "(line 2)",
                   "has 5 fields but the header has 4", "trailing comma")


def test_csv_short_row_is_refused_and_blank_lines_are_not_rows(tmp_path: Path) -> None:
    # Without the field count, the missing optional text read as "".
    folder = csv_stream(tmp_path / "s", notes="note_id,created_at,tokens,actor,text\n"
                        "1,0,10,a,hi\n\n   \n2,1,20,b\n")
    with pytest.raises(StreamError) as exc:
        read_stream(folder)
    assert str(exc.value) == (f"{folder / 'notes.csv'}: row 1 (line 5): has 4 fields but the "
                              "header has 5")


def test_csv_repeated_column_name_is_refused(tmp_path: Path) -> None:
    folder = csv_stream(tmp_path / "s", notes="note_id,created_at,tokens,actor,tokens\n"
                        "1,0,10,a,0\n2,1,20,b,0\n")
    with pytest.raises(StreamError) as exc:
        read_stream(folder)
    assert str(exc.value) == (f"{folder / 'notes.csv'}: column 'tokens': column appears more "
                              "than once")


def test_csv_text_extras_stay_text(tmp_path: Path) -> None:
    # Read as numbers, namespaces "01" and "1" would be one store.
    folder = csv_stream(
        tmp_path / "s",
        notes="note_id,created_at,tokens,actor,namespace,trace_id\n"
              "1,0,10,a,01,007\n2,1,20,b,1,7\n",
        queries="query_id,t,actor,namespace,text,category,trace_id\n"
                "1,2,a,01,1.50,02,0x1\n2,3,b,1,2,2,1e3\n")
    s = read_stream(folder)
    assert s.notes["namespace"].tolist() == ["01", "1"]
    assert s.notes["trace_id"].tolist() == ["007", "7"]
    q = s.queries
    assert q["namespace"].tolist() == ["01", "1"]
    assert q["text"].tolist() == ["1.50", "2"]
    assert q["category"].tolist() == ["02", "2"]
    assert q["trace_id"].tolist() == ["0x1", "1e3"]


def test_an_empty_actor_or_tier_reads_back_from_csv_as_from_parquet(tmp_path: Path) -> None:
    # "" is an actor and a tier in Parquet; its CSV form (an empty cell,
    # quoted or not) is the same text, not a missing value
    parts = base_frames()
    parts["notes"] = parts["notes"].assign(actor=["ann", "", "bob", "bob", "cy"],
                                           tier=["", "long", "", "short", "long"])
    parts["queries"] = parts["queries"].assign(actor=["cy", "", "bob"])
    parts["accesses"] = parts["accesses"].assign(actor=["", "bob"])
    pq = read_stream(write_raw(tmp_path / "pq", parts))
    folder = write_raw(tmp_path / "csv", parts, fmt="csv")
    assert ',"",' not in (folder / "notes.csv").read_text()  # written as empty cells
    got = read_stream(folder)
    for t in ("notes", "queries", "accesses"):
        pd.testing.assert_frame_equal(getattr(got, t), getattr(pq, t))
    assert got.notes.set_index("note_id").loc[10, "actor"] == ""
    # a missing number is still missing, not the empty text
    parts["notes"] = parts["notes"].assign(created_at=[1.5, np.nan, 0.0, 4.0, 2.0])
    with pytest.raises(StreamError, match=r"created_at"):
        read_stream(write_raw(tmp_path / "nan", parts, fmt="csv"))


def test_an_id_beyond_int64_is_named_so(tmp_path: Path) -> None:
    """An unsigned 64-bit id above 2**63 - 1 (a parquet uint64 column, or
    digits in a CSV) is an integer memsim cannot hold: said so, not "must be
    an integer" (before)."""
    parts = base_frames(embeddings=False)
    parts["notes"]["note_id"] = np.array([12, 10, 2 ** 63 + 5, 14, 13], dtype=np.uint64)
    with pytest.raises(StreamError) as exc:
        build(parts)
    assert_message(exc, "notes", "note_id", 2, "must be an integer within 64 bits "
                   "(-2**63 to 2**63 - 1), got 9223372036854775813")
    folder = csv_stream(tmp_path / "s", notes="note_id,created_at,tokens,actor\n"
                        "1,0,10,a\n9223372036854775813,1,20,b\n")
    with pytest.raises(StreamError) as exc:
        read_stream(folder)
    assert_message(exc, str(folder / "notes.csv"), "note_id", 1, "within 64 bits")


def test_float_ids_beyond_two_to_the_53_are_refused(tmp_path: Path) -> None:
    # 2**53 + 1 has no float: as a float column it read as 2**53, "valid".
    folder = csv_stream(tmp_path / "s", notes="note_id,created_at,tokens,actor\n"
                        "9007199254740993,0,10,a\n1.0,1,20,b\n")
    with pytest.raises(StreamError) as exc:
        read_stream(folder)
    assert_message(exc, str(folder / "notes.csv"), "note_id", 0, "below 2**53",
                   "got 9007199254740992.0")
    parts = base_frames(embeddings=False)
    parts["notes"]["note_id"] = [12.0, 10.0, -(2.0 ** 53), 14.0, 13.0]
    with pytest.raises(StreamError) as exc:
        build(parts)
    assert_message(exc, "notes", "note_id", 2, "below 2**53")
    # The first offending row decides the message, whichever the kind.
    parts["notes"]["note_id"] = [12.0, 10.5, 2.0 ** 60, 14.0, 13.0]
    with pytest.raises(StreamError) as exc:
        build(parts)
    assert_message(exc, "notes", "note_id", 1, "must be an integer, got 10.5")
    # Integral floats below 2**53 still read exactly.
    parts["accesses"] = None  # it names note 13
    for big in (2 ** 53 - 1, -(2 ** 53 - 1)):
        parts["notes"]["note_id"] = [12.0, 10.0, 11.0, 14.0, float(big)]
        ids = build(parts).notes["note_id"]
        assert ids.dtype == np.int64
        assert sorted(ids.tolist()) == sorted([10, 11, 12, 14, big])


def test_name_defaults_to_folder_name(tmp_path: Path) -> None:
    parts = base_frames(embeddings=False)
    folder = write_raw(tmp_path / "my-trace", parts,
                       header={"format": FORMAT_NAME, "version": 1, "time_unit": "day"})
    assert read_stream(folder).name == "my-trace"


@pytest.mark.parametrize("header, fragment", [
    ({"format": "other", "version": 1}, "key 'format': expected 'memsim-stream'"),
    ({"format": FORMAT_NAME, "version": 2}, "version 2 is newer than this memsim reads"),
    ({"format": FORMAT_NAME, "version": "1"}, "key 'version'"),
    ({"format": FORMAT_NAME}, "key 'version'"),
    ({"format": FORMAT_NAME, "version": 1, "time_unit": "hour"}, "key 'time_unit'"),
    ({"format": FORMAT_NAME, "version": 1, "embedding_dim": 8}, "embedding_dim' is 8 but"),
    ([1, 2], "expected a JSON object"),
], ids=["format", "newer", "version-type", "version-missing", "time-unit", "dim", "not-object"])
def test_stream_json_is_checked(tmp_path: Path, header: Any, fragment: str) -> None:
    folder = write_raw(tmp_path / "s", base_frames(), header=header)
    with pytest.raises(StreamError) as exc:
        read_stream(folder)
    assert str(exc.value).startswith(f"{folder / 'stream.json'}: ") and fragment in str(exc.value)


def test_stream_json_invalid_or_missing(tmp_path: Path) -> None:
    folder = write_raw(tmp_path / "s", base_frames())
    (folder / "stream.json").write_text("{not json")
    header = re.escape(str(folder / "stream.json"))
    with pytest.raises(StreamError, match=f"^{header}: not valid JSON"):
        read_stream(folder)
    (folder / "stream.json").unlink()
    with pytest.raises(StreamError, match=f"^{header}: missing from the stream folder$"):
        read_stream(folder)


def test_missing_folder_and_file_path(tmp_path: Path) -> None:
    with pytest.raises(StreamError, match="stream folder not found"):
        read_stream(tmp_path / "nope")
    (tmp_path / "f").write_text("x")
    with pytest.raises(StreamError, match="it is a file"):
        read_stream(tmp_path / "f")


@pytest.mark.parametrize("name", ["notes", "queries", "qrels"])
def test_missing_required_file(tmp_path: Path, name: str) -> None:
    folder = write_raw(tmp_path / "s", base_frames())
    (folder / f"{name}.parquet").unlink()
    with pytest.raises(StreamError, match=rf"^{re.escape(str(folder / name))}\.parquet: missing "
                                          rf"from the stream folder \({name}\.csv is also "
                                          r"accepted\)$"):
        read_stream(folder)


@pytest.mark.parametrize("name", ["notes.parquet", "qrels.parquet", "accesses.parquet",
                                  "query_embeddings.npy"])
def test_empty_file(tmp_path: Path, name: str) -> None:
    folder = write_raw(tmp_path / "s", base_frames())
    (folder / name).write_bytes(b"")
    with pytest.raises(StreamError, match=rf"^{re.escape(str(folder / name))}: file is empty$"):
        read_stream(folder)


def test_empty_csv_file(tmp_path: Path) -> None:
    folder = write_raw(tmp_path / "s", base_frames(), fmt="csv")
    (folder / "queries.csv").write_text("")
    with pytest.raises(StreamError, match=rf"^{re.escape(str(folder / 'queries.csv'))}: "
                                          "file is empty$"):
        read_stream(folder)


@pytest.mark.parametrize("name", ["notes.parquet", "note_embeddings.npy"])
def test_unreadable_file(tmp_path: Path, name: str) -> None:
    folder = write_raw(tmp_path / "s", base_frames())
    (folder / name).write_bytes(b"PAR1 this is not really a parquet file or an array")
    # (numpy reads a file that is not .npy as a pickle: not what to say)
    said = "not a .npy file" if name.endswith(".npy") else "cannot be read"
    with pytest.raises(StreamError, match=rf"^{re.escape(str(folder / name))}: {said}"):
        read_stream(folder)


def test_both_parquet_and_csv_is_ambiguous(tmp_path: Path) -> None:
    parts = base_frames()
    folder = write_raw(tmp_path / "s", parts)
    parts["notes"].to_csv(folder / "notes.csv", index=False)
    with pytest.raises(StreamError, match="both notes.parquet and notes.csv exist"):
        read_stream(folder)


# ---------------------------------------------------------------------------
# Atomic write
# ---------------------------------------------------------------------------

def test_failure_midway_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = build(base_frames())
    calls: list[str] = []

    def boom(arr: np.ndarray, path: Path) -> None:
        calls.append(path.name)
        raise OSError("disk full")

    monkeypatch.setattr(ms, "_write_npy", boom)
    with pytest.raises(OSError, match="disk full"):
        write_stream(s, tmp_path / "out")
    assert calls == ["note_embeddings.npy"]  # the tables were already written
    assert not (tmp_path / "out").exists()
    assert list(tmp_path.iterdir()) == []  # no temporary folder left behind


def test_a_disk_failure_names_the_folder_asked_for(tmp_path: Path, monkeypatch) -> None:
    """The error of a failed write names ``path``, not the temporary folder
    it was written in (gone by then)."""
    import errno

    def full(arr: np.ndarray, path: Path) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(ms, "_write_npy", full)
    with pytest.raises(OSError) as info:
        write_stream(build(base_frames()), tmp_path / "out")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs a place no folder can be made")
def test_a_place_no_folder_can_be_made_is_a_stream_error(tmp_path: Path) -> None:
    """Before: an OSError naming the temporary folder (exit code 1, as a
    full disk), not the path given."""
    with pytest.raises(StreamError, match=r"^cannot write a stream at /proc/memsim-no/s: "):
        write_stream(build(base_frames()), "/proc/memsim-no/s")


def test_unwritable_extra_column_leaves_nothing(tmp_path: Path) -> None:
    parts = base_frames()
    parts["qrels"]["junk"] = pd.Series([1, "a", 2.5, None], dtype=object)
    s = build(parts)
    with pytest.raises(StreamError, match=r"^qrels\.parquet: cannot be written"):
        write_stream(s, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_unserialisable_meta_is_refused_before_writing(tmp_path: Path) -> None:
    s = build(base_frames(), meta={"name": "m", "obj": object()})
    with pytest.raises(StreamError, match="^stream.json: meta cannot be written"):
        write_stream(s, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_existing_folder_is_refused(tmp_path: Path) -> None:
    s = build(base_frames())
    write_stream(s, tmp_path / "out")
    with pytest.raises(StreamError, match="refusing to overwrite non-empty folder"):
        write_stream(s, tmp_path / "out")
    assert_streams_equal(s, read_stream(tmp_path / "out"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(StreamError, match="over a file"):
        write_stream(s, tmp_path / "file")


def test_existing_empty_folder_and_missing_parents_are_fine(tmp_path: Path) -> None:
    s = build(base_frames())
    (tmp_path / "empty").mkdir()
    write_stream(s, tmp_path / "empty")
    write_stream(s, tmp_path / "a" / "b" / "c")
    assert_streams_equal(read_stream(tmp_path / "empty"), read_stream(tmp_path / "a" / "b" / "c"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "empty"]


def test_write_revalidates_a_mutated_stream(tmp_path: Path) -> None:
    s = build(base_frames())
    s.notes.loc[0, "tokens"] = 0  # frames are mutable even in a frozen Stream
    with pytest.raises(StreamError, match="column 'tokens': row 0"):
        write_stream(s, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_write_refuses_non_stream(tmp_path: Path) -> None:
    with pytest.raises(StreamError, match="expected a Stream"):
        write_stream({"notes": None}, tmp_path / "out")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------

def test_describe_stream() -> None:
    parts = full_parts()
    # Query 3 has no relevant note; (1, 12) names a note created after query 1.
    parts["qrels"] = pd.DataFrame({"query_id": [1, 2, 2, 1], "note_id": [10, 12, 11, 12],
                                   "gain": [1.0, 2.0, -1.0, -1.0]})
    text = describe_stream(build(parts, meta={"name": "demo", "source": "unit"}))
    assert text.splitlines()[0] == "stream 'demo' (source: unit)"
    assert "notes: 5, created -3 .. 4 days, 3 actors" in text
    assert "tokens per note: min 8, median 60" in text and "max 4,000" in text
    assert "queries: 3, t 0.5 .. 5 days, 3 actors" in text
    assert "qrels: 4 (2 relevant, 2 misleading)" in text
    assert "queries with no relevant note: 1 (33.3%)" in text
    assert "qrels naming a note created after its query: 1" in text
    assert "accesses: 2" in text and "embeddings: dimension 4" in text


# ---------------------------------------------------------------------------
# Fuzz: corrupted input either loads or raises StreamError, nothing else.
# ---------------------------------------------------------------------------

NASTY = [0, -1, 1, 3.5, -0.0, np.nan, np.inf, -np.inf, None, pd.NA, "abc", "12", "", "nan",
         True, False, 10**12, 10**20, -(2**63), 1e300, [1], b"x", pd.Timestamp("2024-01-01"),
         1 + 2j, "true"]


@st.composite
def valid_parts(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 6))
    m = draw(st.integers(0, 4))
    note_ids = draw(st.lists(st.integers(-5, 50), min_size=n, max_size=n, unique=True))
    query_ids = draw(st.lists(st.integers(0, 50), min_size=m, max_size=m, unique=True))
    times = st.floats(-100, 100, allow_nan=False)
    notes = pd.DataFrame({
        "note_id": pd.Series(note_ids, dtype="int64"),
        "created_at": pd.Series(draw(st.lists(times, min_size=n, max_size=n)), dtype=float),
        "tokens": pd.Series(draw(st.lists(st.integers(1, 10**12), min_size=n, max_size=n)),
                            dtype="int64"),
        "actor": pd.Series(draw(st.lists(st.sampled_from("abc"), min_size=n, max_size=n)), dtype=str),
    })
    if draw(st.booleans()):
        notes["importance"] = draw(st.lists(st.floats(0, 5), min_size=n, max_size=n))
        notes["expires_at"] = notes["created_at"] + 1.0
        notes["pinned"] = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    queries = pd.DataFrame({
        "query_id": pd.Series(query_ids, dtype="int64"),
        "t": pd.Series(draw(st.lists(times, min_size=m, max_size=m)), dtype=float),
        "actor": pd.Series(draw(st.lists(st.sampled_from("ab"), min_size=m, max_size=m)), dtype=str),
    })
    pairs = sorted({(q, k) for q in query_ids for k in note_ids})
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=6)) if pairs else []
    qrels = pd.DataFrame({
        "query_id": pd.Series([p[0] for p in chosen], dtype="int64"),
        "note_id": pd.Series([p[1] for p in chosen], dtype="int64"),
        "gain": pd.Series(draw(st.lists(st.sampled_from([1.0, 2.0, -1.0]),
                                        min_size=len(chosen), max_size=len(chosen))), dtype=float),
    })
    accesses = None
    if note_ids and draw(st.booleans()):
        k = draw(st.integers(0, 3))
        accesses = pd.DataFrame({
            "t": pd.Series(draw(st.lists(times, min_size=k, max_size=k)), dtype=float),
            "note_id": pd.Series(draw(st.lists(st.sampled_from(note_ids), min_size=k, max_size=k)),
                                 dtype="int64"),
            "actor": pd.Series(["a"] * k, dtype=str),
        })
    d = draw(st.integers(1, 3))
    emb = draw(st.booleans())
    return {"notes": notes, "queries": queries, "qrels": qrels, "accesses": accesses,
            "note_embeddings": np.ones((n, d), np.float32) if emb else None,
            "query_embeddings": np.ones((m, d), np.float32) if emb else None}


@st.composite
def corrupted_parts(draw: st.DrawFn) -> dict[str, Any]:
    parts = draw(valid_parts())
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["cell", "drop", "dup_row", "cast", "emb", "extra", "rename"]))
        present = [t for t in TABLES if parts[t] is not None]
        table = draw(st.sampled_from(present))
        frame = parts[table].copy()
        cols = list(frame.columns)
        if not frame.columns.is_unique and kind in ("cell", "cast"):
            kind = "drop"  # per-column edits need unique names; a renamed twin is already bad
        if kind == "cell" and len(frame) and cols:
            set_cell(frame, draw(st.sampled_from(cols + ["tier", "salience", "updated_at"])),
                     draw(st.integers(0, len(frame) - 1)), draw(st.sampled_from(NASTY)))
        elif kind == "drop" and cols:
            frame = frame.drop(columns=[draw(st.sampled_from(cols))])
        elif kind == "dup_row" and len(frame):
            frame = pd.concat([frame, frame.iloc[[draw(st.integers(0, len(frame) - 1))]]],
                              ignore_index=True)
        elif kind == "cast" and cols:
            col = draw(st.sampled_from(cols))
            try:
                frame[col] = frame[col].astype(draw(st.sampled_from([str, object, float,
                                                                     "category"])))
            except (ValueError, TypeError):  # e.g. "a" as float: not a corruption we can make
                pass
        elif kind == "extra":
            value = draw(st.sampled_from(NASTY))
            frame[draw(st.sampled_from(["topic", 0, "note_id"]))] = pd.Series(
                [value] * len(frame), dtype=object, index=frame.index)
        elif kind == "rename" and cols:
            frame = frame.rename(columns={draw(st.sampled_from(cols)): "tokens"})
        elif kind == "emb":
            key = draw(st.sampled_from(["note_embeddings", "query_embeddings"]))
            parts[key] = draw(st.sampled_from([
                None, np.zeros((2, 2)), np.zeros(3), np.full((len(parts["notes"]), 2), np.nan),
                np.full((len(parts["queries"]), 2), 1e40), np.array([["a"]]), [[1.0]],
                np.zeros((len(parts["notes"]), 0)),
            ]))
        parts[table] = frame
    return parts


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=corrupted_parts())
def test_fuzz_in_memory_loads_or_raises_stream_error(parts: dict[str, Any]) -> None:
    try:
        s = build(parts)
    except StreamError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    # Whatever loaded is canonical and valid again.
    assert s.notes["note_id"].is_monotonic_increasing and s.notes["note_id"].is_unique
    assert s.notes["tokens"].dtype == np.int64 and (s.notes["tokens"] > 0).all()
    assert np.isfinite(s.notes["created_at"]).all() and np.isfinite(s.queries["t"]).all()
    assert_streams_equal(s, make_stream(s.notes, s.queries, s.qrels, s.accesses,
                                        s.note_embeddings, s.query_embeddings))
    describe_stream(s)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(parts=valid_parts())
def test_valid_streams_load_and_round_trip(tmp_path: Path, parts: dict[str, Any]) -> None:
    s = build(parts, meta={"name": "fuzz"})
    back = read_stream(write_stream(s, tmp_path / f"s{len(list(tmp_path.iterdir()))}"))
    assert_streams_equal(s, back)
    # The same tables as CSV read back to the same stream.
    folder = write_raw(tmp_path / f"c{len(list(tmp_path.iterdir()))}", parts, fmt="csv")
    assert_streams_equal(s, read_stream(folder))


@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(parts=valid_parts(), fmt=st.sampled_from(["parquet", "csv"]), data=st.data())
def test_fuzz_on_disk_loads_or_raises_stream_error(tmp_path: Path, parts: dict[str, Any],
                                                   fmt: str, data: st.DataObject) -> None:
    folder = tmp_path / f"s{len(list(tmp_path.iterdir()))}"
    write_raw(folder, parts, fmt=fmt)
    files = sorted(p for p in folder.iterdir())
    victim = data.draw(st.sampled_from(files))
    raw = victim.read_bytes()
    how = data.draw(st.sampled_from(["truncate", "flip", "garbage", "keep"]))
    if how == "truncate":
        raw = raw[: data.draw(st.integers(0, max(len(raw) - 1, 0)))]
    elif how == "flip" and raw:
        i = data.draw(st.integers(0, len(raw) - 1))
        raw = raw[:i] + bytes([raw[i] ^ 0xFF]) + raw[i + 1:]
    elif how == "garbage":
        raw = data.draw(st.binary(max_size=64))
    victim.write_bytes(raw)
    try:
        s = read_stream(folder)
    except StreamError as exc:
        assert str(exc)
        return
    assert isinstance(s, Stream)


def test_token_counts_are_bounded_so_store_sums_cannot_wrap():
    from memsim.data.stream import MAX_TOKENS, make_stream
    from memsim.core.errors import StreamError
    notes = pd.DataFrame({"note_id": [0, 1], "created_at": [0.0, 1.0],
                          "tokens": [10, 2 ** 62], "actor": ["a", "a"]})
    queries = pd.DataFrame({"query_id": [0], "t": [2.0], "actor": ["a"]})
    qrels = pd.DataFrame({"query_id": [0], "note_id": [0], "gain": [1.0]})
    with pytest.raises(StreamError, match=r"tokens.*row 1.*at most 1,099,511,627,776"):
        make_stream(notes, queries, qrels)
    notes["tokens"] = [10, MAX_TOKENS]
    make_stream(notes, queries, qrels)  # the bound itself is allowed


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), max_size=40))
def test_first_repeat_flags_the_row_pandas_would(pairs):
    from memsim.data.stream import _first_repeat
    a = np.array([p[0] for p in pairs], dtype=np.int64)
    b = np.array([p[1] for p in pairs], dtype=np.int64)
    dup = pd.DataFrame({"a": a, "b": b}).duplicated(keep="first").to_numpy()
    assert _first_repeat(a, b) == (int(np.flatnonzero(dup)[0]) if dup.any() else None)
