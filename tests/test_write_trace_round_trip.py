"""``write_trace`` writes a stream as a trace that imports back to the same
stream: the logged ids and the versions of updated notes, organic reads
(``accesses``) and supersession (``superseded_at``) included. What a trace
cannot say is refused with a ``ValueError`` rather than dropped.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import memsim
from memsim.data.importers.trace import import_trace, write_trace
from memsim.data.stream import make_stream, write_stream
from memsim.data.workload import SyntheticWorkload

RICH = [
    {"event": "header", "format": "memsim-trace", "version": 1, "time_unit": "hour"},
    {"event": "note_added", "id": "a", "t": 0, "actor": "ann", "text": "Ann lives in Lisbon",
     "namespace": "u1", "importance": 2.5},
    {"event": "note_added", "id": 7, "t": 1, "actor": "bob", "text": "Bob has a dog named Rex",
     "namespace": "u1", "expires_at": 100, "tokens": 40},
    {"event": "note_added", "id": "c", "t": 2, "actor": "ann", "text": "Ann moved to Porto",
     "namespace": "u1", "supersedes": "a", "pinned": True},
    {"event": "note_added", "id": "d", "t": 2, "actor": "cy", "text": "Cy likes green tea",
     "namespace": "u2", "type": "semantic", "tier": "core"},
    {"event": "accessed", "note": 7, "t": 3, "actor": "bob"},
    {"event": "query", "id": "q1", "t": 4, "actor": "ann", "text": "where does Ann live",
     "namespace": "u1", "category": "where"},
    {"event": "retrieved", "query": "q1", "notes": ["c", "a", 7], "scores": [0.9, 0.5, 0.1]},
    {"event": "judgement", "query": "q1", "note": "c", "gain": 2},
    {"event": "judgement", "query": "q1", "note": "a", "gain": -1},
    {"event": "note_updated", "id": 7, "t": 5, "text": "Bob has two dogs", "importance": 3},
    {"event": "accessed", "note": 7, "t": 5.5, "actor": "ann"},
    {"event": "query", "id": "q2", "t": 6, "actor": "bob", "text": "what pets does Bob have",
     "namespace": "u1"},
    {"event": "retrieved", "query": "q2", "notes": [7]},
    {"event": "judgement", "query": "q2", "note": 7, "gain": 1},
    {"event": "note_updated", "id": 7, "t": 6.5, "namespace": "u2", "tier": "core"},
    {"event": "note_deleted", "id": "d", "t": 7},
    {"event": "query", "id": "q3", "t": 8, "actor": "cy", "text": "what does Cy drink",
     "namespace": "u2"},
    {"event": "judgement", "query": "q3", "note": 7, "gain": 0.5},
]


def _write(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    return path


def _assert_same(a, b) -> None:
    for table in ("notes", "queries", "qrels", "accesses", "retrieved"):
        x, y = getattr(a, table), getattr(b, table)
        if x is None or y is None:
            assert x is None and y is None, table
            continue
        assert list(x.columns) == list(y.columns), table
        pd.testing.assert_frame_equal(x.reset_index(drop=True), y.reset_index(drop=True),
                                      check_dtype=False, check_categorical=False, obj=table)
    assert np.array_equal(a.note_embeddings, b.note_embeddings)
    assert np.array_equal(a.query_embeddings, b.query_embeddings)


@pytest.mark.parametrize("embeddings", [True, False])
def test_an_imported_trace_with_updates_supersedes_and_reads_round_trips(tmp_path, embeddings):
    s = import_trace(_write(tmp_path / "rich.jsonl", RICH))
    assert s.notes["version"].max() == 2 and len(s.accesses) == 2
    assert s.notes["superseded_at"].notna().sum() == 1
    write_trace(s, tmp_path / "back.jsonl", embeddings=embeddings)
    back = import_trace(tmp_path / "back.jsonl")
    _assert_same(s, back)
    # the logged ids, not the stream's numbers: exports and qrels files match the log
    assert set(back.notes["trace_id"]) == {"a", "7", "c", "d"}
    events = [json.loads(line) for line in (tmp_path / "back.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events].count("note_updated") == 2


def test_an_update_that_repeats_tokens_or_expiry_is_written_so(tmp_path):
    """A later version keeps the fields of the one before unless the trace
    says otherwise: the written trace gives what changed, so the importer
    does not count tokens again from a new text or inherit an expiry."""
    events = [
        {"event": "note_added", "id": "n", "t": 0, "actor": "a", "text": "one two", "tokens": 90,
         "expires_at": 50},
        {"event": "note_updated", "id": "n", "t": 1, "text": "one two three four five six",
         "tokens": 90},
        {"event": "note_updated", "id": "n", "t": 2, "expires_at": 20},
        {"event": "query", "id": "q", "t": 3, "actor": "a", "text": "three"},
        {"event": "used", "query": "q", "notes": ["n"]},
    ]
    s = import_trace(_write(tmp_path / "v.jsonl", events))
    assert s.notes["tokens"].tolist() == [90, 90, 90]
    assert s.notes["expires_at"].tolist() == [1.0, 2.0, 20.0]
    write_trace(s, tmp_path / "back.jsonl")
    _assert_same(s, import_trace(tmp_path / "back.jsonl"))


def test_organic_reads_of_a_synthetic_stream_survive_and_give_the_same_metrics(tmp_path):
    stream = SyntheticWorkload(horizon_days=8, backfill_days=8, notes_per_day=6,
                               queries_per_day=3, accesses_per_day=15).generate(4)
    assert len(stream.accesses) > 50
    write_trace(stream, tmp_path / "t.jsonl", embeddings=True)
    back = import_trace(tmp_path / "t.jsonl")
    pd.testing.assert_frame_equal(back.accesses, stream.accesses, check_dtype=False,
                                  check_categorical=False)

    def queries(s, name):
        write_stream(s, tmp_path / name)
        exp = memsim.experiment_from_dict({
            "experiment": {"name": "acc", "replicates": 1, "seed": 5},
            "workload": {"source": str(tmp_path / name)},
            "policies": {"ga": {"preset": "generative-agents"}}})
        return memsim.run_experiment(exp, out=None).queries

    # generative-agents' recency counts the organic reads
    a, b = queries(stream, "direct"), queries(back, "traced")
    for col in ("utility", "recall", "ndcg@10"):
        assert np.array_equal(a[col].to_numpy(), b[col].to_numpy(), equal_nan=True), col


def _tiny_stream(**notes_extra) -> object:
    notes = pd.DataFrame({"note_id": [0, 1], "created_at": [0.0, 1.0], "tokens": [3, 3],
                          "actor": ["a", "a"], "text": ["red apple", "green pear"],
                          **notes_extra})
    queries = pd.DataFrame({"query_id": [0], "t": [2.0], "actor": ["a"], "text": ["apple"]})
    qrels = pd.DataFrame({"query_id": [0], "note_id": [0], "gain": [1.0]})
    return notes, queries, qrels


def test_a_supersession_no_note_could_carry_is_refused_not_dropped(tmp_path):
    notes, queries, qrels = _tiny_stream(superseded_at=[1.5, np.nan])
    s = make_stream(notes, queries, qrels, None, np.eye(2, dtype=np.float32),
                    np.eye(2, dtype=np.float32)[:1], {})
    with pytest.raises(ValueError, match=r"note 0 is superseded at t = 1\.5"):
        write_trace(s, tmp_path / "x.jsonl")
    # at the time another note is added, that note carries it
    notes["superseded_at"] = [1.0, np.nan]
    s = make_stream(notes, queries, qrels, None, np.eye(2, dtype=np.float32),
                    np.eye(2, dtype=np.float32)[:1], {})
    write_trace(s, tmp_path / "y.jsonl")
    assert import_trace(tmp_path / "y.jsonl").notes["superseded_at"].tolist()[0] == 1.0


def test_a_read_before_its_note_exists_is_refused_not_dropped(tmp_path):
    notes, queries, qrels = _tiny_stream()
    reads = pd.DataFrame({"t": [0.5], "note_id": [1], "actor": ["a"]})
    s = make_stream(notes, queries, qrels, reads, None, None, {})
    with pytest.raises(ValueError, match=r"accesses: note 1 is read at t = 0\.5, before it"):
        write_trace(s, tmp_path / "x.jsonl")
    assert not (tmp_path / "x.jsonl").exists()


def test_a_note_updated_in_place_is_refused_not_dropped(tmp_path):
    # a trace's update is a version of its own: a row updated in place (the
    # decay's "updated" clock) would import back with updated_at = created_at
    notes, queries, qrels = _tiny_stream(updated_at=[np.nan, 1.75])
    s = make_stream(notes, queries, qrels, None, None, None, {})
    with pytest.raises(ValueError, match=r"^notes: note 1 has updated_at = 1\.75, later than "
                       r"its created_at = 1 \(1 such row\): a trace cannot say so"):
        write_trace(s, tmp_path / "x.jsonl")
    assert not (tmp_path / "x.jsonl").exists()
    # never updated (NaN, or the creation time) is written
    notes["updated_at"] = [np.nan, 1.0]
    write_trace(make_stream(notes, queries, qrels, None, None, None, {}), tmp_path / "y.jsonl")
    assert import_trace(tmp_path / "y.jsonl").notes["updated_at"].tolist() == [0.0, 1.0]


def test_a_ranking_scored_in_part_is_refused_not_dropped(tmp_path):
    notes, queries, qrels = _tiny_stream()
    s = make_stream(notes, queries, qrels, None, None, None, {})
    part = pd.DataFrame({"query_id": [0, 0], "rank": [1, 2], "note_id": [0, 1],
                         "score": [0.9, np.nan]})
    with pytest.raises(ValueError, match=r"^retrieved: query 0 has a score for 1 of its 2 notes "
                       r"\(1 such query\): a trace cannot say so"):
        write_trace(s, tmp_path / "x.jsonl", retrieved=part)
    assert not (tmp_path / "x.jsonl").exists()
    # every score, or none, is written as it is
    for scores in ([0.9, 0.4], [np.nan, np.nan]):
        write_trace(s, tmp_path / "y.jsonl", retrieved=part.assign(score=scores))
        back = import_trace(tmp_path / "y.jsonl").retrieved
        assert back["note_id"].tolist() == [0, 1]
        got = back["score"].tolist() if "score" in back.columns else [np.nan, np.nan]
        assert np.array_equal(got, scores, equal_nan=True)


def test_a_generated_streams_supersession_survives_the_trace(tmp_path):
    # the planted truth of supersession (a superseding version's valid_until)
    # goes as supersedes events and comes back as superseded_at: the
    # superseded_used curves and an invalidation's score keep their truth
    from memsim.evaluation.metrics import supersession_times

    stream = SyntheticWorkload(horizon_days=20, backfill_days=40, notes_per_day=10,
                               queries_per_day=2).generate(3)
    want = supersession_times(stream.notes)
    assert np.isfinite(want).sum() > 20
    write_trace(stream, tmp_path / "t.jsonl", embeddings=True)
    back = import_trace(tmp_path / "t.jsonl")
    assert np.array_equal(supersession_times(back.notes), want, equal_nan=True)
    assert np.array_equal(back.notes["superseded_at"].to_numpy(), want, equal_nan=True)
