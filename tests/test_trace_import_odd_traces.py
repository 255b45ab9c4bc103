"""Valid traces written the way other loggers write them: an update that
logs the whole note again (its unchanged text included), and integers
written as floats where the schema reads them as integers (``3.0``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memsim.core.errors import StreamError
from memsim.data.importers.trace import check_trace, import_trace


def _write(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    return path


def _whole_note_update(embedding: bool) -> list[dict]:
    emb = {"embedding": [1.0, 0.0]} if embedding else {}
    return [
        {"event": "note_added", "id": "n", "t": 0, "actor": "a", "text": "Ann likes green tea",
         "tokens": 50, **emb},
        # an upsert log: the whole note again, only the importance is new
        {"event": "note_updated", "id": "n", "t": 1, "actor": "a",
         "text": "Ann likes green tea", "importance": 3},
        {"event": "query", "id": "q", "t": 2, "actor": "a", "text": "tea",
         **({"embedding": [1.0, 0.0]} if embedding else {})},
    ]


def test_an_update_repeating_the_text_keeps_the_tokens(tmp_path):
    s = import_trace(_write(tmp_path / "t.jsonl", _whole_note_update(False)))
    assert s.notes["tokens"].tolist() == [50, 50]       # not ceil(19 / 4) = 5
    assert s.notes["importance"].tolist() == [1.0, 3.0]


def test_an_update_repeating_the_text_needs_no_new_embedding(tmp_path):
    path = _write(tmp_path / "t.jsonl", _whole_note_update(True))
    assert check_trace(path) == ([], 0)
    s = import_trace(path)
    assert s.notes["tokens"].tolist() == [50, 50]
    assert s.note_embeddings.tolist() == [[1.0, 0.0], [1.0, 0.0]]


def test_a_changed_text_still_needs_its_embedding_and_recounts_tokens(tmp_path):
    events = _whole_note_update(True)
    events[1]["text"] = "Ann likes black coffee now"
    with pytest.raises(StreamError, match=r"line 2: field 'embedding': the text changed"):
        import_trace(_write(tmp_path / "t.jsonl", events))
    events = _whole_note_update(False)
    events[1]["text"] = "Ann likes black coffee now"
    s = import_trace(_write(tmp_path / "u.jsonl", events))
    assert s.notes["tokens"].tolist() == [50, 7]


def test_a_category_and_a_version_written_as_floats_are_integers(tmp_path):
    events = [{"event": "header", "format": "memsim-trace", "version": 1.0},
              {"event": "note_added", "id": 1, "t": 0, "actor": "a", "text": "red apple"},
              {"event": "query", "id": 1, "t": 1, "actor": "a", "text": "apple",
               "category": 3.0},
              {"event": "query", "id": 2, "t": 2, "actor": "a", "text": "pear", "category": 3}]
    path = _write(tmp_path / "t.jsonl", events)
    assert check_trace(path) == ([], 0)
    assert import_trace(path).queries["category"].tolist() == ["3", "3"]
    # a float that is no integer stays refused, at its line and field
    events[2]["category"] = 3.5
    with pytest.raises(StreamError, match=r"t\.jsonl: line 3: field 'category': .*3\.5"):
        import_trace(_write(path, events))


@pytest.mark.parametrize("key", ["name", "source", "time_unit", "origin", "version", "format",
                                 "ordered"])
def test_a_header_field_given_as_null_is_refused(tmp_path, key):
    # a required field may not be null, nor may the header's fields (the
    # trace format's rule); a name left out is fine
    events = [{"event": "header", "format": "memsim-trace", "name": "demo", key: None},
              {"event": "note_added", "id": 1, "t": 0, "actor": "a", "text": "red apple"},
              {"event": "query", "id": 1, "t": 1, "actor": "a", "text": "apple"}]
    path = _write(tmp_path / "t.jsonl", events)
    with pytest.raises(StreamError, match=rf"t\.jsonl: line 1: field '{key}': .*null"):
        import_trace(path)
    errors, _ = check_trace(path)
    assert len(errors) == 1 and f"field '{key}'" in errors[0]
    del events[0][key]
    if key != "name":
        assert import_trace(_write(path, events)).n_queries == 1
