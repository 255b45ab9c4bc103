"""Real users' data into the trace and LoCoMo readers: malformed input gets one
clear error naming the file, the line (or record) and the key, never a raw
traceback, a silent coercion or a half-written result.

Each test here reproduces an input that was mishandled before (silently
changed, refused with a message that named no line, or a raw exception).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memsim.core.errors import StreamError
from memsim.data.importers.locomo import import_locomo
from memsim.data.importers.trace import SCHEMA_PATH, check_trace, cli_import_trace, import_trace
from memsim.data.trace import TraceWriter

NOTE = '{"event": "note_added", "id": 1, "t": 0, "actor": "a", "text": "the cat"}'
QUERY = '{"event": "query", "id": 1, "t": 1, "actor": "a", "text": "a cat"}'


def _lines(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _refused(path: Path) -> str:
    with pytest.raises(StreamError) as err:
        import_trace(path)
    return str(err.value)


# ---------------------------------------------------------------------------
# Trace importer
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("line, field", [
    # 2**53 + 1 written as a float: the parser reads 2**53, another id
    ('{"event": "note_added", "id": 9007199254740993.0, "t": 2, "actor": "a", "text": "x"}',
     "id"),
    ('{"event": "note_added", "id": 2, "t": 2, "actor": "a", "text": "x", '
     '"tokens": 9007199254740993.0}', "tokens"),
    ('{"event": "used", "query": 1, "notes": [9007199254740993.0]}', "notes[0]"),
])
def test_float_ids_and_counts_beyond_two_to_the_53_are_refused(tmp_path, line, field):
    msg = _refused(_lines(tmp_path / "f.jsonl", NOTE, QUERY, line))
    assert msg.startswith(f"f.jsonl: line 3: field {field!r}: ")
    assert "2**53" in msg


def test_a_repeated_key_is_refused_not_the_last_one_kept(tmp_path):
    path = _lines(tmp_path / "d.jsonl", NOTE, QUERY,
                  '{"event": "note_added", "id": 2, "id": 3, "t": 2, "actor": "a", "text": "x"}')
    assert _refused(path).startswith("d.jsonl: line 3: field 'id': appears twice")
    assert check_trace(path)[0][0].startswith("d.jsonl: line 3: field 'id': appears twice")


@pytest.mark.parametrize("field, line", [
    ("text", '{"event": "note_added", "id": 2, "t": 2, "actor": "a", "text": "x \\ud800 y"}'),
    ("actor", '{"event": "note_added", "id": 2, "t": 2, "actor": "\\udc00", "text": "x"}'),
    ("id", '{"event": "note_added", "id": "\\ud800", "t": 2, "actor": "a", "text": "x"}'),
])
def test_a_lone_surrogate_is_refused_at_its_line(tmp_path, field, line):
    path = _lines(tmp_path / "s.jsonl", NOTE, QUERY, line)
    assert _refused(path).startswith(f"s.jsonl: line 3: field {field!r}: ")
    errors, _ = check_trace(path)
    assert errors and errors[0].startswith(f"s.jsonl: line 3: field {field!r}: ")


def test_a_file_that_is_not_utf8_says_so(tmp_path):
    path = tmp_path / "u16.jsonl"
    path.write_bytes((NOTE + "\n" + QUERY + "\n").encode("utf-16"))
    msg = _refused(path)
    assert msg.startswith("u16.jsonl: line 1: ") and "UTF-8" in msg


@pytest.mark.parametrize("line, field", [
    ('{"event": "note_added", "id": 2, "t": 2, "actor": "a", "tokens": 2199023255552}',
     "tokens"),
    ('{"event": "query", "id": 2, "t": 2, "actor": "a", "text": "x", "budget": 2199023255552}',
     "budget"),
])
def test_token_counts_beyond_the_stream_limit_are_refused_at_their_line(tmp_path, line, field):
    path = _lines(tmp_path / "m.jsonl", NOTE, QUERY, line)
    assert _refused(path).startswith(f"m.jsonl: line 3: field {field!r}: ")
    # the published schema agrees with the importer
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(json.loads(line)))


def test_an_embedding_beyond_float32_is_refused_at_its_line(tmp_path):
    path = _lines(tmp_path / "e.jsonl",
                  '{"event": "note_added", "id": 1, "t": 0, "actor": "a", "tokens": 2, '
                  '"embedding": [1.0, 1e39]}',
                  '{"event": "query", "id": 1, "t": 1, "actor": "a", "embedding": [1.0, 0.0]}')
    assert _refused(path).startswith("e.jsonl: line 1: field 'embedding': ")


def test_a_header_value_that_is_not_finite_is_refused_at_its_line(tmp_path):
    path = _lines(tmp_path / "h.jsonl", '{"event": "header", "source": NaN}', NOTE, QUERY)
    assert _refused(path).startswith("h.jsonl: line 1: field 'source': ")
    assert check_trace(path)[0]
    # and nothing is written
    with pytest.raises(StreamError):
        cli_import_trace(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_unordered_trace_says_which_time_comes_first(tmp_path):
    path = _lines(tmp_path / "o.jsonl", '{"event": "header", "ordered": false}',
                  '{"event": "note_added", "id": 1, "t": 5, "actor": "a", "text": "x"}',
                  '{"event": "accessed", "note": 1, "t": 2, "actor": "a"}', QUERY)
    msg = _refused(path)
    # the note is added on an earlier line, but later in time
    assert msg.startswith("o.jsonl: line 3: field 'note': ")
    assert "before this line" not in msg and "line 2" in msg


def test_ordered_that_is_not_a_boolean_is_worded_alike_by_check_and_import(tmp_path):
    path = _lines(tmp_path / "h.jsonl", '{"event": "header", "ordered": "false"}', QUERY)
    for msg in (_refused(path), check_trace(path)[0][0]):
        assert msg.startswith("h.jsonl: line 1: field 'ordered': must be true or false"), msg
        assert msg.endswith('got "false"'), msg


@pytest.mark.parametrize("when", ['"2025-02-30"', '"0000-01-01"', '"2025-03-01T12:00z"'])
@pytest.mark.parametrize("whose", ["note", "query"])
def test_an_unordered_trace_refuses_a_time_it_cannot_read_at_its_own_line(tmp_path, when,
                                                                          whose):
    # the events that name the note or query come earlier in time: the bad
    # time is still the first error, at its line and field, in both
    # commands (not "added at a later time than this event")
    note_t, query_t = (when, "2.0") if whose == "note" else ("1.0", when)
    path = _lines(tmp_path / "u.jsonl", '{"event": "header", "ordered": false}',
                  f'{{"event": "note_added", "id": 1, "t": {note_t}, "actor": "a", '
                  '"text": "alpha beta"}',
                  '{"event": "note_added", "id": 2, "t": 1.0, "actor": "a", "text": "gamma"}',
                  f'{{"event": "query", "id": 10, "t": {query_t}, "actor": "a", '
                  '"text": "alpha"}',
                  '{"event": "used", "query": 10, "notes": [1]}')
    line = 2 if whose == "note" else 4
    for msg in (_refused(path), check_trace(path)[0][0]):
        assert msg.startswith(f"u.jsonl: line {line}: field 't': must be a "), msg
        assert "ISO 8601 time" in msg and f"got {when}" in msg


# ---------------------------------------------------------------------------
# Trace writer
# ---------------------------------------------------------------------------

def test_writer_leaves_scores_out_when_a_store_gives_none(tmp_path):
    path = tmp_path / "w.jsonl"
    with TraceWriter(path, clock=lambda: 1000.0) as w:
        w.note_added("n1", "x")
        q = w.query("x", id="q1")
        w.retrieved(q, ["n1"], scores=[None])
    s = import_trace(path)
    assert s.retrieved["note_id"].tolist() == [0] and s.retrieved["score"].isna().all()


@pytest.mark.parametrize("call", [
    lambda w: w.note_added("n2", "y", embedding=[float("nan"), 1.0]),
    lambda w: w.note_added("n2", "y", importance=float("inf")),
    lambda w: w.judgement("q1", "n1", 0),
    lambda w: w.judgement("q1", "n1", float("nan")),
    lambda w: w.write({"event": "note_added", "id": "n2", "actor": "a", "text": "y", "t": 1.0}),
])
def test_writer_refuses_an_event_the_importer_would_refuse(tmp_path, call):
    path = tmp_path / "w.jsonl"
    with TraceWriter(path, clock=lambda: 1000.0) as w:
        w.note_added("n1", "x", t=5.0)
        w.query("x", id="q1")
        before = path.read_text(encoding="utf-8")
        with pytest.raises(ValueError):
            call(w)
        assert path.read_text(encoding="utf-8") == before  # nothing half-written
    import_trace(path)


def test_writer_reopened_with_an_earlier_clock_keeps_times_in_order(tmp_path):
    path = tmp_path / "w.jsonl"
    with TraceWriter(path, clock=lambda: 2000.0) as w:
        w.note_added("n1", "x")
    with TraceWriter(path, clock=lambda: 1500.0) as w:
        w.query("x")
    s = import_trace(path)
    assert s.queries["t"].iloc[0] >= s.notes["created_at"].iloc[0]


# ---------------------------------------------------------------------------
# LoCoMo records
# ---------------------------------------------------------------------------

def _record() -> dict:
    return {
        "sample_id": "conv-1",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bob",
            "session_1_date_time": "1:00 pm on 1 March, 2023",
            "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I got a dog."},
                          {"speaker": "Bob", "dia_id": "D1:2", "text": "Nice!"}],
        },
        "qa": [{"question": "What did Ann get?", "answer": "a dog", "evidence": ["D1:1"],
                "category": 4}],
    }


def _locomo_refused(tmp_path, record) -> str:
    path = tmp_path / "loc.json"
    path.write_text(json.dumps(record if isinstance(record, list) else [record]),
                    encoding="utf-8")
    with pytest.raises(StreamError) as err:
        import_locomo(path)
    msg = str(err.value)
    assert msg.startswith(str(path)) and "\n" not in msg
    return msg


@pytest.mark.parametrize("value", [2.7, True])
def test_locomo_category_is_an_integer_never_truncated(tmp_path, value):
    rec = _record()
    rec["qa"][0]["category"] = value
    assert "qa item 0: category" in _locomo_refused(tmp_path, rec)


@pytest.mark.parametrize("where, key", [
    (lambda r: r["qa"][0], "question"),
    (lambda r: r["conversation"]["session_1"][0], "text"),
    (lambda r: r["conversation"]["session_1"][0], "speaker"),
])
def test_locomo_text_fields_must_be_strings_not_none(tmp_path, where, key):
    rec = _record()
    where(rec)[key] = None
    assert f"{key!r}" in _locomo_refused(tmp_path, rec)


def test_locomo_a_turn_id_given_twice_is_refused(tmp_path):
    rec = _record()
    rec["conversation"]["session_1"][1]["dia_id"] = "D1:1"
    assert "D1:1" in _locomo_refused(tmp_path, rec)


def test_locomo_a_turn_id_of_another_session_is_refused(tmp_path):
    rec = _record()
    rec["conversation"]["session_1"][1]["dia_id"] = "D2:5"
    assert "D2:5" in _locomo_refused(tmp_path, rec)


def test_locomo_a_session_that_is_not_a_list_is_refused(tmp_path):
    rec = _record()
    rec["conversation"]["session_2_date_time"] = "1:00 pm on 2 March, 2023"
    rec["conversation"]["session_2"] = "I moved to Lisbon."
    assert "session_2" in _locomo_refused(tmp_path, rec)


@pytest.mark.parametrize("value", [5, {"D1:1": 1}, 0, False, {}, [None], [13], [["D1:1"]]])
def test_locomo_evidence_of_another_type_is_one_clear_error(tmp_path, value):
    """Falsy values (0, false, {}) and lists of non-strings used to pass,
    the question losing its ground truth in silence."""
    rec = _record()
    rec["qa"][0]["evidence"] = value
    assert "qa item 0: evidence" in _locomo_refused(tmp_path, rec)


def test_locomo_a_file_without_records_is_refused(tmp_path):
    assert "no LoCoMo record" in _locomo_refused(tmp_path, [])


@pytest.mark.parametrize("name, data", [
    ("notes.csv", b"note_id,created_at,tokens,actor\n1,0,3,a\n"),
    ("notes.parquet", b"PAR1\x15\x04\x15\xa0\x01\xff\xfe"),
])
def test_a_table_given_as_a_trace_is_told_what_a_trace_is(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    msg = _refused(path)
    assert msg.startswith(f"{name}: line 1: ") and "JSON Lines" in msg and "stream folder" in msg


@pytest.mark.parametrize("grade", ["1_0", "\u0661"])
def test_a_trec_grade_is_a_plain_number(tmp_path, grade):
    trace = _lines(tmp_path / "t.jsonl", NOTE, QUERY)
    qrels = tmp_path / "q.txt"
    qrels.write_text(f"1 0 1 {grade}\n", encoding="utf-8")
    with pytest.raises(StreamError, match=r"^q.txt: line 1: field 'grade': must be a number"):
        import_trace(trace, qrels=qrels)


@pytest.mark.parametrize("tail, notes", [
    ('{"event": "note_added", "id": "n2", "t": 0.5, "ac', ["n1"]),  # a crash: dropped
    ('{"event": "note_added", "id": "n2", "t": 0.5, "actor": "a", "text": "y"}', ["n1", "n2"]),
])
def test_writer_reopened_on_a_last_line_without_newline_starts_a_new_line(tmp_path, tail, notes):
    path = tmp_path / "w.jsonl"
    with TraceWriter(path, clock=lambda: 1000.0) as w:
        w.note_added("n1", "x")
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(tail)
    with TraceWriter(path, clock=lambda: 1001.0) as w:
        w.query("x", id="q1")
    s = import_trace(path)
    assert s.notes["trace_id"].tolist() == notes and s.queries["trace_id"].tolist() == ["q1"]
