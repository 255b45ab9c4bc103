"""What the trace importer says and reads at three edges users hit: a time
going backwards in a trace kept in seconds, a far-off ``expires_at`` written
for "never", and a TREC qrels file that judges nothing relevant."""

from __future__ import annotations

import json

import pytest

from memsim.core.errors import StreamError
from memsim.data.importers.trace import import_trace


def _write(path, events):
    path.write_text("\n".join(json.dumps(e) for e in events) + "\n", encoding="utf-8")
    return path


HEAD = {"event": "header", "format": "memsim-trace", "version": 1}


def test_a_time_going_backwards_is_given_in_the_traces_own_unit(tmp_path):
    p = _write(tmp_path / "t.jsonl", [
        {**HEAD, "time_unit": "second"},
        {"event": "note_added", "id": 1, "t": 100, "actor": "a", "text": "x"},
        {"event": "note_added", "id": 2, "t": 50, "actor": "a", "text": "y"}])
    with pytest.raises(StreamError, match=r"line 3: field 't': 50 seconds since the origin "
                                          r"\(0.000578704 days\) is before the previous "
                                          r"event's time \(100 seconds, "):
        import_trace(p)


def test_a_far_off_expiry_says_how_to_write_never(tmp_path):
    p = _write(tmp_path / "t.jsonl", [
        HEAD, {"event": "note_added", "id": 1, "t": 0, "actor": "a", "text": "x",
               "expires_at": "9999-12-31"}])
    with pytest.raises(StreamError, match="expires_at.*never expires, leave expires_at out"):
        import_trace(p)
    # (the same date as a creation time is a unit or origin mistake)
    p = _write(tmp_path / "t.jsonl", [
        HEAD, {"event": "note_added", "id": 1, "t": "9999-12-31", "actor": "a", "text": "x"}])
    with pytest.raises(StreamError, match="check the header's time_unit") as err:
        import_trace(p)
    assert "never expires" not in str(err.value)


def test_a_qrels_file_that_judges_nothing_relevant_is_the_ground_truth(tmp_path):
    """A qrels file given with the trace is its ground truth even when every
    grade is 0: the trace's ``used`` events do not stand in for it."""
    p = _write(tmp_path / "t.jsonl", [
        HEAD, {"event": "note_added", "id": 1, "t": 0, "actor": "a", "text": "x"},
        {"event": "query", "id": "q1", "t": 1, "actor": "a", "text": "x?"},
        {"event": "used", "query": "q1", "notes": [1]}])
    assert import_trace(p).meta["qrels_from"] == "used"
    zero = tmp_path / "zero.qrels"
    zero.write_text("q1 0 1 0\n", encoding="utf-8")
    s = import_trace(p, qrels=zero)
    assert s.meta["qrels_from"] == "judgement"
    assert len(s.qrels) == 0
    graded = tmp_path / "graded.qrels"
    graded.write_text("q1 0 1 2\n", encoding="utf-8")
    s = import_trace(p, qrels=graded)
    assert s.meta["qrels_from"] == "judgement" and s.qrels["gain"].tolist() == [2.0]
