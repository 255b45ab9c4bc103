"""`memsim stream check trace` refuses exactly what `memsim stream import
trace` refuses, with the same true message (docs/contracts/trace.md).

- number fields (importance, salience, scores, gain, times, embedding
  values) take any finite number, huge whole-valued floats (1e19, 1e308)
  included; integer fields (ids, tokens, budget, category, version) keep
  their 64-bit rule; check and import agree on every value of each;
- a required field left out is "required field is missing", one given as
  null is refused naming null, by both commands alike;
- a line that is not JSON names the column within its line; a folder given
  for the trace is named as one.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsim.core.errors import StreamError
from memsim.data.importers.trace import check_trace, import_trace

pytest.importorskip("jsonschema", reason="the check applies the published schema with it")

HEADER = {"event": "header", "format": "memsim-trace", "version": 1}


def _base(emb: bool = False) -> list[dict]:
    """A small valid trace: every numeric field has a line of its own to vary."""
    def e(x: float) -> dict:
        return {"embedding": [0.5, x]} if emb else {}
    return [
        dict(HEADER),                                                               # 1
        {"event": "note_added", "id": 0, "t": 0, "actor": "a", "text": "hello world",
         **e(0.1)},                                                                 # 2
        {"event": "note_added", "id": 1, "t": 0, "actor": "a", "text": "more words",
         **e(0.2)},                                                                 # 3
        {"event": "query", "id": 0, "t": 1, "actor": "a", "text": "hello", **e(0.3)},  # 4
        {"event": "retrieved", "query": 0, "notes": [0, 1], "scores": [0.5, 0.25]},   # 5
        {"event": "judgement", "query": 0, "note": 0, "gain": 1},                     # 6
        {"event": "note_added", "id": 2, "t": 1, "actor": "a", "text": "last note",
         **e(0.4)},                                                                 # 7
    ]


# field -> (line, how to set the value on a copy of the base trace, its name
# in messages, a number field?)
def _setter(line: int, key: str, index: int | None = None, emb: bool = False):
    def put(value):
        events = _base(emb)
        ev = events[line - 1]
        if index is None:
            ev[key] = value
        else:
            ev[key][index] = value
        return events
    return put


FIELDS = {
    # number fields
    "importance": (7, _setter(7, "importance"), "importance", True),
    "salience": (7, _setter(7, "salience"), "salience", True),
    "scores[0]": (5, _setter(5, "scores", 0), "scores[0]", True),
    "gain": (6, _setter(6, "gain"), "gain", True),
    "t": (7, _setter(7, "t"), "t", True),
    "expires_at": (7, _setter(7, "expires_at"), "expires_at", True),
    "embedding[1]": (7, _setter(7, "embedding", 1, emb=True), "embedding", True),
    # integer fields
    "id": (7, _setter(7, "id"), "id", False),
    "tokens": (7, _setter(7, "tokens"), "tokens", False),
    "budget": (4, _setter(4, "budget"), "budget", False),
    "category": (4, _setter(4, "category"), "category", False),
    "note": (6, _setter(6, "note"), "note", False),
    "version": (1, _setter(1, "version"), "version", False),
}
NUMBER_FIELDS = [f for f, spec in FIELDS.items() if spec[3]]


def _write(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    return path


def _both(path: Path) -> tuple[str | None, list[str]]:
    """(the import's refusal or None, the check's errors)."""
    try:
        import_trace(path)
        refused = None
    except StreamError as exc:
        refused = str(exc)
    errors, more = check_trace(path, limit=1000)
    assert more == 0
    return refused, errors


def _where(message: str) -> str:
    """``FILE: line N: field 'F'`` of a message."""
    return ": ".join(message.split(": ")[:3])


def _agree(path: Path, field: str, value) -> None:
    refused, errors = _both(path)
    assert (refused is None) == (not errors), (field, value, refused, errors)
    if refused is None:
        return
    # the check names the line and field the import stops at
    assert _where(refused) in {_where(e) for e in errors}, (field, value, refused, errors)
    if FIELDS[field][3]:
        # a number field: one message, the same from both, never the rule of
        # an integer field
        assert [e for e in errors if _where(e) == _where(refused)] == [refused], errors
        for message in (refused, *errors):
            assert "(an integer within 64 bits)" not in message, message


@pytest.mark.parametrize("value", [1e19, -1e19, 1e308, 2.0 ** 64, 1.7976931348623157e308])
@pytest.mark.parametrize("field", NUMBER_FIELDS)
def test_huge_whole_valued_floats_check_as_they_import(tmp_path, field, value):
    line, put, _, _ = FIELDS[field]
    path = _write(tmp_path / "t.jsonl", put(value))
    _agree(path, field, value)


@pytest.mark.parametrize("field", ["importance", "salience", "scores[0]", "gain"])
@pytest.mark.parametrize("value", [1e19, 1e308])
def test_a_huge_float_score_or_weight_is_accepted_by_both(tmp_path, field, value):
    path = _write(tmp_path / "t.jsonl", FIELDS[field][1](value))
    refused, errors = _both(path)
    assert refused is None and errors == []


def test_a_huge_float_embedding_value_within_float32_is_accepted_by_both(tmp_path):
    path = _write(tmp_path / "t.jsonl", FIELDS["embedding[1]"][1](1e19))
    assert _both(path) == (None, [])


@pytest.mark.parametrize("field", ["importance", "salience", "gain", "t", "id", "tokens",
                                   "budget"])
def test_an_integer_beyond_64_bits_is_refused_by_both_naming_it(tmp_path, field):
    # an integer written as one (no decimal point) stays within 64 bits
    line, put, name, _ = FIELDS[field]
    path = _write(tmp_path / "t.jsonl", put(10 ** 19))
    refused, errors = _both(path)
    assert refused is not None
    assert refused.startswith(f"t.jsonl: line {line}: field {name!r}: ")
    assert _where(refused) in {_where(e) for e in errors}


@pytest.mark.parametrize("field, value, message", [
    ("importance", -1e19, "must be a finite number >= 0, got -1e+19"),
    ("salience", -0.5, "must be a finite number >= 0, got -0.5"),
    ("scores[0]", "high", 'must be a finite number, got "high"'),
    ("gain", 0.0, "must be a non-zero number, got 0.0"),
    ("gain", 0, "must be a non-zero number, got 0"),
    ("importance", -(2 ** 70), "integer beyond 64 bits, got -1180591620717411303424"),
    ("t", 10 ** 19, "integer beyond 64 bits, got 10000000000000000000"),
    ("embedding[1]", 1e39, "item 1 is beyond float32's range (about 3.4e38; embeddings are "
     "stored as float32), got 1e+39"),
])
def test_a_refused_number_reads_the_same_from_both(tmp_path, field, value, message):
    line, put, name, _ = FIELDS[field]
    path = _write(tmp_path / "t.jsonl", put(value))
    refused, errors = _both(path)
    want = f"t.jsonl: line {line}: field {name!r}: {message}"
    assert refused == want
    assert [e for e in errors if e.startswith(f"t.jsonl: line {line}: ")] == [want]


NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2 ** 70), 2 ** 70).map(float),                # whole-valued floats
    st.sampled_from([1e19, -1e19, 1e308, -1e308, 2.0 ** 53, 2.0 ** 63, 2.0 ** 64, 0.0, -0.0,
                     1.7976931348623157e308, 3.4028235677973366e38, 1e39]),
    st.integers(-(2 ** 70), 2 ** 70),
    st.sampled_from([0, 1, -1, 2 ** 63 - 1, 2 ** 63, -(2 ** 63), -(2 ** 63) - 1, 2 ** 40,
                     2 ** 40 + 1, 10 ** 400]),
    st.booleans(),
    st.none(),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(sorted(FIELDS)), value=NUMBERS)
def test_check_accepts_a_number_iff_import_does(field, value):
    with tempfile.TemporaryDirectory() as d:
        path = _write(Path(d) / "t.jsonl", FIELDS[field][1](value))
        _agree(path, field, value)


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_check_and_import_agree_on_edge_numbers_of_every_field(tmp_path, field):
    for i, value in enumerate([1e19, -1e19, 1e308, 2.0 ** 53, 2.0 ** 63, 7.0, 0.5, 0, -1,
                               2 ** 63, 10 ** 400, math.inf, math.nan, True, None]):
        _agree(_write(tmp_path / f"t{i}.jsonl", FIELDS[field][1](value)), field, value)


def test_the_importer_says_what_a_time_is_as_the_schema_does():
    from memsim.data.importers.trace import _TIME, SCHEMA_PATH
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert schema["$defs"]["time"]["description"] == _TIME
    assert schema["$defs"]["number"]["description"] == "a finite number"
    assert "not" not in schema["$defs"]["number"]   # no integer rule on a number field


# -- missing vs null -----------------------------------------------------------

REQUIRED = [(2, "id"), (2, "t"), (2, "actor"), (4, "id"), (4, "t"), (4, "actor"),
            (5, "query"), (5, "notes"), (6, "query"), (6, "note"), (6, "gain")]


def _only_line(errors: list[str], line: int) -> list[str]:
    return [e for e in errors if e.startswith(f"t.jsonl: line {line}: ")]


@pytest.mark.parametrize("line, field", REQUIRED)
def test_a_required_field_left_out_is_missing_for_both(tmp_path, line, field):
    events = _base()
    del events[line - 1][field]
    refused, errors = _both(_write(tmp_path / "t.jsonl", events))
    want = f"t.jsonl: line {line}: field {field!r}: required field is missing"
    assert refused == want
    assert _only_line(errors, line) == [want]


@pytest.mark.parametrize("line, field", REQUIRED)
def test_a_required_field_given_as_null_is_refused_naming_null_by_both(tmp_path, line, field):
    events = _base()
    events[line - 1][field] = None
    refused, errors = _both(_write(tmp_path / "t.jsonl", events))
    assert refused is not None and "missing" not in refused
    assert refused.startswith(f"t.jsonl: line {line}: field {field!r}: ")
    assert refused.endswith("got null")
    assert _only_line(errors, line) == [refused]


def test_a_line_without_event_is_missing_it_and_a_null_event_is_named(tmp_path):
    events = _base()
    del events[6]["event"]
    refused, errors = _both(_write(tmp_path / "t.jsonl", events))
    want = "t.jsonl: line 7: field 'event': required field is missing"
    assert refused == want and errors == [want]
    events[6]["event"] = None
    refused, errors = _both(_write(tmp_path / "t.jsonl", events))
    assert refused.startswith("t.jsonl: line 7: field 'event': unknown event null; known: ")
    assert errors == [refused]


# -- cosmetic ------------------------------------------------------------------

def test_bad_json_names_the_column_within_its_line(tmp_path):
    path = tmp_path / "t.jsonl"
    lines = [json.dumps(e) for e in _base()]
    lines[3] = '{"event": "note_added", "id": 99,'
    lines[4] = '{"event": "used", "query": 0 "notes": [0]}'
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    refused, errors = _both(path)
    assert refused == ("t.jsonl: line 4: not valid JSON: Expecting property name enclosed in "
                       "double quotes at the end of the line")
    assert errors[:2] == [refused, "t.jsonl: line 5: not valid JSON: Expecting ',' delimiter "
                                   "at column 30"]


def test_a_directory_is_named_as_one_not_as_missing(tmp_path):
    for fn in (import_trace, check_trace):
        with pytest.raises(StreamError, match=r" is a directory, not a trace file"):
            fn(tmp_path)
    with pytest.raises(StreamError, match=r"^trace not found: "):
        check_trace(tmp_path / "nope.jsonl")
